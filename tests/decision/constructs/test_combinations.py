"""Constructs combined: timeouts, races, compensation, cancels and budgets nested in each other.

Each test drives one run by hand with ``tests.harness.Run`` and checks the
exact wire effects of each decision (or their idempotency keys) and the final
``settled`` status, output, error and report; ``helpers`` holds their wire forms.
"""

from __future__ import annotations

from tests.harness import Run

from .helpers import call, error, rejected, row, settled, sleep
from .test_retry import RETRY


def test_combination_timeout_inside_parallel_inside_retry() -> None:
    spec = """
flow: t
tools: {a: {}, b: {}}
steps:
  - id: outer
    retry: {max_attempts: 2, initial_interval_ms: 100, errors: [timeout]}
    parallel:
      branches:
        fast: [{id: f, call_tool: {tool: a}}]
        slow: [{id: s, call_tool: {tool: b}, timeout_ms: 1000}]
output: "${steps.outer.output}"
"""
    r = Run(spec)
    assert r.wire() == [call("r/f#1", "a"), sleep("r/s/timeout", 1000), call("r/s#1", "b")]
    r.ok("r/f#1", "F")
    assert r.wire() == []
    r.fire("r/s/timeout")
    assert r.wire() == [sleep("r/outer#1/backoff", 1100)]
    r.ok("r/s#1", "late")  # the timed-out attempt's result: accepted, ignored
    assert r.wire() == []
    r.fire("r/outer#1/backoff")
    # The second attempt's children get keys of their own.
    assert r.wire() == [
        call("r/outer#2/f#1", "a"),
        sleep("r/outer#2/s/timeout", 2100),
        call("r/outer#2/s#1", "b"),
    ]
    r.ok("r/outer#2/s#1", "S2", at=1500)
    r.ok("r/outer#2/f#1", "F2")
    assert r.wire() == [
        settled(
            "completed",
            [
                row("r/f#1", "succeeded"),
                row("r/s#1", "succeeded", "b"),
                row("r/outer#2/f#1", "succeeded"),
                row("r/outer#2/s#1", "succeeded", "b"),
            ],
            output={"fast": "F2", "slow": "S2"},
        )
    ]


def test_combination_race_whose_loser_succeeds_late() -> None:
    spec = """
flow: t
tools: {a: {}, b: {}}
steps:
  - id: r1
    parallel:
      mode: race
      branches:
        quick: [{id: q, call_tool: {tool: a}}]
        slow: [{id: s, call_tool: {tool: b}}]
  - id: next
    call_tool: {tool: a, input: "${steps.r1.output}"}
output: "${[steps.r1.output, steps.s]}"
"""
    r = Run(spec)
    r.ok("r/q#1", "Q")
    assert r.wire() == [call("r/next#1", "a", {"quick": "Q"})]
    r.ok("r/s#1", "S")
    assert r.wire() == []
    err = rejected(r, lambda: r.ok("r/s#1", "S"))
    assert err.key == "r/s#1"
    r.ok("r/next#1")
    assert r.wire() == [
        settled(
            "completed",
            [
                row("r/q#1", "succeeded"),
                row("r/s#1", "succeeded", "b"),
                row("r/next#1", "succeeded"),
            ],
            # the loser was abandoned while it ran; its late output is not recorded
            output=[{"quick": "Q"}, {"status": "cancelled", "output": None}],
        )
    ]


def test_combination_compensation_after_failure_inside_for_each() -> None:
    spec = """
flow: t
tools: {a: {}, undo: {}}
steps:
  - id: each
    for_each:
      items: "${input}"
      steps:
        - id: book
          call_tool: {tool: a, input: "${item}"}
          compensate:
            - id: unbook
              call_tool:
                tool: undo
                input: {item: "${item}", idx: "${index}", out: "${steps.book.output}"}
"""
    r = Run(spec, ["a", "b", "c"])
    assert r.keys() == ["r/each[0]/book#1", "r/each[1]/book#1", "r/each[2]/book#1"]
    r.ok("r/each[1]/book#1", "B")
    r.ok("r/each[0]/book#1", "A")
    r.fail("r/each[2]/book#1", "full")
    # Reverse completion order: [0] completed last, so it is undone first; each
    # compensation sees its own iteration's variables and results.
    assert r.wire() == [call("r/each[0]/unbook#1", "undo", {"item": "a", "idx": 0, "out": "A"})]
    r.ok("r/each[0]/unbook#1")
    assert r.wire() == [call("r/each[1]/unbook#1", "undo", {"item": "b", "idx": 1, "out": "B"})]
    r.ok("r/each[1]/unbook#1")
    assert r.wire() == [
        settled(
            "failed",
            [
                row("r/each[0]/book#1", "succeeded"),
                row("r/each[1]/book#1", "succeeded"),
                row("r/each[2]/book#1", "failed"),
                row("r/each[0]/unbook#1", "succeeded", "undo"),
                row("r/each[1]/unbook#1", "succeeded", "undo"),
            ],
            err=error("full", "full happened"),
        )
    ]


