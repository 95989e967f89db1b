"""Cancellation types of work steps (language.md §9.2): try_cancel, wait_cancellation_completed
and abandon, per step and as the flow's default, in the core and its driver."""

from __future__ import annotations

from typing import Any

import pytest

import flowcore
from flowcore import (
    CancelRequested,
    EffectFailed,
    EffectOutcomeUnknown,
    EffectSucceeded,
    ErrorInfo,
    EventRejected,
    TimerFired,
    Usage,
)
from flowcore.decision.state import PendingKind
from flowcore.testing import Hang, Simulator

from .test_transitions import check_tables

CANCELLED = ErrorInfo(type="cancelled", message="stopped when cancelled")


def timed(mode: str | None, default: str | None = None, retry: str = "") -> flowcore.Flow:
    """A call with a timeout of ``mode`` (caught), then another call."""
    own = f"\n        cancellation: {mode}" if mode else ""
    top = f"defaults: {{cancellation: {default}}}\n" if default else ""
    return flowcore.parse_flow(
        f"""
flow: timed
{top}tools: {{slow: {{class: readonly}}, fast: {{class: readonly}}}}
steps:
  - id: guard
    try:
      - id: call
        call_tool: {{tool: slow}}
        timeout_ms: 1000{own}{retry}
    catch:
      - errors: [timeout]
        steps: []
  - id: next
    call_tool: {{tool: fast}}
output: "${{ {{error: steps.call.error.type, status: steps.call.status}} }}"
"""
    )


def wires(d: flowcore.Decision) -> list[dict[str, Any]]:
    return [flowcore.effect_to_wire(e) for e in d.effects]


def fire(state: flowcore.State, key: str, at: int) -> flowcore.Decision:
    return flowcore.advance(state, TimerFired(idempotency_key=key, at_ms=at))


def test_the_default_is_try_cancel_and_leaves_the_effect_as_before() -> None:
    for flow in (timed(None), timed("try_cancel"), timed(None, default="try_cancel")):
        d = flowcore.start(flow, run_id="r")
        assert wires(d)[1] == {"kind": "call-tool", "tool": "slow", "idempotencyKey": "r/call#1"}
        d = fire(d.state, "r/call/timeout", 1000)
        plan = flowcore.plan(d)
        assert plan.cancel == ("r/call#1",) and plan.detach == ()
        assert [e["idempotencyKey"] for e in wires(d)] == ["r/next#1"]


def test_the_step_and_the_flow_default_say_it_on_the_effect() -> None:
    for flow, wire in (
        (timed("abandon"), "abandon"),
        (timed(None, default="abandon"), "abandon"),
        (timed("wait_cancellation_completed", default="abandon"), "wait-cancellation-completed"),
    ):
        d = flowcore.start(flow, run_id="r")
        assert wires(d)[1]["cancellation"] == wire


def test_abandon_detaches_the_call_and_ignores_its_late_result() -> None:
    d = flowcore.start(timed("abandon"), run_id="r")
    d = fire(d.state, "r/call/timeout", 1000)
    plan = flowcore.plan(d)
    assert plan.cancel == () and plan.detach == ("r/call#1",)
    assert [e["idempotencyKey"] for e in wires(d)] == ["r/next#1"]
    late = EffectSucceeded(
        idempotency_key="r/call#1", output="late", usage=Usage(cost_minor_units=3), at_ms=1500
    )
    d2 = flowcore.advance(d.state, late)
    assert d2.effects == () and d2.state.ledger.used_cost == 3
    with pytest.raises(EventRejected):
        flowcore.advance(d2.state, late)
    d3 = flowcore.advance(d2.state, EffectSucceeded(idempotency_key="r/next#1", at_ms=1600))
    settled = d3.effects[0]
    assert isinstance(settled, flowcore.Settled)
    assert settled.output == {"error": "timeout", "status": "failed"}
    assert [(r.idempotency_key, r.status) for r in settled.report] == [
        ("r/call#1", "succeeded"),
        ("r/next#1", "succeeded"),
    ]


