"""The simulator: virtual time, scripted handlers, humans, signals, subflows,
faults, usage, the log, and its own determinism."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import flowcore
from flowcore import (
    CallTool,
    EffectFailed,
    EffectOutcomeUnknown,
    EffectSucceeded,
    HumanAnswered,
    RunAgent,
    Settled,
    SignalReceived,
    SubflowSettled,
    TimerFired,
)
from flowcore.testing import (
    Call,
    Fail,
    Fault,
    Hang,
    Ok,
    Responses,
    Signal,
    SimulationError,
    Simulator,
    Trajectory,
    Unknown,
    check_trajectory,
    faults,
    flow_inputs,
    flows,
    generated_world,
    simulate,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "specs" / "examples"


def keys(t: Trajectory, kind: str) -> list[str]:
    return [flowcore.effect_to_wire(e)["idempotencyKey"] for e in t.effects(kind)]


def report(t: Trajectory) -> dict[str, str]:
    assert t.settled is not None
    return {r.idempotency_key: r.status for r in t.settled.report}


def timeline(t: Trajectory) -> list[tuple[int, str, str]]:
    """(time, kind, key) of every accepted event of the root run."""
    out = []
    for e in t.entries:
        if e.kind == "event" and e.run_id == t.run_id and e.event is not None:
            wire = flowcore.event_to_wire(e.event)
            out.append((e.at_ms, wire["kind"], wire.get("idempotencyKey", wire.get("signal", ""))))
    return out


# --- virtual time ---------------------------------------------------------------------------------


def test_sleeps_timeouts_backoffs_and_repeats_complete_in_virtual_time_in_order() -> None:
    spec = """
flow: clock
tools: {t: {class: readonly}}
steps:
  - id: both
    parallel:
      branches:
        slow: [{id: nap, sleep: {for_ms: 3600000}}]
        quick: [{id: blink, sleep: {for_ms: 1000}}]
  - id: flaky
    call_tool: {tool: t}
    retry: {max_attempts: 3, initial_interval_ms: 60000, backoff: 2.0, max_interval_ms: 600000}
  - id: tick
    repeat:
      every_ms: 86400000
      max_fires: 3
      steps: [{id: ping, call_tool: {tool: t}}]
"""
    sim = Simulator(tools={"t": Responses([Fail("busy", retryable=True)] * 2 + [Ok("ok")])})
    t = sim.run(spec)
    assert t.status == "completed" and t.stop == "settled"
    fired = [(at, key) for at, kind, key in timeline(t) if kind == "timer-fired"]
    assert fired == [
        (1000, "run/blink#1"),
        (3600000, "run/nap#1"),
        (3600001 + 60000, "run/flaky#1/backoff"),
        (3660002 + 120000, "run/flaky#2/backoff"),
        (3780003 + 86400000, "run/tick[1]/tick"),
        (3780003 + 2 * 86400000, "run/tick[2]/tick"),
        (3780003 + 3 * 86400000, "run/tick[3]/tick"),
    ]
    assert t.end_ms == 3780003 + 3 * 86400000 + 1


def test_a_step_timeout_beats_a_slow_tool_and_the_late_answer_is_recorded() -> None:
    spec = """
flow: slow
tools: {t: {}}
steps:
  - id: g
    try:
      - {id: a, call_tool: {tool: t}, timeout_ms: 5000}
    catch:
      - errors: [timeout]
        steps: [{id: h, call_tool: {tool: t}}]
output: "${steps.h.output}"
"""
    sim = Simulator(tools={"t": lambda call: Ok(call.key, delay_ms=6000 if call.n == 1 else 1)})
    t = sim.run(spec)
    assert t.output == "run/h#1"
    assert timeline(t)[:2] == [
        (5000, "timer-fired", "run/a/timeout"),
        (5001, "effect-succeeded", "run/h#1"),
    ]
    # The slow answer arrives after the run settled: logged as rejected.
    (late,) = t.events(rejected=True)
    assert isinstance(late, EffectSucceeded) and late.idempotency_key == "run/a#1"
    assert late.at_ms == 6000
    assert report(t) == {"run/a#1": "uncertain", "run/h#1": "succeeded"}


def test_a_wall_clock_budget_settles_a_waiting_run_at_its_deadline() -> None:
    spec = """
