"""The local host's execution: running handlers and committing their results.

A claimed effect's handler runs in its own task (sync handlers in threads,
under the host-wide limit; one with a heartbeat timeout watched), and its
result goes to the group commit: every event that finished while the previous
commit was running is applied in the next transaction (``_commit``; an event
that fails is isolated in its own savepoint). After each commit (``_after``)
the work it claimed is spawned, the work the runs stopped waiting for is
stopped, and the followers and callbacks are told.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable, Iterable
from typing import Any, cast

import flowcore
from flowcore import (
    CallTool,
    EffectFailed,
    EffectOutcomeUnknown,
    EffectSucceeded,
    ErrorInfo,
    Event,
    RunAgent,
    RunSubflow,
    RunTeam,
    SignalRun,
)
from flowcore_handlers import (
    ContextHost,
    ContextSource,
    HandlerContext,
    HandlerError,
    Heartbeats,
    Registry,
    RegistryError,
    cancelled_event,
    format_traceback,
    heartbeat_timeout_event,
    outcome_event,
    publishing,
    run_handler,
    safe_text,
    waits_for_cancel,
)

from ._authorize import refusal, refused_event
from ._base import HostBase, log
from ._store import Applied, Claimed, Conflict, HostError
from ._store_progress import Published, add_progress


class Execution(HostBase):
    """Running claimed work and the group commit (see ``LocalWorker``)."""

    # --- running handlers and committing their results --------------------------------

    def _after(self, applied: Iterable[Applied]) -> None:
        # Followers of the log (``events(follow=True)``) in this process see
        # the commit at once; those of other processes on their next poll.
        self._committed.set()
        self._committed = asyncio.Event()
        wake = False
        for item in applied:
            for key in item.plan.cancel:
                self._stop_work(item.run_id, key)
            for claimed in item.claimed:
                self._spawn(claimed)
            if item.records and self._on_records is not None:
                self._callback(self._on_records, item.records, item.run_id, "on_records")
            if item.plan.settled is not None and self._tracing is not None:
                self._tracing.settled(item.run_id, item.plan.settled)
            if item.plan.settled is not None and self._on_settled is not None:
                self._tell_settled(item.run_id)
            # Work this worker claimed is already running; the main loop only
            # needs waking for what it handles: timers, subflows, settlement.
            plan = item.plan
            handles = (
                plan.arm
                or plan.settled
                or any(isinstance(e, (RunSubflow, SignalRun)) for e in plan.start)
            )
            wake = wake or not item.claimed or bool(handles)
        # A limited tool's call may wait for the room this commit made.
        wake = wake or bool(self.tool_limits)
        if wake and self._wake is not None:
            self._wake.set()

    def _stop_work(self, run_id: str, key: str) -> None:
        """The run no longer waits for ``key``: if this worker runs its handler, tell
        it (``flowcore_handlers.cancelled``), and cancel an ``async`` one (at its
        next ``await``). A sync one runs on in its thread and may stop when it
        looks; what a handler still returns is recorded as a late result, which
        changes nothing but the report. The commit that stopped waiting closed
        the work's row. Work of ``cancellation: wait_cancellation_completed`` is
        stopped the same way, but the run waits for its end: its row stays, and
        ``_execute`` reports how it ended (``cancelled`` when the handler
        stopped). Work of ``abandon`` never comes here (``plan.detach``): its
        handler runs to its end, told nothing, and its late result is recorded."""
        ident = (run_id, key)
        task = self._running.get(ident)
        if task is None or ident in self._reissued:
            return
        self._cancels[ident].set()  # a handler not begun yet never begins
        if ident in self._on_loop:
            task.cancel()

    def _tell_settled(self, run_id: str) -> None:
        assert self._on_settled is not None
        self._callback(self._on_settled, self.store.run_row(run_id), run_id, "on_settled")

    @staticmethod
    def _callback(callback: Callable[[Any], Any], value: Any, run_id: str, name: str) -> None:
        try:
            callback(value)
        except Exception as exc:  # the caller's code: say so, keep working
            log.warning(
                "flowcore: %s raised for run %s: %s: %s",
                name,
                run_id,
                type(exc).__name__,
                safe_text(exc, 200),
            )

    def _spawn(self, claimed: Claimed) -> None:
        ident = (claimed.run_id, claimed.key)
        if ident in self._running:
            if ident in self._reissued:  # run it once the last issue's task ends
                self._reissued[ident] = claimed
            return
        running = self._execute(claimed)
        if self._tracing is not None:
            running = self._tracing.work(claimed, running)
        self._cancels[ident] = threading.Event()
        self._running[ident] = asyncio.create_task(running)

    async def _execute(self, claimed: Claimed) -> None:
        assert self._sem is not None
        ident = (claimed.run_id, claimed.key)
        cancel = self._cancels[ident]
        try:
            if cancel.is_set():  # stopped before it began
                if waits_for_cancel(claimed.effect):  # the run waits to hear it ended
                    await self._submit(claimed.run_id, cancelled_event(claimed.effect, self.now()))
                return
            async with self._sem:
                refused = await self._refused(claimed)
                if refused is not None:  # nothing is run
                    failed, self._failures[ident] = refused
                    await self._submit(claimed.run_id, failed)
                    return
                try:
                    registry = self._registry(claimed.tools)
                except RegistryError as exc:  # the step fails now, not after a lease expires
                    self._cannot_load(claimed, exc)
                    error = HandlerError("tools-module-error", str(exc))
                    event: Event = outcome_event(claimed.effect, None, error, self.now())
                    self._failures[ident] = exc.detail
                else:
                    if inspect.iscoroutinefunction(registry.handler_for(claimed.effect)):
                        self._on_loop.add(ident)
                    context = ContextSource(
                        lambda: self._handler_context(claimed), asyncio.get_running_loop()
                    )
                    with publishing(self._sink(claimed)):
                        if getattr(claimed.effect, "heartbeat_timeout_ms", None) is None:
                            event, raised = await run_handler(
                                registry,
                                claimed.effect,
                                self.now,
                                self._threads,
                                cancel,
                                context=context,
                            )
                        else:
                            event, raised = await self._watched(
                                registry, claimed.effect, cancel, context
                            )
                    if isinstance(event, EffectFailed):
                        self._failures[ident] = None if raised is None else format_traceback(raised)
                    elif isinstance(event, EffectOutcomeUnknown):
                        self._reissued[ident] = None
            await self._submit(claimed.run_id, event)
        except asyncio.CancelledError:
            if not cancel.is_set():
                raise  # the host is closing
            # The run stopped waiting for this work (_stop_work): nothing to report,
            # unless it waits for the handler to have stopped (wait_cancellation_completed).
            if waits_for_cancel(claimed.effect):
                try:
                    await self._submit(claimed.run_id, cancelled_event(claimed.effect, self.now()))
                except Exception as exc:
                    log.warning(
                        "flowcore: the end of cancelled %s was not committed (%s: %s);"
                        " recovery will handle it",
                        claimed.key,
                        type(exc).__name__,
                        safe_text(exc, 200),
                    )
        except Exception as exc:
            # The group commit itself failed (the database, not this event):
            # the result is lost with it, and the effect's lease lapses, so
            # recovery handles it as after a crash. Say so once; a task's
            # unretrieved exception would print a traceback instead.
            log.warning(
                "flowcore: the result of %s was not committed (%s: %s); recovery will handle it",
                claimed.key,
                type(exc).__name__,
                safe_text(exc, 200),
            )
        finally:
            self._running.pop(ident, None)
            self._cancels.pop(ident, None)
            self._on_loop.discard(ident)
            self._failures.pop(ident, None)
            again = self._reissued.pop(ident, None)
            if again is not None:
                self._spawn(again)

    async def _refused(self, claimed: Claimed) -> tuple[Event, str | None] | None:
        """The ``unauthorized`` failure of ``claimed`` (and the traceback of a hook
        that raised) when the ``authorize`` hook refuses the run's principal it."""
        if self.authorize is None:
            return None
        principal = self.store.run_row(claimed.run_id).principal
        refused = await refusal(self.authorize, principal, claimed.effect)
        if refused is None:
            return None
        reason, traceback = refused
        return refused_event(claimed.effect, principal, reason, self.now()), traceback

    def _sink(self, claimed: Claimed) -> Callable[[bytes], None]:
        """Where the progress the claimed work's handler publishes goes: the next
        group commit (from the handler's thread, or from the loop)."""
        loop = asyncio.get_running_loop()
        try:
            step = flowcore.parse_key(claimed.key, claimed.run_id).step
        except ValueError:
            step = None

        def sink(data: bytes) -> None:
            item = Published(claimed.run_id, claimed.key, step, self.now(), data)
            try:
                on_loop = asyncio.get_running_loop() is loop
            except RuntimeError:
                on_loop = False
            if on_loop:
                self._publish(item)
            else:
                loop.call_soon_threadsafe(self._publish, item)

        return sink

    def _publish(self, item: Published) -> None:
        self._published.append(item)
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_loop())
        assert self._queue_event is not None
        self._queue_event.set()

    def _commit_progress(self, published: list[Published]) -> None:
        """The published items, in their own transaction before the batch's events:
        a handler's items are stored no later than its result."""
        with self.store.tx():
            add_progress(self.store.conn, published, self.progress_cap)

    async def _watched(
        self,
        registry: Registry,
        effect: CallTool | RunAgent | RunTeam,
        cancel: threading.Event,
        context: ContextSource | None = None,
    ) -> tuple[Event, BaseException | None]:
        """Run a handler that must heartbeat within the effect's heartbeat timeout
        (from its start, then from its last heartbeat). One that goes quiet is
        stopped as ``_stop_work`` stops work (``cancelled()`` turns true, an
        ``async`` one is cancelled) and reported as ``heartbeat-timeout`` with
        the last details it heartbeated; what it still returns is dropped."""
        loop = asyncio.get_running_loop()
        beaten = asyncio.Event()

        def on_beat() -> None:
            loop.call_soon_threadsafe(beaten.set)

        beats = Heartbeats(effect.heartbeat_details, on_beat)
        call = asyncio.ensure_future(
            run_handler(registry, effect, self.now, self._threads, cancel, beats, context)
        )
        assert effect.heartbeat_timeout_ms is not None
        limit = effect.heartbeat_timeout_ms / 1000
        try:
            while True:
                beat = asyncio.ensure_future(beaten.wait())
                done, _ = await asyncio.wait(
                    {call, beat}, timeout=limit, return_when=asyncio.FIRST_COMPLETED
                )
                beat.cancel()
                if call in done:
                    return call.result()
                if beat not in done:
                    break  # quiet for the whole timeout
                beaten.clear()
        finally:
            if not call.done():
                cancel.set()
                call.cancel()
        return heartbeat_timeout_event(effect, beats.details, self.now()), None

    def _handler_context(self, claimed: Claimed) -> HandlerContext:
        """The context of ``claimed``'s handler (``flowcore_handlers.context()``), read
        on the loop's thread when the handler first asks: the run's row (its root,
        principal, flow) and where its work stands in the run's state (step,
        attempt, class, deadline, budget). A run gone meanwhile gives its ids alone."""
        store = self.store
        run_id, key = claimed.run_id, claimed.key
        # The host is one object of its roles: the client's operations are its own.
        host, loop = cast(ContextHost, self), asyncio.get_running_loop()
        try:
            row = store.run_row(run_id)
            root = row
            while root.parent_run is not None:
                root = store.run_row(root.parent_run)
            place = flowcore.work_place(store.state(run_id), key)
        except HostError:
            return HandlerContext(run_id=run_id, idempotency_key=key, host=host, loop=loop)
        budget = getattr(claimed.effect, "budget_remaining", None)
        return HandlerContext(
            run_id=run_id,
            idempotency_key=key,
            root_run_id=root.run_id,
            step=None if place is None else place.step,
            attempt=None if place is None else place.attempt,
            execution_class=None if place is None else place.exec_class,
            principal=row.principal,
            flow_id=row.flow_id,
            flow_version=row.spec_hash,
            budget_remaining=budget or (None if place is None else place.budget),
            deadline_ms=None if place is None else place.deadline_ms,
            host=host,
            loop=loop,
        )

    def _cannot_load(self, claimed: Claimed, exc: RegistryError) -> None:
        """Say once per tools module that this worker cannot load it (the runs fail with why)."""
        name = claimed.tools or self.tools
        if name not in self._warned:
            self._warned.add(name)
            log.warning(
                "flowcore: runs using tools module %r fail (first: %s): %s",
                name,
                claimed.run_id,
                safe_text(exc, 500),
            )

    def _submit(self, run_id: str, event: Event) -> asyncio.Future[Applied]:
        if self._tracing is not None:
            key = getattr(event, "idempotency_key", "")
            self._tracing.submitted(run_id, event, self._failures.get((run_id, key)))
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Applied] = loop.create_future()
        self._queue.append((run_id, event, future))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_loop())
        assert self._queue_event is not None
        self._queue_event.set()
        return future

    def _commit(
        self, batch: list[tuple[str, Event, asyncio.Future[Applied]]], now: int
    ) -> list[tuple[Applied, list[Applied]]]:
        """One group commit: every queued event applied in one transaction.

        The batch is first planned outside the write lock and written under
        it (``Store.planned``); if another process changed one of its runs
        meanwhile, it is applied again holding the lock (``Store.tx``).
        An event that fails (its run is gone, or anything unforeseen) must not
        take the other runs' events down, nor leave half its writes behind.
        That is rare, so a batch first runs without a savepoint per event (two
        statements each); if any event fails, the transaction is rolled back
        and the batch runs again with each event in its own savepoint, where a
        failure touches that event alone (``_isolated``).
        """
        store = self.store
        for attempt in (store.planned, store.tx):
            try:
                with attempt():
                    return [self._apply_one(run_id, event, now) for run_id, event, _ in batch]
            except Conflict:
                store.take_extra()  # side applies of the attempt
            except Exception:
                store.take_extra()
                break
        with store.tx():
            return [self._isolated(run_id, event, now) for run_id, event, _ in batch]

    def _isolated(self, run_id: str, event: Event, now: int) -> tuple[Applied, list[Applied]]:
        """Apply one event in its own savepoint; whatever goes wrong stays with its run.

        A HostError rejects the event. Any other exception is a failure of the
        host, not of the run's other work: a work result it could not apply
        fails its own effect (``host-error``), once, rather than leaving the
        effect dispatched until its lease lapses and recovery runs it again.
        """
        store = self.store
        try:
            with store.savepoint():
                return self._apply_one(run_id, event, now)
        except HostError as exc:
            store.take_extra()
            return self._rejected(run_id, event, str(exc))
        except Exception as exc:
            store.take_extra()
            why = f"{type(exc).__name__}: {safe_text(exc, 200)}"
            log.warning(
                "flowcore: cannot apply %s to run %s: %s", event.__struct_config__.tag, run_id, why
            )
            key = getattr(event, "idempotency_key", None)
            if isinstance(event, (EffectSucceeded, EffectFailed)) and key is not None:
                message = f"the host could not apply the result of {key}: {why}"
                failed = EffectFailed(
                    idempotency_key=key,
                    error=ErrorInfo(type="host-error", message=message),
                    at_ms=event.at_ms,
                )
                try:
                    with store.savepoint():
                        return self._apply_one(run_id, failed, now)
                except Exception:
                    store.take_extra()
            return self._rejected(run_id, event, f"the host could not apply it: {why}")

    def _apply_one(self, run_id: str, event: Event, now: int) -> tuple[Applied, list[Applied]]:
        applied = self.store.apply(run_id, event, now)
        if applied.rejected is not None:
            return self._rejected(run_id, event, applied.rejected)
        if isinstance(event, EffectFailed) and (run_id, event.idempotency_key) in self._failures:
            # In the event's transaction: the failure is kept exactly when it is applied.
            traceback = self._failures[(run_id, event.idempotency_key)]
            self.store.record_failure(run_id, event.idempotency_key, event.error, traceback, now)
        return applied, self.store.take_extra()

    def _rejected(self, run_id: str, event: Event, why: str) -> tuple[Applied, list[Applied]]:
        key = getattr(event, "idempotency_key", None)
        if key is not None:
            self.store.close(run_id, key)
        return Applied(run_id, rejected=why), self.store.take_extra()

    async def _write_loop(self) -> None:
        assert self._queue_event is not None
        while True:
            await self._queue_event.wait()
            self._queue_event.clear()
            if not self._queue and not self._published:
                continue
            batch, self._queue = self._queue, []
            published, self._published = self._published, []
            now = self.now()

            if published:
                try:
                    await self._db(self._commit_progress, published)
                except Exception as exc:  # the items are lost, as in a crash; the events go on
                    log.warning(
                        "flowcore: %d progress items were not committed (%s: %s)",
                        len(published),
                        type(exc).__name__,
                        safe_text(exc, 200),
                    )
                if not batch:  # tell the followers (``progress(follow=True)``)
                    self._committed.set()
                    self._committed = asyncio.Event()
                    continue
            try:
                results = await self._db(self._commit, batch, now)
            except Exception as exc:  # the whole batch rolled back: fail every waiter
                for _, _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            for (applied, extra), (_, _, future) in zip(results, batch, strict=True):
                self._after([applied, *extra])
                if not future.done():
                    future.set_result(applied)
