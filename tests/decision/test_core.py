"""The sequential interpreter: start/advance, keys, budget, signals, rejection,
snapshots. One test per rule of DESIGN sections 4 and 6."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

import flowcore
from flowcore import (
    BudgetRemaining,
    EffectSucceeded,
    EventRejected,
    InputError,
    SnapshotMismatch,
    Usage,
)
from tests.harness import Run

SCHEMAS = Path(__file__).resolve().parents[2] / "specs" / "schema"

TRIAGE = """
flow: triage
version: 2
budget: {steps: 10, cost_minor_units: 500, wall_clock_ms: 100000}
tools:
  get: {class: readonly}
  post: {}
steps:
  - id: fetch
    call_tool: {tool: get, input: {id: "${input.id}"}}
  - id: think
    run_agent: {agent: triager, prompt: "Triage ${steps.fetch.output.title}",
                instructions: "be brief"}
  - id: decide
    ask_human: {question: "Page ${steps.think.output.owner}?", options: [page, ignore]}
  - id: tell
    call_tool: {tool: post, input: "${steps.decide.answer}"}
output: "${ {owner: steps.think.output.owner, answer: steps.decide.answer} }"
"""


def drive_triage(run_id: str = "r") -> Run:
    run = Run(TRIAGE, {"id": "I-7"}, run_id=run_id)
    run.ok(f"{run_id}/fetch#1", {"title": "disk full"})
    run.ok(f"{run_id}/think#1", {"owner": "ana"}, usage=Usage(steps=1, cost_minor_units=40))
    run.answer(f"{run_id}/decide#1", "page")
    run.ok(f"{run_id}/tell#1", "sent")
    return run


def test_sequence_emits_one_effect_at_a_time_and_completes() -> None:
    run = Run(TRIAGE, {"id": "I-7"})
    assert run.wire() == [
        {"kind": "sleep", "untilMs": 100000, "idempotencyKey": "r/$deadline"},
        {"kind": "call-tool", "tool": "get", "input": {"id": "I-7"}, "idempotencyKey": "r/fetch#1"},
    ]
    run.ok("r/fetch#1", {"title": "disk full"}, at=10)
    assert run.wire() == [
        {
            "kind": "run-agent",
            "agentId": "triager",
            "prompt": "Triage disk full",
            "instructions": "be brief",
            "idempotencyKey": "r/think#1",
            "budgetRemaining": {"steps": 8, "costMinorUnits": 500, "wallClockMs": 99990},
        }
    ]
    run.ok("r/think#1", {"owner": "ana"}, usage=Usage(steps=1, cost_minor_units=40), at=20)
    assert run.wire() == [
        {
            "kind": "ask-human",
            "question": "Page ana?",
            "options": ["page", "ignore"],
            "idempotencyKey": "r/decide#1",
        }
    ]
    run.answer("r/decide#1", "page", at=30)
    assert run.wire() == [
        {"kind": "call-tool", "tool": "post", "input": "page", "idempotencyKey": "r/tell#1"}
    ]
    run.ok("r/tell#1", "sent", at=40)
    assert run.wire() == [
        {
            "kind": "settled",
            "status": "completed",
            "output": {"owner": "ana", "answer": "page"},
            "report": [
                {
                    "idempotencyKey": "r/fetch#1",
                    "effect": "call-tool",
                    "target": "get",
                    "status": "succeeded",
                },
                {
                    "idempotencyKey": "r/think#1",
                    "effect": "run-agent",
                    "target": "triager",
                    "status": "succeeded",
                },
                {
                    "idempotencyKey": "r/tell#1",
                    "effect": "call-tool",
                    "target": "post",
                    "status": "succeeded",
                },
            ],
        }
    ]
    assert run.state.status == "completed"


def test_keys_are_deterministic_unique_and_readable() -> None:
    a, b = drive_triage(), drive_triage()
    assert [flowcore.effect_to_wire(e) for e in a.history] == [
        flowcore.effect_to_wire(e) for e in b.history
    ]
    keys = [getattr(e, "idempotency_key", None) for e in a.history]
    keys = [k for k in keys if k is not None]
    assert len(keys) == len(set(keys))
    assert keys == ["r/$deadline", "r/fetch#1", "r/think#1", "r/decide#1", "r/tell#1"]
    other = drive_triage("run-9")
    assert other.kinds() == ["settled"]
    assert "run-9/fetch#1" in [getattr(e, "idempotency_key", "") for e in other.history]


def test_advance_never_mutates_its_input_state() -> None:
    run = Run(TRIAGE, {"id": "I-7"})
    before = flowcore.encode_state(run.state)
    state = run.state
    d = flowcore.advance(state, EffectSucceeded(idempotency_key="r/fetch#1", output={}, at_ms=5))
    assert flowcore.encode_state(state) == before
    assert flowcore.encode_state(d.state) != before
    with pytest.raises(EventRejected):
        flowcore.advance(state, EffectSucceeded(idempotency_key="r/nope#1", at_ms=5))
    assert flowcore.encode_state(state) == before


def test_rejections_name_reason_and_key_and_leave_state_untouched() -> None:
    run = Run(TRIAGE, {"id": "I-7"})
    run.ok("r/fetch#1", {"title": "t"})
    snapshot = flowcore.encode_state(run.state)
    with pytest.raises(EventRejected) as unknown:
        run.ok("r/ghost#1")
    assert unknown.value.key == "r/ghost#1"
    assert "no such effect is pending" in unknown.value.reason
    with pytest.raises(EventRejected) as duplicate:
        run.ok("r/fetch#1")
    assert duplicate.value.key == "r/fetch#1"
    with pytest.raises(EventRejected) as wrong_kind:
        run.answer("r/think#1", "page")
    assert wrong_kind.value.reason == "human-answered cannot answer run-agent r/think#1"
    run.ok("r/think#1", {"owner": "o"})
    snapshot = flowcore.encode_state(run.state)
    with pytest.raises(EventRejected) as bad_answer:
        run.answer("r/decide#1", "maybe")
    assert bad_answer.value.reason == (
        "answer 'maybe' is not one of ['page', 'ignore'] for r/decide#1"
    )
    assert flowcore.encode_state(run.state) == snapshot
    with pytest.raises(EventRejected):
        run.fire("r/decide#1", at=50)  # a question is not a timer
    assert flowcore.encode_state(run.state) == snapshot


def test_every_event_after_settlement_is_rejected() -> None:
    run = drive_triage()
    assert run.settled is not None
    sends: list[Callable[[], object]] = [
        lambda: run.ok("r/tell#1"),
        lambda: run.signal("x"),
        lambda: run.cancel(),
        lambda: run.fire("r/$deadline"),
    ]
    for send in sends:
        with pytest.raises(EventRejected, match="already settled"):
            send()


def test_budget_steps_and_usage_are_charged_and_rederived() -> None:
    run = Run(TRIAGE, {"id": "I-7"})
    run.ok("r/fetch#1", {"title": "t"}, usage=Usage(steps=2, cost_minor_units=100))
    agent = run.effects[0]
    assert isinstance(agent, flowcore.RunAgent)
    # 1 step for fetch + 2 reported + 1 for this effect; 100 cost used.
    assert agent.budget_remaining == BudgetRemaining(
        steps=6, cost_minor_units=400, wall_clock_ms=100000 - run.now
    )


def test_step_budget_exhaustion_settles_with_the_limit() -> None:
    spec = """
