"""The transitions: which event answers what, and what each answer does.

Theory of operation
-------------------

A run is a tree of *frames*. A ``SeqFrame`` runs a list of steps one after
another; a ``StepFrame`` is one running step. Composite steps (switch,
parallel, for_each, repeat, try, declared teams) own child lists. Every frame
has a deterministic id built from step ids and loop indices (``keys``), so
ids, idempotency keys and effects are the same on every replay.

Everything the run waits for is in ``State.waiting.pending``, by idempotency
key, with a ``PendingKind``: work effects, questions, signal waits, and
timers by role. An event names a key (or, for signals, a signal name). The
tables below say which event kinds may answer which pending kinds; anything
else is rejected with ``EventRejected`` and the state is untouched. Every
check comes before the first write (the handlers below check, then change):
a rejection leaves even a transaction that other events were applied to as
it was, but for the clock ``apply`` moves first (``Txn.checkpoint``). An
accepted answer is routed to the construct that owns the key, which lets its
frame react; when a step finishes, its outcome travels up the parent chain
(``Txn.propagate``) until some frame starts new work or the root list ends
(``ending``). The cost of an event is therefore proportional to the depth
of the tree and the number of branches the event touches, never to the
length of the history.

A key the run stopped waiting for (its step timed out, lost a race, was
cancelled) keeps a ``Resolution``: its late answer is accepted once, recorded
in the report and otherwise ignored, and a second one is a duplicate.

Order of effects within one decision is fixed: the order in which the
interpreter reaches them, depth first, branches and members in declared
order; a step's timeout timer comes before the step's own effect; at start
the wall-clock deadline timer comes first. A decision that settles the run
holds exactly one effect, ``settled``.

This module must never do I/O, read a clock or draw a random number.
"""

from __future__ import annotations

from typing import Any, Final, assert_never

import msgspec

from .._data import short
from .._errors import EventRejected
from ..language.defaults import DEFAULT_UNKNOWN_REISSUES
from ..language.spec import CallToolStep, RunSubflowStep, SignalRunStep, Step, duration_text
from . import ending as _ending
from . import updates
from .constructs import leaf, repeat, schedule, team
from .halt import Exhausted
from .outcome import Failed, Ok, Outcome, err
from .state import Ending, How, Pending, PendingKind, ReportRow, Resolution, StepFrame
from .txn import Txn
from .wire import (
    CallTool,
    CancelRequested,
    Effect,
    EffectFailed,
    EffectOutcomeUnknown,
    EffectSucceeded,
    ErrorInfo,
    Event,
    HumanAnswered,
    KeyEvent,
    RunAgent,
    RunSubflow,
    RunTeam,
    ScheduledAddRequested,
    ScheduledCancelRequested,
    ScheduledReplayRequested,
    ScheduledRunNowRequested,
    SignalReceived,
    SignalRun,
    SubflowSettled,
    TimerFired,
    UpdateRequested,
    Usage,
)

__all__ = [
    "ANSWERS",
    "DEFAULT_UNKNOWN_REISSUES",
    "HEARTBEAT_TIMEOUT",
    "TIMERS",
    "WORK_EFFECTS",
    "apply",
    "describe",
]


# --- the tables ---------------------------------------------------------------------

TIMERS: Final = frozenset(
    {
        PendingKind.SLEEP,
        PendingKind.STEP_TIMEOUT,
        PendingKind.ATTEMPT_TIMEOUT,
        PendingKind.BACKOFF,
        PendingKind.DEADLINE,
        PendingKind.TICK,
        PendingKind.QUESTION_TIMEOUT,
        PendingKind.SIGNAL_TIMEOUT,
        PendingKind.SCHEDULE_DELAY,
    }
)
"""The pending kinds that are timers: a ``sleep`` effect answered by ``timer-fired``."""

_WORK: Final = frozenset({PendingKind.WORK, PendingKind.SCHEDULED_CALL})
# Work being cancelled that the run waits for (cancellation: wait_cancellation_completed):
# any answer says it has ended.
_ENDS: Final = _WORK | {PendingKind.CANCELLING}

