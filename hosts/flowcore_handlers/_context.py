"""A handler's context: who and where its work is, what is left, and what it may ask of its run.

``context()`` inside a running handler (a sync one in its thread, an ``async``
one on the loop) gives a ``HandlerContext``, set by the host that runs the
handler through a context variable, as ``heartbeat`` and ``cancelled`` are.
Its fields are read from the run when the handler first asks (``ContextSource``)
and kept for the rest of that attempt; a field the host does not know is
``None``, never made up.

What a handler asks of its run (``schedule``, ``cancel_scheduled``,
``scheduled``, ``signal``) goes through the host's own operations on runs
(``ContextHost``), as the command and HTTP do; each has an ``async`` twin
(``aschedule``, ...) for an ``async`` handler, whose loop the sync ones would
block. A call scheduled from a handler is requested under
``<idempotency key>#<n>`` (its ``n``-th ``schedule`` in this attempt): the
run's log keeps that request, which says who asked, and the same request
again (the handler run again with the same key) schedules nothing twice and
answers the same id.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from flowcore import BudgetRemaining

from ._host import ScheduledCallView

__all__ = [
    "ContextError",
    "ContextHost",
    "ContextSource",
    "HandlerContext",
    "NoHandlerContext",
    "context",
    "context_var",
]

T = TypeVar("T")


class NoHandlerContext(LookupError):
    """``context()`` was called outside a running handler (or on a host that sets none)."""


class ContextError(RuntimeError):
    """A handler asked its context for something it cannot do where it is
    (no host to ask, or a sync call from an ``async`` handler's loop), or with
    bad arguments; the message says which and what to do instead."""


class ContextHost(Protocol):
    """What a host offers a handler's context: its operations on runs."""

    def now(self) -> int: ...

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
    ) -> str: ...

    async def cancel_scheduled(self, run_id: str, schedule_id: str) -> bool: ...

    async def scheduled(
        self, run_id: str | None = None, tool: str | None = None, status: str | None = None
    ) -> Sequence[ScheduledCallView]: ...

    async def signal(
        self, run_id: str, name: str, payload: Any = None, key: str | None = None
    ) -> None: ...


class _Order:
    """The order of a handler attempt's ``schedule`` calls (thread-safe)."""

    def __init__(self) -> None:
        self._n = 0
        self._lock = threading.Lock()

    def next(self) -> int:
        with self._lock:
            self._n += 1
            return self._n