flow: f
budget: {steps: 2}
tools: {t: {}}
steps:
  - {id: a, call_tool: {tool: t}}
  - {id: b, call_tool: {tool: t}}
  - {id: c, call_tool: {tool: t}}
"""
    run = Run(spec)
    run.ok("r/a#1")
    run.ok("r/b#1")
    assert run.wire() == [
        {
            "kind": "settled",
            "status": "budget-exhausted",
            "error": {"type": "budget-exhausted", "message": "step budget exhausted"},
            "exhausted": "steps",
            "report": [
                {
                    "idempotencyKey": "r/a#1",
                    "effect": "call-tool",
                    "target": "t",
                    "status": "succeeded",
                },
                {
                    "idempotencyKey": "r/b#1",
                    "effect": "call-tool",
                    "target": "t",
                    "status": "succeeded",
                },
            ],
        }
    ]


def test_reported_usage_over_the_limit_exhausts_cost() -> None:
    spec = """
flow: f
budget: {cost_minor_units: 100}
tools: {t: {}}
steps:
  - {id: a, call_tool: {tool: t}}
  - {id: b, call_tool: {tool: t}}
"""
    run = Run(spec)
    run.ok("r/a#1", usage=Usage(cost_minor_units=101))
    assert run.settled is not None
    assert (run.settled.status, run.settled.exhausted) == ("budget-exhausted", "cost")


def test_cost_spent_exactly_stops_new_work() -> None:
    spec = """
