"""The Temporal host's flow updates and queries: ``update``, ``update_result`` and
``query`` of the ``flowcore_handlers.Host`` contract, on Temporal's own updates
and queries (the workflow's side is ``_workflow_updates``).

An update is a Temporal update of the flow's update name (prefixed
``flowcore/`` when the workflow's own handler has that name,
``_types.temporal_name``) whose update id is the flowcore update id: Temporal
deduplicates it within a Temporal run, the run's state across them. The
validator's rejection is ``flowcore.UpdateRefused``; a failed update is an
``UpdateOutcome`` whose error is the run's.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from temporalio.client import (
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
    WorkflowUpdateHandle,
    WorkflowUpdateRPCTimeoutOrCancelledError,
    WorkflowUpdateStage,
)
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

import flowcore
from flowcore import UpdateRequested
from flowcore_handlers import UnknownUpdate, UpdateOutcome

from ._host_base import (
    _QUERY_TIMEOUT,
    _SWITCH_WAIT_S,
    TemporalRunSettled,
    _failure_text,
)
from ._reads import TemporalReads
from ._types import (
    SWITCHING_ERROR,
    UPDATE_REFUSED_ERROR,
    UPDATES_QUERY,
    TemporalHostError,
    temporal_name,
)

# Sends the update and returns once the workflow accepted (or rejected) it: a
# Temporal update, or an update-with-start. The outcome is polled afterwards, as
# long as it takes (a person may answer days later).
Send = Callable[[], Awaitable[WorkflowUpdateHandle[Any]]]


class TemporalUnknownUpdate(TemporalHostError, UnknownUpdate):
    """The run's incarnation knows no update of that id."""


def update_args(input: Any, principal: str | None) -> list[Any]:
    """A flow update's Temporal arguments: its input, and the principal after it."""
    return [input] if principal is None else [input, principal]


def check_update(name: str, input: Any, update_id: str, principal: str | None) -> None:
    """What the workflow would refuse before sending it: a value that is not
    flowcore data, an update id it cannot take (``UpdateRefused``, ``bad-input``)."""
    try:
        flowcore.check_event(
            UpdateRequested(
                update_id=update_id, name=name, input=input, principal=principal, at_ms=0
            )
        )
    except (flowcore.DataError, flowcore.EventRejected) as exc:
        raise flowcore.UpdateRefused("bad-input", name, str(exc)) from None


