"""Recurring scheduled calls and replays of finished ones: the core's part.

A recurring call (``every_ms`` or ``cron``) issues its call once per firing,
each firing under its own keys; the next firing is the first slot after the
last due time that is not before the call's end (slots passed while the call
was out are skipped); ``count`` and ``until_ms`` end it; a cancel while a
firing is out lets that call finish. ``scheduled-replay-requested`` issues a
finished call again under ``<id>/replay-<n>``, once per request.
"""

from __future__ import annotations

from typing import Any

import pytest

import flowcore
from flowcore import (
    ScheduledAddRequested,
    ScheduledAnswer,
    ScheduledCancelRequested,
    ScheduledReplayRequested,
    ScheduledRunNowRequested,
)
from flowcore.decision.keys import KeyRole, parse_key
from tests.harness import Run

from .helpers import call, rejected, sleep

HOUR = 3_600_000
DAY = 24 * HOUR

STEP = """
flow: t
tools: {remind: {class: idempotent, schedulable: true}}
steps:
  - id: nudge
    schedule: {tool: remind, input: {who: ana}, %s}
  - id: wait
    await_signal: {signal: done}
"""

MANAGED = """
flow: t
tools: {remind: {class: idempotent, schedulable: true}, plain: {}}
steps:
  - id: wait
    await_signal: {signal: done}
"""


def _call(r: Run, sid: str) -> flowcore.ScheduledCall:
    (found,) = [c for c in flowcore.scheduled_calls(r.state) if c.id == sid]
    return found


def _add(r: Run, at: int, **fields: Any) -> str:
    d = flowcore.advance(
        r.state, ScheduledAddRequested(tool="remind", input={"n": 1}, at_ms=at, **fields)
    )
    r.state, r.effects = d.state, d.effects
    r.timers.update({s.idempotency_key: s.until_ms for s in flowcore.plan(d).arm})
    assert d.scheduled is not None
    return d.scheduled.id


def test_every_firing_has_its_own_keys_and_count_ends_it() -> None:
    r = Run(STEP % "every_ms: 1000, count: 3")
    assert r.wire()[0] == sleep("r/nudge#1/delay", 1000)  # one period in
    r.fire("r/nudge#1/delay")
    assert r.wire() == [call("r/nudge#1/call", "remind", {"who": "ana"})]
    assert r.ok("r/nudge#1/call", at=1200) and r.wire() == [sleep("r/nudge#1/delay-2", 2000)]
    r.fire("r/nudge#1/delay-2")
    assert r.wire() == [call("r/nudge#1/call-2", "remind", {"who": "ana"})]
    # A failed firing does not stop the others; the error is kept until the next.
    assert r.fail("r/nudge#1/call-2", "smtp", at=2100)
    assert r.wire() == [sleep("r/nudge#1/delay-3", 3000)]
    mid = _call(r, "r/nudge#1")
    assert (mid.status, mid.fires, mid.due_ms, mid.error and mid.error.type) == (
        "pending",
        2,
        3000,
        "smtp",
    )
    r.fire("r/nudge#1/delay-3")
    r.ok("r/nudge#1/call-3", at=3100)
    assert r.wire() == []  # the third firing was the last
    done = _call(r, "r/nudge#1")
    assert (done.status, done.fires, done.finished_ms, done.every_ms, done.count) == (
        "completed",
        3,
        3100,
        1000,
        3,
    )


def test_slots_that_pass_while_the_call_is_out_are_skipped() -> None:
    r = Run(STEP % "every_ms: 1000")
    r.fire("r/nudge#1/delay")
    # Out from 1000 to 4500: the slots at 2000, 3000 and 4000 are skipped, never caught up.
    r.ok("r/nudge#1/call", at=4500)
    assert r.wire() == [sleep("r/nudge#1/delay-2", 5000)]
    # Ending on a slot exactly fires it at once.
    r.fire("r/nudge#1/delay-2")
    r.ok("r/nudge#1/call-2", at=6000)
    assert r.wire() == [sleep("r/nudge#1/delay-3", 6000)]


def test_until_ms_ends_it_when_the_next_slot_is_after() -> None:
    r = Run(STEP % "every_ms: 1000, until_ms: 2500")
    r.fire("r/nudge#1/delay")
    r.ok("r/nudge#1/call", at=1100)
    r.fire("r/nudge#1/delay-2")
    r.ok("r/nudge#1/call-2", at=2100)
    assert r.wire() == []  # 3000 is after until_ms
    assert _call(r, "r/nudge#1").status == "completed"


