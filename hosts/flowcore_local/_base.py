"""What every role of the local host shares: its options, its state, its database.

``HostBase`` is the constructor of ``LocalHost`` (every option), opening and
closing (the database connection, the handler threads), and the one way any
role reaches the database (``_db``, on the event loop's thread). The roles
are built on it: the client (``_client``, ``_reads``), the worker
(``_worker``, ``_execution``) and administration (``_admin``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self, TypeVar

import flowcore
from flowcore import MAX_DURATION_MS as MAX_MS
from flowcore import Event
from flowcore_handlers import (
    HandlerThreads,
    Registry,
    RegistryError,
    load_registry,
    safe_text,
    tools_module_name,
)
from flowcore_handlers._limits import LimitError, ToolLimit, check_tool_limits
from flowcore_handlers._tracing import TracingError, tracer_for

from ._authorize import Authorize
from ._db import DURABILITY, Durability, Listener, db_location, open_db
from ._prune import Deleted
from ._scheduled import ScheduledRetention
from ._store import Applied, Claimed, HostError, RunRow, Store
from ._store_progress import ProgressCap, Published

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

    from ._tracing import LocalTracing


T = TypeVar("T")


log = logging.getLogger("flowcore.local")


def wall_ms() -> int:
    return int(time.time() * 1000)


def _local_tracing(tracing: Any, host: HostBase) -> LocalTracing | None:
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


class HostBase:
    """The options, state and database every role of ``LocalHost`` shares."""

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
        authorize: Authorize | None = None,
        ids: Callable[[int], str] | None = None,
    ) -> None:
        # Random hex of n bytes, for the ids the host makes up itself (its
        # worker id's suffix, a run id or update id not given): a simulation
        # passes one drawn from its seed.
        self.ids: Callable[[int], str] = ids or secrets.token_hex
        # The SQLite file, or a ``postgresql://`` URL as given (``_pg``).
        self.db_path: Path | str = db_location(db)
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
        self.worker_id = f"{socket.gethostname()}:{os.getpid()}:{self.ids(4)}"
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
        # Progress items handlers published, for the next group commit, and how
        # much of its progress stream each run keeps (``_store_progress``).
        self._published: list[Published] = []
        self.progress_cap = ProgressCap()
        self._queue_event: asyncio.Event | None = None
        self._wake: asyncio.Event | None = None
        self._committed = asyncio.Event()  # set (and replaced) after each commit
        self._sem: asyncio.Semaphore | None = None
        self._writer: asyncio.Task[None] | None = None
        self._heart: asyncio.Task[None] | None = None
        self._listener: Listener | None = None  # a worker's ear for others' commits
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
        self._beaten = 0  # rows this host's heartbeats wrote (``LocalWorker._seen``)
        self._on_pruned: Callable[[Deleted], Any] | None = None
        self._on_records: Callable[[list[flowcore.Record]], Any] | None = None
        # How long finished scheduled calls stay listed (``trim_scheduled``).
        self.scheduled_retention = scheduled_retention or ScheduledRetention()
        # Asked before each handler runs (``_authorize``, specs/local.md); None: all allowed.
        self.authorize = authorize
        # OpenTelemetry spans (``_tracing``, specs/tracing.md); None: off, and free.
        self._tracing: LocalTracing | None = _local_tracing(tracing, self)

    # --- lifecycle ------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def open(self) -> None:
        def opening() -> Store:
            conn, database = open_db(self.db_path, self.durability)
            store = Store(conn, self.worker_id, self.lease_ms, database)
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
