"""The ``flowcore_work`` activity: runs a tool, agent or team handler in a worker.

Handlers come from a tools module exactly as on the local host
(``flowcore_handlers``): the same module works on both. The handler receives
the effect, idempotency key included, and its return value or exception is
reported as the ``effect-succeeded`` / ``effect-failed`` event (or
``effect-outcome-unknown`` when the handler raised ``OutcomeUnknown``), which the
workflow applies at its own clock.

The activity heartbeats while the handler runs (every third of the heartbeat
timeout; none for a handler that answers sooner), so a worker that dies
mid-call is noticed after the heartbeat timeout rather than the full
start-to-close timeout; either way the workflow reports the outcome as
unknown. Temporal never retries the activity (one attempt): retries belong to
flowcore.

The activity's result is always a wire dict ``event_to_wire`` made from an
event ``flowcore.check_event`` passed, so Temporal's converter can always
carry it and the workflow can always apply it: a handler's value flowcore
cannot store fails the effect with ``unencodable-output`` (naming where the
bad value is), once, and the activity itself never fails for it.

The handler's context (``flowcore_handlers.context()``) holds what the
workflow sent with the effect (``work_context``: root run, principal, flow,
step, attempt, class, deadline, budget), and asks the run through the
worker's own client (``activity.client()``) by the Temporal host's
operations. What the handler publishes (``flowcore_handlers.publish``) goes
to its run's workflow as ``PROGRESS_SIGNAL`` batches (``_Progress``). A
worker given ``authorize`` asks it before any handler runs; a refusal fails
the effect with ``unauthorized`` (``flowcore_handlers.refused_event``).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import threading
import time
from typing import TYPE_CHECKING, Any, cast

import msgspec
from temporalio import activity
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

import flowcore
from flowcore import (
    BudgetRemaining,
    CallTool,
    EffectFailed,
    EffectOutcomeUnknown,
    EffectSucceeded,
    ErrorInfo,
    RunAgent,
    RunTeam,
)
from flowcore_handlers import (
    Authorize,
    ContextHost,
    ContextSource,
    HandlerContext,
    Heartbeats,
    Registry,
    RegistryError,
    call_handler,
    load_registry,
    publishing,
    refusal,
    refused_event,
    safe_text,
)

from ._types import ACTIVITY_NAME, PROGRESS_SIGNAL, RUN_STATUS_ACTIVITY

if TYPE_CHECKING:
    from temporalio.client import Client, WorkflowHandle

__all__ = ["FlowcoreActivities"]

log = logging.getLogger(__name__)


def _wall_ms() -> int:
    return int(time.time() * 1000)


class FlowcoreActivities:
    """The activity, bound to a worker's tools module (``tools``) or ``registry``.

    A run may name another tools module (``RunArgs.tools``); it is imported in
    the worker on first use and kept.
    """

    def __init__(
        self,
        tools: str | None = None,
        *,
        registry: Registry | None = None,
        authorize: Authorize | None = None,
    ) -> None:
        """``authorize``: the hook asked before each handler runs
        (``flowcore_handlers.Authorize``)."""
        self.tools = tools
        self.authorize = authorize
        self._registries: dict[str | None, Registry] = {}
        if registry is not None:
            self._registries[tools] = registry

    def registry(self, name: str | None = None) -> Registry:
        """The registry of tools module ``name`` (the worker's own when ``None``)."""
        name = name or self.tools
        if name not in self._registries:
            self._registries[name] = load_registry(name)
        return self._registries[name]

    @activity.defn(name=ACTIVITY_NAME)
    async def work(
        self, wire: dict[str, Any], tools: str | None = None, context: Any = None
    ) -> dict[str, Any]:
        """Run the handler of ``wire`` (an effect) from tools module ``tools``; the event.
        ``context``: what the run knows of the work (``work_context``); None from
        a workflow that sent none."""
        try:
            effect = flowcore.effect_from_wire(wire)
        except flowcore.WireError as exc:
            raise ApplicationError(str(exc), type="bad-effect", non_retryable=True) from None
        if not isinstance(effect, (CallTool, RunAgent, RunTeam)):
            raise ApplicationError(
                f"flowcore_work runs call-tool, run-agent and run-team, not {wire!r}",
                type="bad-effect",
                non_retryable=True,
            )
        facts = context if isinstance(context, dict) else {}
        if self.authorize is not None:
            refused = await self._refused(effect, _text(facts, "principal"))
            if refused is not None:  # the handler never runs
                return _result(refused)
        try:
            registry = self.registry(tools)
        except RegistryError as exc:
            error = ErrorInfo(type="tools-module", message=safe_text(exc))
            failed = EffectFailed(
                idempotency_key=effect.idempotency_key, error=error, at_ms=_wall_ms()
            )
            return _result(failed)
        info = activity.info()
        source = _context(effect, info.workflow_id, facts)
        run_id, client = info.workflow_id, _client()
        progress = _Progress(
            None if run_id is None or client is None else client.get_workflow_handle(run_id),
            effect.idempotency_key,
            _step(effect, info.workflow_id, facts)[0],
        )
        try:
            with publishing(progress.sink):
                return _result(await self._run(registry, effect, source))
        finally:
            await progress.close()  # what it published reaches the run before its result

    async def _refused(
        self, effect: CallTool | RunAgent | RunTeam, principal: str | None
    ) -> EffectFailed | None:
        """The ``unauthorized`` failure of ``effect`` when the hook refuses it."""
        assert self.authorize is not None
        refused = await refusal(self.authorize, principal, effect)
        if refused is None:
            return None
        reason, traceback = refused
        event = refused_event(effect, principal, reason, _wall_ms())
        activity.logger.warning(
            "flowcore: %s refused: %s%s",
            effect.idempotency_key,
            event.error.message,
            "" if traceback is None else "\n" + traceback,
        )
        return event

    async def _run(
        self, registry: Registry, effect: CallTool | RunAgent | RunTeam, context: ContextSource
    ) -> EffectSucceeded | EffectFailed | EffectOutcomeUnknown:
        cancel = threading.Event()
        if effect.heartbeat_timeout_ms is not None:
            return await _watched(registry, effect, cancel, context)
        call = asyncio.ensure_future(
            call_handler(registry, effect, _wall_ms, cancel=cancel, context=context)
        )
        beat = activity.info().heartbeat_timeout
        try:
            if beat:
                # A heartbeat is a request to the server: sent only while the
                # handler is still running, none for one that answers at once.
                every = max(0.05, beat.total_seconds() / 3)
                while not (await asyncio.wait({call}, timeout=every))[0]:
                    activity.heartbeat()
            event = await call
        finally:
            if not call.done():
                # The activity was cancelled (the run stopped waiting for the
                # work, learnt at a heartbeat): tell the handler, stop waiting.
                await _stop(registry, effect, cancel, call)
        return event

    @activity.defn(name=RUN_STATUS_ACTIVITY)
    async def run_status(self, run_id: str) -> str | None:
        """The status of run ``run_id``'s workflow (``COMPLETED``...), None when none."""
        try:
            described = await activity.client().get_workflow_handle(run_id).describe()
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                return None
            raise
        return None if described.status is None else described.status.name


def _context(
    effect: CallTool | RunAgent | RunTeam, run_id: str | None, facts: dict[str, Any]
) -> ContextSource:
    """A handler's context on Temporal (``flowcore_handlers.context()``). The run is
    the activity's workflow; the rest is what the workflow sent (``facts``,
    ``work_context``), the step and attempt read from the effect's key
    (``flowcore.parse_key``) when it sent none, an agent's budget its effect's
    own. What the handler asks of its run (schedule, cancel, list, signal) goes
    through a ``TemporalHost`` on the worker's client, on the activity's loop."""
    loop = asyncio.get_running_loop()
    client = _client()  # (read runs outside the activity's context)

    def read() -> HandlerContext:
        from ._host import TemporalHost

        key = effect.idempotency_key
        step, attempt = _step(effect, run_id, facts)
        budget = getattr(effect, "budget_remaining", None) or _budget(facts)
        return HandlerContext(
            run_id=run_id,
            idempotency_key=key,
            root_run_id=_text(facts, "rootRunId"),
            step=step,
            attempt=attempt,
            execution_class=_text(facts, "executionClass"),
            principal=_text(facts, "principal"),
            flow_id=_text(facts, "flowId"),
            flow_version=_text(facts, "flowVersion"),
            budget_remaining=budget,
            deadline_ms=_int(facts, "deadlineMs"),
            host=None if client is None else cast(ContextHost, TemporalHost(client)),
            loop=None if client is None else loop,
        )

    return ContextSource(read, loop)


def _client() -> Client | None:
    """The worker's client; None for an activity run without one (a test's)."""
    try:
        return activity.client()
    except RuntimeError:
        return None


def _step(
    effect: CallTool | RunAgent | RunTeam, run_id: str | None, facts: dict[str, Any]
) -> tuple[str | None, int | None]:
    """The step and attempt of the work: as the workflow sent them, else as its key says."""
    step, attempt = _text(facts, "step"), _int(facts, "attempt")
    if step is None and run_id is not None:
        try:
            info = flowcore.parse_key(effect.idempotency_key, run_id)
        except ValueError:
            return None, None
        return info.step, info.attempt
    return step, attempt


def _text(facts: dict[str, Any], name: str) -> str | None:
    value = facts.get(name)
    return value if isinstance(value, str) else None


def _int(facts: dict[str, Any], name: str) -> int | None:
    value = facts.get(name)
    return value if type(value) is int else None


def _budget(facts: dict[str, Any]) -> BudgetRemaining | None:
    try:
        return msgspec.convert(facts.get("budgetRemaining"), BudgetRemaining | None)
    except msgspec.ValidationError:
        return None


_PROGRESS_BATCH_BYTES = 256 * 1024  # the most one signal carries (items over it go alone)
_PROGRESS_EVERY_S = 0.2  # the least time between two signals of one activity


class _Progress:
    """What a handler publishes, sent to its run's workflow as ``PROGRESS_SIGNAL``s.

    ``sink`` (any thread) keeps each item with the time it was published; one
    task sends what has gathered, one signal at a time and at most one every
    ``_PROGRESS_EVERY_S``, in batches of up to ``_PROGRESS_BATCH_BYTES``, so a
    handler that publishes token by token costs its run's history a few events
    a second, not one per token. ``close`` sends the rest before the activity
    returns its result; what a handler still running then publishes (abandoned
    work) is dropped. Progress is not the run's outcome: a signal that cannot
    be sent (the run has closed) drops its batch, saying so in the worker's log.
    """

    def __init__(self, handle: WorkflowHandle[Any, Any] | None, key: str, step: str | None) -> None:
        self._handle = handle
        self._key = key
        self._step = step
        self._loop = asyncio.get_running_loop()
        self._items: list[tuple[int, str]] = []
        self._lock = threading.Lock()
        self._wake = asyncio.Event()
        self._closed = asyncio.Event()
        self._ended = False
        self._task: asyncio.Task[None] | None = None

    def sink(self, data: bytes) -> None:
        with self._lock:
            if self._ended:  # a handler still running after its activity ended
                return
            self._items.append((_wall_ms(), data.decode()))
        try:
            on_loop = asyncio.get_running_loop() is self._loop
        except RuntimeError:
            on_loop = False
        if on_loop:
            self._started()
        else:
            self._loop.call_soon_threadsafe(self._started)

    def _started(self) -> None:
        self._wake.set()
        if self._task is None and not self._closed.is_set():
            self._task = asyncio.ensure_future(self._sending())

    async def _sending(self) -> None:
        while not self._closed.is_set():
            await self._wake.wait()
            self._wake.clear()
            await self._send()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closed.wait(), _PROGRESS_EVERY_S)

    async def _send(self) -> None:
        with self._lock:
            items, self._items = self._items, []
        while items:
            size, n = 0, 0
            while n < len(items) and (n == 0 or size + len(items[n][1]) <= _PROGRESS_BATCH_BYTES):
                size += len(items[n][1])
                n += 1
            batch, items = items[:n], items[n:]
            body = {"key": self._key, "step": self._step, "items": [list(i) for i in batch]}
            try:
                if self._handle is None:  # (an activity outside any workflow)
                    raise RuntimeError("the activity belongs to no run")
                await self._handle.signal(PROGRESS_SIGNAL, body)
            except Exception as exc:
                log.warning(
                    "flowcore: %d progress item(s) of %s dropped, not sent to the run: %s",
                    len(batch),
                    self._key,
                    safe_text(exc, 200),
                )

    async def close(self) -> None:
        """Send what is left, and wait for it; what comes after is dropped."""
        self._closed.set()
        self._wake.set()
        if self._task is not None:
            await asyncio.wait({self._task})
        with self._lock:
            self._ended = True
        await self._send()