class TemporalUpdates(TemporalReads):
    """Flow updates and queries (see ``TemporalHost``)."""

    async def update(
        self,
        run_id: str,
        name: str,
        input: Any = None,
        update_id: str | None = None,
        *,
        wait: bool = True,
        timeout_s: float | None = None,
        principal: str | None = None,
    ) -> UpdateOutcome:
        """Send the run's update ``name`` with ``input``; its outcome.

        ``update_id`` None: a new one (uuid4 hex). An id the run's incarnation
        knows runs nothing: its outcome is answered (waited for if asked).
        Refused by the run (unknown name, bad input, its validator, a limit, a
        run that ends): ``flowcore.UpdateRefused``, and nothing is written.
        ``wait`` False: answered once the workflow has accepted it; ``timeout_s``:
        ``running`` when it has not ended by then. ``UnknownRun``; a closed run
        answers an id it knows, else ``RunSettled``."""
        uid = update_id if update_id is not None else uuid.uuid4().hex
        check_update(name, input, uid, principal)
        tname = temporal_name(name, "update")
        args = update_args(input, principal)

        def send() -> Awaitable[WorkflowUpdateHandle[Any]]:
            return self.handle(run_id).start_update(
                tname,
                args=args,
                id=uid,
                wait_for_stage=WorkflowUpdateStage.ACCEPTED,
                rpc_timeout=_QUERY_TIMEOUT,
            )

        return await self._deliver(run_id, name, uid, send, wait=wait, timeout_s=timeout_s)

    async def update_result(
        self, run_id: str, update_id: str, *, wait: bool = False, timeout_s: float | None = None
    ) -> UpdateOutcome:
        """Where update ``update_id`` stands (waited for with ``wait``, for at most
        ``timeout_s``); ``UnknownUpdate`` for an id the run's incarnation lacks.

        Waiting sends the same update id again (``update``): the run answers it
        from its state and runs nothing."""
        view = await self._update_view(run_id, update_id)
        if view is None:
            raise TemporalUnknownUpdate(
                run_id, update_id, f"run {run_id!r} has no update {update_id!r}"
            )
        if not wait or view.status != "running":
            return UpdateOutcome.of(run_id, view)
        return await self.update(run_id, view.name, None, update_id, timeout_s=timeout_s)

    async def updates(self, run_id: str) -> list[UpdateOutcome]:
        """The updates of the run's incarnation, in the order they were taken."""
        raw = await self._query(run_id, UPDATES_QUERY)
        views = msgspec.convert(raw, list[flowcore.UpdateView])
        return [UpdateOutcome.of(run_id, view) for view in views]

    async def query(self, run_id: str, name: str, args: Any = None) -> Any:
        """The value of the run's query ``name`` with ``args`` (a Temporal query;
        a closed run's workflow is replayed to answer it). ``flowcore.QueryError``
        as the run raised it; ``UnknownRun``."""
        handle = self.handle(run_id)
        tname = temporal_name(name, "query")
        sent = [] if args is None else [args]
        try:
            return await self._call(
                handle.query(tname, args=sent, rpc_timeout=_QUERY_TIMEOUT), run_id
            )
        except WorkflowQueryFailedError as exc:
            code, _, message = exc.message.partition(": ")
            if code in ("unknown-query", "bad-args", "expression-error"):
                raise flowcore.QueryError(code, name, message) from None
            raise TemporalHostError(f"{run_id}: query {name} failed: {exc.message}") from None

    # --- sending one ---------------------------------------------------------------------

    async def _deliver(
        self,
        run_id: str,
        name: str,
        update_id: str,
        send: Send,
        *,
        wait: bool,
        timeout_s: float | None,
    ) -> UpdateOutcome:
        """Send an update (``send``) and answer its outcome; sent again while the
        run goes over to a new Temporal run (``run-switching``)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _SWITCH_WAIT_S
        until = None if timeout_s is None else loop.time() + timeout_s
        while True:
            try:
                handle = await send()
                # Sent: a switch may come any time later, and is waited out afresh.
                deadline = loop.time() + _SWITCH_WAIT_S
                if not wait:
                    view = await self._update_view(run_id, update_id)
                    if view is not None:
                        return UpdateOutcome.of(run_id, view)
                    until = None  # not taken: the handle's outcome says why
                left = None if until is None else max(0.0, until - loop.time())
                polling = asyncio.ensure_future(handle.result())
                done, _ = await asyncio.wait({polling}, timeout=left)
                if not done:  # (the poll, cancelled, raises an error of its own)
                    polling.cancel()
                    await asyncio.gather(polling, return_exceptions=True)
                    return UpdateOutcome(
                        run_id=run_id, update_id=update_id, name=name, status="running"
                    )
                output = polling.result()
                return UpdateOutcome(
                    run_id=run_id, update_id=update_id, name=name, status="completed", output=output
                )
            except WorkflowUpdateFailedError as exc:
                failed = _failed(run_id, name, exc.cause)
                if failed is not None:
                    return failed
                if loop.time() >= deadline:
                    raise TemporalHostError(_failure_text(exc.cause)) from None
            except WorkflowUpdateRPCTimeoutOrCancelledError:
                raise TemporalHostError(
                    f"run {run_id!r} did not take update {name!r} in time: is a worker polling"
                    f" task queue {self.task_queue!r}? (`flowcore temporal worker`)"
                ) from None
            except RPCError as exc:
                error = self._rpc_error(exc, run_id)
                if isinstance(error, TemporalRunSettled):
                    # A closed run still answers the updates it took.
                    view = await self._update_view(run_id, update_id)
                    if view is not None:
                        return UpdateOutcome.of(run_id, view)
                    raise error from None
                if loop.time() >= deadline or not await self._went_on(run_id, exc):
                    raise error from None
            await asyncio.sleep(0.05)

    async def _update_view(self, run_id: str, update_id: str) -> flowcore.UpdateView | None:
        """What the run's state knows of update ``update_id`` (None: nothing)."""
        raw = await self._query(run_id, UPDATES_QUERY, update_id)
        views = msgspec.convert(raw, list[flowcore.UpdateView])
        return views[0] if views else None


def _failed(run_id: str, name: str, cause: BaseException | None) -> UpdateOutcome | None:
    """The outcome a failed Temporal update stands for: the flow update's error
    (``failed``), or its refusal raised; None when it must be sent again (the
    run is going over to a new Temporal run). Anything else is the host's error."""
    if not isinstance(cause, ApplicationError):
        raise TemporalHostError(f"{run_id}: update {name}: {_failure_text(cause)}")
    details = cause.details
    first = details[0] if details else None
    if cause.type == UPDATE_REFUSED_ERROR and isinstance(first, dict) and "code" in first:
        raise flowcore.UpdateRefused(str(first["code"]), name, cause.message)
    if isinstance(first, dict) and "flowcoreUpdate" in first:
        view = msgspec.convert(first["flowcoreUpdate"], flowcore.UpdateView)
        return UpdateOutcome.of(run_id, view)
    if cause.type == SWITCHING_ERROR:
        return None
    raise TemporalHostError(f"{run_id}: update {name}: {cause.message}")
