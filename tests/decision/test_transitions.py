"""The transition tables are complete and true, keys read back, and a state says what it waits for.

``_transitions.ANSWERS`` says which event kind may answer which pending kind
(and ``WORK_EFFECTS`` which work effects). The property below walks runs of
one flow that holds every pending kind at once, and in every reachable state
sends every keyed event kind at every pending key: each either moves the
machine or raises ``EventRejected`` (nothing else), and it moves exactly when
the tables say it may. Every key a run emits reads back with ``parse_key``;
``waiting_for`` and ``plan`` agree with what the run waits for.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import flowcore
from flowcore import (
    EffectFailed,
    EffectOutcomeUnknown,
    EffectSucceeded,
    ErrorInfo,
    Event,
    EventRejected,
    HumanAnswered,
    KeyRole,
    ScheduledAddRequested,
    ScheduledCancelRequested,
    ScheduledRunNowRequested,
    SubflowSettled,
    TimerFired,
    parse_key,
)
from flowcore.decision.state import PendingKind, ScheduledAnswer, State
from flowcore.decision.transitions import ANSWERS, TIMERS, WORK_EFFECTS
from flowcore.testing import events_for

# One flow that waits for every kind of thing: work (a tool, an agent, a
# child flow), a question, a signal, and every timer role.
EVERYTHING = """
flow: everything
budget: {wall_clock_ms: 100000000, steps: 200}
tools: {t: {class: idempotent}, later: {schedulable: true}}
steps:
  - id: all
    parallel:
      mode: all_settled
      branches:
        work:
          - id: call
            call_tool: {tool: t}
            timeout_ms: 50000
            attempt_timeout_ms: 20000
            retry: {max_attempts: 3, initial_interval_ms: 100, errors: ['*']}
        agent:
          - {id: think, run_agent: {agent: a, prompt: hi}}
        child:
          - {id: sub, run_subflow: {flow: kid}}
        ask:
          - id: q
            ask_human: {question: ok?, options: [yes, no], timeout_ms: 60000}
        wait:
          - {id: sig, await_signal: {signal: go, timeout_ms: 70000}}
        nap:
          - {id: zz, sleep: {for_ms: 80000}}
        loop:
          - id: tick
            repeat:
              every_ms: 1000
              max_fires: 2
              steps: [{id: each, call_tool: {tool: t}}]
        later:
          - {id: sched, schedule: {tool: later, delay_ms: 500, outlive_run: true}}