flow: waits
budget: {wall_clock_ms: 5000}
steps: [{id: w, await_signal: {signal: never}}]
"""
    t = simulate(spec, now_ms=1000)
    assert t.status == "budget-exhausted" and t.settled is not None
    assert t.settled.exhausted == "wall-clock" and t.end_ms == 6000


def test_a_run_that_waits_for_nothing_scripted_stops_idle() -> None:
    t = simulate("flow: w\nsteps: [{id: w, await_signal: {signal: s}}]\n")
    assert t.status == "running" and t.stop == "idle" and t.settled is None
    assert t.state.status == "running"


def test_max_events_and_until_ms_bound_a_simulation() -> None:
    spec = """
flow: forever
steps:
  - id: r
    repeat: {every_ms: 1000, steps: [{id: n, sleep: {for_ms: 1}}]}
"""
    t = Simulator(max_events=50).run(spec)
    assert t.stop == "max-events" and len(t.events()) == 50
    t = Simulator(until_ms=10_000).run(spec)
    assert t.stop == "horizon" and t.end_ms <= 10_000 and t.status == "running"


# --- handlers -------------------------------------------------------------------------------------

TWO_CALLS = """
flow: two
tools: {a: {}, b: {}}
steps:
  - {id: x, call_tool: {tool: a, input: {n: 1}}}
  - {id: y, call_tool: {tool: b, input: "${steps.x.output}"}}
output: "${steps.y.output}"
"""


def test_handlers_are_values_callables_responses_or_sequences() -> None:
    seen: list[Call] = []

    def b(call: Call) -> Any:
        seen.append(call)
        return {"got": call.input}

    t = simulate(TWO_CALLS, tools={"a": {"v": 1}, "b": b})
    assert t.output == {"got": {"v": 1}}
    (call,) = seen
    assert (call.kind, call.target, call.key, call.n, call.run_id) == (
        "call-tool",
        "b",
        "run/y#1",
        1,
        "run",
    )
    assert isinstance(call.effect, CallTool) and call.now_ms == 1
    t = simulate(TWO_CALLS, tools={"a": Ok(5, delay_ms=100), "b": Responses([Ok(7)])})
    assert (t.output, t.end_ms) == (7, 101)


def test_a_handler_exception_is_an_effect_failure_but_assertions_propagate() -> None:
    def broken(call: Call) -> Any:
        raise KeyError("nope")

    t = simulate(TWO_CALLS, tools={"a": broken, "b": 1})
    assert t.status == "failed" and t.error is not None
    assert (t.error.type, t.error.message) == ("KeyError", "'nope'")

    def asserting(call: Call) -> Any:
        raise AssertionError("my test's own check")

    with pytest.raises(AssertionError, match="my test's own check"):
        simulate(TWO_CALLS, tools={"a": asserting, "b": 1})


def test_handlers_get_a_copy_they_cannot_corrupt_the_run_with() -> None:
    def mutate(call: Call) -> Any:
        call.input["n"] = 999
        return call.input

    t = simulate(TWO_CALLS, tools={"a": mutate, "b": lambda c: c.input})
    (first,) = t.effects("call-tool", "run")[:1]
    assert isinstance(first, CallTool) and first.input == {"n": 1}
    assert t.output == {"n": 999}


def test_an_output_that_is_not_data_fails_its_effect_as_on_every_host() -> None:
    for bad, where in (
        (object(), "output"),
        ({"n": 10**20}, "output.n"),
        ([float("nan")], "output[0]"),
    ):
        t = simulate(TWO_CALLS, tools={"a": bad, "b": 1})
        assert t.status == "failed" and t.settled is not None and t.settled.error is not None
        assert t.settled.error.type == "unencodable-output"
        assert t.settled.error.message.startswith(f"the {where} of run/x#1 cannot be stored: ")


def test_unscripted_work_is_a_set_up_error_unless_there_is_a_default() -> None:
    with pytest.raises(SimulationError, match=r"no tool 'b' in the script \(for run/y#1\)"):
        simulate(TWO_CALLS, tools={"a": 1})
    t = simulate(TWO_CALLS, tools={"a": 1}, default=Ok("fallback"))
    assert t.output == "fallback"


def test_unknown_and_hang_responses() -> None:
    spec = """