ANSWERS: Final[dict[type[Event], frozenset[PendingKind]]] = {
    EffectSucceeded: _ENDS,
    # A child a run waits for after its step (parent_close: wait) ends as work does.
    EffectFailed: _ENDS | {PendingKind.CHILD},
    EffectOutcomeUnknown: _ENDS | {PendingKind.CHILD},
    SubflowSettled: frozenset({PendingKind.WORK, PendingKind.CHILD}),
    HumanAnswered: frozenset({PendingKind.QUESTION}),
    TimerFired: TIMERS,
    # These name no key: a signal goes to the first step waiting for it by
    # name (or is buffered), a cancel to the whole run.
    SignalReceived: frozenset({PendingKind.SIGNAL}),
    CancelRequested: frozenset(),
    # These name a schedule id, not a pending key: an id that is not pending
    # is answered (``Decision.scheduled``), not rejected; an add names a tool.
    ScheduledCancelRequested: frozenset(),
    ScheduledRunNowRequested: frozenset(),
    ScheduledAddRequested: frozenset(),
    ScheduledReplayRequested: frozenset(),
    # A request for one of the flow's updates: it starts a handler (``updates``).
    UpdateRequested: frozenset(),
}
"""Event class -> the pending kinds it may answer. Any other pairing is rejected."""

_ALL_WORK: Final[frozenset[type[Effect]]] = frozenset(
    {RunAgent, RunTeam, CallTool, RunSubflow, SignalRun}
)
WORK_EFFECTS: Final[dict[type[KeyEvent], frozenset[type[Effect]]]] = {
    EffectSucceeded: _ALL_WORK - {RunSubflow},  # a child run answers with subflow-settled
    EffectFailed: _ALL_WORK,  # the host could not start the child
    EffectOutcomeUnknown: _ALL_WORK,
    SubflowSettled: frozenset({RunSubflow}),
}
"""Event class -> the work effects (classes) pending ``work`` it may answer."""

_DESCRIBE: Final = {
    PendingKind.SCHEDULED_CALL: "scheduled call-tool",
    PendingKind.QUESTION: "ask-human",
    PendingKind.SIGNAL: "await-signal",
    PendingKind.SLEEP: "sleep",
    PendingKind.CHILD: "run-subflow",
    PendingKind.CANCELLING: "work being cancelled",
}


def describe(kind: PendingKind, effect: str = "") -> str:
    """What a pending key waits for, in wire words."""
    if kind is PendingKind.WORK:
        return effect
    return _DESCRIBE.get(kind, f"{kind.value} timer")


# --- applying an event ---------------------------------------------------------------


def apply(t: Txn, event: Event) -> None:
    """Apply one event (the body of ``advance``).

    A handler that stops the transition (``Txn.stop``: a budget ran out, the
    run continues as new) returns at once; its halt is handled here, last."""
    if event.at_ms > t.now_ms:
        t.now_ms = event.at_ms
    match event:
        case EffectSucceeded():
            _succeeded(t, event)
        case EffectFailed():
            _failed(t, event)
        case EffectOutcomeUnknown():
            _unknown(t, event)
        case HumanAnswered():
            _answered(t, event)
        case TimerFired():
            _timer(t, event)
        case SignalReceived():
            _signal(t, event)
        case SubflowSettled():
            _subflow(t, event)
        case CancelRequested():
            _cancel(t, event)
        case ScheduledCancelRequested():
            schedule.cancel_outside(t, event.schedule_id)
            if t.halt is None:
                _ending.maybe_finish(t)  # it may have been the last outliving call
        case ScheduledRunNowRequested():
            schedule.run_now(t, event.schedule_id)
        case ScheduledAddRequested():
            schedule.add_outside(t, event)
        case ScheduledReplayRequested():
            schedule.replay(t, event)
        case UpdateRequested():
            updates.accept(t, event)
        case _:
            assert_never(event)
    w = t.waiting
    if t.halt is None and t.settled is None and w.queue_head < w.queue_tail:
        t.drain_queue()
    if t.halt is not None:
        _ending.halted(t)


