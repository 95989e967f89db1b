"""The ASGI app of ``flowcore serve``: the API, ``/openapi.json`` and the web view."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from flowcore_local import LocalHost

from ._api import Api
from ._auth import Tokens
from ._flows import FlowFolder
from ._http import (
    DEFAULT_BODY_LIMIT,
    DEFAULT_BODY_TIMEOUT_S,
    DEFAULT_MAX_STREAMS,
    ApiError,
    Limits,
    RawApiPaths,
    endpoint,
    json_response,
    problem_response,
)
from ._openapi import openapi
from ._web import web_routes

__all__ = ["DEFAULT_BODY_LIMIT", "DEFAULT_BODY_TIMEOUT_S", "DEFAULT_MAX_STREAMS", "create_app"]

log = logging.getLogger("flowcore.serve")


def _version() -> str:
    try:
        return version("flowcore")
    except PackageNotFoundError:
        return "0"


Endpoint = Callable[[Request], Awaitable[Response]]


def _by_method(methods: dict[str, Endpoint]) -> Endpoint:
    async def dispatch(request: Request) -> Response:
        # Starlette answers a method the route does not list (405) before this.
        return await methods["GET" if request.method == "HEAD" else request.method](request)

    return dispatch


def create_app(
    host: LocalHost,
    tokens: Tokens,
    flows: str | Path | None = None,
    body_limit: int = DEFAULT_BODY_LIMIT,
    body_timeout: float = DEFAULT_BODY_TIMEOUT_S,
    max_streams: int = DEFAULT_MAX_STREAMS,
    *,
    closing: asyncio.Event | None = None,
) -> Starlette:
    """The app on an open ``host``: every operation of ``Api``, the OpenAPI
    document and the web view, each request authenticated with ``tokens``.

    ``body_limit``: the largest request body, in bytes (413 above it);
    ``body_timeout``: the seconds a request body may take to arrive (408 after);
    ``max_streams``: the event streams one token may hold open at once (429 above).
    ``closing``: once set (the server shuts down), the open NDJSON follows end
    (Server-Sent Events end on uvicorn's shutdown by themselves).
    """
    if body_limit < 1 or body_timeout <= 0 or max_streams < 1:
        raise ValueError("body_limit and max_streams must be at least 1, body_timeout more than 0")
    limits = Limits(body_limit, body_timeout, max_streams)
    api = Api(host, FlowFolder(None if flows is None else Path(flows)), closing or asyncio.Event())
    operations = api.operations()
    document = openapi(operations, _version())

    async def openapi_json(request: Request) -> Response:
        return json_response(document)

    # One route per path, whatever its methods, so that a 405 lists them all.
    by_path: dict[str, dict[str, Endpoint]] = {}
    for op in operations:
        by_path.setdefault(op.path, {})[op.method] = endpoint(op, tokens, limits)
    routes: list[BaseRoute] = [
        Route(path, _by_method(methods), methods=list(methods)) for path, methods in by_path.items()
    ]
    routes.append(Route("/openapi.json", openapi_json, methods=["GET"]))
    routes.extend(web_routes(api, tokens, body_timeout))

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        code = {404: "not-found", 405: "method-not-allowed"}.get(exc.status_code, "http-error")
        error = ApiError(exc.status_code, code, str(exc.detail))
        response = problem_response(error, request.url.path)
        response.headers.update(exc.headers or {})  # 405's Allow
        return response

    async def internal(request: Request, exc: Exception) -> Response:
        log.error("flowcore serve: %s %s failed", request.method, request.url.path, exc_info=exc)
        error = ApiError(
            500, "internal", f"the server failed on this request ({type(exc).__name__})"
        )
        return problem_response(error, request.url.path)

    handlers: dict[Any, Any] = {HTTPException: http_error, Exception: internal}
    return Starlette(
        routes=routes,
        exception_handlers=handlers,
        middleware=[Middleware(RawApiPaths)],
    )
