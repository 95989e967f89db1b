"""``attempt_timeout_ms``: each attempt's own timeout (language.md §6), beside
``timeout_ms`` over all attempts — Temporal's start-to-close and
schedule-to-close, DBOS's step timeout."""

from __future__ import annotations

from typing import Any

import pytest

import flowcore
from flowcore import SpecError
from tests.harness import Run

FLOW = """
flow: f
tools: {slow: {class: idempotent}}
steps:
  - id: call
    call_tool: {tool: slow}
    attempt_timeout_ms: 1s
    timeout_ms: %s
    retry: {max_attempts: 3, initial_interval_ms: 100}
"""


def sleep(key: str, until: int) -> dict[str, Any]:
    return {"kind": "sleep", "untilMs": until, "idempotencyKey": key}


def test_an_attempt_that_times_out_is_retried_under_a_new_key() -> None:
    run = Run(FLOW % "1h")
    assert run.wire() == [
        sleep("r/call/timeout", 3_600_000),
        sleep("r/call#1/attempt-timeout", 1000),
        {"kind": "call-tool", "tool": "slow", "idempotencyKey": "r/call#1"},
    ]
    run.fire("r/call#1/attempt-timeout")
    assert run.wire() == [sleep("r/call#1/backoff", 1100)]
    run.fire("r/call#1/backoff")
    assert run.wire() == [
        sleep("r/call#2/attempt-timeout", 2100),
        {"kind": "call-tool", "tool": "slow", "idempotencyKey": "r/call#2"},
    ]
    run.ok("r/call#1", "late")  # the abandoned attempt's late result changes nothing
    assert run.wire() == []
    run.ok("r/call#2", "done", at=1500)
    settled = run.settled
    assert settled is not None and settled.status == "completed"
    assert run.report() == {"r/call#1": "succeeded", "r/call#2": "succeeded"}


def test_every_attempt_timing_out_fails_with_a_retryable_timeout_listing_each() -> None:
    run = Run(FLOW % "1h")
    for n in (1, 2):
        run.fire(f"r/call#{n}/attempt-timeout")
        run.fire(f"r/call#{n}/backoff")
    run.fire("r/call#3/attempt-timeout")
    settled = run.settled
    assert settled is not None and settled.error is not None
    error = flowcore.effect_to_wire(run.effects[0])["error"]
    assert error["type"] == "timeout" and error["retryable"] is True
    assert error["message"] == "attempt 3 of step 'call' timed out after 1000 ms"
    assert len(error["attempts"]) == 3


def test_the_total_timeout_still_ends_the_step_without_a_retry() -> None:
    run = Run(FLOW % "1500ms")
    run.fire("r/call#1/attempt-timeout")
    run.fire("r/call#1/backoff")
    run.fire("r/call/timeout", at=1500)
    error = flowcore.effect_to_wire(run.effects[0])["error"]
    assert error["message"] == "step 'call' timed out after 1500 ms"
    assert error.get("retryable") is None


def test_an_attempt_that_ends_in_time_drops_its_timer() -> None:
    run = Run(FLOW % "1h" + "  - {id: hold, await_signal: {signal: go}}\n")
    run.ok("r/call#1", "quick", at=10)
    assert flowcore.waiting_for(run.state).timers == ()
    run.fire("r/call#1/attempt-timeout", at=1000)  # the host fired it anyway: ignored
    assert run.wire() == []


def test_a_composite_step_s_attempt_timeout_abandons_its_steps() -> None:
    run = Run(
        """
flow: f
tools: {t: {class: idempotent}}
steps:
  - id: grp
    try:
      - {id: a, call_tool: {tool: t}}
    attempt_timeout_ms: 50
    retry: {max_attempts: 2, initial_interval_ms: 0}
output: "${steps.a.status}"
"""
    )
    assert run.keys() == ["r/grp#1/attempt-timeout", "r/a#1"]
    run.fire("r/grp#1/attempt-timeout")
    assert run.keys() == ["r/grp#2/attempt-timeout", "r/grp#2/a#1"]
    run.ok("r/grp#2/a#1", "ok")
    settled = run.settled
    assert settled is not None and settled.status == "completed"


@pytest.mark.parametrize(
    ("value", "message"),
    [("0", "attempt_timeout_ms must be positive"), ("-5s", "cannot be negative")],
)
def test_a_bad_attempt_timeout_is_refused_with_its_place(value: str, message: str) -> None:
    spec = f"flow: f\nsteps:\n  - {{id: s, sleep: {{for_ms: 1}}, attempt_timeout_ms: {value}}}\n"
    with pytest.raises(SpecError) as info:
        flowcore.parse_flow(spec, "f.yaml")
    assert "f.yaml:3" in str(info.value) and message in str(info.value)
    assert "attempt_timeout_ms" in str(info.value)


def test_an_attempt_timeout_decided_at_run_time() -> None:
    run = Run(
        "flow: f\ntools: {t: {}}\nsteps:\n"
        "  - {id: c, call_tool: {tool: t}, attempt_timeout_ms: '${input.wait}'}\n",
        {"wait": "2s"},
        now_ms=0,
    )
    assert run.wire()[0] == sleep("r/c#1/attempt-timeout", 2000)
    bad = Run(
        "flow: f\ntools: {t: {}}\nsteps:\n"
        "  - {id: c, call_tool: {tool: t}, attempt_timeout_ms: '${input.wait}'}\n",
        {"wait": "soon"},
    )
    settled = bad.settled
    assert settled is not None and settled.error is not None
    assert settled.error.type == "invalid-duration"
