"""A tool's declared input_schema and output_schema (specs/language.md, "Tool schemas").

A literal input is checked when the spec is parsed, with its location; an
evaluated one before the call is issued (``invalid-input``, the tool is never
called); the output when it is reported (``invalid-output``). The
conformance vector ``tool-schemas`` plays the run-time checks on every host.
"""

from __future__ import annotations

from typing import Any

import pytest

import flowcore
from flowcore import EffectSucceeded, EventRejected, ScheduledAddRequested

TOOLS = """\
tools:
  lookup:
    class: readonly
    schedulable: true
    input_schema:
      type: object
      required: [id]
      properties: {id: {type: string}}
      additionalProperties: false
    output_schema: {type: object, required: [name]}
"""


def problems(spec: str) -> list[str]:
    with pytest.raises(flowcore.SpecError) as caught:
        flowcore.parse_flow(spec, "t.yaml")
    return [str(p) for p in caught.value.problems]


def test_a_literal_input_is_checked_where_the_spec_writes_it() -> None:
    found = problems(
        "flow: f\n" + TOOLS + "steps:\n"
        "  - {id: a, call_tool: {tool: lookup, input: {id: 3}}}\n"
        "  - {id: b, schedule: {tool: lookup, input: {idd: x}, delay_ms: 5}}\n"
    )
    assert found == [
        "t.yaml:13:39 (steps[0].call_tool.input): input of tool 'lookup' at $.id:"
        " expected a string, got 3",
        "t.yaml:14:38 (steps[1].schedule.input): input of tool 'lookup' at $:"
        ' missing required property "id"',
        "t.yaml:14:38 (steps[1].schedule.input): input of tool 'lookup' at $:"
        ' additional property "idd" is not allowed',
    ]


def test_an_evaluated_input_is_not_checked_at_parse_time() -> None:
    flow = flowcore.parse_flow(
        "flow: f\n" + TOOLS + "steps:\n"
        "  - {id: a, call_tool: {tool: lookup, input: {id: '${input.id}'}}}\n"
    )
    assert flow.tools["lookup"].input_schema is not None


def test_a_schema_that_is_not_one_is_refused_with_its_place() -> None:
    found = problems(
        "flow: f\ntools:\n  t:\n    output_schema: {type: nope}\n"
        "    input_schema: [not, a, mapping]\n"
        "steps:\n  - {id: a, call_tool: {tool: t}}\n"
    )
    assert any("tools.t.output_schema.type" in p and "invalid JSON Schema" in p for p in found)
    assert any("tools.t.input_schema" in p and "expected a JSON Schema mapping" in p for p in found)


def run(input: Any, extra: str = "") -> flowcore.Decision:
    flow = flowcore.parse_flow(
        "flow: f\n" + TOOLS + "steps:\n"
        "  - {id: a, call_tool: {tool: lookup, input: '${input}'}}\n" + extra
    )
    return flowcore.start(flow, input, run_id="r", now_ms=0)


def test_an_evaluated_input_that_fails_fails_the_step_without_a_call() -> None:
    decision = run({"id": 7, "more": True})
    (settled,) = decision.effects
    assert isinstance(settled, flowcore.Settled) and settled.status == "failed"
    assert settled.error == flowcore.ErrorInfo(
        type="invalid-input",
        message="input of tool 'lookup' at $: additional property \"more\" is not allowed;"
        " $.id: expected a string, got 7",
    )
    assert settled.report == ()  # the tool was never called


def test_an_output_that_fails_its_schema_fails_the_step() -> None:
    decision = run({"id": "x"})
    (call,) = decision.effects
    assert isinstance(call, flowcore.CallTool)
    key = call.idempotency_key
    done = flowcore.advance(
        decision.state, EffectSucceeded(idempotency_key=key, output={"nom": 1}, at_ms=1)
    )
    (settled,) = done.effects
    assert isinstance(settled, flowcore.Settled)
    assert settled.error is not None and settled.error.type == "invalid-output"
    ok = flowcore.advance(
        decision.state, EffectSucceeded(idempotency_key=key, output={"name": 1}, at_ms=1)
    )
    assert isinstance(ok.effects[0], flowcore.Settled) and ok.effects[0].status == "completed"


def test_a_call_scheduled_from_outside_is_refused_with_a_bad_input() -> None:
    decision = run({"id": "x"}, "  - {id: b, sleep: {for_ms: 100000}}\n")
    with pytest.raises(EventRejected, match=r"input of tool 'lookup' at \$\.id"):
        flowcore.advance(
            decision.state, ScheduledAddRequested(tool="lookup", input={"id": 1}, at_ms=1)
        )
    accepted = flowcore.advance(
        decision.state, ScheduledAddRequested(tool="lookup", input={"id": "y"}, at_ms=1)
    )
    assert accepted.scheduled is not None and accepted.scheduled.done


def test_a_schedule_step_with_a_bad_evaluated_input_fails_that_call_and_the_run_goes_on() -> None:
    flow = flowcore.parse_flow(
        "flow: f\n" + TOOLS + "steps:\n"
        "  - id: s\n"
        "    schedule: {tool: lookup, input: {id: '${input}'}, delay_ms: 5, outlive_run: true}\n"
        "  - {id: after, call_tool: {tool: lookup, input: {id: x}}}\n"
        "output: '${steps.s.output}'\n"
    )
    decision = flowcore.start(flow, 5, run_id="r", now_ms=0)
    # Nothing fires: no delay timer, and the next step runs at once.
    assert [flowcore.effect_to_wire(e) for e in decision.effects] == [
        {"kind": "call-tool", "tool": "lookup", "input": {"id": "x"}, "idempotencyKey": "r/after#1"}
    ]
    (call,) = flowcore.scheduled_calls(decision.state)
    assert (call.id, call.status, call.finished_ms) == ("r/s#1", "failed", 0)
    assert call.error is not None and call.error.type == "invalid-input"
    assert call.error.message == "input of tool 'lookup' at $.id: expected a string, got 5"
    assert call.attempts == 0  # never issued
    done = flowcore.advance(
        decision.state, EffectSucceeded(idempotency_key="r/after#1", output={"name": "n"}, at_ms=1)
    )
    (settled,) = done.effects  # an outliving call that failed is not waited for
    assert isinstance(settled, flowcore.Settled)
    assert (settled.status, settled.output) == ("completed", "r/s#1")
    assert [r.idempotency_key for r in settled.report] == ["r/after#1"]