def _take(t: Txn, key: str, answer: type[KeyEvent]) -> Pending | Resolution:
    """What an ``answer`` event for ``key`` answers: the pending entry, or for a
    late answer the resolution of the abandoned key (now marked late).

    Raises ``EventRejected`` when the tables say the event cannot answer it.
    """
    accepts = ANSWERS[answer]
    entry = t.pending.get(key)
    if entry is not None:
        if entry.kind not in accepts:
            what = describe(entry.kind, entry.effect)
            raise EventRejected(f"{_kind(answer)} cannot answer {what} {key}", key)
        sent = entry.sent
        if isinstance(sent, RunSubflow) and sent.detached:
            # A detached child is a root run of its own: the host says it started it.
            if answer is SubflowSettled:
                raise EventRejected(
                    f"a detached subflow answers with effect-succeeded once started, "
                    f"its settlement is not reported: {key}",
                    key,
                )
            return entry
        if entry.kind is PendingKind.WORK and type(sent) not in WORK_EFFECTS[answer]:
            kind = _kind(answer)
            if answer is EffectSucceeded:
                raise EventRejected(
                    f"a subflow answers with subflow-settled, not effect-succeeded: {key}", key
                )
            raise EventRejected(f"{kind} cannot answer {entry.effect} {key}", key)
        return entry
    how = t.waiting.resolved.get(key)
    kind = _kind(answer)
    if how is None:
        # Answered keys are not remembered one by one (that would cost a
        # second map update per event): unknown and duplicate read the same.
        raise EventRejected(
            f"{kind} for {key}: no such effect is pending "
            "(an unknown key, or one already answered)",
            key,
        )
    if how.how is not How.ABANDONED and how.how is not How.DETACHED:
        raise EventRejected(f"duplicate {kind}: {key} is already {how.how.value}", key)
    assert how.waited is not None
    if how.waited not in accepts:
        raise EventRejected(f"{kind} cannot answer {describe(how.waited)} {key}", key)
    return how


def _kind(answer: type[KeyEvent]) -> str:
    """The wire kind of an event class, for what a rejection says."""
    tag = answer.__struct_config__.tag
    assert isinstance(tag, str)
    return tag


def _late(t: Txn, key: str, how: Resolution, status: str | None = None) -> None:
    """Accept a late answer once; for work, the report shows how it really ended."""
    t.resolve(key, Resolution(How.LATE))
    row = how.row
    if row is not None and status is not None:
        t.add_row(ReportRow(row.key, row.seq, row.effect, row.target, status))


def _succeeded(t: Txn, ev: EffectSucceeded) -> None:
    key = ev.idempotency_key
    entry = _take(t, key, EffectSucceeded)
    if isinstance(entry, Resolution):
        _late(t, key, entry, "succeeded")
        t.charge_usage(ev.usage)
        return
    if entry.kind is PendingKind.CANCELLING:
        _cancel_ended(t, key, entry, "succeeded", ev.usage)
        return
    t.work_answered(key, entry, "succeeded")
    if ev.usage is not None:
        _charge_keeping(t, entry, ev.usage, ev.output)
        if t.halt is not None:
            return
    t.check_clock()
    if t.halt is not None:
        return
    sent = entry.sent
    if isinstance(sent, CallTool):
        invalid = leaf.tool_output_error(t, sent.tool, ev.output)
        if invalid is not None:  # the call ran; what it gave cannot be used
            _work_done(t, key, entry, Failed(invalid))
            return
    _work_done(t, key, entry, Ok(ev.output))


def _charge_keeping(t: Txn, entry: Pending, usage: Usage | None, output: Any) -> None:
    """Charge ``usage``; when that exhausts the budget of a flow with
    ``on_budget_exhausted``, the work's step first keeps its output as its result,
    so that the final steps can read what the last work found (then the
    transition stops: the caller checks ``halt``)."""
    t.charge_usage(usage)
    if t.halt is None:
        return
    halt = t.take_halt()
    assert halt is not None
    if t.flow.on_exhausted is not None and entry.kind is PendingKind.WORK and not entry.member:
        frame = t.frames.get(entry.frame)
        if isinstance(frame, StepFrame):
            t.finish_step(frame.id, Ok(output), frame)  # recorded, not handed on
    t.stop(halt)


