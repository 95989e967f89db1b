"""``timeout_ms`` on work steps, ``parallel`` and ``try``.

Each test drives one run by hand with ``tests.harness.Run`` and checks the
exact wire effects of each decision (or their idempotency keys) and the final
``settled`` status, output, error and report; ``helpers`` holds their wire forms.
"""

from __future__ import annotations

from tests.harness import Run

from .helpers import call, error, rejected, row, settled, sleep


def test_timeout_on_a_work_step_fails_with_timeout_and_late_result_is_ignored() -> None:
    spec = """
flow: t
tools: {a: {}, b: {}}
steps:
  - id: guard
    try:
      - id: slow
        call_tool: {tool: a}
        timeout_ms: 1000
    catch:
      - errors: [timeout]
        steps: [{id: handle, call_tool: {tool: b, input: "${error}"}}]
output: "${[steps.handle.output, steps.slow]}"
"""
    r = Run(spec, now_ms=100)
    assert r.wire() == [sleep("r/slow/timeout", 1100), call("r/slow#1", "a")]  # timer first
    r.fire("r/slow/timeout")
    assert r.wire() == [
        call(
            "r/handle#1",
            "b",
            {
                "type": "timeout",
                "message": "step 'slow' timed out after 1000 ms",
                "retryable": False,
            },
        )
    ]
    r.ok("r/slow#1", "late")  # accepted once, ignored
    assert r.wire() == []
    rejected(r, lambda: r.ok("r/slow#1", "late"))
    r.ok("r/handle#1", "H")
    failed_slow = {
        "status": "failed",
        "output": None,
        "error": {
            "type": "timeout",
            "message": "step 'slow' timed out after 1000 ms",
            "retryable": False,
        },
    }
    assert r.wire() == [
        settled(
            "completed",
            [row("r/slow#1", "succeeded"), row("r/handle#1", "succeeded", "b")],
            output=["H", failed_slow],  # the late output never replaced the failure
        )
    ]


def test_timeout_timer_of_a_finished_step_is_accepted_and_ignored() -> None:
    spec = """
flow: t
tools: {a: {}}
steps:
  - id: quick
    call_tool: {tool: a}
    timeout_ms: 1000
  - id: next
    call_tool: {tool: a}
"""
    r = Run(spec)
    r.ok("r/quick#1", at=10)
    assert r.wire() == [call("r/next#1", "a")]
    r.fire("r/quick/timeout")
    assert r.wire() == []
    r.ok("r/next#1")
    assert r.settled is not None
    assert r.settled.status == "completed"


def test_timeout_on_a_parallel_abandons_pending_branches() -> None:
    spec = """
flow: t
tools: {a: {}, b: {}}
steps:
  - id: guard
    try:
      - id: both
        timeout_ms: 1000
        parallel:
          branches:
            x: [{id: x1, call_tool: {tool: a}}]
            y: [{id: y1, call_tool: {tool: b}}, {id: y2, call_tool: {tool: b}}]
    catch:
      - errors: ['*']
        steps: [{id: handle, call_tool: {tool: b, input: "${error.type}"}}]
output: "${steps.handle.output}"
"""
    r = Run(spec)
    assert r.wire() == [sleep("r/both/timeout", 1000), call("r/x1#1", "a"), call("r/y1#1", "b")]
    r.ok("r/y1#1", "Y1")
    assert r.wire() == [call("r/y2#1", "b")]
    r.fire("r/both/timeout")
    assert r.wire() == [call("r/handle#1", "b", "timeout")]
    r.ok("r/x1#1", "late")
    r.fail("r/y2#1", "late")
    assert r.wire() == []
    r.ok("r/handle#1", "H")
    assert r.wire() == [
        settled(
            "completed",
            [
                row("r/x1#1", "succeeded"),
                row("r/y1#1", "succeeded", "b"),
                row("r/y2#1", "failed", "b"),
                row("r/handle#1", "succeeded", "b"),
            ],
            output="H",
        )
    ]


def test_timeout_on_a_try_fails_the_step_with_timeout() -> None:
    spec = """
flow: t
tools: {a: {}}
steps:
  - id: both
    timeout_ms: 1000
    try:
      - {id: x1, call_tool: {tool: a}}
      - {id: x2, call_tool: {tool: a}}
"""
    r = Run(spec)
    assert r.wire() == [sleep("r/both/timeout", 1000), call("r/x1#1", "a")]
    r.ok("r/x1#1")
    assert r.wire() == [call("r/x2#1", "a")]
    r.fire("r/both/timeout")
    assert r.wire() == [
        settled(
            "failed",
            [row("r/x1#1", "succeeded"), row("r/x2#1", "uncertain")],
            err=error("timeout", "step 'both' timed out after 1000 ms"),
        )
    ]


def test_timeout_on_a_try_that_finishes_in_time_is_dropped() -> None:
    spec = """
flow: t
tools: {a: {}}
steps:
  - id: both
    timeout_ms: 1000
    try:
      - {id: x1, call_tool: {tool: a}}
output: "${steps.both.output}"
"""
    r = Run(spec)
    r.ok("r/x1#1", "X", at=999)
    assert r.wire() == [settled("completed", [row("r/x1#1", "succeeded")], output="X")]
