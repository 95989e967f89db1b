"""The HTTP API: the catalogue's operations (``flowcore_ops.CATALOGUE``) as
route declarations, on any open ``Host``.

Each operation's route comes from its declaration: the path names fields of
its input, the query string (``GET``, ``DELETE``) or the JSON body holds the
rest, its reply is its output, and each of its failures becomes a problem with
the failure's status. Nothing here is an operation of its own but the list of
the registry folder's flows, which only the server has. Streams (NDJSON
follow, Server-Sent Events) and exports are written here from the records an
operation hands back.

Every run belongs to the principal that started it (its child runs too); to
another principal it is an unknown run (404, the same answer as for an id no
run has), and an admin may act on every run (``flowcore_ops``).
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from typing import Any, Final
from urllib.parse import quote

import attrs
import msgspec
from litestar import Response
from litestar.response import ServerSentEvent, Stream
from litestar.response.sse import ServerSentEventMessage

import flowcore
from flowcore_handlers import Host, Registry
from flowcore_ops import (
    BY_NAME,
    CATALOGUE,
    FAILURES,
    NDJSON,
    SSE,
    Http,
    Operation,
    OperationError,
    UpdateResultInput,
)
from flowcore_ops import Context as OpContext

from ._flows import FlowFolder
from ._http import ApiError, Context, Encoded, json_response
from ._routes import Operation as Route

__all__ = ["Api", "NDJSON"]

# A comment line this often on a quiet Server-Sent Events stream keeps proxies
# from closing it.
PING_S = 15.0

# The names the bodies and query strings had before they were derived from the
# operations' inputs: kept, as clients and /openapi.json name them so.
_NAMES: Final = {
    "start": "StartBody",
    "signal": "SignalBody",
    "answer": "AnswerBody",
    "cancel": "CancelBody",
    "schedule.pause": "ScheduleChange",
    "schedule.resume": "ScheduleChange",
    "schedule.backfill": "BackfillBody",
    "runs": "RunsQuery",
    "events": "StreamQuery",
    "follow": "StreamQuery",
    "progress": "ProgressQuery",
    "progress-follow": "ProgressQuery",
    "query": "QueryArgs",  # (its GET's query string; its POST's body is the args themselves)
}


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in re.split(r"[.\-_]", name))


_derived: dict[tuple[type, frozenset[str], str], type] = {}


def _part(op: Operation, route: Http) -> type | None:
    """The input without the fields the path names: the body's type (or the query
    string's), a Struct of its own named as ``_NAMES`` says; None when the path
    names every field."""
    named = frozenset(re.findall(r"{(\w+)}", route.path))
    if route.body_field is not None:  # the body is that field's value itself: any JSON
        return Any
    if not named:
        return op.input
    fields = [f for f in msgspec.structs.fields(op.input) if f.name not in named]
    if not fields:
        return None
    kind = "Query" if route.method in ("GET", "DELETE") else "Body"
    name = _NAMES.get(op.name, _camel(op.name) + kind)
    key = (op.input, named, name)
    if key not in _derived:
        made = msgspec.defstruct(
            name,
            [
                (
                    f.name,
                    f.type,
                    msgspec.field(default_factory=f.default_factory)
                    if f.default_factory is not msgspec.NODEFAULT
                    else f.default,
                )
                if f.default is not msgspec.NODEFAULT or f.default_factory is not msgspec.NODEFAULT
                else (f.name, f.type)
                for f in fields
            ],
            kw_only=True,
            forbid_unknown_fields=True,
            rename="camel",
            module=__name__,
        )
        made.__doc__ = op.input.__doc__
        _derived[key] = made
    return _derived[key]


def _reply(op: Operation, route: Http) -> type | None:
    """The JSON reply's type (None: the route answers with no JSON: NDJSON, SSE, 204)."""
    if op.output is None or route.media_type != "application/json":
        return None
    return op.output  # type: ignore[no-any-return]