flow: u
tools: {ro: {class: readonly}, un: {}}
steps:
  - id: g
    try: [{id: a, call_tool: {tool: un}}]
    catch: [{errors: [outcome-unknown], steps: [{id: b, call_tool: {tool: ro}}]}]
  - {id: c, call_tool: {tool: un}, timeout_ms: 100}
"""
    t = simulate(spec, tools={"un": Responses([Unknown(), Hang()]), "ro": 1})
    assert t.status == "failed" and t.error is not None and t.error.type == "timeout"
    assert report(t) == {"run/a#1": "uncertain", "run/b#1": "succeeded", "run/c#1": "uncertain"}


# --- humans, signals, cancel ----------------------------------------------------------------------

ASK = """
flow: ask
steps:
  - id: q1
    ask_human: {question: "one?", options: [yes, no]}
  - id: q2
    ask_human: {question: "two ${steps.q1.answer}?", timeout_ms: 1000, default: later}
output: "${ [steps.q1.answer, steps.q2.answer] }"
"""


def test_humans_by_step_id_by_wildcard_by_callable_or_one_answer() -> None:
    assert simulate(ASK, humans={"q1": "no", "q2": "sure"}).output == ["no", "sure"]
    assert simulate(ASK, humans={"q1": "yes", "*": "any"}).output == ["yes", "any"]
    asked: list[tuple[str, tuple[str, ...] | None]] = []

    def person(call: Call) -> Any:
        asked.append((call.input, call.options))
        return "yes" if call.options else Ok("typed", delay_ms=500)

    t = simulate(ASK, humans=person)
    assert t.output == ["yes", "typed"] and asked == [("one?", ("yes", "no")), ("two yes?", None)]
    assert t.end_ms == 501
    assert simulate(ASK, humans={"q1": "yes", "q2": Hang()}).output == ["yes", "later"]
    with pytest.raises(SimulationError, match="no human is scripted"):
        simulate(ASK)
    with pytest.raises(SimulationError, match="no answer for step 'q2'"):
        simulate(ASK, humans={"q1": "yes"})


def test_an_answer_outside_the_options_is_rejected_and_logged() -> None:
    t = simulate(ASK, humans={"q1": "maybe", "q2": "x"})
    assert t.status == "running" and t.stop == "idle"
    (rejected,) = [e for e in t.entries if e.kind == "rejected"]
    assert rejected.reason == "answer 'maybe' is not one of ['yes', 'no'] for run/q1#1"
    assert [r.type for r in t.log][-1] == "event.rejected"


def test_signals_arrive_at_their_virtual_times_and_are_buffered_before_the_wait() -> None:
    spec = """
flow: sig
steps:
  - {id: nap, sleep: {for_ms: 5000}}
  - {id: first, await_signal: {signal: go}}
  - {id: second, await_signal: {signal: go}}
output: "${ [steps.first.output, steps.second.output] }"
"""
    t = simulate(spec, signals=[Signal("go", "early", at_ms=10), Signal("go", "late", at_ms=9000)])
    assert t.output == ["early", "late"] and t.end_ms == 9000
    assert [e.signal for e in t.events() if isinstance(e, SignalReceived)] == ["go", "go"]


def test_cancel_at_a_virtual_time_runs_compensations() -> None:
    spec = """
flow: saga
tools: {charge: {}, refund: {}}
steps:
  - id: pay
    call_tool: {tool: charge}
    compensate: [{id: undo, call_tool: {tool: refund}}]
  - {id: wait, await_signal: {signal: shipped}}
"""
    t = simulate(spec, tools={"charge": 1, "refund": 2}, cancel_at_ms=60_000)
    assert t.status == "cancelled" and t.end_ms == 60_001
    assert keys(t, "call-tool") == ["run/pay#1", "run/undo#1"]


# --- subflows -------------------------------------------------------------------------------------

PARENT = """
flow: parent
budget: {steps: 10, cost_minor_units: 1000}
limits: {max_subflow_depth: 1}
steps:
  - {id: kid, run_subflow: {flow: kid, input: {n: 2}}}
