"""What every part of the Temporal host shares: its errors, the client it wraps,
how it talks to one run (``_call``, ``_update``, ``_query``), and how it reads
a run's start arguments and histories. ``TemporalHost`` (``_host``) is built on
``TemporalBase``; the parts are ``_client`` (commands), ``_reads`` and ``_admin``
(schedules, retention).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowHistory,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
)
from temporalio.common import Priority, WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import ApplicationError, FailureError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

import flowcore
from flowcore import Flow, Record
from flowcore_handlers import (
    HostRefusal,
    LimitError,
    NotPending,
    RunSettled,
    ToolLimit,
    UnknownRun,
    UnknownSchedule,
)
from flowcore_handlers._limits import check_tool_limits

from . import _registry

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider
from ._types import (
    DEFAULT_TASK_QUEUE,
    NOT_PENDING_ERROR,
    SWITCHING_ERROR,
    WORKFLOW_NAME,
    RunArgs,
    RunArgsError,
    TemporalHostError,
    check_run_args,
    run_args_from_wire,
)
from ._visibility import SearchAttributes
from ._workflow import FlowcoreWorkflow

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


class TemporalBase:
    """flowcore runs on a Temporal cluster, through one client (see ``TemporalHost``)."""

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
    ) -> Self:
        return cls(await connect(address, namespace), task_queue, tool_limits=tool_limits)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

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

    async def _query(self, run_id: str, name: str, *args: Any) -> Any:
        handle = self.handle(run_id)
        try:
            return await self._call(
                handle.query(name, args=list(args), rpc_timeout=_QUERY_TIMEOUT), run_id
            )
        except WorkflowQueryFailedError as exc:
            raise TemporalHostError(f"{run_id}: query {name} failed: {exc.message}") from None

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


def _failure_text(error: BaseException | None) -> str:
    if isinstance(error, ApplicationError | FailureError):
        return error.message
    return str(error)
