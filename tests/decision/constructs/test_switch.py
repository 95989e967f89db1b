"""``switch``: the first matching case wins, ``else``, and no match at all.

Each test drives one run by hand with ``tests.harness.Run`` and checks the
exact wire effects of each decision (or their idempotency keys) and the final
``settled`` status, output, error and report; ``helpers`` holds their wire forms.
"""

from __future__ import annotations

from tests.harness import Run

from .helpers import call, row, settled

SWITCH = """
flow: t
tools: {a: {}, b: {}, c: {}}
steps:
  - id: pick
    switch:
      - if: "input.n > `5`"
        steps: [{id: big, call_tool: {tool: a, input: {n: "${input.n}"}}}]
      - if: "input.n > `1`"
        steps: [{id: mid, call_tool: {tool: b}}]
      - else: [{id: small, call_tool: {tool: c}}]
  - id: after
    call_tool: {tool: a, input: "${steps.pick.output}"}
output: "${steps.pick.output}"
"""


def test_switch_first_matching_case_wins() -> None:
    # n = 9 satisfies both conditions: only the first case runs.
    r = Run(SWITCH, {"n": 9})
    assert r.wire() == [call("r/big#1", "a", {"n": 9})]
    r.ok("r/big#1", "BIG")
    assert r.wire() == [call("r/after#1", "a", "BIG")]
    r.ok("r/after#1")
    assert r.wire() == [
        settled(
            "completed",
            [row("r/big#1", "succeeded"), row("r/after#1", "succeeded")],
            output="BIG",
        )
    ]


def test_switch_later_case_when_earlier_ones_do_not_match() -> None:
    r = Run(SWITCH, {"n": 3})
    assert r.wire() == [call("r/mid#1", "b")]
    r.ok("r/mid#1", "MID")
    assert r.wire() == [call("r/after#1", "a", "MID")]
    r.ok("r/after#1")
    assert r.settled is not None
    assert r.settled.status == "completed"
    assert r.settled.output == "MID"
    assert r.report() == {"r/mid#1": "succeeded", "r/after#1": "succeeded"}


def test_switch_else_runs_when_nothing_matches() -> None:
    r = Run(SWITCH, {"n": 0})
    assert r.wire() == [call("r/small#1", "c")]
    r.ok("r/small#1", "SMALL")
    assert r.wire() == [call("r/after#1", "a", "SMALL")]


def test_switch_without_match_outputs_null_and_flow_continues() -> None:
    spec = """
flow: t
tools: {a: {}}
steps:
  - id: pick
    switch:
      - if: "input.n > `5`"
        steps: [{id: big, call_tool: {tool: a}}]
  - id: after
    call_tool: {tool: a, input: "${steps.pick}"}
output: "${steps.pick}"
"""
    r = Run(spec, {"n": 0})
    # The switch ended at once; the next step sees it succeeded with a null output.
    assert r.wire() == [call("r/after#1", "a", {"status": "succeeded", "output": None})]
    r.ok("r/after#1")
    assert r.wire() == [
        settled(
            "completed",
            [row("r/after#1", "succeeded")],
            output={"status": "succeeded", "output": None},
        )
    ]
