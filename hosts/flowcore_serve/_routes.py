"""Litestar route handlers built from a table of operation declarations.

An ``Operation`` declares everything the HTTP layer needs of one operation;
``route_handlers`` turns each into one Litestar handler, whose signature is
made from the declared types so that Litestar routes the request, decodes and
validates its body and query string, and documents it in ``/openapi.json``.
A declaration needs:

- ``method`` and ``path`` (``/api/runs/{run_id}``: each ``{name}`` a path
  segment, handed to the handler still percent-encoded, see ``Context.param``);
- ``handler``: ``async (Context) -> Response``, given the principal, the path
  parameters, the typed body and query and the request (its headers);
- ``summary`` and ``operation_id`` (the OpenAPI document's);
- ``access``: ``read``, ``write`` or ``admin``, what the token must have;
- ``body`` and ``query``: msgspec Structs (or None: the operation takes none);
  the query's fields are the query parameters, named as on the wire;
- ``reply``: the type of the JSON reply (None: no JSON body, e.g. a stream);
- ``status``: the status of a success, ``also``: other statuses of a success
  (the same reply); ``errors``: the other statuses it gives (the refusals
  every operation of its shape gives are added);
- ``media_type`` of a success, and ``stream``: a long response, counted
  against the token's open streams (429 over ``Limits.streams``).

It must never hold the operations' own logic: a handler gets its inputs
checked and typed, and answers; what a token may do is checked before.
"""

from __future__ import annotations

import inspect
import operator
import re
from collections.abc import Awaitable, Callable, Sequence
from http import HTTPStatus
from typing import Annotated, Any, Final, Union, get_args, get_origin

import attrs
import msgspec
from litestar import HttpMethod, Request, Response
from litestar.handlers import HTTPRouteHandler
from litestar.openapi.datastructures import ResponseSpec
from litestar.openapi.plugins import JsonRenderPlugin
from litestar.params import JSONBody, QueryParameter

from ._auth import Tokens
from ._http import ApiError, Context, Held, Limits, principal_of
from ._types import Access, Problem

__all__ = ["PROBLEM_TITLES", "Document", "Operation", "finish", "implied_errors", "route_handlers"]

Handler = Callable[[Context], Awaitable[Response[Any]]]

_RANK: Final[dict[Access, int]] = {"read": 0, "write": 1, "admin": 2}
PROBLEM_TITLES: Final = {
    status: HTTPStatus(status).phrase
    for status in (400, 401, 403, 404, 405, 408, 409, 413, 415, 422, 429, 500, 501)
}
_PRINCIPAL: Final = "flowcore.principal"  # the request's principal and token, in its state
# The names Litestar gives a handler's own arguments: no query parameter may take one.
_RESERVED: Final = frozenset(
    {"request", "data", "state", "headers", "cookies", "query", "scope", "body", "socket"}
)


@attrs.frozen
class Operation:
    method: str
    path: str  # /api/runs/{run_id}
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
    also: tuple[int, ...] = ()  # other statuses of a success, with the same reply (202)


def implied_errors(op: Operation) -> set[int]:
    """The refusals every operation of its shape can give, whatever its handler does."""
    found: set[int] = {401}
    if op.access != "read":
        found.add(403)  # a token with less access
    if op.query is not None or "{" in op.path:
        found.add(422)  # a query parameter, or a path segment, that is not valid
    if op.body is not None:
        found |= {408, 413, 415, 422}
    if op.stream:
        found.add(429)  # one open stream too many for the token
    return found


# --- query parameters ------------------------------------------------------------------

_META_BOUNDS: Final = ("ge", "gt", "le", "lt", "min_length", "max_length", "pattern")


