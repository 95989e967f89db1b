"""Running the app: uvicorn and, on the local host, its worker in one process
(``serve``); on any host without a worker of its own here (``serve_host``).

The server and the worker stop together. SIGINT or SIGTERM stops the server
first (uvicorn ends its open connections), then the worker, which lets its
running handlers finish and commit their results. A worker that stops on its
own (an error it could not survive) stops the server too, and ``serve``
raises ``WorkerStopped``: answering requests while no run can progress would
hide that nothing happens.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import threading
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from pathlib import Path

import uvicorn

from flowcore_handlers import Host, Registry, ToolLimit, load_registry, tools_module_name
from flowcore_local import Durability, LocalHost

from ._app import create_app
from ._auth import Tokens
from ._http import DEFAULT_BODY_LIMIT, DEFAULT_BODY_TIMEOUT_S, DEFAULT_MAX_STREAMS

__all__ = ["WorkerStopped", "serve", "serve_host"]

# How long the server waits at shutdown for responses still open (the event
# streams end at once) before it cuts them.
SHUTDOWN_GRACE_S = 5


class WorkerStopped(Exception):
    """The worker inside ``serve`` stopped while the server was serving (the
    message names what stopped it; ``__cause__`` is that error)."""


class _Server(uvicorn.Server):
    """uvicorn's server, with two changes. After a shutdown on SIGINT or SIGTERM,
    uvicorn raises the signal again for the handler it found, and the default
    one for SIGTERM ends the process there, before the worker's handlers finish:
    here the signal stops the server, and ``serve`` goes on to stop the worker.
    And its shutdown sets ``closing`` first, which ends the open NDJSON follows
    (``create_app``), since they would hold the shutdown until the runs settle."""

    def __init__(self, config: uvicorn.Config, closing: asyncio.Event) -> None:
        super().__init__(config)
        self.closing = closing

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.closing.set()
        await super().shutdown(sockets)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        found = {sig: signal.signal(sig, self.handle_exit) for sig in _SIGNALS}
        try:
            yield
        finally:
            for sig, handler in found.items():
                signal.signal(sig, handler)


_SIGNALS = (signal.SIGINT, signal.SIGTERM)


async def serve(
    db: str | Path,
    tokens: Tokens,
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    tools: str | Sequence[str] | None = None,
    flows: str | Path | None = None,
    body_limit: int = DEFAULT_BODY_LIMIT,
    body_timeout: float = DEFAULT_BODY_TIMEOUT_S,
    max_streams: int = DEFAULT_MAX_STREAMS,
    on_ready: Callable[[str, int], None] | None = None,
    tracing: bool = False,
    durability: Durability = "power-loss",
    tool_limits: Mapping[str, ToolLimit] | None = None,
) -> None:
    """Serve the database ``db`` until SIGINT or SIGTERM; ``on_ready(host, port)``
    is called once the socket listens (``port=0`` picks a free one). ``tool_limits``:
    the worker's limits of tools across runs (``LocalHost``); ``body_limit``,
    ``body_timeout`` and ``max_streams``: as ``create_app``. ``tools``: the handler
    modules runs start and resume with (each loaded once, here: ``RegistryError``
    if one does not load); the first is the default of runs that recorded none.

    Returns once the server has stopped and the worker's running handlers have
    finished. Raises ``WorkerStopped`` when the worker stopped first, after
    stopping the server."""
    names = [tools] if isinstance(tools, str) else list(tools or ())
    modules = handler_modules(names)
    default = next(iter(modules), None)
    async with LocalHost(
        db, default, tracing=tracing, durability=durability, tool_limits=tool_limits
    ) as local:
        await serve_host(
            local,
            tokens,
            host=host,
            port=port,
            flows=flows,
            body_limit=body_limit,
            body_timeout=body_timeout,
            max_streams=max_streams,
            on_ready=on_ready,
            work=local.work,
            tools_modules=modules,
        )


def handler_modules(names: Sequence[str]) -> dict[str, Registry]:
    """The handler modules ``names`` (dotted names or ``.py`` files), each loaded
    once, by the name a run records (``tools_module_name``), in the order given."""
    found: dict[str, Registry] = {}
    for name in names:
        stored = tools_module_name(name)
        if stored is not None and stored not in found:
            found[stored] = load_registry(stored)
    return found


async def serve_host(
    served: Host,
    tokens: Tokens,
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    flows: str | Path | None = None,
    body_limit: int = DEFAULT_BODY_LIMIT,
    body_timeout: float = DEFAULT_BODY_TIMEOUT_S,
    max_streams: int = DEFAULT_MAX_STREAMS,
    on_ready: Callable[[str, int], None] | None = None,
    work: Callable[[asyncio.Event], Awaitable[None]] | None = None,
    tools_modules: Mapping[str, Registry] | None = None,
) -> None:
    """Serve the open host ``served`` (any ``Host``: a local database, a Temporal
    namespace) until SIGINT or SIGTERM, as ``serve`` does. ``work(stop)``: a
    worker to run beside the server (the local host's loop), stopped with it;
    None where the runs' workers run elsewhere (Temporal's). ``tools_modules``: as
    ``create_app``."""
    closing = asyncio.Event()
    app = create_app(
        served,
        tokens,
        flows,
        body_limit,
        body_timeout,
        max_streams,
        closing=closing,
        tools_modules=tools_modules,
    )
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        lifespan="off",
        access_log=False,
        timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
    )
    server = _Server(config, closing)
    stop = asyncio.Event()

    async def working() -> None:
        if work is None:
            await stop.wait()
        else:
            await work(stop)

    worker = asyncio.create_task(working())

    async def announce() -> None:
        while not server.started:
            if worker.done() or server.should_exit:
                return
            await asyncio.sleep(0.02)
        if on_ready is not None:
            bound = server.servers[0].sockets[0].getsockname()
            on_ready(bound[0], bound[1])

    def worker_done(task: asyncio.Task[None]) -> None:
        server.should_exit = True  # serving on would answer while no run progresses

    announcer = asyncio.create_task(announce())
    worker.add_done_callback(worker_done)
    try:
        await server.serve()
    finally:
        worker.remove_done_callback(worker_done)
        announcer.cancel()
        died = worker.done() and not stop.is_set()
        stop.set()
        if not died:
            await worker
    if died:
        exc = None if worker.cancelled() else worker.exception()
        what = "it returned" if exc is None else f"{type(exc).__name__}: {exc}"
        raise WorkerStopped(
            f"the worker stopped ({what}); the server stopped too, since no run would make progress"
        ) from exc
