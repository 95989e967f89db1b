"""Errors a flow raises and passes on (language.md §4.15 fail, §9): a ``fail``
step's error, a child run's error as its parent's cause, ``catch`` and
``retry`` matching along the cause chain, every attempt's error on a retried
step that failed, and a zero backoff that retries at once."""

from __future__ import annotations

from typing import Any

import pytest

import flowcore
from flowcore import ErrorInfo, SpecError
from tests.harness import Run

TOOLS = "tools: {t: {class: idempotent}}\n"


def test_fail_ends_the_run_with_the_error_the_flow_makes() -> None:
    run = Run(
        "flow: f\n"
        + TOOLS
        + """
steps:
  - id: look
    call_tool: {tool: t}
  - id: reject
    fail:
      type: order-rejected
      message: "order ${input.id}: ${steps.look.output.reason}"
      details: {id: "${input.id}", reason: "${steps.look.output.reason}", n: 3}
""",
        {"id": 7},
    )
    run.ok("r/look#1", {"reason": "too late"})
    settled = run.settled
    assert settled is not None and settled.status == "failed"
    assert flowcore.effect_to_wire(run.effects[0])["error"] == {
        "type": "order-rejected",
        "message": "order 7: too late",
        "details": {"id": 7, "reason": "too late", "n": 3},
    }
    assert run.result("reject") == {
        "status": "failed",
        "output": None,
        "error": {
            "type": "order-rejected",
            "message": "order 7: too late",
            "retryable": False,
            "details": {"id": 7, "reason": "too late", "n": 3},
        },
    }


def test_a_try_catches_a_fail_by_its_type_and_sees_its_details() -> None:
    run = Run(
        "flow: f\n"
        + TOOLS
        + """
steps:
  - id: g
    try:
      - {id: no, fail: {type: "${input.kind}", details: [1, 2]}}
      - {id: never, call_tool: {tool: t}}
    catch:
      - errors: [other]
        steps: [{id: h0, call_tool: {tool: t, input: 0}}]
      - errors: [quota]
        steps: [{id: h1, call_tool: {tool: t, input: "${error.details}"}}]
""",
        {"kind": "quota"},
    )
    assert run.wire() == [
        {"kind": "call-tool", "tool": "t", "input": [1, 2], "idempotencyKey": "r/h1#1"}
    ]


def test_a_fail_type_that_is_not_text_is_an_expression_error() -> None:
    run = Run("flow: f\nsteps:\n  - {id: x, fail: {type: '${input}'}}\n", 5)
    settled = run.settled
    assert settled is not None and settled.error is not None
    assert settled.error.type == "expression-error"
    assert "fail.type must be a non-empty text" in settled.error.message
    assert "got 5" in settled.error.message


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ("{}", "type"),
        ("{type: x, retryable: maybe}", "retryable"),
        ("{type: x, cause: y}", "cause"),
        ("[x]", "fail"),
    ],
)
def test_a_bad_fail_step_is_refused_with_its_place(body: str, where: str) -> None:
    with pytest.raises(SpecError) as info:
        flowcore.parse_flow(f"flow: f\nsteps:\n  - {{id: x, fail: {body}}}\n", "f.yaml")
    assert "f.yaml:3" in str(info.value)
    assert where in str(info.value)


CHILD = (
    "flow: f\n"
    + TOOLS
    + """
steps:
  - id: sub
    run_subflow: {flow: child}
"""
)


def test_a_failing_child_s_error_reaches_its_parent_as_the_cause() -> None:
    run = Run(CHILD)
    cause = ErrorInfo(type="order-rejected", message="no", details={"id": 7})
    run.child("r/sub#1", "failed", error=cause)
    settled = run.settled
    assert settled is not None and settled.error is not None
    assert flowcore.effect_to_wire(run.effects[0])["error"] == {
        "type": "subflow-failed",
        "message": "subflow r/sub#1 settled failed",
        "cause": {"type": "order-rejected", "message": "no", "details": {"id": 7}},
    }


