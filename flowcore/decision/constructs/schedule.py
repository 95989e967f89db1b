"""schedule and cancel_scheduled: detached calls that fire after a delay.

``schedule`` returns its id at once and arms the delay timer; when it
fires, the call is issued like any work (budget, ``max_concurrency``), and
its outcome only changes the schedule's status: it never fails the flow.
Arguments that fail the tool's ``input_schema`` fail that call alone: it is
recorded ``failed`` with the ``invalid-input`` error at once, never issued.
A run that ends cancels the schedules not yet due, except those marked
``outlive_run``, which the run waits for before it settles (a cancelled run
waits for nothing).

From outside the run (events, not steps): ``scheduled-cancel-requested``
cancels a pending call and ``scheduled-run-now-requested`` issues one now,
both answering whether the call was still pending (``Decision.scheduled``);
``scheduled-add-requested`` schedules a call to a tool the flow declares
``schedulable``, under an id numbered by the state (``<run>/~scheduled-1``),
or, for one with a ``request``, derived from it (``<run>/~scheduled-r<hex>``):
the same request again adds nothing and answers that id.

A call whose outcome is unknown (its host died while it ran) is issued
again under the same key when its tool is readonly or idempotent, up to
``ATTEMPTS`` issues in all; otherwise (or then) it is ``uncertain``.

A recurring call (``every_ms`` or ``cron``) is issued once per firing:
firing ``n`` has its own delay and call keys (``/delay-n``, ``/call-n`` from
the second; the first keeps a single call's). When a firing's call ends, the
next firing is armed at the first slot after the previous due time that is
not before now (the event's ``at_ms``): slots that came while the call was
out are skipped, never caught up, so firings never overlap. It ends with
its last firing's status after ``count`` firings, or when the next slot
would be after ``until_ms``; a cancel while a firing is out lets that call
finish and ends it ``cancelled``.

``scheduled-replay-requested`` issues a finished call (succeeded, failed or
uncertain) again, same tool and input, under ``<id>/replay-<n>``; the same
``request`` again replays nothing.

Every change to a scheduled call goes through ``Txn.set_sched``, so the
decision's journal names it and hosts log it (``scheduled.changed``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, assert_never

import msgspec

from ..._errors import EventRejected
from ...language.defaults import SCHEDULED_ATTEMPTS
from ...language.spec import MAX_MS, CancelScheduledStep, ScheduleStep
from ...language.times import check_cron, check_zone, next_cron_ms
from .. import keys
from ..outcome import Failed, Ok, err
from ..state import (
    Pending,
    PendingKind,
    Recurrence,
    Sched,
    SchedStatus,
    ScheduledAnswer,
    StepFrame,
)
from ..wire import (
    CallTool,
    CarriedCall,
    ErrorInfo,
    ScheduledAddRequested,
    ScheduledReplayRequested,
)
from .leaf import tool_input_error

if TYPE_CHECKING:
    from ..outcome import Outcome
    from ..txn import Txn

__all__ = [
    "ATTEMPTS",
    "add_outside",
    "begin",
    "begin_cancel",
    "call_done",
    "call_unknown",
    "cancel_outside",
    "carried_recurrence",
    "cancel_pending",
    "delay_over",
    "outstanding",
    "recurrence_of",
    "recurrence_problem",
    "replay",
    "run_now",
    "settle_open",
]

ATTEMPTS = SCHEDULED_ATTEMPTS

_SAFE = ("readonly", "idempotent")
_replace = msgspec.structs.replace


def begin(t: Txn, frame: StepFrame, body: ScheduleStep) -> Outcome | None:
    delay = t.duration(frame, body.delay_ms, "schedule.delay_ms", zero=True)
    every = None
    if body.every_ms is not None:
        every = t.duration(frame, body.every_ms, "schedule.every_ms", zero=False)
    sid = t.key(frame)
    value = body.input.evaluate(t.resolver(frame.env, frame.attempt))
    until: object = None
    if body.until_ms is not None:
        until = body.until_ms.evaluate(t.resolver(frame.env, frame.attempt))
    recur: Recurrence | None = None
    if every is not None or body.cron is not None:
        recur = Recurrence(
            every_ms=every,
            cron=body.cron,
            timezone=body.timezone,
            count=body.count,
            until_ms=until if type(until) is int else None,
        )
    due = _first_due(t.now_ms + delay, recur)
    invalid = tool_input_error(t, body.tool, value)
    if invalid is None and until is not None and (type(until) is not int or until < 0):
        message = f"schedule.until_ms gave {until!r}: expected epoch milliseconds (an integer >= 0)"
        invalid = err("invalid-input", message)
    if invalid is None and recur is not None:
        problem = recurrence_problem(recur, due)
        invalid = None if problem is None else err("invalid-input", f"schedule: {problem}")
    if invalid is not None and t.semantics < 3:
        return Failed(invalid)  # before level 3: the step fails, nothing is scheduled
    if invalid is not None:
        # Bad arguments fail that call and nothing else: it is recorded failed
        # with the schema's error, never issued, and the step goes on.
        sched = Sched(
            SchedStatus.FAILED,
            body.tool,
            value,
            body.outlive_run,
            created_ms=t.now_ms,
            due_ms=due,
            finished_ms=t.now_ms,
            error=invalid,
            recur=recur,
        )
        t.set_sched(sid, sched)
        return Ok(sid)
    sched = Sched(
        SchedStatus.PENDING,
        body.tool,
        value,
        body.outlive_run,
        created_ms=t.now_ms,
        due_ms=due,
        recur=recur,
    )
    t.set_sched(sid, sched)
    t.timer(keys.delay_key(sid), due, PendingKind.SCHEDULE_DELAY, sid)
    return Ok(sid)


# --- recurrence ---------------------------------------------------------------------------


def _first_due(start_ms: int, recur: Recurrence | None) -> int:
    """When a call first fires: at ``start_ms`` (now + delay) for a single call;
    one period later for ``every_ms``; the first cron point after it for ``cron``."""
    if recur is None:
        return start_ms
    if recur.every_ms is not None:
        return start_ms + recur.every_ms
    if recur.cron is None or _cron_problem(recur) is not None:
        return start_ms  # refused by recurrence_problem
    return next_cron_ms(recur.cron, recur.timezone, start_ms)


def _cron_problem(recur: Recurrence) -> str | None:
    if recur.cron is None:
        return None
    try:
        if recur.timezone is not None:
            check_zone(recur.timezone)
        check_cron(recur.cron, recur.timezone)
    except ValueError as exc:
        field = "timezone" if "time zone" in str(exc) else "cron"
        return f"{field}: {exc}"
    return None


def recurrence_problem(recur: Recurrence, first_due: int) -> str | None:
    """What is wrong with a recurrence whose first firing is at ``first_due``
    (the field named first), or None."""
    if recur.every_ms is not None and recur.cron is not None:
        return "every_ms and cron: give one of them, not both"
    if recur.every_ms is None and recur.cron is None:
        for name in ("timezone", "count", "until_ms"):
            if getattr(recur, name) is not None:
                return f"{name}: applies to a recurring call (give every_ms or cron)"
        return None
    if recur.every_ms is not None and not 0 < recur.every_ms <= MAX_MS:
        return f"every_ms: {recur.every_ms} is not from 1 to {MAX_MS:,} ms"
    if recur.timezone is not None and recur.cron is None:
        return "timezone: applies to a cron: use it with cron, not every_ms"
    problem = _cron_problem(recur)
    if problem is not None:
        return problem
    if recur.count is not None and recur.count < 1:
        return f"count: must be at least 1, not {recur.count}"
    if recur.until_ms is not None and recur.until_ms < first_due:
        return f"until_ms: {recur.until_ms} is before the first firing, due at {first_due}"
    return None


def _next_due(sched: Sched, now_ms: int) -> int | None:
    """The next firing of a recurring call whose last firing just ended: the first
    slot after its last due time that is not before now (slots that passed while
    the call was out are skipped); None when it has fired ``count`` times or the
    slot is after ``until_ms``."""
    recur = sched.recur
    assert recur is not None
    if recur.count is not None and sched.fires >= recur.count:
        return None
    last = sched.due_ms
    if recur.every_ms is not None:
        behind = max(0, now_ms - last)
        slots = max(1, -(-behind // recur.every_ms))
        due = last + slots * recur.every_ms
    else:
        assert recur.cron is not None
        due = next_cron_ms(recur.cron, recur.timezone, max(last, now_ms - 1))
    if recur.until_ms is not None and due > recur.until_ms:
        return None
    return due


def carried_recurrence(sched: Sched) -> dict[str, Any]:
    """The recurrence fields of a ``CarriedCall`` for ``sched`` (none for a single call)."""
    recur = sched.recur
    if recur is None:
        return {}
    return {
        "every_ms": recur.every_ms,
        "cron": recur.cron,
        "timezone": recur.timezone,
        "count": recur.count,
        "until_ms": recur.until_ms,
        "fires": sched.fires,
    }


def recurrence_of(call: CarriedCall) -> Recurrence | None:
    """The recurrence a carried call brings into the next incarnation."""
    if call.every_ms is None and call.cron is None:
        return None
    return Recurrence(
        every_ms=call.every_ms,
        cron=call.cron,
        timezone=call.timezone,
        count=call.count,
        until_ms=call.until_ms,
    )


def _call_key(sid: str, sched: Sched) -> str:
    """The key of the call-tool ``sched`` has out (or last had)."""
    if sched.replays:
        return keys.replay_key(sid, sched.replays)
    return keys.call_key(sid, sched.fires)


def begin_cancel(t: Txn, frame: StepFrame, body: CancelScheduledStep) -> Outcome | None:
    sid = body.id.evaluate(t.resolver(frame.env, frame.attempt))
    sched = t.schedules.get(sid) if isinstance(sid, str) else None
    if sched is None or not _cancellable(sched):
        return Ok(False)
    _cancel(t, sid, sched)
    return Ok(True)


def _cancellable(sched: Sched) -> bool:
    """Pending, or a recurring call whose firing is out and still has firings to come."""
    if sched.status is SchedStatus.PENDING:
        return True
    return (
        sched.status is SchedStatus.CALLED
        and sched.recur is not None
        and not sched.replays
        and not sched.stopping
    )


def _cancel(t: Txn, sid: str, sched: Sched) -> None:
    if sched.status is SchedStatus.CALLED:  # a recurring call's firing is out: it finishes
        t.set_sched(sid, _replace(sched, stopping=True))
        return
    t.set_sched(sid, _replace(sched, status=SchedStatus.CANCELLED, finished_ms=t.now_ms))
    t.drop_key(keys.delay_key(sid, sched.fires + 1))


def _issue(t: Txn, sid: str, sched: Sched) -> None:
    if sched.recur is not None:  # a new firing: its own key, its own attempts
        fires = sched.fires + 1
        sched = _replace(sched, status=SchedStatus.CALLED, attempts=1, fires=fires)
    else:
        sched = _replace(sched, status=SchedStatus.CALLED, attempts=sched.attempts + 1)
    t.set_sched(sid, sched)
    effect = CallTool(tool=sched.tool, input=sched.input, idempotency_key=_call_key(sid, sched))
    t.emit_work(sid, effect, sched.tool)


def delay_over(t: Txn, sid: str) -> None:
    """The delay fired: issue the call like any work."""
    _issue(t, sid, t.schedules[sid])


def call_done(t: Txn, sid: str, out: Outcome) -> None:
    """The scheduled call ended: only its status changes."""
    sched = t.schedules[sid]
    error: ErrorInfo | None = None
    match out:
        case Ok():
            status = SchedStatus.SUCCEEDED
        case Failed():
            error = out.error
            unknown = error.type == "outcome-unknown"
            status = SchedStatus.UNCERTAIN if unknown else SchedStatus.FAILED
        case _:
            assert_never(out)
    if sched.recur is not None and not sched.replays and not sched.stopping:
        # The run ending stops a recurring call that does not outlive it, and
        # a cancelled run stops every one (it waits for nothing).
        ending = t.tree.ending
        stops = ending is not None and (not sched.outlive or ending.status == "cancelled")
        due = None if stops else _next_due(sched, t.now_ms)
        if due is not None:
            t.set_sched(sid, _replace(sched, status=SchedStatus.PENDING, due_ms=due, error=error))
            t.timer(keys.delay_key(sid, sched.fires + 1), due, PendingKind.SCHEDULE_DELAY, sid)
            return
    if sched.stopping:
        status = SchedStatus.CANCELLED
    done = _replace(sched, status=status, finished_ms=t.now_ms, error=error)
    t.set_sched(sid, done)


def call_unknown(t: Txn, entry: Pending) -> ErrorInfo | None:
    """The call's outcome is unknown: ``None`` if it may be and was issued again,
    else the ``outcome-unknown`` error it ends with.

    Re-issued under the same key (the tool can deduplicate) only when its
    tool is readonly or idempotent and it was issued fewer than ``ATTEMPTS``
    times; the caller has already stopped waiting for the first issue.
    """
    sid = entry.frame
    sched = t.schedules[sid]
    decl = t.flow.tools.get(sched.tool)
    safe = decl is not None and decl.exec_class in _SAFE
    if safe and sched.attempts < ATTEMPTS:
        t.set_sched(sid, _replace(sched, attempts=sched.attempts + 1))
        # The effect exactly as first emitted, in its place in the report.
        t.issue(sid, entry.sent, entry.member, entry.seq, entry.target)  # type: ignore[arg-type]
        return None
    why = (
        f"was issued {sched.attempts} times without an answer" if safe else "is not safe to repeat"
    )
    return ErrorInfo(
        type="outcome-unknown",
        message=f"scheduled call-tool {_call_key(sid, sched)} may or may not have happened"
        f" and {why}",
    )


def cancel_pending(t: Txn, everything: bool = False) -> None:
    """Cancel scheduled calls not yet due (``everything``: outliving ones too)."""
    for sid, sched in sorted(t.schedules.items()):
        if sched.status is SchedStatus.PENDING and (everything or not sched.outlive):
            _cancel(t, sid, sched)


def settle_open(t: Txn, keep_pending: bool = False) -> None:
    """The run settles: a call still pending is cancelled, one still out is uncertain.

    A run that settles the ordinary way has cancelled or waited for them
    already; one that runs out of budget has not. ``keep_pending``: the run
    continues as new and takes the pending calls with it.
    """
    for sid, sched in sorted(t.schedules.items()):
        if sched.status is SchedStatus.PENDING:
            if keep_pending:
                continue
            _cancel(t, sid, sched)
        elif sched.status is SchedStatus.CALLED:
            error = ErrorInfo(
                type="outcome-unknown",
                message=f"the run settled while scheduled call {sid} was out",
            )
            done = _replace(sched, status=SchedStatus.UNCERTAIN, finished_ms=t.now_ms, error=error)
            t.set_sched(sid, done)


def outstanding(t: Txn) -> bool:
    """Whether an outliving scheduled call is still due or out: the run waits for it."""
    return any(
        sched.outlive and sched.status in (SchedStatus.PENDING, SchedStatus.CALLED)
        for sched in t.schedules.values()
    )


# --- from outside the run ---------------------------------------------------------------


def cancel_outside(t: Txn, sid: str) -> None:
    """``scheduled-cancel-requested``: cancel ``sid`` if it is still pending (or
    recurring, with a firing out: that call finishes and no other follows)."""
    sched = t.schedules.get(sid)
    done = sched is not None and _cancellable(sched)
    if sched is not None and done:
        t.check_clock()
        if t.halt is not None:
            return
        _cancel(t, sid, sched)
    t.answer = ScheduledAnswer(id=sid, done=done)


def run_now(t: Txn, sid: str) -> None:
    """``scheduled-run-now-requested``: issue ``sid`` now if it is still pending."""
    sched = t.schedules.get(sid)
    done = sched is not None and sched.status is SchedStatus.PENDING
    if sched is not None and done:
        t.check_clock()
        if t.halt is not None:
            return
        t.drop_key(keys.delay_key(sid, sched.fires + 1))
        _issue(t, sid, _replace(sched, due_ms=t.now_ms))
        if t.halt is not None:
            return
    t.answer = ScheduledAnswer(id=sid, done=done)


def add_outside(t: Txn, ev: ScheduledAddRequested) -> None:
    """``scheduled-add-requested``: a new pending call to a schedulable tool."""
    decl = t.flow.tools.get(ev.tool)
    if decl is None or not decl.schedulable:
        names = sorted(name for name, d in t.flow.tools.items() if d.schedulable)
        listed = ", ".join(repr(n) for n in names) if names else "none"
        why = "is not declared" if decl is None else "is not declared schedulable"
        raise EventRejected(
            f"tool {ev.tool!r} {why} in flow {t.flow.id!r}: the schedulable tools are {listed}"
        )
    if ev.delay_ms > MAX_MS:
        raise EventRejected(f"delay {ev.delay_ms} ms is over the limit of {MAX_MS:,} ms")
    recur = Recurrence(
        every_ms=ev.every_ms,
        cron=ev.cron,
        timezone=ev.timezone,
        count=ev.count,
        until_ms=ev.until_ms,
    )
    due = _first_due(t.now_ms + ev.delay_ms, recur)
    problem = recurrence_problem(recur, due)
    if problem is not None:
        raise EventRejected(f"scheduled call to {ev.tool!r}: {problem}")
    recurring = recur if recur.every_ms is not None or recur.cron is not None else None
    if t.tree.ending is not None:
        raise EventRejected(
            f"run {t.run_id} is ending ({t.tree.ending.status}): no call can be scheduled"
        )
    invalid = tool_input_error(t, ev.tool, ev.input)
    if invalid is not None:
        raise EventRejected(invalid.message)
    t.check_clock()
    if t.halt is not None:
        return
    if ev.request is not None:
        sid = keys.requested_schedule_id(t.key_run, ev.request)
        if sid in t.schedules:  # asked before: nothing is added twice
            t.answer = ScheduledAnswer(id=sid, done=False)
            return
    else:
        n = t.scheduled_added + 1
        sid = keys.outside_schedule_id(t.key_run, n)
        t.scheduled_added = n
    sched = Sched(
        SchedStatus.PENDING,
        ev.tool,
        ev.input,
        created_ms=t.now_ms,
        due_ms=due,
        outside=True,
        recur=recurring,
    )
    t.set_sched(sid, sched)
    t.timer(keys.delay_key(sid), due, PendingKind.SCHEDULE_DELAY, sid)
    t.answer = ScheduledAnswer(id=sid, done=True)


_REPLAYABLE = (SchedStatus.SUCCEEDED, SchedStatus.FAILED, SchedStatus.UNCERTAIN)


def replay(t: Txn, ev: ScheduledReplayRequested) -> None:
    """``scheduled-replay-requested``: issue a finished call again, as a new attempt."""
    sid = ev.schedule_id
    sched = t.schedules.get(sid)
    if sched is None:
        raise EventRejected(f"no scheduled call {sid!r} in run {t.run_id}: nothing to replay")
    if ev.request is not None and ev.request in sched.replay_requests:
        t.answer = ScheduledAnswer(id=sid, done=True)  # replayed already for this request
        return
    if sched.status not in _REPLAYABLE:
        why = {
            SchedStatus.PENDING: "is still pending",
            SchedStatus.CALLED: "has a call out",
            SchedStatus.CANCELLED: "was cancelled",
        }.get(sched.status, f"is {sched.status}")
        raise EventRejected(
            f"scheduled call {sid!r} {why}: only a succeeded, failed or uncertain call is replayed"
        )
    if t.tree.ending is not None:
        raise EventRejected(
            f"run {t.run_id} is ending ({t.tree.ending.status}): no call can be replayed"
        )
    invalid = tool_input_error(t, sched.tool, sched.input)
    if invalid is not None:
        raise EventRejected(f"scheduled call {sid!r} cannot be replayed: {invalid.message}")
    t.check_clock()
    if t.halt is not None:
        return
    requests = sched.replay_requests if ev.request is None else (*sched.replay_requests, ev.request)
    again = _replace(
        sched,
        status=SchedStatus.CALLED,
        replays=sched.replays + 1,
        replay_requests=requests,
        attempts=1,
        due_ms=t.now_ms,
        finished_ms=None,
        error=None,
        stopping=False,
    )
    t.set_sched(sid, again)
    effect = CallTool(tool=again.tool, input=again.input, idempotency_key=_call_key(sid, again))
    t.emit_work(sid, effect, again.tool)
    if t.halt is not None:
        return
    t.answer = ScheduledAnswer(id=sid, done=True)
