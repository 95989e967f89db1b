"""The ASGI app of ``flowcore serve``: the API, ``/openapi.json`` and the web view,
as one Litestar app."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from litestar import Request, Response
from litestar.datastructures import State
from litestar.exceptions import HTTPException, ValidationException
from litestar.openapi import OpenAPIConfig
from litestar.openapi.spec import Components, SecurityScheme
from litestar.types import ControllerRouterHandler

from flowcore_handlers import Host, Registry

from ._api import Api
from ._auth import Tokens
from ._flows import FlowFolder
from ._http import (
    DEFAULT_BODY_LIMIT,
    DEFAULT_BODY_TIMEOUT_S,
    DEFAULT_MAX_STREAMS,
    ApiError,
    BodyRules,
    Limits,
    RawApiPaths,
    problem_response,
)
from ._routes import Document, Operation, route_handlers
from ._web import web_routes

__all__ = [
    "DEFAULT_BODY_LIMIT",
    "DEFAULT_BODY_TIMEOUT_S",
    "DEFAULT_MAX_STREAMS",
    "create_app",
    "litestar_app",
]

log = logging.getLogger("flowcore.serve")

DESCRIPTION = (
    "Runs, their event streams, answers, signals and schedules of one "
    "flowcore local-host database (`flowcore serve`)."
)


def _version() -> str:
    try:
        return version("flowcore")
    except PackageNotFoundError:
        return "0"


def _invalid(request: Request[Any, Any, Any], exc: ValidationException) -> Response[Any]:
    """Litestar's refusal of a body or query string, naming each bad value's place
    (``$.budget.steps``, ``$.start``)."""
    where = "the request"
    found: list[str] = []
    for item in exc.extra if isinstance(exc.extra, list) else []:
        if not isinstance(item, dict):
            continue
        source = item.get("source")
        source = getattr(source, "value", source)  # Litestar's ParamType, or "body"
        where = {"body": "the body", "query": "the query string"}.get(str(source), where)
        key = str(item.get("key", ""))
        at = "$" if key in ("", "data") else f"$.{key}"
        found.append(f"{item.get('message', 'not valid')} - at `{at}`")
    detail = f"{where}: {'; '.join(found) or exc.detail}"
    return problem_response(ApiError(422, "invalid-request", detail), request.url.path)


def _http_error(request: Request[Any, Any, Any], exc: HTTPException) -> Response[Any]:
    status = exc.status_code
    code = {404: "not-found", 405: "method-not-allowed"}.get(status, "http-error")
    response = problem_response(ApiError(status, code, str(exc.detail)), request.url.path)
    for name, value in (exc.headers or {}).items():
        if name.lower() == "allow":
            # Every GET answers HEAD too; OPTIONS is Litestar's own, not an operation.
            allowed = [m for m in value.split(", ") if m != "OPTIONS"]
            value = ", ".join(sorted(set(allowed)))
        response.headers[name] = value
    return response


def _refused(request: Request[Any, Any, Any], exc: ApiError) -> Response[Any]:
    return problem_response(exc, request.url.path)


def _internal(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    log.error("flowcore serve: %s %s failed", request.method, request.url.path, exc_info=exc)
    error = ApiError(500, "internal", f"the server failed on this request ({type(exc).__name__})")
    return problem_response(error, request.url.path)


def create_app(
    host: Host,
    tokens: Tokens,
    flows: str | Path | None = None,
    body_limit: int = DEFAULT_BODY_LIMIT,
    body_timeout: float = DEFAULT_BODY_TIMEOUT_S,
    max_streams: int = DEFAULT_MAX_STREAMS,
    *,
    closing: asyncio.Event | None = None,
    tools_modules: Mapping[str, Registry] | None = None,
) -> RawApiPaths:
    """The app on an open ``host``: every operation of ``Api``, the OpenAPI
    document and the web view, each request authenticated with ``tokens``.

    ``body_limit``: the largest request body, in bytes (413 above it);
    ``body_timeout``: the seconds a request body may take to arrive (408 after);
    ``max_streams``: the event streams one token may hold open at once (429 above).
    ``closing``: once set (the server shuts down), the open event streams end.
    ``tools_modules``: the server's handler modules (name -> handlers), the only
    ones a run starts or resumes with; None where its workers are elsewhere.
    """
    if body_limit < 1 or body_timeout <= 0 or max_streams < 1:
        raise ValueError("body_limit and max_streams must be at least 1, body_timeout more than 0")
    limits = Limits(body_limit, body_timeout, max_streams)
    folder = FlowFolder(None if flows is None else Path(flows))
    api = Api(host, folder, closing or asyncio.Event(), tools_modules)
    operations = api.operations()
    handlers = [*route_handlers(operations, tokens, limits), *web_routes(api, tokens)]
    return litestar_app(handlers, operations, limits, _version())


def litestar_app(
    handlers: Sequence[ControllerRouterHandler],
    operations: Sequence[Operation],
    limits: Limits,
    version: str,
) -> RawApiPaths:
    """The Litestar app of ``handlers`` (``route_handlers(operations, ...)`` and
    any others): every refusal a problem, bodies read by ``BodyRules`` within
    ``limits``, and ``/openapi.json`` documenting ``operations``."""
    openapi = OpenAPIConfig(
        title="flowcore",
        version=version,
        description=DESCRIPTION,
        path="/openapi.json",
        render_plugins=[Document(operations)],
        components=Components(
            security_schemes={"bearer": SecurityScheme(type="http", scheme="bearer")}
        ),
    )
    refusals: dict[Any, Any] = {
        ApiError: _refused,
        ValidationException: _invalid,
        HTTPException: _http_error,
        Exception: _internal,
    }
    return RawApiPaths(
        route_handlers=handlers,
        exception_handlers=refusals,
        request_class=BodyRules,
        openapi_config=openapi,
        state=State({"limits": limits}),
        logging_config=None,
        debug=False,
    )