def test_catch_matches_on_a_type_down_the_cause_chain() -> None:
    run = Run(
        "flow: f\n"
        + TOOLS
        + """
steps:
  - id: g
    try:
      - {id: sub, run_subflow: {flow: child}}
    catch:
      - errors: [order-rejected]
        steps: [{id: h, call_tool: {tool: t, input: "${error.cause.cause.details}"}}]
"""
    )
    deep = ErrorInfo(type="order-rejected", message="no", details={"id": 7})
    middle = ErrorInfo(type="subflow-failed", message="grandchild failed", cause=deep)
    run.child("r/sub#1", "failed", error=middle)
    assert run.wire() == [
        {"kind": "call-tool", "tool": "t", "input": {"id": 7}, "idempotencyKey": "r/h#1"}
    ]


def test_retry_matches_on_the_cause_and_the_last_error_lists_every_attempt() -> None:
    run = Run(
        "flow: f\n"
        + TOOLS
        + """
steps:
  - id: sub
    run_subflow: {flow: child}
    retry: {max_attempts: 3, initial_interval_ms: 10, errors: [http-503]}
"""
    )
    busy = ErrorInfo(type="http-503", message="busy", retryable=True)
    run.child("r/sub#1", "failed", error=busy, at=0)
    run.fire("r/sub#1/backoff")
    run.child("r/sub#2", "failed", error=busy)
    run.fire("r/sub#2/backoff")
    run.child("r/sub#3", "cancelled")
    error = flowcore.effect_to_wire(run.effects[0])["error"]
    cause: dict[str, Any] = {"type": "http-503", "message": "busy", "retryable": True}
    one: dict[str, Any] = {
        "type": "subflow-failed",
        "message": "subflow r/sub#1 settled failed",
        "cause": cause,
    }
    two = {**one, "message": "subflow r/sub#2 settled failed"}
    last = {"type": "subflow-cancelled", "message": "subflow r/sub#3 settled cancelled"}
    assert error == {**last, "attempts": [one, two, last]}
    assert run.result("sub")["error"]["attempts"] == [
        {**one, "retryable": False},
        {**two, "retryable": False},
        {**last, "retryable": False},
    ]


def test_a_step_that_fails_without_a_retry_has_no_attempts() -> None:
    run = Run("flow: f\n" + TOOLS + "steps:\n  - {id: a, call_tool: {tool: t}}\n")
    run.fail("r/a#1")
    assert "attempts" not in flowcore.effect_to_wire(run.effects[0])["error"]


def test_a_zero_backoff_retries_at_once_without_a_timer() -> None:
    run = Run(
        "flow: f\n"
        + TOOLS
        + """
steps:
  - id: a
    call_tool: {tool: t}
    retry: {max_attempts: 3, initial_interval_ms: 0, errors: ["*"]}
"""
    )
    assert run.keys() == ["r/a#1"]
    assert run.fail("r/a#1") and run.wire() == [
        {"kind": "call-tool", "tool": "t", "idempotencyKey": "r/a#2"}
    ]
    run.fail("r/a#2")
    assert run.keys() == ["r/a#3"]
    run.fail("r/a#3", type="last")
    error = flowcore.effect_to_wire(run.effects[0])["error"]
    assert [a["type"] for a in error["attempts"]] == ["boom", "boom", "last"]
    assert all(flowcore.effect_to_wire(e)["kind"] != "sleep" for e in run.history)


def test_a_fail_step_retried_at_once_fails_after_its_attempts() -> None:
    run = Run(
        """
flow: f
steps:
  - id: x
    fail: {type: "try-${run.attempt}"}
    retry: {max_attempts: 3, initial_interval_ms: 0, errors: ["*"]}
"""
    )
    settled = run.settled
    assert settled is not None and settled.error is not None
    assert settled.error.type == "try-3"
    assert [a.type for a in settled.error.attempts] == ["try-1", "try-2", "try-3"]


def test_errors_with_causes_round_trip_the_wire() -> None:
    error = ErrorInfo(
        type="a",
        message="m",
        details={"k": [1, None]},
        cause=ErrorInfo(type="b", cause=ErrorInfo(type="c")),
        attempts=(ErrorInfo(type="a"),),
    )
    event = flowcore.SubflowSettled(idempotency_key="k", status="failed", error=error, at_ms=1)
    wire: dict[str, Any] = flowcore.event_to_wire(event)
    assert flowcore.event_from_wire(wire) == event
    assert flowcore.check_event(event) is event
