"""The Temporal host's commands: start a run, signal, answer, cancel, fork, upgrade,
a run's scheduled calls (the workflow's ``scheduled`` update and query), and
update-with-start and signal-with-start (Temporal's own, in one request)."""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
import uuid
from collections.abc import Awaitable, Iterable, Mapping
from pathlib import Path
from typing import Any

import msgspec
from temporalio.client import (
    WithStartWorkflowOperation,
    WorkflowExecutionStatus,
    WorkflowUpdateHandle,
    WorkflowUpdateStage,
)
from temporalio.common import Priority, WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError

import flowcore
from flowcore import HumanAnswered, SignalReceived
from flowcore_handlers import LimitError, UpdateOutcome
from flowcore_handlers._limits import check_dedup_key, check_priority

from . import _registry
from ._host_base import (
    _QUERY_TIMEOUT,
    _UPGRADE_ATTEMPTS,
    ON_CONFLICT,
    NoSignalWait,
    TemporalRefusal,
    TemporalRunSettled,
    _contract_status,
    _NotPending,
    _wire_budget,
)
from ._types import (
    ANSWER_BY_UPDATE,
    ANSWER_UPDATE,
    DEFAULT_ACTIVITY_TIMEOUT_MS,
    DEFAULT_CONTINUE_AFTER_EVENTS,
    DEFAULT_HEARTBEAT_TIMEOUT_MS,
    SCHEDULED_QUERY,
    SCHEDULED_UPDATE,
    SIGNAL_KEYS_ATTRIBUTE,
    UPGRADE_UPDATE,
    WORKFLOW_NAME,
    RunArgs,
    RunArgsError,
    TemporalHostError,
    check_run_args,
    pack_state,
    temporal_name,
    tool_queue,
)
from ._updates import TemporalUpdates, check_update, update_args
from ._workflow import FlowcoreWorkflow


