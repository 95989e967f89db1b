"""Cancelling a run: every kind of pending wait is abandoned and the run settles.

Each test drives one run by hand with ``tests.harness.Run`` and checks the
exact wire effects of each decision (or their idempotency keys) and the final
``settled`` status, output, error and report; ``helpers`` holds their wire forms.
"""

from __future__ import annotations

from tests.harness import Run

from .helpers import call, error, rejected, row, settled, sleep


def test_cancel_abandons_every_kind_of_pending_wait_and_settles() -> None:
    spec = """
flow: t
tools: {a: {}}
steps:
  - id: p
    parallel:
      branches:
        x: [{id: x1, call_tool: {tool: a}}]
        y: [{id: q, ask_human: {question: "ok?", options: [yes, no], timeout_ms: 100}}]
        z: [{id: w, await_signal: {signal: go}}]
        s: [{id: nap, sleep: {for_ms: 50}}]
"""
    r = Run(spec)
    assert r.wire() == [
        call("r/x1#1", "a"),
        {
            "kind": "ask-human",
            "question": "ok?",
            "options": ["yes", "no"],
            "idempotencyKey": "r/q#1",
        },
        sleep("r/q#1/timeout", 100),
        {"kind": "await-signal", "signal": "go", "idempotencyKey": "r/w#1"},
        sleep("r/nap#1", 50),
    ]
    r.cancel("enough")
    # Only work effects are reported; pending work is uncertain.
    assert r.wire() == [
        settled("cancelled", [row("r/x1#1", "uncertain")], err=error("cancelled", "enough"))
    ]
    rejected(r, lambda: r.ok("r/x1#1"))
    rejected(r, lambda: r.answer("r/q#1", "yes"))
    rejected(r, lambda: r.signal("go"))
    rejected(r, lambda: r.fire("r/nap#1"))
    rejected(r, lambda: r.cancel("again"))
