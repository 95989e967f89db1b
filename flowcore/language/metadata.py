"""Run metadata: a few typed fields a flow declares, that hosts index and filter on.

A flow declares its fields at the top level (``metadata: {customer: string,
amount: number}``); the starter gives initial values (``start(...,
metadata=...)``) and ``set_metadata`` steps change them. The current values
live in the state (``State.metadata``), so hosts read them from there and
replay derives them again from the log.

This module checks names and values; it must never do I/O.
"""

from __future__ import annotations

import dataclasses
import math
import re
import typing
from collections.abc import Mapping
from typing import Any, Literal, TypeAlias

from .._errors import FlowcoreError

__all__ = [
    "MetadataFilterError",
    "MetadataFilter",
    "metadata_filters",
    "parse_metadata_filter",
    "values_from_text",
    "MAX_FIELDS",
    "MAX_NAME",
    "MAX_TEXT",
    "TYPES",
    "MetaType",
    "check_values",
    "name_problem",
    "value_problem",
]

MetaType: TypeAlias = Literal["string", "integer", "number", "boolean"]
TYPES: tuple[MetaType, ...] = ("string", "integer", "number", "boolean")
MAX_FIELDS = 16
"""Fields a flow may declare."""
MAX_NAME = 64
"""Characters of a field's name."""
MAX_TEXT = 256
"""Characters of a string value."""
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_INT_LIMIT = 2**63  # what an Int search attribute (and SQLite's INTEGER) holds


def name_problem(name: object) -> str | None:
    """Why ``name`` cannot be a metadata field's name, or None."""
    if not isinstance(name, str) or not _NAME.match(name):
        return (
            f"metadata field name {name!r} is not valid: use letters, digits and '_',"
            " not starting with a digit"
        )
    if len(name) > MAX_NAME:
        return f"metadata field name {name[:20]!r}... is over {MAX_NAME} characters"
    return None


def value_problem(kind: MetaType, value: object) -> str | None:
    """Why ``value`` is not a value of a ``kind`` field, or None (null clears a field)."""
    if value is None:
        return None
    match kind:
        case "string":
            if not isinstance(value, str):
                return f"must be a string, got {_describe(value)}"
            if len(value) > MAX_TEXT:
                return f"must be a string of at most {MAX_TEXT} characters, got {len(value)}"
        case "integer":
            if isinstance(value, bool) or not isinstance(value, int):
                return f"must be an integer, got {_describe(value)}"
            if not -_INT_LIMIT <= value < _INT_LIMIT:
                return "must be an integer that fits in 64 bits"
        case "number":
            if isinstance(value, bool) or not isinstance(value, int | float):
                return f"must be a number, got {_describe(value)}"
            if isinstance(value, float) and not math.isfinite(value):
                return "must be a finite number"
            if isinstance(value, int) and not -_INT_LIMIT <= value < _INT_LIMIT:
                return "must be a number that fits in 64 bits"
        case "boolean":
            if not isinstance(value, bool):
                return f"must be true or false, got {_describe(value)}"
    return None


def check_values(declared: Mapping[str, MetaType], values: object) -> list[str]:
    """Every problem of ``values`` (field -> value) against the declared fields."""
    if not isinstance(values, Mapping):
        return [f"metadata must be a mapping of field to value, got {_describe(values)}"]
    problems: list[str] = []
    for name, value in values.items():
        kind = declared.get(name) if isinstance(name, str) else None
        if kind is None:
            known = ", ".join(declared) or "none"
            problems.append(f"metadata field {name!r} is not declared (the flow declares: {known})")
            continue
        problem = value_problem(kind, value)
        if problem is not None:
            problems.append(f"metadata field {name!r} ({kind}) {problem}")
    return problems