def test_a_cron_fires_in_its_time_zone() -> None:
    r = Run(STEP % 'cron: "0 9 * * *", timezone: Europe/Paris')
    # 09:00 in Paris on 1970-01-01 is 08:00 UTC.
    assert r.wire()[0] == sleep("r/nudge#1/delay", 8 * HOUR)
    r.fire("r/nudge#1/delay")
    r.ok("r/nudge#1/call", at=8 * HOUR + 5)
    assert r.wire() == [sleep("r/nudge#1/delay-2", DAY + 8 * HOUR)]


def test_cancel_while_a_firing_is_out_lets_it_finish_and_ends_it() -> None:
    r = Run(MANAGED)
    sid = _add(r, 0, every_ms=1000)
    r.fire(f"{sid}/delay")
    d = flowcore.advance(r.state, ScheduledCancelRequested(schedule_id=sid, at_ms=1100))
    assert d.scheduled == ScheduledAnswer(id=sid, done=True) and d.effects == ()
    r.state = d.state
    r.ok(f"{sid}/call", at=1200)
    assert r.wire() == []  # no next firing
    assert (_call(r, sid).status, _call(r, sid).fires) == ("cancelled", 1)
    # Cancelled while pending: its next delay timer is dropped.
    sid2 = _add(r, 1300, every_ms=1000, request="two")
    r.fire(f"{sid2}/delay")
    r.ok(f"{sid2}/call", at=2400)
    d = flowcore.advance(r.state, ScheduledCancelRequested(schedule_id=sid2, at_ms=2500))
    assert flowcore.plan(d).drop == (f"{sid2}/delay-2",)


def test_run_now_issues_the_next_firing_and_the_cadence_goes_on_from_it() -> None:
    r = Run(MANAGED)
    sid = _add(r, 0, every_ms=1000, count=2)
    d = flowcore.advance(r.state, ScheduledRunNowRequested(schedule_id=sid, at_ms=300))
    assert [e.idempotency_key for e in flowcore.plan(d).start] == [f"{sid}/call"]
    r.state = d.state
    r.ok(f"{sid}/call", at=400)
    assert r.wire() == [sleep(f"{sid}/delay-2", 1300)]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"every_ms": 10, "cron": "* * * * *"}, "every_ms and cron: give one of them"),
        ({"count": 2}, "count: applies to a recurring call"),
        ({"every_ms": 10, "timezone": "UTC"}, "timezone: applies to a cron"),
        ({"cron": "61 * * * *"}, "cron: '61 * * * *' is not a valid cron"),
        ({"cron": "0 9 * * *", "timezone": "Mars/Olympus"}, "timezone: unknown time zone"),
        ({"every_ms": 10, "count": 0}, "count: must be at least 1"),
        ({"every_ms": 10, "until_ms": 5}, "until_ms: 5 is before the first firing, due at 10"),
        ({"every_ms": 0}, "every_ms: 0 is not from 1"),
    ],
)
def test_a_bad_recurrence_from_outside_is_rejected_naming_the_field(
    fields: dict[str, Any], message: str
) -> None:
    r = Run(MANAGED)
    exc = rejected(r, lambda: _add(r, 0, **fields))
    assert message in str(exc)


@pytest.mark.parametrize(
    ("fields", "where"),
    [
        ('every_ms: 10, cron: "* * * * *"', "cron"),
        ("timezone: UTC, delay_ms: 5", "timezone"),
        ('cron: "0 25 * * *"', "cron"),
        ("count: 2, delay_ms: 5", "count"),
        ("every_ms: 0", "every_ms"),
        ('cron: "0 9 * * *", timezone: Nowhere/City', "timezone"),
    ],
)
def test_a_bad_recurrence_in_a_spec_is_reported_at_its_field(fields: str, where: str) -> None:
    with pytest.raises(flowcore.SpecError) as info:
        flowcore.parse_flow(STEP % fields)
    assert f"steps[0].schedule.{where}" in str(info.value)


