"""A budget that runs out and a ``continue_as_new`` step stop a transition as
values, not exceptions (specs/architecture.md §1, "Stopping").

``Txn.stop`` records the halt where it happens; every caller on the way back
returns at once, and where the transition began ``ending.halted`` handles it.
The exception this replaced unwound everything in between: here, the state a
transition holds when it stops is checked to be the state its handler finds.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import flowcore
from flowcore.decision.halt import ContinueRequested, Exhausted, Halt
from flowcore.decision.txn_records import TxnRecords
from flowcore.log.replay import replay

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "flowcore"
VECTORS = ROOT / "specs" / "conformance"
HALTS = {"Exhausted", "ContinueRequested"}


def _names(node: ast.expr | None) -> set[str]:
    """The class names an ``except`` clause or a ``raise`` names."""
    if node is None:
        return set()
    if isinstance(node, ast.Call):
        return _names(node.func)
    if isinstance(node, ast.Tuple):
        return set().union(*(_names(item) for item in node.elts))
    if isinstance(node, ast.Attribute):
        return {node.attr}
    if isinstance(node, ast.Name):
        return {node.id}
    return set()


def test_no_halt_is_raised_or_caught_in_flowcore() -> None:
    found: list[str] = []
    for path in sorted(CORE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Raise):
                named = _names(node.exc) & HALTS
            elif isinstance(node, ast.ExceptHandler):
                named = _names(node.type) & HALTS
            elif isinstance(node, ast.ClassDef) and node.name in HALTS:
                named = {
                    name for base in node.bases for name in _names(base) if "Exception" in name
                }
            else:
                continue
            if named:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {sorted(named)}")
    assert found == []


def test_the_halts_are_frozen_slotted_values() -> None:
    halts: list[Halt] = [Exhausted("steps"), ContinueRequested("r/c#1", {"n": 1}, 2)]
    for halt in halts:
        assert not isinstance(halt, BaseException)
        assert not hasattr(halt, "__dict__")
        with pytest.raises(AttributeError):
            halt.idle = 3  # type: ignore[misc,union-attr]
    assert Exhausted("cost") == Exhausted("cost") != Exhausted("steps")
    assert ContinueRequested("k", None).idle == 0


class _Watch:
    """``Txn.stop`` and ``Txn.take_halt`` watched: the state at each stop, and
    whether the handler found the same."""

    def __init__(self) -> None:
        self.seen: list[Halt] = []
        self.changed: list[Halt] = []
        self._at: dict[int, Any] = {}

    @staticmethod
    def _look(t: TxnRecords) -> Any:
        return (t.freeze(), list(t.effects), t.answer, t.signal_taker, t.now_ms)

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        stop, take = TxnRecords.stop, TxnRecords.take_halt

        def watched_stop(t: TxnRecords, halt: Halt) -> None:
            assert t.halt is None, f"stopped twice: {t.halt!r}, then {halt!r}"
            stop(t, halt)
            self.seen.append(halt)
            self._at[id(t)] = self._look(t)

        def watched_take(t: TxnRecords) -> Halt | None:
            halt = take(t)
            if halt is not None and self._at.pop(id(t)) != self._look(t):
                self.changed.append(halt)
            return halt

        monkeypatch.setattr(TxnRecords, "stop", watched_stop)
        monkeypatch.setattr(TxnRecords, "take_halt", watched_take)


@pytest.fixture
def watch(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Watch]:
    w = _Watch()
    w.install(monkeypatch)
    yield w
    assert w._at == {}, "a halt was never handled"


def _cases() -> list[str]:
    return sorted(p.name for p in VECTORS.iterdir() if (p / "log.ndjson").is_file())


def test_nothing_changes_between_a_halt_and_its_handling(watch: _Watch) -> None:
    """Every conformance vector's log replayed: each halt on the way (budgets of
    every kind, continue-as-new at once and later) reaches its handler with the
    transaction exactly as it stopped."""
    for case in _cases():
        folder = VECTORS / case
        expect = json.loads((folder / "expect.json").read_text(encoding="utf-8"))
        if expect.get("error") == "corrupt":
            continue
        flow = flowcore.parse_flow((folder / "flow.yaml").read_bytes(), "flow.yaml")
        replay((folder / "log.ndjson").read_bytes(), flow, raise_on_divergence=False)
    kinds = {type(h).__name__ for h in watch.seen}
    assert kinds == HALTS
    limits = {h.limit for h in watch.seen if isinstance(h, Exhausted)}
    assert {"steps", "cost", "wall-clock", "tokens"} <= limits
    assert watch.changed == []


def _start(spec: str) -> flowcore.Decision:
    return flowcore.start(flowcore.parse_flow(spec, "t.yaml"), None, run_id="r", now_ms=0)


def _report(d: flowcore.Decision) -> list[tuple[str, str]]:
    (settled,) = d.effects
    assert isinstance(settled, flowcore.Settled)
    assert settled.status == "budget-exhausted"
    return [(row.idempotency_key, row.status) for row in settled.report]


PARALLEL = """\
flow: p
budget: {steps: 1}
tools: {t: {class: readonly}}
steps:
  - id: fan
    parallel:
      branches:
        one: [{id: a, call_tool: {tool: t}}]
        two: [{id: b, call_tool: {tool: t}}]
        three: [{id: c, call_tool: {tool: t}}]
"""

FOR_EACH = """\
flow: e
budget: {steps: 2}
tools: {t: {class: readonly}}
steps:
  - id: each
    for_each:
      items: "${`[1, 2, 3, 4]`}"
      steps: [{id: a, call_tool: {tool: t, input: "${item}"}}]
"""

TEAM = """\
flow: m
budget: {steps: 1}
teams:
  crew:
    mode: parallel
    members:
      - {member: one, agent: x}
      - {member: two, agent: y}
      - {member: three, agent: z}
steps:
  - {id: go, run_team: {team: crew, prompt: p}}
"""


@pytest.mark.parametrize(
    ("spec", "report"),
    [
        (PARALLEL, [("r/a#1", "not-started")]),
        (FOR_EACH, [("r/each[0]/a#1", "not-started"), ("r/each[1]/a#1", "not-started")]),
        (TEAM, [("r/go/one#1", "not-started")]),
    ],
    ids=["parallel", "for_each", "team"],
)
def test_a_halt_in_one_branch_starts_no_other(
    watch: _Watch, spec: str, report: list[tuple[str, str]]
) -> None:
    d = _start(spec)
    assert _report(d) == report
    assert watch.seen == [Exhausted("steps")] and watch.changed == []


def test_a_continue_as_new_in_a_branch_starts_no_later_branch(watch: _Watch) -> None:
    spec = """\
flow: c
tools: {t: {class: readonly}}
steps:
  - id: fan
    parallel:
      branches:
        one: [{id: a, call_tool: {tool: t}}]
        two: [{id: again, continue_as_new: {input: 1}}]
        three: [{id: c, call_tool: {tool: t}}]
"""
    d = _start(spec)
    (effect,) = d.effects
    assert isinstance(effect, flowcore.ContinueAsNew)
    assert [(row.idempotency_key, row.status) for row in effect.report] == [
        ("r/a#1", "not-started")
    ]
    (halt,) = watch.seen
    assert isinstance(halt, ContinueRequested) and halt.input == 1 and halt.idle == 1
    assert watch.changed == []
