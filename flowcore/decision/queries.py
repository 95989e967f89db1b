"""Queries: a flow's declared, read-only views of a run (``flowcore.query``).

A query's ``value`` is a template evaluated over a state, running or settled,
writing nothing: it reads the run's ``input``, its top-level ``steps`` and
``run`` as the flow's steps do, and ``args`` (the caller's, checked against
``args_schema``), ``metadata``, ``status``, the settled run's ``output`` and
``error``, ``waiting`` (``waiting_for`` in its wire form) and ``updates``
(update id -> ``{name, status, output, error}``). language.md §16.

This module must never do I/O, read a clock or draw a random number.
"""

from __future__ import annotations

from typing import Any

import msgspec

from .._data import DataError, check_data, short
from .._errors import QueryError
from ..language.expr import TemplateError
from .interp import ABOVE
from .outcome import error_dict
from .state import State
from .txn import Txn
from .waiting import waiting_for

__all__ = ["query"]


def query(state: State, name: str, args: Any = None) -> Any:
    """The value of the flow's query ``name`` over ``state`` with ``args``.

    Raises ``QueryError``: ``unknown-query``, ``bad-args`` or ``expression-error``.
    """
    flow = state.flow
    decl = flow.queries.get(name) if isinstance(name, str) else None
    if decl is None:
        known = ", ".join(sorted(flow.queries)) or "none"
        raise QueryError(
            "unknown-query",
            str(name),
            f"no query {short(name)} in flow {flow.id!r} (declared: {known})",
        )
    try:
        check_data(args, "$.args", "query args")
    except DataError as exc:
        raise QueryError("bad-args", name, f"query {name!r}: {exc}") from None
    if decl.args_schema is not None:
        from ..language.validate import input_problems

        problems = input_problems(decl.args_schema, args)
        if problems:
            listed = "; ".join(problems[:10])
            raise QueryError(
                "bad-args", name, f"query {name!r}: the args fail its args_schema: {listed}"
            )
    settled = state.settled
    context = {
        "args": args,
        "metadata": dict(state.metadata or {}),
        "status": state.status,
        "output": None if settled is None else settled.output,
        "error": None if settled is None or settled.error is None else error_dict(settled.error),
        "waiting": msgspec.json.decode(msgspec.json.encode(waiting_for(state))),
        "updates": {
            uid: {
                "name": rec.name,
                "status": rec.status,
                "output": rec.output,
                "error": None if rec.error is None else error_dict(rec.error),
            }
            for uid, rec in sorted(state.tree.updates.items(), key=lambda item: item[1].seq)
        },
    }
    resolver = Txn(state, ABOVE).resolver("", extra=context)
    try:
        return decl.value.evaluate(resolver)
    except TemplateError as exc:
        raise QueryError("expression-error", name, f"query {name!r}: {exc}") from None
