"""Moving a running run to another version of its flow (``flowcore.upgrade``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import flowcore
from flowcore import (
    AwaitSignal,
    CallTool,
    EffectSucceeded,
    Record,
    Recorder,
    SignalReceived,
    SnapshotMismatch,
    UpgradeRefused,
    decode_state,
    effect_to_wire,
    encode_state,
    replay,
)
from flowcore.testing import flow_inputs, flows, moves, play

V1 = """
flow: order
version: 1
tools: {charge: {class: idempotent}, ship: {class: idempotent}}
steps:
  - id: charge
    call_tool: {tool: charge, input: "${input.amount}"}
  - id: approve
    await_signal: {signal: approved}
  - id: ship
    call_tool: {tool: ship, input: "${input.item}"}
output: "${steps.ship.output}"
"""

# v2 that charges another amount: the run already charged, so it diverges.
V2_BAD = V1.replace("version: 1", "version: 2").replace(
    'input: "${input.amount}"', 'input: "${input.total}"'
)


def _v2() -> flowcore.Flow:
    """v2 adds a step after the wait: compatible with a run waiting there."""
    text = V1.replace("version: 1", "version: 2").replace(
        'output: "${steps.ship.output}"',
        "  - id: notify\n    call_tool: {tool: ship, input: notified}\n"
        'output: "${steps.notify.output}"',
    )
    return flowcore.parse_flow(text)


class Run:
    """A run of ``flow`` driven by hand, its log recorded."""

    def __init__(self, flow: flowcore.Flow, run_id: str = "o-1") -> None:
        self.recorder = Recorder(run_id)
        self.input = {"amount": 5, "item": "book", "total": 7}
        d = flowcore.start(flow, self.input, run_id=run_id, now_ms=0)
        self.records: list[Record] = self.recorder.started(flow, self.input, 0, d)
        self.state = d.state
        self.effects = d.effects

    def send(self, event: Any) -> None:
        d = flowcore.advance(self.state, event)
        self.records += self.recorder.applied(event, d)
        self.state, self.effects = d.state, d.effects


def waiting_run() -> Run:
    """A v1 run that charged and waits for its approval."""
    run = Run(flowcore.parse_flow(V1))
    run.send(EffectSucceeded(idempotency_key="o-1/charge#1", output="ok", at_ms=1))
    assert isinstance(run.effects[0], AwaitSignal)
    return run


def test_a_compatible_version_takes_the_run_over() -> None:
    v1, v2 = flowcore.parse_flow(V1), _v2()
    run = waiting_run()
    up = flowcore.upgrade(run.records, v2)
    assert up.changed and up.run_id == "o-1" and up.flow_id == "order"
    assert (up.from_spec_hash, up.spec_hash, up.version) == (v1.spec_hash, v2.spec_hash, 2)
    assert up.at == len(run.records)
    assert [effect_to_wire(e) for e in up.pending] == [effect_to_wire(e) for e in run.effects]
    # The new state pins the new spec: its snapshot decodes only against it.
    snapshot = encode_state(up.state)
    assert decode_state(snapshot, v2) == up.state
    with pytest.raises(SnapshotMismatch):
        decode_state(snapshot, v1)
    # From there the run goes on under v2: it reaches the step v2 added.
    recorder = Recorder("o-1")
    recorder.index = up.at
    records, state = list(run.records), up.state
    script: list[Any] = [
        SignalReceived(signal="approved", at_ms=2),
        EffectSucceeded(idempotency_key="o-1/ship#1", output="shipped", at_ms=3),
        EffectSucceeded(idempotency_key="o-1/notify#1", output="told", at_ms=4),
    ]
    tools = []
    for event in script:
        d = flowcore.advance(state, event)
        records += recorder.applied(event, d)
        state = d.state
        tools += [e.tool for e in d.effects if isinstance(e, CallTool)]
    assert tools == ["ship", "ship"] and state.status == "completed"
    assert state.settled is not None and state.settled.output == "told"
    # The whole log, before and after the move, replays against v2 (log.md §9).
    report = replay(records, v2)
    assert report.ok and not report.spec_matches and report.status == "completed"
    assert report.spec_hash == v1.spec_hash and report.replayed_spec_hash == v2.spec_hash
    # Against v1 it diverges where v2 first acted otherwise: the notify call.
    with pytest.raises(flowcore.ReplayDivergence) as bad:
        replay(records, v1)
    assert bad.value.actual is not None and bad.value.actual["kind"] == "settled"
    assert bad.value.expected["idempotencyKey"] == "o-1/notify#1"


def test_a_version_that_changes_a_step_already_run_is_refused() -> None:
    run = waiting_run()
    with pytest.raises(UpgradeRefused) as refused:
        flowcore.upgrade(run.records, flowcore.parse_flow(V2_BAD))
    exc = refused.value
    charge = next(r for r in run.records if r.type == "effect.emitted")
    assert exc.reason == "diverged" and exc.run_id == "o-1"
    assert exc.index == charge.index
    assert exc.expected == charge.data and exc.expected["input"] == 5
    assert exc.actual["kind"] == "call-tool" and exc.actual["input"] == 7
    assert exc.divergence is not None and exc.divergence.index == exc.index
    assert f"at index {charge.index}" in str(exc) and "version 2 of flow 'order'" in str(exc)


def test_a_version_that_adds_work_where_the_run_waits_is_refused() -> None:
    """v2 also asks a question in the decision the run waits in: the host never asked it."""
    run = waiting_run()
    text = V1.replace("version: 1", "version: 2").replace(
        "  - id: approve\n",
        "  - id: extra\n    call_tool: {tool: ship, input: extra}\n  - id: approve\n",
    )
    with pytest.raises(UpgradeRefused) as refused:
        flowcore.upgrade(run.records, flowcore.parse_flow(text))
    assert refused.value.reason == "diverged"
    assert refused.value.actual["idempotencyKey"] == "o-1/extra#1"
    assert refused.value.expected["kind"] == "await-signal"


def test_the_same_spec_is_nothing_to_do() -> None:
    run = waiting_run()
    up = flowcore.upgrade(run.records, flowcore.parse_flow(V1))
    assert not up.changed and up.from_spec_hash == up.spec_hash
    assert [effect_to_wire(e) for e in up.pending] == [effect_to_wire(e) for e in run.effects]
    # A host that moved the run before says what it is pinned to.
    up = flowcore.upgrade(run.records, _v2(), pinned=_v2().spec_hash)
    assert not up.changed


def test_log_bytes_are_read_too() -> None:
    run = waiting_run()
    up = flowcore.upgrade(flowcore.encode_records(run.records), _v2())
    assert up.changed and len(up.pending) == 1


@pytest.mark.parametrize(
    ("case", "reason", "words"),
    [
        ("other-flow", "other-flow", "is a run of flow 'order', not 'other'"),
        ("settled", "settled", "settled at index"),
        ("not-one-run", "not-one-run", "is not one of run 'o-1''s"),
        ("empty", "not-one-run", "needs its log from a run.started on"),
        ("no-start", "not-one-run", "needs its log from a run.started on"),
    ],
)
def test_what_cannot_move_is_refused_with_its_reason(case: str, reason: str, words: str) -> None:
    run = waiting_run()
    flow = _v2()
    records = list(run.records)
    if case == "other-flow":
        flow = flowcore.parse_flow(V1.replace("flow: order", "flow: other"))
    elif case == "settled":
        run.send(SignalReceived(signal="approved", at_ms=2))
        run.send(EffectSucceeded(idempotency_key="o-1/ship#1", output="x", at_ms=3))
        records = run.records
        assert records[-1].type == "run.settled"
    elif case == "not-one-run":
        other = Run(flowcore.parse_flow(V1), "o-2").records
        records = [*records, *(Record(r.type, len(records), r.run_id, 9, r.data) for r in other)]
    elif case == "empty":
        records = []
    elif case == "no-start":
        records = records[1:]
    with pytest.raises(UpgradeRefused) as refused:
        flowcore.upgrade(records, flow)
    assert refused.value.reason == reason
    assert words in str(refused.value)


@pytest.mark.parametrize("case", ["version-compatible", "version-divergent"])
def test_upgrade_agrees_with_replay_on_the_version_vectors(case: str) -> None:
    folder = Path(__file__).parents[2] / "specs" / "conformance" / case
    flow = flowcore.parse_flow((folder / "flow.yaml").read_text())
    log = flowcore.decode_log((folder / "log.ndjson").read_bytes())
    records = list(log.records)
    if records[-1].type == "run.settled":  # only a running run moves: its log before the end
        records = records[: max(i for i, r in enumerate(records) if r.type == "event.reported")]
    report = replay(records, flow, raise_on_divergence=False)
    if report.ok:
        up = flowcore.upgrade(records, flow)
        assert up.changed and up.state == report.state
    else:
        assert report.divergence is not None
        with pytest.raises(UpgradeRefused) as refused:
            flowcore.upgrade(records, flow)
        assert refused.value.index == report.divergence.index


def _recorded(flow: flowcore.Flow, inp: Any, ms: list[tuple[int, int]]) -> list[Record] | None:
    """The log of a run of ``flow`` told what ``ms`` generates, or None if the input is refused."""
    try:
        history = play(flow, inp, ms, run_id="SRC", paranoid=False)
    except flowcore.InputError:
        return None
    rec = Recorder("SRC")
    d = flowcore.start(flow, inp, run_id="SRC", now_ms=0)
    records = rec.started(flow, inp, 0, d)
    state = d.state
    for event in history.events():
        try:
            d = flowcore.advance(state, event)
        except flowcore.EventRejected:
            continue
        state = d.state
        records += rec.applied(event, d)
    return records


@settings(max_examples=60, deadline=None)
@given(spec=flows(max_depth=2, max_steps=5), inp=flow_inputs(), ms=moves(30, hostile=False))
def test_property_a_version_that_decides_the_same_takes_every_running_run(
    spec: dict[str, Any], inp: dict[str, Any], ms: list[tuple[int, int]]
) -> None:
    """At every point between decisions of a running run, a new version that only bumps
    ``version`` takes it over: the state is the one ``advance`` reached, pinned to the new
    hash, and it waits for exactly the open effects."""
    flow = flowcore.parse_flow(spec)
    bumped = flowcore.parse_flow({**spec, "version": 7})
    records = _recorded(flow, inp, ms)
    if records is None:
        return
    ends = [r.index for r in records if r.type == "event.reported"] + [len(records)]
    for end in ends:
        prefix = records[:end]
        if prefix[-1].type == "run.settled":
            with pytest.raises(UpgradeRefused, match="settled"):
                flowcore.upgrade(prefix, bumped)
            continue
        report = replay(prefix, flow)
        made = flowcore.upgrade(prefix, bumped)
        assert made.changed and made.at == end and made.version == 7
        assert report.state is not None
        assert encode_state(decode_state(encode_state(made.state), bumped)) == encode_state(
            made.state
        )
        same = flowcore.upgrade(prefix, flow)
        assert not same.changed
        assert encode_state(same.state) == encode_state(report.state)
        view = flowcore.waiting_for(same.state)
        open_keys = {w.key for w in view.work if not w.held}
        open_keys |= {t.key for t in view.timers} | {q.key for q in view.questions}
        open_keys |= {s.key for s in view.signals}
        assert {e.idempotency_key for e in same.pending} == open_keys
        assert [effect_to_wire(e) for e in made.pending] == [
            effect_to_wire(e) for e in same.pending
        ]


@settings(max_examples=200, deadline=None)
@given(
    position=st.integers(0, 12),
    field=st.sampled_from(["data", "type", "runId", "at", "index"]),
    value=st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=8),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
        max_leaves=8,
    ),
)
def test_hostile_records_raise_only_flowcore_errors(position: int, field: str, value: Any) -> None:
    wire = [
        json.loads(line) for line in flowcore.encode_records(waiting_run().records).splitlines()
    ]
    wire[position % len(wire)][field] = value
    records = [
        Record(w.get("type"), w.get("index"), w.get("runId"), w.get("at"), w.get("data"))
        for w in wire
    ]
    try:
        flowcore.upgrade(records, _v2())
    except flowcore.FlowcoreError:
        pass