"""

KEYED = (
    "effect-succeeded",
    "effect-failed",
    "effect-outcome-unknown",
    "subflow-settled",
    "human-answered",
    "timer-fired",
)


def _event(kind: str, key: str, at: int) -> Event:
    if kind == "effect-succeeded":
        return EffectSucceeded(idempotency_key=key, output=1, at_ms=at)
    if kind == "effect-failed":
        error = ErrorInfo(type="boom", message="boom", retryable=True)
        return EffectFailed(idempotency_key=key, error=error, at_ms=at)
    if kind == "effect-outcome-unknown":
        return EffectOutcomeUnknown(idempotency_key=key, at_ms=at)
    if kind == "subflow-settled":
        return SubflowSettled(idempotency_key=key, status="completed", output=1, at_ms=at)
    if kind == "human-answered":
        return HumanAnswered(idempotency_key=key, answer="yes", at_ms=at)
    assert kind == "timer-fired"
    return TimerFired(idempotency_key=key, at_ms=at)


def _tag(cls: type[Any]) -> str:
    tag = cls.__struct_config__.tag
    assert isinstance(tag, str)
    return tag


# The tables are keyed by event class; these read them by wire kind.
_CLASS = {_tag(cls): cls for cls in ANSWERS}
_WORK = {_tag(cls): {_tag(e) for e in effects} for cls, effects in WORK_EFFECTS.items()}


def _allowed(kind: str, kind_of_pending: PendingKind, effect: str) -> bool:
    if kind_of_pending not in ANSWERS[_CLASS[kind]]:
        return False
    if kind_of_pending is not PendingKind.WORK:
        return True
    return effect in _WORK[kind]


def check_tables(state: State) -> set[tuple[str, PendingKind]]:
    """Every keyed event kind at every pending key: moves iff the tables allow it."""
    seen: set[tuple[str, PendingKind]] = set()
    for key, entry in sorted(state.waiting.pending.items()):
        for kind in KEYED:
            event = _event(kind, key, state.now_ms)
            allowed = _allowed(kind, entry.kind, entry.effect)
            try:
                flowcore.advance(state, event)
                moved = True
            except EventRejected as exc:
                moved = False
                assert exc.key == key
            assert moved == allowed, (kind, entry.kind, entry.effect, key)
            seen.add((kind, entry.kind))
    return seen


def test_one_flow_waits_for_every_pending_kind() -> None:
    flow = flowcore.parse_flow(EVERYTHING)
    d = flowcore.start(flow, run_id="r")
    kinds = {e.kind for e in d.state.waiting.pending.values()}
    # A backoff and a scheduled call come later, a child waited for after its
    # step (tests/decision/test_children.py) and a call being cancelled that a step waits
    # for (tests/decision/test_cancellation.py); everything else is there now.
    later = {
        PendingKind.BACKOFF,
        PendingKind.SCHEDULED_CALL,
        PendingKind.CHILD,
        PendingKind.CANCELLING,
    }
    assert kinds == set(PendingKind) - later
    fail = EffectFailed(idempotency_key="r/call#1", error=ErrorInfo(type="x", message="x"), at_ms=1)
    d = flowcore.advance(d.state, fail)
    d = flowcore.advance(d.state, TimerFired(idempotency_key="r/sched#1/delay", at_ms=500))
    kinds = {e.kind for e in d.state.waiting.pending.values()}
    assert {PendingKind.BACKOFF, PendingKind.SCHEDULED_CALL} <= kinds
    check_tables(d.state)


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_every_event_kind_at_every_pending_kind_moves_or_is_rejected(data: st.DataObject) -> None:
    flow = flowcore.parse_flow(EVERYTHING)
    state = flowcore.start(flow, run_id="r").state
    seen: set[tuple[str, PendingKind]] = set()
    for _ in range(12):
        seen |= check_tables(state)
        check_outside(state)
        if state.settled is not None:
            break
        event = data.draw(events_for(state))
        try:
            state = flowcore.advance(state, event).state
        except EventRejected:
            pass
    assert seen  # something was waited for


def check_outside(state: State) -> None:
    """The scheduled-call events from outside, in any state: a cancel or run-now
    of any id moves the run (answering whether the call was pending), an add
    moves it exactly for a schedulable tool while the run is not ending."""
    if state.settled is not None:
        return
    at = state.now_ms
    ghost = f"{state.run_id}/~scheduled-999"
    for sid in (*sorted(state.schedules), ghost, "elsewhere/x#1"):
        was = state.schedules.get(sid)
        pending = was is not None and was.status == "pending"
        for event in (
            ScheduledCancelRequested(schedule_id=sid, at_ms=at),
            ScheduledRunNowRequested(schedule_id=sid, at_ms=at),
        ):
            d = flowcore.advance(state, event)
            assert d.scheduled == ScheduledAnswer(id=sid, done=pending)
            after = d.state.schedules.get(sid)
            if not pending:
                assert after == was  # nothing changes but the clock
                assert d.effects == () or isinstance(d.effects[-1], flowcore.Settled)
            elif isinstance(event, ScheduledCancelRequested):
                assert after is not None and after.status == "cancelled"
                assert f"{sid}/delay" in flowcore.plan(d).drop
            elif d.state.settled is None:
                assert after is not None and after.status == "called" and after.attempts == 1
                assert f"{sid}/delay" in flowcore.plan(d).drop
    ending = state.tree.ending is not None
    for tool in ("later", "t", "nowhere"):
        add = ScheduledAddRequested(tool=tool, input={"n": 1}, delay_ms=10, at_ms=at)
        try:
            d = flowcore.advance(state, add)
        except EventRejected as exc:
            assert tool != "later" or ending, exc.reason
            if tool != "later":
                assert repr(tool) in exc.reason and "'later'" in exc.reason
            continue
        assert tool == "later" and not ending
        sid = f"{state.run_id}/~scheduled-{state.scheduled_added + 1}"
        assert d.scheduled == ScheduledAnswer(id=sid, done=True)
        assert parse_key(sid, state.run_id).role is KeyRole.OUTSIDE_SCHEDULE
        assert parse_key(f"{sid}/delay", state.run_id).role is KeyRole.SCHEDULE_DELAY
        assert d.state.schedules[sid].status == "pending"
        assert d.effects == (flowcore.Sleep(until_ms=at + 10, idempotency_key=f"{sid}/delay"),)


def test_the_tables_cover_every_kind() -> None:
    outside = {"subflow-settled", "update-requested"}  # kinds the testing kit may not send
    assert set(_CLASS) <= set(flowcore.testing.EVENT_KINDS) | outside
    assert set(flowcore.testing.EVENT_KINDS) <= set(_CLASS)
    assert TIMERS <= set(PendingKind)
    answered = set().union(*ANSWERS.values())
    assert answered == set(PendingKind)  # every pending kind has an event that answers it


# --- keys ---------------------------------------------------------------------------------


def test_every_key_a_run_emits_reads_back() -> None:
    flow = flowcore.parse_flow(EVERYTHING)
    d = flowcore.start(flow, run_id="r-1")
    for effect in d.effects:
        key = getattr(effect, "idempotency_key", None)
        assert key is not None
        info = parse_key(key, run_id="r-1")
        assert info.run_id == "r-1"
        entry = d.state.waiting.pending[key]
        frame = d.state.tree.frames.get(entry.frame)
        if info.role is KeyRole.DEADLINE:
            assert entry.kind is PendingKind.DEADLINE
            continue
        if info.role is KeyRole.SCHEDULE_DELAY:
            assert info.step == "sched"
            continue
        assert frame is not None and info.step == getattr(frame, "step", None), key
        if info.role is KeyRole.TICK:
            assert info.loops == (1,)


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("r-1/per[2]/triage#2", ("triage", "per[2]/triage", (2,), 2, KeyRole.EFFECT, None)),
        ("r-1/review/critic#1", ("review", "review", (), 1, KeyRole.MEMBER, "critic")),
        ("r-1/fetch/timeout", ("fetch", "fetch", (), None, KeyRole.STEP_TIMEOUT, None)),
        ("r-1/ok#1/timeout", ("ok", "ok", (), 1, KeyRole.WAIT_TIMEOUT, None)),
        ("r-1/fetch#1/backoff", ("fetch", "fetch", (), 1, KeyRole.BACKOFF, None)),
        ("r-1/poll[3]/tick", ("poll", "poll", (3,), None, KeyRole.TICK, None)),
        ("r-1/$deadline", (None, "", (), None, KeyRole.DEADLINE, None)),
        ("r-1/n#1/delay", ("n", "n", (), 1, KeyRole.SCHEDULE_DELAY, None)),
        ("r-1/n#1/call", ("n", "n", (), 1, KeyRole.SCHEDULE_CALL, None)),
        ("r-1/sw#2/a#1", ("a", "sw#2/a", (), 1, KeyRole.EFFECT, None)),
        ("r-1/x[1]/y[2]/z#3", ("z", "x[1]/y[2]/z", (1, 2), 3, KeyRole.EFFECT, None)),
    ],
)
def test_parse_key(key: str, expected: tuple[Any, ...]) -> None:
    info = parse_key(key)
    assert (info.step, info.path, info.loops, info.attempt, info.role, info.member) == expected


def test_parse_key_of_a_child_run_and_refusals() -> None:
    info = parse_key("r-1/sub#1/inner#1", run_id="r-1/sub#1")
    assert (info.run_id, info.step, info.attempt) == ("r-1/sub#1", "inner", 1)
    for bad in ["nope", "r/", "r/a", "r/a#x", "r/a/b/c#1", "r/a#1/later"]:
        with pytest.raises(ValueError, match="not a flowcore key"):
            parse_key(bad)
    with pytest.raises(ValueError, match="does not belong to run"):
        parse_key("r-2/a#1", run_id="r-1")


# --- what a state waits for, and what a host does ------------------------------------------


def test_waiting_for_lists_everything_with_deadlines() -> None:
    flow = flowcore.parse_flow(EVERYTHING)
    d = flowcore.start(flow, run_id="r", now_ms=10)
    w = flowcore.waiting_for(d.state)
    assert w.status == "running" and w.now_ms == 10
    assert [x.key for x in w.work] == ["r/call#1", "r/sub#1", "r/think#1", "r/tick[1]/each#1"][:3]
    assert {x.effect["kind"] for x in w.work} == {"call-tool", "run-agent", "run-subflow"}
    (q,) = w.questions
    assert (q.key, q.step, q.question, q.options, q.deadline_ms) == (
        "r/q#1",
        "q",
        "ok?",
        ("yes", "no"),
        60010,
    )
    (s,) = w.signals
    assert (s.signal, s.deadline_ms) == ("go", 70010)
    roles = {t.role: t.due_ms for t in w.timers}
    assert roles["sleep"] == 80010 and roles["deadline"] == 100000010
    assert roles["timeout"] == 50010 and roles["tick"] == 1010
    (sched,) = w.scheduled
    assert (sched.status, sched.due_ms, sched.outlive_run) == ("pending", 510, True)
    assert w.budget.steps == 200 - 3
    wire = msgspec.json.decode(msgspec.json.encode(w))
    assert wire["questions"][0]["deadlineMs"] == 60010  # camelCase, JSON-ready


def test_waiting_for_shows_held_work_and_buffered_signals() -> None:
    flow = flowcore.parse_flow(
        """