def _failed(t: Txn, ev: EffectFailed) -> None:
    key = ev.idempotency_key
    entry = _take(t, key, EffectFailed)
    if isinstance(entry, Resolution):
        _late(t, key, entry, "failed")
        t.charge_usage(ev.usage)
        return
    error = ev.error
    watched = getattr(entry.sent, "heartbeat_timeout_ms", None) is not None
    if entry.kind is PendingKind.CANCELLING:
        # Its report row reads as if it had not been cancelled: a heartbeat
        # timeout of work not safe to repeat leaves its outcome unknown.
        unknown = watched and error.type == HEARTBEAT_TIMEOUT and not _safe_sent(t, entry)
        _cancel_ended(t, key, entry, "uncertain" if unknown else "failed", ev.usage)
        return
    if watched and error.type == HEARTBEAT_TIMEOUT and entry.kind is PendingKind.WORK:
        _heartbeat_timeout(t, key, entry, ev)
        return
    t.work_answered(key, entry, "failed")
    if ev.usage is not None:
        t.charge_usage(ev.usage)
        if t.halt is not None:
            return
    t.check_clock()
    if t.halt is not None:
        return
    if entry.kind is PendingKind.CHILD:
        _ending.maybe_finish(t)
        return
    _work_done(t, key, entry, Failed(error))


def _cancel_ended(t: Txn, key: str, entry: Pending, status: str, usage: Usage | None) -> None:
    """Work of ``cancellation: wait_cancellation_completed`` the run stopped waiting
    for has ended: whatever the answer (the failure the host reports for a handler
    that stopped when cancelled, a result, an unknown outcome), it is recorded
    in the report, its usage charged and its output ignored; the step (or run)
    that waited for it goes on (language.md §6)."""
    t.work_answered(key, entry, status)
    t.charge_usage(usage)
    if t.halt is None:
        t.check_clock()
    if t.halt is None:
        t.cancellation_ended(key, entry)


HEARTBEAT_TIMEOUT: Final = "heartbeat-timeout"


def _heartbeat_timeout(t: Txn, key: str, entry: Pending, ev: EffectFailed) -> None:
    """The host stopped work that did not heartbeat in time (language.md §6).

    The host reports the fact; what it means depends on the work's class. Work
    safe to repeat (a ``readonly`` or ``idempotent`` tool) failed: a retryable
    ``heartbeat-timeout``, its ``details`` the last heartbeat's, which the step
    keeps for its next attempt's effect. Anything else may have happened: the
    step fails with ``outcome-unknown`` caused by the timeout, as for an unknown
    outcome of that class (§9.3); it is never re-issued.
    """
    frame = t.frame(entry.frame)
    step = t.step_of(frame)
    details = ev.error.details
    timeout = ErrorInfo(type=HEARTBEAT_TIMEOUT, message=ev.error.message, details=details)
    if details is not None:
        t.set_frame(frame, heartbeat_details=details)
    safe = not entry.member and _reissue_class(t, step)
    t.work_answered(key, entry, "failed" if safe else "uncertain")
    if ev.usage is not None:
        t.charge_usage(ev.usage)
        if t.halt is not None:
            return
    t.check_clock()
    if t.halt is not None:
        return
    if safe:
        error = msgspec.structs.replace(timeout, retryable=True)
    else:
        message = f"{entry.effect} {key} may or may not have happened: it stopped heartbeating"
        error = msgspec.structs.replace(err("outcome-unknown", message), cause=timeout)
    _work_done(t, key, entry, Failed(error))


def _subflow(t: Txn, ev: SubflowSettled) -> None:
    key = ev.idempotency_key
    ok = ev.status == "completed"
    entry = _take(t, key, SubflowSettled)
    if isinstance(entry, Resolution):
        _late(t, key, entry, "succeeded" if ok else "failed")
        t.charge_usage(ev.usage)
        return
    t.work_answered(key, entry, "succeeded" if ok else "failed")
    _charge_keeping(t, entry, ev.usage, ev.output if ok else None)
    if t.halt is None:
        t.check_clock()
    if t.halt is not None:
        return
    if entry.kind is PendingKind.CHILD:  # its outcome no longer matters, only that it ended
        _ending.maybe_finish(t)
        return
    if ok:
        _work_done(t, key, entry, Ok(ev.output))
    else:
        error = err(f"subflow-{ev.status}", f"subflow {key} settled {ev.status}")
        if ev.error is not None:
            error = msgspec.structs.replace(error, cause=ev.error)
        _work_done(t, key, entry, Failed(error))