output: "${steps.kid.output}"
"""
KID = """
flow: kid
limits: {max_subflow_depth: 1}
steps:
  - {id: think, run_agent: {agent: brain, prompt: "n=${input.n}"}}
  - id: deeper
    try: [{id: again, run_subflow: {flow: kid}}]
    catch: [{errors: [depth-exceeded], steps: []}]
output: "${steps.think.output}"
"""


def test_a_subflow_runs_in_the_same_clock_with_the_parents_budget_and_depth() -> None:
    sim = Simulator(agents={"brain": Ok("idea", cost=30, steps=2)}, subflows={"kid": KID})
    t = sim.run(PARENT, run_id="p")
    assert t.status == "completed" and t.output == "idea"
    assert t.runs == ("p", "p/kid#1")
    child = t.histories["p/kid#1"]
    assert child.depth == 1
    start = child.turns[0].state
    assert (start.ledger.steps, start.ledger.cost) == (9, 1000)
    # The child: one agent run (1 step + 2 reported), its subflow call failed
    # on depth at once; the parent: the run-subflow step plus the child's usage.
    (settled,) = [e for e in t.events("p") if isinstance(e, SubflowSettled)]
    assert settled.usage is not None
    assert (settled.usage.steps, settled.usage.cost_minor_units) == (3, 30)
    assert (t.usage.steps, t.usage.cost_minor_units) == (4, 30)
    assert t.log_of("p/kid#1")[0].data["depth"] == 1
    assert t.log_of("p/kid#1")[0].data["budget"] == {"steps": 9, "costMinorUnits": 1000}
    check_trajectory(t)


def test_a_child_can_never_outspend_its_root() -> None:
    spec = PARENT.replace("steps: 10", "steps: 2")
    sim = Simulator(agents={"brain": Ok("idea", steps=5)}, subflows={"kid": KID})
    t = sim.run(spec)
    assert t.status == "budget-exhausted" and t.settled is not None
    assert t.settled.exhausted == "steps"
    child = t.histories["run/kid#1"]
    assert child.turns[0].state.ledger.steps == 1  # all the parent had left
    assert child.state.status == "budget-exhausted"
    check_trajectory(t)


def test_subflow_set_up_errors() -> None:
    with pytest.raises(SimulationError, match="asks for flow 'kid', which is not in subflows="):
        simulate(PARENT)
    schema = """
flow: kid
input_schema: {type: object, required: [m]}
steps: [{id: s, sleep: {for_ms: 1}}]
"""
    t = simulate(PARENT, subflows={"kid": schema})
    assert t.status == "failed" and t.error is not None
    assert t.error.type == "input-rejected"


def test_a_reissued_subflow_attaches_to_the_running_child() -> None:
    sim = Simulator(
        agents={"brain": Ok("idea", delay_ms=50)},
        subflows={"kid": KID},
        faults=[Fault("unknown", "kid", calls=[1])],
    )
    t = sim.run(PARENT)
    assert t.status == "completed"
    assert keys(t, "run-subflow")[:2] == ["run/kid#1", "run/kid#1"]
    assert t.runs == ("run", "run/kid#1")  # one child, not two
    assert len(t.effects("run-agent")) == 1


def test_a_settled_parent_cancels_its_running_children() -> None:
    spec = """
flow: impatient
steps:
  - {id: kid, run_subflow: {flow: sleepy}, timeout_ms: 100}
"""
    sleepy = "flow: sleepy\nsteps: [{id: w, await_signal: {signal: never}}]\n"
    t = simulate(spec, subflows={"sleepy": sleepy})
    assert t.status == "failed"
    assert t.histories["run/kid#1"].state.status == "cancelled"
    assert report(t) == {"run/kid#1": "uncertain"}


# --- faults ---------------------------------------------------------------------------------------

RETRIED = """
flow: r
tools: {ro: {class: readonly}, un: {}}
steps:
  - id: a
    call_tool: {tool: ro}
    retry: {max_attempts: 3, initial_interval_ms: 10}
