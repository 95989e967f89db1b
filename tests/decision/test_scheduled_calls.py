"""Scheduled calls a person can see and manage: the core's part.

The scheduled-call events from outside (cancel, run-now, add) and their
answer on the decision; what a scheduled call knows (``scheduled_calls``);
re-issues after an unknown outcome by execution class; and the
``scheduled.changed`` records every host derives from the decision, which
replay checks.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

import flowcore
from flowcore import (
    EffectFailed,
    EffectOutcomeUnknown,
    EffectSucceeded,
    ErrorInfo,
    EventRejected,
    Recorder,
    ReplayDivergence,
    ScheduledAddRequested,
    ScheduledAnswer,
    ScheduledCancelRequested,
    ScheduledRunNowRequested,
    TimerFired,
)
from flowcore.log.records import encode_records

SPEC = """
flow: reminders
tools:
  send_reminder: {class: idempotent, schedulable: true}
  pager: {schedulable: true}
  cleanup: {class: readonly}
steps:
  - id: nudge
    schedule: {tool: send_reminder, input: {to: "${input.who}"}, delay_ms: 7200000}
  - id: wait
    await_signal: {signal: done}
"""


class Run:
    """A run driven by hand, recorded as a host records it."""

    def __init__(self, spec: str = SPEC, now: int = 0) -> None:
        self.flow = flowcore.parse_flow(spec)
        d = flowcore.start(self.flow, {"who": "ana"}, run_id="r", now_ms=now)
        self.rec = Recorder("r")
        self.records = self.rec.started(self.flow, {"who": "ana"}, now, d)
        self.state = d.state
        self.last = d

    def send(self, event: Any) -> flowcore.Decision:
        d = flowcore.advance(self.state, event)
        self.records += self.rec.applied(event, d)
        self.state, self.last = d.state, d
        return d

    def calls(self) -> dict[str, flowcore.ScheduledCall]:
        return {c.id: c for c in flowcore.scheduled_calls(self.state)}

    def changes(self) -> list[dict[str, Any]]:
        return [r.data for r in self.records if r.type == "scheduled.changed"]


def test_a_schedule_step_knows_when_it_was_created_and_is_due() -> None:
    run = Run(now=1000)
    call = run.calls()["r/nudge#1"]
    assert (call.status, call.created_ms, call.due_ms, call.attempts) == (
        "pending",
        1000,
        7201000,
        0,
    )
    assert call.input == {"to": "ana"} and call.finished_ms is None and not call.outside
    assert run.changes() == [
        {
            "id": "r/nudge#1",
            "tool": "send_reminder",
            "status": "pending",
            "attempts": 0,
            "dueMs": 7201000,
        }
    ]


def test_cancel_from_outside_answers_whether_it_was_pending() -> None:
    run = Run()
    d = run.send(ScheduledCancelRequested(schedule_id="r/nudge#1", at_ms=2000))
    assert d.scheduled == ScheduledAnswer(id="r/nudge#1", done=True)
    assert flowcore.plan(d).drop == ("r/nudge#1/delay",)
    call = run.calls()["r/nudge#1"]
    assert (call.status, call.finished_ms) == ("cancelled", 2000)
    # Again, an unknown id, another run's key: answered false, never an error.
    for sid in ("r/nudge#1", "r/~scheduled-7", "other/x#1", "garbage"):
        d = run.send(ScheduledCancelRequested(schedule_id=sid, at_ms=3000))
        assert d.scheduled == ScheduledAnswer(id=sid, done=False)
        assert d.effects == () and d.state.journal.scheduled == ()
    assert [c["status"] for c in run.changes()] == ["pending", "cancelled"]


def test_run_now_issues_the_call_and_drops_its_timer() -> None:
    run = Run()
    d = run.send(ScheduledRunNowRequested(schedule_id="r/nudge#1", at_ms=5000))
    assert d.scheduled == ScheduledAnswer(id="r/nudge#1", done=True)
    plan = flowcore.plan(d)
    assert plan.drop == ("r/nudge#1/delay",)
    assert [e.idempotency_key for e in plan.start] == ["r/nudge#1/call"]
    call = run.calls()["r/nudge#1"]
    assert (call.status, call.due_ms, call.attempts) == ("running", 5000, 1)
    d = run.send(ScheduledRunNowRequested(schedule_id="r/nudge#1", at_ms=5001))
    assert d.scheduled == ScheduledAnswer(id="r/nudge#1", done=False) and d.effects == ()
    run.send(EffectSucceeded(idempotency_key="r/nudge#1/call", output=1, at_ms=6000))
    call = run.calls()["r/nudge#1"]
    assert (call.status, call.finished_ms, call.error) == ("completed", 6000, None)


def test_add_from_outside_only_for_schedulable_tools_with_counted_ids() -> None:
    run = Run()
    d = run.send(ScheduledAddRequested(tool="pager", input={"p": 1}, delay_ms=60_000, at_ms=10))
    assert d.scheduled == ScheduledAnswer(id="r/~scheduled-1", done=True)
    assert d.effects == (flowcore.Sleep(until_ms=60_010, idempotency_key="r/~scheduled-1/delay"),)
    d = run.send(ScheduledAddRequested(tool="send_reminder", at_ms=20))
    assert d.scheduled == ScheduledAnswer(id="r/~scheduled-2", done=True)
    call = run.calls()["r/~scheduled-1"]
    assert (call.tool, call.input, call.outside, call.created_ms, call.due_ms) == (
        "pager",
        {"p": 1},
        True,
        10,
        60_010,
    )
    for tool, why in (("cleanup", "is not declared schedulable"), ("nope", "is not declared")):
        with pytest.raises(EventRejected) as info:
            flowcore.advance(run.state, ScheduledAddRequested(tool=tool, at_ms=30))
        assert f"tool {tool!r} {why} in flow 'reminders'" in info.value.reason
        assert "the schedulable tools are 'pager', 'send_reminder'" in info.value.reason
    # The counter is in the state: a snapshot keeps it.
    again = flowcore.decode_state(flowcore.encode_state(run.state), run.flow)
    d = flowcore.advance(again, ScheduledAddRequested(tool="pager", at_ms=40))
    assert d.scheduled is not None and d.scheduled.id == "r/~scheduled-3"
    assert flowcore.parse_key("r/~scheduled-3/call", "r").role is flowcore.KeyRole.SCHEDULE_CALL


def test_add_under_a_request_adds_once_and_replays() -> None:
    run = Run()
    ask = ScheduledAddRequested(tool="pager", input={"p": 1}, delay_ms=50, at_ms=10, request="k#1")
    d = run.send(ask)
    sid = d.scheduled.id if d.scheduled is not None else ""
    assert sid.startswith("r/~scheduled-r") and d.scheduled == ScheduledAnswer(id=sid, done=True)
    assert flowcore.parse_key(sid, "r").role is flowcore.KeyRole.OUTSIDE_SCHEDULE
    assert flowcore.parse_key(sid + "/call", "r").role is flowcore.KeyRole.SCHEDULE_CALL
    # The same request again (a handler run again with the same key): nothing added.
    d = run.send(msgspec.structs.replace(ask, at_ms=20, input={"p": 2}))
    assert d.scheduled == ScheduledAnswer(id=sid, done=False)
    assert d.effects == () and d.state.journal.scheduled == ()
    assert [c.id for c in flowcore.scheduled_calls(run.state) if c.outside] == [sid]
    assert run.calls()[sid].input == {"p": 1}
    # Another request gets another id; the numbered ones are not used up.
    d = run.send(msgspec.structs.replace(ask, at_ms=30, request="k#2"))
    assert d.scheduled is not None and d.scheduled.id not in (sid, "r/~scheduled-1")
    d = run.send(ScheduledAddRequested(tool="pager", at_ms=40))
    assert d.scheduled is not None and d.scheduled.id == "r/~scheduled-1"
    # The log says who asked, and replays.
    reported = [r.data for r in run.records if r.type == "event.reported"]
    assert [e.get("request") for e in reported] == ["k#1", "k#1", "k#2", None]
    report = flowcore.replay(encode_records(run.records), run.flow)
    assert report.divergence is None and report.state == run.state


def test_add_is_refused_while_the_run_ends_and_after_it_settled() -> None:
    spec = """
