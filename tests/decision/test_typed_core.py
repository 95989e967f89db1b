"""The core's values are typed: outcomes, the events that answer a key, the tables.

A step's outcome is ``Ok(value)`` or ``Failed(error)``, read with ``match`` or by
its type, never as a ``(bool, value)`` pair; the events that answer an
idempotency key are one union (``KeyEvent``) whose key is read after
narrowing, never with ``getattr``; the transition tables are keyed by event
class.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

import flowcore
from flowcore.decision.interp import ABOVE, event_key
from flowcore.decision.outcome import Failed, Ok
from flowcore.decision.state import StepFrame
from flowcore.decision.transitions import ANSWERS, WORK_EFFECTS
from flowcore.decision.txn import Txn
from flowcore.decision.wire import EVENT_TYPES, Effect, KeyEvent

CORE = Path(flowcore.__file__).parent
MODULES = sorted(CORE.rglob("*.py"))


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _names_outcome(node: ast.expr | None) -> bool:
    return node is not None and any(
        isinstance(n, ast.Name) and n.id == "Outcome" for n in ast.walk(node)
    )


def test_no_outcome_is_read_as_a_pair() -> None:
    """No ``out[0]`` / ``out[1]`` on an ``Outcome``, no ``OK``/``FAIL`` flags."""
    found = []
    for path in MODULES:
        tree = _tree(path)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("outcome"):
                flags = [a.name for a in node.names if a.name in ("OK", "FAIL")]
                if flags:
                    found.append(f"{path.name}:{node.lineno}: imports {flags}")
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            args = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
            outcomes = {a.arg for a in args if _names_outcome(a.annotation)}
            for sub in ast.walk(node):
                if isinstance(sub, ast.AnnAssign) and isinstance(sub.target, ast.Name):
                    if _names_outcome(sub.annotation):
                        outcomes.add(sub.target.id)
            for sub in ast.walk(node):
                if (
                    isinstance(sub, ast.Subscript)
                    and isinstance(sub.value, ast.Name)
                    and sub.value.id in outcomes
                ):
                    found.append(f"{path.name}:{sub.lineno}: {ast.unparse(sub)}")
    assert found == []


def test_no_key_is_read_with_getattr() -> None:
    found = [
        f"{path.name}:{node.lineno}"
        for path in MODULES
        for node in ast.walk(_tree(path))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "getattr"
        and len(node.args) >= 2
        and isinstance(node.args[1], ast.Constant)
        and node.args[1].value == "idempotency_key"
    ]
    assert found == []


def test_key_events_are_the_events_with_a_key() -> None:
    keyed = {cls for cls in EVENT_TYPES if "idempotency_key" in cls.__struct_fields__}
    assert set(KeyEvent.__args__) == keyed
    for cls in EVENT_TYPES:
        assert issubclass(cls, KeyEvent) == (cls in keyed)
    answer = flowcore.EffectSucceeded(idempotency_key="r/a#1", at_ms=0)
    assert event_key(answer) == "r/a#1"
    assert event_key(flowcore.CancelRequested(at_ms=0)) is None
    assert event_key({"idempotencyKey": "r/a#1"}) is None


def test_every_table_key_is_an_event_class() -> None:
    assert set(ANSWERS) == set(EVENT_TYPES)
    assert set(WORK_EFFECTS) <= set(KeyEvent.__args__)
    effects = set(Effect.__args__)
    for answers in WORK_EFFECTS.values():
        assert answers and answers <= effects


FLOW = """
flow: typed
steps:
  - {id: wait, sleep: {for_ms: 1000}}
  - {id: boom, fail: {type: nope, message: no}}
  - {id: quiet, switch: [{if: "${`false`}", steps: [{id: never, sleep: {for_ms: 1}}]}]}
"""


@pytest.mark.parametrize(
    ("step", "expected"),
    [("boom", Failed(flowcore.ErrorInfo(type="nope", message="no"))), ("quiet", Ok(None))],
)
def test_a_step_that_ends_at_once_begins_with_an_outcome(step: str, expected: Any) -> None:
    flow = flowcore.parse_flow(FLOW)
    t = Txn(flowcore.start(flow, run_id="r").state, ABOVE)
    frame = StepFrame(id=step, parent="", env="", prefix="", step=step)
    out = t.begin(frame, flow.by_id[step])
    assert type(out) is type(expected) and out == expected
    match out:
        case Ok(value=value):
            assert value is None
        case Failed(error=error):
            assert error.type == "nope"
        case _:
            pytest.fail(f"not an outcome: {out!r}")
