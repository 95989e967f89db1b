"""Tools served by MCP servers, for a flowcore tools module.

A tools module names an MCP server, and its tools become call-tool handlers
like any other::

    from flowcore_mcp import StdioServer, mcp_tools

    TOOLS = {
        **mcp_tools(StdioServer(["python", "server.py"]), prefix="files."),
        "local.thing": thing,
    }

``mcp_tools`` lists the server's tools at once, while the module is being
imported: a host loads its registry before a run starts, so a flow calling a
tool the server does not offer is refused at start (``missing_handlers``),
and a server that cannot start or list fails the import with a
``RegistryError`` saying why. Hosts load registries from sync code inside
their event loop, so the listing runs in a short-lived thread with a loop
of its own, on a connection of its own that is closed right after.

Calls: one session per server per event loop (per process, in practice),
started on the first call and started again on the call after it died;
calls run concurrently on it. Each call carries the effect's idempotency key
in the request's ``_meta`` (``flowcore/idempotencyKey``), so a server can
deduplicate. The arguments are checked against the tool's ``inputSchema``
before anything is sent (``invalid-input``, naming the path). How a call
ends maps onto flowcore events:

- a result with ``isError`` fails the effect as ``tool-error``, its text the message
  and its ``structuredContent`` (when present) the error's ``details``;
- any other result is the output: ``structuredContent`` when present, else
  the text of a lone text block, else the content blocks as JSON data;
- a connection lost mid-call (the server crashed, or went away) or no answer
  within ``timeout_s`` raises ``OutcomeUnknown``: the flow's execution class
  decides (``readonly``/``idempotent`` re-issued with the same key, on a new
  session; ``uncertain`` fails with ``outcome-unknown``);
- a server that cannot be started fails the effect as ``mcp-unavailable``
  (retryable: nothing was sent); a JSON-RPC error answer as ``mcp-error``.

This module is a host-side extra (``pip install flowcore[mcp]``); the core
never imports it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Generic, TypeVar, cast

import anyio
import jsonschema
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from mcp_types import (
    CONNECTION_CLOSED,
    REQUEST_TIMEOUT,
    CallToolResult,
    RequestParamsMeta,
    TextContent,
    Tool,
)

from flowcore import CallTool
from flowcore_handlers import DetailsError, HandlerError, OutcomeUnknown, RegistryError, safe_text

__all__ = [
    "IDEMPOTENCY_KEY_META",
    "HttpServer",
    "McpServer",
    "StdioServer",
    "mcp_tools",
]

log = logging.getLogger("flowcore.mcp")

IDEMPOTENCY_KEY_META = "flowcore/idempotencyKey"
"""The ``_meta`` field of a tools/call request that carries the effect's idempotency key."""

_T = TypeVar("_T")


class McpServer:
    """An MCP server whose tools serve call-tool effects (``StdioServer``, ``HttpServer``).

    It keeps one session per event loop; ``aclose`` ends the running loop's
    (a loop that ends cancels it anyway, which stops a stdio server).
    """

    start_timeout_s: float

    def __init__(self, start_timeout_s: float = 30.0) -> None:
        if not isinstance(start_timeout_s, (int, float)) or not start_timeout_s > 0:
            raise ValueError(f"start_timeout_s must be a positive number, not {start_timeout_s!r}")
        self.start_timeout_s = float(start_timeout_s)
        self._guard = threading.Lock()
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Slot] = (
            weakref.WeakKeyDictionary()
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.label})"

    @property
    def label(self) -> str:
        """How messages name this server."""
        raise NotImplementedError

    def _transport(self) -> contextlib.AbstractAsyncContextManager[tuple[Any, Any]]:
        raise NotImplementedError

    async def _session(self) -> _Connection:
        """The running loop's live session, started (again) when there is none."""
        loop = asyncio.get_running_loop()
        with self._guard:
            slot = self._loops.get(loop)
            if slot is None:
                slot = self._loops[loop] = _Slot(asyncio.Lock())
        async with slot.lock:
            conn = slot.conn
            if conn is None or conn.ended:
                if conn is not None:
                    await conn.aclose()  # reap what is left of the dead one
                    log.info("flowcore: MCP server %s ended; starting it again", self.label)
                conn = slot.conn = _Connection(self)
                await conn.start()
            return conn

    async def aclose(self) -> None:
        """End this server's session of the running event loop, if it has one."""
        with self._guard:
            slot = self._loops.pop(asyncio.get_running_loop(), None)
        if slot is not None and slot.conn is not None:
            await slot.conn.aclose()