def _unwrap(kind: Any) -> tuple[Any, dict[str, Any]]:
    """``kind`` without its ``Annotated`` msgspec bounds, and those bounds (for
    Litestar's ``Parameter``, which is where it reads a parameter's bounds)."""
    bounds: dict[str, Any] = {}
    if get_origin(kind) is Annotated:
        base, *extras = get_args(kind)
        for extra in extras:
            if isinstance(extra, msgspec.Meta):
                bounds |= {
                    k: getattr(extra, k) for k in _META_BOUNDS if getattr(extra, k) is not None
                }
        return base, bounds
    if get_origin(kind) in (Union, type(int | None)):
        parts = []
        for part in get_args(kind):
            base, found = _unwrap(part)
            parts.append(base)
            bounds |= found
        return Union[tuple(parts)], bounds  # noqa: UP007 -- built at run time
    return kind, bounds


def _query_parameters(kind: type) -> list[tuple[msgspec.structs.FieldInfo, inspect.Parameter]]:
    params = []
    for field in msgspec.structs.fields(kind):
        name = field.encode_name
        if not name.isidentifier() or name in _RESERVED:
            raise ValueError(f"{kind.__name__}.{field.name}: {name!r} cannot be a query parameter")
        base, bounds = _unwrap(field.type)
        # A default that is not a constant (a list) is the Struct's to make: the
        # parameter defaults to None, and None leaves the field to the Struct.
        default: Any = field.default
        if default is msgspec.NODEFAULT:
            base, default = operator.or_(base, None), None
        # Built at run time from the declaration: a value, not a static type.
        bound = QueryParameter(name=name, required=False, **bounds)
        annotation: Any = Annotated[base, bound]
        params.append(
            (
                field,
                inspect.Parameter(
                    name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation, default=default
                ),
            )
        )
    return params


# --- the handlers ----------------------------------------------------------------------


def _checks(
    tokens: Tokens, op: Operation, names: frozenset[str]
) -> Callable[[Request[Any, Any, Any]], Awaitable[None]]:
    """Authenticate, check the access, and the names of the query parameters: each
    a refusal before anything of the request is read. (A hook run before the
    handler's inputs are read, not a Litestar guard: a guard is given a copy of
    the route handler at each request, which costs more than the checks.)"""

    async def check(request: Request[Any, Any, Any]) -> None:
        principal, token = principal_of(request, tokens)
        if _RANK[principal.access] < _RANK[op.access]:
            raise ApiError(
                403,
                "forbidden",
                f"this needs {op.access} access; the token of {principal.name!r}"
                f" has {principal.access}",
            )
        if request.scope.get("query_string"):
            seen: set[str] = set()
            for name, _value in request.query_params.multi_items():
                if op.query is None:
                    raise ApiError(
                        422, "invalid-request", "this operation takes no query parameters"
                    )
                if name not in names:
                    raise ApiError(422, "invalid-request", f"no query parameter {name[:100]!r}")
                if name in seen and name != "where":  # where: each a metadata filter
                    raise ApiError(
                        422, "invalid-request", f"query parameter {name!r} is given twice"
                    )
                seen.add(name)
        state: dict[str, Any] = request.scope.setdefault("state", {})
        state[_PRINCIPAL] = principal, token

    return check


def _litestar_path(path: str) -> str:
    return re.sub(r"{(\w+)}", r"{\1:str}", path)


def _responses(op: Operation) -> dict[int, ResponseSpec]:
    return {
        status: ResponseSpec(
            data_container=Problem,
            description=PROBLEM_TITLES[status],
            media_type="application/problem+json",
            generate_examples=False,
        )
        for status in sorted(set(op.errors) | implied_errors(op))
    }


async def _no_body(request: Request[Any, Any, Any], kind: type) -> Any:
    """The body of a request that sent none: every field its default, or 422
    naming the first field that has none. A body of ``null`` is not an object
    (but for a body that is any JSON, where it is null, as no body is)."""
    if kind is Any:
        return None
    if await request.body():
        raise ApiError(422, "invalid-request", "the body: Expected `object`, got `null`")
    try:
        return msgspec.convert({}, kind)
    except msgspec.ValidationError as exc:
        raise ApiError(422, "invalid-request", f"the body: {exc}") from None