def _describe(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        text = value if len(value) <= 40 else value[:40] + "..."
        return f"the string {text!r}"
    if isinstance(value, int | float):
        return f"the number {value!r}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


# --- filters: what hosts list runs by -------------------------------------------------

Op: TypeAlias = Literal["=", "!=", "<", "<=", ">", ">="]
_FILTER = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*(!=|<=|>=|=|<|>)\s*(.*?)\s*\Z", re.S)
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\Z")


class MetadataFilterError(FlowcoreError, ValueError):
    """A metadata filter that cannot be read (``parse_metadata_filter``); the message names it."""


@dataclasses.dataclass(frozen=True)
class MetadataFilter:
    """One condition on a run's metadata: ``field op text``.

    ``=`` and ``!=`` compare with a field of any type: a string field with
    the text, a number field with the text read as a number, a boolean field
    with ``true`` or ``false``. ``<``, ``<=``, ``>`` and ``>=`` compare number
    fields only, and their text must be a number. A run without the field
    matches no condition on it (``!=`` included).
    """

    field: str
    op: Op
    text: str

    @property
    def number(self) -> int | float | None:
        """The text read as a number, or None (an integer beyond 64 bits is none:
        no field holds one, ``value_problem``)."""
        value = _text_number(self.text)
        if isinstance(value, int) and not -_INT_LIMIT <= value < _INT_LIMIT:
            return None
        return value

    @property
    def boolean(self) -> bool | None:
        """The text read as a boolean (``true`` or ``false``), or None."""
        return {"true": True, "false": False}.get(self.text)

    def matches(self, kind: MetaType, value: object) -> bool:
        """Whether a field of type ``kind`` holding ``value`` (None: not set) matches."""
        if value is None:
            return False
        if self.op in ("=", "!="):
            want: object
            if kind == "string":
                want = self.text
            elif kind == "boolean":
                want = self.boolean
            else:
                want = self.number
            same = (
                want is not None
                and want == value
                and isinstance(value, bool) == (kind == "boolean")
            )
            return same if self.op == "=" else not same
        number = self.number
        if kind not in ("integer", "number") or number is None:
            return False
        assert isinstance(value, int | float)
        match self.op:
            case "<":
                return value < number
            case "<=":
                return value <= number
            case ">":
                return value > number
            case _:
                return value >= number

    def __str__(self) -> str:
        return f"{self.field}{self.op}{self.text}"


def _text_number(text: str) -> int | float | None:
    """``text`` read as a number (an integer of any size), or None."""
    if not _NUMBER.match(text):
        return None
    if re.fullmatch(r"[+-]?[0-9]+", text):
        return int(text)
    value = float(text)
    return value if math.isfinite(value) else None


def parse_metadata_filter(text: str) -> MetadataFilter:
    """Read ``field=value`` (or ``!=``, ``<``, ``<=``, ``>``, ``>=``); ``MetadataFilterError`` if
    it is not one, names no valid field, or compares order with something not a number."""
    if not isinstance(text, str):
        raise MetadataFilterError(
            f"a metadata filter is text like 'customer=acme', got {_describe(text)}"
        )
    found = _FILTER.match(text)
    if found is None:
        raise MetadataFilterError(
            f"metadata filter {text!r} is not field=value (operators: = != < <= > >=;"
            " fields are names of letters, digits and '_')"
        )
    name, op, value = found.groups()
    problem = name_problem(name)
    if problem is not None:
        raise MetadataFilterError(f"metadata filter {text!r}: {problem}")
    if len(value) > MAX_TEXT:
        raise MetadataFilterError(
            f"metadata filter {text[:40]!r}...: the value is over {MAX_TEXT} characters"
        )
    out = MetadataFilter(name, typing.cast(Op, op), value)
    if op not in ("=", "!=") and out.number is None and _text_number(value) is not None:
        raise MetadataFilterError(
            f"metadata filter {text!r}: {op} compares with an integer beyond 64 bits"
            " (from -2**63 to 2**63-1), which no metadata field holds"
        )
    if op not in ("=", "!=") and out.number is None:
        raise MetadataFilterError(
            f"metadata filter {text!r}: {op} compares numbers, and {value!r} is not one"
        )
    return out


def metadata_filters(where: object) -> list[MetadataFilter]:
    """Filters from ``where``: texts (``"amount>100"``), filters, or a mapping of field to
    the value it must equal (``{"customer": "acme", "urgent": True}``)."""
    if where is None:
        return []
    if isinstance(where, Mapping):
        out = []
        for name, value in where.items():
            if isinstance(value, bool):
                text = "true" if value else "false"
            elif isinstance(value, int | float | str):
                text = str(value)
            else:
                raise MetadataFilterError(
                    f"metadata filter {name!r}: the value must be a string, number or"
                    f" boolean, got {_describe(value)}"
                )
            out.append(parse_metadata_filter(f"{name}={text}"))
        return out
    if isinstance(where, str | MetadataFilter):
        where = [where]
    if not isinstance(where, typing.Iterable):
        raise MetadataFilterError(
            f"metadata filters are texts or a mapping, got {_describe(where)}"
        )
    return [w if isinstance(w, MetadataFilter) else parse_metadata_filter(w) for w in where]


def values_from_text(
    declared: Mapping[str, MetaType], texts: typing.Iterable[str]
) -> tuple[dict[str, Any], list[str]]:
    """Metadata values from ``field=value`` texts (a command line's), each read as its
    field's declared type: a string as it is, an integer or a number as a number, a
    boolean as ``true`` or ``false``. Returns the values and every problem found."""
    values: dict[str, Any] = {}
    problems: list[str] = []
    for text in texts:
        name, sep, raw = text.partition("=")
        name = name.strip()
        if not sep or name_problem(name) is not None:
            problems.append(f"metadata {text!r} is not field=value")
            continue
        kind = declared.get(name)
        if kind is None:
            known = ", ".join(declared) or "none"
            problems.append(f"metadata field {name!r} is not declared (the flow declares: {known})")
            continue
        value: Any = raw
        if kind == "boolean":
            value = {"true": True, "false": False}.get(raw, raw)
        elif kind in ("integer", "number"):
            number = _text_number(raw.strip())
            if number is not None and kind == "number" and isinstance(number, float):
                value = number
            elif number is not None and isinstance(number, int):
                value = number
        problem = value_problem(kind, value)
        if problem is not None:
            problems.append(f"metadata field {name!r} ({kind}) {problem}")
            continue
        values[name] = value
    return values, problems
