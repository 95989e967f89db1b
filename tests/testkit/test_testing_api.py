"""flowcore.testing as users see it: the strategies reach every construct and every
kind of hostile report, the invariant checks catch what they promise to catch,
the state machine drives a user's flow, and the page specs/testing.md runs."""

from __future__ import annotations

import itertools
import re
import unittest
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar, cast

import msgspec
import pytest
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis.stateful import run_state_machine_as_test

import flowcore
from flowcore import (
    AskHuman,
    CallTool,
    EffectSucceeded,
    HumanAnswered,
    RunAgent,
    Settled,
    SignalReceived,
    Usage,
)
from flowcore import testing as T
from flowcore.testing import (
    FlowMachine,
    RunHistory,
    Turn,
    check_budget,
    check_determinism,
    check_history,
    check_keys,
    check_rejections,
    check_run,
    check_settlement,
    check_work_accounted,
    drive,
    event_streams,
    flow_inputs,
    flows,
)

DOC = Path(__file__).resolve().parents[2] / "specs" / "testing.md"
FIND = settings(
    max_examples=20_000,
    database=None,
    phases=[Phase.generate],  # the first example found will do: no shrinking
    suppress_health_check=list(HealthCheck),
)

PUBLIC = {
    "CHILD_SPEC",
    "EVENT_KINDS",
    "BUILT_IN",
    "FAULT_KINDS",
    "MOVES",
    "SIGNALS",
    "TEAMS",
    "META_FIELDS",
    "TOOLS",
    "UPDATE_EXAMPLES",
    "UPDATE_NAMES",
    "Call",
    "CallError",
    "Entry",
    "Exploration",
    "Fail",
    "Fault",
    "FlowMachine",
    "Hang",
    "HeartbeatTimeout",
    "Ok",
    "Point",
    "Progress",
    "ProgressItem",
    "Refusal",
    "Responses",
    "RunHistory",
    "Signal",
    "SimulationError",
    "Simulator",
    "Trajectory",
    "Turn",
    "Unknown",
    "Update",
    "UsageLine",
    "UsageReport",
    "Violation",
    "World",
    "apply",
    "check_budget",
    "check_determinism",
    "check_history",
    "check_keys",
    "check_rejections",
    "check_run",
    "check_settlement",
    "check_trajectory",
    "check_updates",
    "check_work_accounted",
    "drive",
    "event_of_kind",
    "event_streams",
    "events_for",
    "events_from_moves",
    "explore",
    "faults",
    "flow_inputs",
    "flows",
    "generated_world",
    "hostile_events",
    "moves",
    "pending_events",
    "play",
    "simulate",
    "spend_all",
}


def test_the_public_names_are_pinned() -> None:
    assert set(T.__all__) == PUBLIC
    for name in T.__all__:
        assert hasattr(T, name), name


# --- flows() -----------------------------------------------------------------------------------