def test_replay_issues_a_finished_call_again_once_per_request() -> None:
    r = Run(STEP % "delay_ms: 100")
    sid = "r/nudge#1"
    # Still pending, unknown, cancelled: refused with the reason.
    exc = rejected(r, lambda: r.send(ScheduledReplayRequested(schedule_id=sid, at_ms=1)))
    assert "is still pending" in str(exc)
    exc = rejected(r, lambda: r.send(ScheduledReplayRequested(schedule_id="r/x#1", at_ms=1)))
    assert "no scheduled call 'r/x#1'" in str(exc)
    r.fire(f"{sid}/delay")
    exc = rejected(r, lambda: r.send(ScheduledReplayRequested(schedule_id=sid, at_ms=101)))
    assert "has a call out" in str(exc)
    r.fail(f"{sid}/call", "smtp", at=200)
    effects = r.send(ScheduledReplayRequested(schedule_id=sid, at_ms=300, request="q1"))
    assert r.wire() == [call(f"{sid}/replay-1", "remind", {"who": "ana"})] and effects
    # The same request again (a retried HTTP call): nothing more.
    assert r.send(ScheduledReplayRequested(schedule_id=sid, at_ms=301, request="q1")) == ()
    r.ok(f"{sid}/replay-1", at=400)
    assert (_call(r, sid).status, _call(r, sid).replays) == ("completed", 1)
    assert r.send(ScheduledReplayRequested(schedule_id=sid, at_ms=500, request="q1")) == ()
    r.send(ScheduledReplayRequested(schedule_id=sid, at_ms=600, request="q2"))
    assert r.keys() == [f"{sid}/replay-2"]
    r.unknown(f"{sid}/replay-2", at=700)  # idempotent: issued again under the same key
    assert r.keys() == [f"{sid}/replay-2"]


def test_a_replayed_recurring_call_does_not_fire_again() -> None:
    r = Run(STEP % "every_ms: 1000, count: 1")
    r.fire("r/nudge#1/delay")
    r.ok("r/nudge#1/call", at=1100)
    r.send(ScheduledReplayRequested(schedule_id="r/nudge#1", at_ms=5000))
    assert r.keys() == ["r/nudge#1/replay-1"]
    r.ok("r/nudge#1/replay-1", at=5100)
    assert r.wire() == [] and _call(r, "r/nudge#1").status == "completed"


def test_a_cancelled_call_is_not_replayed() -> None:
    r = Run(STEP % "delay_ms: 100")
    r.send(ScheduledCancelRequested(schedule_id="r/nudge#1", at_ms=1))
    exc = rejected(r, lambda: r.send(ScheduledReplayRequested(schedule_id="r/nudge#1", at_ms=2)))
    assert "was cancelled" in str(exc)


def test_the_log_says_firings_and_replays() -> None:
    flow = flowcore.parse_flow(STEP % "every_ms: 1000, count: 1")
    rec = flowcore.Recorder("r")
    d = flowcore.start(flow, None, run_id="r", now_ms=0)
    records = rec.started(flow, None, 0, d)
    for event in (
        flowcore.TimerFired(idempotency_key="r/nudge#1/delay", at_ms=1000),
        flowcore.EffectSucceeded(idempotency_key="r/nudge#1/call", at_ms=1100),
        ScheduledReplayRequested(schedule_id="r/nudge#1", at_ms=1200),
    ):
        d = flowcore.advance(d.state, event)
        records += rec.applied(event, d)
    changes = [r.data for r in records if r.type == "scheduled.changed"]
    assert [(c["status"], c.get("fires"), c.get("replays")) for c in changes] == [
        ("pending", None, None),
        ("running", 1, None),
        ("completed", 1, None),
        ("running", 1, 1),
    ]
    assert flowcore.replay(flowcore.encode_records(records), flow).divergence is None


def test_a_recurring_call_goes_on_into_the_next_incarnation() -> None:
    spec = """
flow: t
tools: {remind: {class: idempotent, schedulable: true}}
steps:
  - id: first
    switch:
      - if: "input == null"
        steps:
          - id: nudge
            schedule: {tool: remind, every_ms: 1000, count: 3}
  - id: wait
    await_signal: {signal: again}
  - id: next
    continue_as_new: {input: 1}
"""
    r = Run(spec)
    r.fire("r/nudge#1/delay")
    r.ok("r/nudge#1/call", at=1100)
    d = flowcore.advance(r.state, flowcore.SignalReceived(signal="again", at_ms=1200))
    continued = flowcore.plan(d).continued
    assert continued is not None
    (carried,) = continued.scheduled
    assert (carried.every_ms, carried.count, carried.fires, carried.due_ms) == (1000, 3, 1, 2000)
    d = flowcore.continue_run(r.flow, continued, "r", 1200, 0)
    assert flowcore.plan(d).arm[0].idempotency_key == "r/nudge#1/delay-2"
    d = flowcore.advance(
        d.state, flowcore.TimerFired(idempotency_key="r/nudge#1/delay-2", at_ms=2000)
    )
    assert [e.idempotency_key for e in flowcore.plan(d).start] == ["r/nudge#1/call-2"]
    (listed,) = flowcore.scheduled_calls(d.state)
    assert (listed.fires, listed.every_ms) == (2, 1000)