@pytest.mark.parametrize(
    ("ack", "status"),
    [
        (EffectFailed(idempotency_key="r/call#1", error=CANCELLED, at_ms=1400), "failed"),
        (EffectSucceeded(idempotency_key="r/call#1", output="done", at_ms=1400), "succeeded"),
        (EffectOutcomeUnknown(idempotency_key="r/call#1", at_ms=1400), "uncertain"),
    ],
)
def test_wait_ends_the_step_only_when_the_cancelled_call_has_ended(
    ack: flowcore.Event, status: str
) -> None:
    d = flowcore.start(timed("wait_cancellation_completed"), run_id="r")
    d = fire(d.state, "r/call/timeout", 1000)
    assert d.effects == ()  # the step has not ended: nothing after it starts
    plan = flowcore.plan(d)
    assert plan.cancel == ("r/call#1",) and plan.detach == ()
    entry = d.state.waiting.pending["r/call#1"]
    assert entry.kind is PendingKind.CANCELLING
    assert [w.key for w in flowcore.waiting_for(d.state).work] == ["r/call#1"]
    assert check_tables(d.state) >= {("effect-failed", PendingKind.CANCELLING)}
    d = flowcore.advance(d.state, ack)
    assert [e["idempotencyKey"] for e in wires(d)] == ["r/next#1"]
    assert flowcore.plan(d).cancel == ()  # answered: nothing more to stop
    d = flowcore.advance(d.state, EffectSucceeded(idempotency_key="r/next#1", at_ms=1500))
    settled = d.effects[0]
    assert isinstance(settled, flowcore.Settled)
    assert settled.output == {"error": "timeout", "status": "failed"}  # the timeout stands
    assert settled.report[0].status == status
    with pytest.raises(EventRejected):  # acknowledged once
        flowcore.advance(d.state, ack)


def test_wait_retries_only_after_the_cancelled_attempt_has_ended() -> None:
    retry = (
        "\n        attempt_timeout_ms: 300"
        "\n        retry: {max_attempts: 2, initial_interval_ms: 0}"
    )
    d = flowcore.start(timed("wait_cancellation_completed", retry=retry), run_id="r")
    d = fire(d.state, "r/call#1/attempt-timeout", 300)
    assert d.effects == () and flowcore.plan(d).cancel == ("r/call#1",)
    failed = EffectFailed(idempotency_key="r/call#1", error=CANCELLED, at_ms=400)
    d = flowcore.advance(d.state, failed)
    assert [e["idempotencyKey"] for e in wires(d)] == [
        "r/call#2/attempt-timeout",
        "r/call#2",
    ]


def race(mode: str) -> flowcore.Flow:
    return flowcore.parse_flow(
        f"""
flow: race
defaults: {{cancellation: {mode}}}
tools: {{a: {{class: readonly}}, b: {{class: readonly}}, c: {{class: readonly}}}}
steps:
  - id: fan
    parallel:
      mode: race
      branches:
        left: [{{id: l, call_tool: {{tool: a}}}}]
        right: [{{id: r, call_tool: {{tool: b}}}}]
  - id: after
    call_tool: {{tool: c}}
output: "${{steps.fan.output}}"
"""
    )


def test_a_race_waits_for_its_losers_to_end() -> None:
    d = flowcore.start(race("wait_cancellation_completed"), run_id="r")
    d = flowcore.advance(d.state, EffectSucceeded(idempotency_key="r/r#1", output=2, at_ms=5))
    assert d.effects == () and flowcore.plan(d).cancel == ("r/l#1",)
    d = flowcore.advance(d.state, EffectFailed(idempotency_key="r/l#1", error=CANCELLED, at_ms=7))
    assert [e["idempotencyKey"] for e in wires(d)] == ["r/after#1"]
    d = flowcore.advance(d.state, EffectSucceeded(idempotency_key="r/after#1", at_ms=8))
    assert d.state.status == "completed" and d.effects[0].output == {"right": 2}  # type: ignore[union-attr]


