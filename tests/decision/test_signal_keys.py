"""Signals correlated by a key the run chose (``await_signal.key``), and a
signal sent to another run as an effect (``signal_run``): language.md §4.6,
§4.16."""

from __future__ import annotations

import pytest

import flowcore
from flowcore import SignalReceived, SpecError
from flowcore.diagram import build_graph, to_mermaid
from flowcore.testing import Fault, Signal, simulate
from tests.harness import Run

KEYED = """
flow: f
steps:
  - id: paid
    await_signal: {signal: payment, key: "order-${input.order}"}
output: "${steps.paid.output}"
"""

SENDER = """
flow: sender
steps:
  - id: tell
    signal_run:
      run: "${input.to}"
      signal: payment
      payload: {amount: "${input.amount}"}
      key: "order-${input.order}"
output: "${steps.tell.output}"
"""


def keyed(run: Run, key: str | None, payload: object) -> None:
    run.send(SignalReceived(signal="payment", payload=payload, key=key, at_ms=run.now))


def test_a_keyed_wait_takes_only_its_own_key() -> None:
    run = Run(KEYED, {"order": 7})
    assert run.wire() == [
        {
            "kind": "await-signal",
            "signal": "payment",
            "idempotencyKey": "r/paid#1",
            "key": "order-7",
        }
    ]
    [wait] = flowcore.waiting_for(run.state).signals
    assert wait.signal_key == "order-7"
    keyed(run, None, "no key")  # buffered: a wait with a key takes only its key
    keyed(run, "order-8", "another order")  # buffered under its own key
    assert run.settled is None
    keyed(run, "order-7", {"amount": 3})
    settled = run.settled
    assert settled is not None and settled.output == {"amount": 3}
    assert flowcore.waiting_for(run.state).buffered == {"payment": ("no key",)}
    assert run.state.waiting.keyed_signals  # order-8 is still kept for its own wait


def test_a_wait_without_a_key_never_takes_a_keyed_signal() -> None:
    run = Run("flow: f\nsteps: [{id: w, await_signal: {signal: payment}}]\n")
    keyed(run, "order-7", 1)
    assert run.settled is None
    keyed(run, None, 2)
    settled = run.settled
    assert settled is not None and settled.status == "completed"
    assert run.result("w")["output"] == 2


def test_a_keyed_signal_buffered_before_the_wait_is_taken_at_once() -> None:
    flow = """
flow: f
steps:
  - {id: first, await_signal: {signal: go}}
  - {id: paid, await_signal: {signal: payment, key: "order-${input.order}"}}
output: "${steps.paid.output}"
"""
    run = Run(flow, {"order": 1})
    keyed(run, "order-2", "not mine")
    keyed(run, "order-1", "mine")
    run.signal("go")
    settled = run.settled
    assert settled is not None and settled.output == "mine"
    kinds = [flowcore.effect_to_wire(e)["kind"] for e in run.history]
    assert kinds == ["await-signal", "settled"]  # the second wait took it at once


def test_parallel_waits_on_one_name_each_get_their_own_key() -> None:
    flow = """
flow: f
steps:
  - id: p
    parallel:
      branches:
        a: [{id: wa, await_signal: {signal: done, key: a}}]
        b: [{id: wb, await_signal: {signal: done, key: b}}]
output: "${steps.p.output}"
"""
    run = Run(flow)
    run.send(SignalReceived(signal="done", payload="for b", key="b", at_ms=0))
    run.send(SignalReceived(signal="done", payload="for a", key="a", at_ms=0))
    settled = run.settled
    assert settled is not None and settled.output == {"a": "for a", "b": "for b"}


def test_a_key_that_is_not_a_usable_text_fails_the_step() -> None:
    flow = "flow: f\nsteps: [{id: w, await_signal: {signal: s, key: '${input.k}'}}]\n"
    run = Run(flow, {"k": ""})
    settled = run.settled
    assert settled is not None and settled.error is not None
    assert settled.error.type == "invalid-signal-key"


def test_a_signal_key_too_long_is_rejected_on_the_wire() -> None:
    with pytest.raises(flowcore.DataError, match=r"\$\.key"):
        flowcore.check_event(SignalReceived(signal="s", key="k" * 4097, at_ms=0))


def test_signal_run_emits_one_work_effect_and_costs_a_step() -> None:
    run = Run(SENDER, {"to": "r-9", "amount": 5, "order": 7})
    assert run.wire() == [
        {
            "kind": "signal-run",
            "runId": "r-9",
            "signal": "payment",
            "payload": {"amount": 5},
            "key": "order-7",
            "idempotencyKey": "r/tell#1",
        }
    ]
    assert flowcore.waiting_for(run.state).used_steps == 1
    run.ok("r/tell#1", {"run_id": "r-9"})
    settled = run.settled
    assert settled is not None and settled.output == {"run_id": "r-9"}


