"""flowcore schedules as Temporal Schedules.

A schedule declared in a spec (``flowcore.schedules.Schedule``) becomes a
Temporal Schedule with the same id as the schedule's name, mapped field by
field (``to_temporal``): the cron in its time zone and the interval with its
offset (``ScheduleSpec``), the overlap policy and the catch-up window
(``SchedulePolicy``), and pause, note and limit (``ScheduleState``). Its
action starts the ``flowcore`` workflow with workflow id ``<name>``, to which
Temporal appends the slot: the run id is ``<name>-<slot in RFC 3339 UTC>``
(``nightly-2026-12-02T06:00:00Z``), one per slot, which Temporal refuses to
start twice. The input template travels in ``RunArgs.input`` with
``RunArgs.schedule`` set; the workflow evaluates it when the run starts, with
``schedule.at`` read from the run's ``TemporalScheduledStartTime``. The
schedule's owner travels in ``RunArgs.principal``: every run it starts (each
slot, a trigger, a backfill) has it, as a run started with it would.

What differs from the local host is said in ``specs/temporal.md``
("Schedules"): chiefly, Temporal's jitter is random, not derived.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.client import (
    Schedule,
    ScheduleActionExecutionStartWorkflow,
    ScheduleActionStartWorkflow,
    ScheduleDescription,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleState,
)

from flowcore import schedules

from ._types import WORKFLOW_NAME, RunArgs

__all__ = ["OVERLAP", "describe", "to_temporal"]

OVERLAP = {
    schedules.Overlap.SKIP: ScheduleOverlapPolicy.SKIP,
    schedules.Overlap.BUFFER_ONE: ScheduleOverlapPolicy.BUFFER_ONE,
    schedules.Overlap.ALLOW_ALL: ScheduleOverlapPolicy.ALLOW_ALL,
    schedules.Overlap.CANCEL_OTHER: ScheduleOverlapPolicy.CANCEL_OTHER,
}


def _ms(ms: int) -> timedelta:
    return timedelta(milliseconds=ms)


def to_temporal(schedule: schedules.Schedule, args: RunArgs, task_queue: str) -> Schedule:
    """The Temporal Schedule of ``schedule``; ``args`` are the runs' (spec, flows, tools)."""
    args.schedule = schedule.name
    args.input = schedule.input.source
    args.run_id = ""  # the workflow id Temporal gives each run: <name>-<slot>
    spec = ScheduleSpec(
        cron_expressions=[schedule.cron] if schedule.cron is not None else [],
        intervals=(
            [ScheduleIntervalSpec(every=_ms(schedule.every_ms), offset=_ms(schedule.offset_ms))]
            if schedule.every_ms is not None
            else []
        ),
        time_zone_name=schedule.timezone,
        jitter=_ms(schedule.jitter_ms) if schedule.jitter_ms else None,
    )
    return Schedule(
        action=ScheduleActionStartWorkflow(
            WORKFLOW_NAME,
            args,
            id=schedule.name,
            task_queue=task_queue,
            static_summary=f"flowcore {schedule.flow_id} (schedule {schedule.name})",
        ),
        spec=spec,
        policy=SchedulePolicy(
            overlap=OVERLAP[schedule.overlap],
            catchup_window=_ms(schedule.catchup_window_ms),
        ),
        state=ScheduleState(
            note=schedule.note or None,
            paused=schedule.paused,
            limited_actions=schedule.limit is not None,
            remaining_actions=schedule.limit or 0,
        ),
    )


def _epoch_ms(moment: datetime) -> int:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def describe(
    name: str, description: ScheduleDescription, flowcore_definition: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A Temporal Schedule as ``flowcore temporal schedule show`` prints it.

    ``definition`` is what Temporal holds (policy and state as they are now);
    its cadence is the flowcore definition's when given (Temporal turns a cron
    into calendars), else Temporal's intervals.
    """
    sched = description.schedule
    info = description.info
    spec, state, policy = sched.spec, sched.state, sched.policy
    definition: dict[str, Any] = {}
    if spec.cron_expressions:
        definition["cron"] = spec.cron_expressions[0]
        if spec.time_zone_name:
            definition["timezone"] = spec.time_zone_name
    for interval in spec.intervals:
        definition["every"] = int(interval.every.total_seconds() * 1000)
        if interval.offset:
            definition["offset"] = int(interval.offset.total_seconds() * 1000)
    if flowcore_definition is not None:
        for key in ("cron", "timezone", "every", "offset", "input"):
            definition.pop(key, None)
            if key in flowcore_definition:
                definition[key] = flowcore_definition[key]
    elif not spec.cron_expressions and spec.calendars:
        definition["calendars"] = [repr(c) for c in spec.calendars]
    definition["overlap"] = policy.overlap.name.lower()
    if policy.catchup_window:
        definition["catchup_window"] = int(policy.catchup_window.total_seconds() * 1000)
    if spec.jitter:
        definition["jitter"] = int(spec.jitter.total_seconds() * 1000)
    return {
        "name": name,
        "definition": definition,
        "paused": state.paused,
        "note": state.note or "",
        "remaining": state.remaining_actions if state.limited_actions else None,
        "nextSlotsMs": [_epoch_ms(t) for t in info.next_action_times[:5]],
        "running": [
            a.workflow_id
            for a in info.running_actions
            if isinstance(a, ScheduleActionExecutionStartWorkflow)
        ],
        "actions": [
            {
                "action": "started",
                "slotMs": _epoch_ms(a.scheduled_at),
                "atMs": _epoch_ms(a.started_at),
                "runId": (
                    a.action.workflow_id
                    if isinstance(a.action, ScheduleActionExecutionStartWorkflow)
                    else None
                ),
            }
            for a in info.recent_actions
        ],
        "numActions": info.num_actions,
        "missedCatchupWindow": info.num_actions_missed_catchup_window,
        "skippedOverlap": info.num_actions_skipped_overlap,
    }
