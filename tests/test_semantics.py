"""Decision levels (language.md §15.1): a run keeps the level it started at, so
code that changed a decision since decides it, and replays its log, as before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import flowcore
from flowcore import EffectFailed, ErrorInfo
from tests.harness import Run

ROOT = Path(__file__).resolve().parent.parent

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
    assert run.state.run.semantics == flowcore.SEMANTICS == 2
    flow = flowcore.parse_flow(EAGER)
    d = flowcore.start(flow, None, run_id="r", now_ms=0)
    records = flowcore.Recorder("r").started(flow, None, 0, d)
    assert records[0].data["semantics"] == 2


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
    newer = r"newer flowcore \(decision level 99; this one decides up to 2\)"
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
