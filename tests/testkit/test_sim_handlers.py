"""What a simulated handler asks of its run through its ``Call``, as a host's handler
does through ``flowcore_handlers.context()``: schedule a call, cancel one, list
them, signal a run (its own included), publish progress. The seeds' ``remind_me``
example (specs/examples) runs to completion in the simulator."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import flowcore
from flowcore import EffectSucceeded, ScheduledAddRequested, SignalReceived
from flowcore.testing import (
    Call,
    CallError,
    Fault,
    Hang,
    ProgressItem,
    Simulator,
    Trajectory,
    check_trajectory,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "specs" / "examples"
REMIND_ME = (EXAMPLES / "remind_me.yaml").read_text(encoding="utf-8")


# The example's tools (specs/examples/remind_me_tools.py), written against ``Call``:
# ``call.schedule`` and ``call.signal`` where those use ``context()``.
def remind_me(call: Call) -> dict[str, Any]:
    text = call.input["text"]
    call.publish(f"reminding to {text}")
    reminder = call.schedule("send_reminder", {"text": text}, delay_ms=call.input["delay_ms"])
    return {"reminder": reminder}


def send_reminder(call: Call) -> dict[str, Any]:
    call.publish({"sending": call.input["text"]})
    call.signal(call.run_id, "reminder", {"text": call.input["text"]})
    return {"sent": call.input["text"]}


REMINDERS = {"remind_me": remind_me, "send_reminder": send_reminder}


def remind(**world: Any) -> Trajectory:
    sim = Simulator(tools=REMINDERS, **world)
    return sim.run(REMIND_ME, {"text": "stretch", "delay_ms": 1000}, run_id="remind-1")


def asked(t: Trajectory, kind: str) -> list[dict[str, Any]]:
    """The events of ``kind`` the root run's log reports."""
    records = [r.data for r in t.log_of() if r.type == "event.reported"]
    return [r for r in records if r["kind"] == kind]


def host_id(request: str) -> str:
    """The id a host gets for ``request``: the core's answer to the same event."""
    flow = flowcore.parse_flow(REMIND_ME)
    d = flowcore.start(flow, {"text": "stretch", "delay_ms": 1000}, run_id="remind-1", now_ms=0)
    event = ScheduledAddRequested(
        tool="send_reminder", input={"text": "stretch"}, delay_ms=1000, at_ms=0, request=request
    )
    answer = flowcore.advance(d.state, event).scheduled
    assert answer is not None
    return answer.id


def test_remind_me_schedules_a_reminder_that_signals_its_own_run() -> None:
    t = remind()
    assert t.status == "completed", t.describe()
    sid = t.output["reminder"]
    assert sid == host_id("remind-1/ask#1#1")
    assert sid.startswith("remind-1/~scheduled-r")
    assert t.output["sent"] == {"text": "stretch"}
    # As on the local host: the signal ended the run's wait while the call that
    # sent it was still out, so the call is listed uncertain.
    calls = flowcore.scheduled_calls(t.state)
    assert [(c.id, c.tool, c.status, c.outside) for c in calls] == [
        (sid, "send_reminder", "uncertain", True)
    ]
    # The log says who asked, and replays.
    assert [a["request"] for a in asked(t, "scheduled-add-requested")] == ["remind-1/ask#1#1"]
    assert [a["payload"] for a in asked(t, "signal-received")] == [{"text": "stretch"}]
    report = flowcore.replay(t.log_of(), flowcore.parse_flow(REMIND_ME))
    assert report.divergence is None
    check_trajectory(t)


def test_what_a_handler_asks_comes_at_its_time_before_its_own_result() -> None:
    t = remind()
    seen = [
        (e.at_ms, e.event.__struct_config__.tag)
        for e in t.entries
        if e.kind == "event" and e.event is not None
    ]
    assert seen == [
        (0, "scheduled-add-requested"),  # remind_me's request, while it runs
        (1, "effect-succeeded"),  # then its own result, a latency later
        (1000, "timer-fired"),  # the reminder is due
        (1000, "signal-received"),  # send_reminder's signal ends the wait: settled
    ]
    # send_reminder's own result comes after the run settled: recorded, rejected.
    late = t.events(rejected=True)
    assert [type(e) for e in late] == [EffectSucceeded] and late[0].at_ms == 1001


def test_a_reissued_call_schedules_nothing_twice() -> None:
    ids: list[str] = []

    def counting(call: Call) -> dict[str, Any]:
        out = remind_me(call)
        ids.append(out["reminder"])
        return out

    t = Simulator(
        tools={**REMINDERS, "remind_me": counting},
        faults=[Fault("unknown", "remind_me", calls=[1])],  # it ran; its outcome is lost
    ).run(REMIND_ME, {"text": "stretch", "delay_ms": 1000}, run_id="remind-1")
    assert t.status == "completed", t.describe()
    # Issued again under the same key, it asked again with the same request ...
    assert [a["request"] for a in asked(t, "scheduled-add-requested")] == ["remind-1/ask#1#1"] * 2
    # ... and got the same id, for the one call there is.
    assert ids == [t.output["reminder"]] * 2
    assert [c.id for c in flowcore.scheduled_calls(t.state)] == ids[:1]
    assert len(t.effects("call-tool")) == 3  # remind_me twice, send_reminder once
    check_trajectory(t)


