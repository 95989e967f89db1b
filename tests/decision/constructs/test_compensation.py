"""``compensate``: run in reverse completion order on failure and on cancel, never on success.

Each test drives one run by hand with ``tests.harness.Run`` and checks the
exact wire effects of each decision (or their idempotency keys) and the final
``settled`` status, output, error and report; ``helpers`` holds their wire forms.
"""

from __future__ import annotations

from tests.harness import Run

from .helpers import call, error, row, settled

SAGA = """
flow: t
tools: {book: {}, undo: {}, pay: {}}
steps:
  - id: hotel
    call_tool: {tool: book, input: hotel}
    compensate: [{id: undo_hotel, call_tool: {tool: undo, input: "${steps.hotel.output}"}}]
  - id: flight
    call_tool: {tool: book, input: flight}
    compensate: [{id: undo_flight, call_tool: {tool: undo, input: "${steps.flight.output}"}}]
  - id: car
    call_tool: {tool: book, input: car}
  - id: charge
    call_tool: {tool: pay}
output: "ok"
"""


def test_compensate_on_failure_in_reverse_order_before_settling() -> None:
    r = Run(SAGA)
    r.ok("r/hotel#1", "H")
    r.ok("r/flight#1", "F")
    r.ok("r/car#1", "C")
    r.fail("r/charge#1", "declined")
    assert r.wire() == [call("r/undo_flight#1", "undo", "F")]
    r.ok("r/undo_flight#1")
    assert r.wire() == [call("r/undo_hotel#1", "undo", "H")]
    r.ok("r/undo_hotel#1")
    assert r.wire() == [
        settled(
            "failed",
            [
                row("r/hotel#1", "succeeded", "book"),
                row("r/flight#1", "succeeded", "book"),
                row("r/car#1", "succeeded", "book"),
                row("r/charge#1", "failed", "pay"),
                row("r/undo_flight#1", "succeeded", "undo"),
                row("r/undo_hotel#1", "succeeded", "undo"),
            ],
            err=error("declined", "declined happened"),
        )
    ]


def test_compensate_on_cancel_and_pending_work_abandoned() -> None:
    r = Run(SAGA)
    r.ok("r/hotel#1", "H")
    r.ok("r/flight#1", "F")
    r.cancel("stop")
    assert r.wire() == [call("r/undo_flight#1", "undo", "F")]
    r.ok("r/undo_flight#1")
    assert r.wire() == [call("r/undo_hotel#1", "undo", "H")]
    r.ok("r/undo_hotel#1")
    assert r.wire() == [
        settled(
            "cancelled",
            [
                row("r/hotel#1", "succeeded", "book"),
                row("r/flight#1", "succeeded", "book"),
                row("r/car#1", "uncertain", "book"),
                row("r/undo_flight#1", "succeeded", "undo"),
                row("r/undo_hotel#1", "succeeded", "undo"),
            ],
            err=error("cancelled", "stop"),
        )
    ]


def test_compensate_not_run_on_success() -> None:
    r = Run(SAGA)
    for key in ("r/hotel#1", "r/flight#1", "r/car#1"):
        r.ok(key)
    r.ok("r/charge#1")
    assert r.wire() == [
        settled(
            "completed",
            [
                row("r/hotel#1", "succeeded", "book"),
                row("r/flight#1", "succeeded", "book"),
                row("r/car#1", "succeeded", "book"),
                row("r/charge#1", "succeeded", "pay"),
            ],
            output="ok",
        )
    ]


def test_compensate_follows_completion_order_not_declaration_order() -> None:
    spec = """
flow: t
tools: {book: {}, undo: {}, pay: {}}
steps:
  - id: p
    parallel:
      branches:
        a: [{id: A, call_tool: {tool: book}, compensate: [{id: undo_a, call_tool: {tool: undo}}]}]
        b: [{id: B, call_tool: {tool: book}, compensate: [{id: undo_b, call_tool: {tool: undo}}]}]
  - id: charge
    call_tool: {tool: pay}
"""
    r = Run(spec)
    r.ok("r/B#1")
    r.ok("r/A#1")  # A completed last: it is compensated first
    r.fail("r/charge#1", "declined")
    assert r.wire() == [call("r/undo_a#1", "undo")]
    r.fail("r/undo_a#1", "stuck")  # a failed compensation does not stop the others
    assert r.wire() == [call("r/undo_b#1", "undo")]
    r.ok("r/undo_b#1")
    assert r.wire() == [
        settled(
            "failed",
            [
                row("r/A#1", "succeeded", "book"),
                row("r/B#1", "succeeded", "book"),
                row("r/charge#1", "failed", "pay"),
                row("r/undo_a#1", "failed", "undo"),
                row("r/undo_b#1", "succeeded", "undo"),
            ],
            err=error("declined", "declined happened"),  # the original error
        )
    ]