async def _watched(
    registry: Registry,
    effect: CallTool | RunAgent | RunTeam,
    cancel: threading.Event,
    context: ContextSource | None = None,
) -> EffectSucceeded | EffectFailed | EffectOutcomeUnknown:
    """Run a handler whose step has a heartbeat timeout (the activity's own, set
    by the workflow): the activity heartbeats only when the handler does, with
    the last details it gave (those of an earlier attempt until it gives its
    own), so Temporal times out a handler that goes quiet."""
    loop = asyncio.get_running_loop()
    beaten = asyncio.Event()

    def on_beat() -> None:
        loop.call_soon_threadsafe(beaten.set)

    beats = Heartbeats(effect.heartbeat_details, on_beat)
    call = asyncio.ensure_future(
        call_handler(registry, effect, _wall_ms, cancel=cancel, heartbeats=beats, context=context)
    )
    try:
        while not call.done():
            beat = asyncio.ensure_future(beaten.wait())
            await asyncio.wait({call, beat}, return_when=asyncio.FIRST_COMPLETED)
            beat.cancel()
            if beaten.is_set():
                beaten.clear()
                details = beats.details
                if details is None:
                    activity.heartbeat()
                else:
                    activity.heartbeat(details)
        return await call
    finally:
        if not call.done():  # cancelled, or timed out (learnt at a heartbeat)
            await _stop(registry, effect, cancel, call)


