"""A tool declared ``needs_approval`` (specs/language.md, "tools"): before each
call the run asks a person an ordinary ``ask-human`` under the call's key with
``/approval``, showing the input; approved, the call is issued as always;
denied, the step fails with ``approval-denied`` (nothing is called), which a
``catch`` takes. The conformance vectors ``approval-*`` play this on every host.
"""

from __future__ import annotations

from typing import Any

import pytest

import flowcore
from flowcore import EffectSucceeded, EventRejected, HumanAnswered, TimerFired
from flowcore.testing import explore

TOOLS = """\
tools:
  refund: {class: idempotent, needs_approval: true}
  big: {needs_approval: "input.amount > `100`"}
  free: {}
"""


def start(steps: str, input: Any = None, output: str = "") -> flowcore.Decision:
    flow = flowcore.parse_flow("flow: f\n" + TOOLS + "steps:\n" + steps + output)
    return flowcore.start(flow, input, run_id="r", now_ms=0)


def wire(decision: flowcore.Decision) -> list[dict[str, Any]]:
    return [flowcore.effect_to_wire(e) for e in decision.effects]


def answer(state: flowcore.State, key: str, value: Any, at: int = 1) -> flowcore.Decision:
    return flowcore.advance(state, HumanAnswered(idempotency_key=key, answer=value, at_ms=at))


STEP = "  - {id: pay, call_tool: {tool: refund, input: {amount: '${input}'}}}\n"


def test_a_call_needing_approval_asks_first_with_the_input_shown() -> None:
    decision = start(STEP, 250)
    assert wire(decision) == [
        {
            "kind": "ask-human",
            "question": "approve the call of tool 'refund' with input {\"amount\":250}?",
            "options": ["approve", "deny"],
            "idempotencyKey": "r/pay#1/approval",
        }
    ]
    (question,) = flowcore.waiting_for(decision.state).questions
    assert (question.key, question.step) == ("r/pay#1/approval", "pay")
    info = flowcore.parse_key("r/pay#1/approval")
    assert (info.role, info.step, info.attempt) == (flowcore.KeyRole.APPROVAL, "pay", 1)


def test_approved_the_call_is_issued_under_the_steps_own_key() -> None:
    asked = start(STEP, 250, "output: '${steps.pay.output}'\n")
    approved = answer(asked.state, "r/pay#1/approval", "approve")
    assert wire(approved) == [
        {
            "kind": "call-tool",
            "tool": "refund",
            "input": {"amount": 250},
            "idempotencyKey": "r/pay#1",
        }
    ]
    done = flowcore.advance(
        approved.state, EffectSucceeded(idempotency_key="r/pay#1", output="ok", at_ms=2)
    )
    (settled,) = done.effects
    assert isinstance(settled, flowcore.Settled)
    assert (settled.status, settled.output) == ("completed", "ok")


def test_denied_the_step_fails_with_approval_denied_and_nothing_is_called() -> None:
    asked = start(STEP, 250)
    denied = answer(asked.state, "r/pay#1/approval", "deny")
    (settled,) = denied.effects
    assert isinstance(settled, flowcore.Settled) and settled.status == "failed"
    assert settled.error == flowcore.ErrorInfo(
        type="approval-denied",
        message="the call of tool 'refund' was not approved",
        details={"tool": "refund", "input": {"amount": 250}, "answer": "deny"},
    )
    assert settled.report == ()  # the tool was never called


def test_a_catch_takes_a_denial() -> None:
    steps = (
        "  - id: guarded\n"
        "    try:\n"
        "      - {id: pay, call_tool: {tool: refund, input: {amount: 5}}}\n"
        "    catch:\n"
        "      - errors: [approval-denied]\n"
        "        steps:\n"
        "          - {id: note, call_tool: {tool: free, input: '${error.details.tool}'}}\n"
    )
    asked = start(steps)
    (question,) = asked.effects
    assert isinstance(question, flowcore.AskHuman)
    denied = answer(asked.state, question.idempotency_key, "deny")
    assert wire(denied) == [
        {"kind": "call-tool", "tool": "free", "input": "refund", "idempotencyKey": "r/note#1"}
    ]


