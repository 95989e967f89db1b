"""heartbeat_timeout_ms (language.md §6): the work effect carries it, a host's
``heartbeat-timeout`` is a retryable failure of safe work whose details reach
the next attempt, and ``outcome-unknown`` for side-effecting work; spec errors;
the simulator's ``HeartbeatTimeout``."""

from __future__ import annotations

from typing import Any

import pytest

import flowcore
from flowcore import EffectFailed, ErrorInfo
from flowcore.testing import Call, Fault, HeartbeatTimeout, Ok, Simulator

SPEC = """
flow: hb
tools: {scan: {class: idempotent}, post: {}}
steps:
  - id: a
    call_tool: {tool: scan, input: {}}
    heartbeat_timeout_ms: 2s
    retry: {max_attempts: 3, initial_interval_ms: 100}
output: "${steps.a.output}"
"""


def _beat(key: str, details: Any, at: int) -> EffectFailed:
    error = ErrorInfo(type="heartbeat-timeout", message="quiet", details=details)
    return EffectFailed(idempotency_key=key, error=error, at_ms=at)


def test_the_effect_carries_the_timeout_and_a_retry_the_last_details() -> None:
    flow = flowcore.parse_flow(SPEC)
    d = flowcore.start(flow, None, run_id="r", now_ms=0)
    assert flowcore.effect_to_wire(d.effects[0])["heartbeatTimeoutMs"] == 2000
    assert "heartbeatDetails" not in flowcore.effect_to_wire(d.effects[0])
    d = flowcore.advance(d.state, _beat("r/a#1", {"page": 4}, 2500))
    d = flowcore.advance(d.state, flowcore.TimerFired(idempotency_key="r/a#1/backoff", at_ms=2600))
    again = flowcore.effect_to_wire(d.effects[0])
    assert (again["idempotencyKey"], again["heartbeatDetails"]) == ("r/a#2", {"page": 4})
    # A timeout without details keeps the ones the attempt was given.
    d = flowcore.advance(d.state, _beat("r/a#2", None, 5000))
    d = flowcore.advance(d.state, flowcore.TimerFired(idempotency_key="r/a#2/backoff", at_ms=5200))
    assert flowcore.effect_to_wire(d.effects[0])["heartbeatDetails"] == {"page": 4}
    d = flowcore.advance(d.state, _beat("r/a#3", {"page": 9}, 8000))
    settled = flowcore.effect_to_wire(d.effects[-1])
    error = settled["error"]
    assert (error["type"], error["retryable"], error["details"]) == (
        "heartbeat-timeout",
        True,
        {"page": 9},
    )
    # Each attempt's error keeps what its host reported (the second: no details).
    assert [a.get("details") for a in error["attempts"]] == [{"page": 4}, None, {"page": 9}]


def test_side_effecting_work_ends_outcome_unknown_and_is_not_retried() -> None:
    spec = SPEC.replace("class: idempotent", "class: uncertain").replace("tool: scan", "tool: post")
    spec = spec.replace("{scan: {class: uncertain}, post: {}}", "{post: {}}")
    flow = flowcore.parse_flow(spec)
    d = flowcore.start(flow, None, run_id="r", now_ms=0)
    d = flowcore.advance(d.state, _beat("r/a#1", {"sent": 1}, 2500))
    settled = d.effects[-1]
    assert isinstance(settled, flowcore.Settled) and settled.error is not None
    assert settled.error.type == "outcome-unknown"
    assert settled.error.cause is not None
    assert (settled.error.cause.type, settled.error.cause.details) == (
        "heartbeat-timeout",
        {"sent": 1},
    )
    assert [row.status for row in settled.report] == ["uncertain"]


def test_without_heartbeat_timeout_the_error_type_means_nothing_special() -> None:
    flow = flowcore.parse_flow(SPEC.replace("    heartbeat_timeout_ms: 2s\n", ""))
    d = flowcore.start(flow, None, run_id="r", now_ms=0)
    assert "heartbeatTimeoutMs" not in flowcore.effect_to_wire(d.effects[0])
    d = flowcore.advance(d.state, _beat("r/a#1", {"page": 4}, 2500))
    settled = d.effects[-1]
    assert isinstance(settled, flowcore.Settled) and settled.error is not None
    assert (settled.error.type, settled.error.retryable) == ("heartbeat-timeout", False)


@pytest.mark.parametrize(
    ("step", "needle"),
    [
        ("{id: s, sleep: {for_ms: 5}, heartbeat_timeout_ms: 1s}", "only allowed on call_tool"),
        ("{id: s, call_tool: {tool: scan}, heartbeat_timeout_ms: 0}", "must be positive"),
        ("{id: s, call_tool: {tool: scan}, heartbeat_timeout_ms: soon}", "not a duration"),
    ],
)
def test_bad_heartbeat_timeouts_are_spec_errors(step: str, needle: str) -> None:
    spec = f"flow: f\ntools: {{scan: {{}}}}\nsteps:\n  - {step}\n"
    with pytest.raises(flowcore.SpecError) as info:
        flowcore.parse_flow(spec)
    problems = info.value.problems
    assert any(needle in p.message for p in problems), problems
    assert any("heartbeat_timeout_ms" in str(p.path) for p in problems), problems


def test_a_duration_decided_at_run_time() -> None:
    spec = SPEC.replace("heartbeat_timeout_ms: 2s", 'heartbeat_timeout_ms: "${input.beat}"')
    d = flowcore.start(flowcore.parse_flow(spec), {"beat": "3s"}, run_id="r", now_ms=0)
    assert flowcore.effect_to_wire(d.effects[0])["heartbeatTimeoutMs"] == 3000
    d = flowcore.start(flowcore.parse_flow(spec), {"beat": -1}, run_id="r", now_ms=0)
    assert d.effects[-1].error.type == "invalid-duration"  # type: ignore[union-attr]


def test_the_simulator_scripts_a_stall_with_details() -> None:
    def scan(call: Call) -> Any:
        if call.n == 1:
            return HeartbeatTimeout({"page": 3}, after_ms=500)
        return Ok({"resumed": call.effect.heartbeat_details})  # type: ignore[union-attr]

    tr = Simulator(tools={"scan": scan}).run(SPEC)
    assert tr.status == "completed" and tr.output == {"resumed": {"page": 3}}
    failed = [e for e in tr.events() if isinstance(e, EffectFailed)]
    assert [(e.at_ms, e.error.type) for e in failed] == [(2500, "heartbeat-timeout")]


def test_the_heartbeat_timeout_fault() -> None:
    faults = [Fault("heartbeat-timeout", "scan", calls=[1, 2])]
    tr = Simulator(tools={"scan": "done"}, faults=faults).run(SPEC)
    assert tr.output == "done"
    effects = [flowcore.effect_to_wire(e) for e in tr.effects("call-tool")]
    assert [e.get("heartbeatDetails") for e in effects] == [None, {"call": 1}, {"call": 2}]
    # Work without a heartbeat timeout that stalls never answers.
    plain = SPEC.replace("    heartbeat_timeout_ms: 2s\n", "")
    tr = Simulator(tools={"scan": "done"}, faults=faults).run(plain)
    assert tr.status is None or tr.status != "completed"
