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
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

import flowcore
from flowcore import (
    CallTool,
    EffectFailed,
    EffectOutcomeUnknown,
    EffectSucceeded,
    ErrorInfo,
    RunAgent,
    RunTeam,
)
from flowcore_handlers import (
    ContextSource,
    HandlerContext,
    Heartbeats,
    Registry,
    RegistryError,
    call_handler,
    load_registry,
    safe_text,
)

from ._types import ACTIVITY_NAME, RUN_STATUS_ACTIVITY

__all__ = ["FlowcoreActivities"]


def _wall_ms() -> int:
    return int(time.time() * 1000)


class FlowcoreActivities:
    """The activity, bound to a worker's tools module (``tools``) or ``registry``.

    A run may name another tools module (``RunArgs.tools``); it is imported in
    the worker on first use and kept.
    """

    def __init__(self, tools: str | None = None, *, registry: Registry | None = None) -> None:
        self.tools = tools
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
    async def work(self, wire: dict[str, Any], tools: str | None = None) -> dict[str, Any]:
        """Run the handler of ``wire`` (an effect) from tools module ``tools``; the event."""
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
        try:
            registry = self.registry(tools)
        except RegistryError as exc:
            error = ErrorInfo(type="tools-module", message=safe_text(exc))
            failed = EffectFailed(
                idempotency_key=effect.idempotency_key, error=error, at_ms=_wall_ms()
            )
            return _result(failed)
        cancel = threading.Event()
        context = _context(effect, activity.info().workflow_id)
        if effect.heartbeat_timeout_ms is not None:
            return _result(await _watched(registry, effect, cancel, context))
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
        return _result(event)

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


def _context(effect: CallTool | RunAgent | RunTeam, run_id: str | None) -> ContextSource:
    """A handler's context on Temporal (``flowcore_handlers.context()``): what the
    activity knows without the run's state. The run is the activity's workflow;
    the step and its attempt are read from the effect's key (``flowcore.parse_key``),
    the budget is an agent's effect's own. The root run, the tool's execution
    class, the principal, the flow and its version and the deadline are not
    known here: ``None``. Nothing can be asked of the run (``ContextError``)."""

    def read() -> HandlerContext:
        key = effect.idempotency_key
        info: flowcore.KeyInfo | None = None
        if run_id is not None:
            try:
                info = flowcore.parse_key(key, run_id)
            except ValueError:
                pass
        return HandlerContext(
            run_id=run_id,
            idempotency_key=key,
            step=None if info is None else info.step,
            attempt=None if info is None else info.attempt,
            budget_remaining=getattr(effect, "budget_remaining", None),
        )

    return ContextSource(read)


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
