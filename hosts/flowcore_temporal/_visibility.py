"""Run metadata in Temporal's visibility: search attributes, and queries over them.

A flow's metadata field ``customer`` is the custom search attribute
``flowcore_customer``, of the type its declaration maps to (string: Keyword,
integer: Int, number: Double, boolean: Bool). The workflow upserts them as
the run's metadata changes (``_workflow``); this module checks that the
namespace has them registered before a run starts, turns metadata filters
into a visibility query, and reads a run's attributes back as metadata.

Visibility is eventually consistent: ``list_workflows`` may not show a run
started, or a field set, a moment ago.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.client import Client
from temporalio.common import TypedSearchAttributes
from temporalio.service import RPCError

import flowcore

from ._types import ATTRIBUTE_TYPES, METADATA_PREFIX, WORKFLOW_NAME, TemporalHostError

__all__ = ["SearchAttributes", "metadata_of", "register_command", "visibility_query"]

_TYPE_NAMES = {
    IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD: "Keyword",
    IndexedValueType.INDEXED_VALUE_TYPE_INT: "Int",
    IndexedValueType.INDEXED_VALUE_TYPE_DOUBLE: "Double",
    IndexedValueType.INDEXED_VALUE_TYPE_BOOL: "Bool",
    IndexedValueType.INDEXED_VALUE_TYPE_TEXT: "Text",
    IndexedValueType.INDEXED_VALUE_TYPE_DATETIME: "Datetime",
    IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD_LIST: "KeywordList",
}


def register_command(name: str, kind: str) -> str:
    """The ``temporal`` CLI command that registers metadata field ``name`` of type ``kind``."""
    return (
        f"temporal operator search-attribute create --name {METADATA_PREFIX}{name}"
        f" --type {ATTRIBUTE_TYPES[kind]}"
    )


class SearchAttributes:
    """The custom search attributes of the client's namespace, asked once and kept
    (asked again when one that is needed is missing: someone may have added it)."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self._types: dict[str, str] | None = None

    async def types(self, refresh: bool = False) -> dict[str, str]:
        """Custom search attribute name -> type name (``Keyword``, ``Int``...)."""
        if self._types is None or refresh:
            request = ListSearchAttributesRequest(namespace=self.client.namespace)
            try:
                reply = await self.client.operator_service.list_search_attributes(request)
            except RPCError as exc:
                raise TemporalHostError(f"cannot list search attributes: {exc.message}") from None
            self._types = {
                name: _TYPE_NAMES.get(kind, str(kind))
                for name, kind in reply.custom_attributes.items()
            }
        return self._types

    async def check(self, declared: dict[str, str]) -> None:
        """``TemporalHostError`` naming each metadata field of ``declared`` whose search
        attribute is missing or of another type, with the commands that register them."""
        if not declared:
            return
        problems = _mismatches(declared, await self.types())
        if problems:
            problems = _mismatches(declared, await self.types(refresh=True))
        if problems:
            raise TemporalHostError(
                "the flow's metadata needs search attributes this namespace lacks: "
                + "; ".join(problems)
            )


def _mismatches(declared: dict[str, str], types: dict[str, str]) -> list[str]:
    out = []
    for name, kind in declared.items():
        full, want = METADATA_PREFIX + name, ATTRIBUTE_TYPES[kind]
        have = types.get(full)
        if have is None:
            out.append(f"{full} ({want}) is not registered: {register_command(name, kind)}")
        elif have != want:
            out.append(f"{full} is registered as {have}, field {name!r} ({kind}) needs {want}")
    return out


def _quoted(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def visibility_query(
    filters: list[flowcore.MetadataFilter],
    types: dict[str, str],
    status: str | None = None,
    *,
    started_from_ms: int | None = None,
    started_to_ms: int | None = None,
) -> str:
    """The visibility query (Temporal's SQL-like list filter) for flowcore runs whose
    metadata matches every filter (and that started from ``started_from_ms`` and
    before ``started_to_ms``, epoch ms, when given); ``MetadataFilterError`` for a
    filter no run can match this way (a field no search attribute stands for, a
    value not of its type)."""
    parts = [f"WorkflowType = {_quoted(WORKFLOW_NAME)}"]
    if status is not None:
        parts.append(f"ExecutionStatus = {_quoted(status)}")
    for op, ms in ((">=", started_from_ms), ("<", started_to_ms)):
        if ms is not None:
            at = datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")
            parts.append(f"StartTime {op} {_quoted(at.replace('+00:00', 'Z'))}")
    for f in filters:
        full = METADATA_PREFIX + f.field
        kind = types.get(full)
        if kind is None:
            raise flowcore.MetadataFilterError(
                f"metadata filter {str(f)!r}: no search attribute {full} is registered"
                " (no flow on this namespace declares that field)"
            )
        value: str
        if kind == "Keyword":
            if f.op not in ("=", "!="):
                raise flowcore.MetadataFilterError(
                    f"metadata filter {str(f)!r}: {f.field} is a string field; {f.op} compares"
                    " numbers"
                )
            value = _quoted(f.text)
        elif kind in ("Int", "Double"):
            number = f.number
            if number is None or (kind == "Int" and not isinstance(number, int)):
                what = "an integer" if kind == "Int" else "a number"
                raise flowcore.MetadataFilterError(
                    f"metadata filter {str(f)!r}: {f.field} holds {what}; {f.text!r} is not one"
                )
            value = repr(number)
        elif kind == "Bool":
            if f.op not in ("=", "!=") or f.boolean is None:
                raise flowcore.MetadataFilterError(
                    f"metadata filter {str(f)!r}: {f.field} is a boolean field: use"
                    f" {f.field}=true or {f.field}=false"
                )
            value = "true" if f.boolean else "false"
        else:
            raise flowcore.MetadataFilterError(
                f"metadata filter {str(f)!r}: {full} is a {kind} search attribute, not one"
                " flowcore sets"
            )
        cond = f"{full} {f.op} {value}"
        if f.op == "!=":  # a run without the field matches no condition on it
            cond = f"({cond} AND {full} IS NOT NULL)"
        parts.append(cond)
    return " AND ".join(parts)


def metadata_of(attributes: TypedSearchAttributes) -> dict[str, Any]:
    """The metadata fields a run's search attributes hold (``flowcore_<field>`` ones)."""
    out: dict[str, Any] = {}
    for pair in attributes:
        name = pair.key.name
        if name.startswith(METADATA_PREFIX):
            out[name[len(METADATA_PREFIX) :]] = pair.value
    return dict(sorted(out.items()))
