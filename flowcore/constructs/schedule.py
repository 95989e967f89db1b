"""schedule and cancel_scheduled: detached calls that fire after a delay.

``schedule`` returns its id at once and arms the delay timer; when it
fires, the call is issued like any work (budget, ``max_concurrency``), and
its outcome only changes the schedule's status: it never fails the flow.
A run that ends cancels the schedules not yet due, except those marked
``outlive_run``, which the run waits for before it settles (a cancelled run
waits for nothing).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from .. import _keys as keys
from .._outcome import OK
from .._spec import CancelScheduledStep, ScheduleStep
from .._state import PendingKind, Sched, SchedStatus, StepFrame
from .._wire import CallTool

if TYPE_CHECKING:
    from .._outcome import Outcome
    from .._txn import Txn

__all__ = ["begin", "begin_cancel", "call_done", "cancel_pending", "delay_over", "outstanding"]


def begin(t: Txn, frame: StepFrame, body: ScheduleStep) -> Outcome | None:
    delay = t.duration(frame, body.delay_ms, "schedule.delay_ms", zero=True)
    sid = t.key(frame)
    value = body.input.evaluate(t.resolver(frame.env, frame.attempt))
    t.schedules = t.schedules.set(
        sid, Sched(SchedStatus.PENDING, body.tool, value, body.outlive_run)
    )
    t.timer(keys.delay_key(sid), t.now_ms + delay, PendingKind.SCHEDULE_DELAY, sid)
    return (OK, sid)


def begin_cancel(t: Txn, frame: StepFrame, body: CancelScheduledStep) -> Outcome | None:
    sid = body.id.evaluate(t.resolver(frame.env, frame.attempt))
    sched = t.schedules.get(sid) if isinstance(sid, str) else None
    if sched is None or sched.status is not SchedStatus.PENDING:
        return (OK, False)
    _cancel(t, sid, sched)
    return (OK, True)


def _cancel(t: Txn, sid: str, sched: Sched) -> None:
    t.schedules = t.schedules.set(sid, msgspec.structs.replace(sched, status=SchedStatus.CANCELLED))
    t.drop_key(keys.delay_key(sid))


def delay_over(t: Txn, sid: str) -> None:
    """The delay fired: issue the call like any work."""
    sched = t.schedules[sid]
    t.schedules = t.schedules.set(sid, msgspec.structs.replace(sched, status=SchedStatus.CALLED))
    effect = CallTool(tool=sched.tool, input=sched.input, idempotency_key=keys.call_key(sid))
    t.emit_work(sid, effect, sched.tool)


def call_done(t: Txn, sid: str, ok: bool, error_type: str | None) -> None:
    """The scheduled call ended: only its status changes."""
    sched = t.schedules[sid]
    if ok:
        status = SchedStatus.SUCCEEDED
    elif error_type == "outcome-unknown":
        status = SchedStatus.UNCERTAIN
    else:
        status = SchedStatus.FAILED
    t.schedules = t.schedules.set(sid, msgspec.structs.replace(sched, status=status))


def cancel_pending(t: Txn, everything: bool = False) -> None:
    """Cancel scheduled calls not yet due (``everything``: outliving ones too)."""
    for sid, sched in list(t.schedules.items()):
        if sched.status is SchedStatus.PENDING and (everything or not sched.outlive):
            _cancel(t, sid, sched)


def outstanding(t: Txn) -> bool:
    """Whether an outliving scheduled call is still due or out: the run waits for it."""
    return any(
        sched.outlive and sched.status in (SchedStatus.PENDING, SchedStatus.CALLED)
        for sched in t.schedules.values()
    )