class StdioServer(McpServer):
    """A server the host runs as a subprocess and talks to over its stdin/stdout.

    ``argv`` is the command and its arguments; ``env`` is added to a small
    inherited environment (the MCP SDK's: PATH, HOME, …); ``cwd`` is where
    it runs. Its stderr is the host's.
    """

    def __init__(
        self,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        *,
        start_timeout_s: float = 30.0,
    ) -> None:
        super().__init__(start_timeout_s)
        if (
            isinstance(argv, (str, bytes))
            or not isinstance(argv, Sequence)
            or not argv
            or not all(isinstance(a, str) for a in argv)
        ):
            raise ValueError(f"StdioServer: argv must be a non-empty list of strings, not {argv!r}")
        if env is not None and not (
            isinstance(env, Mapping)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())
        ):
            raise ValueError(f"StdioServer: env must map strings to strings, not {env!r}")
        self.argv = tuple(argv)
        self.env = dict(env) if env is not None else None
        self.cwd = None if cwd is None else Path(cwd)

    @property
    def label(self) -> str:
        return repr(list(self.argv))

    def _transport(self) -> contextlib.AbstractAsyncContextManager[tuple[Any, Any]]:
        params = StdioServerParameters(
            command=self.argv[0], args=list(self.argv[1:]), env=self.env, cwd=self.cwd
        )
        return stdio_client(params)


class HttpServer(McpServer):
    """A server reached over MCP's streamable HTTP transport at ``url``.

    ``headers`` are sent with every request (e.g. an ``Authorization``).
    """

    def __init__(
        self,
        url: str,
        headers: Mapping[str, str] | None = None,
        *,
        start_timeout_s: float = 30.0,
    ) -> None:
        super().__init__(start_timeout_s)
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError(f"HttpServer: url must be an http:// or https:// URL, not {url!r}")
        if headers is not None and not (
            isinstance(headers, Mapping)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items())
        ):
            raise ValueError("HttpServer: headers must map strings to strings")
        self.url = url
        self.headers = dict(headers) if headers is not None else None

    @property
    def label(self) -> str:
        return self.url

    @contextlib.asynccontextmanager
    async def _transport(self) -> AsyncIterator[tuple[Any, Any]]:
        if not self.headers:
            async with streamable_http_client(self.url) as streams:
                yield streams
            return
        import httpx2  # the MCP SDK's HTTP client

        timeout = httpx2.Timeout(30.0, read=300.0)  # the SDK's own defaults
        async with (
            httpx2.AsyncClient(headers=self.headers, timeout=timeout) as client,
            streamable_http_client(self.url, http_client=client) as streams,
        ):
            yield streams


@dataclass
class _Slot:
    lock: asyncio.Lock
    conn: _Connection | None = None


class _Watched(Generic[_T]):
    """The transport's read stream, telling its owner when it ends.

    The session's dispatcher wakes the calls in flight with "connection
    closed" when this stream ends; the connection is marked ended first, so
    a call that follows always starts a new session rather than being
    refused by the dead one.
    """

    def __init__(self, inner: Any, on_end: Callable[[], None]) -> None:
        self._inner = inner
        self._on_end = on_end

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> _T:
        try:
            item: _T = await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._on_end()
            raise
        return item

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> _Watched[_T]:
        return self

    async def __anext__(self) -> _T:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> _Watched[_T]:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class _Unavailable(Exception):
    """The server could not be started or initialized (nothing was sent to its tools)."""


