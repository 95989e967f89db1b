"""The HTTP plumbing every operation shares and Litestar does not do as the API
documents it: tokens and principals, problems (``application/problem+json``),
the body's time limit and JSON rules, open streams per token, and run ids
that hold a ``/`` (``RawApiPaths``).

``_routes`` builds the route handlers that use these; Litestar routes,
decodes and validates the typed bodies and query strings.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from datetime import UTC, datetime
from http import HTTPStatus
from typing import Any, Final
from urllib.parse import unquote

import anyio
import attrs
import msgspec
from litestar import Litestar, Request, Response
from litestar.exceptions.http_exceptions import RequestEntityTooLarge
from litestar.response.base import ASGIResponse

import flowcore

from ._auth import Principal, Tokens
from ._auth import _digest as token_digest
from ._types import Problem

__all__ = [
    "COOKIE",
    "DEFAULT_BODY_LIMIT",
    "DEFAULT_BODY_TIMEOUT_S",
    "DEFAULT_MAX_STREAMS",
    "RawApiPaths",
    "PROBLEM_TYPE",
    "ApiError",
    "BodyRules",
    "Context",
    "Encoded",
    "Held",
    "Limits",
    "json_response",
    "problem_response",
    "same_origin",
]

COOKIE: Final = "flowcore_token"
PROBLEM_TYPE: Final = "application/problem+json"

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

    def __init__(self, status: int, code: str, detail: str, /, **extra: Any) -> None:
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail
        self.extra = extra


def problem_response(error: ApiError, instance: str | None = None) -> Response[Problem]:
    problem = Problem(
        type=f"/problems/{error.code}",
        title=HTTPStatus(error.status).phrase,
        status=error.status,
        detail=error.detail[:2000],
        instance=instance,
        **error.extra,
    )
    headers = {"WWW-Authenticate": 'Bearer realm="flowcore"'} if error.status == 401 else {}
    if error.status == 408:
        # The rest of the body may still come: the connection cannot be reused.
        headers["Connection"] = "close"
    return Encoded(msgspec.json.encode(problem), error.status, PROBLEM_TYPE, headers)


def json_response(
    value: Any, status: int = 200, headers: dict[str, str] | None = None
) -> Response[Any]:
    """``value`` as JSON; its instants to the millisecond (``…T12:00:00.250Z``), as the
    hosts keep them, where msgspec would write six fractional digits."""
    data = _millisecond_instants(msgspec.to_builtins(value, builtin_types=(datetime,)))
    return Encoded(msgspec.json.encode(data), status, "application/json", headers)


def _millisecond_instants(value: Any) -> Any:
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            value = value.astimezone(UTC)
        text = value.replace(tzinfo=None).isoformat(timespec="milliseconds")
        return text + ("Z" if value.tzinfo is not None else "")
    if isinstance(value, dict):
        return {k: _millisecond_instants(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_millisecond_instants(v) for v in value]
    return value


class Encoded(Response[Any]):
    """A reply encoded with msgspec once, sent as it is. Litestar's ``Response``
    merges the handler's headers, cookies and encoders again for each reply,
    which costs more than the reply of a small operation."""

    def __init__(
        self, body: bytes, status: int, media_type: str, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(body, status_code=status, media_type=media_type, headers=headers)

    def to_asgi_response(self, *args: Any, **kwargs: Any) -> ASGIResponse:
        return ASGIResponse(
            body=self.content,
            status_code=self.status_code,
            media_type=self.media_type,
            headers=self.headers,
        )


@attrs.frozen
class Context:
    """What a handler gets: the request, who made it, and its typed body and query."""

    request: Request[Any, Any, Any]
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


def same_origin(request: Request[Any, Any, Any]) -> bool:
    """Whether a browser's request comes from this server's own pages (its Origin)."""
    origin = request.headers.get("origin")
    host = request.headers.get("host")
    return origin is not None and host is not None and origin.split("://", 1)[-1] == host


def principal_of(request: Request[Any, Any, Any], tokens: Tokens) -> tuple[Principal, bytes]:
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
    digest = token_digest(token)
    found = tokens.by_digest.get(digest)
    if found is None:
        raise ApiError(401, "unauthorized", "the token is not one this server accepts")
    return found, digest


class BodyRules(Request[Any, Any, Any]):
    """Litestar's request, reading a body as the API documents it: whole within
    ``Limits.body_timeout_s`` (408), no larger than ``Limits.body`` (413, which
    Litestar counts), ``application/json`` (415), and JSON by flowcore's rules
    (``flowcore.decode_json_text``: no key twice, no integer beyond 64 bits...)."""

    def _limits(self) -> Limits:
        limits: Limits = self.app.state["limits"]
        return limits

    async def stream(self) -> AsyncGenerator[bytes, None]:
        async for chunk in super().stream():
            self.arrived = getattr(self, "arrived", 0) + len(chunk)
            yield chunk

    async def body(self) -> bytes:
        limits = self._limits()
        try:
            with anyio.fail_after(limits.body_timeout_s):
                return await super().body()
        except RequestEntityTooLarge:
            length = self.headers.get("content-length", "")
            if length.isdigit() and int(length) > limits.body:
                raise ApiError(
                    413,
                    "too-large",
                    f"the request body is {int(length):,} bytes, over the limit of {limits.body:,}",
                ) from None
            raise ApiError(
                413, "too-large", f"the request body is over the limit of {limits.body:,} bytes"
            ) from None
        except TimeoutError:
            raise ApiError(
                408,
                "body-timeout",
                f"the request body did not arrive within {limits.body_timeout_s:g} s"
                f" ({getattr(self, 'arrived', 0):,} bytes came); send it at once",
            ) from None

    async def json(self) -> Any:
        # Media types are case-insensitive (RFC 9110 §8.3.1): APPLICATION/JSON is JSON.
        media_type = self.headers.get("content-type")
        if media_type is not None and media_type.split(";")[0].strip().lower() not in (
            "application/json",
            "",
        ):
            raise ApiError(415, "unsupported-media-type", "send the body as application/json")
        data = await self.body()
        if not data.strip():
            return {}
        try:
            return flowcore.decode_json_text(data, "the body")
        except flowcore.JsonTextError as exc:
            raise ApiError(422, "invalid-json", str(exc)) from None


class Held(Response[Any]):
    """A stream's response that gives back its slot (``Limits.take_stream``) once
    it has been sent, or its client has gone, whatever ended it."""

    def __init__(self, inner: Response[Any], give_back: Callable[[], None]) -> None:
        super().__init__(None, status_code=inner.status_code)
        self.inner = inner
        self.give_back = give_back

    def to_asgi_response(self, *args: Any, **kwargs: Any) -> ASGIResponse:
        try:
            inner = self.inner.to_asgi_response(*args, **kwargs)
        except BaseException:
            self.give_back()
            raise
        give_back = self.give_back

        class Sent(ASGIResponse):
            def __init__(self) -> None:  # the inner response is the one sent
                pass

            async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
                try:
                    await inner(scope, receive, send)
                finally:
                    give_back()

        return Sent()


class RawApiPaths(Litestar):
    """A Litestar app that routes ``/api/`` requests on the path as sent, still
    percent-encoded.

    A run id may hold ``/`` (a child run is named by its parent's key,
    ``r-1/review#1``): sent as ``%2F`` it stays inside its segment, so
    ``/api/runs/a%2Fevents`` is the run ``a/events`` and never the events of
    ``a``. ``Context.param`` decodes the segment.
    """

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            raw = scope.get("raw_path")
            if raw is not None:
                path = raw.split(b"?", 1)[0].decode("latin-1")
                if path.startswith("/api/"):
                    scope = {**scope, "path": path}
        await super().__call__(scope, receive, send)
