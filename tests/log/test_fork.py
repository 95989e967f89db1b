"""Forking a run (``flowcore.fork``): the pure level every host builds on."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

import flowcore
from flowcore import (
    EventRejected,
    ForkError,
    HumanAnswered,
    Record,
    Recorder,
    encode_state,
    replay,
)
from flowcore.testing import Call, Fail, Simulator, flow_inputs, flows, moves, play
from scripts.gen_schemas import wire_schemas

from .test_replay import Log, full_triage, ok

SKIPPED = ("event.rejected", "effect.redispatched")


def boundaries(records: list[Record]) -> list[int]:
    """Every index a fork may take the records before."""
    points = [r.index for r in records if r.type in ("event.reported", *SKIPPED)]
    if records[-1].type != "run.settled":
        points.append(len(records))
    return points


def work(f: flowcore.Fork) -> list[str]:
    """The keys a fork waits for, but the wall-clock deadline's."""
    return [e.idempotency_key for e in f.pending if not e.idempotency_key.endswith("/$deadline")]


def unjittered(value: Any) -> Any:
    """``value`` without the due times of retry backoffs.

    A retry's jitter is derived from its key (language.md §5), and a fork's
    keys hold its own run id: its backoff timers may fall due a little
    earlier or later than the source's.
    """
    if isinstance(value, (list, tuple)):
        return [unjittered(v) for v in value]
    if isinstance(value, dict):
        backoff = str(value.get("idempotencyKey", value.get("key", ""))).endswith("/backoff")
        return {
            k: unjittered(v)
            for k, v in value.items()
            if not (backoff and k in ("untilMs", "dueMs"))
        }
    return value


def respelled(records: list[Record] | tuple[Record, ...], source: str, fork: str) -> list[Any]:
    """Records as (type, at, data) with every mention of ``source`` spelled ``fork``."""
    out = []
    for r in records:
        if r.type in SKIPPED:
            continue
        data = dict(r.data) if r.type == "run.started" else r.data
        if r.type == "run.started":
            data.pop("forkedFrom", None)
        text = json.dumps(unjittered(data), sort_keys=True).replace(source, fork)
        out.append((r.type, r.at, text))
    return out


def check_fork(records: list[Record], flow: flowcore.Flow, at: int, source: str) -> None:
    f = flowcore.fork(records, flow, "FRKRUN", at=at)
    assert f.at == at and f.source_run_id == source and f.run_id == "FRKRUN"
    assert f.records[0].data["forkedFrom"] == {"runId": source, "index": at}
    assert all(r.run_id == "FRKRUN" for r in f.records)
    assert [r.index for r in f.records] == list(range(len(f.records)))
    # The fork's log is the source's prefix under the fork's run id ...
    assert respelled(f.records, source, "FRKRUN") == respelled(records[:at], source, "FRKRUN")
    # ... an ordinary log that replays to the fork's state ...
    report = replay(f.records, flow)
    assert report.ok and report.state is not None
    assert report.forked_from == flowcore.ForkedFrom(run_id=source, index=at)
    assert encode_state(report.state) == encode_state(f.state)
    # ... which waits for what the source waited for at that point.
    before = replay(records[:at], flow).state
    assert before is not None
    want = json.dumps(unjittered(msgspec.to_builtins(flowcore.waiting_for(before))))
    got = json.dumps(unjittered(msgspec.to_builtins(flowcore.waiting_for(f.state))))
    # (Outputs carried from the source keep what they say: a detached child the
    # source started is the source's, ``{"run_id": "SRCRUN/s1#1"}``, in the fork too.)
    assert got.replace(source, "FRKRUN") == want.replace(source, "FRKRUN")
    pending = {e.idempotency_key for e in f.pending}
    view = flowcore.waiting_for(f.state)
    assert pending == {w.key for w in view.work if not w.held} | {t.key for t in view.timers} | {
        q.key for q in view.questions
    } | {s.key for s in view.signals}


def test_a_fork_at_every_point_of_a_recorded_log_is_its_prefix_replayed() -> None:
    log = full_triage()
    for at in boundaries(log.records):
        check_fork(log.records, log.flow, at, "r-1")