def _unknown(t: Txn, ev: EffectOutcomeUnknown) -> None:
    key = ev.idempotency_key
    entry = _take(t, key, EffectOutcomeUnknown)
    if isinstance(entry, Resolution):
        _late(t, key, entry)  # the row stands: its outcome is still unknown
        return
    if entry.kind is PendingKind.CANCELLING:
        _cancel_ended(t, key, entry, "uncertain", None)
        return
    t.check_clock()
    if t.halt is not None:
        return
    if entry.kind is PendingKind.CHILD:  # nobody waits for its result: it ended, unknown how
        t.work_answered(key, entry, "uncertain")
        _ending.maybe_finish(t)
        return
    if entry.kind is PendingKind.SCHEDULED_CALL:
        t.work_answered(key, entry, "uncertain")
        error = schedule.call_unknown(t, entry)
        if error is not None:
            _work_done(t, key, entry, Failed(error))
        return
    frame = t.frame(entry.frame)
    step = t.step_of(frame)
    if _may_reissue(t, step, entry, frame):
        # Same key: the tool can deduplicate. Counts as an issue of the step.
        # The row stands in the report should the re-issue exhaust the budget.
        t.work_answered(key, entry, "uncertain")
        t.set_frame(frame, unknowns=frame.unknowns + 1)
        # The effect exactly as first emitted; issuing it again refreshes its budget.
        t.issue(entry.frame, entry.sent, entry.member, entry.seq, entry.target)  # type: ignore[arg-type]
        return
    t.work_answered(key, entry, "uncertain")
    why = (
        f"was issued {frame.attempt + frame.unknowns} times without an answer"
        if _reissue_class(t, step)
        else "is not safe to repeat"
    )
    error = err("outcome-unknown", f"{entry.effect} {key} may or may not have happened and {why}")
    _work_done(t, key, entry, Failed(error))


def _safe_sent(t: Txn, entry: Pending) -> bool:
    """Whether work, from the effect sent, is safe to repeat (as ``_reissue_class``
    says of its step): a readonly or idempotent tool, not a team member."""
    sent = entry.sent
    if entry.member or not isinstance(sent, CallTool):
        return False
    decl = t.flow.tools.get(sent.tool)
    return decl is not None and decl.exec_class in ("readonly", "idempotent")


def _reissue_class(t: Txn, step: Step) -> bool:
    body = step.body
    if isinstance(body, CallToolStep):
        decl = t.flow.tools.get(body.tool)
        return decl is not None and decl.exec_class in ("readonly", "idempotent")
    # The key names the child run; a signal is delivered once per key.
    return isinstance(body, (RunSubflowStep, SignalRunStep))


def _may_reissue(t: Txn, step: Step, entry: Pending, frame: StepFrame) -> bool:
    if entry.member or not _reissue_class(t, step):
        return False
    limit = step.retry.max_attempts if step.retry else DEFAULT_UNKNOWN_REISSUES
    return frame.attempt + frame.unknowns < limit


def _work_done(t: Txn, key: str, entry: Pending, out: Outcome) -> None:
    if entry.kind is PendingKind.SCHEDULED_CALL:
        schedule.call_done(t, entry.frame, out)
        _ending.maybe_finish(t)
        return
    frame = t.frame(entry.frame)
    if not entry.member:
        t.step_ended(frame.id, out, frame)
        return
    res = team.member_done(t, frame, entry, key, out)
    if res is not None:
        t.step_ended(frame.id, res)  # re-read: member_done updated the frame


def _answered(t: Txn, ev: HumanAnswered) -> None:
    key = ev.idempotency_key
    entry = _take(t, key, HumanAnswered)
    if isinstance(entry, Resolution):
        if entry.step:
            leaf.check_answer(t, key, entry.step, ev.answer)
        _late(t, key, entry)
        return
    leaf.answered(t, key, entry, ev.answer, ev.principal)