class TemporalClient(TemporalUpdates):
    """The commands of the Temporal host (see ``TemporalHost``)."""

    # --- starting ------------------------------------------------------------------------

    async def start(
        self,
        spec: str | Path,
        input: Any = None,
        run_id: str | None = None,
        *,
        flows: Iterable[str | Path] | Mapping[str, str] = (),
        tools: str | None = None,
        budget: Mapping[str, int] | flowcore.Budget | None = None,
        activity_timeout_ms: int = DEFAULT_ACTIVITY_TIMEOUT_MS,
        heartbeat_timeout_ms: int | None = DEFAULT_HEARTBEAT_TIMEOUT_MS,
        clock_origin_ms: int | None = None,
        clock_scale: float = 1.0,
        metadata: Mapping[str, Any] | None = None,
        priority: int | None = None,
        dedup_key: str | None = None,
        continue_after_events: int | None = DEFAULT_CONTINUE_AFTER_EVENTS,
        by_hash: bool = False,
        on_conflict: str = "refuse",
        principal: str | None = None,
    ) -> str:
        """Start a run of ``spec`` (a path, or spec text); returns its run id.

        ``metadata``: initial values of the flow's metadata fields
        (``flowcore.MetadataError`` for an undeclared field or a wrong type).
        A flow that declares metadata needs its search attributes registered
        on the namespace (``flowcore_<field>``, typed); a missing one is a
        ``TemporalHostError`` that names the command that registers it.

        The spec and the input are checked here first, so a bad one is a
        ``SpecError`` / ``InputError`` for the caller rather than a failed
        workflow. ``flows`` are spec files or directories (or a ready
        ``{flow id: text}`` map) that ``run_subflow`` may name; a path spec's
        own directory is always searched. Starting again with the ``run_id``
        of an existing run (going or ended) starts nothing and returns it;
        ``on_conflict`` says what happens when that run was started with
        another input or spec: ``"refuse"`` (the default: a
        ``TemporalHostError``) or ``"use-existing"`` (its id is returned,
        nothing is started). A ``run_id`` (or ``dedup_key``) holding ``/`` or
        ``#``, which name child runs, is a ``flowcore.RunIdError``.
        The other arguments are checked as the workflow checks them (a bad
        budget or timeout is a ``TemporalHostError``, not a failed workflow).

        ``priority`` (1 first, 5 last; None: Temporal's default, 3) is the
        workflow's Temporal priority key, which its activities and child
        workflows inherit. ``dedup_key`` is the run's workflow id: while that
        workflow runs, starting again returns it (conflict policy
        USE_EXISTING); once it has closed, a new run starts under the same id
        (reuse policy ALLOW_DUPLICATE). A ``run_id`` other than the key is
        refused.

        ``continue_after_events``: the history length at which the run goes on
        in a new Temporal run by itself (it also does when Temporal suggests
        it; None: only then); its children take the same.

        The run pins its spec by hash (``RunArgs.spec_hash``). ``by_hash``:
        the spec's text is left out of the run's argument, and the workers
        take it from their registry of spec versions (``new_worker(specs=...)``,
        ``flowcore temporal worker --specs DIR``); a worker that lacks it fails
        the run's workflow tasks, naming the spec, until one has it.

        ``principal``: who starts the run, kept in its ``RunArgs`` (its child
        runs inherit it); ``summary`` reads it back.
        """
        rid, args, flow, chosen = await self._start_args(
            spec,
            input,
            run_id,
            flows=flows,
            tools=tools,
            budget=budget,
            activity_timeout_ms=activity_timeout_ms,
            heartbeat_timeout_ms=heartbeat_timeout_ms,
            clock_origin_ms=clock_origin_ms,
            clock_scale=clock_scale,
            metadata=metadata,
            priority=priority,
            dedup_key=dedup_key,
            continue_after_events=continue_after_events,
            by_hash=by_hash,
            on_conflict=on_conflict,
            principal=principal,
        )
        if run_id is not None and dedup_key is None:
            if await self._exists(rid, input, flow, on_conflict):
                return rid  # that run is the answer: nothing is started
        await self._start_workflow(
            args, f"flowcore {flow.id}", reuse=dedup_key is not None, priority=chosen
        )
        return rid

    async def _start_args(
        self,
        spec: str | Path,
        input: Any = None,
        run_id: str | None = None,
        *,
        flows: Iterable[str | Path] | Mapping[str, str] = (),
        tools: str | None = None,
        budget: Mapping[str, int] | flowcore.Budget | None = None,
        activity_timeout_ms: int = DEFAULT_ACTIVITY_TIMEOUT_MS,
        heartbeat_timeout_ms: int | None = DEFAULT_HEARTBEAT_TIMEOUT_MS,
        clock_origin_ms: int | None = None,
        clock_scale: float = 1.0,
        metadata: Mapping[str, Any] | None = None,
        priority: int | None = None,
        dedup_key: str | None = None,
        continue_after_events: int | None = DEFAULT_CONTINUE_AFTER_EVENTS,
        by_hash: bool = False,
        on_conflict: str = "refuse",
        principal: str | None = None,
    ) -> tuple[str, RunArgs, flowcore.Flow, Priority]:
        """What ``start`` checks and the workflow's argument it builds: the run id,
        the ``RunArgs``, the flow and the Temporal priority."""
        for chosen in (run_id, dedup_key):
            if chosen is not None:
                flowcore.check_run_id(chosen)
        if on_conflict not in ON_CONFLICT:
            raise TemporalHostError(
                f"on_conflict must be one of {', '.join(ON_CONFLICT)}, not {on_conflict!r:.60}"
            )
        text, source = self._spec_text(spec)
        flow = flowcore.parse_flow(text, source_name=source)
        given = None if metadata is None else dict(metadata)
        self._check_input(flow, input, given)
        known = self._known_flows(spec, flows, flow.id, text)
        await self._check_attributes(flow, known)
        try:
            priority = None if priority is None else check_priority(priority)
            dedup_key = check_dedup_key(dedup_key)
        except LimitError as exc:
            raise TemporalHostError(str(exc)) from None
        if dedup_key is not None and run_id is not None and run_id != dedup_key:
            raise TemporalHostError(
                f"run id {run_id!r} and dedup key {dedup_key!r}: on Temporal the dedup key"
                " is the run id (its workflow id); give one, or the same"
            )
        rid = dedup_key or run_id or f"{flow.id}-{secrets.token_hex(4)}"
        args = RunArgs(
            spec="" if by_hash else text,
            spec_hash=flow.spec_hash,
            flow_id=flow.id,
            input=input,
            run_id=rid,
            budget=_wire_budget(budget),
            flows=known,
            tools=tools,
            source_name=source,
            activity_timeout_ms=activity_timeout_ms,
            heartbeat_timeout_ms=heartbeat_timeout_ms,
            clock_origin_ms=clock_origin_ms,
            clock_scale=clock_scale,
            metadata=given,
            tool_queues={tool: tool_queue(self.task_queue, tool) for tool in self.tool_limits},
            continue_after_events=continue_after_events,
            principal=principal,
        )
        chosen_priority = Priority.default if priority is None else Priority(priority_key=priority)
        return rid, args, flow, chosen_priority

    async def _exists(self, rid: str, input: Any, flow: flowcore.Flow, on_conflict: str) -> bool:
        """Whether run ``rid`` exists (``start`` then returns it); one started with
        another input or spec is refused unless ``on_conflict`` is ``use-existing``."""
        existing = await self._existing_args(rid)
        if existing is not None:
            differs = [
                what
                for what, same in (
                    ("input", existing.input == input),
                    ("flow spec", existing.spec_hash == flow.spec_hash),
                )
                if not same
            ]
            if differs and on_conflict == "refuse":
                raise TemporalHostError(
                    f"run {rid!r} already exists with a different {' and '.join(differs)}"
                    " (on_conflict 'use-existing' returns it instead)"
                )
            return True
        return False

    async def update_with_start(
        self,
        spec: str | Path,
        input: Any,
        run_id: str,
        name: str,
        update_input: Any = None,
        update_id: str | None = None,
        *,
        wait: bool = True,
        timeout_s: float | None = None,
        on_conflict: str = "use-existing",
        principal: str | None = None,
        **start: Any,
    ) -> UpdateOutcome:
        """Start run ``run_id`` of ``spec`` unless a workflow has the id, and send
        it update ``name``: one request (Temporal's update-with-start), so the
        update reaches the run's first workflow task. Then as ``update``.

        ``on_conflict`` ``"use-existing"``: a run that has the id (running or
        closed) gets the update; ``"refuse"``: a ``TemporalHostError`` saying the
        run already exists, and nothing is sent. ``start``: ``start``'s other
        keyword arguments (``tools``, ``flows``, ``budget``, ``metadata``, ...).
        An update refused by the run it would start is refused here, and
        nothing is started (``flowcore.UpdateRefused``)."""
        if on_conflict not in ON_CONFLICT:
            raise TemporalHostError(
                f"on_conflict must be one of {', '.join(ON_CONFLICT)}, not {on_conflict!r:.60}"
            )
        rid, args, flow, priority = await self._start_args(
            spec, input, run_id, principal=principal, **start
        )
        uid = update_id if update_id is not None else uuid.uuid4().hex
        check_update(name, update_input, uid, principal)
        try:  # as the workflow's validator will: against the state the run starts in
            first = flowcore.start(
                flow,
                input,
                rid,
                now_ms=self.now(),
                budget=flowcore.budget_from_wire(args.budget),
                metadata=args.metadata,
            )
            flowcore.validate_update(first.state, name, update_input, principal)
        except flowcore.UpdateRefused:
            if await self._existing_args(rid) is None:
                raise  # no run has the id: refused, and nothing is started
        refuse = on_conflict == "refuse"
        operation: list[WithStartWorkflowOperation[Any, Any]] = []

        def send() -> Awaitable[WorkflowUpdateHandle[Any]]:
            # An operation is good for one request: a new one each time it is sent.
            operation.append(
                WithStartWorkflowOperation(
                    FlowcoreWorkflow.run,
                    args,
                    id=rid,
                    task_queue=self.task_queue,
                    id_conflict_policy=(
                        WorkflowIDConflictPolicy.FAIL
                        if refuse
                        else WorkflowIDConflictPolicy.USE_EXISTING
                    ),
                    id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                    static_summary=f"flowcore {flow.id}",
                    priority=priority,
                )
            )
            return self.client.start_update_with_start_workflow(
                temporal_name(name, "update"),
                args=update_args(update_input, principal),
                id=uid,
                start_workflow_operation=operation[-1],
                wait_for_stage=WorkflowUpdateStage.ACCEPTED,
                rpc_timeout=_QUERY_TIMEOUT,
            )

        try:
            return await self._deliver(rid, name, uid, send, wait=wait, timeout_s=timeout_s)
        except WorkflowAlreadyStartedError:
            for sent in operation:  # (its start's own outcome, read so it is not left unread)
                try:
                    await sent.workflow_handle()
                except Exception:  # the same failure, handled here
                    pass
            if refuse:
                raise TemporalHostError(
                    f"run {rid!r} already exists (on_conflict 'use-existing' sends it the update)"
                ) from None
        # The id is a closed run's (its reuse policy keeps it): the update goes to it.
        return await self.update(
            rid, name, update_input, uid, wait=wait, timeout_s=timeout_s, principal=principal
        )

    async def signal_with_start(
        self,
        spec: str | Path,
        input: Any,
        run_id: str,
        name: str,
        payload: Any = None,
        key: str | None = None,
        *,
        on_conflict: str = "use-existing",
        principal: str | None = None,
        **start: Any,
    ) -> str:
        """Start run ``run_id`` of ``spec`` unless a workflow has the id, and send it
        signal ``name`` (with ``key``): one request (Temporal's signal-with-start,
        ``start_signal``). Returns the run id.

        ``on_conflict`` ``"use-existing"``: a running run that has the id gets the
        signal (a closed one: ``RunSettled``); ``"refuse"``: a ``TemporalHostError``
        when a run has the id (Temporal's signal-with-start always signals a
        running workflow, so the id is looked up first)."""
        if on_conflict not in ON_CONFLICT:
            raise TemporalHostError(
                f"on_conflict must be one of {', '.join(ON_CONFLICT)}, not {on_conflict!r:.60}"
            )
        rid, args, flow, priority = await self._start_args(
            spec, input, run_id, principal=principal, **start
        )
        try:
            flowcore.check_event(SignalReceived(signal=name, payload=payload, at_ms=0, key=key))
        except flowcore.DataError as exc:
            raise TemporalHostError(f"signal {name!a} refused: {exc}") from None
        if key == "":
            raise TemporalHostError("a signal key must not be empty")
        if on_conflict == "refuse" and await self._existing_args(rid) is not None:
            raise TemporalHostError(
                f"run {rid!r} already exists (on_conflict 'use-existing' sends it the signal)"
            )
        try:
            check_run_args(args)
        except RunArgsError as exc:
            raise TemporalHostError(str(exc)) from None
        try:
            await self._call(
                self.client.start_workflow(
                    FlowcoreWorkflow.run,
                    args,
                    id=rid,
                    task_queue=self.task_queue,
                    id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                    id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                    static_summary=f"flowcore {flow.id}",
                    priority=priority,
                    start_signal=name,
                    start_signal_args=[payload] if key is None else [payload, key],
                ),
                rid,
            )
        except WorkflowAlreadyStartedError:
            raise TemporalRunSettled(
                rid, None, f"run {rid!r} has already settled (its workflow is closed)"
            ) from None
        return rid

    async def signal(
        self, run_id: str, name: str, payload: Any = None, key: str | None = None
    ) -> None:
        """Send signal ``name``; a run that does not wait for it yet buffers it.

        With ``key`` only a wait with that key takes it (the key travels as the
        signal's second argument). The payload is checked here, as the workflow
        checks it: a run drops a signal flowcore cannot store (signals have no
        reply), so refusing it here is the only way the sender hears of it.
        """
        try:
            flowcore.check_event(SignalReceived(signal=name, payload=payload, at_ms=0, key=key))
        except flowcore.DataError as exc:
            raise TemporalHostError(f"signal {name!a} refused: {exc}") from None
        if key == "":
            raise TemporalHostError("a signal key must not be empty")
        handle = self.handle(run_id)
        if key is not None:
            await self._call(handle.signal(name, args=[payload, key]), run_id)
        elif payload is None:
            await self._call(handle.signal(name), run_id)
        else:
            await self._call(handle.signal(name, payload), run_id)

    async def signal_key(
        self, name: str, key: str, payload: Any = None, *, wait_s: float = 10.0
    ) -> list[str]:
        """Send signal ``name`` with ``key`` to every running run that waits for it
        with that key; returns their run ids, sorted.

        Runs are found by the ``FlowcoreSignalKeys`` search attribute (``name:key``),
        which a run sets while it waits. Temporal's visibility is eventually
        consistent: a run that began to wait a moment ago may not be listed
        yet, so the search is repeated for up to ``wait_s`` seconds while it
        finds none; then ``NoSignalWait``. The attribute must be registered
        with the namespace (``specs/temporal.md``).
        """

        try:
            flowcore.check_event(SignalReceived(signal=name, payload=payload, at_ms=0, key=key))
        except flowcore.DataError as exc:
            raise TemporalHostError(f"signal {name!a} refused: {exc}") from None
        if not key:
            raise TemporalHostError("a signal key must not be empty")
        value = f"{name}:{key}"
        if any(c in value for c in "'\\\"") or not value.isprintable():
            raise TemporalHostError(
                "a signal routed by its key cannot have quotes, backslashes or control"
                " characters in its name or key; send it to a run by id instead"
            )
        query = (
            f"{SIGNAL_KEYS_ATTRIBUTE} = '{value}' AND ExecutionStatus = 'Running'"
            f" AND WorkflowType = '{WORKFLOW_NAME}'"
        )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while True:
            try:
                found = sorted([wf.id async for wf in self.client.list_workflows(query)])
            except RPCError as exc:
                raise TemporalHostError(
                    f"cannot search runs by signal key: {exc.message} (is the search attribute"
                    f" {SIGNAL_KEYS_ATTRIBUTE} registered? see `flowcore temporal` setup)"
                ) from None
            if found or loop.time() >= deadline:
                break
            await asyncio.sleep(0.2)
        if not found:
            raise NoSignalWait(f"no running run waits for signal {name!a} with key {key!a}")
        for run_id in found:
            await self._call(self.handle(run_id).signal(name, args=[payload, key]), run_id)
        return found

    async def answer(
        self, run_id: str, key: str, answer: Any, principal: str | None = None
    ) -> None:
        """Answer question ``key``; a wrong answer raises and changes nothing.
        ``principal``: who answers, carried into the run's ``human-answered``
        (a denied approval's error names them)."""
        # The update's validator refuses a bad answer too; checking here first
        # also covers what Temporal's converter could not even send (an
        # integer too long for JSON, a set).
        try:
            flowcore.check_event(
                HumanAnswered(idempotency_key=key, answer=answer, at_ms=0, principal=principal)
            )
        except flowcore.DataError as exc:
            raise TemporalHostError(f"answer refused: {exc}") from None
        if principal is None:
            await self._update(run_id, ANSWER_UPDATE, [key, answer])
        else:
            await self._update(run_id, ANSWER_BY_UPDATE, [key, answer, principal])

    # --- scheduled calls (the ``scheduled`` update and query) -----------------------------

    async def scheduled(
        self, run_id: str | None = None, tool: str | None = None, status: str | None = None
    ) -> list[flowcore.ScheduledCall]:
        """The run's scheduled calls, pending and finished, soonest due first (of
        ``tool``, in ``status``, when given). Each run keeps its own: without a run
        id, ``TemporalRefusal``."""
        if run_id is None:
            raise TemporalRefusal(
                "list scheduled calls across runs",
                "each run's workflow keeps its own; name the run",
            )
        raw = await self._query(run_id, SCHEDULED_QUERY)
        calls = msgspec.convert(raw, list[flowcore.ScheduledCall])
        calls = [c for c in calls if tool in (None, c.tool) and status in (None, c.status)]
        return sorted(calls, key=lambda c: (c.due_ms, c.id))

    async def cancel_scheduled(self, run_id: str, schedule_id: str) -> bool:
        """Cancel a pending scheduled call: True if it was pending, False if not."""
        event = {"kind": "scheduled-cancel-requested", "scheduleId": _full(run_id, schedule_id)}
        done: bool = (await self._scheduled_update(run_id, event))["done"]
        return done

    async def run_scheduled_now(self, run_id: str, schedule_id: str) -> bool:
        """Issue a pending scheduled call now: True if it was pending, False if not."""
        event = {"kind": "scheduled-run-now-requested", "scheduleId": _full(run_id, schedule_id)}
        done: bool = (await self._scheduled_update(run_id, event))["done"]
        return done

    async def add_scheduled(
        self,
        run_id: str,
        tool: str,
        input: Any = None,
        delay_ms: int = 0,
        *,
        request: str | None = None,
        every_ms: int | None = None,
        cron: str | None = None,
        timezone: str | None = None,
        count: int | None = None,
        until_ms: int | None = None,
    ) -> str:
        """Schedule a call to a tool the flow declares schedulable; returns its id.
        ``request``: the asker's name for this request (a handler's context gives
        ``<key>#<n>``), kept in the log: the id derives from it, and the same
        request again schedules nothing and answers the same id. A recurring call
        gives ``every_ms`` or ``cron`` (in ``timezone``), at most ``count``
        firings, none after ``until_ms``."""
        event = {"kind": "scheduled-add-requested", "tool": tool, "delayMs": delay_ms}
        if input is not None:
            event["input"] = input
        for name, value in (
            ("request", request),
            ("everyMs", every_ms),
            ("cron", cron),
            ("timezone", timezone),
            ("count", count),
            ("untilMs", until_ms),
        ):
            if value is not None:
                event[name] = value
        sid: str = (await self._scheduled_update(run_id, event))["id"]
        return sid

    async def replay_scheduled(
        self, run_id: str, schedule_id: str, *, request: str | None = None
    ) -> None:
        """Issue a finished scheduled call again as a new attempt; refused
        (``TemporalHostError`` with the reason) for an unknown id or a call still
        pending or out. The same ``request`` again replays nothing."""
        event = {"kind": "scheduled-replay-requested", "scheduleId": _full(run_id, schedule_id)}
        if request is not None:
            event["request"] = request
        await self._scheduled_update(run_id, event)

    async def _scheduled_update(self, run_id: str, event: dict[str, Any]) -> dict[str, Any]:
        try:
            flowcore.check_event(flowcore.event_from_wire({**event, "atMs": 0}))
        except flowcore.FlowcoreError as exc:
            raise TemporalHostError(f"refused: {exc}") from None
        try:
            result: dict[str, Any] = await self._update(run_id, SCHEDULED_UPDATE, [event])
        except _NotPending as exc:
            return {"id": exc.schedule_id, "done": False}  # nothing was written
        return result

    async def resume(self, run_id: str, tools: str | None = None) -> None:
        """``TemporalRefusal``: Temporal retries a run's work and recovers its workers itself."""
        raise TemporalRefusal(
            f"resume run {run_id!r}",
            "a failed run stays failed (fork it to go on); Temporal recovers a stopped"
            " worker's runs by itself",
        )

    async def cancel(self, run_id: str, reason: str = "") -> None:
        """Cancel the run: pending work is abandoned, compensations run, it settles cancelled.

        Temporal takes a cancel of a run whose workflow has closed, and it changes
        nothing: no ``NothingToCancel`` here."""
        await self._call(self.handle(run_id).cancel(reason=reason), run_id)

    async def fork(
        self,
        run_id: str,
        *,
        at: int | None = None,
        from_step: str | None = None,
        new_run_id: str | None = None,
        tools: str | None = None,
        cancel_source: bool = False,
    ) -> str:
        """Fork run ``run_id`` as a new run with its history up to a point; its run id.

        The point is ``at`` (a log index) or ``from_step``, as ``flowcore.fork``
        takes them. The source's log is read from its history (as ``export``
        reads it), the fork is checked here (``ForkError`` for a bad point or
        step), and a new workflow (id ``new_run_id``, default
        ``{run_id}-fork-{point}``) is started with the source's ``RunArgs``
        and the source's records before the point (``RunArgs.fork``): it
        applies them again and dispatches what is open at the end of them.
        ``tools``: the fork's tools module (default: the source's).
        ``cancel_source``: then cancel the source if it is still running (a
        reset). A run id that exists is returned as it is, as ``start`` does.
        A child run is refused: fork its root.
        """
        history = await self.history(run_id)
        source = self._run_args_of(history, run_id)
        if source.depth > 0:
            raise TemporalHostError(
                f"cannot fork run {run_id!r}: it is a child run (depth {source.depth});"
                " fork its root run"
            )
        records = await self.log(run_id)
        text = source.spec or _registry.lookup(source.spec_hash or "", source.flow_id or "?")
        flow = flowcore.parse_flow(text, source_name=source.source_name)
        point = flowcore.fork_point(records, flow, at=at, from_step=from_step)
        rid = new_run_id or f"{run_id}-fork-{point}"
        made = flowcore.fork(records, flow, rid, at=point)  # checked here, made again there
        args = dataclasses.replace(
            source,
            run_id=rid,
            tools=tools if tools is not None else source.tools,
            schedule=None,  # (the input is the one the source's run.started records)
            continued=None,  # (a fork starts from the records, not from an incarnation's start)
            log_index=0,
            signals=[],
            previous=[],
            snapshot=None,
            execution=1,
            fork={
                "runId": run_id,
                "index": made.at,
                "records": [msgspec.to_builtins(r) for r in records[: made.at]],
            },
        )
        await self._start_workflow(args, f"flowcore {flow.id} (fork of {run_id})")
        if cancel_source:
            desc = await self._call(self.handle(run_id).describe(), run_id)
            if desc.status == WorkflowExecutionStatus.RUNNING:
                await self.cancel(run_id, f"reset: forked as {rid}")
        return rid

    async def upgrade(
        self, run_id: str, spec: str | Path, *, dry_run: bool = False
    ) -> flowcore.Upgrade:
        """Move running run ``run_id`` to another version of its flow (``spec``, a
        path or spec text), once its log replays against it.

        The run's whole log (every Temporal run of it, ``log``) is replayed
        against the new spec (``flowcore.upgrade``); a run that would have been
        driven differently is refused with ``flowcore.UpgradeRefused`` (the
        divergence's index, the recorded effect and the new spec's), and stays
        on its version. Otherwise the ``upgrade`` update carries the new spec
        and the state the replay ended in to the workflow, which takes it only
        if the run has not moved on since (else the check runs again, a few
        times). A run pinned by hash gets the new spec's hash alone: its
        workers must have that version (``--specs``). ``dry_run``: check only.
        Returns the check's ``Upgrade`` (``changed`` false: the run is on that
        spec already, nothing sent).
        """
        text, source = self._spec_text(spec)
        flow = flowcore.parse_flow(text, source_name=source)
        # Once moved, a run pinned by hash replays here with the new version too.
        known = _registry.installed()
        if known is None:
            known = _registry.SpecRegistry()
            _registry.install(known)
        known.add(text, source)
        for _ in range(_UPGRADE_ATTEMPTS):
            status = await self.status(run_id)
            if status.get("temporal") != "RUNNING" or "result" in status:
                word = status.get("temporal", "")
                settled = WorkflowExecutionStatus.__members__.get(word)
                raise TemporalRunSettled(
                    run_id,
                    None if settled is None else _contract_status(settled),
                    f"run {run_id!r} has already settled: nothing to move",
                )
            by_hash = not self._run_args_of(await self.history(run_id), run_id).spec
            made = flowcore.upgrade(await self.log(run_id), flow, pinned=status.get("specHash"))
            if not made.changed or dry_run:
                return made
            request = {
                "spec": "" if by_hash else text,
                "specHash": flow.spec_hash,
                "at": made.at,
                "snapshot": pack_state(made.state),
            }
            try:
                await self._update(run_id, UPGRADE_UPDATE, [request])
            except TemporalHostError as exc:
                if "has moved on since the check" in str(exc):
                    continue  # an event came between the check and the update
                raise
            return made
        raise TemporalHostError(
            f"run {run_id!r} kept moving on while it was checked ({_UPGRADE_ATTEMPTS} times):"
            " try again when it is quieter"
        )


def _full(run_id: str, schedule_id: str) -> str:
    """A scheduled call's id: as given, or under the run (``nudge#1`` → ``RUN/nudge#1``)."""
    return schedule_id if schedule_id.startswith(run_id + "/") else f"{run_id}/{schedule_id}"