def test_combination_cancel_during_backoff() -> None:
    spec = """
flow: t
tools: {a: {}, undo: {}}
steps:
  - id: setup
    call_tool: {tool: a}
    compensate: [{id: teardown, call_tool: {tool: undo}}]
  - id: flaky
    call_tool: {tool: a}
    retry: {max_attempts: 3, initial_interval_ms: 1000}
"""
    r = Run(spec)
    r.ok("r/setup#1", at=0)
    r.fail("r/flaky#1", "x", retryable=True, at=10)
    assert r.wire() == [sleep("r/flaky#1/backoff", 1010)]
    r.cancel("bye", at=20)
    assert r.wire() == [call("r/teardown#1", "undo")]
    r.fire("r/flaky#1/backoff")  # the abandoned backoff timer: accepted, no new attempt
    assert r.wire() == []
    r.ok("r/teardown#1")
    assert r.wire() == [
        settled(
            "cancelled",
            [
                row("r/setup#1", "succeeded"),
                row("r/flaky#1", "failed"),
                row("r/teardown#1", "succeeded", "undo"),
            ],
            err=error("cancelled", "bye"),
        )
    ]
    rejected(r, lambda: r.fire("r/flaky#1/backoff"))


def test_combination_cancel_during_backoff_settles_at_once_without_compensations() -> None:
    r = Run(RETRY % "{max_attempts: 3, initial_interval_ms: 1000}")
    r.fail("r/flaky#1", "x", retryable=True, at=0)
    assert r.keys() == ["r/flaky#1/backoff"]
    r.cancel("bye")
    assert r.wire() == [
        settled("cancelled", [row("r/flaky#1", "failed")], err=error("cancelled", "bye"))
    ]
    rejected(r, lambda: r.fire("r/flaky#1/backoff"))


def test_combination_budget_exhausted_in_the_middle_of_a_parallel() -> None:
    spec = """
flow: t
budget: {steps: 4}
tools: {a: {}}
steps:
  - id: p
    parallel:
      branches:
        x:
          - {id: x1, call_tool: {tool: a}}
          - {id: x2, call_tool: {tool: a}}
          - {id: x3, call_tool: {tool: a}}
        y: [{id: y1, call_tool: {tool: a}}, {id: y2, call_tool: {tool: a}}]
"""
    r = Run(spec)
    assert r.keys() == ["r/x1#1", "r/y1#1"]
    r.ok("r/x1#1")
    assert r.keys() == ["r/x2#1"]
    r.ok("r/y1#1")
    assert r.keys() == ["r/y2#1"]  # the fourth and last step of the budget
    r.ok("r/x2#1")  # x3 would be the fifth
    assert r.wire() == [
        settled(
            "budget-exhausted",
            [
                row("r/x1#1", "succeeded"),
                row("r/y1#1", "succeeded"),
                row("r/x2#1", "succeeded"),
                row("r/y2#1", "uncertain"),
            ],
            err=error("budget-exhausted", "step budget exhausted"),
            exhausted="steps",
        )
    ]
    assert r.settled is not None
    assert r.settled.exhausted == "steps"
    rejected(r, lambda: r.ok("r/y2#1"))


def test_combination_budget_exhausted_decision_holds_only_settled() -> None:
    spec = """
flow: t
budget: {steps: 4}
tools: {a: {}}
steps:
  - id: first
    call_tool: {tool: a}
  - id: p
    parallel:
      branches:
        x: [{id: x1, call_tool: {tool: a}, timeout_ms: 500}]
        y: [{id: y1, call_tool: {tool: a}}]
        z: [{id: z1, call_tool: {tool: a}}]
        w: [{id: w1, call_tool: {tool: a}}]
"""
    r = Run(spec)
    assert r.keys() == ["r/first#1"]
    r.ok("r/first#1")
    # x1, y1 and z1 fit the budget but w1 does not: the decision holds only
    # `settled`, the timer and calls emitted before it never reach the host.
    assert r.wire() == [
        settled(
            "budget-exhausted",
            [
                row("r/first#1", "succeeded"),
                row("r/x1#1", "not-started"),
                row("r/y1#1", "not-started"),
                row("r/z1#1", "not-started"),
            ],
            err=error("budget-exhausted", "step budget exhausted"),
            exhausted="steps",
        )
    ]