@dataclass(frozen=True)
class HandlerContext:
    """The context of one running handler attempt (``context()``).

    ``run_id``, ``root_run_id`` (the run at the top of its tree of child
    runs; the run itself for a root), ``idempotency_key`` (the effect's),
    ``step`` (the step's id; None for a scheduled call), ``attempt`` (1, then
    2 after a retry, ...), ``execution_class`` (a tool's declared class:
    ``readonly``, ``idempotent`` or ``uncertain``; None for agents and teams),
    ``principal`` (who started the run, where the host records it),
    ``flow_id`` and ``flow_version`` (the flow's spec hash),
    ``budget_remaining`` (every limit of the run's budget, as the effect
    carries it for an agent, else as the run's ledger stands) and
    ``deadline_ms`` (when the step's or this attempt's timeout fires, the
    earlier; None without one).
    """

    run_id: str | None
    idempotency_key: str
    root_run_id: str | None = None
    step: str | None = None
    attempt: int | None = None
    execution_class: str | None = None
    principal: str | None = None
    flow_id: str | None = None
    flow_version: str | None = None
    budget_remaining: BudgetRemaining | None = None
    deadline_ms: int | None = None
    host: ContextHost | None = field(default=None, repr=False, compare=False)
    loop: asyncio.AbstractEventLoop | None = field(default=None, repr=False, compare=False)
    _order: _Order = field(default_factory=_Order, repr=False, compare=False)

    # --- what exists for every handler -------------------------------------------------

    def heartbeat(self, details: Any = None) -> None:
        """``flowcore_handlers.heartbeat``."""
        from . import heartbeat

        heartbeat(details)

    def cancelled(self) -> bool:
        """``flowcore_handlers.cancelled``."""
        from . import cancelled

        return cancelled()

    def cancellation(self) -> threading.Event:
        """``flowcore_handlers.cancellation``."""
        from . import cancellation

        return cancellation()

    def publish(self, data: Any) -> None:
        """``flowcore_handlers.publish``: add ``data`` to the run's progress stream."""
        from ._progress import publish

        publish(data)

    # --- what a handler asks of its run ------------------------------------------------

    def schedule(
        self,
        tool: str,
        input: Any = None,
        *,
        delay_ms: int | None = None,
        at_ms: int | None = None,
        every_ms: int | None = None,
        cron: str | None = None,
        timezone: str | None = None,
        count: int | None = None,
        until_ms: int | None = None,
    ) -> str:
        """Schedule a call to ``tool`` (declared ``schedulable`` by the run's flow)
        with ``input``, after ``delay_ms`` or at ``at_ms`` (epoch ms; one in the
        past is due now), neither: now. Returns the scheduled call's id, the
        same when the handler runs again with the same key (nothing is
        scheduled twice). A recurring call gives ``every_ms`` or ``cron`` (in
        ``timezone``, an IANA name, UTC by default; the first firing is one
        period after the delay), and may stop after ``count`` firings or once
        the next would come after ``until_ms`` (epoch ms). A sync call: from an
        ``async`` handler, ``aschedule``."""
        return self._sync(
            self.aschedule(
                tool,
                input,
                delay_ms=delay_ms,
                at_ms=at_ms,
                every_ms=every_ms,
                cron=cron,
                timezone=timezone,
                count=count,
                until_ms=until_ms,
            )
        )

    async def aschedule(
        self,
        tool: str,
        input: Any = None,
        *,
        delay_ms: int | None = None,
        at_ms: int | None = None,
        every_ms: int | None = None,
        cron: str | None = None,
        timezone: str | None = None,
        count: int | None = None,
        until_ms: int | None = None,
    ) -> str:
        """``schedule`` for an ``async`` handler."""
        host, run_id = self._host("schedule")
        if delay_ms is not None and at_ms is not None:
            raise ContextError("schedule: give delay_ms or at_ms, not both")
        for name, value in (
            ("delay_ms", delay_ms),
            ("at_ms", at_ms),
            ("every_ms", every_ms),
            ("count", count),
            ("until_ms", until_ms),
        ):
            if value is not None and (type(value) is not int or value < 0):
                raise ContextError(f"schedule: {name} must be an integer >= 0, not {value!r}")
        for name, text in (("cron", cron), ("timezone", timezone)):
            if text is not None and not isinstance(text, str):
                raise ContextError(f"schedule: {name} must be text, not {text!r}")
        delay = delay_ms or 0
        if at_ms is not None:
            delay = max(0, at_ms - host.now())
        request = f"{self.idempotency_key}#{self._order.next()}"
        recurrence: dict[str, Any] = {
            name: value
            for name, value in (
                ("every_ms", every_ms),
                ("cron", cron),
                ("timezone", timezone),
                ("count", count),
                ("until_ms", until_ms),
            )
            if value is not None
        }
        return await host.add_scheduled(run_id, tool, input, delay, request=request, **recurrence)

    def cancel_scheduled(self, schedule_id: str) -> bool:
        """Cancel a pending scheduled call of this run: True if it was pending."""
        return self._sync(self.acancel_scheduled(schedule_id))

    async def acancel_scheduled(self, schedule_id: str) -> bool:
        """``cancel_scheduled`` for an ``async`` handler."""
        host, run_id = self._host("cancel_scheduled")
        return await host.cancel_scheduled(run_id, schedule_id)

    def scheduled(self) -> list[ScheduledCallView]:
        """This run's scheduled calls, pending and finished, oldest due first."""
        return self._sync(self.ascheduled())

    async def ascheduled(self) -> list[ScheduledCallView]:
        """``scheduled`` for an ``async`` handler."""
        host, run_id = self._host("scheduled")
        return list(await host.scheduled(run_id))

    def signal(self, run_id: str, name: str, payload: Any = None) -> None:
        """Send signal ``name`` to run ``run_id`` (this run's own ``self.run_id`` included)."""
        self._sync(self.asignal(run_id, name, payload))

    async def asignal(self, run_id: str, name: str, payload: Any = None) -> None:
        """``signal`` for an ``async`` handler."""
        host, _ = self._host("signal")
        await host.signal(run_id, name, payload)

    def _host(self, what: str) -> tuple[ContextHost, str]:
        if self.host is None or self.run_id is None:
            raise ContextError(f"{what}: this host does not offer it to handlers")
        return self.host, self.run_id

    def _sync(self, call: Coroutine[Any, Any, T]) -> T:
        loop = self.loop
        if loop is None:
            call.close()
            raise ContextError("this host does not offer it to handlers")
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            call.close()
            raise ContextError(
                "a sync context call from an async handler would block its loop:"
                " await the a-prefixed one (aschedule, acancel_scheduled, ascheduled, asignal)"
            )
        return asyncio.run_coroutine_threadsafe(call, loop).result()


class ContextSource:
    """A handler attempt's context as its host sets it: ``read`` builds it, once,
    when the handler first asks (on ``loop``'s thread when given one)."""

    def __init__(
        self, read: Callable[[], HandlerContext], loop: asyncio.AbstractEventLoop | None = None
    ) -> None:
        self._read = read
        self._loop = loop
        self._value: HandlerContext | None = None
        self._lock = threading.Lock()

    def get(self) -> HandlerContext:
        with self._lock:
            if self._value is None:
                self._value = self._build()
            return self._value

    def _build(self) -> HandlerContext:
        loop = self._loop
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if loop is None or running is loop:
            return self._read()

        async def reading() -> HandlerContext:
            return self._read()

        return asyncio.run_coroutine_threadsafe(reading(), loop).result()


context_var: contextvars.ContextVar[ContextSource | None] = contextvars.ContextVar(
    "flowcore_handler_context", default=None
)


def context() -> HandlerContext:
    """Inside a running handler: its ``HandlerContext``. Outside one (or on a
    host that sets none) raises ``NoHandlerContext``."""
    source = context_var.get()
    if source is None:
        raise NoHandlerContext(
            "flowcore_handlers.context() is only available inside a running handler"
            " (a tool, agent or team the host is running)"
        )
    return source.get()
