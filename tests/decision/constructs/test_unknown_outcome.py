"""``outcome-unknown``: safe tools reissued under the same key, uncertain ones failed.

Each test drives one run by hand with ``tests.harness.Run`` and checks the
exact wire effects of each decision (or their idempotency keys) and the final
``settled`` status, output, error and report; ``helpers`` holds their wire forms.
"""

from __future__ import annotations

import pytest

from tests.harness import Run

from .helpers import call, error, row, settled

UNKNOWN = """
flow: t
tools:
  ro: {class: readonly}
  idem: {class: idempotent}
  unc: {class: uncertain}
  plain: {}
  fix: {}
steps:
  - id: guard
    try:
      - id: s
        call_tool: {tool: %s, input: {x: 1}}
    catch:
      - errors: [outcome-unknown]
        steps: [{id: reconcile, call_tool: {tool: fix, input: "${error.type}"}}]
output: "${steps.guard.output}"
"""


@pytest.mark.parametrize("tool", ["ro", "idem"])
def test_unknown_outcome_reissues_safe_tools_with_the_same_key(tool: str) -> None:
    r = Run(UNKNOWN % tool)
    assert r.wire() == [call("r/s#1", tool, {"x": 1})]
    r.unknown("r/s#1")
    assert r.wire() == [call("r/s#1", tool, {"x": 1})]  # same key: the tool deduplicates
    r.ok("r/s#1", "fine")
    assert r.wire() == [settled("completed", [row("r/s#1", "succeeded", tool)], output="fine")]


@pytest.mark.parametrize("tool", ["ro", "idem"])
def test_unknown_outcome_reissue_is_bounded_then_outcome_unknown(tool: str) -> None:
    r = Run(UNKNOWN % tool)
    r.unknown("r/s#1")
    assert r.keys() == ["r/s#1"]
    r.unknown("r/s#1")
    assert r.keys() == ["r/s#1"]  # three issues in all (DEFAULT_UNKNOWN_REISSUES)
    r.unknown("r/s#1")
    assert r.wire() == [call("r/reconcile#1", "fix", "outcome-unknown")]
    r.ok("r/reconcile#1", "R")
    assert r.wire() == [
        settled(
            "completed",
            [row("r/s#1", "uncertain", tool), row("r/reconcile#1", "succeeded", "fix")],
            output="R",
        )
    ]


@pytest.mark.parametrize("tool", ["unc", "plain"])
def test_unknown_outcome_uncertain_tool_fails_and_is_catchable(tool: str) -> None:
    r = Run(UNKNOWN % tool)
    r.unknown("r/s#1")
    assert r.wire() == [call("r/reconcile#1", "fix", "outcome-unknown")]
    r.ok("r/reconcile#1", "R")
    assert r.wire() == [
        settled(
            "completed",
            [row("r/s#1", "uncertain", tool), row("r/reconcile#1", "succeeded", "fix")],
            output="R",
        )
    ]


def test_unknown_outcome_uncaught_fails_the_run() -> None:
    spec = """
flow: t
tools: {pay: {}}
steps:
  - id: charge
    call_tool: {tool: pay}
"""
    r = Run(spec)
    r.unknown("r/charge#1")
    assert r.wire() == [
        settled(
            "failed",
            [row("r/charge#1", "uncertain", "pay")],
            err=error(
                "outcome-unknown",
                "call-tool r/charge#1 may or may not have happened and is not safe to repeat",
            ),
        )
    ]