def test_a_race_leaves_abandoned_losers_running() -> None:
    d = flowcore.start(race("abandon"), run_id="r")
    d = flowcore.advance(d.state, EffectSucceeded(idempotency_key="r/r#1", output=2, at_ms=5))
    plan = flowcore.plan(d)
    assert plan.cancel == () and plan.detach == ("r/l#1",)
    assert [e["idempotencyKey"] for e in wires(d)] == ["r/after#1"]


def test_a_cancelled_run_settles_once_its_calls_have_ended() -> None:
    d = flowcore.start(race("wait_cancellation_completed"), run_id="r")
    d = flowcore.advance(d.state, CancelRequested(reason="stop", at_ms=3))
    assert d.effects == () and flowcore.plan(d).cancel == ("r/l#1", "r/r#1")
    d = flowcore.advance(d.state, EffectSucceeded(idempotency_key="r/l#1", at_ms=4))
    assert d.effects == () and d.state.status == "running"
    d = flowcore.advance(d.state, EffectFailed(idempotency_key="r/r#1", error=CANCELLED, at_ms=5))
    assert d.state.status == "cancelled"


def test_a_spec_says_where_cancellation_is_wrong() -> None:
    with pytest.raises(flowcore.SpecError) as caught:
        flowcore.parse_flow(
            """
flow: bad
defaults: {cancellation: abandn}
tools: {t: {}}
steps:
  - {id: a, call_tool: {tool: t}, cancellation: wait}
  - {id: b, sleep: {for_ms: 5}, cancellation: abandon}
"""
        )
    text = str(caught.value)
    assert "(defaults.cancellation): 'abandn' is not one of" in text
    assert "did you mean 'abandon'?" in text
    assert "(steps[0].cancellation): 'wait' is not one of" in text
    assert "(steps[1].cancellation): cancellation is only allowed on call_tool" in text


def test_on_the_simulator_a_hung_call_that_is_waited_for_stops_when_cancelled() -> None:
    sim = Simulator(tools={"slow": Hang(), "fast": "quick"})
    result = sim.run(timed("wait_cancellation_completed"), run_id="r")
    assert result.status == "completed"
    ended = [
        e.event
        for e in result.entries
        if e.kind == "event" and getattr(e.event, "idempotency_key", "") == "r/call#1"
    ]
    assert ended == [
        EffectFailed(
            idempotency_key="r/call#1",
            error=ErrorInfo(type="cancelled", message="call-tool r/call#1 stopped when cancelled"),
            at_ms=1000,
        )
    ]


def test_a_second_cancel_while_the_run_waits_for_its_calls_settles_it_at_once() -> None:
    flow = flowcore.parse_flow(
        """
flow: failing
tools: {slow: {class: readonly}, bad: {class: readonly}}
steps:
  - id: fan
    parallel:
      mode: all
      branches:
        a: [{id: s, call_tool: {tool: slow}, cancellation: wait_cancellation_completed}]
        b: [{id: f, call_tool: {tool: bad}}]
"""
    )
    d = flowcore.start(flow, run_id="r")
    boom = ErrorInfo(type="boom", message="no")
    d = flowcore.advance(d.state, EffectFailed(idempotency_key="r/f#1", error=boom, at_ms=1))
    assert d.effects == () and flowcore.plan(d).cancel == ("r/s#1",)
    assert d.state.status == "running"  # the branch failed; the step waits for s to stop
    d = flowcore.advance(d.state, CancelRequested(reason="now", at_ms=2))
    assert d.state.status == "running" and d.effects == ()  # it waits for s to stop
    assert flowcore.plan(d).cancel == ()  # s was cancelled already
    d = flowcore.advance(d.state, CancelRequested(reason="now!", at_ms=3))
    assert d.state.status == "cancelled"
    settled = d.effects[0]
    assert isinstance(settled, flowcore.Settled)
    assert [(r.idempotency_key, r.status) for r in settled.report] == [
        ("r/s#1", "uncertain"),
        ("r/f#1", "failed"),
    ]
