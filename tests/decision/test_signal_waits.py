"""``await_signal`` for any of several names, for a number of signals, or until a
condition holds over what it took (language.md §4.6)."""

from __future__ import annotations

from typing import Any

import pytest

import flowcore
from flowcore import SpecError
from flowcore.diagram import build_graph
from tests.harness import Run

ANY = """
flow: f
steps:
  - {id: either, await_signal: {signals: [approve, reject]}}
output: "${steps.either.output}"
"""

VOTES = """
flow: f
steps:
  - id: vote
    await_signal:
      signals: [approve, reject]
      count: 3
      until: "length(received[?signal=='approve']) >= `2`"
      timeout_ms: 10s
output: "${steps.vote.output}"
"""


def test_a_wait_for_any_of_several_names_says_which_came() -> None:
    run = Run(ANY)
    assert run.wire() == [
        {
            "kind": "await-signal",
            "signal": "approve",
            "idempotencyKey": "r/either#1",
            "signals": ["approve", "reject"],
        }
    ]
    assert [w.signal for w in flowcore.waiting_for(run.state).signals] == ["approve", "reject"]
    run.signal("reject", {"why": "no"})
    settled = run.settled
    assert settled is not None
    assert settled.output == {"signal": "reject", "payload": {"why": "no"}}
    assert flowcore.waiting_for(run.state).signals == ()


def test_a_collecting_wait_ends_when_until_holds() -> None:
    run = Run(VOTES)
    run.signal("approve", 1)
    run.signal("reject", 2)
    assert run.settled is None  # one approval, three wanted at most
    assert len(flowcore.waiting_for(run.state).signals) == 2  # still open to both
    run.signal("approve", 3)
    settled = run.settled
    assert settled is not None and settled.output == [
        {"signal": "approve", "payload": 1},
        {"signal": "reject", "payload": 2},
        {"signal": "approve", "payload": 3},
    ]


def test_a_collecting_wait_ends_at_its_count() -> None:
    run = Run(VOTES)
    for name in ("reject", "reject", "reject"):
        run.signal(name, name)
    settled = run.settled
    assert settled is not None and [s["signal"] for s in settled.output] == ["reject"] * 3


def test_a_collecting_wait_that_times_out_says_what_it_took() -> None:
    run = Run(VOTES)
    run.signal("approve", 1)
    run.fire("r/vote#1/timeout")
    settled = run.settled
    assert settled is not None and settled.error is not None
    assert settled.error.type == "timeout"
    assert settled.error.message == "3 signal(s) 'approve' or 'reject' not received within 10000 ms"
    assert settled.error.details == {"received": [{"signal": "approve", "payload": 1}]}


def test_buffered_signals_are_taken_at_once_by_name_order_and_condition() -> None:
    run = Run(
        """
flow: f
steps:
  - {id: hold, await_signal: {signal: go}}
  - id: pick
    await_signal: {signals: [b, a], count: 2, where: "payload != `0`"}
output: "${steps.pick.output}"
"""
    )
    for name, payload in (("a", 1), ("b", 0), ("b", 2), ("a", 3)):
        run.signal(name, payload)
    run.signal("go")
    settled = run.settled
    assert settled is not None and settled.output == [
        {"signal": "b", "payload": 2},
        {"signal": "a", "payload": 1},
    ]
    assert run.state.waiting.signals.get("b") == (0,)
    assert run.state.waiting.signals.get("a") == (3,)


def test_a_count_with_one_name_collects_its_payloads() -> None:
    run = Run("flow: f\nsteps:\n  - {id: w, await_signal: {signal: s, count: 2}}\n")
    run.signal("s", "x")
    run.signal("s", "y")
    assert run.result("w")["output"] == [
        {"signal": "s", "payload": "x"},
        {"signal": "s", "payload": "y"},
    ]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("{signal: a, signals: [b]}", "exactly one of 'signal' or 'signals'"),
        ("{timeout_ms: 5}", "exactly one of 'signal' or 'signals'"),
        ("{signals: []}", "signals must not be empty"),
        ("{signals: [a, a]}", "signals must be distinct"),
        ("{signal: a, count: 0}", "count"),
        ("{signal: a, until: 'received[?'}", "until"),
    ],
)
def test_a_bad_wait_is_refused_with_its_place(body: str, message: str) -> None:
    spec = f"flow: f\nsteps:\n  - {{id: w, await_signal: {body}}}\n"
    with pytest.raises(SpecError) as info:
        flowcore.parse_flow(spec, "f.yaml")
    assert "f.yaml:3" in str(info.value) and message in str(info.value), str(info.value)


def test_the_diagram_names_every_signal_and_the_count() -> None:
    graph = build_graph(flowcore.parse_flow(VOTES))
    labels: Any = [" ".join(node.lines) for node in graph.nodes]
    assert any("await_signal approve | reject x3 (timeout 10s)" in label for label in labels)