class _Connection:
    """One session with a server, owned by a task of its own.

    The transport and session are async context managers whose task groups
    must be entered and left by one task: ``_serve`` holds them until the
    connection is closed or the server goes away; calls from any task of
    the loop share the session.
    """

    def __init__(self, server: McpServer) -> None:
        self.server = server
        self.ended = False
        self.session: ClientSession | None = None
        self._quit = asyncio.Event()
        self._ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._task: asyncio.Task[None] | None = None

    def _lost(self) -> None:
        self.ended = True
        self._quit.set()

    async def start(self) -> None:
        self._task = asyncio.create_task(self._serve(), name=f"mcp {self.server.label}")
        try:
            async with asyncio.timeout(self.server.start_timeout_s):
                await asyncio.shield(self._ready)
        except TimeoutError:
            await self.aclose()
            raise _Unavailable(
                f"MCP server {self.server.label} did not answer initialize"
                f" within {self.server.start_timeout_s:g}s"
            ) from None

    async def _serve(self) -> None:
        try:
            async with self.server._transport() as (read, write):
                dispatcher = JSONRPCDispatcher(_Watched(read, self._lost), write)
                async with ClientSession(dispatcher=dispatcher) as session:
                    await session.initialize()
                    self.session = session
                    self._ready.set_result(None)
                    await self._quit.wait()
        except Exception as exc:  # the server's trouble, reported to whoever waits for it
            if not self._ready.done():
                why = f"MCP server {self.server.label} did not start: {_why(exc)}"
                self._ready.set_exception(_Unavailable(why))
            else:
                log.info("flowcore: MCP server %s: %s", self.server.label, _why(exc))
        finally:
            self.ended = True
            if not self._ready.done():
                why = f"MCP server {self.server.label} ended before it was ready"
                self._ready.set_exception(_Unavailable(why))

    async def aclose(self) -> None:
        """End the session (a stdio server is stopped); calls in flight end as outcome unknown."""
        self._lost()
        task = self._task
        if task is not None and not task.done():
            if not self._ready.done():
                task.cancel()  # still starting: nothing to wind down
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._ready.done() and not self._ready.cancelled():
            self._ready.exception()  # retrieved: no "never retrieved" warning

    async def list_tools(self) -> list[Tool]:
        assert self.session is not None
        tools: list[Tool] = []
        cursor: str | None = None
        for _ in range(1000):  # a server whose cursor never ends cannot hang the load
            page = await self.session.list_tools(
                params=None if cursor is None else _page(cursor),
            )
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        return tools


def _page(cursor: str) -> Any:
    from mcp_types import PaginatedRequestParams

    return PaginatedRequestParams(cursor=cursor)


def _why(exc: BaseException) -> str:
    """An exception's text, looking inside the exception groups anyio raises."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, MCPError):
        return safe_text(f"{exc.error.message} (MCP error {exc.error.code})", 500)
    return safe_text(f"{type(exc).__name__}: {exc}", 500)


# --- listing, at load ---------------------------------------------------------------------


def _list_now(server: McpServer, timeout_s: float) -> list[Tool]:
    """The server's tools, listed on a connection of its own in a thread with its own loop."""

    async def listing() -> list[Tool]:
        conn = _Connection(server)
        try:
            await conn.start()
            async with asyncio.timeout(timeout_s):
                return await conn.list_tools()
        finally:
            await conn.aclose()

    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["tools"] = asyncio.run(listing())
        except BaseException as exc:  # handed to the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=work, name="flowcore-mcp-list", daemon=True)
    thread.start()
    # Starting, listing and stopping are each bounded; this is the backstop.
    thread.join(server.start_timeout_s + timeout_s + 30.0)
    if thread.is_alive():
        raise RegistryError(f"MCP server {server.label}: listing its tools did not finish")
    if "error" in box:
        exc = box["error"]
        if isinstance(exc, _Unavailable):
            raise RegistryError(str(exc)) from None
        if isinstance(exc, TimeoutError):
            raise RegistryError(
                f"MCP server {server.label} did not list its tools within {timeout_s:g}s"
            ) from None
        raise RegistryError(f"MCP server {server.label}: cannot list its tools: {_why(exc)}")
    tools: list[Tool] = box["tools"]
    return tools


# --- the handlers -------------------------------------------------------------------------


@dataclass(frozen=True)
class _ToolSpec:
    server: McpServer
    name: str  # the server's name for it
    handler_name: str  # the name flows call it by
    validator: Any  # a jsonschema validator of its inputSchema
    timeout_s: float | None = field(default=None)


def mcp_tools(
    server: McpServer,
    *,
    prefix: str = "",
    only: Iterable[str] | None = None,
    timeout_s: float | None = None,
    list_timeout_s: float = 30.0,
) -> dict[str, Callable[[CallTool], Any]]:
    """Handlers for the tools ``server`` offers, listed now: ``{prefix + name: handler}``.

    ``only`` keeps just those tools (each must exist); ``timeout_s`` bounds
    each call (no answer in time: ``OutcomeUnknown``); ``list_timeout_s``
    bounds the listing. Raises ``RegistryError`` when the server cannot
    start or list, offers none of ``only``, or declares an input schema
    that is not a JSON Schema.
    """
    if not isinstance(server, McpServer):
        raise RegistryError(f"mcp_tools: {server!r} is not a StdioServer or HttpServer")
    if not isinstance(prefix, str):
        raise RegistryError(f"mcp_tools: prefix must be a string, not {prefix!r}")
    if timeout_s is not None and not (isinstance(timeout_s, (int, float)) and timeout_s > 0):
        raise RegistryError(f"mcp_tools: timeout_s must be a positive number, not {timeout_s!r}")
    tools = {tool.name: tool for tool in _list_now(server, list_timeout_s)}
    wanted = list(tools) if only is None else list(only)
    absent = [name for name in wanted if name not in tools]
    if absent:
        offered = ", ".join(sorted(tools)) or "none"
        raise RegistryError(
            f"MCP server {server.label} offers no tool {', '.join(map(repr, absent))}"
            f" (it offers: {offered})"
        )
    handlers: dict[str, Callable[[CallTool], Any]] = {}
    for name in wanted:
        schema = tools[name].input_schema
        try:
            cls = jsonschema.validators.validator_for(schema)
            cls.check_schema(schema)
        except jsonschema.SchemaError as exc:
            raise RegistryError(
                f"MCP server {server.label}: the inputSchema of tool {name!r} is not a JSON"
                f" Schema: {safe_text(exc.message, 300)}"
            ) from None
        spec = _ToolSpec(server, name, prefix + name, cls(schema), timeout_s)
        handlers[prefix + name] = _handler(spec)
    return handlers


