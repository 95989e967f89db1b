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

Every change to a scheduled call goes through ``Txn.set_sched``, so the
decision's journal names it and hosts log it (``scheduled.changed``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, assert_never

import msgspec

from ..._errors import EventRejected
from ...language.defaults import SCHEDULED_ATTEMPTS
from ...language.spec import MAX_MS, CancelScheduledStep, ScheduleStep
from .. import keys
from ..outcome import Failed, Ok
from ..state import Pending, PendingKind, Sched, SchedStatus, ScheduledAnswer, StepFrame
from ..wire import CallTool, ErrorInfo, ScheduledAddRequested
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
    "cancel_pending",
    "delay_over",
    "outstanding",
    "run_now",
    "settle_open",
]

ATTEMPTS = SCHEDULED_ATTEMPTS

_SAFE = ("readonly", "idempotent")
_replace = msgspec.structs.replace


def begin(t: Txn, frame: StepFrame, body: ScheduleStep) -> Outcome | None:
    delay = t.duration(frame, body.delay_ms, "schedule.delay_ms", zero=True)
    sid = t.key(frame)
    value = body.input.evaluate(t.resolver(frame.env, frame.attempt))
    due = t.now_ms + delay
    invalid = tool_input_error(t, body.tool, value)
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
        )
        t.set_sched(sid, sched)
        return Ok(sid)
    sched = Sched(
        SchedStatus.PENDING, body.tool, value, body.outlive_run, created_ms=t.now_ms, due_ms=due
    )
    t.set_sched(sid, sched)
    t.timer(keys.delay_key(sid), due, PendingKind.SCHEDULE_DELAY, sid)
    return Ok(sid)


def begin_cancel(t: Txn, frame: StepFrame, body: CancelScheduledStep) -> Outcome | None:
    sid = body.id.evaluate(t.resolver(frame.env, frame.attempt))
    sched = t.schedules.get(sid) if isinstance(sid, str) else None
    if sched is None or sched.status is not SchedStatus.PENDING:
        return Ok(False)
    _cancel(t, sid, sched)
    return Ok(True)


def _cancel(t: Txn, sid: str, sched: Sched) -> None:
    t.set_sched(sid, _replace(sched, status=SchedStatus.CANCELLED, finished_ms=t.now_ms))
    t.drop_key(keys.delay_key(sid))


def _issue(t: Txn, sid: str, sched: Sched) -> None:
    t.set_sched(sid, _replace(sched, status=SchedStatus.CALLED, attempts=sched.attempts + 1))
    effect = CallTool(tool=sched.tool, input=sched.input, idempotency_key=keys.call_key(sid))
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
        message=f"scheduled call-tool {keys.call_key(sid)} may or may not have happened and {why}",
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
    """``scheduled-cancel-requested``: cancel ``sid`` if it is still pending."""
    sched = t.schedules.get(sid)
    done = sched is not None and sched.status is SchedStatus.PENDING
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
        t.drop_key(keys.delay_key(sid))
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
    due = t.now_ms + ev.delay_ms
    sched = Sched(
        SchedStatus.PENDING, ev.tool, ev.input, created_ms=t.now_ms, due_ms=due, outside=True
    )
    t.set_sched(sid, sched)
    t.timer(keys.delay_key(sid), due, PendingKind.SCHEDULE_DELAY, sid)
    t.answer = ScheduledAnswer(id=sid, done=True)