"""


def test_fault_fail_and_fail_retryably() -> None:
    t = simulate(RETRIED, tools={"ro": 1}, faults=[Fault("fail", "ro", calls=[1])])
    assert t.status == "failed" and t.error is not None and t.error.type == "injected"
    t = simulate(RETRIED, tools={"ro": 1}, faults=[Fault("fail-retryable", "ro", calls=[1, 2])])
    assert t.status == "completed"
    assert report(t) == {"run/a#1": "failed", "run/a#2": "failed", "run/a#3": "succeeded"}


def test_fault_unknown_reissues_a_safe_call_with_the_same_key() -> None:
    calls: list[str] = []

    def ro(call: Call) -> Any:
        calls.append(call.key)
        return call.n

    t = simulate(RETRIED, tools={"ro": ro}, faults=[Fault("unknown", "ro", calls=[1])])
    assert t.status == "completed" and calls == ["run/a#1", "run/a#1"]
    assert keys(t, "call-tool") == ["run/a#1", "run/a#1"]
    assert isinstance(t.events()[0], EffectOutcomeUnknown)


def test_fault_hang_lets_the_timeout_decide() -> None:
    spec = "flow: h\ntools: {t: {}}\nsteps: [{id: a, call_tool: {tool: t}, timeout_ms: 700}]\n"
    t = simulate(spec, tools={"t": 1}, faults=[Fault("hang")])
    assert t.status == "failed" and t.end_ms == 700 and report(t) == {"run/a#1": "uncertain"}


def test_fault_duplicate_delivers_twice_and_the_copy_is_rejected() -> None:
    t = simulate(TWO_CALLS, tools={"a": 1, "b": 2}, faults=[Fault("duplicate", "a")])
    assert t.status == "completed"
    (dup,) = [e for e in t.entries if e.kind == "rejected"]
    assert isinstance(dup.event, EffectSucceeded) and dup.event.idempotency_key == "run/x#1"
    assert dup.reason is not None and "no such effect is pending" in dup.reason


def test_fault_late_delivers_after_the_timeout_as_a_late_result() -> None:
    spec = """
flow: l
tools: {t: {}}
steps:
  - id: p
    parallel:
      mode: all_settled
      branches:
        a: [{id: a, call_tool: {tool: t}, timeout_ms: 100}]
        b: [{id: b, sleep: {for_ms: 5000}}]
"""
    t = simulate(spec, tools={"t": 1}, faults=[Fault("late", "t", delay_ms=1000)])
    assert t.status == "completed"
    late = [(at, kind, key) for at, kind, key in timeline(t) if kind == "effect-succeeded"]
    assert late == [(1001, "effect-succeeded", "run/a#1")]
    assert report(t) == {"run/a#1": "succeeded"}  # the late result's real outcome


def test_fault_reorder_and_order_choices_change_who_answers_first() -> None:
    spec = """
flow: race
tools: {a: {}, b: {}}
steps:
  - id: p
    parallel:
      mode: race
      branches:
        x: [{id: x, call_tool: {tool: a}}]
        y: [{id: y, call_tool: {tool: b}}]
output: "${steps.p.output}"
"""
    tools = {"a": "A", "b": "B"}
    assert simulate(spec, tools=tools).output == {"x": "A"}
    assert simulate(spec, tools=tools, faults=[Fault("reorder", "a")]).output == {"y": "B"}
    assert simulate(spec, tools=tools, order=[1]).output == {"y": "B"}
    assert simulate(spec, tools=tools, order=lambda n: n - 1).output == {"y": "B"}


def test_faults_pick_calls_by_target_and_number_and_the_first_match_wins() -> None:
    fault = Fault("fail", "ro", calls=[2, 3])
    assert [fault.matches("ro", n) for n in (1, 2, 3)] == [False, True, True]
    assert not fault.matches("other", 2)
    assert Fault("hang").matches("anything", 7)
    with pytest.raises(ValueError):
        Fault("explode")  # type: ignore[arg-type]
    t = simulate(
        RETRIED,
        tools={"ro": 1},
        faults=[Fault("fail-retryable", "ro", calls=[1]), Fault("fail", "ro")],
    )
    assert t.status == "failed" and report(t) == {"run/a#1": "failed", "run/a#2": "failed"}


# --- usage, the log, the trajectory ---------------------------------------------------------------

TEAM = """
flow: team
teams:
  panel:
    mode: parallel
    members: [{member: sec, agent: reviewer}, {member: style, agent: reviewer}]
