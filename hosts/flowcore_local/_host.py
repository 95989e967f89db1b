"""The local host: asyncio + SQLite, the embedded default.

``LocalHost`` is both the Python API (start runs, signal, answer, cancel,
wait, read events) and a worker (``work``) that executes effects: handlers
from a tools module run concurrently under a host-wide limit (sync handlers in
threads), timers fire when due (also after a restart), subflows become child
runs in the same database, and results are applied to runs in group commits:
every event that finished while the previous commit was running is applied in
the next transaction (see ``_commit``).

Crash safety rests on the order of writes: an effect is recorded as
dispatched to this worker in the same transaction that created it, before its
handler starts; its result and everything that follows from it is one later
transaction. After a crash, work whose worker is gone is recovered: readonly
and idempotent effects run again with the same key (the claim that runs them
again logs ``effect.redispatched``), uncertain ones are reported as
``effect-outcome-unknown``, and an effect dispatched too many times goes to
the dead letters and fails its step.

Before a run exists, ``start`` checks it: the handlers every flow it can
start needs must be in its tools module (unless the handlers were given as a
``registry``, or the module cannot be imported here: the worker then fails
the run saying so), and a rerun with the same id must have the same options.
A handler's exception keeps its traceback in the ``failures`` table, off the
wire. ``resume`` rewinds a failed run to just before the event that failed
it (``_resume`` says when that is faithful) and dispatches the work pending
there again. ``delete`` and ``prune`` remove whole run trees (``_prune``);
with ``retention_ms`` a worker prunes as it works, on the host's clock
(``clock``, which tests replace).

All database access happens on the event loop's thread (see ``_db``).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

import flowcore
from flowcore import MAX_BUDGET_AMOUNT as MAX_AMOUNT
from flowcore import MAX_DURATION_MS as MAX_MS
from flowcore import (
    MAX_NAME_CHARS,
    CallTool,
    CancelRequested,
    EffectFailed,
    EffectOutcomeUnknown,
    EffectSucceeded,
    ErrorInfo,
    Event,
    HumanAnswered,
    RunAgent,
    RunSubflow,
    RunTeam,
    SignalReceived,
    SignalRun,
    TimerFired,
)
from flowcore_handlers import (
    HandlerError,
    HandlerThreads,
    Heartbeats,
    Registry,
    RegistryError,
    cancelled_event,
    format_traceback,
    heartbeat_timeout_event,
    load_registry,
    missing_handlers,
    outcome_event,
    run_handler,
    safe_text,
    tools_module_name,
    waits_for_cancel,
)
from flowcore_handlers._limits import (
    LimitError,
    ToolLimit,
    check_dedup_key,
    check_priority,
    check_tool_limits,
)
from flowcore_handlers._tracing import TracingError, tracer_for

from . import _prune, _schedules
from ._db import DURABILITY, Durability, connect, default_db_path
from ._flows import declared_signals, reachable_flows
from ._prune import Deleted
from ._resume import Rewind, plan_rewind
from ._scheduled import ScheduledRetention, ScheduledRow, list_scheduled, trim
from ._store import (
    Applied,
    Claimed,
    Conflict,
    HostError,
    NoSignalWait,
    NothingToCancel,
    RunRow,
    Store,
)

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

    from ._tracing import LocalTracing

__all__ = ["LocalHost"]

T = TypeVar("T")
log = logging.getLogger("flowcore.local")
SAFE = ("readonly", "idempotent")
RETENTION_EVERY_MS = 60_000  # how often (host clock) a worker with a retention prunes


# How often a worker looks again at how many workers share the database.
SHARE_S = 0.1


def wall_ms() -> int:
    return int(time.time() * 1000)


def _checked_budget(budget: Any) -> flowcore.Budget | None:
    """``budget`` as ``start`` takes it, or a HostError naming the bad limit."""
    if budget is None:
        return None
    if not isinstance(budget, flowcore.Budget):
        raise HostError(f"budget must be a flowcore.Budget or None, not {type(budget).__name__}")
    for attr, limit in (
        ("steps", MAX_AMOUNT),
        ("cost_minor_units", MAX_AMOUNT),
        ("wall_clock_ms", MAX_MS),
    ):
        value = getattr(budget, attr)
        if value is not None and (type(value) is not int or not 0 <= value <= limit):
            raise HostError(
                f"budget.{attr} must be an integer from 0 to {limit:,} or None,"
                f" not {safe_text(repr(value), 60)}"
            )
    return budget


def _relative(key: str, run_id: str) -> str:
    """A key as the run names it (``decide#1`` for ``r-1/decide#1``), read with ``parse_key``."""
    try:
        info = flowcore.parse_key(key, run_id)
    except ValueError:
        return key
    if info.attempt is None or info.role is not flowcore.KeyRole.EFFECT:
        return key
    return f"{info.path}#{info.attempt}"


def _scheduled_call(run_id: str, key: str) -> bool:
    """Whether ``key`` is a scheduled call's call-tool.

    After a crash such a call goes back to the interpreter as
    ``effect-outcome-unknown``: it decides whether to issue it again (its
    class, and ``attempts``, up to three), so the attempts are in the run's
    state and log, not only in this host's outbox.
    """
    try:
        return flowcore.parse_key(key, run_id).role is flowcore.KeyRole.SCHEDULE_CALL
    except ValueError:
        return False


def _check_signal_key(key: object) -> None:
    if key is not None and (not isinstance(key, str) or not 0 < len(key) <= MAX_NAME_CHARS):
        raise HostError(f"a signal key must be text of 1 to {MAX_NAME_CHARS} characters")


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


def _local_tracing(tracing: Any, host: LocalHost) -> LocalTracing | None:
    """The host's spans when ``tracing`` asks for them (opentelemetry is imported only then)."""
    try:
        tracer = tracer_for(tracing, "LocalHost(tracing=...)")
    except TracingError as exc:
        raise HostError(str(exc)) from None
    if tracer is None:
        return None
    from ._tracing import LocalTracing

    return LocalTracing(tracer, host)


def _spec_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise HostError(f"{path}: not a flow spec: not UTF-8 (byte {exc.start})") from None


SPEC_SUFFIXES = (".yaml", ".yml", ".json")


def _spec_source(spec: str | Path) -> tuple[str, str]:
    """A spec argument's text and source name: a ``Path`` is read; a string is the
    spec's text, unless it is one line naming an existing file (read then), or one
    line ending in ``.yaml``/``.yml``/``.json`` that names none (a ``HostError``
    saying so, rather than the string parsed as YAML)."""
    if isinstance(spec, Path):
        return _spec_text(spec), str(spec)
    if isinstance(spec, str) and spec and "\n" not in spec and len(spec) <= 4096:
        path = Path(spec.strip())
        try:
            is_file = path.is_file()
        except (OSError, ValueError):  # not a possible path (a NUL, too long)
            is_file = False
        if is_file:
            return _spec_text(path), str(path)
        if path.suffix.lower() in SPEC_SUFFIXES:
            raise HostError(
                f"no spec file {safe_text(repr(spec), 200)}: a string is read as a file only"
                " when one exists there; pass a pathlib.Path for a file, or the spec's text"
            )
    return spec, "<spec>"


ON_CONFLICT = ("refuse", "use-existing")


class LocalHost:
    """A flowcore host on one SQLite file. Use as ``async with LocalHost(...) as host``."""

    def __init__(
        self,
        db: str | Path | None = None,
        tools: str | None = None,
        *,
        durability: Durability = "power-loss",
        concurrency: int = 64,
        lease_ms: int = 10_000,
        max_recoveries: int = 3,
        poll_ms: int = 50,
        registry: Registry | None = None,
        scheduled_retention: ScheduledRetention | None = None,
        clock: Callable[[], int] | None = None,
        retention_ms: int | None = None,
        tracing: bool | TracerProvider = False,
        tool_limits: Mapping[str, ToolLimit] | None = None,
    ) -> None:
        self.db_path = Path(db) if db is not None else default_db_path()
        self.tools = tools_module_name(tools)
        if durability not in DURABILITY:
            raise HostError(
                f"durability must be one of {', '.join(DURABILITY)},"
                f" not {safe_text(repr(durability), 60)}"
            )
        self.durability: Durability = durability
        self.concurrency = concurrency
        self.lease_ms = lease_ms
        self.max_recoveries = max_recoveries
        self.poll_ms = poll_ms
        self.worker_id = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self._threads: HandlerThreads | None = None
        self._store: Store | None = None
        self._registries: dict[str | None, Registry] = {}
        # Handlers the caller supplied as objects (``registry``): taken as given,
        # not checked against flows before a start (scripted handlers, say).
        self._supplied: set[str | None] = set()
        if registry is not None:
            self._registries[self.tools] = registry
            self._supplied.add(self.tools)
        self._warned: set[str | None] = set()  # tools modules a worker failed to load, said once
        # Handler failures waiting for their event's commit: (run, key) -> traceback.
        self._failures: dict[tuple[str, str], str | None] = {}
        self._on_settled: Callable[[RunRow], Any] | None = None
        self._running: dict[tuple[str, str], asyncio.Task[None]] = {}
        # The cancel request of each running work effect (set when the run stops
        # waiting for it: flowcore_handlers.cancelled), and those whose handler
        # is ``async`` (its task is cancelled too).
        self._cancels: dict[tuple[str, str], threading.Event] = {}
        self._on_loop: set[tuple[str, str]] = set()
        # Effects reported outcome-unknown whose task is still committing that:
        # the interpreter may issue them again (same key) in that very commit.
        self._reissued: dict[tuple[str, str], Claimed | None] = {}
        self._firing: set[tuple[str, str]] = set()
        self._queue: list[tuple[str, Event, asyncio.Future[Applied]]] = []
        self._queue_event: asyncio.Event | None = None
        self._wake: asyncio.Event | None = None
        self._committed = asyncio.Event()  # set (and replaced) after each commit
        self._sem: asyncio.Semaphore | None = None
        self._writer: asyncio.Task[None] | None = None
        self._heart: asyncio.Task[None] | None = None
        # The host's clock, in epoch milliseconds: every time it records, every
        # due time it compares, every age it prunes by (tests pass a fake one).
        self.now: Callable[[], int] = clock or wall_ms
        if retention_ms is not None and (
            type(retention_ms) is not int or not 0 < retention_ms <= MAX_MS
        ):
            raise HostError(
                f"retention_ms must be an integer from 1 to {MAX_MS:,} or None,"
                f" not {safe_text(repr(retention_ms), 60)}"
            )
        # A worker deletes the runs settled longer ago than this (``_retain``).
        self.retention_ms = retention_ms
        # Limits of tools across every run of the database (specs/local.md §16).
        try:
            self.tool_limits: dict[str, ToolLimit] = check_tool_limits(tool_limits)
        except LimitError as exc:
            raise HostError(str(exc)) from None
        self._next_prune: int | None = None
        self._on_pruned: Callable[[Deleted], Any] | None = None
        self._on_records: Callable[[list[flowcore.Record]], Any] | None = None
        # How long finished scheduled calls stay listed (``trim_scheduled``).
        self.scheduled_retention = scheduled_retention or ScheduledRetention()
        # OpenTelemetry spans (``_tracing``, specs/tracing.md); None: off, and free.
        self._tracing: LocalTracing | None = _local_tracing(tracing, self)

    # --- lifecycle ------------------------------------------------------------------

    async def __aenter__(self) -> LocalHost:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def open(self) -> None:
        def opening() -> Store:
            conn = connect(self.db_path, self.durability)
            store = Store(conn, self.worker_id, self.lease_ms)
            store.tool_limits = self.tool_limits
            return store

        if self.tools is not None and self.tools not in self._registries:
            self._registries[self.tools] = load_registry(self.tools)  # fail fast on a bad module
        self._store = await self._db(opening)
        # Sync handlers get a thread each, up to the host-wide limit (the
        # loop's default pool holds only a few threads).
        self._threads = HandlerThreads(self.concurrency)
        self._queue_event = asyncio.Event()
        self._wake = asyncio.Event()
        self._sem = asyncio.Semaphore(self.concurrency)

    async def close(self) -> None:
        if self._tracing is not None:
            self._tracing.close()
        for task in (self._writer, self._heart):
            if task is not None:
                task.cancel()
        for task in list(self._running.values()):
            task.cancel()
        if self._store is not None:
            store = self._store

            def closing() -> None:
                try:
                    with store.tx():
                        store.checkpoint_all()
                except Exception as exc:  # the log holds it all: the next load replays it
                    log.warning("flowcore: no checkpoint of the runs at close (%s)", exc)
                store.conn.execute("DELETE FROM workers WHERE worker_id = ?", (self.worker_id,))
                store.conn.close()

            await self._db(closing)
            self._store = None
        if self._threads is not None:
            self._threads.shutdown()
            self._threads = None

    @property
    def store(self) -> Store:
        if self._store is None:
            raise HostError("the host is not open")
        return self._store

    async def _db(self, fn: Callable[..., T], *args: Any) -> T:
        # SQLite work runs on the event loop's own thread: a hop to another
        # thread costs more than most statements, and while a commit waits for
        # its fsync the handlers (in their threads) keep running; their
        # results are committed together in the next group commit.
        return fn(*args)

    def _registry(self, name: str | None) -> Registry:
        name = name or self.tools
        if name not in self._registries:
            self._registries[name] = load_registry(name)
        return self._registries[name]

    # --- the API ----------------------------------------------------------------------

    async def start(
        self,
        spec: str | Path,
        input: Any = None,
        run_id: str | None = None,
        *,
        tools: str | None = None,
        flows: Iterable[str | Path] = (),
        budget: flowcore.Budget | None = None,
        principal: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        priority: int | None = None,
        dedup_key: str | None = None,
        on_conflict: str = "refuse",
    ) -> str:
        """Start a run of ``spec``; idempotent by ``run_id``. Returns the run id.

        ``spec``: a ``pathlib.Path`` to a spec file, or the spec's text; a
        one-line string that names an existing file is read as that file (one
        ending in ``.yaml``, ``.yml`` or ``.json`` that names none is refused
        with ``HostError``, not parsed as YAML).

        ``run_id``: the id to give the run (default: ``<flow id>-<random hex>``).
        It may not hold ``/`` or ``#``, which name child runs
        (``flowcore.RunIdError``, before anything is written).
        ``on_conflict``: what a ``run_id`` that exists with other start options
        gets: ``"refuse"`` (the default: ``HostError``) or ``"use-existing"``
        (that run's id is returned and nothing is written; read its status
        with ``run``).

        ``metadata``: initial values of the fields the flow declares under
        ``metadata`` (``flowcore.MetadataError`` names an undeclared field or a
        value of the wrong type; nothing is written then).

        ``flows`` are more spec files (or directories of them) that subflows may
        name; ``tools`` the run's tools module (default: the host's; a ``.py``
        path is stored absolute); ``budget`` caps the run below its spec's;
        ``principal`` records who started it (its child runs inherit it).
        ``priority``: 1 (first) to 5 (last), default 3; workers claim waiting
        work of higher-priority runs first, and child runs inherit it.
        ``dedup_key``: while a run started with this key is running, starting
        again returns that run's id and starts nothing; once it has settled,
        the key starts a new run. Returns the run id.

        Refused with ``HostError`` before anything is written: a run whose flow,
        or a subflow it can start that the host has, calls a tool, agent or
        team its tools module has no handler for; and (``on_conflict``
        ``"refuse"``) a run id that exists with another input, spec, tools
        module or budget (a ``tools`` or ``budget`` of None is not compared).
        The same options again change nothing.
        """
        if run_id is not None:
            flowcore.check_run_id(run_id)
        if on_conflict not in ON_CONFLICT:
            raise HostError(
                f"on_conflict must be one of {', '.join(ON_CONFLICT)},"
                f" not {safe_text(repr(on_conflict), 60)}"
            )
        texts: list[tuple[str, str, bool]] = []  # (text, source, came from a directory)
        texts.append((*_spec_source(spec), False))
        for extra in flows:
            path = Path(extra)
            if path.is_dir():
                for file in sorted(path.glob("*.yaml")) + sorted(path.glob("*.yml")):
                    try:
                        texts.append((_spec_text(file), str(file), True))
                    except HostError:
                        continue  # a directory may hold files that are not flows
            else:
                texts.append((_spec_text(path), str(path), False))
        tools = tools_module_name(tools) or self.tools
        budget = _checked_budget(budget)
        try:
            priority = check_priority(priority)
            dedup_key = check_dedup_key(dedup_key)
        except LimitError as exc:
            raise HostError(str(exc)) from None
        registry = self._checkable(tools)
        now = self.now()

        def starting() -> Applied:
            store = self.store
            with store.tx():
                if on_conflict == "use-existing" and run_id is not None:
                    if store.existing(run_id) is not None:  # that run is the answer
                        return Applied(run_id)
                flow = store.register_flow(texts[0][0], texts[0][1], now)
                for text, source, scanned in texts[1:]:
                    try:
                        store.register_flow(text, source, now)
                    except flowcore.SpecError:
                        if scanned:
                            continue  # a directory may hold files that are not flows
                        raise
                rid = run_id or f"{flow.id}-{secrets.token_hex(4)}"
                if dedup_key is not None and store.existing(rid) is None:
                    same = store.deduplicated(dedup_key)
                    if same is not None:  # that run is the answer: nothing is written
                        return Applied(same)
                if registry is not None and store.existing(rid) is None:
                    missing = missing_handlers(registry, reachable_flows(store, flow))
                    if missing:  # raised inside the transaction: nothing stays written
                        raise HostError(f"cannot start run {rid!r}: {self._lacks(tools, missing)}")
                _, applied = store.start_run(
                    flow,
                    input,
                    rid,
                    now,
                    tools,
                    budget=budget,
                    principal=principal,
                    metadata=None if metadata is None else dict(metadata),
                    priority=priority,
                    dedup_key=dedup_key,
                )
                applied.run_id = rid
                return applied

        applied = await self._db(starting)
        self._after([applied])
        return applied.run_id

    async def deduplicated(self, dedup_key: str) -> str | None:
        """The running run started with ``dedup_key`` (``start``), or None."""
        return await self._db(self.store.deduplicated, dedup_key)

    def _checkable(self, tools: str | None) -> Registry | None:
        """The handlers to check a run against, or None when they are not checked.

        Not checked: handlers supplied as a ``registry`` object, and a tools
        module this process cannot import (the worker that runs the effects
        may have another ``sys.path``; if it cannot import it either, it fails
        the run naming the module and why).
        """
        if tools in self._supplied:
            return None
        try:
            return self._registry(tools)
        except RegistryError:
            return None

    @staticmethod
    def _lacks(tools: str | None, missing: list[str]) -> str:
        names = ", ".join(missing)
        if tools is None:
            return f"it calls {names}, and no tools module was given"
        return f"tools module {tools!r} has no handler for {names}"

    async def resume(self, run_id: str, tools: str | None = None) -> None:
        """Retry a failed run from its failed step (as DBOS ``workflow resume`` does).

        The run is rewound to just before the event that failed it: its state
        is rebuilt by replaying its log up to there, the records from that
        event on move to the ``log_archive`` table, the run is ``running``
        again, and the work pending at that point is dispatched again (a
        worker runs it) with ``tools`` as the run's tools module when given.
        Steps that succeeded keep their results and are not run again; a
        failed child run that failed the run is resumed with it. Refused with
        ``HostError`` saying why where a rewind would not be faithful (see
        ``flowcore_local._resume``), and when the tools module lacks a handler
        the run needs or cannot be imported.
        """
        name = tools_module_name(tools)
        now = self.now()
        row = await self.run(run_id)
        use = name or row.tools
        if use not in self._supplied:
            try:
                self._registry(use)  # imported before the transaction, not while it holds the lock
            except RegistryError as exc:
                raise HostError(f"cannot resume run {run_id!r}: {exc}") from None

        def resuming() -> list[Applied]:
            store = self.store
            with store.tx():
                chain: list[Rewind] = []
                plan: Rewind | None = plan_rewind(store, run_id, now)
                while plan is not None:
                    chain.append(plan)
                    plan = plan.child
                for rewind in chain:
                    self._check_resumed(store, rewind, name or rewind.tools)
                return [
                    store.rewind(
                        rewind.run_id,
                        rewind.flow,
                        rewind.records,
                        rewind.cut,
                        rewind.pending,
                        now,
                        name or rewind.tools,
                        rewind.key,
                        rewind.child is not None,
                    )
                    for rewind in chain
                ]

        self._after(await self._db(resuming))

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
        """Fork ``run_id`` as a new run with its history up to a point; the new run's id.

        The point is ``at`` (a log index: the fork takes the records before
        it) or ``from_step`` (the step and everything after it run again); see
        ``flowcore.fork``. The new run (``new_run_id``, default
        ``{run_id}-fork-{point}``) is written in one transaction: its row, its
        log (its ``run.started`` records ``forkedFrom``), its state and the
        outbox rows of the work open at the point, which a worker dispatches
        under the fork's keys. Results received before the point are reused,
        never run again. ``tools``: the fork's tools module (default: the
        source's). ``cancel_source``: cancel the source in the same
        transaction if it is running (a reset, as Temporal's).

        Forking again with the same point and id returns the same run.
        Refused with ``ForkError`` for a bad point or step, with
        ``flowcore.RunIdError`` for a ``new_run_id`` holding ``/`` or ``#``, and
        with ``HostError`` for a child run (fork its root), a run id that exists
        otherwise, and a tools module that lacks a handler the run needs.
        """
        if new_run_id is not None:
            flowcore.check_run_id(new_run_id)  # a fork is a root run: no child's id
        name = tools_module_name(tools)
        now = self.now()
        row = await self.run(run_id)
        use = name or row.tools
        if use not in self._supplied:
            try:
                self._registry(use)  # imported before the transaction, not while it holds the lock
            except RegistryError as exc:
                raise HostError(f"cannot fork run {run_id!r}: {exc}") from None

        def forking() -> tuple[str, list[Applied]]:
            store = self.store
            with store.tx():
                source = store.run_row(run_id)
                if source.parent_run is not None:
                    raise HostError(
                        f"cannot fork run {run_id!r}: it is a child run of"
                        f" {source.parent_run!r}; fork its root run"
                    )
                flow = store.flow_by_hash(source.spec_hash)
                records = store.log_records(run_id)
                point = flowcore.fork_point(records, flow, at=at, from_step=from_step)
                rid = new_run_id or f"{run_id}-fork-{point}"
                if store.existing(rid) is not None:
                    if store.forked_from(rid) == {"runId": run_id, "index": point}:
                        return rid, []  # the same fork again
                    raise HostError(f"cannot fork run {run_id!r}: run {rid!r} already exists")
                try:
                    made = flowcore.fork(records, flow, rid, at=point)
                except flowcore.ForkError:
                    raise
                except flowcore.FlowcoreError as exc:  # (a stored log replays)
                    raise HostError(
                        f"cannot fork run {run_id!r}: its log does not replay"
                        f" ({safe_text(str(exc), 300)})"
                    ) from None
                if use not in self._supplied:
                    missing = missing_handlers(self._registry(use), reachable_flows(store, flow))
                    if missing:
                        raise HostError(f"cannot fork run {run_id!r}: {self._lacks(use, missing)}")
                budget = store.existing(run_id)
                assert budget is not None
                applied = [store.fork_run(source, made, now, use, budget[3])]
                if cancel_source and source.status == "running":
                    event = CancelRequested(reason=f"reset: forked as {rid}", at_ms=now)
                    applied.append(store.apply(run_id, event, now))
                    applied.extend(store.take_extra())
                return rid, applied

        rid, applied = await self._db(forking)
        self._after(applied)
        return rid

    async def upgrade(
        self, run_id: str, spec: str | Path, *, dry_run: bool = False
    ) -> flowcore.Upgrade:
        """Move running run ``run_id`` to the flow version ``spec`` (a path, or spec text).

        The run's log is replayed against the new spec (``flowcore.upgrade``);
        if it replays, the spec is stored and the run pinned to it in one
        transaction that also writes its new state, so a worker processing
        the run meanwhile goes on from the new state: work in flight, timers,
        questions and signal waits stay as they are (the new version waits for
        the same effects under the same keys). ``dry_run``: check everything,
        write nothing. A run on that spec already is left alone
        (``Upgrade.changed`` false).

        Refused with ``flowcore.UpgradeRefused`` when the log does not replay
        against the new spec (``reason`` ``diverged``: ``index``, ``expected``,
        ``actual``) or the spec is another flow's (``other-flow``), with
        ``flowcore.SpecError`` for an invalid spec, and with ``HostError`` for
        an unknown run or an unreadable spec file, a run that is not running, and a
        tools module that lacks a handler the new spec needs.
        """
        text, source = _spec_source(spec)
        flow = flowcore.parse_flow(text, source_name=source)  # SpecError: nothing is written
        row = await self.run(run_id)
        registry = self._checkable(row.tools)
        now = self.now()

        def moving() -> flowcore.Upgrade:
            store = self.store
            with store.tx():  # the write lock: no event of the run commits meanwhile
                current = store.run_row(run_id)
                if current.status != "running":
                    raise HostError(
                        f"cannot move run {run_id!r} to another version: it is {current.status},"
                        " and only a running run moves"
                    )
                records = store.log_records(run_id)
                made = flowcore.upgrade(records, flow, pinned=current.spec_hash)
                if not made.changed:
                    return made
                if registry is not None:
                    missing = missing_handlers(registry, reachable_flows(store, flow))
                    if missing:
                        raise HostError(
                            f"cannot move run {run_id!r}: {self._lacks(current.tools, missing)}"
                        )
                if dry_run:
                    return made
                store.register_flow(text, source, now)
                store.move_run(run_id, flow, records, now)
                return made

        return await self._db(moving)

    def _check_resumed(self, store: Store, rewind: Rewind, tools: str | None) -> None:
        if tools in self._supplied:
            return
        try:
            registry = self._registry(tools)
        except RegistryError as exc:
            raise HostError(f"cannot resume run {rewind.run_id!r}: {exc}") from None
        missing = missing_handlers(registry, reachable_flows(store, rewind.flow))
        if missing:
            raise HostError(f"cannot resume run {rewind.run_id!r}: {self._lacks(tools, missing)}")

    async def _apply_now(self, run_id: str, event: Event) -> Applied:
        def applying() -> list[Applied]:
            store = self.store
            with store.tx():
                store.run_row(run_id)
                applied = store.apply(run_id, event, self.now())
                if applied.rejected is not None:
                    raise HostError(applied.rejected)
                return [applied, *store.take_extra()]

        applied = await self._db(applying)
        self._after(applied)
        return applied[0]

    async def signal(
        self, run_id: str, name: str, payload: Any = None, key: str | None = None
    ) -> None:
        """Send the run a signal (buffered if it does not wait for it yet).

        With ``key`` only a wait with that ``key`` takes it (buffered for one
        until then, like any signal). A name no ``await_signal`` step of the
        run's flow, or of a subflow it can start, waits for is refused, listing
        the names that are.
        """
        _check_signal_key(key)

        def declared() -> set[str]:
            store = self.store
            row = store.run_row(run_id)
            return declared_signals(reachable_flows(store, store.flow_by_hash(row.spec_hash)))

        names = await self._db(declared)
        if name not in names:
            listed = ", ".join(repr(n) for n in sorted(names))
            raise HostError(
                f"run {run_id!r} never waits for signal {safe_text(repr(name), 200)}: "
                + (f"its flow and subflows declare {listed}" if names else "it declares no signals")
            )
        await self._apply_now(
            run_id, SignalReceived(signal=name, payload=payload, at_ms=self.now(), key=key)
        )

    async def signal_key(self, name: str, key: str, payload: Any = None) -> list[str]:
        """Send signal ``name`` with ``key`` to every running run that waits for it
        with that key (``await_signal.key``), in one transaction; returns their
        ids, sorted. Raises ``NoSignalWait`` (a ``HostError``) when no run waits
        for it: nothing is buffered then.
        """
        _check_signal_key(key)
        now = self.now()

        def sending() -> tuple[list[str], list[Applied]]:
            store = self.store
            with store.tx():
                runs = store.signal_waits(name, key)
                out: list[Applied] = []
                for run_id in runs:
                    event = SignalReceived(signal=name, payload=payload, at_ms=now, key=key)
                    applied = store.apply(run_id, event, now)
                    if applied.rejected is not None:
                        raise HostError(f"run {run_id!r} refused the signal: {applied.rejected}")
                    out += [applied, *store.take_extra()]
                return runs, out

        runs, applied = await self._db(sending)
        if not runs:
            raise NoSignalWait(
                f"no running run waits for signal {safe_text(repr(name), 200)}"
                f" with key {safe_text(repr(key), 200)}"
            )
        self._after(applied)
        return runs

    async def answer(self, run_id: str, key: str, answer: Any) -> None:
        """Answer an open question of the run.

        ``key`` is the question's key (``r-1/decide#1``), the key relative to
        the run (``decide#1``), or a step id (``decide``) with exactly one open
        question. A key that is no open question goes to the interpreter as it
        is (a late answer is recorded); when it refuses it, the ``HostError``
        lists the open questions' keys.
        """

        def resolving() -> tuple[str | None, list[str]]:
            store = self.store
            store.run_row(run_id)
            questions = flowcore.waiting_for(store.state(run_id)).questions
            keys = [q.key for q in questions]
            relative = [_relative(k, run_id) for k in keys]
            if key in keys:
                return key, relative
            if key in relative:
                return keys[relative.index(key)], relative
            of_step = [q.key for q in questions if q.step == key]
            if len(of_step) > 1:
                listed = ", ".join(_relative(k, run_id) for k in of_step)
                raise HostError(
                    f"step {key!r} of run {run_id!r} has {len(of_step)} open questions"
                    f" ({listed}): give the key of the one to answer"
                )
            return (of_step[0] if of_step else None), relative

        found, open_keys = await self._db(resolving)
        if found is not None:
            event = HumanAnswered(idempotency_key=found, answer=answer, at_ms=self.now())
            await self._apply_now(run_id, event)
            return
        try:
            flowcore.parse_key(key, run_id)
            target = key
        except ValueError:
            target = f"{run_id}/{key}"  # maybe a relative key of a question answered already
            try:
                flowcore.parse_key(target, run_id)
            except ValueError:
                target = key
        try:
            event = HumanAnswered(idempotency_key=target, answer=answer, at_ms=self.now())
            await self._apply_now(run_id, event)
        except HostError as exc:
            listed = ", ".join(open_keys) if open_keys else "none"
            raise HostError(f"{exc} (open questions of run {run_id!r}: {listed})") from None

    async def questions(self, run_id: str) -> list[str]:
        """The keys of the run's open questions, as its state has them now."""

        def reading() -> list[str]:
            return [q.key for q in flowcore.waiting_for(self.store.state(run_id)).questions]

        return await self._db(reading)

    async def cancel(self, run_id: str, reason: str = "") -> None:
        """Cancel the run: pending work is abandoned, compensations run, it settles cancelled.

        A cancel that would change nothing is refused with ``NothingToCancel``
        (a ``HostError``) and writes nothing: the run has settled, or it is
        compensating after an earlier cancel or failure.
        """
        row = await self.run(run_id)
        if row.status != "running":
            raise NothingToCancel(f"run {run_id!r} has settled ({row.status}): nothing to cancel")
        try:
            await self._apply_now(run_id, flowcore.CancelRequested(reason=reason, at_ms=self.now()))
        except HostError as exc:
            current = await self.run(run_id)
            if current.status != "running":
                raise NothingToCancel(
                    f"run {run_id!r} has settled ({current.status}): nothing to cancel"
                ) from None
            if "compensating" in str(exc):
                raise NothingToCancel(f"run {run_id!r}: {exc}: nothing to cancel") from None
            raise

    # --- scheduled calls -----------------------------------------------------------

    async def scheduled(
        self, run_id: str | None = None, tool: str | None = None, status: str | None = None
    ) -> list[ScheduledRow]:
        """The scheduled calls of every run (or of ``run_id``), pending and finished.

        Finished calls stay listed as long as ``scheduled_retention`` keeps them.
        """

        def listing() -> list[ScheduledRow]:
            if run_id is not None:
                self.store.run_row(run_id)  # an unknown run is an error, not an empty list
            return list_scheduled(self.store.conn, run_id, tool, status)

        return await self._db(listing)

    def _schedule_id(self, run_id: str, schedule_id: str) -> str:
        """A schedule id as the run spells it: ``nudge#1`` and ``~scheduled-1`` are relative."""
        if schedule_id.startswith(run_id + "/"):
            return schedule_id
        return f"{run_id}/{schedule_id}"

    async def _scheduled_event(self, run_id: str, sid: str, event: Event) -> bool:
        """Apply a cancel or run-now of scheduled call ``sid`` if it is pending (True);
        else write nothing (False). The check and the write are one transaction."""

        def applying() -> list[Applied]:
            store = self.store
            with store.tx():
                row = store.run_row(run_id)
                if row.status != "running":
                    return []  # a settled run has no pending call
                calls = flowcore.scheduled_calls(store.state(run_id), [sid])
                if not calls or calls[0].status != "pending":
                    return []  # unknown, issued or finished: nothing to do, nothing logged
                applied = store.apply(run_id, event, self.now())
                if applied.rejected is not None:
                    raise HostError(applied.rejected)
                return [applied, *store.take_extra()]

        applied = await self._db(applying)
        if not applied:
            return False
        self._after(applied)
        assert applied[0].scheduled is not None
        return applied[0].scheduled.done

    async def cancel_scheduled(self, run_id: str, schedule_id: str) -> bool:
        """Cancel a pending scheduled call: True if it was pending, False if it was not
        (unknown, already issued or finished), and then nothing is written; never an
        error for the id (an unknown run is a ``HostError``)."""
        sid = self._schedule_id(run_id, schedule_id)
        event = flowcore.ScheduledCancelRequested(schedule_id=sid, at_ms=self.now())
        return await self._scheduled_event(run_id, sid, event)

    async def run_scheduled_now(self, run_id: str, schedule_id: str) -> bool:
        """Issue a pending scheduled call now: True if it was pending, else False
        (nothing is written then)."""
        sid = self._schedule_id(run_id, schedule_id)
        event = flowcore.ScheduledRunNowRequested(schedule_id=sid, at_ms=self.now())
        return await self._scheduled_event(run_id, sid, event)

    async def add_scheduled(
        self, run_id: str, tool: str, input: Any = None, delay_ms: int = 0
    ) -> str:
        """Schedule a call to a tool the run's flow declares ``schedulable``; its id.

        Refused (``HostError`` naming the schedulable tools) for any other tool,
        and for a run that has settled or is ending.
        """
        row = await self.run(run_id)
        if row.status != "running":
            raise HostError(f"run {run_id!r} has settled ({row.status}): no call can be scheduled")
        if type(delay_ms) is not int or not 0 <= delay_ms <= MAX_MS:
            raise HostError(f"delay must be an integer from 0 to {MAX_MS:,} ms, not {delay_ms!r}")
        event = flowcore.ScheduledAddRequested(
            tool=tool, input=input, delay_ms=delay_ms, at_ms=self.now()
        )
        applied = await self._apply_now(run_id, event)
        assert applied.scheduled is not None
        return applied.scheduled.id

    async def trim_scheduled(self) -> int:
        """Apply ``scheduled_retention`` now (the worker does, as it works); rows dropped."""
        now = self.now()

        def trimming() -> int:
            with self.store.tx():
                return trim(self.store.conn, now, self.scheduled_retention)

        return await self._db(trimming)

    # --- deleting runs (``_prune``) -------------------------------------------------

    async def delete(
        self, run_id: str, force: bool = False, *, timeout: float | None = None
    ) -> Deleted:
        """Delete the run and its child runs, every row of them, in one transaction.

        Refused with ``HostError`` (nothing deleted): an unknown run; a child
        run whose parent is still running; a tree with a run still running,
        unless ``force``. ``force`` cancels the running runs of the tree as
        ``cancel`` does (their compensations run and are recorded), waits
        until every run of the tree has settled — working the tree itself
        when this host is not working already — and then deletes it;
        ``timeout`` (seconds) bounds that wait, after which the runs are left
        cancelling, not deleted (``HostError``).
        """
        active = await self._db(_prune.active_runs, self.store, run_id)
        cancelled: list[str] = []
        if active:
            if not force:
                raise _prune.refusal(run_id, active)
            cancelled = await self._cancel_tree(active)
            await self._settle_tree(run_id, timeout)
        deleted = await self._db(_prune.delete_tree, self.store, run_id)
        deleted.cancelled = cancelled
        return deleted

    async def _cancel_tree(self, active: list[str]) -> list[str]:
        """Cancel the topmost running runs of a tree (a cancel reaches their children)."""
        cancelled = []
        for run_id in active:
            row = await self.run(run_id)
            if row.status != "running" or row.parent_run in cancelled:
                continue  # settled meanwhile, or cancelled with its parent
            try:
                await self.cancel(run_id, "cancelled to be deleted")
            except HostError:
                continue  # compensating already (a cancel was requested before)
            cancelled.append(run_id)
        return cancelled

    async def _settle_tree(self, run_id: str, timeout: float | None) -> None:
        """Wait until no run of ``run_id``'s tree is running, working it if nobody here is."""
        deadline = None if timeout is None else time.monotonic() + timeout
        stop = asyncio.Event()
        worker = None
        if not self.store.dispatching:
            worker = asyncio.create_task(self.work(stop, only=run_id))
        try:
            while active := await self._db(_prune.active_runs, self.store, run_id):
                if deadline is not None and time.monotonic() > deadline:
                    raise HostError(
                        f"cannot delete run {run_id!r}: it was cancelled and has not settled"
                        f" within {timeout:g} s (running: {_prune.listed(active)}), so it is"
                        " not deleted; delete it once it settles"
                    )
                if worker is not None and worker.done():
                    worker.result()  # the worker failed: say why
                    worker = None
                await asyncio.sleep(self.poll_ms / 1000)
        finally:
            stop.set()
            if worker is not None:
                await worker

    async def prune(
        self,
        settled_before_ms: int,
        statuses: Iterable[str] | None = None,
        *,
        dry_run: bool = False,
    ) -> Deleted:
        """Delete the root runs that settled before ``settled_before_ms``, with their trees.

        ``statuses``: only roots that settled so (default: every settled
        status). A tree with a run still running, or one that settled at or
        after the cutoff, is kept whole. Trees go a batch per transaction
        (never one split between two). ``dry_run``: delete nothing, count
        what would go.
        """
        if type(settled_before_ms) is not int:
            raise HostError(
                "settled_before_ms must be an integer (epoch milliseconds),"
                f" not {safe_text(repr(settled_before_ms), 60)}"
            )
        chosen = _prune.checked_statuses(statuses)
        store = self.store
        roots = await self._db(_prune.prunable_roots, store, settled_before_ms, chosen)
        total = Deleted(dry_run=dry_run)
        for start in range(0, len(roots), _prune.PRUNE_BATCH):
            batch = roots[start : start + _prune.PRUNE_BATCH]
            total.add(
                await self._db(_prune.prune_batch, store, batch, settled_before_ms, chosen, dry_run)
            )
            await asyncio.sleep(0)  # a worker's handlers and commits go on between batches
        return total

    async def vacuum(self) -> tuple[int, int]:
        """``VACUUM`` the database file: its size in bytes (with the WAL) before and after."""
        return await self._db(_prune.vacuum, self.store, self.db_path)

    async def _retain(self) -> None:
        """Prune what the retention lets go, at most once a minute of the host's clock."""
        if self.retention_ms is None or self.store.only is not None:
            return
        now = self.now()
        if self._next_prune is not None and now < self._next_prune:
            return
        self._next_prune = now + RETENTION_EVERY_MS
        try:
            pruned = await self.prune(now - self.retention_ms)
        except Exception as exc:  # the database (locked, full): the worker goes on
            why = f"{type(exc).__name__}: {safe_text(exc, 200)}"
            log.warning("flowcore: pruning failed (%s); trying again in a minute", why)
            return
        if pruned.runs:
            log.info(
                "flowcore: pruned %d run(s) settled more than %d ms ago",
                len(pruned.runs),
                self.retention_ms,
            )
            if self._on_pruned is not None:
                try:
                    self._on_pruned(pruned)
                except Exception as exc:  # the caller's code: say so, keep working
                    why = f"{type(exc).__name__}: {safe_text(exc, 200)}"
                    log.warning("flowcore: on_pruned raised: %s", why)

    async def run(self, run_id: str) -> RunRow:
        return await self._db(self.store.run_row, run_id)

    async def runs(self, status: str | None = None, where: Any = None) -> list[RunRow]:
        """Runs oldest first, of one ``status`` if given, whose metadata matches ``where``:
        filter texts (``["customer=acme", "amount>100"]``) or a mapping of field to the
        value it equals (``flowcore.metadata_filters``; ``MetadataFilterError`` if bad)."""
        filters = flowcore.metadata_filters(where)
        return await self._db(self.store.runs, status, filters)

    async def metadata(self, run_id: str) -> dict[str, Any]:
        """The run's current metadata (field -> value), as the database indexes it."""
        await self.run(run_id)
        found = await self._db(self.store.metadata, [run_id])
        return found.get(run_id, {})

    async def metadata_of(self, run_ids: list[str]) -> dict[str, dict[str, Any]]:
        """The current metadata of each of ``run_ids`` (runs without any are left out)."""
        return await self._db(self.store.metadata, run_ids)

    async def waits(self, run_id: str) -> flowcore.Waits:
        """What the run waits for now (``flowcore.waiting_for`` of its state)."""
        return await self._db(lambda: flowcore.waiting_for(self.store.state(run_id)))

    async def page_runs(self, **filters: Any) -> list[RunRow]:
        """Runs newest first, filtered and paged (``Store.page_runs``)."""
        return await self._db(lambda: self.store.page_runs(**filters))

    async def children(self, run_id: str) -> list[str]:
        return await self._db(self.store.children, run_id)

    async def flow(self, run_id: str) -> flowcore.Flow:
        """The flow the run was started with, as the database stores its spec."""
        row = await self.run(run_id)
        return await self._db(self.store.flow_by_hash, row.spec_hash)

    async def flow_by_hash(self, spec_hash: str) -> flowcore.Flow | None:
        """The stored spec whose ``Flow.spec_hash`` is ``spec_hash`` (a log's
        ``run.started`` records it), or None if the database holds none."""

        def find() -> flowcore.Flow | None:
            try:
                return self.store.flow_by_hash(spec_hash)
            except HostError:
                return None

        return await self._db(find)

    async def records(self, run_id: str, start: int = 0) -> list[flowcore.Record]:
        await self.run(run_id)
        return await self._db(self.store.log_records, run_id, start)

    async def archived(self, run_id: str) -> list[tuple[int, flowcore.Record]]:
        """The log records resumes moved out of the run's live log: (resume number, record)."""
        await self.run(run_id)
        return await self._db(self.store.archived, run_id)

    async def export(self, run_id: str) -> bytes:
        return flowcore.encode_records(await self.records(run_id))

    async def events(
        self, run_id: str, start_index: int = 0, follow: bool = False
    ) -> AsyncIterator[flowcore.Record]:
        """The run's log records from ``start_index``; with ``follow``, until it settles.

        Following wakes at each commit of this host, and every ``poll_ms`` for
        what other processes on the database commit.
        """
        index = start_index
        while True:
            committed = self._committed  # taken before reading: no commit slips between
            batch = await self.records(run_id, index)
            for record in batch:
                yield record
                index = record.index + 1
            if not follow:
                return
            row = await self.run(run_id)
            if row.status != "running" and row.next_index <= index:
                return
            try:
                await asyncio.wait_for(committed.wait(), self.poll_ms / 1000)
            except TimeoutError:
                pass

    async def idle(self, horizon_ms: int = 0) -> bool:
        """Whether no run can go on now without an answer, a signal, or a timer due
        more than ``horizon_ms`` from now: no work is ready or out (with this host
        or another worker), no child run or signal-run is to start, no timer is due
        sooner, and this host has no result waiting for its commit. A database
        with no running run is idle. Schedules' next slots are not looked at."""
        if self._running or self._queue or self._firing:
            return False
        horizon = self.now() + horizon_ms
        return not await self._db(self.store.busy, horizon)

    async def wait(self, run_id: str, timeout: float | None = None) -> RunRow:
        """Wait until the run settles (someone must be running a worker)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            row = await self.run(run_id)
            if row.status != "running":
                return row
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"run {run_id} has not settled within {timeout} s")
            await asyncio.sleep(self.poll_ms / 1000)

    async def show(self, run_id: str) -> dict[str, Any]:
        """Status, pending effects and questions, budget used and left, dead letters,
        buffered signals, handler failures (with tracebacks) and resumes; for a
        fork, ``forkedFrom`` ``{runId, index}``."""

        def showing() -> dict[str, Any]:
            store = self.store
            row = store.run_row(run_id)
            state = store.state(run_id)
            view = flowcore.waiting_for(state)
            questions = {q.key: q for q in view.questions}
            signals = {s.key: s.signal for s in view.signals}
            outbox = store.outbox_rows(run_id)  # in emission order
            incarnation = store.state(run_id).incarnation
            info: dict[str, Any] = {
                "runId": row.run_id,
                "flowId": row.flow_id,
                "status": row.status,
                "parent": row.parent_run,
                "startedBy": row.started_by,
                "depth": row.depth,
                "output": row.output,
                "error": row.error,
                "budget": msgspec.to_builtins(flowcore.usage_figures(state)),
                "pending": [o for o in outbox if o["status"] in ("ready", "dispatched", "timer")],
                "questions": [
                    {
                        "key": q.key,
                        "question": q.question,
                        "options": None if q.options is None else list(q.options),
                    }
                    for q in (questions[o["key"]] for o in outbox if o["key"] in questions)
                ],
                "waitingFor": [signals[o["key"]] for o in outbox if o["key"] in signals],
                "buffered": [
                    {"signal": name, "payload": payload}
                    for name, payloads in view.buffered.items()
                    for payload in payloads
                ],
                "deadLetters": store.dead_letters(run_id),
                "failures": store.failures(run_id),
                "resumes": store.resumes(run_id),
                "tools": row.tools,
                "children": store.children(run_id),
                "metadata": dict(state.metadata or {}),
                "detached": store.detached(run_id),
            }
            if incarnation != 1:  # a run that continued as new (language.md §4.18)
                info["incarnation"] = incarnation
            forked = store.forked_from(run_id)
            if forked is not None:  # (only a fork's output has the key)
                info["forkedFrom"] = forked
            return info

        return await self._db(showing)

    # --- schedules ---------------------------------------------------------------------

    async def add_schedules(self, spec: str | Path, *, tools: str | None = None) -> list[str]:
        """Register the schedules ``spec`` declares (its ``schedules:``); returns their names.

        A schedule already in the database gets the new definition and keeps
        its history (progress, runs, recent actions); see ``add_schedule``.
        Refused with ``HostError`` when the spec declares none.
        """
        text, source = _spec_source(spec)
        return await self._put_schedules(text, source, None, tools)

    async def add_schedule(
        self,
        spec: str | Path,
        name: str,
        definition: Mapping[str, Any],
        *,
        tools: str | None = None,
    ) -> str:
        """Add (or redefine) the schedule ``name`` starting runs of ``spec``'s flow.

        ``definition`` has the keys of a spec's ``schedules:`` entry (``cron``,
        ``timezone``, ``every``, ``offset``, ``input``, ``overlap``,
        ``catchup_window``, ``jitter``, ``paused``, ``note``, ``limit``); a bad
        one is refused with ``HostError`` naming every problem. A redefined
        schedule keeps its progress, runs and actions; its ``paused``/``note``
        and ``limit`` change only where the definition changes them.
        """
        text, source = _spec_source(spec)
        names = await self._put_schedules(text, source, (name, definition), tools)
        return names[0]

    async def _put_schedules(
        self,
        text: str,
        source: str,
        one: tuple[str, Mapping[str, Any]] | None,
        tools: str | None,
    ) -> list[str]:
        tools = tools_module_name(tools) or self.tools
        registry = self._checkable(tools)
        now = self.now()

        def putting() -> list[str]:
            store = self.store
            with store.tx():
                flow = store.register_flow(text, source, now)
                if one is None:
                    found = list(flow.schedules.values())
                    if not found:
                        raise HostError(f"{source}: the spec declares no schedules")
                else:
                    found = [_schedules.checked(one[0], one[1], flow.id)]
                if registry is not None:
                    missing = missing_handlers(registry, reachable_flows(store, flow))
                    if missing:
                        names = ", ".join(repr(s.name) for s in found)
                        raise HostError(
                            f"cannot add schedule {names}: {self._lacks(tools, missing)}"
                        )
                for schedule in found:
                    _schedules.put(store, schedule, flow, tools, one is None, now)
                return [s.name for s in found]

        return await self._db(putting)

    async def schedules(self) -> list[dict[str, Any]]:
        """Every schedule, by name, as ``schedule`` describes it (without its actions)."""

        def listing() -> list[dict[str, Any]]:
            store = self.store
            return [_schedules.describe(store, row) for row in _schedules.all_rows(store)]

        return await self._db(listing)

    async def schedule(self, name: str, next_slots: int = 5) -> dict[str, Any]:
        """The schedule: its definition, state, next slots and recent actions (oldest first)."""

        def showing() -> dict[str, Any]:
            store = self.store
            row = _schedules.get(store, name)
            info = _schedules.describe(store, row, next_slots)
            info["actions"] = _schedules.actions_of(store, name)
            return info

        return await self._db(showing)

    async def pause_schedule(self, name: str, note: str = "") -> None:
        """Start nothing more until resumed (slots while paused are never started)."""
        now = self.now()
        await self._schedule_tx(lambda store: _schedules.set_paused(store, name, True, note, now))

    async def resume_schedule(self, name: str, note: str = "") -> None:
        """Start again, from the slots after now."""
        now = self.now()
        await self._schedule_tx(lambda store: _schedules.set_paused(store, name, False, note, now))

    async def delete_schedule(self, name: str) -> None:
        """Forget the schedule and its actions (the runs it started stay)."""
        await self._schedule_tx(lambda store: _schedules.delete(store, name))

    async def _schedule_tx(self, fn: Callable[[Store], None]) -> None:
        def changing() -> None:
            store = self.store
            with store.tx():
                fn(store)

        await self._db(changing)
        if self._wake is not None:
            self._wake.set()

    async def trigger_schedule(self, name: str) -> str:
        """Start a run of the schedule now, outside its cadence, whatever runs;
        its id is ``<name>@trigger-<n>`` and ``schedule.at`` is now. Returns the id."""
        now = self.now()

        def triggering() -> tuple[str, list[Applied]]:
            store = self.store
            with store.tx():
                return _schedules.trigger_now(store, name, now)

        run_id, applied = await self._db(triggering)
        self._after(applied)
        return run_id

    async def backfill_schedule(
        self, name: str, start_ms: int, end_ms: int
    ) -> list[dict[str, Any]]:
        """Start the schedule's slots from ``start_ms`` through ``end_ms`` (epoch ms).

        Each slot's run has the slot's own id, so a slot is started once however
        often it is backfilled (or was started by the cadence). The overlap
        policy applies between the slots as between any (with ``skip`` only the
        first starts while it runs); the catch-up window and limit do not.
        Returns the actions recorded, oldest first.
        """
        now = self.now()

        def filling() -> tuple[list[dict[str, Any]], list[Applied]]:
            store = self.store
            with store.tx():
                return _schedules.backfill_range(store, name, start_ms, end_ms, now)

        actions, applied = await self._db(filling)
        self._after(applied)
        return actions

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
        self._writer = asyncio.create_task(self._write_loop())
        self._heart = asyncio.create_task(self._heartbeat())
        last_recovery = last_share = 0.0
        try:
            while not stop.is_set():
                if time.monotonic() - last_share > SHARE_S:
                    self.store.share = await self._db(self._share)
                    last_share = time.monotonic()
                if time.monotonic() - last_recovery > self.lease_ms / 2000:
                    await self._recover()
                    await self.trim_scheduled()
                    last_recovery = time.monotonic()
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
                delay = self.poll_ms / 1000
                nxt = await self._db(self.store.next_timer)
                if only is None:
                    scheduled = await self._db(_schedules.next_due, self.store)
                    if scheduled is not None and (nxt is None or scheduled < nxt):
                        nxt = scheduled
                if nxt is not None:
                    delay = min(delay, max(0.0, (nxt - self.now()) / 1000))
                try:
                    await asyncio.wait_for(self._wake.wait(), timeout=delay)
                except TimeoutError:
                    pass
        finally:
            await self._drain()
            await self._db(self._unregister_worker)
            self.store.dispatching = False
            self.store.share = None
            self.store.only = None
            self._on_settled = None
            self._on_pruned = None
            self._on_records = None

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
            "INSERT OR REPLACE INTO workers (worker_id, pid, hostname, heartbeat_ms, only_run)"
            " VALUES (?, ?, ?, ?, ?)",
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
        with store.tx():
            store.conn.execute(
                "UPDATE workers SET heartbeat_ms = ? WHERE worker_id = ?",
                (now, self.worker_id),
            )
            store.extend_leases(keys, now)

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
            with store.tx():
                return store.claim_ready_work(now, free)

        for claimed in await self._db(claiming):
            self._spawn(claimed)

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
                    if getattr(claimed.effect, "heartbeat_timeout_ms", None) is None:
                        event, raised = await run_handler(
                            registry, claimed.effect, self.now, self._threads, cancel
                        )
                    else:
                        event, raised = await self._watched(registry, claimed.effect, cancel)
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

    async def _watched(
        self, registry: Registry, effect: CallTool | RunAgent | RunTeam, cancel: threading.Event
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
            run_handler(registry, effect, self.now, self._threads, cancel, beats)
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
            if not self._queue:
                continue
            batch, self._queue = self._queue, []
            now = self.now()

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