def test_work_answered_before_the_point_is_reused_and_open_work_is_pending() -> None:
    log = full_triage()
    # Index of the event that answered the question: fork just before it.
    at = next(
        r.index
        for r in log.records
        if r.type == "event.reported" and r.data.get("answer") == "page"
    )
    f = flowcore.fork(log.records, log.flow, "r-2", at=at)
    results = flowcore.replay(f.records, log.flow).trajectory
    succeeded = {e.key for e in results if e.status == "succeeded"}
    assert {"r-2/get#1", "r-2/review/style#1", "r-2/review/security#1"} <= succeeded
    assert work(f) == ["r-2/decide#1"]
    assert f.state.ledger.used_cost == 25  # the usage before the point is the fork's


def test_from_step_is_just_after_the_decision_that_started_the_step() -> None:
    log = full_triage()
    f = flowcore.fork(log.records, log.flow, "r-2", from_step="child")
    assert work(f) == ["r-2/child#1"]
    assert type(f.pending[-1]).__name__ == "RunSubflow"
    assert flowcore.fork_point(log.records, log.flow, from_step="child") == f.at
    # A step started by run.started: nothing is carried over.
    first = flowcore.fork(log.records, log.flow, "r-2", from_step="get")
    assert [r.type for r in first.records if r.type == "event.reported"] == []
    assert work(first) == ["r-2/get#1"]


def test_a_forks_keys_map_back_to_the_sources() -> None:
    assert flowcore.source_key("r-2/per[3]/x#2", "r-2", "r-1") == "r-1/per[3]/x#2"
    with pytest.raises(ValueError, match="does not belong"):
        flowcore.source_key("r-3/x#1", "r-2", "r-1")


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"at": 0}, "index 0 is not after run.started"),
        ({"at": -3}, "index -3 is not after run.started"),
        ({"at": 1}, r"index 1 \(effect.emitted\) is inside the decision of record 0"),
        ({"at": 999}, "index 999 is past the end of the log"),
        ({"at": True}, "a fork point is a record index"),
        ({"from_step": "nope"}, "has no step 'nope'"),
        ({"from_step": "page"}, "step 'page' emitted no effect"),
        ({}, "exactly one of"),
        ({"at": 3, "from_step": "get"}, "exactly one of"),
    ],
)
def test_a_bad_point_is_a_typed_error_naming_it(kw: dict[str, Any], match: str) -> None:
    log = Log(input={"id": "INC-1"}).send(ok("get#1", {"title": "slow"}, 1))
    with pytest.raises(ForkError, match=match) as info:
        flowcore.fork(log.records, log.flow, "r-2", **kw)
    if type(kw.get("at")) is int and "from_step" not in kw:
        assert info.value.index == kw["at"]
    if "from_step" in kw and "at" not in kw:
        assert info.value.step == kw["from_step"]


def test_the_end_of_a_settled_log_and_the_sources_run_id_are_refused() -> None:
    log = full_triage()
    assert log.records[-1].type == "run.settled"
    with pytest.raises(ForkError, match="end of a log that settled"):
        flowcore.fork(log.records, log.flow, "r-2", at=len(log.records))
    with pytest.raises(ForkError, match="run id of its own"):
        flowcore.fork(log.records, log.flow, "r-1", at=3)


def test_a_log_that_does_not_replay_is_refused_as_replay_refuses_it() -> None:
    log = full_triage()
    other = flowcore.parse_flow("flow: other\nsteps: [{id: s, sleep: {for_ms: 1}}]\n")
    with pytest.raises(flowcore.ReplayError):
        flowcore.fork(log.records, other, "r-2", at=3)
    with pytest.raises(ForkError, match=r"from a run\.started on"):
        flowcore.fork(log.records[1:], log.flow, "r-2", at=3)


def test_an_event_the_fork_decides_otherwise_names_its_index() -> None:
    spec = """
flow: byid
tools: {t: {}, u: {}}
steps:
  - id: pick
    switch:
      - if: "run.id == 'r-1'"
        steps: [{id: a, call_tool: {tool: t}}]
      - else: [{id: b, call_tool: {tool: u}}]
  - id: nap
    sleep: {for_ms: 5}
"""
    log = Log(spec).send(ok("a#1", 1, 1))
    with pytest.raises(ForkError, match="cannot apply the event at index 2") as info:
        flowcore.fork(log.records, log.flow, "r-2", at=len(log.records))
    assert info.value.index == 2