flow: f
budget: {cost_minor_units: 100}
tools: {t: {}}
steps:
  - {id: a, call_tool: {tool: t}}
  - {id: b, call_tool: {tool: t}}
"""
    run = Run(spec)
    run.ok("r/a#1", usage=Usage(cost_minor_units=100))
    assert run.settled is not None and run.settled.exhausted == "cost"


def test_waiting_run_with_wall_clock_budget_has_deadline_timer() -> None:
    spec = """
flow: f
budget: {wall_clock_ms: 5000}
steps:
  - {id: wait, await_signal: {signal: go}}
"""
    run = Run(spec, now_ms=1000)
    assert run.wire() == [
        {"kind": "sleep", "untilMs": 6000, "idempotencyKey": "r/$deadline"},
        {"kind": "await-signal", "signal": "go", "idempotencyKey": "r/wait#1"},
    ]
    run.fire("r/$deadline")
    assert run.settled is not None
    assert (run.settled.status, run.settled.exhausted) == ("budget-exhausted", "wall-clock")


def test_any_event_past_the_deadline_exhausts_wall_clock() -> None:
    spec = """
flow: f
budget: {wall_clock_ms: 100}
tools: {t: {}}
steps:
  - {id: a, call_tool: {tool: t}}
"""
    run = Run(spec)
    run.ok("r/a#1", at=150)
    assert run.settled is not None and run.settled.exhausted == "wall-clock"
    # The result arrived too late to be used, but the report says what happened.
    assert run.report() == {"r/a#1": "succeeded"}


def test_default_step_budget_applies_without_one() -> None:
    spec = "flow: f\ntools: {t: {}}\nsteps: [{id: a, call_tool: {tool: t}}]\n"
    run = Run(spec)
    assert run.state.ledger.steps == flowcore.DEFAULT_STEP_BUDGET


SUB = """
flow: parent
budget: {steps: 20, cost_minor_units: 1000}
limits: {max_subflow_depth: 2}
steps:
  - id: child
    run_subflow: {flow: kid, input: {n: "${input.n}"}}
  - id: after
    sleep: {for_ms: 10}
output: "${steps.child.output}"
"""


def test_subflow_carries_the_remainder_and_its_usage_comes_back() -> None:
    run = Run(SUB, {"n": 3})
    assert run.wire() == [
        {
            "kind": "run-subflow",
            "flowId": "kid",
            "depth": 1,
            "idempotencyKey": "r/child#1",
            "input": {"n": 3},
            "budgetRemaining": {"steps": 19, "costMinorUnits": 1000},
        }
    ]
    run.child("r/child#1", "completed", {"ok": 1}, usage=Usage(steps=5, cost_minor_units=300))
    assert run.state.ledger.used_steps == 6
    assert run.state.ledger.used_cost == 300
    run.fire("r/after#1")
    assert run.settled is not None and run.settled.output == {"ok": 1}


def test_child_budget_is_the_parents_remainder_never_fresh() -> None:
    kid = flowcore.parse_flow(
        "flow: kid\nbudget: {steps: 100}\ntools: {t: {}}\nsteps: [{id: a, call_tool: {tool: t}}]\n"
    )
    d = flowcore.start(
        kid, {}, run_id="r/child#1", depth=1, budget=BudgetRemaining(steps=3, cost_minor_units=7)
    )
    assert d.state.ledger.steps == 3
    assert d.state.ledger.cost == 7


def test_failed_subflow_fails_the_step() -> None:
    run = Run(SUB, {"n": 1})
    run.child("r/child#1", "failed")
    assert run.settled is not None
    assert run.settled.status == "failed"
    assert run.settled.error is not None and run.settled.error.type == "subflow-failed"


def test_subflow_beyond_the_depth_limit_fails_depth_exceeded() -> None:
    flow = flowcore.parse_flow(SUB)
    d = flowcore.start(flow, {"n": 1}, run_id="deep", depth=2)
    settled = d.effects[-1]
    assert isinstance(settled, flowcore.Settled)
    assert settled.status == "failed"
    assert settled.error is not None and settled.error.type == "depth-exceeded"
    d = flowcore.start(flow, {"n": 1}, run_id="deeper", depth=3)
    assert isinstance(d.effects[0], flowcore.Settled)
    assert d.effects[0].error is not None and d.effects[0].error.type == "depth-exceeded"


SIGNALS = """
flow: f
limits: {max_buffered_signals: 2}
steps:
  - {id: nap, sleep: {for_ms: 100}}
  - {id: go, await_signal: {signal: go}}
  - {id: again, await_signal: {signal: go, timeout_ms: 50}}
