"""The Temporal host's reads: runs a page at a time (a visibility query), one run's
summary and status, its log replayed from its histories (no worker needed) or read
live, questions and waits (the workflow's queries).

``history_to_log`` turns a run's Temporal history into flowcore's log records
by replaying it locally through the workflow (Temporal's ``Replayer``): no
worker needed, and the records are the ones the run wrote.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import time
from collections.abc import AsyncIterator
from typing import Any, ClassVar

import msgspec
from temporalio import workflow
from temporalio.client import (
    WorkflowExecution,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHistory,
)
from temporalio.service import RPCError
from temporalio.worker import (
    ExecuteWorkflowInput,
    Interceptor,
    Replayer,
    UnsandboxedWorkflowRunner,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)

import flowcore
from flowcore import Record
from flowcore_handlers import RUN_STATUSES, RunPage, RunQuery, RunSummary, status_problem

from . import _registry
from ._host_base import (
    _FOLLOW_POLL_S,
    _VISIBILITY_STATUS,
    TemporalBase,
    TemporalRefusal,
    TemporalUnknownRun,
    _contract_status,
    _failure_text,
    _ms,
    records_from_wire,
)
from ._types import (
    LOG_QUERY,
    PROGRESS_QUERY,
    QUESTIONS_QUERY,
    STATUS_MEMO,
    STATUS_QUERY,
    WAITS_QUERY,
    WORKFLOW_NAME,
    TemporalHostError,
)
from ._visibility import _quoted, metadata_of, visibility_query
from ._workflow import FlowcoreWorkflow


class TemporalReads(TemporalBase):
    """The reads of the Temporal host (see ``TemporalHost``)."""

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

    async def forked_from(self, run_id: str) -> dict[str, Any] | None:
        """``{runId, index}`` when ``run_id`` is a fork, else None (from its history)."""
        fork = self._run_args_of(await self.history(run_id), run_id).fork
        return None if fork is None else {"runId": fork["runId"], "index": fork["index"]}

    async def questions(self, run_id: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = await self._query(run_id, QUESTIONS_QUERY)
        return result

    async def waits(self, run_id: str) -> flowcore.Waits:
        """What the run waits for now (``flowcore.waiting_for``, the ``waits`` query).
        A closed run's is read from its history, as ``status`` reads it: no worker
        is needed to tell that it waits for nothing."""
        desc = await self._call(self.handle(run_id).describe(), run_id)
        if desc.status not in (None, WorkflowExecutionStatus.RUNNING):
            replayed = flowcore.replay(await self.log(run_id), await self.flow(run_id))
            if replayed.state is not None:
                return flowcore.waiting_for(replayed.state)
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
        if query.status is not None and query.status not in _VISIBILITY_STATUS:
            raise TemporalRefusal(
                f"list runs by status {query.status}",
                "a run that settles so completes its workflow, which visibility lists as completed",
            )
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
        if query.id_prefix:
            text += f" AND WorkflowId STARTS_WITH {_quoted(query.id_prefix)}"
        listing = self.client.list_workflows(text, page_size=query.limit, next_page_token=token)
        try:
            await listing.fetch_next_page()
        except RPCError as exc:
            raise TemporalHostError(f"visibility query {text!r} refused: {exc.message}") from None
        runs = [await _listed(execution) for execution in listing.current_page or ()]
        after = listing.next_page_token
        cursor = base64.urlsafe_b64encode(after).decode() if after else None
        return RunPage(runs=runs, cursor=cursor)

    async def count_runs(self, query: RunQuery) -> dict[str, int]:
        """Refused: visibility counts workflows by their Temporal status, and a flowcore
        run that failed, was cancelled or ran out of budget completes its workflow."""
        raise TemporalRefusal(
            "count runs by status",
            "a run that fails, is cancelled or runs out of budget completes its workflow:"
            " visibility cannot tell those statuses apart",
        )

    async def summary(self, run_id: str) -> RunSummary:
        """The run as ``find_runs`` lists it, from its workflow's description (read at
        once, not through visibility), with its flow id and principal from the
        arguments it was started with."""
        desc = await self._call(self.handle(run_id).describe(), run_id)
        args = await self._existing_args(run_id)
        if args is None:  # (gone between the two reads)
            raise TemporalUnknownRun(run_id, f"no run {run_id!r} on Temporal")
        flow_id = args.flow_id or (flowcore.parse_flow(args.spec).id if args.spec else None)
        found = _summary(desc, flow_id=flow_id, principal=args.principal)
        if desc.status == WorkflowExecutionStatus.COMPLETED:
            # A flowcore run that failed, was cancelled or ran out of budget still
            # completes its workflow: its result says how it settled.
            settled = (await self.result(run_id)).get("status")
            if isinstance(settled, str) and settled in RUN_STATUSES:
                found = msgspec.structs.replace(found, status=settled)
        return found

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

    async def progress_records(self, run_id: str, start: int = 0) -> list[Record]:
        """The run's progress stream from index ``start``: ``progress`` envelopes
        (``{key, step, data}``), after a ``progress.dropped`` one (``{from,
        count}``) when items from ``start`` on were dropped. Read from the run's
        workflow (the ``progress`` query; a closed run's needs a worker, which
        replays it)."""
        if type(start) is not int or start < 0:
            raise TemporalHostError(f"start must be an integer >= 0, not {start!r}")
        return records_from_wire(await self._query(run_id, PROGRESS_QUERY, start))

    async def progress(
        self, run_id: str, start: int = 0, follow: bool = False
    ) -> AsyncIterator[Record]:
        """The run's progress stream from index ``start`` (``progress_records``);
        with ``follow``, read again every ``_FOLLOW_POLL_S`` until the run's
        workflow has closed and every item is read."""
        index = start
        while True:
            desc = await self._call(self.handle(run_id).describe(), run_id)
            running = desc.status == WorkflowExecutionStatus.RUNNING
            for record in await self.progress_records(run_id, index):
                yield record
                index = record.index + 1
            if not (follow and running):
                return
            await asyncio.sleep(_FOLLOW_POLL_S)


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


async def _listed(execution: WorkflowExecution) -> RunSummary:
    """A listed run's ``RunSummary``: a completed workflow's run with the status its
    memo says it settled with (``STATUS_MEMO``; a run that failed, was cancelled or ran
    out of budget completes its workflow too), where the workflow wrote one."""
    found = _summary(execution)
    if execution.status == WorkflowExecutionStatus.COMPLETED:
        try:
            settled = await execution.memo_value(STATUS_MEMO, None)
        except Exception:  # (a memo this host did not write: the workflow's status)
            settled = None
        if isinstance(settled, str) and settled in RUN_STATUSES:
            found = msgspec.structs.replace(found, status=settled)
    return found


class _Capture(Interceptor):
    """Keeps the workflow instance one replay creates, so its records can be read.
    Each replay has its own: replays of one run at once (a page's reads, made
    together) never take each other's."""

    def __init__(self) -> None:
        self.instances: list[FlowcoreWorkflow] = []

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor] | None:
        kept = self.instances

        class _Inbound(_CaptureInbound):
            instances = kept

        return _Inbound


class _CaptureInbound(WorkflowInboundInterceptor):
    instances: ClassVar[list[FlowcoreWorkflow]]

    async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
        instance = workflow.instance()
        if isinstance(instance, FlowcoreWorkflow):
            self.instances.append(instance)
        return await self.next.execute_workflow(input)


async def history_to_log(history: WorkflowHistory) -> list[Record]:
    """flowcore's log records of the run a Temporal history recorded.

    The history is replayed through ``FlowcoreWorkflow`` outside the sandbox
    (so the workflow object, and the records it kept, can be read back); a
    history that does not replay raises ``TemporalHostError``.
    """
    capture = _Capture()
    replayer = Replayer(
        workflows=[FlowcoreWorkflow],
        interceptors=[capture],
        workflow_runner=UnsandboxedWorkflowRunner(),
    )
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    if result.replay_failure is not None:
        raise TemporalHostError(
            f"the history of {history.workflow_id} does not replay: {result.replay_failure}"
        )
    instance = capture.instances[-1] if capture.instances else None
    if instance is None:
        raise TemporalHostError(f"{history.workflow_id} is not a flowcore run")
    return list(instance.records)