def _handler_for(op: Operation, limits: Limits) -> Callable[..., Awaitable[Response[Any]]]:
    query = _query_parameters(op.query) if op.query is not None else []

    async def handle(request: Request[Any, Any, Any], **values: Any) -> Response[Any]:
        body = values.get("data")
        if body is None and op.body is not None:
            body = await _no_body(request, op.body)
        typed_query = None
        if op.query is not None:
            given = {f.name: values[p.name] for f, p in query if values[p.name] is not None}
            typed_query = op.query(**given)
        principal, token = request.scope["state"][_PRINCIPAL]
        ctx = Context(request, principal, body, typed_query)
        if not op.stream:
            return await op.handler(ctx)
        give_back = limits.take_stream(token)
        try:
            response = await op.handler(ctx)
        except BaseException:
            give_back()
            raise
        return Held(response, give_back)

    params = [inspect.Parameter("request", inspect.Parameter.KEYWORD_ONLY, annotation=Request)]
    if op.body is not None:
        params.append(
            inspect.Parameter(
                "data",
                inspect.Parameter.KEYWORD_ONLY,
                # None: no body was sent (``_no_body``).
                annotation=JSONBody[operator.or_(op.body, None)],  # type: ignore[misc]
                default=None,
            )
        )
    params += [param for _, param in query]
    returns: Any = Response[Any]
    if op.reply is not None:
        returns = Response[op.reply]  # type: ignore[name-defined]
    elif op.status == 204:
        returns = Response[None]
    handle.__signature__ = inspect.Signature(params, return_annotation=returns)  # type: ignore[attr-defined]
    handle.__annotations__ = {p.name: p.annotation for p in params} | {"return": returns}
    handle.__name__ = handle.__qualname__ = op.operation_id or op.handler.__name__
    return handle


def route_handlers(
    operations: Sequence[Operation], tokens: Tokens, limits: Limits
) -> list[HTTPRouteHandler]:
    """One Litestar handler per operation, and, not documented, one for ``HEAD``
    of each ``GET`` and one for ``OPTIONS`` of each path."""
    made: list[HTTPRouteHandler] = []
    for op in operations:
        fn = _handler_for(op, limits)
        names = (
            frozenset(f.encode_name for f in msgspec.structs.fields(op.query))
            if op.query
            else frozenset()
        )
        common: dict[str, Any] = {
            "before_request": _checks(tokens, op, names),
            "request_max_body_size": limits.body,
            "media_type": op.media_type,
            "status_code": op.status,
        }
        made.append(
            HTTPRouteHandler(
                _litestar_path(op.path),
                http_method=HttpMethod(op.method),
                summary=op.summary,
                operation_id=op.operation_id or op.handler.__name__,
                responses=_responses(op),
                security=[{"bearer": []}],
                opt={"access": op.access, "stream": op.stream},
                **common,
            )(fn)
        )
        if op.method == "GET":
            made.append(
                HTTPRouteHandler(
                    _litestar_path(op.path),
                    http_method="HEAD",
                    include_in_schema=False,
                    name=f"{fn.__name__}-head",
                    **common,
                )(fn)
            )
    methods: dict[str, set[str]] = {}
    for op in operations:
        methods.setdefault(op.path, set()).update(
            {op.method, "HEAD"} if op.method == "GET" else {op.method}
        )
    # First, so that Litestar makes no OPTIONS handler of its own for the path.
    return [_options(path, sorted(allowed)) for path, allowed in methods.items()] + made


def _options(path: str, allowed: list[str]) -> HTTPRouteHandler:
    """``OPTIONS``: the methods of the path's operations, as a 405 lists them.
    (Litestar makes one by itself, from the first handler of a path only.)"""

    async def options() -> Response[None]:
        return Response(None, status_code=204, headers={"Allow": ", ".join(allowed)})

    return HTTPRouteHandler(
        _litestar_path(path), http_method=HttpMethod.OPTIONS, include_in_schema=False
    )(options)


