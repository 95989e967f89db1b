"""Run metadata: a few typed fields a flow declares, that hosts index and filter on.

A flow declares its fields at the top level (``metadata: {customer: string,
amount: number}``); the starter gives initial values (``start(...,
metadata=...)``) and ``set_metadata`` steps change them. The current values
live in the state (``State.metadata``), so hosts read them from there and
replay derives them again from the log.

This module checks names and values; it must never do I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Literal, TypeAlias

__all__ = [
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