NUDGES = """
flow: nudges
tools:
  plan: {class: idempotent}
  nudge: {class: idempotent, schedulable: true}
steps:
  - id: plan
    call_tool: {tool: plan}
  - id: wait
    sleep: {for_ms: 5000}
output: "${steps.plan.output}"
"""


def test_cancel_answers_true_then_false_and_the_list_shows_the_calls() -> None:
    def plan(call: Call) -> dict[str, Any]:
        first = call.schedule("nudge", {"n": 1}, delay_ms=60_000)
        second = call.schedule("nudge", {"n": 2}, at_ms=call.now_ms + 1000)
        before = [(c.id, c.status, c.due_ms) for c in call.scheduled()]
        cancels = [
            call.cancel_scheduled(first),
            call.cancel_scheduled(first),
            call.cancel_scheduled(second.removeprefix("r-1/")),  # as the run spells it
            call.cancel_scheduled("r-1/~scheduled-rnothing"),
        ]
        after = [c.status for c in call.scheduled()]
        return {"ids": [first, second], "before": before, "cancels": cancels, "after": after}

    t = Simulator(tools={"plan": plan}).run(NUDGES, run_id="r-1", now_ms=100)
    assert t.status == "completed", t.describe()
    first, second = t.output["ids"]
    assert first != second
    # Oldest due first, as a host lists them; the at_ms is virtual time.
    assert t.output["before"] == [[second, "pending", 1100], [first, "pending", 60_100]]
    assert t.output["cancels"] == [True, False, True, False]
    assert t.output["after"] == ["cancelled", "cancelled"]
    assert not t.effects("call-tool")[1:]  # no nudge was ever called
    # A cancel of a call that is not pending is not an event of the run.
    assert len(asked(t, "scheduled-cancel-requested")) == 2
    check_trajectory(t)


def test_a_handler_signals_another_run_of_the_simulation() -> None:
    spec = """
flow: parent
tools: {poke: {class: idempotent}}
steps:
  - id: both
    parallel:
      branches:
        kid: [{id: child, run_subflow: {flow: child}}]
        poker: [{id: poke, call_tool: {tool: poke}}]
output: "${steps.child.output}"
"""
    child = """
flow: child
steps:
  - id: go
    await_signal: {signal: go}
output: "${steps.go.output}"
"""

    def poke(call: Call) -> str:
        call.signal("r/child#1", "go", {"from": call.key})
        return "poked"

    t = Simulator(tools={"poke": poke}, subflows={"child": child}).run(spec, run_id="r")
    assert t.status == "completed", t.describe()
    assert t.output == {"from": "r/poke#1"}
    assert [type(e) for e in t.events("r/child#1")][:1] == [SignalReceived]
    check_trajectory(t)


SCHEDULES = """
flow: asks
tools:
  ask: {class: idempotent}
  nudge: {class: idempotent, schedulable: true}
  plain: {class: idempotent}
steps:
  - id: ask
    call_tool: {tool: ask}
  - id: wait
    try: [{id: go, await_signal: {signal: go, timeout_ms: 100}}]
    catch: [{errors: [timeout], steps: []}]
output: "${steps.ask.output}"
"""


def refusal(action: Any) -> Any:
    def handler(call: Call) -> str:
        with pytest.raises(CallError) as caught:
            action(call)
        return str(caught.value)

    return handler


@pytest.mark.parametrize(
    ("action", "message"),
    [
        (
            lambda c: c.schedule("plain", {}),
            "tool 'plain' is not declared schedulable in flow 'asks': "
            "the schedulable tools are 'nudge'",
        ),
        (lambda c: c.schedule("nudge", {}, delay_ms=1, at_ms=2), "give delay_ms or at_ms"),
        (lambda c: c.schedule("nudge", {}, delay_ms=-1), "delay_ms must be an integer >= 0"),
        (lambda c: c.schedule("nudge", {}, colour="red"), "no field 'colour' to give"),
        (lambda c: c.schedule("nudge", {1, 2}), "is not flowcore data"),
        (lambda c: c.signal("elsewhere", "go"), "no run 'elsewhere' in the simulation"),
        (lambda c: c.signal(c.run_id, "stop"), "never waits for signal 'stop'"),
        (lambda c: c.signal(c.run_id, "go", float("nan")), "is not flowcore data"),
        (lambda c: c.publish(object()), "progress item cannot be stored"),
        (lambda c: c.publish("x" * 70_000), "at most 65,536 are kept"),
    ],
)
def test_a_request_the_run_refuses_raises_a_typed_error_and_leaves_nothing(
    action: Any, message: str
) -> None:
    t = Simulator(tools={"ask": refusal(action)}).run(SCHEDULES, run_id="r")
    assert t.status == "completed", t.describe()
    assert message in t.output
    kinds = [e.event.__struct_config__.tag for e in t.entries if e.event is not None]
    assert kinds == ["effect-succeeded", "timer-fired"]  # nothing else was reported
    assert not t.events(rejected=True) and not t.progress_of()


