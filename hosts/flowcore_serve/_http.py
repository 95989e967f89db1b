"""The HTTP plumbing every operation shares: the operation table, problems,
authentication, reading bodies and query strings into their types.

An ``Operation`` names its method, path, access, body type, query type and
reply type; ``endpoint`` wraps its handler so that every request goes through
the same steps (authenticate, check access, read and type the body or query,
call, encode), and ``_openapi`` documents the same table.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any, Final, TypeVar
from urllib.parse import unquote

import anyio
import attrs
import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

import flowcore

from ._auth import Principal, Tokens
from ._auth import _digest as token_digest
from ._types import Access, Problem

__all__ = [
    "COOKIE",
    "DEFAULT_BODY_LIMIT",
    "DEFAULT_BODY_TIMEOUT_S",
    "DEFAULT_MAX_STREAMS",
    "RawApiPaths",
    "PROBLEM_TYPE",
    "ApiError",
    "Context",
    "Limits",
    "Operation",
    "endpoint",
    "json_response",
    "problem_response",
    "same_origin",
]

T = TypeVar("T")

COOKIE: Final = "flowcore_token"
PROBLEM_TYPE: Final = "application/problem+json"
_TITLES: Final = {
    status: HTTPStatus(status).phrase
    for status in (400, 401, 403, 404, 408, 409, 413, 415, 422, 429, 500)
}
_RANK: Final[dict[Access, int]] = {"read": 0, "write": 1, "admin": 2}

# 1 MiB: a run's input, an answer or a payload fits well under it.
DEFAULT_BODY_LIMIT: Final = 1 << 20
# A client on a slow link sends a body of a MiB well within this; a stalled one
# gives up its connection instead of holding it for ever.
DEFAULT_BODY_TIMEOUT_S: Final = 30.0
# Event streams (follow, Server-Sent Events) one token may hold open at once:
# a few browser tabs and a few programs following runs; each open stream costs
# the server's one loop a wake-up per commit.
DEFAULT_MAX_STREAMS: Final = 32


@attrs.define
class Limits:
    """What one request may take of the server: its body's size and the time to
    send it, and the event streams one token may hold open at once."""

    body: int = DEFAULT_BODY_LIMIT
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S
    streams: int = DEFAULT_MAX_STREAMS
    open: dict[bytes, int] = attrs.field(factory=dict)  # a token's digest -> its open streams

    def take_stream(self, token: bytes) -> Callable[[], None]:
        """Count one more open stream of the token with digest ``token`` (429 over
        the limit); returns what gives it back, to call when the stream ends."""
        held = self.open.get(token, 0)
        if held >= self.streams:
            raise ApiError(
                429,
                "too-many-streams",
                f"this token holds {held} open event streams, the most it may (the server's"
                " stream limit): close one before opening another",
            )
        self.open[token] = held + 1
        given_back = False

        def give_back() -> None:
            nonlocal given_back
            if given_back:
                return
            given_back = True
            left = self.open[token] - 1
            if left:
                self.open[token] = left
            else:
                del self.open[token]

        return give_back


class ApiError(Exception):
    """A request refused: becomes an ``application/problem+json`` reply."""

    def __init__(self, status: int, code: str, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail
        self.extra = extra


def problem_response(error: ApiError, instance: str | None = None) -> Response:
    problem = Problem(
        type=f"/problems/{error.code}",
        title=HTTPStatus(error.status).phrase,
        status=error.status,
        detail=error.detail[:2000],
        instance=instance,
        **error.extra,
    )
    headers = {"WWW-Authenticate": 'Bearer realm="flowcore"'} if error.status == 401 else None
    return Response(
        msgspec.json.encode(problem), error.status, headers=headers, media_type=PROBLEM_TYPE
    )


def json_response(value: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(msgspec.json.encode(value), status, headers, media_type="application/json")


@attrs.frozen
class Context:
    """What a handler gets: the request, who made it, and its typed body and query."""

    request: Request
    principal: Principal
    body: Any
    query: Any

    def param(self, name: str) -> str:
        """A path parameter, percent-decoded (the API routes on the raw path)."""
        value: str = self.request.path_params[name]
        try:
            return unquote(value, errors="strict")
        except UnicodeDecodeError:
            raise ApiError(422, "invalid-request", f"{name}: not UTF-8 once decoded") from None


Handler = Callable[[Context], Awaitable[Response]]


@attrs.frozen
class Operation:
    method: str
    path: str  # Starlette's form: /api/runs/{run_id}
    handler: Handler
    summary: str
    access: Access = "read"
    body: type | None = None
    query: type | None = None
    reply: type | None = None  # None: no JSON body (streams document themselves)
    status: int = 200
    errors: tuple[int, ...] = ()
    media_type: str = "application/json"
    operation_id: str = ""
    stream: bool = False  # a long response: counts against the token's open streams


def same_origin(request: Request) -> bool:
    """Whether a browser's request comes from this server's own pages (its Origin)."""
    origin = request.headers.get("origin")
    host = request.headers.get("host")
    return origin is not None and host is not None and origin.split("://", 1)[-1] == host


def principal_of(request: Request, tokens: Tokens) -> tuple[Principal, bytes]:
    """The principal of the request's token, and the token's digest."""
    header = request.headers.get("authorization")
    token: str | None = None
    if header is not None:
        scheme, _, value = header.partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            raise ApiError(401, "unauthorized", "the Authorization header must be 'Bearer TOKEN'")
        token = value.strip()
    else:
        token = request.cookies.get(COOKIE)
        if token is not None and request.method not in ("GET", "HEAD"):
            # A cookie is sent by the browser on its own: an unsafe request that
            # relies on it must come from this server's own pages.
            if not same_origin(request):
                raise ApiError(
                    403,
                    "cross-origin",
                    "a cookie-authenticated change must come from this server's pages",
                )
    if not token:
        raise ApiError(401, "unauthorized", "no token: send 'Authorization: Bearer TOKEN'")
    found = tokens.lookup(token)
    if found is None:
        raise ApiError(401, "unauthorized", "the token is not one this server accepts")
    return found, token_digest(token)


async def read_body(request: Request, limit: int, timeout_s: float) -> bytes:
    """The body, whole: 413 over ``limit`` bytes, 408 when it has not all
    arrived ``timeout_s`` seconds after the handler started reading it."""
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise ApiError(
            413,
            "too-large",
            f"the request body is {int(length):,} bytes, over the limit of {limit:,}",
        )
    chunks: list[bytes] = []
    size = 0
    try:
        with anyio.fail_after(timeout_s):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise ApiError(
                        413, "too-large", f"the request body is over the limit of {limit:,} bytes"
                    )
                chunks.append(chunk)
    except TimeoutError:
        raise ApiError(
            408,
            "body-timeout",
            f"the request body did not arrive within {timeout_s:g} s"
            f" ({size:,} bytes came); send it at once",
        ) from None
    return b"".join(chunks)


def typed(value: Any, kind: type[T], where: str, strict: bool = True) -> T:
    try:
        return msgspec.convert(value, kind, strict=strict)
    except msgspec.ValidationError as exc:
        raise ApiError(422, "invalid-request", f"{where}: {exc}") from None


def _body(data: bytes, kind: type[T], content_type: str | None) -> T:
    # Media types are case-insensitive (RFC 9110 §8.3.1): APPLICATION/JSON is JSON.
    if content_type is not None and content_type.split(";")[0].strip().lower() not in (
        "application/json",
        "",
    ):
        raise ApiError(415, "unsupported-media-type", "send the body as application/json")
    if not data.strip():
        return typed({}, kind, "the body")
    try:
        value = flowcore.decode_json_text(data, "the body")
    except flowcore.JsonTextError as exc:
        raise ApiError(422, "invalid-json", str(exc)) from None
    return typed(value, kind, "the body")


def _query(request: Request, kind: type[T]) -> T:
    raw: dict[str, Any] = {}
    for name, value in request.query_params.multi_items():
        if name == "where":  # the one parameter that repeats: each a metadata filter
            raw.setdefault(name, []).append(value)
            continue
        if name in raw:
            raise ApiError(422, "invalid-request", f"query parameter {name!r} is given twice")
        raw[name] = value
    # Not strict: a query string is text, so "20" may be the integer 20.
    return typed(raw, kind, "the query string", strict=False)


class _Held(Response):
    """A stream's response that gives back its slot (``Limits.take_stream``) once
    it has been sent, or its client has gone, whatever ended it."""

    def __init__(self, inner: Response, give_back: Callable[[], None]) -> None:
        self.inner = inner
        self.give_back = give_back
        self.status_code = inner.status_code
        self.background = None
        self.raw_headers = inner.raw_headers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self.inner(scope, receive, send)
        finally:
            self.give_back()


def endpoint(
    op: Operation, tokens: Tokens, limits: Limits
) -> Callable[[Request], Awaitable[Response]]:
    async def handle(request: Request) -> Response:
        try:
            principal, token = principal_of(request, tokens)
            if _RANK[principal.access] < _RANK[op.access]:
                raise ApiError(
                    403,
                    "forbidden",
                    f"this needs {op.access} access; the token of {principal.name!r}"
                    f" has {principal.access}",
                )
            body: Any = None
            if op.body is not None:
                data = await read_body(request, limits.body, limits.body_timeout_s)
                body = _body(data, op.body, request.headers.get("content-type"))
            query = _query(request, op.query) if op.query is not None else None
            if op.query is None and request.query_params:
                raise ApiError(422, "invalid-request", "this operation takes no query parameters")
            if not op.stream:
                return await op.handler(Context(request, principal, body, query))
            give_back = limits.take_stream(token)
            try:
                response = await op.handler(Context(request, principal, body, query))
            except BaseException:
                give_back()
                raise
            return _Held(response, give_back)
        except ApiError as exc:
            response = problem_response(exc, request.url.path)
            if exc.status == 408:
                # The rest of the body may still come: the connection cannot be reused.
                response.headers["Connection"] = "close"
            return response

    handle.__name__ = op.operation_id or op.handler.__name__
    return handle


class RawApiPaths:
    """Route ``/api/`` requests on the path as sent, still percent-encoded.

    A run id may hold ``/`` (a child run is named by its parent's key,
    ``r-1/review#1``): sent as ``%2F`` it stays inside its segment, so
    ``/api/runs/a%2Fevents`` is the run ``a/events`` and never the events of
    ``a``. ``Context.param`` decodes the segment.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            raw = scope.get("raw_path")
            if raw is not None:
                path = raw.split(b"?", 1)[0].decode("latin-1")
                if path.startswith("/api/"):
                    scope = {**scope, "path": path}
        await self.app(scope, receive, send)
