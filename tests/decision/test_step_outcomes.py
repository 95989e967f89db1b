"""How each step of a run ended (``flowcore.diagram.step_outcomes``): what a run's
diagram is coloured by, composite steps and waits met by a buffered signal included."""

from __future__ import annotations

from flowcore.diagram import step_outcomes
from tests.harness import Run

FLOW = """
flow: f
tools: {t: {}}
steps:
  - id: route
    switch:
      - if: "input.go"
        steps: [{id: yes, call_tool: {tool: t}}]
      - else: [{id: no, call_tool: {tool: t}}]
  - id: fan
    parallel:
      branches:
        a: [{id: left, call_tool: {tool: t}}]
        b: [{id: right, call_tool: {tool: t}}]
  - id: hold
    await_signal: {signal: go}
  - id: each
    for_each:
      items: "${input.items}"
      steps: [{id: item, call_tool: {tool: t}}]
  - id: guard
    try: [{id: risky, call_tool: {tool: t}}]
    catch: [{steps: [{id: after, call_tool: {tool: t}}]}]
  - id: last
    call_tool: {tool: t}
"""


def test_every_step_that_ended_is_named_with_how_it_ended() -> None:
    run = Run(FLOW, {"go": True, "items": [1, 2]})
    run.signal("go", {"by": "ops"})  # buffered: nothing waits for it yet
    assert step_outcomes(run.state) == {}
    run.ok("r/yes#1")
    assert step_outcomes(run.state) == {"route": "succeeded", "yes": "succeeded"}
    run.ok("r/left#1")
    run.ok("r/right#1")  # then the wait takes the buffered signal: no effect of its own
    keys = run.keys()
    assert keys == ["r/each[0]/item#1", "r/each[1]/item#1"]
    run.ok(keys[0])
    run.fail(keys[1])  # one iteration failed: the loop step's worst ending
    assert run.kinds() == ["settled"]  # the run failed at the loop
    assert run.settled is not None and run.settled.status == "failed"
    assert step_outcomes(run.state) == {
        "each": "failed",
        "fan": "succeeded",
        "hold": "succeeded",
        "item": "failed",
        "left": "succeeded",
        "right": "succeeded",
        "route": "succeeded",
        "yes": "succeeded",
    }


def test_a_caught_failure_is_failed_and_the_try_succeeded() -> None:
    run = Run(FLOW, {"go": False, "items": []})
    run.ok("r/no#1")
    run.ok("r/left#1")
    run.ok("r/right#1")
    run.signal("go")
    [risky] = run.keys()
    run.fail(risky)
    [after] = run.keys()
    run.ok(after)
    [last] = run.keys()
    run.ok(last)
    found = step_outcomes(run.state)
    assert found["risky"] == "failed" and found["after"] == "succeeded"
    assert found["guard"] == "succeeded" and found["last"] == "succeeded"
    assert "yes" not in found and found["no"] == "succeeded"