def _handler(spec: _ToolSpec) -> Callable[[CallTool], Any]:
    async def call_mcp_tool(effect: CallTool) -> Any:
        return await _call(spec, effect)

    call_mcp_tool.__name__ = call_mcp_tool.__qualname__ = f"mcp:{spec.name}"
    return call_mcp_tool


def _path(parts: Iterable[Any]) -> str:
    out = "$"
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


async def _call(spec: _ToolSpec, effect: CallTool) -> Any:
    arguments = {} if effect.input is None else effect.input
    if not isinstance(arguments, dict):
        raise HandlerError(
            "invalid-input",
            f"the input of MCP tool {spec.handler_name!r} must be an object (its arguments),"
            f" not {type(arguments).__name__}",
        )
    errors = sorted(spec.validator.iter_errors(arguments), key=lambda e: list(e.absolute_path))
    if errors:
        lines = [f"{_path(e.absolute_path)}: {safe_text(e.message, 300)}" for e in errors[:10]]
        more = f" (and {len(errors) - 10} more)" if len(errors) > 10 else ""
        raise HandlerError(
            "invalid-input",
            f"the input of MCP tool {spec.handler_name!r} does not match its inputSchema: "
            + "; ".join(lines)
            + more,
        )
    server = spec.server
    try:
        conn = await server._session()
    except _Unavailable as exc:
        raise HandlerError("mcp-unavailable", str(exc), retryable=True) from None
    session = conn.session
    assert session is not None
    try:
        result = await session.call_tool(
            spec.name,
            arguments,
            read_timeout_seconds=spec.timeout_s,
            meta=cast(RequestParamsMeta, {IDEMPOTENCY_KEY_META: effect.idempotency_key}),
        )
    except MCPError as exc:
        code = exc.error.code
        if code == REQUEST_TIMEOUT:
            raise OutcomeUnknown(
                f"MCP tool {spec.name!r} on {server.label} did not answer within"
                f" {spec.timeout_s:g}s"
            ) from None
        if code == CONNECTION_CLOSED or conn.ended:
            raise OutcomeUnknown(
                f"the connection to MCP server {server.label} was lost during {spec.name!r}"
            ) from None
        raise HandlerError("mcp-error", f"MCP server {server.label}: {_why(exc)}") from None
    except RuntimeError as exc:
        # The session checks a result against the tool's outputSchema: the
        # tool ran, and answered something it does not promise.
        raise HandlerError(
            "invalid-output", f"MCP tool {spec.name!r} on {server.label}: {safe_text(exc, 500)}"
        ) from None
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
        raise OutcomeUnknown(
            f"the connection to MCP server {server.label} failed during {spec.name!r}: {_why(exc)}"
        ) from None
    return _output(spec, result)


def _output(spec: _ToolSpec, result: CallToolResult) -> Any:
    if result.is_error:
        text = "\n".join(b.text for b in result.content if isinstance(b, TextContent))
        text = text or f"MCP tool {spec.name!r} reported an error"
        # Its structuredContent, if any, is what the flow reads as error.details.
        try:
            error = HandlerError("tool-error", text, details=result.structured_content)
        except DetailsError as exc:  # too big to keep: say so in the message
            error = HandlerError("tool-error", f"{text} ({exc})")
        raise error
    if result.structured_content is not None:
        return result.structured_content
    blocks = result.content
    if not blocks:
        return None
    if len(blocks) == 1 and isinstance(blocks[0], TextContent):
        return blocks[0].text
    return [json.loads(b.model_dump_json(by_alias=True, exclude_none=True)) for b in blocks]