output: "${[steps.go.output, steps.again.output]}"
"""


def test_signals_before_the_wait_are_buffered_and_consumed_in_order() -> None:
    run = Run(SIGNALS)
    run.signal("go", {"n": 1}, at=5)
    run.signal("go", {"n": 2}, at=6)
    assert run.effects == ()
    run.fire("r/nap#1")
    assert run.settled is not None
    assert run.settled.output == [{"n": 1}, {"n": 2}]


def test_signal_buffer_overflow_is_rejected() -> None:
    run = Run(SIGNALS)
    run.signal("go", 1)
    run.signal("other", 2)
    before = flowcore.encode_state(run.state)
    with pytest.raises(EventRejected, match="limit 2"):
        run.signal("go", 3)
    assert flowcore.encode_state(run.state) == before


def test_await_signal_payload_and_timeout() -> None:
    run = Run(SIGNALS)
    run.fire("r/nap#1")
    assert run.keys() == ["r/go#1"]
    run.signal("go", "first")
    assert run.wire() == [
        {"kind": "await-signal", "signal": "go", "idempotencyKey": "r/again#1"},
        {"kind": "sleep", "untilMs": run.now + 50, "idempotencyKey": "r/again#1/timeout"},
    ]
    run.fire("r/again#1/timeout")
    assert run.settled is not None
    assert run.settled.status == "failed"
    assert run.settled.error is not None and run.settled.error.type == "timeout"


ASK = """
flow: f
steps:
  - id: q
    ask_human: {question: "ok?", options: [yes, no], timeout_ms: 1000, default: "no"}
  - id: free
    ask_human: {question: "why?", timeout_ms: 500}
output: "${steps.q.answer}"
"""


def test_ask_human_timeout_takes_the_default_answer() -> None:
    run = Run(ASK)
    run.fire("r/q#1/timeout")
    assert run.keys() == ["r/free#1", "r/free#1/timeout"]
    # A late answer to the question that already timed out is accepted and ignored.
    run.answer("r/q#1", "yes")
    assert run.effects == ()
    run.answer("r/free#1", "because")
    assert run.settled is not None and run.settled.output == "no"


def test_ask_human_without_default_fails_on_timeout() -> None:
    run = Run(ASK)
    run.answer("r/q#1", "yes")
    run.fire("r/free#1/timeout")
    assert run.settled is not None and run.settled.status == "failed"
    assert run.settled.error is not None and run.settled.error.type == "timeout"


def test_sleep_for_and_until() -> None:
    spec = """
flow: f
steps:
  - {id: a, sleep: {for_ms: 250}}
  - {id: b, sleep: {until: "${input.at}"}}
  - {id: c, sleep: {until: "1970-01-01T00:00:05Z"}}
  - {id: d, sleep: {until: "${`1`}"}}
"""
    run = Run(spec, {"at": 1000}, now_ms=100)
    assert run.wire() == [{"kind": "sleep", "untilMs": 350, "idempotencyKey": "r/a#1"}]
    run.fire("r/a#1")
    assert run.wire() == [{"kind": "sleep", "untilMs": 1000, "idempotencyKey": "r/b#1"}]
    run.fire("r/b#1")
    assert run.wire() == [{"kind": "sleep", "untilMs": 5000, "idempotencyKey": "r/c#1"}]
    run.fire("r/c#1")
    # An instant already past completes at once.
    assert run.kinds() == ["settled"]


TEAMS = """
flow: f
teams:
  review: {mode: sequential, members: [{member: sec, agent: sec-bot},
                                       {member: style, agent: style-bot}]}
steps:
  - {id: rev, run_team: {team: review, prompt: "Review ${input.pr} ${members.sec || ''}"}}
  - {id: ext, run_team: {team: outsiders, prompt: "Look at ${input.pr}"}}
