"""The client side of the Temporal host: start runs, signal, answer, cancel, read logs.

``TemporalHost`` wraps a ``temporalio.client.Client``. A flowcore run is one
``flowcore`` workflow whose workflow id is the run id. Everything a user can
get wrong (a server that cannot be reached, an unknown run, a rejected
answer, a bad spec) raises ``TemporalHostError`` with one clear line.

``history_to_log`` turns a run's Temporal history into flowcore's log records
by replaying it locally through the workflow (Temporal's ``Replayer``): no
worker needed, and the records are the ones the run wrote.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses
import secrets
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import msgspec
from temporalio import workflow
from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleBackfill,
    ScheduleListActionStartWorkflow,
    ScheduleOverlapPolicy,
    ScheduleUpdate,
    ScheduleUpdateInput,
    WorkflowExecution,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowHistory,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
)
from temporalio.common import Priority, WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import ApplicationError, FailureError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import (
    ExecuteWorkflowInput,
    Interceptor,
    Replayer,
    UnsandboxedWorkflowRunner,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)

import flowcore
from flowcore import Flow, HumanAnswered, Record, SignalReceived
from flowcore_handlers import (
    Deleted,
    HostRefusal,
    LimitError,
    NotPending,
    RunPage,
    RunQuery,
    RunSettled,
    RunSummary,
    ToolLimit,
    UnknownRun,
    UnknownSchedule,
    status_problem,
)
from flowcore_handlers._limits import check_dedup_key, check_priority, check_tool_limits

from . import _registry
from ._schedules import describe, to_temporal

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider
from ._types import (
    ANSWER_UPDATE,
    DEFAULT_ACTIVITY_TIMEOUT_MS,
    DEFAULT_CONTINUE_AFTER_EVENTS,
    DEFAULT_HEARTBEAT_TIMEOUT_MS,
    DEFAULT_TASK_QUEUE,
    LOG_QUERY,
    NOT_PENDING_ERROR,
    QUESTIONS_QUERY,
    SCHEDULED_QUERY,
    SCHEDULED_UPDATE,
    SIGNAL_KEYS_ATTRIBUTE,
    STATUS_QUERY,
    SWITCHING_ERROR,
    UPGRADE_UPDATE,
    WAITS_QUERY,
    WORKFLOW_NAME,
    RunArgs,
    RunArgsError,
    TemporalHostError,
    check_run_args,
    pack_state,
    run_args_from_wire,
    tool_queue,
)
from ._visibility import SearchAttributes, _quoted, metadata_of, visibility_query
from ._workflow import FlowcoreWorkflow

__all__ = [
    "TemporalHost",
    "TemporalHostError",
    "TemporalRefusal",
    "TemporalRunSettled",
    "TemporalUnavailable",
    "TemporalUnknownRun",
    "TemporalUnknownSchedule",
    "collect_flows",
    "connect",
    "history_to_log",
    "records_from_wire",
]

_QUERY_TIMEOUT = timedelta(seconds=10)
# How many times an upgrade is checked again when the run moved on meanwhile.
_UPGRADE_ATTEMPTS = 5
# How long an update is sent again while its run goes over to a new Temporal run.
_SWITCH_WAIT_S = 30.0
# What ``start`` does with a run id taken by a run started with other options.
ON_CONFLICT = ("refuse", "use-existing")


class NoSignalWait(TemporalHostError):
    """A keyed signal sent without a run id that no running run waits for."""


class TemporalUnavailable(TemporalHostError):
    """The Temporal server cannot be reached."""


class TemporalRefusal(TemporalHostError, HostRefusal):
    """An operation of the ``flowcore_handlers.Host`` contract Temporal does not do."""

    def __init__(self, operation: str, why: str) -> None:
        HostRefusal.__init__(self, operation, why, host="Temporal")


class TemporalUnknownRun(TemporalHostError, UnknownRun):
    """No workflow has that run id on the namespace."""


class TemporalRunSettled(TemporalHostError, RunSettled):
    """An operation that needs a running run, asked of one whose workflow is closed."""


class TemporalUnknownSchedule(TemporalHostError, UnknownSchedule):
    """No Temporal Schedule has that name on the namespace."""


# A Temporal execution status as the ``Host`` contract spells it (``RUN_STATUSES``).
# A run that continued as new goes on in its next Temporal run, under the same id.
_CONTRACT_STATUS = {
    WorkflowExecutionStatus.RUNNING: "running",
    WorkflowExecutionStatus.COMPLETED: "completed",
    WorkflowExecutionStatus.FAILED: "failed",
    WorkflowExecutionStatus.CANCELED: "cancelled",
    WorkflowExecutionStatus.TERMINATED: "terminated",
    WorkflowExecutionStatus.TIMED_OUT: "timed-out",
    WorkflowExecutionStatus.CONTINUED_AS_NEW: "running",
}
# A ``RUN_STATUSES`` word as visibility queries spell the execution status.
_VISIBILITY_STATUS = {
    "running": "Running",
    "completed": "Completed",
    "failed": "Failed",
    "cancelled": "Canceled",
    "terminated": "Terminated",
    "timed-out": "TimedOut",
}


def _contract_status(status: WorkflowExecutionStatus | None) -> str:
    return "running" if status is None else _CONTRACT_STATUS.get(status, "running")


def _ms(at: datetime | None) -> int | None:
    return None if at is None else int(at.timestamp() * 1000)


# The budget limits a run on Temporal takes (``RunArgs.budget``), by ``flowcore.Budget`` field.
_BUDGET_WIRE = {
    "steps": "steps",
    "cost_minor_units": "costMinorUnits",
    "wall_clock_ms": "wallClockMs",
}
# How often ``events(follow=True)`` reads a running run's log again.
_FOLLOW_POLL_S = 0.5


def _wire_budget(budget: Mapping[str, int] | flowcore.Budget | None) -> dict[str, int] | None:
    """``start``'s budget as ``RunArgs`` carries it; a ``flowcore.Budget`` is translated,
    refused if it caps what a Temporal run does not count."""
    if budget is None or not isinstance(budget, flowcore.Budget):
        return None if budget is None else dict(budget)
    out: dict[str, int] = {}
    for name in ("steps", "cost_minor_units", "wall_clock_ms", "tokens", "tool_calls", "turns"):
        value = getattr(budget, name)
        if value is None:
            continue
        if name not in _BUDGET_WIRE:
            raise TemporalRefusal(
                f"start a run with a {name} budget", "it caps only steps, cost and wall clock"
            )
        out[_BUDGET_WIRE[name]] = value
    return out


async def connect(
    address: str, namespace: str = "default", *, tracing: bool | TracerProvider = False
) -> Client:
    """A client for ``address``; ``TemporalUnavailable`` (one line) if nobody answers there.

    ``tracing`` (True: the global tracer provider) carries OpenTelemetry trace
    context from this client into the runs it starts (``specs/tracing.md``).
    """
    interceptors: list[Any] = []
    if tracing is not False:
        from ._tracing import client_interceptors

        interceptors = client_interceptors(tracing, "connect")
    try:
        return await Client.connect(address, namespace=namespace, interceptors=interceptors)
    except RuntimeError as exc:
        text = str(exc)
        reason = "connection refused" if "refused" in text.lower() else text.split(": ", 1)[-1]
        if "dns error" in text.lower():
            reason = "unknown host"
        raise TemporalUnavailable(
            f"cannot reach the Temporal server at {address}: {reason}"
            " (is it running? `temporal server start-dev`)"
        ) from None


def collect_flows(paths: Iterable[str | Path]) -> dict[str, str]:
    """``{flow id: spec text}`` of spec files and of the ``*.yaml``/``*.yml`` in directories.

    A file named on purpose must be a valid spec (``SpecError`` otherwise);
    files in a directory that are not flows are skipped.
    """
    flows: dict[str, str] = {}
    for entry in paths:
        path = Path(entry)
        scanned = path.is_dir()
        files = sorted(path.glob("*.yaml")) + sorted(path.glob("*.yml")) if scanned else [path]
        for file in files:
            try:
                text = file.read_text(encoding="utf-8")
            except OSError as exc:
                raise TemporalHostError(f"{file}: cannot read: {exc.strerror or exc}") from None
            try:
                flow = flowcore.parse_flow(text, source_name=str(file))
            except flowcore.SpecError:
                if scanned:
                    continue
                raise
            flows.setdefault(flow.id, text)
    return flows


def records_from_wire(items: Iterable[Mapping[str, Any]]) -> list[Record]:
    return [
        Record(
            str(item["type"]),
            int(item["index"]),
            str(item["runId"]),
            int(item["at"]),
            item.get("data"),
        )
        for item in items
    ]


class _NotPending(TemporalHostError, NotPending):
    """A scheduled-call cancel or run-now the workflow refused: not pending."""


class TemporalHost:
    """flowcore runs on a Temporal cluster, through one client.

    ``async with await TemporalHost.connect("localhost:7233") as host: ...``
    """

    def __init__(
        self,
        client: Client,
        task_queue: str = DEFAULT_TASK_QUEUE,
        *,
        tool_limits: Mapping[str, ToolLimit] | None = None,
    ) -> None:
        """``tool_limits``: the tools whose calls the runs this host starts send to
        their own task queue (``tool_queue``), where ``tool_workers`` apply the
        limits; give the workers the same ones (specs/temporal.md §12)."""
        self.client = client
        self.task_queue = task_queue
        self._attributes = SearchAttributes(client)
        try:
            self.tool_limits = check_tool_limits(tool_limits)
        except LimitError as exc:
            raise TemporalHostError(str(exc)) from None

    @classmethod
    async def connect(
        cls,
        address: str,
        namespace: str = "default",
        task_queue: str = DEFAULT_TASK_QUEUE,
        *,
        tool_limits: Mapping[str, ToolLimit] | None = None,
    ) -> TemporalHost:
        return cls(await connect(address, namespace), task_queue, tool_limits=tool_limits)

    async def __aenter__(self) -> TemporalHost:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

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
        if run_id is not None and dedup_key is None:
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
                return rid  # that run is the answer: nothing is started
        await self._start_workflow(
            args,
            f"flowcore {flow.id}",
            reuse=dedup_key is not None,
            priority=Priority.default if priority is None else Priority(priority_key=priority),
        )
        return rid

    async def _start_workflow(
        self,
        args: RunArgs,
        summary: str,
        *,
        reuse: bool = False,
        priority: Priority = Priority.default,
    ) -> None:
        """Start the workflow of ``args`` (checked first) under its run id; one that
        already has that id is the run (an ended one too, unless ``reuse``: a
        dedup key's next run)."""
        try:
            check_run_args(args)
        except RunArgsError as exc:
            raise TemporalHostError(str(exc)) from None
        try:
            await self._call(
                self.client.start_workflow(
                    FlowcoreWorkflow.run,
                    args,
                    id=args.run_id,
                    task_queue=self.task_queue,
                    id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                    id_reuse_policy=(
                        WorkflowIDReusePolicy.ALLOW_DUPLICATE
                        if reuse
                        else WorkflowIDReusePolicy.REJECT_DUPLICATE
                    ),
                    static_summary=summary,
                    priority=priority,
                ),
                args.run_id,
            )
        except WorkflowAlreadyStartedError:
            pass  # a run with this id has already ended: that run is the answer

    @staticmethod
    def _check_input(flow: Flow, input: Any, metadata: dict[str, Any] | None = None) -> None:
        # start() validates the input against the flow's input_schema (and the
        # metadata against its declarations); the decision itself is thrown
        # away (the workflow makes the real one).
        flowcore.start(flow, input, "check", metadata=metadata)

    async def _check_attributes(self, flow: Flow, flows: Mapping[str, str]) -> None:
        """``TemporalHostError`` unless the namespace registers the search attribute of
        every metadata field ``flow`` and the subflows it may start declare."""
        declared: dict[str, dict[str, str]] = {flow.id: dict(flow.metadata)}
        for flow_id, text in flows.items():
            try:
                declared[flow_id] = dict(flowcore.parse_flow(text).metadata)
            except flowcore.SpecError:
                continue  # refused when a run starts it, as before
        for fields in declared.values():
            await self._attributes.check(fields)

    # --- listing runs by metadata ----------------------------------------------------------

    async def runs(
        self, where: Any = None, *, status: str | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        """flowcore runs whose metadata matches ``where`` (``flowcore.metadata_filters``),
        newest first, through a visibility query: ``{runId, flowId, status, startedMs,
        metadata}`` each. ``status``: a Temporal status (``Running``, ``Completed``...).

        Temporal's visibility store is eventually consistent: a run started or a
        field set a moment ago may not be listed yet.
        """
        filters = flowcore.metadata_filters(where)
        query = visibility_query(filters, await self._attributes.types(), status)
        out: list[dict[str, Any]] = []
        try:
            async for execution in self.client.list_workflows(query, limit=limit):
                out.append(
                    {
                        "runId": execution.id,
                        "status": execution.status.name if execution.status else "UNKNOWN",
                        "startedMs": int(execution.start_time.timestamp() * 1000),
                        "metadata": metadata_of(execution.typed_search_attributes),
                    }
                )
        except RPCError as exc:
            raise TemporalHostError(f"visibility query {query!r} refused: {exc.message}") from None
        return out

    async def metadata(self, run_id: str) -> dict[str, Any]:
        """The run's metadata as its search attributes hold it (eventually consistent)."""
        desc = await self._call(self.handle(run_id).describe(), run_id)
        return metadata_of(desc.typed_search_attributes)

    # --- talking to runs -----------------------------------------------------------------

    def handle(self, run_id: str) -> WorkflowHandle[Any, Any]:
        return self.client.get_workflow_handle(run_id)

    async def _call(self, awaitable: Any, run_id: str) -> Any:
        try:
            return await awaitable
        except RPCError as exc:
            raise self._rpc_error(exc, run_id) from None

    def _rpc_error(self, exc: RPCError, run_id: str) -> TemporalHostError:
        if exc.status == RPCStatusCode.NOT_FOUND:
            if "already completed" in exc.message:
                return TemporalRunSettled(
                    run_id, None, f"run {run_id!r} has already settled (its workflow is closed)"
                )
            return TemporalUnknownRun(run_id, f"no run {run_id!r} on Temporal")
        if exc.status == RPCStatusCode.UNAVAILABLE:
            return TemporalUnavailable(f"the Temporal server stopped answering: {exc.message}")
        if "no poller" in exc.message or exc.status == RPCStatusCode.DEADLINE_EXCEEDED:
            return TemporalHostError(
                f"run {run_id!r} did not answer in time: is a worker polling task queue"
                f" {self.task_queue!r}? (`flowcore temporal worker`)"
            )
        return TemporalHostError(f"{run_id}: {exc.message}")

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
        import asyncio

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

    async def answer(self, run_id: str, key: str, answer: Any) -> None:
        """Answer question ``key``; a wrong answer raises and changes nothing."""
        # The update's validator refuses a bad answer too; checking here first
        # also covers what Temporal's converter could not even send (an
        # integer too long for JSON, a set).
        try:
            flowcore.check_event(HumanAnswered(idempotency_key=key, answer=answer, at_ms=0))
        except flowcore.DataError as exc:
            raise TemporalHostError(f"answer refused: {exc}") from None
        await self._update(run_id, ANSWER_UPDATE, [key, answer])

    async def _update(self, run_id: str, name: str, args: list[Any]) -> Any:
        """Send update ``name``: its result, or ``TemporalHostError`` saying why not.

        An update that comes while the run goes over to a new Temporal run
        (the run's history is long: ``run-switching``, or the Temporal run
        closed under it) is sent again, to the new one, for up to
        ``_SWITCH_WAIT_S`` seconds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _SWITCH_WAIT_S
        while True:
            handle = self.handle(run_id)
            try:
                return await handle.execute_update(name, args=args, rpc_timeout=_QUERY_TIMEOUT)
            except WorkflowUpdateFailedError as exc:
                cause = exc.cause
                if isinstance(cause, ApplicationError) and cause.type == NOT_PENDING_ERROR:
                    raise _NotPending(str(args[0].get("scheduleId", "")), cause.message) from None
                switching = isinstance(cause, ApplicationError) and cause.type == SWITCHING_ERROR
                if not switching or loop.time() >= deadline:
                    raise TemporalHostError(_failure_text(cause)) from None
            except RPCError as exc:
                error = self._rpc_error(exc, run_id)
                if loop.time() >= deadline or not await self._went_on(run_id, exc):
                    raise error from None
            await asyncio.sleep(0.05)

    async def _went_on(self, run_id: str, exc: RPCError) -> bool:
        """Whether the update failed because its Temporal run closed as the run
        went over to a new one (which is running now)."""
        if exc.status not in (RPCStatusCode.NOT_FOUND, RPCStatusCode.FAILED_PRECONDITION):
            return False
        try:
            desc = await self.handle(run_id).describe()
        except RPCError:
            return False
        return desc.status == WorkflowExecutionStatus.RUNNING

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
        self, run_id: str, tool: str, input: Any = None, delay_ms: int = 0
    ) -> str:
        """Schedule a call to a tool the flow declares schedulable; returns its id."""
        event = {"kind": "scheduled-add-requested", "tool": tool, "delayMs": delay_ms}
        if input is not None:
            event["input"] = input
        sid: str = (await self._scheduled_update(run_id, event))["id"]
        return sid

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

    async def _existing_args(self, run_id: str) -> RunArgs | None:
        """The ``RunArgs`` the run ``run_id`` was first started with (its first
        Temporal run's), or None when no workflow has that id."""

        async def first_event(execution: str | None) -> Any:
            handle = self.client.get_workflow_handle(run_id, run_id=execution)
            async for event in handle.fetch_history_events(page_size=1):
                return event
            return None

        try:
            latest = await first_event(None)
            origin = (
                None
                if latest is None
                else latest.workflow_execution_started_event_attributes.first_execution_run_id
            )
            first = await first_event(origin) if origin else latest
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                return None
            raise self._rpc_error(exc, run_id) from None
        return self._run_args_from(first, run_id)

    def _run_args_of(self, history: WorkflowHistory, run_id: str) -> RunArgs:
        """The ``RunArgs`` run ``run_id`` was started with, from its history."""
        return self._run_args_from(history.events[0] if history.events else None, run_id)

    def _run_args_from(self, first: Any, run_id: str) -> RunArgs:
        """The ``RunArgs`` of a workflow run whose history begins with ``first``."""
        if first is None or not first.HasField("workflow_execution_started_event_attributes"):
            raise TemporalHostError(f"{run_id} is not a flowcore run")
        started = first.workflow_execution_started_event_attributes
        if started.workflow_type.name != WORKFLOW_NAME:
            raise TemporalHostError(f"{run_id} is a {started.workflow_type.name} workflow")
        try:
            payload = started.input.payloads[0]
            return run_args_from_wire(
                self.client.data_converter.payload_converter.from_payload(payload)
            )
        except (IndexError, RunArgsError) as exc:
            raise TemporalHostError(f"{run_id}: its RunArgs: {exc}") from None

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

    async def forked_from(self, run_id: str) -> dict[str, Any] | None:
        """``{runId, index}`` when ``run_id`` is a fork, else None (from its history)."""
        fork = self._run_args_of(await self.history(run_id), run_id).fork
        return None if fork is None else {"runId": fork["runId"], "index": fork["index"]}

    async def _query(self, run_id: str, name: str, *args: Any) -> Any:
        handle = self.handle(run_id)
        try:
            return await self._call(
                handle.query(name, args=list(args), rpc_timeout=_QUERY_TIMEOUT), run_id
            )
        except WorkflowQueryFailedError as exc:
            raise TemporalHostError(f"{run_id}: query {name} failed: {exc.message}") from None

    async def questions(self, run_id: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = await self._query(run_id, QUESTIONS_QUERY)
        return result

    async def waits(self, run_id: str) -> flowcore.Waits:
        """What the run waits for now (``flowcore.waiting_for``, the ``waits`` query)."""
        raw = await self._query(run_id, WAITS_QUERY)
        if raw is None:
            raise TemporalHostError(f"run {run_id!r} has not started its flow yet: try again")
        return msgspec.convert(raw, flowcore.Waits)

    async def open_questions(self, run_id: str) -> list[flowcore.Question]:
        """The run's open questions (``waits(run_id).questions``)."""
        return list((await self.waits(run_id)).questions)

    async def show(self, run_id: str) -> dict[str, Any]:
        """What the run is doing (``status``)."""
        return await self.status(run_id)

    async def find_runs(self, query: RunQuery) -> RunPage:
        """flowcore runs newest first, one page of ``query.limit`` at a time, through a
        visibility query (eventually consistent, as ``runs``). A run's flow id is no
        search attribute: a ``flow`` or ``principal`` filter is a ``TemporalRefusal``.
        Statuses are the contract's words; a run that continued as new is listed
        once, as its latest Temporal run (``principal`` None: the listing does not
        carry it; ``summary`` reads it)."""
        if query.flow is not None:
            raise TemporalRefusal(
                "list runs by flow", "a run's flow id is no search attribute; filter by metadata"
            )
        if query.principal is not None:
            raise TemporalRefusal(
                "list runs by principal",
                "a run's principal is in its start arguments, no search attribute",
            )
        problem = status_problem(query.status)
        if problem is not None:
            raise TemporalHostError(problem)
        if query.limit < 1:
            raise TemporalHostError(f"a page of runs holds at least 1, not {query.limit}")
        try:
            token = None if query.cursor is None else base64.urlsafe_b64decode(query.cursor)
        except (binascii.Error, ValueError):
            raise TemporalHostError(
                f"run cursor {query.cursor!r} is not one a page handed out"
            ) from None
        text = visibility_query(
            flowcore.metadata_filters(query.where),
            await self._attributes.types(),
            None if query.status is None else _VISIBILITY_STATUS[query.status],
            started_from_ms=query.started_from_ms,
            started_to_ms=query.started_to_ms,
        )
        if query.status is None:
            text += " AND ExecutionStatus != 'ContinuedAsNew'"
        if query.parent is not None:
            text += f" AND ParentWorkflowId = {_quoted(query.parent)}"
        listing = self.client.list_workflows(text, page_size=query.limit, next_page_token=token)
        try:
            await listing.fetch_next_page()
        except RPCError as exc:
            raise TemporalHostError(f"visibility query {text!r} refused: {exc.message}") from None
        runs = [_summary(execution) for execution in listing.current_page or ()]
        after = listing.next_page_token
        cursor = base64.urlsafe_b64encode(after).decode() if after else None
        return RunPage(runs=runs, cursor=cursor)

    async def summary(self, run_id: str) -> RunSummary:
        """The run as ``find_runs`` lists it, from its workflow's description (read at
        once, not through visibility), with its flow id and principal from the
        arguments it was started with."""
        desc = await self._call(self.handle(run_id).describe(), run_id)
        args = await self._existing_args(run_id)
        if args is None:  # (gone between the two reads)
            raise TemporalUnknownRun(run_id, f"no run {run_id!r} on Temporal")
        flow_id = args.flow_id or (flowcore.parse_flow(args.spec).id if args.spec else None)
        return _summary(desc, flow_id=flow_id, principal=args.principal)

    async def events(
        self, run_id: str, start_index: int = 0, follow: bool = False
    ) -> AsyncIterator[Record]:
        """The run's log records from ``start_index`` (``log``); with ``follow``, read
        again every ``_FOLLOW_POLL_S`` until the run's workflow closes."""
        index = start_index
        while True:
            desc = await self._call(self.handle(run_id).describe(), run_id)
            running = desc.status == WorkflowExecutionStatus.RUNNING
            for record in await self.log(run_id, live=running):
                if record.index >= index:
                    yield record
                    index = record.index + 1
            if not (follow and running):
                return
            await asyncio.sleep(_FOLLOW_POLL_S)

    async def status(self, run_id: str) -> dict[str, Any]:
        """What the run is doing: status, budget, pending work, questions, signals waited for.

        A closed run is described from its history (no worker needed).
        """
        handle = self.handle(run_id)
        desc = await self._call(handle.describe(), run_id)
        if desc.workflow_type != WORKFLOW_NAME:
            raise TemporalHostError(f"{run_id} is a {desc.workflow_type} workflow, not flowcore")
        if desc.status == WorkflowExecutionStatus.RUNNING:
            info: dict[str, Any] = await self._query(run_id, STATUS_QUERY)
            info["temporal"] = "RUNNING"
            return info
        temporal = desc.status.name if desc.status is not None else "UNKNOWN"
        metadata = metadata_of(desc.typed_search_attributes)
        try:
            result = await self.result(run_id)
        except TemporalHostError as exc:
            return {"runId": run_id, "status": "failed", "temporal": temporal, "error": str(exc)}
        closed: dict[str, Any] = {
            "pending": [],
            "questions": [],
            "waitingFor": [],
            "metadata": metadata,
        }
        args = self._run_args_of(await self.history(run_id), run_id)
        if args.execution != 1:
            closed["execution"] = args.execution
        return {**result, "temporal": temporal, **closed}

    async def result(self, run_id: str) -> dict[str, Any]:
        """Wait for the run to settle; its result (status, output, error, usage, report)."""
        try:
            result: dict[str, Any] = await self._call(self.handle(run_id).result(), run_id)
        except WorkflowFailureError as exc:
            raise TemporalHostError(f"run {run_id} failed: {_failure_text(exc.cause)}") from None
        return result

    async def records(self, run_id: str, start: int = 0) -> list[Record]:
        """The run's flowcore log records, from the live workflow (the ``log`` query)."""
        items = await self._query(run_id, LOG_QUERY, start)
        return records_from_wire(items)

    @staticmethod
    def child_run_id(run_id: str, key: str) -> str:
        """The workflow id of the child run that subflow ``key`` of run ``run_id`` starts.

        For a run whose workflow id is its run id (every run ``start`` starts),
        as the workflow names its children: the key, which begins with the
        run id (``FlowcoreWorkflow.child_workflow_id``).
        """
        return key if key.startswith(run_id + "/") else f"{run_id}/{key}"

    async def history(self, run_id: str) -> WorkflowHistory:
        """The history of the run's latest Temporal run."""
        history: WorkflowHistory = await self._call(self.handle(run_id).fetch_history(), run_id)
        return history

    async def histories(self, run_id: str) -> list[WorkflowHistory]:
        """The histories of every Temporal run of the run, first to latest.

        A run that continued as new (a ``continue_as_new`` step, or a long
        history the workflow carried over) is a chain of Temporal runs under
        one workflow id; each names the one before it."""
        chain = [await self.history(run_id)]
        while True:
            events = chain[-1].events
            before = (
                events[0].workflow_execution_started_event_attributes.continued_execution_run_id
                if events
                else ""
            )
            if not before:
                return chain[::-1]
            handle = self.client.get_workflow_handle(run_id, run_id=before)
            chain.append(await self._call(handle.fetch_history(), run_id))

    @staticmethod
    def _check_spec_known(args: RunArgs, run_id: str) -> None:
        """A run pinned by hash replays here only with its spec in this process's
        registry (``flowcore_temporal._registry.install``, ``--specs``)."""
        if args.spec or args.spec_hash is None:
            return
        try:
            _registry.lookup(args.spec_hash, args.flow_id or "?")
        except _registry.SpecNotDeployed:
            raise TemporalHostError(
                f"run {run_id!r} is pinned by hash to spec {args.spec_hash[:12]} of flow"
                f" {args.flow_id!r}, which this process does not have: to read its log give"
                " the folder of spec versions (--specs DIR, $FLOWCORE_TEMPORAL_SPECS, or"
                " flowcore_temporal._registry.install)"
            ) from None

    async def log(self, run_id: str, *, live: bool = False) -> list[Record]:
        """The run's whole log: the records of each of its Temporal runs, stitched
        into one index sequence, replayed from their histories (``live``: the
        latest from the ``log`` query). No worker is needed but for ``live``."""
        chain = await self.histories(run_id)
        for history in chain:
            self._check_spec_known(self._run_args_of(history, run_id), run_id)
        found: dict[int, Record] = {}
        for history in chain[:-1] if live else chain:
            for record in await history_to_log(history):
                found.setdefault(record.index, record)
        if live:
            for record in await self.records(run_id):
                found.setdefault(record.index, record)
        return [found[i] for i in sorted(found)]

    async def export(self, run_id: str, *, live: bool = False) -> bytes:
        """The run's log as NDJSON (what ``flowcore replay`` reads), from its histories."""
        return flowcore.encode_records(await self.log(run_id, live=live))

    # --- schedules -----------------------------------------------------------------------

    async def add_schedules(
        self,
        spec: str | Path,
        *,
        flows: Iterable[str | Path] | Mapping[str, str] = (),
        tools: str | None = None,
    ) -> list[str]:
        """Create a Temporal Schedule for each schedule ``spec`` declares (or update it).

        The mapping is ``flowcore_temporal._schedules.to_temporal``. A schedule
        that exists gets the new spec, policies and action; Temporal keeps its
        state (paused, note, remaining actions) and its recent actions.
        """
        text, source = self._spec_text(spec)
        flow = flowcore.parse_flow(text, source_name=source)
        if not flow.schedules:
            raise TemporalHostError(f"{source}: the spec declares no schedules")
        known = self._known_flows(spec, flows, flow.id, text)
        await self._check_attributes(flow, known)  # the runs it starts upsert them
        for schedule in flow.schedules.values():
            args = RunArgs(spec=text, flows=known, tools=tools, source_name=source)
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

    @staticmethod
    def _spec_text(spec: str | Path) -> tuple[str, str]:
        """The spec's text and where it came from (a path, or ``<spec>``)."""
        if isinstance(spec, Path):
            try:
                text, source = spec.read_text(encoding="utf-8"), str(spec)
            except OSError as exc:
                raise TemporalHostError(f"{spec}: cannot read: {exc.strerror or exc}") from None
        else:
            text, source = spec, "<spec>"
        try:
            flowcore.check_data(text)  # parse_flow wants valid Unicode
        except flowcore.DataError as exc:
            raise TemporalHostError(
                f"{source}: the spec is not valid text: {exc.problem}"
            ) from None
        return text, source

    @staticmethod
    def _known_flows(
        spec: str | Path, flows: Iterable[str | Path] | Mapping[str, str], flow_id: str, text: str
    ) -> dict[str, str]:
        """The specs ``run_subflow`` may name: ``flows`` (files, folders, or a ready
        map), a path spec's own folder, and the spec itself."""
        if isinstance(flows, Mapping):
            known = dict(flows)
        else:
            extra = list(flows)
            if isinstance(spec, Path):
                extra.append(spec.parent)
            known = collect_flows(extra)
        known[flow_id] = text
        return known

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
        """The schedule as Temporal describes it: definition, state, next slots, actions."""
        handle = self.client.get_schedule_handle(name)
        description = await self._schedule_call(handle.describe(), name)
        return describe(name, description, await self._definition(name, description))

    async def _definition(self, name: str, description: Any) -> dict[str, Any] | None:
        """The flowcore definition the schedule was made from, read back from its action's
        ``RunArgs`` (Temporal keeps a cron only as calendars); None if it is not there."""
        action = description.schedule.action
        if not isinstance(action, ScheduleActionStartWorkflow) or not action.args:
            return None
        try:
            [raw] = await self.client.data_converter.decode(list(action.args[:1]), [dict])
            flow = flowcore.parse_flow(raw["spec"], source_name=str(raw.get("source_name")))
            found = flow.schedules.get(raw.get("schedule") or name)
        except Exception:  # someone else's schedule, or one made by hand
            return None
        return None if found is None else found.definition()

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

    async def flow(self, run_id: str) -> flowcore.Flow:
        """The flow the run was started with: its spec from its start arguments, or
        (a run pinned by hash) from this process's spec registry."""
        args = await self._existing_args(run_id)
        if args is None:
            raise TemporalUnknownRun(run_id, f"no run {run_id!r} on Temporal")
        self._check_spec_known(args, run_id)
        if args.spec:
            return flowcore.parse_flow(args.spec)
        assert args.spec_hash is not None
        return flowcore.parse_flow(_registry.lookup(args.spec_hash, args.flow_id or "?"))

    def now(self) -> int:
        """This process's clock, epoch milliseconds."""
        return time.time_ns() // 1_000_000


def _summary(
    execution: WorkflowExecution, *, flow_id: str | None = None, principal: str | None = None
) -> RunSummary:
    """A run's ``RunSummary`` from its (latest) Temporal run's execution."""
    return RunSummary(
        run_id=execution.id,
        status=_contract_status(execution.status),
        started_ms=int(execution.start_time.timestamp() * 1000),
        flow_id=flow_id,
        metadata=metadata_of(execution.typed_search_attributes),
        principal=principal,
        parent=execution.parent_id,
        updated_ms=_ms(execution.close_time),
    )


def _full(run_id: str, schedule_id: str) -> str:
    """A scheduled call's id: as given, or under the run (``nudge#1`` → ``RUN/nudge#1``)."""
    return schedule_id if schedule_id.startswith(run_id + "/") else f"{run_id}/{schedule_id}"


def _failure_text(error: BaseException | None) -> str:
    if isinstance(error, ApplicationError | FailureError):
        return error.message
    return str(error)


class _Capture(Interceptor):
    """Keeps the workflow instances a replay creates, so their records can be read."""

    instances: ClassVar[dict[str, FlowcoreWorkflow]] = {}

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor] | None:
        return _CaptureInbound


class _CaptureInbound(WorkflowInboundInterceptor):
    async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
        instance = workflow.instance()
        if isinstance(instance, FlowcoreWorkflow):
            _Capture.instances[workflow.info().workflow_id] = instance
        return await self.next.execute_workflow(input)


async def history_to_log(history: WorkflowHistory) -> list[Record]:
    """flowcore's log records of the run a Temporal history recorded.

    The history is replayed through ``FlowcoreWorkflow`` outside the sandbox
    (so the workflow object, and the records it kept, can be read back); a
    history that does not replay raises ``TemporalHostError``.
    """
    replayer = Replayer(
        workflows=[FlowcoreWorkflow],
        interceptors=[_Capture()],
        workflow_runner=UnsandboxedWorkflowRunner(),
    )
    _Capture.instances.pop(history.workflow_id, None)
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    if result.replay_failure is not None:
        _Capture.instances.pop(history.workflow_id, None)
        raise TemporalHostError(
            f"the history of {history.workflow_id} does not replay: {result.replay_failure}"
        )
    instance = _Capture.instances.pop(history.workflow_id, None)
    if instance is None:
        raise TemporalHostError(f"{history.workflow_id} is not a flowcore run")
    return list(instance.records)