async def _stop(
    registry: Registry,
    effect: CallTool | RunAgent | RunTeam,
    cancel: threading.Event,
    call: asyncio.Future[Any],
) -> None:
    """Tell a handler to stop (``flowcore_handlers.cancelled``) and cancel an ``async``
    one. For work of ``cancellation: wait_cancellation_completed`` the run waits
    for the handler's end, so the activity ends (acknowledging the cancel) only
    once the handler has: a sync one is not interrupted, only told."""
    cancel.set()
    if effect.cancellation != "wait-cancellation-completed":
        call.cancel()
        return
    if inspect.iscoroutinefunction(registry.handler_for(effect)):
        call.cancel()
    await asyncio.wait({call})


def _result(event: EffectSucceeded | EffectFailed | EffectOutcomeUnknown) -> dict[str, Any]:
    """The activity's result: the event as a wire dict, checked as flowcore data first.

    ``call_handler`` already reports an unstorable value as ``unencodable-output``;
    checking again here makes the guarantee the activity's own, whatever the
    handler layer does, so a result never fails to serialize (which would fail
    the activity and lose the handler's outcome) nor reaches the workflow
    unstorable.
    """
    key = event.idempotency_key
    if isinstance(event, EffectSucceeded):
        event = flowcore.result_event(key, event.output, event.usage, at_ms=event.at_ms)
    elif isinstance(event, EffectFailed):
        try:
            flowcore.check_event(event)
        except flowcore.DataError:
            error = event.error
            error = ErrorInfo(
                type=safe_text(error.type, flowcore.MAX_NAME_CHARS),
                message=safe_text(error.message),
                retryable=error.retryable is True,
            )
            event = EffectFailed(idempotency_key=key, error=error, at_ms=event.at_ms)
    return flowcore.event_to_wire(event)
