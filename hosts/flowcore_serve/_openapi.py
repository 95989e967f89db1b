"""``/openapi.json``: the API's OpenAPI 3.1 document, built from the operation
table and the msgspec types its handlers decode and encode."""

from __future__ import annotations

import re
from typing import Any

import msgspec

from ._http import _TITLES, PROBLEM_TYPE, Operation
from ._types import Problem

__all__ = ["openapi"]

_REF = "#/components/schemas/{name}"


def _parameters(op: Operation) -> list[dict[str, Any]]:
    params: list[dict[str, Any]] = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in re.findall(r"{(\w+)(?::\w+)?}", op.path)
    ]
    if op.query is not None:
        _, components = msgspec.json.schema_components([op.query], ref_template=_REF)
        props = components[op.query.__name__]["properties"]
        required = set(components[op.query.__name__].get("required", ()))
        for name, prop in props.items():
            params.append(
                {"name": name, "in": "query", "required": name in required, "schema": prop}
            )
    if op.path.endswith("/events/stream"):
        params.append(
            {
                "name": "Last-Event-ID",
                "in": "header",
                "required": False,
                "schema": {"type": "string", "pattern": "^[0-9]{1,18}$"},
                "description": "Resume after this event index (sent by EventSource on reconnect).",
            }
        )
    return params


# One Server-Sent Event of a run's stream: ``id`` the record's index, ``event``
# its type, ``data`` its NDJSON envelope ({type, index, runId, at, data});
# the last event is ``end`` with ``{}``.
_SSE_EVENT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "pattern": "^[0-9]+$"},
        "event": {"type": "string"},
        "data": {"type": "string", "contentMediaType": "application/json"},
    },
    "required": ["event", "data"],
}


def _implied(op: Operation) -> set[int]:
    """The refusals every operation of its shape can give, whatever its handler does."""
    found: set[int] = set()
    if op.query is not None or "{" in op.path:
        found.add(422)  # a query parameter, or a path segment, that is not valid
    if op.body is not None:
        found |= {408, 413, 415, 422}
    return found


def openapi(operations: list[Operation], version: str) -> dict[str, Any]:
    types: list[Any] = [Problem]
    for op in operations:
        for kind in (op.body, op.reply):
            if kind is not None and kind not in types:
                types.append(kind)
    schemas, components = msgspec.json.schema_components(types, ref_template=_REF)
    by_type = dict(zip(types, schemas, strict=True))
    paths: dict[str, dict[str, Any]] = {}
    for op in operations:
        item: dict[str, Any] = {
            "operationId": op.operation_id or op.handler.__name__,
            "summary": op.summary,
            "security": [{"bearer": []}],
            "x-access": op.access,
        }
        params = _parameters(op)
        if params:
            item["parameters"] = params
        if op.body is not None:
            required = bool(components[op.body.__name__].get("required"))
            item["requestBody"] = {
                "required": required,  # else an empty body is the defaults
                "content": {"application/json": {"schema": by_type[op.body]}},
            }
        ok: dict[str, Any] = {"description": "OK"}
        if op.reply is not None:
            ok["content"] = {"application/json": {"schema": by_type[op.reply]}}
        elif op.media_type == "text/event-stream":
            ok["content"] = {op.media_type: {"schema": _SSE_EVENT}}
        elif op.status != 204:
            ok["content"] = {op.media_type: {"schema": {"type": "string"}}}
        responses: dict[str, Any] = {str(op.status): ok}
        for status in sorted({401, *op.errors, *_implied(op)}):
            responses[str(status)] = {
                "description": _TITLES[status],
                "content": {PROBLEM_TYPE: {"schema": by_type[Problem]}},
            }
        item["responses"] = responses
        path = re.sub(r"{(\w+):\w+}", r"{\1}", op.path)  # Starlette's convertors
        paths.setdefault(path, {})[op.method.lower()] = item
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "flowcore",
            "version": version,
            "description": "Runs, their event streams, answers, signals and schedules of one "
            "flowcore local-host database (`flowcore serve`).",
        },
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
