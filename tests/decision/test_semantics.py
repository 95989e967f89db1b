"""Decision levels (language.md §15.1): a run keeps the level it started at, so
code that changed a decision since decides it, and replays its log, as before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import flowcore
from flowcore import EffectFailed, ErrorInfo
from tests.harness import Run

ROOT = Path(__file__).resolve().parents[2]

EAGER = """
flow: eager
tools: {flaky: {class: idempotent}}
steps:
  - id: call
    call_tool: {tool: flaky}
    retry: {max_attempts: 2, initial_interval_ms: 0, errors: ["*"]}
"""


def test_new_runs_start_at_the_current_level_and_record_it() -> None:
    run = Run(EAGER)
    assert run.state.run.semantics == flowcore.SEMANTICS == 3
    flow = flowcore.parse_flow(EAGER)
    d = flowcore.start(flow, None, run_id="r", now_ms=0)
    records = flowcore.Recorder("r").started(flow, None, 0, d)
    assert records[0].data["semantics"] == 3


def test_a_level_1_run_keeps_the_zero_length_timer_and_no_attempts() -> None:
    run = Run(EAGER, semantics=1)
    run.fail("r/call#1", at=5)
    assert run.wire() == [{"kind": "sleep", "untilMs": 5, "idempotencyKey": "r/call#1/backoff"}]
    run.fire("r/call#1/backoff")
    run.fail("r/call#2")
    settled = run.settled
    assert settled is not None and settled.error is not None
    assert settled.error.attempts == ()
    flow = flowcore.parse_flow(EAGER)
    d = flowcore.start(flow, None, run_id="r", now_ms=0, semantics=1)
    assert "semantics" not in flowcore.Recorder("r").started(flow, None, 0, d)[0].data


def _level_1_log(tmp_path: Path) -> Path:
    """A log as a flowcore without levels wrote it: no ``semantics`` in run.started."""
    flow = flowcore.parse_flow(EAGER)
    recorder = flowcore.Recorder("r")
    d = flowcore.start(flow, None, run_id="r", now_ms=0, semantics=1)
    records = recorder.started(flow, None, 0, d)
    state = d.state
    for event in (
        EffectFailed(idempotency_key="r/call#1", error=ErrorInfo(type="busy"), at_ms=1),
        flowcore.TimerFired(idempotency_key="r/call#1/backoff", at_ms=1),
        EffectFailed(idempotency_key="r/call#2", error=ErrorInfo(type="busy"), at_ms=2),
    ):
        d = flowcore.advance(state, event)
        state = d.state
        records.extend(recorder.applied(event, d))
    path = tmp_path / "old.ndjson"
    path.write_bytes(flowcore.encode_records(records))
    return path


def test_a_log_written_before_levels_replays_without_a_divergence(tmp_path: Path) -> None:
    path = _level_1_log(tmp_path)
    assert b'"semantics"' not in path.read_bytes()
    report = flowcore.replay(path.read_bytes(), flowcore.parse_flow(EAGER))
    assert report.status == "failed"


def test_a_log_of_a_newer_level_is_refused_with_both_levels(tmp_path: Path) -> None:
    flow = flowcore.parse_flow(EAGER)
    d = flowcore.start(flow, None, run_id="r", now_ms=0)
    records = flowcore.Recorder("r").started(flow, None, 0, d)
    line = json.loads(flowcore.encode_records(records).splitlines()[0])
    line["data"]["semantics"] = 99
    newer = rf"newer flowcore \(decision level 99; this one decides up to {flowcore.SEMANTICS}\)"
    with pytest.raises(flowcore.ReplayError, match=newer):
        flowcore.replay(json.dumps(line).encode() + b"\n", flow)
    with pytest.raises(ValueError, match="semantics 99"):
        flowcore.start(flow, None, semantics=99)
    with pytest.raises(ValueError, match="an integer from 1"):
        flowcore.start(flow, None, semantics=0)


def test_the_temporal_host_marks_every_level() -> None:
    pytest.importorskip("temporalio")
    from flowcore_temporal import _workflow

    levels = [level for level, _ in _workflow._SEMANTICS_PATCHES]
    assert levels == list(range(2, flowcore.SEMANTICS + 1))


LEVEL_3 = """
flow: three
tools:
  lookup:
    class: readonly
    schedulable: true
    input_schema: {type: object, required: [id], properties: {id: {type: string}}}
steps:
  - id: s
    schedule: {tool: lookup, input: {id: '${input.id}'}, delay_ms: 5}
  - id: tell
    signal_run: {run: r-9, signal: "done-${input.tag}"}
"""

AT_ONCE = """
flow: again
steps:
  - id: next
    switch:
      - if: "run.incarnation == null"
        steps: [{id: again, continue_as_new: {}}]
"""


def test_level_3_decisions_and_the_level_2_ones_a_run_in_flight_keeps() -> None:
    flow = flowcore.parse_flow(LEVEL_3)
    # Level 3: a bad scheduled call fails alone, and the signal's name is a template.
    d = flowcore.start(flow, {"id": 5, "tag": "x"}, run_id="r", now_ms=0)
    assert [flowcore.effect_to_wire(e)["signal"] for e in d.effects] == ["done-x"]
    (call,) = flowcore.scheduled_calls(d.state)
    assert (call.status, call.error and call.error.type) == ("failed", "invalid-input")
    # Level 2: the schedule step fails the run; a good input sends the name as written.
    old = flowcore.start(flow, {"id": 5, "tag": "x"}, run_id="r", now_ms=0, semantics=2)
    (settled,) = old.effects
    assert isinstance(settled, flowcore.Settled) and settled.status == "failed"
    assert settled.error is not None and settled.error.type == "invalid-input"
    old = flowcore.start(flow, {"id": "5", "tag": "x"}, run_id="r", now_ms=0, semantics=2)
    sent = [w["signal"] for w in map(flowcore.effect_to_wire, old.effects) if "signal" in w]
    assert sent == ["done-${input.tag}"]
    # An idle incarnation continues at level 3 and is refused at level 2.
    again = flowcore.parse_flow(AT_ONCE)
    (cont,) = flowcore.start(again, None, run_id="r", now_ms=0).effects
    assert flowcore.effect_to_wire(cont)["kind"] == "continue-as-new"
    (refused,) = flowcore.start(again, None, run_id="r", now_ms=0, semantics=2).effects
    assert isinstance(refused, flowcore.Settled) and refused.error is not None
    assert refused.error.type == "continue-refused"
    assert "for ever" in refused.error.message
