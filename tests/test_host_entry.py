"""Both hosts enter the core the same way: ``flowcore.persist.advance``.

The local host keeps a run as rows and restores a *partial* state (its report
rows left out), so it hands ``persist.advance`` a ``load_report``; the Temporal
workflow keeps its whole state in memory, for which ``persist.advance`` without
``load_report`` is exactly ``flowcore.advance``. Every module of both hosts is
read with ``ast``: each call that advances a run is ``persist.advance``, and no
other ``advance`` is called or imported (specs/architecture.md, "How the hosts
enter the core").
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

import flowcore
from flowcore import persist
from tests.harness import Run

HOSTS = Path(__file__).resolve().parent.parent / "hosts"
PACKAGES = ("flowcore_local", "flowcore_temporal")


def _entries(source: str, filename: str) -> tuple[list[str], list[str]]:
    """The ``persist.advance`` calls in ``source`` (``FILE:LINE``), and every other
    way it advances a run (a call or an import of another ``advance``), with why."""
    tree = ast.parse(source, filename=filename)
    entries: list[str] = []
    others: list[str] = []
    for node in ast.walk(tree):
        where = f"{filename}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("flowcore"):
            for alias in node.names:
                if "advance" in alias.name:
                    others.append(f"{where}: imports {alias.name} from {node.module}")
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and "advance" in func.id:
            others.append(f"{where}: calls {func.id}()")
        elif isinstance(func, ast.Attribute) and func.attr.startswith("advance"):
            owner = ast.unparse(func.value)
            if func.attr == "advance" and owner in ("persist", "flowcore.persist"):
                entries.append(where)
            elif owner.startswith("flowcore") or owner == "persist":
                others.append(f"{where}: calls {owner}.{func.attr}()")
    return entries, others


def test_both_hosts_advance_runs_through_persist_advance_only() -> None:
    for package in PACKAGES:
        entries: list[str] = []
        others: list[str] = []
        for path in sorted((HOSTS / package).glob("*.py")):
            found, wrong = _entries(path.read_text(encoding="utf-8"), path.name)
            entries += found
            others += wrong
        assert others == [], package
        assert entries, f"{package} never calls persist.advance"


@pytest.mark.parametrize(
    ("source", "why"),
    [
        ("flowcore.advance(s, e)", "calls flowcore.advance()"),
        ("from flowcore import advance", "imports advance from flowcore"),
        ("from flowcore.persist import advance", "imports advance from flowcore.persist"),
        ("advance(s, e)", "calls advance()"),
    ],
)
def test_another_entry_is_caught(source: str, why: str) -> None:
    assert _entries(source, "x.py") == ([], [f"x.py:1: {why}"])
    assert _entries("persist.advance(s, e, load)", "x.py") == (["x.py:1"], [])


SEQ = """
flow: t
tools: {a: {}}
steps:
  - {id: one, call_tool: {tool: a}}
  - {id: two, call_tool: {tool: a}}
"""


def test_a_whole_state_needs_no_load_report_and_a_partial_one_says_so() -> None:
    """``persist.advance(state, event)`` of a whole state is ``flowcore.advance``'s
    decision; a partial state whose transition reads its report asks for the rows."""
    r = Run(SEQ)
    for key, output in (("r/one#1", 1), ("r/two#1", 2)):
        event = flowcore.EffectSucceeded(idempotency_key=key, output=output, at_ms=5)
        entered = persist.advance(r.state, event)
        assert entered == flowcore.advance(r.state, event)
        r.send(event)
        assert entered.state == r.state
    assert r.settled is not None and r.settled.status == "completed"

    r = Run(SEQ)
    rows: list[persist.ReportRow] = []
    results: dict[str, Any] = {}

    def store() -> None:
        changes = persist.state_changes(r.state)
        rows.extend(changes.report)
        results.update(changes.results)

    store()
    r.ok("r/one#1", 1)
    store()
    hot = persist.encode_hot(r.state)
    partial = persist.restore_state(hot, results.items(), r.flow, report=None)
    done = flowcore.EffectSucceeded(idempotency_key="r/two#1", output=2, at_ms=9)
    with pytest.raises(TypeError, match=r"give persist\.advance a load_report"):
        persist.advance(partial, done)
    settled = persist.advance(partial, done, lambda: rows).state.settled
    assert settled is not None
    assert [row.idempotency_key for row in settled.report] == ["r/one#1", "r/two#1"]