def test_signal_run_fails_with_the_hosts_typed_error() -> None:
    run = Run(SENDER, {"to": "r-9", "amount": 5, "order": 7})
    run.fail("r/tell#1", "run-settled")
    settled = run.settled
    assert settled is not None and settled.error is not None
    assert settled.error.type == "run-settled"


def test_signal_run_is_reissued_with_its_key_after_an_unknown_outcome() -> None:
    run = Run(SENDER, {"to": "r-9", "amount": 5, "order": 7})
    effects = run.unknown("r/tell#1")
    assert [e.idempotency_key for e in effects if hasattr(e, "idempotency_key")] == ["r/tell#1"]


def test_simulator_delivers_to_a_child_once_even_when_reissued() -> None:
    parent = """
flow: parent
steps:
  - id: both
    parallel:
      branches:
        child: [{id: c, run_subflow: {flow: child, input: {k: x}}}]
        tell:
          - id: t
            signal_run: {run: "${run.id}/c#1", signal: go, payload: 1, key: x}
output: "${steps.both.output}"
"""
    child = """
flow: child
steps: [{id: w, await_signal: {signal: go, key: "${input.k}", count: 2, timeout_ms: 1h}}]
output: "${steps.w.output}"
"""
    faults = [Fault("unknown", target="go", calls=(1,))]
    trajectory = simulate(parent, subflows={"child": child}, faults=faults, run_id="r")
    assert trajectory.status == "failed"  # delivered once: the child waited for a second
    assert trajectory.histories["r/c#1"].state.settled is not None
    got = [e for e in trajectory.histories["r/c#1"].events() if isinstance(e, SignalReceived)]
    assert [(e.signal, e.key, e.payload) for e in got] == [("go", "x", 1)]


def test_simulator_signal_run_to_an_unknown_or_settled_run() -> None:
    unknown = simulate(SENDER, {"to": "nobody", "amount": 1, "order": 1})
    assert unknown.error is not None and unknown.error.type == "unknown-run"
    to_self = """
flow: f
steps:
  - id: p
    parallel:
      branches:
        a: [{id: c, run_subflow: {flow: quick}}]
        b:
          - {id: nap, sleep: {for_ms: 10}}
          - {id: t, signal_run: {run: "${run.id}/c#1", signal: go}}
"""
    quick = "flow: quick\nsteps: [{id: n, sleep: {for_ms: 1}}]\n"
    settled = simulate(to_self, subflows={"quick": quick}, run_id="r")
    assert settled.error is not None and settled.error.type == "run-settled"


def test_simulator_scripted_keyed_signals() -> None:
    trajectory = simulate(
        KEYED,
        {"order": 2},
        signals=[
            Signal("payment", "a", at_ms=1, key="order-1"),
            Signal("payment", "b", 2, key="order-2"),
        ],
    )
    assert trajectory.output == "b"


def test_signal_run_spec_errors_name_the_path() -> None:
    with pytest.raises(SpecError) as info:
        flowcore.parse_flow("flow: f\nsteps:\n  - id: s\n    signal_run: {signal: go, when: 1}\n")
    text = str(info.value)
    assert "steps[0].signal_run.run" in text and "missing required key 'run'" in text
    assert "steps[0].signal_run.when" in text
    with pytest.raises(SpecError, match=r"steps\[0\]\.await_signal\.key"):
        flowcore.parse_flow(
            "flow: f\nsteps:\n  - id: w\n    await_signal: {signal: go, key: '${x'}\n"
        )


def test_the_diagram_shows_keys_and_signal_run() -> None:
    text = to_mermaid(build_graph(flowcore.parse_flow(SENDER)))
    assert "signal_run payment" in text
    text = to_mermaid(build_graph(flowcore.parse_flow(KEYED)))
    assert "key order-${input.order}" in text


def test_keyed_buffers_and_waits_survive_a_snapshot_and_a_timeout() -> None:
    flow = """
flow: f
steps:
  - id: t
    try:
      - {id: w, await_signal: {signal: payment, key: mine, timeout_ms: 10}}
    catch: [{errors: [timeout], steps: [{id: again, await_signal: {signal: payment}}]}]
"""
    run = Run(flow)
    keyed(run, "theirs", "kept")
    state = flowcore.decode_state(flowcore.encode_state(run.state), run.flow)
    assert state.waiting.keyed_signals == run.state.waiting.keyed_signals
    assert state.waiting.keyed_waiters == run.state.waiting.keyed_waiters
    assert state.waiting.keyed_waiters  # the wait is open under its name and key
    run.state = state
    run.fire("r/w#1/timeout")
    assert run.settled is None
    assert not run.state.waiting.keyed_waiters  # the timed-out wait is off its name and key
    keyed(run, "mine", "too late")  # buffered: no wait with that key now
    assert run.settled is None
    keyed(run, None, "plain")
    settled = run.settled
    assert settled is not None and settled.status == "completed"
    assert len(run.state.waiting.keyed_signals) == 2  # theirs and mine, each kept