@attrs.define
class Api:
    host: Host
    flows: FlowFolder
    closing: asyncio.Event = attrs.field(factory=asyncio.Event)  # set: the server shuts down
    # The server's handler modules (name -> handlers), in the order given; None
    # where the runs' workers are elsewhere (Temporal's) and hold their own.
    tools_modules: Mapping[str, Registry] | None = None

    def context(self, ctx: Context) -> OpContext:
        """The operation's context for a request: this host, the token's principal,
        flows from the registry folder, the server's handler modules."""
        folders = () if self.flows.folder is None else (self.flows.folder,)
        return OpContext(
            self.host,
            ctx.principal,
            self.flows.path_of,
            folders,
            self.tools_modules,
            self.flows.flows,
        )

    # --- one route of an operation -------------------------------------------------------

    def handler(self, op: Operation, route: Http) -> Callable[[Context], Any]:
        named = re.findall(r"{(\w+)}", route.path)
        encode = {f.name: f.encode_name for f in msgspec.structs.fields(op.input)}

        async def handle(ctx: Context) -> Response[Any]:
            given: dict[str, Any] = {}
            if route.body_field is not None:
                given[encode[route.body_field]] = ctx.body
            else:
                for part in (ctx.body, ctx.query):
                    if part is not None:
                        given.update(msgspec.to_builtins(part))
            for name in route.json_query:  # JSON text in the query string
                text = given.get(encode[name])
                if isinstance(text, str):
                    try:
                        given[encode[name]] = msgspec.json.decode(text)
                    except msgspec.DecodeError as exc:
                        raise ApiError(
                            422, "invalid-request", f"{encode[name]}: not JSON ({exc})"
                        ) from None
            for name in named:
                given[encode[name]] = ctx.param(name)
            try:
                value = msgspec.convert(given, op.input)
            except msgspec.ValidationError as exc:
                raise ApiError(422, "invalid-request", str(exc)) from None
            if route.stream:
                return await self.stream(op, route, ctx, value)
            if route.running is not None and getattr(value, "wait", False):
                return await self.waited(op, route, ctx, value)
            try:
                out = await op.call(self.context(ctx), value)
            except OperationError as exc:
                raise _problem(exc) from None
            return self.reply(op, route, out)

        handle.__name__ = route.operation_id or op.name.replace(".", "_").replace("-", "_")
        return handle

    def reply(self, op: Operation, route: Http, out: Any) -> Response[Any]:
        if route.status == 204:
            return Response(None, status_code=204)
        if route.media_type == NDJSON:
            data = out if isinstance(out, bytes) else flowcore.encode_records(out)
            return Encoded(data, route.status, NDJSON)
        if route.running is not None and getattr(out, "status", None) == "running":
            return json_response(out, route.running)  # accepted: not ended yet
        headers = None
        if route.status == 201 and getattr(out, "run_id", None) is not None:
            headers = {"Location": "/api/runs/" + quote(out.run_id, safe="")}
        return json_response(out, route.status, headers)

    async def waited(self, op: Operation, route: Http, ctx: Context, value: Any) -> Response[Any]:
        """An update waited for (``update``, ``update-result``, ``update-with-start``):
        when the server shuts down first, the wait ends and the update's outcome now
        is the reply (202 while it runs), so the client knows to fetch it later. The
        update id is made here when the client gave none, to read it then."""
        if getattr(value, "update_id", "") is None:
            value = msgspec.structs.replace(value, update_id=uuid.uuid4().hex)
        context = self.context(ctx)
        call = asyncio.ensure_future(op.call(context, value))
        closing = asyncio.ensure_future(self.closing.wait())
        try:
            await asyncio.wait((call, closing), return_when=asyncio.FIRST_COMPLETED)
        finally:
            closing.cancel()
            if not call.done():
                call.cancel()  # the server shuts down: the wait ends, the update goes on
        try:
            out = await call
        except asyncio.CancelledError:
            if not self.closing.is_set():
                raise  # the request itself was cancelled
            now = UpdateResultInput(run_id=value.run_id, update_id=value.update_id)
            try:
                out = await BY_NAME["update-result"].call(context, now)
            except OperationError:
                raise ApiError(
                    503, "unavailable", "the server is shutting down: send the request again"
                ) from None
        except OperationError as exc:
            raise _problem(exc) from None
        return self.reply(op, route, out)

    # --- the event streams ---------------------------------------------------------------

    async def stream(self, op: Operation, route: Http, ctx: Context, value: Any) -> Response[Any]:
        """NDJSON lines or Server-Sent Events of the records the operation follows,
        until the run settles or the server shuts down. Server-Sent Events resume
        after ``Last-Event-ID``: one event per record, ``id`` its index, ``event``
        its type, ``data`` its NDJSON envelope; the last is ``end``."""
        if route.media_type == SSE:
            last = ctx.request.headers.get("last-event-id")
            if last is not None:
                if not last.isdigit() or len(last) > 18:
                    raise ApiError(422, "invalid-request", "Last-Event-ID: not an event index")
                value = msgspec.structs.replace(value, start=max(value.start, int(last) + 1))
        try:
            records = await op.call(self.context(ctx), value)
        except OperationError as exc:
            raise _problem(exc) from None
        if route.media_type != SSE:

            async def lines() -> AsyncIterator[bytes]:
                async for record in self.follow(records):
                    if record is not None:
                        yield flowcore.encode_record(record)

            return Stream(lines(), media_type=NDJSON)

        async def events() -> AsyncIterator[ServerSentEventMessage]:
            async for record in self.follow(records, PING_S):
                if record is None:
                    yield ServerSentEventMessage(comment="ping")
                    continue
                yield ServerSentEventMessage(
                    id=str(record.index),
                    event=record.type,
                    data=flowcore.encode_record(record).decode().rstrip("\n"),
                )
            if not self.closing.is_set():  # at shutdown it ends without: clients resume
                yield ServerSentEventMessage(event="end", data="{}")

        return ServerSentEvent(events())

    async def follow(
        self, records: AsyncIterator[flowcore.Record], ping_s: float | None = None
    ) -> AsyncIterator[flowcore.Record | None]:
        """``records`` as they come, until they end or the server shuts down
        (``closing``); ``None`` after each ``ping_s`` seconds without one."""
        # Each next record is awaited in a task, raced with the server's
        # shutdown (``closing``), which ends the response at once.
        closing = asyncio.ensure_future(self.closing.wait())
        following: asyncio.Future[flowcore.Record] | None = None
        try:
            while True:
                if following is None:
                    following = asyncio.ensure_future(anext(records))
                await asyncio.wait(
                    (following, closing), timeout=ping_s, return_when=asyncio.FIRST_COMPLETED
                )
                if closing.done():
                    return
                if not following.done():
                    yield None
                    continue
                try:
                    record = following.result()
                except StopAsyncIteration:
                    return
                following = None
                yield record
        finally:
            closing.cancel()
            if following is not None and not following.done():
                following.cancel()  # the records' generator ends in that task
            elif isinstance(records, AsyncGenerator):
                await records.aclose()

    # --- the routes -----------------------------------------------------------------------

    def operations(self) -> list[Route]:
        """One route declaration per HTTP route of each catalogue operation."""
        routes: list[Route] = []
        for op in CATALOGUE:
            for route in op.http:
                part = _part(op, route)
                query = route.method in ("GET", "DELETE")
                routes.append(
                    Route(
                        route.method,
                        route.path,
                        self.handler(op, route),
                        op.summary,
                        access=op.access,
                        body=None if query else part,
                        query=part if query else None,
                        reply=_reply(op, route),
                        status=route.status,
                        errors=tuple(sorted({FAILURES[code].status for code in op.failures})),
                        media_type=route.media_type,
                        operation_id=route.operation_id or op.name,
                        stream=route.stream,
                        also=() if route.running is None else (route.running,),
                    )
                )
        return routes


def _problem(exc: OperationError) -> ApiError:
    """An operation's failure as the problem the API answers with."""
    return ApiError(exc.failure.status, exc.type, exc.detail, **exc.extra)