flow: held
limits: {max_concurrency: 1}
tools: {t: {}}
steps:
  - id: p
    parallel:
      branches:
        a: [{id: a, call_tool: {tool: t}}]
        b: [{id: b, call_tool: {tool: t}}]
  - {id: s, await_signal: {signal: go}}
"""
    )
    d = flowcore.start(flow, run_id="r")
    w = flowcore.waiting_for(d.state)
    assert [(x.key, x.held) for x in w.work] == [("r/a#1", False), ("r/b#1", True)]
    d = flowcore.advance(
        d.state, flowcore.SignalReceived(signal="go", payload={"early": True}, at_ms=1)
    )
    assert flowcore.waiting_for(d.state).buffered == {"go": ({"early": True},)}


def test_plan_says_what_to_start_arm_drop_and_cancel() -> None:
    flow = flowcore.parse_flow(
        """
flow: race
tools: {t: {}}
steps:
  - id: p
    parallel:
      mode: race
      branches:
        fast: [{id: f, call_tool: {tool: t}, timeout_ms: 1000}]
        slow: [{id: s, call_tool: {tool: t}}]
        human: [{id: q, ask_human: {question: "?"}}]
"""
    )
    d = flowcore.start(flow, run_id="r")
    p = flowcore.plan(d)
    assert [e.idempotency_key for e in p.start] == ["r/f#1", "r/s#1"]
    assert [e.idempotency_key for e in p.arm] == ["r/f/timeout"]
    assert [e.idempotency_key for e in p.ask] == ["r/q#1"]
    assert p.drop == p.cancel == p.withdraw == () and p.settled is None
    d2 = flowcore.advance(d.state, EffectSucceeded(idempotency_key="r/f#1", output=1, at_ms=5))
    p2 = flowcore.plan(d2)
    # The race is won: the loser's work is cancelled, the question withdrawn,
    # the winner's timeout dropped; the winner's own key is not (it was answered).
    assert p2.cancel == ("r/s#1",)
    assert p2.withdraw == ("r/q#1",)
    assert p2.drop == ("r/f/timeout",)
    assert p2.settled is not None and p2.settled.status == "completed"


def test_plan_at_settlement_stops_what_was_still_waited_for() -> None:
    flow = flowcore.parse_flow(
        """