steps:
  - {id: review, run_team: {team: panel, prompt: "look"}}
  - {id: sum, run_agent: {agent: writer, prompt: "sum"}}
"""


def test_usage_in_total_and_per_agent_member() -> None:
    def reviewer(call: Call) -> Any:
        assert isinstance(call.effect, RunAgent)
        return Ok("fine", cost=10 if call.effect.member == "sec" else 20, steps=1)

    t = simulate(TEAM, agents={"reviewer": reviewer, "writer": Ok("done", cost=5)})
    assert (t.usage.steps, t.usage.cost_minor_units) == (5, 35)
    assert {m: (u.effects, u.steps, u.cost_minor_units) for m, u in t.usage.by_member.items()} == {
        "sec": (1, 2, 10),
        "style": (1, 2, 20),
    }
    assert {a: (u.effects, u.steps, u.cost_minor_units) for a, u in t.usage.by_agent.items()} == {
        "reviewer": (2, 4, 30),
        "writer": (1, 1, 5),
    }


def test_the_log_is_the_record_format_and_replays() -> None:
    t = simulate(TEAM, agents={"reviewer": Ok("fine", cost=1), "writer": "done"}, run_id="r-9")
    records = t.log_of("r-9")
    assert [r.index for r in records] == list(range(len(records)))
    assert [r.type for r in records] == [
        "run.started",
        "effect.emitted",
        "effect.emitted",
        "event.reported",
        "event.reported",
        "effect.emitted",
        "event.reported",
        "effect.emitted",
        "run.settled",
    ]
    data = flowcore.encode_records(records)
    assert flowcore.decode_log(data).records == records
    replay = (
        getattr(flowcore, "replay", None) or importlib.import_module("flowcore.log.replay").replay
    )
    outcome = replay(data, flowcore.parse_flow(TEAM))
    assert outcome.ok and outcome.status == "completed"


def test_the_trajectory_lists_every_effect_and_event_in_order() -> None:
    t = simulate(TWO_CALLS, tools={"a": 1, "b": 2})
    assert [(e.kind, e.at_ms) for e in t.entries] == [
        ("effect", 0),
        ("event", 1),
        ("effect", 1),
        ("event", 2),
        ("effect", 2),
    ]
    assert isinstance(t.entries[-1].effect, Settled)
    assert t.describe().splitlines()[0] == (
        't=0 run <- {"kind":"call-tool","tool":"a","input":{"n":1},"idempotencyKey":"run/x#1"}'
    )
    assert "stop: settled at t=2; status completed" in t.describe()
    assert [type(e) for e in t.events()] == [EffectSucceeded, EffectSucceeded]


def test_paranoid_mode_snapshots_around_every_advance() -> None:
    t = Simulator(tools={"a": 1, "b": 2}, paranoid=True).run(TWO_CALLS)
    turns = t.histories["run"].turns
    assert all(turn.before == turn.input_after and turn.before for turn in turns[1:])
    t = simulate(TWO_CALLS, tools={"a": 1, "b": 2})
    assert all(turn.before is None for turn in t.histories["run"].turns)


def test_the_example_flows_run_end_to_end_with_their_subflow() -> None:
    flows_by_id = {}
    for path in EXAMPLES.glob("*.yaml"):
        flow = flowcore.parse_flow(path.read_text(encoding="utf-8"), source_name=path.name)
        flows_by_id[flow.id] = flow
    sim = Simulator(
        tools={
            "pagerduty.get_incident": Responses(
                [Fail("unavailable", retryable=True), {"title": "slow", "service": "api"}]
            ),
            "logs.search": {"errors": 3},
            "metrics.query": {"p99_ms": 2300},
            "pagerduty.page": {"paged": True},
            "slack.post": {"ok": True},
        },
        agents={
            "triager": Ok({"owner": "oncall", "plan": "scale"}, cost=120, steps=1),
            "security-reviewer": Ok("ok", cost=40),
            "sre-reviewer": Ok("ok", cost=40),
            "writer": Ok("Postmortem", cost=80),
        },
        humans={"decide": "page"},
        signals=[Signal("fix-deployed", {"commit": "abc123"}, at_ms=120_000)],
        subflows=flows_by_id.values(),
        paranoid=True,
    )
    t = sim.run(flows_by_id["incident-response"], {"incident_id": "INC-7"}, run_id="r-1")
    assert t.status == "completed", t.describe()
    assert t.output == {
        "owner": "oncall",
        "paged": "page",
        "fix": {"commit": "abc123"},
        "postmortem": "Postmortem",
    }
    assert t.runs == ("r-1", "r-1/postmortem#1")
    assert set(t.usage.by_member) == {"security", "sre"}
    assert t.usage.cost_minor_units == 120 + 40 + 40 + 80
    check_trajectory(t)


# --- the simulator's own determinism --------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    spec=flows(),
    inp=flow_inputs(),
    injected=faults(),
    order=st.lists(st.integers(0, 5), max_size=10),
)
def test_the_same_simulation_twice_gives_the_same_log_byte_for_byte(
    spec: dict[str, Any], inp: dict[str, Any], injected: list[Fault], order: list[int]
) -> None:
    flow = flowcore.parse_flow(spec)
    try:
        first = generated_world(injected, order=order, paranoid=False).run(flow, inp)
    except flowcore.InputError:
        return
    second = generated_world(injected, order=order, paranoid=False).run(flow, inp)
    assert flowcore.encode_records(first.log) == flowcore.encode_records(second.log)
    assert [str(e) for e in first.entries] == [str(e) for e in second.entries]


def test_the_determinism_property_lets_an_interpreter_crash_through(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An assertion failing inside a simulated run fails the property: it is a bug to
    find, not a case to leave out (the property used to return on any AssertionError)."""

    class Crashing:
        def run(self, flow: flowcore.Flow, inp: object) -> None:
            raise AssertionError("an interpreter invariant broke")

    monkeypatch.setattr(sys.modules[__name__], "generated_world", lambda *a, **k: Crashing())
    prop = test_the_same_simulation_twice_gives_the_same_log_byte_for_byte
    body = prop.hypothesis.inner_test  # type: ignore[attr-defined]  # the undecorated body
    spec = {"flow": "f", "tools": {"t": {}}, "steps": [{"id": "a", "call_tool": {"tool": "t"}}]}
    with pytest.raises(AssertionError, match="an interpreter invariant broke"):
        body(spec=spec, inp={}, injected=[], order=[])