def _signal(t: Txn, ev: SignalReceived) -> None:
    t.check_clock()
    if t.halt is not None:
        return
    w = t.waiting
    slot = leaf.signal_slot(ev.signal, ev.key)
    waiters = w.waiters if ev.key is None else w.keyed_waiters
    if slot in waiters and leaf.signalled(t, ev.signal, ev.payload, ev.key):
        return
    w = t.waiting
    limit = t.flow.limits.max_buffered_signals
    total = sum(len(v) for v in w.signals.values())
    total += sum(len(v) for v in w.keyed_signals.values())
    if total >= limit:
        raise EventRejected(
            f"signal {short(ev.signal)} rejected: {total} signals already buffered (limit {limit})"
        )
    if ev.key is None:
        signals = w.signals.set(slot, (*w.signals.get(slot, ()), ev.payload))
        t.waiting = msgspec.structs.replace(w, signals=signals)
    else:
        keyed = w.keyed_signals.set(slot, (*w.keyed_signals.get(slot, ()), ev.payload))
        t.waiting = msgspec.structs.replace(w, keyed_signals=keyed)


def _timer(t: Txn, ev: TimerFired) -> None:
    key = ev.idempotency_key
    entry = _take(t, key, TimerFired)
    if isinstance(entry, Resolution):
        _late(t, key, entry)
        return
    t.check_clock()
    if t.halt is not None:
        return
    t.stop_waiting(key)
    kind = entry.kind
    if kind is PendingKind.DEADLINE:
        t.stop(Exhausted("wall-clock"))
        return
    if kind is PendingKind.SCHEDULE_DELAY:
        schedule.delay_over(t, entry.frame)
        return
    frame = t.frame(entry.frame)
    match kind:
        case PendingKind.SLEEP:
            leaf.slept(t, frame)
        case PendingKind.STEP_TIMEOUT | PendingKind.ATTEMPT_TIMEOUT if frame.closing is not None:
            pass  # its outcome is decided; it waits for calls being cancelled to end
        case PendingKind.STEP_TIMEOUT:
            t.abandon_children(frame.id)
            step = t.step_of(frame)
            assert step.timeout_ms is not None
            after = duration_text(step.timeout_ms)
            error = err("timeout", f"step {step.id!r} timed out after {after}")
            t.step_ended(frame.id, Failed(error))
        case PendingKind.ATTEMPT_TIMEOUT:
            # This attempt's work stops; the step's retry may begin another.
            t.abandon_children(frame.id)
            step = t.step_of(frame)
            assert step.attempt_timeout_ms is not None
            after = duration_text(step.attempt_timeout_ms)
            message = f"attempt {frame.attempt} of step {step.id!r} timed out after {after}"
            t.step_ended(frame.id, Failed(err("timeout", message, retryable=True)))
        case PendingKind.BACKOFF:
            t.retry_now(frame)
        case PendingKind.TICK:
            repeat.tick(t, frame)
        case PendingKind.QUESTION_TIMEOUT:
            leaf.question_timed_out(t, frame)
        case PendingKind.SIGNAL_TIMEOUT:
            leaf.signal_timed_out(t, frame)
        case (
            PendingKind.WORK
            | PendingKind.SCHEDULED_CALL
            | PendingKind.QUESTION
            | PendingKind.SIGNAL
            | PendingKind.DEADLINE
            | PendingKind.SCHEDULE_DELAY
            | PendingKind.CHILD
            | PendingKind.CANCELLING
        ):
            raise AssertionError(f"{kind} is not a timer of a frame")
        case _:
            assert_never(kind)


def _cancel(t: Txn, ev: CancelRequested) -> None:
    error = err("cancelled", ev.reason or "cancel requested")
    if t.tree.ending is not None and not t.frames:
        # Only outliving scheduled calls are left: cancel them and settle.
        t.check_clock()
        if t.halt is not None:
            return
        schedule.cancel_pending(t, everything=True)
        _ending.settle(t, "cancelled", None, error, None)
        return
    ending = t.tree.ending
    if ending is not None and not (ending.status == "completed" and t.frames):
        raise EventRejected("the run is already compensating; it settles when they finish")
    # Else the run's steps completed and it waits for its running updates: they stop.
    t.check_clock()
    if t.halt is not None:
        return
    t.abandon_all()
    schedule.cancel_pending(t, everything=True)
    _ending.wind_down(t, Ending("cancelled", None, error))
