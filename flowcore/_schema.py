"""JSON Schemas for the wire protocol and the event log, derived from msgspec types.

Effects and events come from ``_wire``, log records from ``_log``.

``wire_schemas()`` is the single source of the committed files under
``specs/schema/``; ``scripts/gen_schemas.py`` writes them and a test keeps them
from going stale. Each schema is a standalone draft 2020-12 document: its
``$defs`` hold every struct it references, so hosts in other languages can
validate against one file.

This module must never do I/O.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from ._log import TypedRecord
from ._wire import Effect, Event

__all__ = ["SCHEMA_BASE_URI", "render_schema", "wire_schemas"]

SCHEMA_BASE_URI = "https://flowcore.dev/schema/"
_DRAFT = "https://json-schema.org/draft/2020-12/schema"
_REF_TEMPLATE = "#/$defs/{name}"

# key -> (union type, title, description)
_UNIONS: dict[str, tuple[Any, str, str]] = {
    "effects": (
        Effect,
        "flowcore effect",
        "An effect the flowcore interpreter asks its host to perform (core -> host). "
        "A tagged union discriminated by `kind`.",
    ),
    "events": (
        Event,
        "flowcore event",
        "An event a host reports back to the flowcore interpreter (host -> core). "
        "A tagged union discriminated by `kind`.",
    ),
    "records": (
        TypedRecord,
        "flowcore log record",
        "One record of a flowcore event log (specs/log.md): an envelope "
        "{type, index, runId, at, data}, one per NDJSON line or length-framed MessagePack "
        "map, discriminated by `type`. Readers skip record types they do not know and "
        "ignore unknown fields, so that new ones never break old logs.",
    ),
}


def _document(key: str, union: Any, title: str, description: str) -> dict[str, Any]:
    (root,), defs = msgspec.json.schema_components([union], ref_template=_REF_TEMPLATE)
    doc: dict[str, Any] = {
        "$schema": _DRAFT,
        "$id": f"{SCHEMA_BASE_URI}{key}.json",
        "title": title,
        "description": description,
        **root,
        "$defs": defs,
    }
    # msgspec leaves tuple defaults (``report: tuple[...] = ()``) as Python
    # tuples, and ``msgspec.to_builtins`` keeps tuples too; a JSON round trip
    # turns the document into plain JSON types (lists) so it compares equal to
    # the parsed committed file.
    out: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(doc))
    return out


def wire_schemas() -> dict[str, dict[str, Any]]:
    """The JSON Schemas, keyed ``"effects"``, ``"events"`` and ``"records"``.

    Returns fresh dicts on every call; callers may mutate them.
    """
    return {
        key: _document(key, union, title, description)
        for key, (union, title, description) in _UNIONS.items()
    }


def render_schema(schema: dict[str, Any]) -> str:
    """The canonical text of a committed schema file: 2-space indent, sorted keys, final newline."""
    return json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
