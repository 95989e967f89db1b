"""A flow's ``updates:`` and ``queries:`` sections: their model and their checks.

An update is a named request a caller sends a running run: its input is
checked (``input_schema``, then the ``validator`` condition), and its handler
steps run beside the flow's own steps until they end, when the caller gets the
``reply``. A query is a named, read-only template evaluated over a run's
state (``flowcore.query``). language.md §16 describes both.

``check_sections`` structures both sections from the raw spec, gathering every
problem with its path; ``parse_flow`` indexes the handlers' steps with the
flow's own. The reads of their expressions are checked in ``reads``.

This module never does I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import cattrs

from .expr import Cond, Template
from .hooks import _collect, _describe, _unknown_key
from .model import QueryDecl, Step, UpdateDecl

__all__ = [
    "MAX_DECL_NAME",
    "QueryDecl",
    "UpdateDecl",
    "check_sections",
    "decl_name_problem",
]

MAX_DECL_NAME = 100
_DECL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*\Z")
_UPDATE_KEYS = ("description", "input_schema", "validator", "examples", "steps", "reply")
_QUERY_KEYS = ("description", "args_schema", "value")

Found = list[tuple[tuple[Any, ...], str]]


def decl_name_problem(name: object) -> str | None:
    """Why ``name`` cannot name an update or a query, or None."""
    if not isinstance(name, str) or not _DECL_NAME.match(name):
        return (
            f"{name!r} is not a valid name: use letters, digits, '_', '.' and '-',"
            " starting with a letter or '_'"
        )
    if len(name) > MAX_DECL_NAME:
        return f"a name is at most {MAX_DECL_NAME} characters, this one has {len(name)}"
    return None


def check_sections(
    raw: Mapping[str, Any], conv: cattrs.Converter, found: Found
) -> tuple[dict[str, UpdateDecl], dict[str, QueryDecl]]:
    """The declared updates and queries; every problem goes to ``found``."""
    updates: dict[str, UpdateDecl] = {}
    for name, body in _section(raw, "updates", found):
        decl = _update(name, body, conv, found)
        if decl is not None:
            updates[name] = decl
    queries: dict[str, QueryDecl] = {}
    for name, body in _section(raw, "queries", found):
        query = _query(name, body, conv, found)
        if query is not None:
            queries[name] = query
    return updates, queries


def _section(raw: Mapping[str, Any], key: str, found: Found) -> list[tuple[str, dict[str, Any]]]:
    section = raw.get(key)
    if section is None:
        return []
    what = "update" if key == "updates" else "query"
    if not isinstance(section, dict):
        found.append(
            ((key,), f"expected a mapping of {what} name to {what}, got {_describe(section)}")
        )
        return []
    out: list[tuple[str, dict[str, Any]]] = []
    for name, body in section.items():
        problem = decl_name_problem(name)
        if problem is not None:
            found.append(((key, str(name)), f"{what} {problem}"))
            continue
        if body is None:
            body = {}
        if not isinstance(body, dict):
            found.append(
                ((key, name), f"expected a mapping of {what} fields, got {_describe(body)}")
            )
            continue
        out.append((name, body))
    return out


def _structure(
    conv: cattrs.Converter, value: Any, typ: Any, where: tuple[Any, ...], found: Found
) -> Any:
    try:
        return conv.structure(value, typ)
    except Exception as exc:
        _collect(exc, where, found)
        return None


def _schema(value: Any, where: tuple[Any, ...], found: Found) -> dict[str, Any] | None:
    from .validate import schema_problems

    if value is None:
        return None
    if not isinstance(value, dict):
        found.append((where, f"expected a JSON Schema mapping, got {_describe(value)}"))
        return None
    problems = schema_problems(value)
    for path, message in problems:
        found.append(((*where, *path), message))
    return None if problems else value


def _text(body: Mapping[str, Any], where: tuple[Any, ...], found: Found) -> str | None:
    value = body.get("description")
    if value is None or isinstance(value, str):
        return value
    found.append(((*where, "description"), f"expected a string, got {_describe(value)}"))
    return None


def _update(
    name: str, body: dict[str, Any], conv: cattrs.Converter, found: Found
) -> UpdateDecl | None:
    where = ("updates", name)
    before = len(found)
    for key in body:
        if key not in _UPDATE_KEYS:
            found.append(((*where, str(key)), _unknown_key(key, _UPDATE_KEYS)))
    description = _text(body, where, found)
    schema = _schema(body.get("input_schema"), (*where, "input_schema"), found)
    validator = None
    if body.get("validator") is not None:
        validator = _structure(conv, body["validator"], Cond, (*where, "validator"), found)
    reply = None
    if "reply" in body:
        reply = _structure(conv, body["reply"], Template, (*where, "reply"), found)
    steps: tuple[Step, ...] = ()
    if body.get("steps") is not None:
        steps = _structure(conv, body["steps"], tuple[Step, ...], (*where, "steps"), found) or ()
    examples = _examples(body, schema, where, found)
    if len(found) > before:
        return None
    return UpdateDecl(
        name=name,
        steps=steps,
        description=description,
        input_schema=schema,
        validator=validator,
        examples=examples,
        reply=reply,
    )


def _examples(
    body: Mapping[str, Any], schema: dict[str, Any] | None, where: tuple[Any, ...], found: Found
) -> tuple[Any, ...]:
    from .validate import input_problems

    if "examples" not in body:
        # A null input is the example when the update takes one.
        if schema is None or not input_problems(schema, None):
            return (None,)
        return ()
    examples = body["examples"]
    if not isinstance(examples, list):
        found.append(
            ((*where, "examples"), f"expected a list of inputs, got {_describe(examples)}")
        )
        return ()
    if schema is not None:
        for i, example in enumerate(examples):
            for problem in input_problems(schema, example):
                found.append(
                    ((*where, "examples", i), f"example fails the input_schema at {problem}")
                )
    return tuple(examples)


def _query(
    name: str, body: dict[str, Any], conv: cattrs.Converter, found: Found
) -> QueryDecl | None:
    where = ("queries", name)
    before = len(found)
    for key in body:
        if key not in _QUERY_KEYS:
            found.append(((*where, str(key)), _unknown_key(key, _QUERY_KEYS)))
    description = _text(body, where, found)
    schema = _schema(body.get("args_schema"), (*where, "args_schema"), found)
    if "value" not in body:
        found.append((where, "missing required key 'value'"))
        return None
    value = _structure(conv, body["value"], Template, (*where, "value"), found)
    if len(found) > before or value is None:
        return None
    return QueryDecl(name=name, value=value, description=description, args_schema=schema)
