"""The local host's worker: the loop that moves runs on, and recovery.

``work`` registers the worker, then each round: recovers the work of
workers that are gone (``_recover``: safe effects run again with the same
key, uncertain ones are reported ``effect-outcome-unknown``, one dispatched
too often goes to the dead letters), fires due timers and schedules, starts
child runs, delivers ``signal-run`` effects, claims ready work, prunes with
the retention, and sleeps until the next due time or a wake. A round that
would read what the last one read (nothing written since, nothing due) is
skipped. Running the handlers and committing their results is ``_execution``.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import flowcore
from flowcore import (
    EffectFailed,
    EffectOutcomeUnknown,
    EffectSucceeded,
    ErrorInfo,
    Event,
    RunSubflow,
    SignalReceived,
    SignalRun,
    TimerFired,
)
from flowcore_handlers import safe_text

from . import _schedules
from ._base import log
from ._execution import Execution
from ._prune import Deleted
from ._store import Applied, Claimed, HostError, RunRow, Store

SAFE = ("readonly", "idempotent")


# How often a worker looks again at how many workers share the database:
# every SHARE_S while the database changes, else every SHARE_IDLE_S (a
# worker's heartbeat goes stale with the time alone).
SHARE_S = 0.1
SHARE_IDLE_S = 1.0


def _scheduled_call(run_id: str, key: str) -> bool:
    """Whether ``key`` is a scheduled call's call-tool.

    After a crash such a call goes back to the interpreter as
    ``effect-outcome-unknown``: it decides whether to issue it again (its
    class, and ``attempts``, up to three), so the attempts are in the run's
    state and log, not only in this host's outbox.
    """
    try:
        role = flowcore.parse_key(key, run_id).role
    except ValueError:
        return False
    return role in (flowcore.KeyRole.SCHEDULE_CALL, flowcore.KeyRole.SCHEDULE_REPLAY)


class _NotPending(Exception):
    """The run that sent a signal-run no longer waits for it: undo the delivery."""


def _deliver_signal(
    store: Store, run_id: str, key: str, effect: SignalRun, now: int
) -> list[Applied]:
    """Deliver one ``signal-run`` and answer it, in the caller's transaction."""
    out: list[Applied] = []
    target = effect.run_id
    error: ErrorInfo | None = None
    try:
        row = store.run_row(target)
    except HostError:
        error = ErrorInfo(type="unknown-run", message=f"no run {target!r} to signal")
    else:
        if row.status != "running":
            error = ErrorInfo(type="run-settled", message=f"run {target!r} has already settled")
    if error is None:
        event = SignalReceived(
            signal=effect.signal, payload=effect.payload, at_ms=now, key=effect.key
        )
        applied = store.apply(target, event, now)
        if applied.rejected is not None:
            error = ErrorInfo(type="signal-rejected", message=applied.rejected)
        else:
            out += [applied, *store.take_extra()]
    answer: Event = (
        EffectSucceeded(idempotency_key=key, output={"run_id": target}, at_ms=now)
        if error is None
        else EffectFailed(idempotency_key=key, error=error, at_ms=now)
    )
    answered = store.apply(run_id, answer, now)
    if answered.rejected is not None:
        raise _NotPending(answered.rejected)
    return [*out, answered, *store.take_extra()]