def test_an_answer_other_than_approve_or_deny_is_rejected() -> None:
    asked = start(STEP, 250)
    with pytest.raises(EventRejected, match=r"answer 'yes' is not one of \['approve', 'deny'\]"):
        answer(asked.state, "r/pay#1/approval", "yes")


def test_a_condition_on_the_input_decides_whether_to_ask() -> None:
    step = "  - {id: pay, call_tool: {tool: big, input: {amount: '${input}'}}}\n"
    assert wire(start(step, 50)) == [
        {"kind": "call-tool", "tool": "big", "input": {"amount": 50}, "idempotencyKey": "r/pay#1"}
    ]
    (asked,) = start(step, 500).effects
    assert isinstance(asked, flowcore.AskHuman)
    assert asked.idempotency_key == "r/pay#1/approval"


def test_a_condition_that_cannot_be_evaluated_fails_the_step() -> None:
    flow = flowcore.parse_flow(
        "flow: f\ntools: {t: {needs_approval: 'length(input.a) > `1`'}}\n"
        "steps:\n  - {id: s, call_tool: {tool: t, input: {a: 5}}}\n"
    )
    (settled,) = flowcore.start(flow, None, run_id="r", now_ms=0).effects
    assert isinstance(settled, flowcore.Settled) and settled.error is not None
    assert settled.error.type == "expression-error"
    assert "needs_approval of tool 't'" in settled.error.message


def test_a_step_timeout_ends_the_wait_for_approval() -> None:
    steps = "  - {id: pay, timeout_ms: 1000, call_tool: {tool: refund, input: 1}}\n"
    asked = start(steps)
    timed_out = flowcore.advance(
        asked.state, TimerFired(idempotency_key="r/pay/timeout", at_ms=1000)
    )
    (settled,) = timed_out.effects
    assert isinstance(settled, flowcore.Settled) and settled.error is not None
    assert settled.error.type == "timeout"
    assert flowcore.waiting_for(timed_out.state).questions == ()


def test_a_state_waiting_for_approval_is_saved_and_restored() -> None:
    asked = start(STEP, 250)
    restored = flowcore.decode_state(flowcore.encode_state(asked.state), asked.state.flow)
    assert flowcore.encode_state(restored) == flowcore.encode_state(asked.state)
    assert wire(answer(restored, "r/pay#1/approval", "approve")) == wire(
        answer(asked.state, "r/pay#1/approval", "approve")
    )


def test_every_ordering_of_approve_and_deny_keeps_the_invariants() -> None:
    spec = (
        "flow: f\n" + TOOLS + "steps:\n"
        "  - id: guard\n"
        "    try:\n"
        "      - {id: pay, timeout_ms: 5000, call_tool: {tool: refund, input: {amount: 5}}}\n"
        "    catch:\n"
        "      - errors: [approval-denied]\n"
        "        steps: [{id: tell, call_tool: {tool: free, input: '${error.details}'}}]\n"
    )
    found = explore(spec, None, settles_within=12)
    assert found.complete and found.violations == ()
    assert found.settled["completed"] >= 2  # approved and paid; denied and caught


def test_the_question_costs_nothing_in_the_worst_case_budget() -> None:
    spec = "flow: f\n" + TOOLS + "steps:\n" + STEP
    asking = flowcore.budget_bound(flowcore.parse_flow(spec))
    plain = flowcore.budget_bound(flowcore.parse_flow(spec.replace("needs_approval: true", "")))
    assert asking == plain and asking.steps is not None


def test_a_schedule_step_of_a_tool_needing_approval_is_warned_about() -> None:
    flow = flowcore.parse_flow(
        "flow: f\n" + TOOLS + "steps:\n"
        "  - {id: later, schedule: {tool: refund, delay_ms: 1000, outlive_run: true}}\n"
        "  - {id: now, schedule: {tool: free, delay_ms: 1000, outlive_run: true}}\n"
    )
    assert flowcore.spec_warnings(flow) == [
        flowcore.SpecWarning(
            "later",
            "steps[0]",
            "schedule step 'later': tool 'refund' needs approval, but a scheduled call is"
            " issued without asking; call it with call_tool to ask",
        )
    ]
