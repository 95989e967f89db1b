"""A step abandoned while it ran reads as ``cancelled`` (language.md §9.2, level 2)."""

from __future__ import annotations

from tests.harness import Run

RACE = """
flow: f
tools: {t: {class: idempotent}}
steps:
  - id: pick
    parallel:
      mode: race
      branches:
        fast: [{id: quick, call_tool: {tool: t, input: 1}}]
        slow:
          - {id: slow_call, call_tool: {tool: t, input: 2}}
          - {id: never, call_tool: {tool: t, input: 3}}
  - id: after
    call_tool:
      tool: t
      input:
        slow: "${steps.slow_call.status}"
        never: "${steps.never}"
        quick: "${steps.quick.status}"
"""


def test_a_losing_branch_s_running_step_reads_cancelled() -> None:
    run = Run(RACE)
    assert run.keys() == ["r/quick#1", "r/slow_call#1"]
    run.ok("r/quick#1", "won")
    assert run.wire() == [
        {
            "kind": "call-tool",
            "tool": "t",
            "input": {"slow": "cancelled", "never": None, "quick": "succeeded"},
            "idempotencyKey": "r/after#1",
        }
    ]
    assert run.result("slow_call") == {"status": "cancelled", "output": None}


def test_at_level_1_an_abandoned_step_reads_null() -> None:
    run = Run(RACE, semantics=1)
    run.ok("r/quick#1", "won")
    assert run.wire()[0]["input"] == {"slow": None, "never": None, "quick": "succeeded"}


def test_the_steps_of_a_timed_out_group_read_cancelled() -> None:
    run = Run(
        """
flow: f
tools: {t: {class: idempotent}}
steps:
  - id: g
    try:
      - id: inner
        try:
          - {id: a, call_tool: {tool: t}}
        timeout_ms: 100
    catch:
      - steps: [{id: h, call_tool: {tool: t, input: "${steps.a.status}"}}]
"""
    )
    run.fire("r/inner/timeout", at=100)
    assert run.wire() == [
        {"kind": "call-tool", "tool": "t", "input": "cancelled", "idempotencyKey": "r/h#1"}
    ]