flow: ends
tools: {t: {class: idempotent, schedulable: true}}
steps:
  - {id: keep, schedule: {tool: t, delay_ms: 100, outlive_run: true}}
"""
    run = Run(spec)
    assert run.state.tree.ending is not None  # waits for the outliving call
    with pytest.raises(EventRejected, match="is ending"):
        flowcore.advance(run.state, ScheduledAddRequested(tool="t", at_ms=1))
    # Cancelling the last outliving call lets the run settle.
    d = run.send(ScheduledCancelRequested(schedule_id="r/keep#1", at_ms=2))
    assert d.scheduled == ScheduledAnswer(id="r/keep#1", done=True)
    assert d.state.status == "completed"
    with pytest.raises(EventRejected, match="already settled"):
        flowcore.advance(d.state, ScheduledAddRequested(tool="t", at_ms=3))


@pytest.mark.parametrize(
    ("tool", "issues", "why"),
    [("send_reminder", 3, "was issued 3 times without an answer"), ("pager", 1, "not safe")],
)
def test_an_unknown_outcome_is_issued_again_only_when_safe(
    tool: str, issues: int, why: str
) -> None:
    run = Run()
    d = run.send(ScheduledAddRequested(tool=tool, at_ms=1))
    assert d.scheduled is not None
    sid = d.scheduled.id
    run.send(ScheduledRunNowRequested(schedule_id=sid, at_ms=2))
    key = f"{sid}/call"
    for n in range(1, issues + 1):
        assert run.calls()[sid].attempts == n
        d = run.send(EffectOutcomeUnknown(idempotency_key=key, at_ms=10 + n))
        again = [e for e in d.effects if getattr(e, "idempotency_key", "") == key]
        assert len(again) == (1 if n < issues else 0)
    call = run.calls()[sid]
    assert call.status == "uncertain" and call.attempts == issues
    assert call.error is not None and call.error.type == "outcome-unknown"
    assert why in call.error.message
    statuses = [(c["status"], c["attempts"]) for c in run.changes() if c["id"] == sid]
    assert statuses[-1] == ("uncertain", issues)


def test_a_failure_keeps_its_error_and_never_fails_the_run() -> None:
    run = Run()
    run.send(ScheduledRunNowRequested(schedule_id="r/nudge#1", at_ms=2))
    error = ErrorInfo(type="smtp-down", message="no route")
    run.send(EffectFailed(idempotency_key="r/nudge#1/call", error=error, at_ms=3))
    call = run.calls()["r/nudge#1"]
    assert (call.status, call.error, call.finished_ms) == ("failed", error, 3)
    assert run.state.status == "running"
    assert run.changes()[-1]["error"] == {"type": "smtp-down", "message": "no route"}


def test_a_run_that_runs_out_of_budget_cancels_what_is_pending() -> None:
    spec = SPEC.replace("flow: reminders", "flow: reminders\nbudget: {wall_clock_ms: 5000}")
    run = Run(spec)
    run.send(TimerFired(idempotency_key="r/$deadline", at_ms=6000))
    assert run.state.status == "budget-exhausted"
    assert run.calls()["r/nudge#1"].status == "cancelled"


# --- the log: scheduled.changed, as replay checks it ------------------------------------------


def _managed() -> Run:
    run = Run()
    run.send(ScheduledAddRequested(tool="pager", input={"p": 1}, delay_ms=50, at_ms=10))
    run.send(ScheduledCancelRequested(schedule_id="r/nudge#1", at_ms=20))
    run.send(ScheduledCancelRequested(schedule_id="r/nope#1", at_ms=21))
    run.send(ScheduledRunNowRequested(schedule_id="r/~scheduled-1", at_ms=30))
    run.send(EffectSucceeded(idempotency_key="r/~scheduled-1/call", output="ok", at_ms=40))
    return run


def test_every_change_is_a_record_before_the_decisions_effects() -> None:
    run = _managed()
    kinds = [r.type for r in run.records]
    # event.reported, then scheduled.changed, then the effects.
    for i, kind in enumerate(kinds):
        if kind == "scheduled.changed":
            assert kinds[i - 1] in ("event.reported", "run.started", "scheduled.changed")
    assert [(c["id"], c["status"]) for c in run.changes()] == [
        ("r/nudge#1", "pending"),
        ("r/~scheduled-1", "pending"),
        ("r/nudge#1", "cancelled"),
        ("r/~scheduled-1", "running"),
        ("r/~scheduled-1", "completed"),
    ]
    assert all("input" not in c for c in run.changes())  # the status, never the arguments


def test_replay_reproduces_the_outside_events_and_checks_the_records() -> None:
    run = _managed()
    report = flowcore.replay(encode_records(run.records), run.flow)
    assert report.divergence is None and report.state == run.state
    kinds = [(e.kind, e.status) for e in report.trajectory if e.kind.startswith("scheduled-")]
    assert kinds == [
        ("scheduled-add-requested", "scheduled"),
        ("scheduled-cancel-requested", "cancelled"),
        ("scheduled-cancel-requested", "not-pending"),
        ("scheduled-run-now-requested", "issued"),
    ]


def test_an_edited_scheduled_change_diverges() -> None:
    run = _managed()
    records = list(run.records)
    at = next(i for i, r in enumerate(records) if r.data == run.changes()[2])
    old = records[at]
    records[at] = flowcore.Record(
        old.type, old.index, old.run_id, old.at, {**old.data, "status": "failed"}
    )
    with pytest.raises(ReplayDivergence) as info:
        flowcore.replay(records, run.flow)
    assert info.value.index == at
    assert "differs from the re-derived one" in str(info.value)


def test_a_log_from_before_the_record_replays_but_one_that_drops_some_diverges() -> None:
    run = _managed()
    kept = [r for r in run.records if r.type != "scheduled.changed"]
    renumbered = [flowcore.Record(r.type, i, r.run_id, r.at, r.data) for i, r in enumerate(kept)]
    assert flowcore.replay(renumbered, run.flow).divergence is None
    # Records for the first decision, none for a later one: the log lost one.
    first = next(i for i, r in enumerate(run.records) if r.type == "scheduled.changed")
    second = [i for i, r in enumerate(run.records) if r.type == "scheduled.changed"][1]
    dropped = [r for i, r in enumerate(run.records) if i != second]
    renumbered = [flowcore.Record(r.type, i, r.run_id, r.at, r.data) for i, r in enumerate(dropped)]
    with pytest.raises(ReplayDivergence, match="does not record"):
        flowcore.replay(renumbered, run.flow)
    assert first < second