flow: deadline
budget: {wall_clock_ms: 1000}
tools: {t: {}}
steps:
  - {id: a, call_tool: {tool: t}}
  - {id: later, schedule: {tool: t, delay_ms: 5000, outlive_run: true}}
"""
    )
    d = flowcore.start(flow, run_id="r")
    d = flowcore.advance(d.state, EffectSucceeded(idempotency_key="r/a#1", output=1, at_ms=5))
    assert flowcore.plan(d).settled is None  # it waits for the outliving call
    d = flowcore.advance(d.state, flowcore.CancelRequested(reason="stop", at_ms=6))
    p = flowcore.plan(d)
    assert p.settled is not None and p.settled.status == "cancelled"
    assert set(p.drop) == {"r/$deadline", "r/later#1/delay"}


def test_a_transaction_carries_every_field_of_the_state() -> None:
    """A field added to ``State`` is carried by every transaction, or this fails."""
    from flowcore.decision.interp import ABOVE
    from flowcore.decision.state import Journal
    from flowcore.decision.txn import RECORDS, Txn

    assert set(State.__struct_fields__) == {*RECORDS, "flow", "run", "journal"}
    slots = {name for cls in Txn.__mro__ for name in getattr(cls, "__slots__", ())}
    assert set(RECORDS) <= slots  # Txn's layers: txn_records holds the slots
    flow = flowcore.parse_flow(EVERYTHING)
    state = flowcore.start(flow, run_id="r").state
    frozen = Txn(state, ABOVE).freeze()
    assert frozen == msgspec.structs.replace(state, journal=Journal())
    for name in State.__struct_fields__:
        if name != "journal":
            assert getattr(frozen, name) is getattr(state, name), name