def test_events_the_simulator_reports_are_well_formed_wire_events() -> None:
    t = simulate(RETRIED, tools={"ro": 1}, faults=[Fault("fail-retryable", calls=[1])])
    for ev in t.events():
        assert flowcore.event_from_wire(flowcore.event_to_wire(ev)) == ev
        assert isinstance(ev, (EffectSucceeded, EffectFailed, TimerFired, HumanAnswered))


def test_a_handler_call_says_where_its_work_stands_as_a_host_context_does() -> None:
    spec = """
flow: place
budget: {steps: 9, cost_minor_units: 70}
tools: {t: {class: idempotent}}
steps:
  - id: a
    call_tool: {tool: t}
    retry: {max_attempts: 2, initial_interval_ms: 10}
    timeout_ms: 5000
output: "${steps.a.output}"
"""
    seen: list[Any] = []

    def t(call: Any) -> Any:
        seen.append(call.place)
        return Fail("busy", retryable=True) if call.n == 1 else Ok("ok")

    assert Simulator(tools={"t": t}).run(spec, now_ms=100).output == "ok"
    first, second = seen
    assert (first.key, first.step, first.attempt, first.exec_class) == (
        "run/a#1",
        "a",
        1,
        "idempotent",
    )
    assert (second.key, second.attempt, second.deadline_ms) == ("run/a#2", 2, 5100)
    assert first.deadline_ms == 5100 and second.budget.cost_minor_units == 70
    assert (first.budget.steps, second.budget.steps) == (8, 7)