def test_an_uncaught_refusal_fails_the_work_as_any_exception_does() -> None:
    t = Simulator(tools={"ask": lambda call: call.schedule("plain")}).run(SCHEDULES, run_id="r")
    assert t.status == "failed"
    assert t.error is not None and t.error.type == "CallError"
    assert "not declared schedulable" in t.error.message


def test_a_humans_call_cannot_ask_its_run() -> None:
    spec = """
flow: q
steps:
  - id: q
    ask_human: {question: "go?", options: ["yes"]}
"""
    seen: list[str] = []

    def human(call: Call) -> Any:
        with pytest.raises(CallError, match="only a tool's, agent's or team's handler"):
            call.publish("hello")
        seen.append(call.key)
        return Hang()

    Simulator(humans=human).run(spec)
    assert seen == ["run/q#1"]


def test_published_items_are_kept_per_run_in_order() -> None:
    t = remind()
    assert t.progress_of() == (
        ProgressItem(0, "remind-1/ask#1", "ask", 0, "reminding to stretch"),
        ProgressItem(1, f"{t.output['reminder']}/call", None, 1000, {"sending": "stretch"}),
    )
    assert set(t.progress) == {"remind-1"}
    # Progress is not an event of the run: the log does not hold it.
    assert "reminding" not in flowcore.encode_records(t.log).decode()


def test_published_data_is_a_fresh_copy() -> None:
    sent = {"items": [1, 2]}

    def ask(call: Call) -> str:
        call.publish(sent)
        sent["items"].append(3)
        return "ok"

    t = Simulator(tools={"ask": ask}).run(SCHEDULES, run_id="r")
    assert [p.data for p in t.progress_of()] == [{"items": [1, 2]}]


def test_the_same_script_twice_gives_byte_identical_trajectories() -> None:
    def once() -> Trajectory:
        return remind(faults=[Fault("unknown", "remind_me", calls=[1])], latency_ms=3)

    first, second = once(), once()
    assert flowcore.encode_records(first.log) == flowcore.encode_records(second.log)
    assert first.describe() == second.describe()
    assert first.progress == second.progress and first.progress_of()


def test_the_progress_item_limit_is_the_hosts() -> None:
    handlers = pytest.importorskip("flowcore_handlers")
    from flowcore.testkit.asking import MAX_PROGRESS_ITEM_BYTES

    assert handlers.MAX_PROGRESS_ITEM_BYTES == MAX_PROGRESS_ITEM_BYTES


THRICE = """
flow: thrice
tools:
  remind_me: {class: idempotent}
  send_reminder: {class: idempotent, schedulable: true}
steps:
  - id: ask
    call_tool: {tool: remind_me, input: {text: "${input.text}"}}
  - {id: first, await_signal: {signal: reminder, timeout_ms: 600000}}
  - {id: second, await_signal: {signal: reminder, timeout_ms: 600000}}
  - {id: third, await_signal: {signal: reminder, timeout_ms: 600000}}
output: "${steps.ask.output}"
"""


def test_a_recurring_reminder_scheduled_by_a_handler_wakes_its_run_each_firing() -> None:
    def every_minute(call: Call) -> str:
        return call.schedule("send_reminder", call.input, every_ms=60_000, count=3)

    t = Simulator(tools={"remind_me": every_minute, "send_reminder": send_reminder}).run(
        THRICE, {"text": "stretch"}, run_id="thrice-1"
    )
    assert t.status == "completed", t.describe()
    (call,) = flowcore.scheduled_calls(t.state)
    assert (call.id, call.every_ms, call.count, call.fires) == (t.output, 60_000, 3, 3)
    # Each firing signalled the run a minute after the one before (virtual time).
    signals = [r for r in asked(t, "signal-received") if r["signal"] == "reminder"]
    assert [s["atMs"] - signals[0]["atMs"] for s in signals] == [0, 60_000, 120_000]

    # A recurrence the core refuses is refused to the handler, naming the field.
    def count_alone(call: Call) -> str:
        try:
            call.schedule("send_reminder", call.input, count=2)
        except CallError as exc:
            return str(exc)
        raise AssertionError("a count without every_ms or cron was taken")

    refused = Simulator(tools={"remind_me": count_alone, "send_reminder": send_reminder}).run(
        THRICE, {"text": "x"}, run_id="thrice-2"
    )
    (answer,) = [e["output"] for e in asked(refused, "effect-succeeded")]
    assert "count" in answer and "every_ms or cron" in answer, answer
    assert flowcore.scheduled_calls(refused.state) == ()