@pytest.mark.parametrize(
    ("key", "role", "firing"),
    [
        ("r/nudge#1/delay-2", KeyRole.SCHEDULE_DELAY, 2),
        ("r/nudge#1/call-12", KeyRole.SCHEDULE_CALL, 12),
        ("r/~scheduled-3/replay-1", KeyRole.SCHEDULE_REPLAY, 1),
        ("r/nudge#1/call", KeyRole.SCHEDULE_CALL, None),
    ],
)
def test_firing_and_replay_keys_read_back(key: str, role: KeyRole, firing: int | None) -> None:
    info = parse_key(key)
    assert (info.role, info.firing) == (role, firing)


@pytest.mark.parametrize("key", ["r/nudge#1/call-1", "r/nudge#1/timeout-2", "r/x#1/replay"])
def test_other_numbered_suffixes_are_not_keys(key: str) -> None:
    with pytest.raises(ValueError, match="not a flowcore key"):
        parse_key(key)


def test_the_diagram_shows_the_recurrence() -> None:
    from flowcore.diagram import build_graph, to_mermaid

    flow = flowcore.parse_flow(STEP % 'cron: "0 9 * * *", timezone: Europe/Paris, count: 3')
    text = to_mermaid(build_graph(flow))
    assert "cron 0 9 * * * Europe/Paris<br/>3 times at most" in text
    flow = flowcore.parse_flow(STEP % "every_ms: 60000")
    assert "schedule remind in 0ms<br/>every 1m" in to_mermaid(build_graph(flow))


OUTLIVING = """
flow: t
tools: {remind: {class: idempotent}, slow: {}}
steps:
  - id: nudge
    schedule: {tool: remind, every_ms: 1000, outlive_run: true}
  - id: work
    call_tool: {tool: slow}
"""


def test_an_outliving_recurring_call_keeps_the_run_until_cancelled() -> None:
    r = Run(OUTLIVING)
    r.fire("r/nudge#1/delay")
    r.ok("r/work#1", at=1100)  # the steps end; the run waits for its outliving call
    r.ok("r/nudge#1/call", at=1200)
    assert r.wire() == [sleep("r/nudge#1/delay-2", 2000)] and r.settled is None
    r.fire("r/nudge#1/delay-2")
    r.cancel(at=2100)  # its firing is out: it is not waited for, and fires no more
    assert r.settled is not None and r.settled.status == "cancelled"
    assert _call(r, "r/nudge#1").status == "uncertain"


def test_a_recurring_call_out_when_the_run_is_cancelled_fires_no_more() -> None:
    spec = """
flow: t
tools: {remind: {class: idempotent}, slow: {}, undo: {}}
steps:
  - id: nudge
    schedule: {tool: remind, every_ms: 1000, outlive_run: true}
  - id: work
    call_tool: {tool: slow}
    compensate: [{id: back, call_tool: {tool: undo}}]
  - id: wait
    await_signal: {signal: done}
"""
    r = Run(spec)
    r.fire("r/nudge#1/delay")
    r.ok("r/work#1", at=1050)
    r.cancel(at=1100)  # the run compensates, cancelled: it waits for no outliving call
    assert r.keys() == ["r/back#1"]
    r.ok("r/nudge#1/call", at=1200)
    assert r.keys() == [] and _call(r, "r/nudge#1").status == "completed"
    r.ok("r/back#1", at=1300)
    assert r.settled is not None and r.settled.status == "cancelled"


def test_the_simulator_plays_every_firing_on_its_virtual_clock() -> None:
    from flowcore.testing import simulate

    flow = flowcore.parse_flow(
        STEP.replace("  - id: wait\n    await_signal: {signal: done}\n", "")
        % "every_ms: 60000, count: 3, outlive_run: true"
    )
    traj = simulate(flow, None, default=lambda call: "sent")
    assert traj.status == "completed"
    report = {r.idempotency_key: r.status for r in traj.state.settled.report}  # type: ignore[union-attr]
    assert report == {
        "run/nudge#1/call": "succeeded",
        "run/nudge#1/call-2": "succeeded",
        "run/nudge#1/call-3": "succeeded",
    }


@pytest.mark.parametrize(
    ("until", "message"),
    [
        (5, "schedule: until_ms: 5 is before the first firing, due at 1800000"),
        ("soon", "schedule.until_ms gave 'soon': expected epoch milliseconds"),
    ],
)
def test_a_bad_until_fails_that_call_alone(until: Any, message: str) -> None:
    r = Run(STEP % 'every_ms: 30m, until_ms: "${input.until}"', {"until": until})
    call_ = _call(r, "r/nudge#1")
    assert (call_.status, call_.error and call_.error.type) == ("failed", "invalid-input")
    assert call_.error is not None and message in call_.error.message
    assert r.keys() == ["r/wait#1"]  # nothing armed; the run goes on