def test_signals_timers_children_and_rejected_events_carry_over() -> None:
    log = full_triage()
    at = boundaries(log.records)[-1]  # before the last event: page is pending
    f = flowcore.fork(log.records, log.flow, "r-2", at=at)
    carried = [r.data["kind"] for r in f.records if r.type == "event.reported"]
    assert carried == [
        "effect-succeeded",
        "effect-succeeded",
        "effect-succeeded",
        "human-answered",
        "subflow-settled",
        "timer-fired",
        "signal-received",
        "signal-received",
    ]
    assert "event.rejected" not in {r.type for r in f.records}
    assert work(f) == ["r-2/page#1"]
    assert f.state.ledger.used_cost == 26  # the child's usage came back too


def test_a_fork_is_rejected_by_no_event_it_carries() -> None:
    log = full_triage()
    f = flowcore.fork(log.records, log.flow, "r-2", at=boundaries(log.records)[-1])
    state = f.state
    with pytest.raises(EventRejected):  # the carried answer is spent in the fork too
        flowcore.advance(state, HumanAnswered(idempotency_key="r-2/decide#1", answer="x", at_ms=9))


@settings(max_examples=60, deadline=None)
@given(spec=flows(max_depth=2, max_steps=5), inp=flow_inputs(), ms=moves(30, hostile=False))
@example(  # a detached child's id, the source's, in the input of the work after it
    spec={
        "flow": "generated",
        "tools": {"poke": {}},
        "steps": [
            {"id": "s1", "run_subflow": {"flow": "child", "input": {}, "detached": True}},
            {"id": "s2", "call_tool": {"tool": "poke", "input": {"v": "${steps.s1.output}"}}},
            {"id": "s3", "call_tool": {"tool": "poke", "input": {"v": "${steps.s1.output}"}}},
        ],
    },
    inp={"n": 0},
    ms=[(0, 0)],
)
def test_property_a_fork_at_any_point_is_the_prefix_replayed(
    spec: dict[str, Any], inp: dict[str, Any], ms: list[tuple[int, int]]
) -> None:
    flow = flowcore.parse_flow(spec)
    try:
        history = play(flow, inp, ms, run_id="SRCRUN", paranoid=False)
    except flowcore.InputError:
        return
    rec = Recorder("SRCRUN")
    d = flowcore.start(flow, inp, run_id="SRCRUN", now_ms=0)
    records = rec.started(flow, inp, 0, d)
    state = d.state
    for event in history.events():
        try:
            d = flowcore.advance(state, event)
        except EventRejected as exc:
            records += rec.rejected(event, exc.reason)
            continue
        state = d.state
        records += rec.applied(event, d)
    for at in boundaries(records):
        check_fork(records, flow, at, "SRCRUN")


def test_a_forks_records_validate_against_the_records_schema() -> None:
    log = full_triage()
    f = flowcore.fork(log.records, log.flow, "r-2", at=boundaries(log.records)[-1])
    validator = Draft202012Validator(wire_schemas()["records"])
    for line in flowcore.encode_records(f.records).splitlines():
        errors = list(validator.iter_errors(json.loads(line)))
        assert not errors, errors[0].message
    started = json.loads(flowcore.encode_records(f.records[:1]))
    assert started["data"]["forkedFrom"] == {"runId": "r-1", "index": f.at}


@settings(max_examples=200, deadline=None)
@given(
    position=st.integers(0, 40),
    field=st.sampled_from(["data", "type", "runId", "at", "index"]),
    value=st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=8),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
        max_leaves=8,
    ),
    at=st.integers(-2, 45),
)
def test_hostile_records_raise_only_flowcore_errors(
    position: int, field: str, value: Any, at: int
) -> None:
    log = full_triage()
    wire = [json.loads(line) for line in flowcore.encode_records(log.records).splitlines()]
    wire[position % len(wire)][field] = value
    try:
        records = [
            Record(w.get("type"), w.get("index"), w.get("runId"), w.get("at"), w.get("data"))
            for w in wire
        ]
        flowcore.fork(records, log.flow, "r-2", at=at)
    except flowcore.FlowcoreError:
        pass