def walk(steps: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for step in steps:
        yield step
        yield from walk(step.get("compensate", []))
        if "switch" in step:
            for case in step["switch"]:
                yield from walk(case.get("steps", case.get("else", [])))
        for kind in ("for_each", "repeat"):
            if kind in step:
                yield from walk(step[kind]["steps"])
        if "parallel" in step:
            for branch in step["parallel"]["branches"].values():
                yield from walk(branch)
        if "try" in step:
            yield from walk(step["try"])
            for clause in step["catch"]:
                yield from walk(clause["steps"])


def constructs(spec: dict[str, Any]) -> set[str]:
    found: set[str] = set()
    for key in ("budget", "input_schema", "output"):
        if key in spec:
            found.add(key)
    found.update(f"limits.{k}" for k in spec.get("limits", {}))
    for step in walk(spec["steps"]):
        kind = next(k for k in T.STEP_KINDS if k in step)
        found.add(kind)
        found.update(
            k for k in ("timeout_ms", "attempt_timeout_ms", "retry", "compensate") if k in step
        )
        body = step[kind]
        if kind == "parallel":
            found.add(f"parallel.{body['mode']}")
            found.update("parallel.max_concurrency" for _ in [1] if "max_concurrency" in body)
        elif kind == "for_each" and "max_concurrency" in body:
            found.add("for_each.max_concurrency")
        elif kind == "repeat":
            found.update(f"repeat.{k}" for k in ("cron", "every_ms", "until") if k in body)
        elif kind == "sleep":
            found.update(f"sleep.{k}" for k in ("for_ms", "until") if k in body)
        elif kind == "ask_human":
            found.update(
                f"ask_human.{k}" for k in ("options", "timeout_ms", "default") if k in body
            )
        elif kind == "await_signal":
            keys = ("timeout_ms", "where", "signals", "count", "key")
            found.update(f"await_signal.{k}" for k in keys if k in body)
        elif kind == "signal_run" and "key" in body:
            found.add("signal_run.key")
        elif kind == "run_agent" and "member" in body:
            found.add("run_agent.member")
        elif kind == "run_team":
            declared = body["team"] in spec.get("teams", {})
            found.add(f"run_team.{'declared' if declared else 'undeclared'}")
        elif kind == "schedule" and body["outlive_run"]:
            found.add("schedule.outlive_run")
        elif kind == "switch" and any("else" in case for case in body):
            found.add("switch.else")
    return found


EVERY_CONSTRUCT = sorted(
    {
        *T.STEP_KINDS,
        "budget",
        "input_schema",
        "output",
        "limits.max_subflow_depth",
        "limits.max_concurrency",
        "limits.max_buffered_signals",
        "timeout_ms",
        "retry",
        "compensate",
        "parallel.all",
        "parallel.all_settled",
        "parallel.race",
        "parallel.any",
        "parallel.max_concurrency",
        "for_each.max_concurrency",
        "repeat.cron",
        "repeat.every_ms",
        "repeat.until",
        "sleep.for_ms",
        "sleep.until",
        "ask_human.options",
        "ask_human.timeout_ms",
        "ask_human.default",
        "await_signal.timeout_ms",
        "await_signal.where",
        "await_signal.signals",
        "await_signal.count",
        "await_signal.key",
        "signal_run.key",
        "attempt_timeout_ms",
        "run_agent.member",
        "run_team.declared",
        "run_team.undeclared",
        "schedule.outlive_run",
        "switch.else",
    }
)


@pytest.mark.parametrize("construct", EVERY_CONSTRUCT)
def test_flows_reach_every_construct(construct: str) -> None:
    spec = find(flows(), lambda s: construct in constructs(s), settings=FIND)
    flowcore.parse_flow(spec)


def _durations(value: Any) -> Iterator[Any]:
    """Every value of a ``*_ms`` key anywhere in ``value``."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key.endswith("_ms"):
                yield item
            yield from _durations(item)
    elif isinstance(value, list):
        for item in value:
            yield from _durations(item)


@pytest.mark.parametrize(
    "form",
    [
        lambda v: type(v) is int,
        lambda v: isinstance(v, str) and v.endswith("ms"),
        lambda v: isinstance(v, str) and v.startswith("PT"),
        lambda v: isinstance(v, str) and v.startswith("${"),
    ],
    ids=["milliseconds", "text", "iso-8601", "expression"],
)
def test_flows_write_durations_in_every_form_a_spec_may(form: Callable[[Any], bool]) -> None:
    spec = find(flows(), lambda s: any(form(v) for v in _durations(s)), settings=FIND)
    flowcore.start(flowcore.parse_flow(spec), {"n": 1}, run_id="r", now_ms=0)


@settings(max_examples=200, deadline=None)
@given(spec=flows(max_depth=3, max_steps=6), inp=flow_inputs())
def test_generated_flows_are_valid_and_start(spec: dict[str, Any], inp: dict[str, Any]) -> None:
    flow = flowcore.parse_flow(spec)
    flowcore.start(flow, inp)


@settings(max_examples=100, deadline=None)
@given(spec=flows(max_depth=0, max_steps=3, budget=False, concurrency=False, kinds={"call_tool"}))
def test_flow_knobs_bound_what_is_generated(spec: dict[str, Any]) -> None:
    kinds = {next(k for k in T.STEP_KINDS if k in s) for s in walk(spec["steps"])}
    assert kinds == {"call_tool"}
    assert "budget" not in spec and "max_concurrency" not in spec["limits"]
    assert 1 <= len(spec["steps"]) <= 3
    flowcore.parse_flow(spec)


def test_flow_knobs_reject_nonsense() -> None:
    with pytest.raises(ValueError, match="at least one leaf kind"):
        find(flows(kinds={"parallel"}), lambda s: True)


# --- event streams -------------------------------------------------------------------------------

APPROVAL = """
flow: approval
tools: {lookup: {class: readonly}, pay: {class: idempotent}}
limits: {max_buffered_signals: 2}
steps:
  - {id: who, call_tool: {tool: lookup, input: "${input}"}}
  - id: ok
    ask_human: {question: "pay ${steps.who.output}?", options: [yes, no], timeout_ms: 60000}
  - id: route
    switch:
      - if: "steps.ok.answer == 'yes'"
        steps: [{id: pay, call_tool: {tool: pay, input: "${steps.who.output}"}}]
  - {id: done, await_signal: {signal: receipt}}
"""
APPROVAL_FLOW = flowcore.parse_flow(APPROVAL)


def run_of(events: list[Any]) -> RunHistory:
    return drive(APPROVAL_FLOW, {"id": 1}, events)


def reasons(events: list[Any]) -> list[str]:
    return [t.rejected for t in run_of(events).turns if t.rejected is not None]


def _sizes(event: Any) -> int:
    return len(flowcore.encode_event(event))


HOSTILE_KINDS = {
    "a duplicate": lambda evs: any(evs[i] == evs[j] for i in range(len(evs)) for j in range(i)),
    "an unknown key": lambda evs: any("no such effect is pending" in r for r in reasons(evs)),
    "an answer not among the options": lambda evs: any("is not one of" in r for r in reasons(evs)),
    "an event of the wrong kind": lambda evs: any("cannot answer" in r for r in reasons(evs)),
    "a clock going backwards": lambda evs: any(
        evs[i].at_ms < max(e.at_ms for e in evs[:i]) for i in range(1, len(evs))
    ),
    "an oversize payload": lambda evs: any(_sizes(e) > 50_000 for e in evs),
    "a full signal buffer": lambda evs: any("signals already buffered" in r for r in reasons(evs)),
    "events after settlement": lambda evs: any("has already settled" in r for r in reasons(evs)),
    "answers out of order": lambda evs: (
        any(
            isinstance(a, EffectSucceeded) and isinstance(b, HumanAnswered)
            for a, b in itertools.pairwise(evs)
        )
        and run_of(evs).state.status != "running"
    ),
}


@pytest.mark.filterwarnings("ignore:Generating overly large repr")
@pytest.mark.parametrize("what", sorted(HOSTILE_KINDS))
def test_event_streams_include_every_kind_of_hostile_report(what: str) -> None:
    stream = find(event_streams(APPROVAL_FLOW, {"id": 1}), HOSTILE_KINDS[what], settings=FIND)
    check_run(APPROVAL_FLOW, {"id": 1}, stream)


@settings(max_examples=100, deadline=None)
@given(events=event_streams(APPROVAL_FLOW, {"id": 1}, hostile=False))
def test_well_behaved_streams_are_accepted_until_the_run_settles(events: list[Any]) -> None:
    history = run_of(events)
    settled = [i for i, t in enumerate(history.turns) if t.state.settled is not None]
    cutoff = settled[0] if settled else len(history.turns)
    for turn in history.turns[:cutoff]:
        # A host may send signals faster than the flow takes them.
        assert turn.rejected is None or "signals already buffered" in turn.rejected


@settings(max_examples=20, deadline=None)
@given(stream=event_streams(APPROVAL_FLOW, {"id": 1}, run_id="r-7", now_ms=500))
def test_streams_replay_with_the_same_start_arguments(stream: list[Any]) -> None:
    check_run(APPROVAL_FLOW, {"id": 1}, stream, run_id="r-7", now_ms=500)


def test_the_single_state_helpers_still_work() -> None:
    state = flowcore.start(APPROVAL_FLOW, {"id": 1}, run_id="r").state
    fitting = T.pending_events(state)
    assert any(isinstance(e, EffectSucceeded) and e.idempotency_key == "r/who#1" for e in fitting)
    assert len(T.hostile_events(state, fitting[:1])) == 14
    assert T.event_of_kind("human-answered", state, 2).answer == "maybe"  # type: ignore[union-attr]
    assert T.apply(state, fitting[0]) is not None
    assert T.apply(state, T.hostile_events(state)[0]) is None
    with pytest.raises(ValueError, match="unknown event kind"):
        T.event_of_kind("nope", state, 0)
    hostile = find(T.events_for(state), lambda e: e in T.hostile_events(state), settings=FIND)
    assert T.apply(state, hostile) is None


# --- the invariant checks catch what they promise ------------------------------------------------

SEQ = """
flow: seq
tools: {t: {class: readonly}}
budget: {steps: 5}
steps:
  - {id: a, call_tool: {tool: t}}
  - {id: b, run_agent: {agent: x, prompt: "p"}}
  - {id: c, run_agent: {agent: x, prompt: "q"}}
"""
SEQ_EVENTS: list[flowcore.Event] = [
    EffectSucceeded(idempotency_key="r/a#1", output=1, at_ms=1),
    EffectSucceeded(idempotency_key="r/b#1", output=2, usage=Usage(steps=1), at_ms=2),
    EffectSucceeded(idempotency_key="r/b#1", output=2, at_ms=3),  # a duplicate: rejected
    EffectSucceeded(idempotency_key="r/c#1", output=3, at_ms=4),
    SignalReceived(signal="late", at_ms=5),  # after settlement: rejected
]


def seq() -> RunHistory:
    return check_run(SEQ, None, SEQ_EVENTS)


def tampered(turn: int, **changes: Any) -> RunHistory:
    h = seq()
    h.turns[turn] = msgspec.structs.replace(h.turns[turn], **changes)
    return h


def test_a_sound_run_passes_every_check_from_events_or_a_history() -> None:
    h = seq()
    assert h.state.settled is not None and h.state.settled.status == "completed"
    assert [t.rejected is not None for t in h.turns] == [False, False, False, True, False, True]
    for check in (check_settlement, check_keys, check_budget, check_work_accounted):
        check(h)
        check(SEQ, None, SEQ_EVENTS)
    check_rejections(h)
    check_determinism(SEQ, None, SEQ_EVENTS)
    wire = [flowcore.event_to_wire(e) for e in SEQ_EVENTS]
    assert check_run(SEQ, None, wire).state == h.state


def test_check_keys_catches_a_key_used_twice_and_a_foreign_key() -> None:
    again = CallTool(tool="t", idempotency_key="r/a#1")
    with pytest.raises(AssertionError, match=r"turn 2 .* key 'r/a#1' emitted again .* turn 0"):
        check_keys(tampered(2, effects=(again,)))
    foreign = CallTool(tool="t", idempotency_key="other/a#1")
    with pytest.raises(AssertionError, match="does not start with the run id 'r/'"):
        check_keys(tampered(2, effects=(foreign,)))


def test_check_settlement_catches_effects_after_or_beside_settled() -> None:
    h = seq()
    settled = h.turns[4].effects[0]
    assert isinstance(settled, Settled)
    extra = CallTool(tool="t", idempotency_key="r/z#1")
    with pytest.raises(AssertionError, match="must hold only settled"):
        check_settlement(tampered(4, effects=(extra, settled)))
    with pytest.raises(AssertionError, match=r"turn 5 .* after the run settled at turn 4"):
        check_settlement(tampered(5, rejected=None))


def test_check_budget_catches_a_share_other_than_the_one_held() -> None:
    h = seq()
    agent = h.turns[2].effects[0]
    assert isinstance(agent, RunAgent)
    grown = msgspec.structs.replace(
        agent, budget_remaining=msgspec.structs.replace(agent.budget_remaining, steps=4)
    )
    with pytest.raises(AssertionError, match="handed a budget other than the one it holds"):
        check_budget(tampered(2, effects=(grown,)))
    negative = msgspec.structs.replace(
        agent, budget_remaining=msgspec.structs.replace(agent.budget_remaining, steps=-1)
    )
    with pytest.raises(AssertionError, match="negative budgetRemaining"):
        check_budget(tampered(2, effects=(negative,)))


def test_check_work_accounted_catches_a_report_that_forgets_work() -> None:
    h = seq()
    settled = h.turns[4].effects[0]
    assert isinstance(settled, Settled) and h.turns[4].state.settled == settled
    short = msgspec.structs.replace(settled, report=settled.report[1:])
    state = msgspec.structs.replace(h.turns[4].state, settled=short)
    with pytest.raises(AssertionError, match=r"'r/a#1' .* is missing from the settled report"):
        check_work_accounted(tampered(4, effects=(short,), state=state))
    wrong = msgspec.structs.replace(
        settled,
        report=(msgspec.structs.replace(settled.report[0], status="failed"), *settled.report[1:]),
    )
    state = msgspec.structs.replace(h.turns[4].state, settled=wrong)
    with pytest.raises(AssertionError, match=r"says 'r/a#1' failed, but .* makes it succeeded"):
        check_work_accounted(tampered(4, effects=(wrong,), state=state))


def test_check_work_accounted_catches_a_stuck_run() -> None:
    h = seq()
    state = h.turns[1].state
    waiting = msgspec.structs.replace(state.waiting, pending=state.waiting.pending.delete("r/b#1"))
    stuck = msgspec.structs.replace(state, waiting=waiting)
    with pytest.raises(AssertionError, match="waits for nothing: stuck"):
        check_work_accounted(tampered(1, state=stuck))


def test_check_rejections_catches_a_mutated_state() -> None:
    with pytest.raises(AssertionError, match="rejecting the event changed the state"):
        check_rejections(tampered(3, input_after=b"changed"))
    with pytest.raises(AssertionError, match="a rejected event emitted effects"):
        check_rejections(tampered(3, effects=(CallTool(tool="t", idempotency_key="r/q#1"),)))


def test_check_determinism_catches_a_history_the_interpreter_does_not_reproduce() -> None:
    h = seq()
    call = h.turns[0].effects[0]
    assert isinstance(call, CallTool)
    edited = msgspec.structs.replace(call, input={"edited": True})
    with pytest.raises(AssertionError, match=r"turn 0 .* effects differ in a second run"):
        check_determinism(tampered(0, effects=(edited,)))
    with pytest.raises(AssertionError, match="rejected None, but a second run"):
        check_determinism(tampered(3, rejected=None))


def test_check_history_runs_every_check_without_rerunning() -> None:
    assert check_history(seq()).run_id == "r"
    assert isinstance(seq().turns[0], Turn)


# --- the state machine ---------------------------------------------------------------------------


class ApprovalMachine(FlowMachine):
    flow = APPROVAL
    input: ClassVar[Any] = {"id": 7}
    outputs: ClassVar[Mapping[str, Any]] = {"lookup": {"name": "Ada"}}


TestApprovalMachine = ApprovalMachine.TestCase
TestApprovalMachine.settings = settings(
    max_examples=25,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def test_the_machine_uses_the_outputs_it_is_given() -> None:
    machine = ApprovalMachine()
    machine.deliver_result(0)
    (ask, _timer) = machine.history.turns[-1].effects
    assert isinstance(ask, AskHuman) and ask.question == 'pay {"name":"Ada"}?'
    machine.answer(0)  # options[0]: yes
    machine.deliver_result(0)  # the payment
    machine.advance_clock(1)  # nothing is due yet
    machine.signal(1)  # sorted(["go", "receipt", "stop"])[1]
    machine.invariants_hold()
    machine.teardown()
    settled = machine.history.state.settled
    assert settled is not None and settled.status == "completed"


def test_a_machine_needs_a_flow() -> None:
    class Empty(FlowMachine):
        pass

    with pytest.raises(TypeError, match="must set flow"):
        run_state_machine_as_test(Empty, settings=settings(max_examples=1, database=None))


# --- the page specs/testing.md runs as written ---------------------------------------------------


def blocks(lang: str) -> list[str]:
    """The ``lang`` code blocks of the page's first section (the runnable example)."""
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("## 0.") : text.index("## 1.")]
    return re.findall(rf"```{lang}\n(.*?)```", section, re.S)


def test_the_docs_example_is_under_20_lines_and_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (spec,) = [b for b in blocks("yaml") if b.startswith("# refund.yaml")]
    (tmp_path / "refund.yaml").write_text(spec, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    python = blocks("python")
    assert python, "specs/testing.md has no python example"
    assert len(python[0].strip().splitlines()) < 20
    namespace: dict[str, Any] = {"__name__": "docs_example"}
    for code in python:
        exec(compile(code, f"<{DOC.name} example>", "exec"), namespace)
    ran = 0
    for name, value in list(namespace.items()):
        if name.startswith("test_") and callable(value):
            value()
            ran += 1
        elif isinstance(value, type) and issubclass(value, unittest.TestCase):
            value.settings = settings(max_examples=10, stateful_step_count=20, deadline=None)  # type: ignore[attr-defined]
            cast(Any, value("runTest")).runTest()
            ran += 1
    assert ran >= 3
