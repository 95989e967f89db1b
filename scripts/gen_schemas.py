"""The JSON Schemas of the wire protocol, the event log and flow specs.

Usage: ``python scripts/gen_schemas.py`` from anywhere writes them to
``specs/schema/``. Effects and events come from ``flowcore``'s wire types,
log records from its log types, the requests and replies of ``flowcore
decide --stdio`` from the types that command decodes and encodes (all msgspec
types), and a flow spec's from the attrs model ``flowcore.parse_flow`` builds
(``scripts/flow_schema.py``); ``tests/decision/test_wire.py`` fails when the committed
copies go stale. Each schema
is a standalone draft 2020-12 document: its ``$defs`` hold every struct it
references, so hosts in other languages can validate against one file.

The schemas describe the protocol; nothing in ``flowcore`` needs them at run
time, so they are made here and not in the package.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import msgspec

ROOT = Path(__file__).resolve().parent.parent
for _path in (ROOT, ROOT / "hosts"):  # run as a plain script, without an installed flowcore
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from flowcore import Effect, Event  # noqa: E402
from flowcore.log.records import TypedRecord  # noqa: E402
from flowcore_cli._decide import (  # noqa: E402
    AdvanceRequest,
    Checked,
    CheckUpdateRequest,
    Decided,
    Failed,
    Queried,
    QueryRequest,
    StartRequest,
)
from scripts.flow_schema import flow_schema  # noqa: E402

__all__ = ["SCHEMA_BASE_URI", "all_schemas", "render_schema", "wire_schemas"]

OUT_DIR = ROOT / "specs" / "schema"


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


def _decide_documents() -> dict[str, dict[str, Any]]:
    """The requests and replies of ``flowcore decide --stdio`` (specs/protocol.md §13).

    A request's ``event`` is checked by ``flowcore.event_from_wire``, not by
    msgspec, so its type there is a plain object; the schema points it at the
    event union instead, whose structs it holds in its ``$defs`` too.
    """
    roots, defs = msgspec.json.schema_components(
        [
            StartRequest | AdvanceRequest | QueryRequest | CheckUpdateRequest,
            Decided,
            Queried,
            Checked,
            Failed,
            Event,
        ],
        ref_template=_REF_TEMPLATE,
    )
    requests, decided, queried, checked, failed, event = roots
    defs["Event"] = event
    defs["AdvanceRequest"]["properties"]["event"] = {"$ref": _REF_TEMPLATE.format(name="Event")}
    docs = {
        "decide-requests": (
            requests,
            "flowcore decide request",
            "One request line of `flowcore decide --stdio` (host -> decide), discriminated "
            "by `op`: start a run, advance one with an event, ask it a query, or check "
            "whether it would take an update.",
        ),
        "decide-replies": (
            {"anyOf": [decided, queried, checked, failed]},
            "flowcore decide reply",
            "One reply line of `flowcore decide --stdio` (decide -> host): a decision "
            "(`ok: true`: the state string, the effects and the updates it ended), a "
            "query's value, an update check's verdict, or a typed error (`ok: false`).",
        ),
    }
    out: dict[str, dict[str, Any]] = {}
    for key, (root, title, description) in docs.items():
        doc = {
            "$schema": _DRAFT,
            "$id": f"{SCHEMA_BASE_URI}{key}.json",
            "title": title,
            "description": description,
            **root,
            "$defs": _reachable(root, defs),
        }
        out[key] = msgspec.json.decode(msgspec.json.encode(doc))
    return out


def _reachable(root: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """The ``$defs`` that ``root`` refers to, directly or through others."""
    found: dict[str, Any] = {}
    todo = [root]
    while todo:
        text = json.dumps(todo.pop())
        for name in re.findall(r'"\$ref": "#/\$defs/([^"]*)"', text):
            if name not in found:
                found[name] = defs[name]
                todo.append(defs[name])
    return dict(sorted(found.items()))


def wire_schemas() -> dict[str, dict[str, Any]]:
    """The JSON Schemas, keyed ``"effects"``, ``"events"``, ``"records"``,
    ``"decide-requests"`` and ``"decide-replies"``.

    Returns fresh dicts on every call; callers may mutate them.
    """
    return {
        **{
            key: _document(key, union, title, description)
            for key, (union, title, description) in _UNIONS.items()
        },
        **_decide_documents(),
    }


def all_schemas() -> dict[str, dict[str, Any]]:
    """Every committed schema: the wire's (``wire_schemas``) and ``"flow"``, a flow
    spec document's. Returns fresh dicts on every call."""
    return {**wire_schemas(), "flow": flow_schema(f"{SCHEMA_BASE_URI}flow.json")}


def render_schema(schema: dict[str, Any]) -> str:
    """The canonical text of a committed schema file: 2-space indent, sorted keys, final newline."""
    return json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main() -> int:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    for name, schema in sorted(all_schemas().items()):
        path = OUT_DIR / f"{name}.json"
        text = render_schema(schema)
        old = path.read_text(encoding="utf-8") if path.exists() else None
        if old == text:
            print(f"unchanged {path.relative_to(ROOT)}")
            continue
        path.write_text(text, encoding="utf-8", newline="\n")
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
