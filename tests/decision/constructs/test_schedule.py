"""``schedule`` and ``cancel_scheduled``: scheduled calls, their cancellation and settling.

Each test drives one run by hand with ``tests.harness.Run`` and checks the
exact wire effects of each decision (or their idempotency keys) and the final
``settled`` status, output, error and report; ``helpers`` holds their wire forms.
"""

from __future__ import annotations

import pytest

from tests.harness import Run

from .helpers import call, error, rejected, row, settled, sleep

SCHEDULE = """
flow: t
tools: {remind: {}, a: {}}
steps:
  - id: nudge
    schedule: {tool: remind, input: {who: "${input.who}"}, delay_ms: 5000%s}
  - id: work
    call_tool: {tool: a, input: "${steps.nudge.output}"}
output: "done"
"""


def test_schedule_completes_at_once_with_an_id_then_sleeps_then_calls() -> None:
    r = Run(SCHEDULE % "", {"who": "bob"}, now_ms=100)
    # The schedule step's output (its id) is available to the very next step.
    assert r.wire() == [sleep("r/nudge#1/delay", 5100), call("r/work#1", "a", "r/nudge#1")]
    r.fire("r/nudge#1/delay")
    assert r.wire() == [call("r/nudge#1/call", "remind", {"who": "bob"})]
    r.ok("r/nudge#1/call", "sent")
    assert r.wire() == []
    r.ok("r/work#1")
    assert r.wire() == [
        settled(
            "completed",
            [row("r/work#1", "succeeded"), row("r/nudge#1/call", "succeeded", "remind")],
            output="done",
        )
    ]


@pytest.mark.parametrize("how", ["failed", "unknown"])
def test_schedule_failure_of_the_scheduled_call_never_fails_the_flow(how: str) -> None:
    r = Run(SCHEDULE % "", {"who": "bob"})
    r.fire("r/nudge#1/delay")
    if how == "failed":
        r.fail("r/nudge#1/call", "smtp")
    else:
        r.unknown("r/nudge#1/call")
    assert r.wire() == []
    r.ok("r/work#1")
    assert r.wire() == [
        settled(
            "completed",
            [
                row("r/work#1", "succeeded"),
                row("r/nudge#1/call", "failed" if how == "failed" else "uncertain", "remind"),
            ],
            output="done",
        )
    ]


CANCEL_SCHEDULED = """
flow: t
tools: {remind: {}, a: {}}
steps:
  - id: nudge
    schedule: {tool: remind, delay_ms: 5000}
  - id: work
    call_tool: {tool: a}
  - id: stop
    cancel_scheduled: {id: "${steps.nudge.output}"}
  - id: again
    cancel_scheduled: {id: "${steps.nudge.output}"}
  - id: bogus
    cancel_scheduled: {id: "r/nope#1"}
output: "${[steps.stop.output, steps.again.output, steps.bogus.output]}"
"""


def test_cancel_scheduled_true_when_pending_false_when_cancelled_or_unknown() -> None:
    r = Run(CANCEL_SCHEDULED)
    assert r.wire() == [sleep("r/nudge#1/delay", 5000), call("r/work#1", "a")]
    r.ok("r/work#1")
    assert r.wire() == [settled("completed", [row("r/work#1", "succeeded")], [True, False, False])]
    rejected(r, lambda: r.fire("r/nudge#1/delay"))


def test_cancel_scheduled_false_when_already_ran() -> None:
    r = Run(CANCEL_SCHEDULED)
    r.fire("r/nudge#1/delay")
    assert r.wire() == [call("r/nudge#1/call", "remind")]
    r.ok("r/nudge#1/call")
    r.ok("r/work#1")
    assert r.settled is not None
    assert r.settled.output == [False, False, False]


def test_a_call_cancelled_in_the_decision_that_scheduled_it_never_reaches_the_host() -> None:
    spec = """
flow: t
tools: {remind: {}, a: {}}
steps:
  - id: nudge
    schedule: {tool: remind, delay_ms: 100}
  - id: stop
    cancel_scheduled: {id: "${steps.nudge.output}"}
  - id: work
    call_tool: {tool: a, input: "${steps.stop.output}"}
"""
    r = Run(spec)
    # The delay timer was emitted and taken back within one decision.
    assert r.wire() == [call("r/work#1", "a", True)]
    err = rejected(r, lambda: r.fire("r/nudge#1/delay"))
    assert err.reason == "duplicate timer-fired: r/nudge#1/delay is already taken back"
    r.ok("r/work#1")
    assert r.report() == {"r/work#1": "succeeded"}


def test_settled_run_cancels_pending_scheduled_calls() -> None:
    r = Run(SCHEDULE % "", {"who": "bob"})
    r.ok("r/work#1")
    assert r.wire() == [settled("completed", [row("r/work#1", "succeeded")], output="done")]
    err = rejected(r, lambda: r.fire("r/nudge#1/delay"))
    assert err.key == "r/nudge#1/delay"


def test_outlive_run_scheduled_call_is_waited_for_before_settling() -> None:
    r = Run(SCHEDULE % ", outlive_run: true", {"who": "bob"}, now_ms=100)
    r.ok("r/work#1")
    assert r.wire() == []  # the flow is done but the run waits for the scheduled call
    assert r.settled is None
    r.fire("r/nudge#1/delay")
    assert r.wire() == [call("r/nudge#1/call", "remind", {"who": "bob"})]
    r.fail("r/nudge#1/call", "smtp")
    assert r.wire() == [
        settled(
            "completed",
            [row("r/work#1", "succeeded"), row("r/nudge#1/call", "failed", "remind")],
            output="done",
        )
    ]


def test_cancel_does_not_wait_for_an_in_flight_detached_scheduled_call() -> None:
    r = Run(SCHEDULE % "", {"who": "bob"})
    r.fire("r/nudge#1/delay")
    r.cancel("stop")
    assert r.wire() == [
        settled(
            "cancelled",
            [row("r/work#1", "uncertain"), row("r/nudge#1/call", "uncertain", "remind")],
            err=error("cancelled", "stop"),
        )
    ]


def test_completion_does_not_wait_for_an_in_flight_detached_scheduled_call() -> None:
    r = Run(SCHEDULE % "", {"who": "bob"})
    r.fire("r/nudge#1/delay")
    r.ok("r/work#1")
    assert r.wire() == [
        settled(
            "completed",
            [row("r/work#1", "succeeded"), row("r/nudge#1/call", "uncertain", "remind")],
            output="done",
        )
    ]