def test_the_simulator_runs_a_fork_of_a_simulated_run_with_another_world() -> None:
    spec = """
flow: pay
tools: {echo: {class: readonly}, charge: {}}
steps:
  - {id: a, call_tool: {tool: echo, input: 1}}
  - {id: b, call_tool: {tool: charge, input: 2}}
  - {id: c, call_tool: {tool: echo, input: 3}}
output: "${ {b: steps.b.output, c: steps.c.output} }"
"""
    calls: list[str] = []

    def echo(call: Call) -> Any:
        calls.append(call.key)
        return call.input

    broken = Simulator(tools={"echo": echo, "charge": Fail("down")}).run(spec, run_id="r-1")
    assert broken.status == "failed"
    fixed = Simulator(tools={"echo": echo, "charge": echo})
    forked = fixed.fork(spec, broken.log_of(), "r-2", from_step="b")
    assert (forked.status, forked.output) == ("completed", {"b": 2, "c": 3})
    assert calls == ["r-1/a#1", "r-2/b#1", "r-2/c#1"]  # a is not run again
    log = forked.log_of()
    assert log[0].data["forkedFrom"] == {"runId": "r-1", "index": 4}
    assert replay(log, flowcore.parse_flow(spec)).status == "completed"
    with pytest.raises(ForkError, match="has no step 'zz'"):
        fixed.fork(spec, broken.log_of(), "r-2", from_step="zz")


def _vector(name: str) -> tuple[list[Record], flowcore.Flow]:
    from pathlib import Path

    d = Path(__file__).parents[2] / "specs" / "conformance" / name
    log = flowcore.decode_log((d / "log.ndjson").read_bytes())
    return list(log.records), flowcore.parse_flow((d / "flow.yaml").read_text())


def test_a_fork_of_a_run_that_continued_as_new_begins_with_the_incarnation_of_its_point() -> None:
    """A point in a later incarnation forks that incarnation (language.md §4.18):
    the same fork from the whole log and from a log a host kept from that
    incarnation's run.started on."""
    records, flow = _vector("continue-as-new")
    second = max(r.index for r in records if r.type == "run.started")
    assert second > 0
    tail = records[second:]
    points = [at for at in boundaries(records) if at > second]
    assert points
    for at in points:
        whole = flowcore.fork(records, flow, "FRKRUN", at=at)
        kept = flowcore.fork(tail, flow, "FRKRUN", at=at)
        assert whole.records == kept.records
        assert whole.state.incarnation == 2
        started = whole.records[0].data
        assert started["incarnation"] == 2 and started["forkedFrom"] == {
            "runId": "r-1",
            "index": at,
        }
        report = replay(whole.records, flow)
        assert report.ok and report.state is not None
        assert encode_state(report.state) == encode_state(whole.state)
        before = replay(records[:at], flow).state
        assert before is not None
        want = json.dumps(msgspec.to_builtins(flowcore.waiting_for(before)))
        got = json.dumps(msgspec.to_builtins(flowcore.waiting_for(whole.state)))
        assert got == want.replace("r-1", "FRKRUN")
    # A point before the kept records is refused, naming it.
    with pytest.raises(ForkError, match=f"index {second} is not after run.started"):
        flowcore.fork(tail, flow, "FRKRUN", at=second)
    # from_step: the step's first effect in the latest incarnation that ran it.
    step = flowcore.fork(records, flow, "FRKRUN", from_step="ping")
    assert step.at > second and step.state.incarnation == 2


def test_a_fork_keeps_the_metadata_its_source_started_with() -> None:
    records, flow = _vector("run-metadata")
    f = flowcore.fork(records, flow, "FRKRUN", at=boundaries(records)[0])
    assert f.state.metadata == records[0].data["metadata"]
    assert f.records[0].data["metadata"] == records[0].data["metadata"]
