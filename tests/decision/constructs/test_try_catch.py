"""``try`` / ``catch``: by error type, ``*``, propagation, and what is never caught.

Each test drives one run by hand with ``tests.harness.Run`` and checks the
exact wire effects of each decision (or their idempotency keys) and the final
``settled`` status, output, error and report; ``helpers`` holds their wire forms.
"""

from __future__ import annotations

from flowcore import Usage
from tests.harness import Run

from .helpers import call, error, row, settled

TRY = """
flow: t
budget: {steps: %d}
tools: {a: {}, b: {}}
steps:
  - id: guard
    try:
      - id: risky
        call_tool: {tool: a}
      - id: risky2
        call_tool: {tool: a}
    catch:
      - errors: [bad, worse]
        steps: [{id: h1, call_tool: {tool: b, input: "first ${error.type}: ${error.message}"}}]
      - errors: ['*']
        steps: [{id: h2, call_tool: {tool: b, input: "${error}"}}]
  - id: after
    call_tool: {tool: a, input: "${steps.guard}"}
"""


def test_try_catch_by_type_error_visible_in_catch_steps() -> None:
    r = Run(TRY % 100)
    r.fail("r/risky#1", "worse")
    assert r.wire() == [call("r/h1#1", "b", "first worse: worse happened")]
    r.ok("r/h1#1", "H1")
    # The try step succeeds with the catch list's output.
    assert r.wire() == [call("r/after#1", "a", {"status": "succeeded", "output": "H1"})]
    r.ok("r/after#1")
    assert r.report() == {
        "r/risky#1": "failed",
        "r/h1#1": "succeeded",
        "r/after#1": "succeeded",
    }


def test_try_catch_star_catches_other_types() -> None:
    r = Run(TRY % 100)
    r.ok("r/risky#1")
    r.fail("r/risky2#1", "odd", retryable=True)
    assert r.wire() == [
        call("r/h2#1", "b", {"type": "odd", "message": "odd happened", "retryable": True})
    ]


def test_try_catch_uncaught_type_propagates() -> None:
    spec = """
flow: t
tools: {a: {}, b: {}}
steps:
  - id: guard
    try:
      - id: risky
        call_tool: {tool: a}
    catch:
      - errors: [bad]
        steps: [{id: h1, call_tool: {tool: b}}]
  - id: after
    call_tool: {tool: a}
"""
    r = Run(spec)
    r.fail("r/risky#1", "other")
    assert r.wire() == [
        settled("failed", [row("r/risky#1", "failed")], err=error("other", "other happened"))
    ]


def test_try_catch_failure_inside_the_handler_propagates() -> None:
    spec = """
flow: t
tools: {a: {}, b: {}}
steps:
  - id: guard
    try:
      - id: risky
        call_tool: {tool: a}
    catch:
      - errors: [bad]
        steps: [{id: h1, call_tool: {tool: b}}]
"""
    r = Run(spec)
    r.fail("r/risky#1", "bad")
    assert r.keys() == ["r/h1#1"]
    r.fail("r/h1#1", "bad")  # not caught again by the same try
    assert r.wire() == [
        settled(
            "failed",
            [row("r/risky#1", "failed"), row("r/h1#1", "failed", "b")],
            err=error("bad", "bad happened"),
        )
    ]


def test_try_error_visible_in_nested_steps_of_the_catch() -> None:
    spec = """
flow: t
tools: {a: {}, b: {}}
steps:
  - id: each
    for_each:
      items: [1, 2]
      steps:
        - id: guard
          try:
            - {id: risky, call_tool: {tool: a, input: "${item}"}}
          catch:
            - steps:
                - id: sw
                  switch:
                    - if: "error.type == 'bad'"
                      steps: [{id: h, call_tool: {tool: b, input: "${error.type} ${item}"}}]
output: "${steps.each.output}"
"""
    r = Run(spec)
    r.fail("r/each[1]/risky#1", "bad")
    assert r.wire() == [call("r/each[1]/h#1", "b", "bad 2")]
    r.fail("r/each[0]/risky#1", "meh")  # caught; the switch inside matches nothing
    assert r.wire() == []
    r.ok("r/each[1]/h#1", "H")
    assert r.settled is not None
    assert r.settled.output == [None, "H"]


def test_try_budget_exhaustion_is_not_catchable() -> None:
    r = Run(TRY % 100)
    r.ok("r/risky#1", usage=Usage(steps=200))
    assert r.wire() == [
        settled(
            "budget-exhausted",
            [row("r/risky#1", "succeeded")],
            err=error("budget-exhausted", "step budget exhausted"),
            exhausted="steps",
        )
    ]


def test_try_budget_exhaustion_on_issue_is_not_catchable() -> None:
    r = Run(TRY % 1)
    r.ok("r/risky#1")  # issuing risky2 would be the second step of a one-step budget
    assert r.wire() == [
        settled(
            "budget-exhausted",
            [row("r/risky#1", "succeeded")],
            err=error("budget-exhausted", "step budget exhausted"),
            exhausted="steps",
        )
    ]


def test_try_cancellation_is_not_catchable() -> None:
    r = Run(TRY % 100)
    r.cancel("user")
    assert r.wire() == [
        settled("cancelled", [row("r/risky#1", "uncertain")], err=error("cancelled", "user"))
    ]
