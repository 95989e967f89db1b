"""A tolerant walk over a raw spec (the mapping before it is structured): its
steps, nested ones included, each step's nested lists, and the strings a step
holds of its own. Cross-references (``refs``) and what steps read
(``reads``) are written over it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from .hooks import _strings
from .model import _KINDS


def _step_lists(
    step: Mapping[str, Any], path: tuple[Any, ...]
) -> Iterator[tuple[list[Any], tuple[Any, ...]]]:
    """Every nested list of steps inside one raw step, with its path."""
    for kind in ("for_each", "repeat"):
        body = step.get(kind)
        if isinstance(body, dict) and isinstance(body.get("steps"), list):
            yield body["steps"], (*path, kind, "steps")
    if isinstance(step.get("try"), list):
        yield step["try"], (*path, "try")
    for key in ("catch",):
        clauses = step.get(key)
        if isinstance(clauses, list):
            for i, clause in enumerate(clauses):
                if isinstance(clause, dict) and isinstance(clause.get("steps"), list):
                    yield clause["steps"], (*path, key, i, "steps")
    if isinstance(step.get("compensate"), list):
        yield step["compensate"], (*path, "compensate")
    cases = step.get("switch")
    if isinstance(cases, list):
        for i, case in enumerate(cases):
            if isinstance(case, dict):
                for key in ("steps", "else"):
                    if isinstance(case.get(key), list):
                        yield case[key], (*path, "switch", i, key)
    par = step.get("parallel")
    if isinstance(par, dict) and isinstance(par.get("branches"), dict):
        for name, branch in par["branches"].items():
            if isinstance(branch, list):
                yield branch, (*path, "parallel", "branches", name)


def _all_steps(raw: Mapping[str, Any]) -> Iterator[tuple[dict[str, Any], tuple[Any, ...]]]:
    """Every step of the spec, nested ones included: the flow's, the final ones,
    then the update handlers'."""
    steps = raw.get("steps")
    if isinstance(steps, list):
        yield from _walk_steps(steps, ("steps",))
    final = raw.get("on_budget_exhausted")
    if isinstance(final, dict) and isinstance(final.get("steps"), list):
        yield from _walk_steps(final["steps"], ("on_budget_exhausted", "steps"))
    for name, handler in _handlers(raw):
        yield from _walk_steps(handler, ("updates", name, "steps"))


def _handlers(raw: Mapping[str, Any]) -> Iterator[tuple[Any, list[Any]]]:
    """Each declared update's name and its list of steps (when both are well-formed)."""
    updates = raw.get("updates")
    if isinstance(updates, dict):
        for name, body in updates.items():
            if isinstance(body, dict) and isinstance(body.get("steps"), list):
                yield name, body["steps"]


def _walk_steps(
    steps: list[Any], path: tuple[Any, ...]
) -> Iterator[tuple[dict[str, Any], tuple[Any, ...]]]:
    for i, step in enumerate(steps):
        if not isinstance(step, dict):
            continue
        here = (*path, i)
        yield step, here
        for inner, inner_path in _step_lists(step, here):
            yield from _walk_steps(inner, inner_path)


# The keys of a step kind that are bare conditions, not templates.
_CONDITIONS = frozenset({("repeat", "until"), ("await_signal", "where"), ("await_signal", "until")})


def _own_strings(
    step: Mapping[str, Any], path: tuple[Any, ...]
) -> Iterator[tuple[str, tuple[Any, ...], bool]]:
    """The strings of one raw step that are its own (not in nested steps).

    Yields ``(text, path, is_condition)``: switch ``if``, repeat ``until`` and
    await_signal ``where`` and ``until`` are bare JMESPath conditions,
    everything else is a template.
    """
    for kind, body in step.items():
        if kind not in _KINDS:
            continue
        here = (*path, kind)
        if kind == "try":
            continue  # a list of steps, walked on its own
        if kind == "switch":
            if isinstance(body, list):
                for i, case in enumerate(body):
                    if isinstance(case, dict) and isinstance(case.get("if"), str):
                        yield case["if"], (*here, i, "if"), True
            continue
        if isinstance(body, dict):
            for key, value in body.items():
                if key in ("steps", "branches"):
                    continue
                if (kind, key) in _CONDITIONS and isinstance(value, str):
                    yield value, (*here, key), True
                    continue
                for text, spath in _strings(value, (*here, key), frozenset()):
                    yield text, spath, False
