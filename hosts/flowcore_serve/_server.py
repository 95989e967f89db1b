"""Running the app: uvicorn and the local host's worker in one process."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from pathlib import Path

import uvicorn

from flowcore_handlers import ToolLimit
from flowcore_local import Durability, LocalHost

from ._app import DEFAULT_BODY_LIMIT, create_app
from ._auth import Tokens

__all__ = ["serve"]


async def serve(
    db: str | Path,
    tokens: Tokens,
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    tools: str | None = None,
    flows: str | Path | None = None,
    body_limit: int = DEFAULT_BODY_LIMIT,
    on_ready: Callable[[str, int], None] | None = None,
    tracing: bool = False,
    durability: Durability = "power-loss",
    tool_limits: Mapping[str, ToolLimit] | None = None,
) -> None:
    """Serve the database ``db`` until SIGINT or SIGTERM; ``on_ready(host, port)``
    is called once the socket listens (``port=0`` picks a free one). ``tool_limits``:
    the worker's limits of tools across runs (``LocalHost``)."""
    async with LocalHost(
        db, tools, tracing=tracing, durability=durability, tool_limits=tool_limits
    ) as local:
        app = create_app(local, tokens, flows, body_limit)
        config = uvicorn.Config(
            app, host=host, port=port, log_level="warning", lifespan="off", access_log=False
        )
        server = uvicorn.Server(config)
        stop = asyncio.Event()
        worker = asyncio.create_task(local.work(stop))

        async def announce() -> None:
            while not server.started:
                if worker.done() or server.should_exit:
                    return
                await asyncio.sleep(0.02)
            if on_ready is not None:
                bound = server.servers[0].sockets[0].getsockname()
                on_ready(bound[0], bound[1])

        announcer = asyncio.create_task(announce())
        try:
            await server.serve()
        finally:
            announcer.cancel()
            stop.set()
            await worker