class LocalWorker(Execution):
    """The worker loop and recovery of the local host, over its execution."""

    if TYPE_CHECKING:  # from the client and administration

        async def run(self, run_id: str) -> RunRow: ...

        async def trim_scheduled(self) -> int: ...

        async def _retain(self) -> None: ...

    # --- the worker ---------------------------------------------------------------------

    async def work(
        self,
        stop: asyncio.Event | None = None,
        until_settled: str | None = None,
        *,
        only: str | None = None,
        on_settled: Callable[[RunRow], Any] | None = None,
        on_pruned: Callable[[Deleted], Any] | None = None,
        on_records: Callable[[list[flowcore.Record]], Any] | None = None,
    ) -> None:
        """Process every run in the database until ``stop`` is set (or the run settles).

        ``only``: work on that run and its child runs alone (their work,
        timers, subflows and recovery); other runs are left for other workers.
        ``on_settled`` is called, on the event loop, with the ``RunRow`` of
        every run this host settles while it works (a failed one included),
        right after the commit that settled it; what it raises is logged and
        does not stop the worker. ``on_records`` is called likewise with the log
        records of each event this host applies while it works, before
        ``on_settled``. With the host's ``retention_ms``, a worker
        not limited by ``only`` prunes the runs settled longer ago than that,
        when it starts and then every minute of the host's clock, and calls
        ``on_pruned`` with what each prune deleted (when it deleted any).
        """
        stop = stop or asyncio.Event()
        assert self._wake is not None
        if only is not None:
            await self.run(only)  # an unknown run id is refused, not worked on for ever
        self.store.only = only
        await self._db(self._register_worker)
        self._on_settled = on_settled
        self._on_pruned = on_pruned
        self._on_records = on_records
        self._next_prune = None
        self.store.dispatching = True
        self._listener = await self._db(self.store.db.listen)  # None on SQLite
        self._writer = asyncio.create_task(self._write_loop())
        self._heart = asyncio.create_task(self._heartbeat())
        # The loop's clock, monotonic (a simulation's loop gives its virtual one).
        monotonic = asyncio.get_running_loop().time
        last_recovery = last_share = float("-inf")  # both at once in the first round
        # What the last round saw: the database's state and this worker's room
        # (``_seen``), and the next time something falls due. A round that
        # would see the same again, before that time, would find nothing to
        # do, and is skipped: an idle worker costs one read per poll.
        seen: tuple[int, int, int] | None = None
        share_seen: tuple[int, int, int] | None = None
        due: int | None = None
        try:
            while not stop.is_set():
                changed = False
                if monotonic() - last_recovery > self.lease_ms / 2000:
                    await self._recover()  # what it takes back, it writes: seen below
                    await self.trim_scheduled()
                    last_recovery = monotonic()
                now_seen = await self._db(self._seen)
                since = monotonic() - last_share
                if since > SHARE_S and (now_seen != share_seen or since > SHARE_IDLE_S):
                    share = await self._db(self._share)
                    changed = share != self.store.share
                    self.store.share = share
                    share_seen, last_share = now_seen, monotonic()
                if not (changed or now_seen != seen or self._round_due(due, until_settled)):
                    await self._sleep(self._delay(due))
                    continue
                seen = now_seen
                await self._fire_timers()
                if only is None:  # an attached run's worker starts no scheduled runs
                    await self._fire_schedules()
                await self._start_subflows()
                await self._signal_runs()
                await self._claim_ready()
                await self._retain()
                if until_settled is not None:
                    row = await self.run(until_settled)
                    if row.status != "running":
                        return
                self._wake.clear()
                nxt = await self._db(self.store.next_timer)
                if only is None:
                    scheduled = await self._db(_schedules.next_due, self.store)
                    if scheduled is not None and (nxt is None or scheduled < nxt):
                        nxt = scheduled
                if self.retention_ms is not None and self._next_prune is not None:
                    nxt = self._next_prune if nxt is None else min(nxt, self._next_prune)
                due = nxt
                await self._sleep(self._delay(due))
        finally:
            await self._drain()
            if self._listener is not None:
                self._listener.close()
                self._listener = None
            await self._db(self._unregister_worker)
            self.store.dispatching = False
            self.store.share = None
            self.store.only = None
            self._on_settled = None
            self._on_pruned = None
            self._on_records = None

    def _seen(self) -> tuple[int, int, int]:
        """What a round's reads depend on besides the time: the database's
        state (``Store.changes``, less this worker's heartbeats, which no
        round reads) and how much work this worker is running."""
        version, written = self.store.changes()
        return version, written - self._beaten, len(self._running)

    def _round_due(self, due: int | None, until_settled: str | None) -> bool:
        """Whether a round must run even though the database looks as the last one saw
        it: woken, something due, a run to watch, or a tool limit (a rate limit's
        room opens as time passes)."""
        return (
            (self._wake is not None and self._wake.is_set())
            or (due is not None and due <= self.now())
            or until_settled is not None
            or bool(self.tool_limits)
        )

    def _delay(self, due: int | None) -> float:
        """Seconds to the next poll: ``poll_ms``, or less when something falls due sooner."""
        delay = self.poll_ms / 1000
        if due is not None:
            delay = min(delay, max(0.0, (due - self.now()) / 1000))
        return delay

    async def _sleep(self, delay: float) -> None:
        """Until ``delay`` seconds have passed, something of this host wakes the
        worker, or (on PostgreSQL) another connection commits work (``_listener``)."""
        assert self._wake is not None
        listener, wake = self._listener, self._wake
        if listener is not None and listener.heard():  # arrived while the worker was busy
            wake.set()
        if listener is not None and listener.closed:  # lost: poll from now on
            listener = self._listener = None
        loop = asyncio.get_running_loop()
        fd = -1 if listener is None else listener.fileno()
        if listener is not None:

            def readable() -> None:
                if listener.heard():
                    wake.set()
                if listener.closed:
                    loop.remove_reader(fd)

            loop.add_reader(fd, readable)
        try:
            async with asyncio.timeout(delay):
                await wake.wait()
        except TimeoutError:
            pass
        finally:
            if fd >= 0:
                loop.remove_reader(fd)

    async def _drain(self) -> None:
        """Let running handlers finish and their results commit."""
        if self._running:
            await asyncio.gather(*self._running.values(), return_exceptions=True)
        while self._queue:
            assert self._queue_event is not None
            self._queue_event.set()
            await asyncio.sleep(0.001)
        if self._writer is not None:
            self._writer.cancel()
            self._writer = None
        if self._heart is not None:
            self._heart.cancel()
            self._heart = None

    def _register_worker(self) -> None:
        conn = self.store.conn
        conn.execute(
            "INSERT INTO workers (worker_id, pid, hostname, heartbeat_ms, only_run)"
            " VALUES (?, ?, ?, ?, ?) ON CONFLICT (worker_id) DO UPDATE SET pid = excluded.pid,"
            " hostname = excluded.hostname, heartbeat_ms = excluded.heartbeat_ms,"
            " only_run = excluded.only_run",
            (self.worker_id, os.getpid(), socket.gethostname(), self.now(), self.store.only),
        )

    def _unregister_worker(self) -> None:
        """Leave ``workers`` once ``work`` returns (its handlers have all finished)."""
        self.store.conn.execute("DELETE FROM workers WHERE worker_id = ?", (self.worker_id,))

    def _share(self) -> int | None:
        """How many running runs this worker keeps (``Store.keeps``): None when it is
        the only live worker on every run, else an even split among those."""
        conn = self.store.conn
        if self.store.only is not None:
            return None
        dead = set(self._dead_workers())
        others = [
            worker_id
            for (worker_id,) in conn.execute(
                "SELECT worker_id FROM workers WHERE only_run IS NULL AND worker_id != ?",
                (self.worker_id,),
            )
            if worker_id not in dead
        ]
        if not others:
            return None
        self.store.forget_idle()
        (running,) = conn.execute("SELECT count(*) FROM runs WHERE status = 'running'").fetchone()
        return max(1, -(-int(running) // (len(others) + 1)))

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(self.lease_ms / 3000)
            keys = list(self._running)
            now = self.now()

            await self._db(self._beat, keys, now)

    def _beat(self, keys: list[tuple[str, str]], now: int) -> None:
        store = self.store
        before = store.conn.total_changes
        with store.tx(notify=False):  # a heartbeat gives no idle worker anything to do
            store.conn.execute(
                "UPDATE workers SET heartbeat_ms = ? WHERE worker_id = ?",
                (now, self.worker_id),
            )
            store.extend_leases(keys, now)
        self._beaten += store.conn.total_changes - before

    def _dead_workers(self) -> list[str]:
        conn = self.store.conn
        here = socket.gethostname()
        now = self.now()
        dead = []
        for worker_id, pid, hostname, beat in conn.execute(
            "SELECT worker_id, pid, hostname, heartbeat_ms FROM workers"
        ):
            if worker_id == self.worker_id:
                continue
            gone = beat < now - 3 * self.lease_ms
            if hostname == here and not gone:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    gone = True
                except PermissionError:
                    gone = False
            if gone:
                dead.append(worker_id)
        return dead

    async def _recover(self) -> None:
        now = self.now()

        def recovering() -> list[Applied]:
            store = self.store
            out: list[Applied] = []
            with store.tx():
                dead = self._dead_workers()
                for run_id, key, exec_class, dispatches, kind, owner in store.expired(now, dead):
                    if (run_id, key) in self._running:
                        continue
                    try:
                        with store.savepoint():
                            out.extend(
                                self._recover_one(
                                    store, run_id, key, exec_class, dispatches, kind, owner, now
                                )
                            )
                    except Exception as exc:  # that run's alone: the others are recovered
                        store.take_extra()
                        out.extend(self._contain(store, run_id, key, kind, exc, now))
                marks = ",".join("?" * len(dead))
                # A worker limited to one run (``only``) leaves the dead workers
                # registered: their other work is for the workers of every run.
                if dead and store.only is None:
                    store.conn.execute(f"DELETE FROM workers WHERE worker_id IN ({marks})", dead)
            return out

        self._after(await self._db(recovering))

    def _recover_one(
        self,
        store: Store,
        run_id: str,
        key: str,
        exec_class: str,
        dispatches: int,
        kind: str,
        owner: str | None,
        now: int,
    ) -> list[Applied]:
        """Recover one effect whose worker is gone (in the caller's savepoint)."""
        out: list[Applied] = []
        if dispatches > self.max_recoveries:
            error = ErrorInfo(
                type="dead-letter",
                message=(
                    f"{kind} {key} was dispatched {dispatches} times and never"
                    " finished (the host died while running it); moved to the"
                    " dead letters"
                ),
            )
            with store.savepoint():
                out.append(
                    store.apply(
                        run_id, EffectFailed(idempotency_key=key, error=error, at_ms=now), now
                    )
                )
            store.dead_letter(run_id, key, kind, dispatches, error.message, now)
            store.close(run_id, key)
        elif exec_class in SAFE and not _scheduled_call(run_id, key):
            store.requeue(run_id, key, owner)  # its claim logs effect.redispatched
        else:
            with store.savepoint():
                event = EffectOutcomeUnknown(idempotency_key=key, at_ms=now)
                applied = store.apply(run_id, event, now)
                out.append(applied)
            # A scheduled call the interpreter issued again keeps its row.
            if not any(e.idempotency_key == key for e in applied.plan.start):
                store.close(run_id, key)
        out.extend(store.take_extra())
        return out

    async def _fire_timers(self) -> None:
        now = self.now()
        due = await self._db(self.store.due_timers, now)
        for run_id, key, due_ms in due:
            if (run_id, key) in self._firing:
                continue
            self._firing.add((run_id, key))
            event = TimerFired(idempotency_key=key, at_ms=max(now, due_ms))
            future = self._submit(run_id, event)
            future.add_done_callback(self._fired(run_id, key))

    def _fired(self, run_id: str, key: str) -> Callable[[asyncio.Future[Applied]], None]:
        def done(future: asyncio.Future[Applied]) -> None:
            self._firing.discard((run_id, key))
            # A failed commit leaves the timer due: it fires again next round.
            # Retrieve the exception so asyncio does not print it as lost.
            if not future.cancelled():
                future.exception()

        return done

    async def _fire_schedules(self) -> None:
        now = self.now()

        def firing() -> list[Applied]:
            store = self.store
            out: list[Applied] = []
            if not _schedules.due(store, now):  # a read: most rounds have nothing due
                return out
            with store.tx():
                for name in _schedules.due(store, now):  # again, holding the write lock
                    try:
                        with store.savepoint():
                            out.extend(_schedules.fire(store, name, now))
                    except Exception as exc:
                        # A row this host cannot decide (written by a newer
                        # flowcore, say) must not stop the worker or the
                        # other schedules: say so, and look again later.
                        store.take_extra()
                        log.warning(
                            "flowcore: schedule %s cannot be decided (%s: %s); retrying in %d s",
                            name,
                            type(exc).__name__,
                            safe_text(exc, 200),
                            _schedules.RETRY_MS // 1000,
                        )
                        _schedules.postpone(store, name, now)
            return out

        self._after(await self._db(firing))

    async def _start_subflows(self) -> None:
        now = self.now()

        def starting() -> list[Applied]:
            store = self.store
            out: list[Applied] = []
            ready = store.ready_subflows()
            if not ready:
                return out
            with store.tx():
                for run_id, key, effect in ready:
                    try:
                        with store.savepoint():
                            out.extend(self._start_subflow(store, run_id, key, effect, now))
                    except Exception as exc:  # that run's alone: the others go on
                        store.take_extra()
                        out.extend(self._contain(store, run_id, key, "run-subflow", exc, now))
                    out.extend(store.take_extra())
            return out

        self._after(await self._db(starting))

    @staticmethod
    def _start_subflow(
        store: Store, run_id: str, key: str, effect: RunSubflow, now: int
    ) -> list[Applied]:
        """Start the child run of ``effect`` (named by its key), or fail the effect."""
        parent = store.run_row(run_id)
        flow = store.flow_by_id(effect.flow_id)
        error: ErrorInfo | None = None
        if flow is None:
            error = ErrorInfo(
                type="unknown-flow",
                message=f"no flow {effect.flow_id!r} is registered with the host",
            )
        elif store.existing(key) is not None:
            # A run that is not this parent's child holds the child's id (written
            # by another process, or before ids were checked): the parent must
            # not wait for it, nor take it over.
            other = store.run_row(key)
            ours = (
                other.started_by == run_id
                if effect.detached
                else (other.parent_run, other.parent_key) == (run_id, key)
            )
            if not ours:
                error = ErrorInfo(
                    type="run-id-taken",
                    message=(
                        f"cannot start the child run {key!r}: a run with that id already"
                        " exists and is not this run's child"
                    ),
                )
        if error is not None:
            return [
                store.apply(run_id, EffectFailed(idempotency_key=key, error=error, at_ms=now), now)
            ]
        assert flow is not None
        if effect.detached:
            # A root run of its own (its flow's budget, depth 0); the
            # parent hears only that it started, in this transaction.
            _, applied = store.start_run(
                flow,
                effect.input,
                key,
                now,
                parent.tools,
                principal=parent.principal,
                started_by=run_id,
            )
            started = EffectSucceeded(idempotency_key=key, output={"run_id": key}, at_ms=now)
            return [applied, store.apply(run_id, started, now)]
        store.mark(run_id, key, "dispatched")
        _, applied = store.start_run(
            flow,
            effect.input,
            key,
            now,
            parent.tools,
            parent_run=run_id,
            parent_key=key,
            budget=effect.budget_remaining,
            depth=effect.depth,
            principal=parent.principal,
            priority=parent.priority,
        )
        return [applied]

    def _contain(
        self, store: Store, run_id: str, key: str, kind: str, exc: Exception, now: int
    ) -> list[Applied]:
        """What the worker does when starting or applying one run's effect raised:
        that effect fails (``host-error``, with why), so the run goes on or fails
        as its flow says; if even that cannot be applied, the effect is parked in
        the dead letters (``show`` lists it, with why) and its row closed, so no
        round tries it again. Either way the worker and the other runs go on."""
        why = f"{type(exc).__name__}: {safe_text(exc, 300)}"
        log.warning("flowcore: %s %s of run %s failed: %s", kind, key, run_id, why)
        message = f"the host could not carry out {kind} {key}: {why}"
        event = EffectFailed(
            idempotency_key=key, error=ErrorInfo(type="host-error", message=message), at_ms=now
        )
        try:
            with store.savepoint():
                applied = store.apply(run_id, event, now)
                if applied.rejected is not None:
                    raise HostError(applied.rejected)
                return [applied, *store.take_extra()]
        except Exception as again:
            store.take_extra()
            refused = f"{type(again).__name__}: {safe_text(again, 200)}"
            note = f"{message}; and failing it was refused ({refused})"
            log.warning("flowcore: %s %s of run %s is parked: %s", kind, key, run_id, note)
            try:
                with store.savepoint():
                    store.dead_letter(run_id, key, kind, 0, note, now)
                    store.close(run_id, key)
            except Exception:  # the database itself: the next round sees the row again
                store.take_extra()
            return []

    async def _signal_runs(self) -> None:
        """Deliver the ``signal-run`` effects: each in one transaction with its answer
        (``effect-succeeded``, or ``effect-failed`` ``unknown-run`` / ``run-settled``
        / ``signal-rejected``), so that a crash or a second worker never delivers
        one twice: its outbox row is gone once it is delivered."""
        now = self.now()

        def delivering() -> list[Applied]:
            store = self.store
            out: list[Applied] = []
            if not store.ready_signal_runs(1):
                return out
            with store.tx():
                for run_id, key, effect in store.ready_signal_runs():  # under the write lock
                    try:
                        with store.savepoint():
                            out.extend(_deliver_signal(store, run_id, key, effect, now))
                    except _NotPending:
                        store.take_extra()
                        store.close(run_id, key)
                    except Exception as exc:  # that run's alone: the others go on
                        store.take_extra()
                        out.extend(self._contain(store, run_id, key, "signal-run", exc, now))
            return out

        self._after(await self._db(delivering))

    async def _claim_ready(self) -> None:
        free = self.concurrency - len(self._running)
        if free <= 0:
            return
        now = self.now()

        def claiming() -> list[Claimed]:
            store = self.store
            if not store.has_ready_work():
                return []
            with store.tx(shared=True):  # beside other workers' claims and commits
                return store.claim_ready_work(now, free)

        for claimed in await self._db(claiming):
            self._spawn(claimed)