# --- the OpenAPI document --------------------------------------------------------------

# One Server-Sent Event of a stream: ``id`` the record's index, ``event`` its
# type, ``data`` its NDJSON envelope ({type, index, runId, at, data}); the
# last event is ``end`` with ``{}``.
_SSE_EVENT: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "pattern": "^[0-9]+$"},
        "event": {"type": "string"},
        "data": {"type": "string", "contentMediaType": "application/json"},
    },
    "required": ["event", "data"],
}
_LAST_EVENT_ID: Final[dict[str, Any]] = {
    "name": "Last-Event-ID",
    "in": "header",
    "required": False,
    "schema": {"type": "string", "pattern": "^[0-9]{1,18}$"},
    "description": "Resume after this event index (sent by EventSource on reconnect).",
}


class Document(JsonRenderPlugin):
    """``/openapi.json``: Litestar's document of the route handlers, with what only
    the declarations know: each operation's ``x-access``, the bodies of replies
    that are not JSON (a stream's events), and resumption of Server-Sent Events."""

    def __init__(self, operations: Sequence[Operation]) -> None:
        super().__init__(path=["/", "/openapi.json"])
        self.operations = operations
        self.finished: bytes | None = None

    def render(self, request: Request[Any, Any, Any], openapi_schema: dict[str, Any]) -> bytes:
        if self.finished is None:
            self.finished = msgspec.json.encode(finish(openapi_schema, self.operations))
        return self.finished


def finish(document: dict[str, Any], operations: Sequence[Operation]) -> dict[str, Any]:
    # The types' schemas are msgspec's own, the ones it decodes by: Litestar's
    # leave out refused unknown fields, docstrings and bounds of 0, and write
    # a 64-bit bound as a float.
    types: list[Any] = [Problem]
    for op in operations:
        types += [t for t in (op.body, op.reply, op.query) if t is not None and t not in types]
    _, own = msgspec.json.schema_components(types, ref_template="#/components/schemas/{name}")
    document.setdefault("components", {}).setdefault("schemas", {}).update(
        {name: schema for name, schema in own.items() if name in document["components"]["schemas"]}
    )
    paths = document.get("paths", {})
    for op in operations:
        item: dict[str, Any] = paths[op.path][op.method.lower()]
        item["x-access"] = op.access
        # Path parameters first, in the order of the path (Litestar's is a set's).
        order = re.findall(r"{(\w+)}", op.path)
        item.get("parameters", []).sort(
            key=lambda p: (p["in"] != "path", order.index(p["name"]) if p["in"] == "path" else 0)
        )
        if op.query is not None:
            fields = own[op.query.__name__]["properties"]
            for param in item.get("parameters", []):
                if param["in"] == "query" and param["name"] in fields:
                    param["schema"] = fields[param["name"]]
        if op.body is Any:  # any JSON value (none: null)
            item["requestBody"] = {
                "required": False,
                "content": {"application/json": {"schema": {}}},
            }
        elif op.body is not None:
            item["requestBody"] = {
                # Not required when every field has a default: no body is the defaults.
                "required": bool(own[op.body.__name__].get("required")),
                "content": {
                    "application/json": {
                        "schema": {"$ref": f"#/components/schemas/{op.body.__name__}"}
                    }
                },
            }
        if 400 not in op.errors:
            # Litestar documents its refusal of a bad value as 400; here it is 422.
            item["responses"].pop("400", None)
        ok = item["responses"][str(op.status)]
        for status in op.also:
            item["responses"][str(status)] = dict(
                ok, description=HTTPStatus(status).phrase + ": " + ok.get("description", "")
            )
        if op.media_type == "text/event-stream":
            ok["content"] = {op.media_type: {"schema": _SSE_EVENT}}
            item.setdefault("parameters", []).append(_LAST_EVENT_ID)
        elif op.reply is None and op.status != 204:
            ok["content"] = {op.media_type: {"schema": {"type": "string"}}}
        elif op.status == 204:
            ok.pop("content", None)
    return document
