"""The Temporal host's administration: Temporal Schedules made from a spec's
schedules (list, show, pause, resume, trigger, backfill, delete), and retention,
which is the namespace's (``delete`` and ``prune`` are refused)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from temporalio.client import (
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleBackfill,
    ScheduleListActionStartWorkflow,
    ScheduleOverlapPolicy,
    ScheduleUpdate,
    ScheduleUpdateInput,
)
from temporalio.service import RPCError, RPCStatusCode

import flowcore
from flowcore_handlers import Deleted

from ._host_base import TemporalBase, TemporalRefusal, TemporalUnknownSchedule
from ._schedules import describe, to_temporal
from ._types import WORKFLOW_NAME, RunArgs, RunArgsError, TemporalHostError, check_run_args


class TemporalAdmin(TemporalBase):
    """Schedules and retention of the Temporal host (see ``TemporalHost``)."""

    async def delete(
        self, run_id: str, force: bool = False, *, timeout: float | None = None
    ) -> Deleted:
        """``TemporalRefusal``: the namespace's retention period removes closed runs."""
        raise TemporalRefusal(
            f"delete run {run_id!r}", "the namespace's retention period removes closed runs"
        )

    async def prune(
        self,
        settled_before_ms: int,
        statuses: Iterable[str] | None = None,
        *,
        dry_run: bool = False,
    ) -> Deleted:
        """``TemporalRefusal``: the namespace's retention period removes closed runs."""
        raise TemporalRefusal("prune runs", "the namespace's retention period removes closed runs")

    # --- schedules -----------------------------------------------------------------------

    async def add_schedules(
        self,
        spec: str | Path,
        *,
        flows: Iterable[str | Path] | Mapping[str, str] = (),
        tools: str | None = None,
        owner: str | None = None,
    ) -> list[str]:
        """Create a Temporal Schedule for each schedule ``spec`` declares (or update it).

        The mapping is ``flowcore_temporal._schedules.to_temporal``. A schedule
        that exists gets the new spec, policies and action; Temporal keeps its
        state (paused, note, remaining actions) and its recent actions.
        ``owner``: the principal of every run it starts (in the action's
        ``RunArgs.principal``, as a started run's; None: no one's).
        """
        text, source = self._spec_text(spec)
        flow = flowcore.parse_flow(text, source_name=source)
        if not flow.schedules:
            raise TemporalHostError(f"{source}: the spec declares no schedules")
        known = self._known_flows(spec, flows, flow.id, text)
        await self._check_attributes(flow, known)  # the runs it starts upsert them
        for schedule in flow.schedules.values():
            args = RunArgs(spec=text, flows=known, tools=tools, source_name=source, principal=owner)
            target = to_temporal(schedule, args, self.task_queue)
            try:
                check_run_args(args)
            except RunArgsError as exc:
                raise TemporalHostError(str(exc)) from None
            try:
                await self._call(self.client.create_schedule(schedule.name, target), schedule.name)
            except ScheduleAlreadyRunningError:

                def replace(update: ScheduleUpdateInput, new: Schedule = target) -> ScheduleUpdate:
                    new.state = update.description.schedule.state
                    return ScheduleUpdate(schedule=new)

                handle = self.client.get_schedule_handle(schedule.name)
                await self._call(handle.update(replace), schedule.name)
        return list(flow.schedules)

    async def schedules(self) -> list[str]:
        """The ids of the Temporal Schedules whose action starts a flowcore run.

        Temporal lists schedules from its visibility store: a schedule just
        created (or deleted) may show (or go) a moment later."""
        names = []
        async for item in await self._call(self.client.list_schedules(), "schedules"):
            action = item.schedule.action if item.schedule is not None else None
            if isinstance(action, ScheduleListActionStartWorkflow):
                if action.workflow == WORKFLOW_NAME:
                    names.append(item.id)
        return sorted(names)

    async def schedule_names(self) -> list[str]:
        """The names of the schedules (``schedules``)."""
        return await self.schedules()

    async def schedule(self, name: str) -> dict[str, Any]:
        """The schedule as Temporal describes it: definition, state, next slots, actions,
        and its owner (the principal of the runs it starts)."""
        handle = self.client.get_schedule_handle(name)
        description = await self._schedule_call(handle.describe(), name)
        definition, owner = await self._definition(name, description)
        return describe(name, description, definition) | {"owner": owner}

    async def _definition(
        self, name: str, description: Any
    ) -> tuple[dict[str, Any] | None, str | None]:
        """The flowcore definition the schedule was made from, read back from its action's
        ``RunArgs`` (Temporal keeps a cron only as calendars), and its owner (``RunArgs.
        principal``); None where it is not there."""
        action = description.schedule.action
        if not isinstance(action, ScheduleActionStartWorkflow) or not action.args:
            return None, None
        try:
            [raw] = await self.client.data_converter.decode(list(action.args[:1]), [dict])
            owner = raw.get("principal")
            flow = flowcore.parse_flow(raw["spec"], source_name=str(raw.get("source_name")))
            found = flow.schedules.get(raw.get("schedule") or name)
        except Exception:  # someone else's schedule, or one made by hand
            return None, None
        owner = owner if isinstance(owner, str) else None
        return (None if found is None else found.definition()), owner

    async def _schedule_call(self, awaitable: Any, name: str) -> Any:
        try:
            return await awaitable
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                raise TemporalUnknownSchedule(name, f"no schedule {name!r} on Temporal") from None
            raise self._rpc_error(exc, name) from None

    async def pause_schedule(self, name: str, note: str = "") -> None:
        handle = self.client.get_schedule_handle(name)
        await self._schedule_call(handle.pause(note=note or "paused by flowcore"), name)

    async def resume_schedule(self, name: str, note: str = "") -> None:
        handle = self.client.get_schedule_handle(name)
        await self._schedule_call(handle.unpause(note=note or "resumed by flowcore"), name)

    async def trigger_schedule(self, name: str) -> None:
        """Start a run now, outside the cadence, whatever runs (as ``allow_all``)."""
        handle = self.client.get_schedule_handle(name)
        await self._schedule_call(handle.trigger(overlap=ScheduleOverlapPolicy.ALLOW_ALL), name)

    async def backfill_schedule(self, name: str, start_ms: int, end_ms: int) -> None:
        """Start the slots from ``start_ms`` through ``end_ms`` under the overlap policy."""
        if end_ms < start_ms:
            raise TemporalHostError(
                f"cannot backfill schedule {name!r}: the range ends before it starts"
            )
        epoch = datetime(1970, 1, 1, tzinfo=UTC)
        # Temporal's range leaves its start out: begin a millisecond before it.
        backfill = ScheduleBackfill(
            start_at=epoch + timedelta(milliseconds=start_ms - 1),
            end_at=epoch + timedelta(milliseconds=end_ms),
        )
        handle = self.client.get_schedule_handle(name)
        await self._schedule_call(handle.backfill(backfill), name)

    async def delete_schedule(self, name: str) -> None:
        """Delete the Temporal Schedule (the runs it started stay)."""
        handle = self.client.get_schedule_handle(name)
        await self._schedule_call(handle.delete(), name)
