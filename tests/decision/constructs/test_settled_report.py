"""The ``settled`` report: every work effect, in invocation order.

Each test drives one run by hand with ``tests.harness.Run`` and checks the
exact wire effects of each decision (or their idempotency keys) and the final
``settled`` status, output, error and report; ``helpers`` holds their wire forms.
"""

from __future__ import annotations

from tests.harness import Run

from .helpers import error, row, settled


def test_settled_report_lists_every_work_effect_in_invocation_order() -> None:
    spec = """
flow: t
limits: {max_concurrency: 2}
tools: {a: {}, b: {}}
steps:
  - id: first
    call_tool: {tool: a}
  - id: guard
    try: [{id: oops, call_tool: {tool: b}}]
    catch: [{steps: [{id: fine, run_agent: {agent: helper, prompt: "fix ${error.type}"}}]}]
  - id: p
    parallel:
      branches:
        x: [{id: px, call_tool: {tool: a}}]
        y: [{id: py, call_tool: {tool: b}}]
        z: [{id: pz, call_tool: {tool: a}}]
"""
    r = Run(spec)
    r.ok("r/first#1")
    r.fail("r/oops#1", "nope")
    assert r.wire() == [
        {
            "kind": "run-agent",
            "agentId": "helper",
            "prompt": "fix nope",
            "idempotencyKey": "r/fine#1",
            "budgetRemaining": {"steps": 997},
        }
    ]
    r.ok("r/fine#1")
    assert r.keys() == ["r/px#1", "r/py#1"]  # pz is held by the concurrency limit
    r.cancel("done")
    assert r.wire() == [
        settled(
            "cancelled",
            [
                row("r/first#1", "succeeded"),
                row("r/oops#1", "failed", "b"),
                row("r/fine#1", "succeeded", "helper", "run-agent"),
                row("r/px#1", "uncertain"),
                row("r/py#1", "uncertain", "b"),
                row("r/pz#1", "not-started"),
            ],
            err=error("cancelled", "done"),
        )
    ]
