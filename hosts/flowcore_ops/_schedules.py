"""The operations on a run's scheduled calls (list, add, cancel, run now) and
on schedules (add, list, show, pause, resume, trigger, backfill, delete)."""

from __future__ import annotations

from typing import Any

import msgspec

from flowcore_handlers import ScheduledCallView

from ._common import epoch_ms, guard, owned, running
from ._declare import Context, OperationError
from ._runs import summarize
from ._types import (
    AddScheduledInput,
    AddSchedulesInput,
    BackfillInput,
    CallInput,
    ReplayScheduledInput,
    RunSummary,
    ScheduleChange,
    ScheduledCallList,
    ScheduledInput,
    ScheduledView,
    ScheduleInput,
    ScheduleList,
    ScheduleNames,
)

__all__ = [
    "add_scheduled",
    "add_schedules",
    "backfill_schedule",
    "cancel_scheduled",
    "delete_schedule",
    "list_schedules",
    "pause_schedule",
    "replay_scheduled",
    "resume_schedule",
    "run_scheduled_now",
    "scheduled",
    "show_schedule",
    "trigger_schedule",
]


def _view(call: ScheduledCallView) -> ScheduledView:
    return ScheduledView(
        id=call.id,
        run_id=call.run_id,
        tool=call.tool,
        input=call.input,
        status=call.status,
        created_ms=call.created_ms,
        due_ms=call.due_ms,
        attempts=call.attempts,
        finished_ms=call.finished_ms,
        error=None if call.error is None else msgspec.to_builtins(call.error),
        outside=call.outside,
        every_ms=call.every_ms,
        cron=call.cron,
        timezone=call.timezone,
        count=call.count,
        until_ms=call.until_ms,
        fires=call.fires,
        replays=call.replays,
    )


async def scheduled(ctx: Context, given: ScheduledInput) -> ScheduledCallList:
    """The scheduled calls of one run, or (admin) of every run."""
    if given.run_id is None:
        if not ctx.principal.admin:
            raise OperationError(
                "invalid-request", "runId: the scheduled calls of every run need admin access"
            )
    else:
        await owned(ctx, given.run_id)
    calls = await guard(ctx.host.scheduled(given.run_id, given.tool, given.status))
    return ScheduledCallList(calls=[_view(c) for c in calls])


async def add_scheduled(ctx: Context, given: AddScheduledInput) -> ScheduledView:
    running(await owned(ctx, given.run_id))
    call_id = await guard(
        ctx.host.add_scheduled(
            given.run_id,
            given.tool,
            given.input,
            given.delay_ms,
            every_ms=given.every_ms,
            cron=given.cron,
            timezone=given.timezone,
            count=given.count,
            until_ms=given.until_ms,
        )
    )
    return await _listed(ctx, given.run_id, call_id, "added")


async def _listed(ctx: Context, run_id: str, call_id: str, done: str) -> ScheduledView:
    for call in await guard(ctx.host.scheduled(run_id)):
        if call.id == call_id:
            return _view(call)
    raise OperationError("rejected", f"scheduled call {call_id!r} was {done} but is not listed")


async def replay_scheduled(ctx: Context, given: ReplayScheduledInput) -> ScheduledView:
    """A finished call (succeeded, failed or uncertain) issued again, same tool and
    input, as a new attempt; refused for an unknown id or a call still pending or
    out. The same ``request`` again replays nothing (a retried request replays once)."""
    running(await owned(ctx, given.run_id))
    call_id = _full(given.run_id, given.call_id)
    await guard(ctx.host.replay_scheduled(given.run_id, call_id, request=given.request))
    return await _listed(ctx, given.run_id, call_id, "replayed")


def _full(run_id: str, call_id: str) -> str:
    return call_id if call_id.startswith(run_id + "/") else f"{run_id}/{call_id}"


async def cancel_scheduled(ctx: Context, given: CallInput) -> RunSummary:
    """A call that is not pending (an unknown id, a call issued or finished) is
    refused, and nothing is written."""
    running(await owned(ctx, given.run_id))
    if not await guard(ctx.host.cancel_scheduled(given.run_id, given.call_id)):
        raise OperationError(
            "not-pending",
            f"no pending scheduled call {_full(given.run_id, given.call_id)!r} in run"
            f" {given.run_id!r}: nothing to cancel",
        )
    return await summarize(ctx, given.run_id)


async def run_scheduled_now(ctx: Context, given: CallInput) -> RunSummary:
    running(await owned(ctx, given.run_id))
    if not await guard(ctx.host.run_scheduled_now(given.run_id, given.call_id)):
        raise OperationError("not-pending", f"no pending scheduled call {given.call_id!r}")
    return await summarize(ctx, given.run_id)


# --- schedules ---------------------------------------------------------------------------


async def _schedule(ctx: Context, name: str) -> dict[str, Any]:
    try:
        return await guard(ctx.host.schedule(name))
    except OperationError as exc:
        if exc.code in ("rejected", "unknown-schedule"):
            raise OperationError("unknown-schedule", f"no schedule {name[:200]!r}") from None
        raise


async def add_schedules(ctx: Context, given: AddSchedulesInput) -> ScheduleNames:
    path = ctx.flows(given.flow)
    owner = ctx.principal.name if given.owner is None else given.owner
    return ScheduleNames(names=list(await guard(ctx.host.add_schedules(path, owner=owner))))


async def list_schedules(ctx: Context, given: object) -> ScheduleList:
    names = await guard(ctx.host.schedule_names())
    return ScheduleList(schedules=[await _schedule(ctx, name) for name in names])


async def show_schedule(ctx: Context, given: ScheduleInput) -> dict[str, Any]:
    return await _schedule(ctx, given.name)


async def pause_schedule(ctx: Context, given: ScheduleChange) -> dict[str, Any]:
    await _schedule(ctx, given.name)
    await guard(ctx.host.pause_schedule(given.name, given.note))
    return await _schedule(ctx, given.name)


async def resume_schedule(ctx: Context, given: ScheduleChange) -> dict[str, Any]:
    await _schedule(ctx, given.name)
    await guard(ctx.host.resume_schedule(given.name, given.note))
    return await _schedule(ctx, given.name)


async def trigger_schedule(ctx: Context, given: ScheduleInput) -> RunSummary | None:
    """The run the trigger started, where the host knows it at once (else nothing)."""
    await _schedule(ctx, given.name)
    run_id = await guard(ctx.host.trigger_schedule(given.name))
    return None if run_id is None else await summarize(ctx, run_id)


async def backfill_schedule(ctx: Context, given: BackfillInput) -> dict[str, Any]:
    await _schedule(ctx, given.name)
    start, end = epoch_ms(given.start), epoch_ms(given.end)
    assert start is not None and end is not None
    await guard(ctx.host.backfill_schedule(given.name, start, end), "cannot-backfill")
    return await _schedule(ctx, given.name)


async def delete_schedule(ctx: Context, given: ScheduleInput) -> None:
    await _schedule(ctx, given.name)
    await guard(ctx.host.delete_schedule(given.name))