"""


def test_declared_team_expands_into_member_agents_undeclared_goes_to_host() -> None:
    run = Run(TEAMS, {"pr": 12})
    [agent] = [e for e in run.effects if isinstance(e, flowcore.RunAgent)]
    assert (agent.agent_id, agent.member, agent.prompt) == ("sec-bot", "sec", "Review 12 ")
    assert agent.idempotency_key == "r/rev/sec#1"
    run.ok("r/rev/sec#1", "fine")
    [second] = run.effects
    assert isinstance(second, flowcore.RunAgent)
    assert (second.member, second.prompt) == ("style", "Review 12 fine")
    run.ok("r/rev/style#1", "ugly")
    assert run.wire() == [
        {
            "kind": "run-team",
            "teamId": "outsiders",
            "prompt": "Look at 12",
            "idempotencyKey": "r/ext#1",
            "budgetRemaining": {"steps": 997},
        }
    ]
    run.ok("r/ext#1", "meh")
    assert run.settled is not None and run.settled.status == "completed"
    assert run.result("rev")["output"] == {"sec": "fine", "style": "ugly"}


def test_input_schema_is_checked_at_start() -> None:
    spec = """
flow: f
input_schema:
  type: object
  required: [id]
  properties: {id: {type: string}}
steps: [{id: a, sleep: {for_ms: 1}}]
"""
    flow = flowcore.parse_flow(spec)
    flowcore.start(flow, {"id": "x"})
    with pytest.raises(InputError) as info:
        flowcore.start(flow, {"id": 3})
    assert info.value.problems == ("$.id: expected a string, got 3",)
    with pytest.raises(InputError, match='missing required property "id"'):
        flowcore.start(flow, {})


def test_snapshot_round_trip_and_pin() -> None:
    run = Run(TRIAGE, {"id": "I-7"})
    run.ok("r/fetch#1", {"title": "t"})
    data = flowcore.encode_state(run.state)
    # The spec is not embedded (no templates, no steps not reached yet); the
    # effect the run waits for is, as it was sent ("be brief" evaluated).
    assert b"${" not in data and b"Page " not in data and b"decide" not in data
    assert b"be brief" in data
    back = flowcore.decode_state(data, run.flow)
    assert back == run.state
    assert flowcore.encode_state(back) == data
    d1 = flowcore.advance(run.state, EffectSucceeded(idempotency_key="r/think#1", at_ms=9))
    d2 = flowcore.advance(back, EffectSucceeded(idempotency_key="r/think#1", at_ms=9))
    assert d1.effects == d2.effects
    other = flowcore.parse_flow(TRIAGE.replace("be brief", "be briefer"))
    with pytest.raises(SnapshotMismatch, match="pins flow 'triage' v2"):
        flowcore.decode_state(data, other)
    with pytest.raises(flowcore.WireError):
        flowcore.decode_state(b"\x00garbage", run.flow)


@functools.cache
def _validator(name: str) -> Draft202012Validator:
    return Draft202012Validator(json.loads((SCHEMAS / f"{name}.json").read_text()))


def test_real_interpreter_output_validates_against_the_schema() -> None:
    runs = [drive_triage(), Run(TEAMS, {"pr": 1}), Run(SIGNALS), Run(ASK), Run(SUB, {"n": 2})]
    runs[1].ok("r/rev/sec#1", "x")
    count = 0
    for run in runs:
        for effect in run.history:
            wire = flowcore.effect_to_wire(effect)
            assert list(_validator("effects").iter_errors(wire)) == [], wire
            count += 1
    assert count >= 12


def test_events_from_hosts_validate_and_apply() -> None:
    run = Run(TRIAGE, {"id": "I-7"})
    wire: dict[str, Any] = {
        "kind": "effect-succeeded",
        "idempotencyKey": "r/fetch#1",
        "output": {"title": "x"},
        "atMs": 3,
    }
    assert list(_validator("events").iter_errors(wire)) == []
    run.send(flowcore.event_from_wire(wire))
    assert run.keys("run-agent") == ["r/think#1"]


def test_a_format_1_snapshot_is_refused_naming_its_format() -> None:
    """Snapshot bytes written by flowcore 0.1 before the state was reshaped (format 1)."""
    here = Path(__file__).resolve().parent.parent / "fixtures"
    flow = flowcore.parse_flow((here / "snapshot_flow.yaml").read_text(encoding="utf-8"))
    old = (here / "snapshot-format-1.msgpack").read_bytes()
    with pytest.raises(flowcore.SnapshotMismatch, match=r"run 'r-1' is in format 1; .*format 2"):
        flowcore.decode_state(old, flow)
    # The same run now: format 2, and it round-trips.
    d = flowcore.start(flow, {"id": "I-1"}, run_id="r-1")
    assert flowcore.decode_state(flowcore.encode_state(d.state), flow) == d.state
