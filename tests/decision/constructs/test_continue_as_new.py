"""continue_as_new in the core: what ends, what carries over, the keys, the
budget, the refusals, and replay of logs that hold several incarnations."""

from __future__ import annotations

from typing import Any

import pytest

import flowcore
from flowcore import (
    CallTool,
    ContinueAsNew,
    EffectSucceeded,
    EventRejected,
    KeyRole,
    Record,
    Recorder,
    ScheduledCancelRequested,
    Settled,
    SignalReceived,
    Sleep,
    TimerFired,
)

LOOP = """
flow: loop
budget: {steps: 3}
tools: {work: {class: idempotent}, nudge: {class: idempotent}}
steps:
  - id: later
    schedule: {tool: nudge, delay_ms: 100000, input: "${input.n}"}
  - {id: wait, await_signal: {signal: go}}
  - {id: job, call_tool: {tool: work, input: "${input.n}"}}
  - id: again
    continue_as_new: {input: {n: "${sum([input.n, `1`])}"}}
"""


def ok(key: str, at: int, output: Any = None) -> EffectSucceeded:
    return EffectSucceeded(idempotency_key=key, output=output, at_ms=at)


def signal(name: str, payload: Any, at: int) -> SignalReceived:
    return SignalReceived(signal=name, payload=payload, at_ms=at)


def first_incarnation() -> tuple[flowcore.Flow, flowcore.Decision]:
    """Incarnation 1 up to its continue-as-new: two signals buffered, one taken."""
    flow = flowcore.parse_flow(LOOP)
    d = flowcore.start(flow, {"n": 0}, run_id="r-1", now_ms=0)
    for event in (signal("go", "a", 1), signal("go", "b", 2), signal("other", 7, 3)):
        d = flowcore.advance(d.state, event)
    return flow, flowcore.advance(d.state, ok("r-1/job#1", 10))


def test_the_effect_ends_the_incarnation_and_says_what_carries_over() -> None:
    _, d = first_incarnation()
    (effect,) = d.effects
    assert isinstance(effect, ContinueAsNew)
    assert (effect.input, effect.incarnation, effect.idempotency_key) == (
        {"n": 1},
        2,
        "r-1/again#1",
    )
    assert [(s.signal, s.payload) for s in effect.signals] == [("go", "b"), ("other", 7)]
    (call,) = effect.scheduled
    assert (call.id, call.tool, call.input, call.due_ms) == ("r-1/later#1", "nudge", 0, 100000)
    assert [(r.idempotency_key, r.status) for r in effect.report] == [("r-1/job#1", "succeeded")]
    plan = flowcore.plan(d)
    assert plan.continued == effect and plan.settled is None
    assert plan.drop == ("r-1/later#1/delay",)  # re-armed by the next incarnation
    with pytest.raises(EventRejected, match="continued as new"):
        flowcore.advance(d.state, signal("go", "c", 11))
    # Default fields are left out on the wire.
    assert "budgetRemaining" not in flowcore.effect_to_wire(effect)


def test_the_next_incarnation_takes_signals_calls_and_a_fresh_budget() -> None:
    flow, d = first_incarnation()
    effect = flowcore.plan(d).continued
    assert effect is not None
    nxt = flowcore.continue_run(flow, effect, "r-1", 20)
    state = nxt.state
    assert (state.incarnation, state.run.input, state.run.started_ms) == (2, {"n": 1}, 20)
    # The buffered "go" is taken at once: the job of incarnation 2 is issued.
    assert [type(e) for e in nxt.effects] == [Sleep, Sleep, CallTool]
    keys = [e.idempotency_key for e in nxt.effects if not isinstance(e, Settled)]
    assert keys == ["r-1/later#1/delay", "r-1/@2/later#1/delay", "r-1/@2/job#1"]
    assert flowcore.waiting_for(state).buffered == {"other": (7,)}
    assert state.ledger.used_steps == 1  # a fresh budget: only this incarnation's job
    # The carried call fires in the new incarnation and can be cancelled by its id.
    fired = flowcore.advance(state, TimerFired(idempotency_key="r-1/later#1/delay", at_ms=100000))
    assert [getattr(e, "idempotency_key", None) for e in fired.effects] == ["r-1/later#1/call"]
    cancel = ScheduledCancelRequested(schedule_id="r-1/@2/later#1", at_ms=21)
    assert flowcore.advance(state, cancel).scheduled == flowcore.ScheduledAnswer(
        id="r-1/@2/later#1", done=True
    )


def test_keys_of_later_incarnations_read_back() -> None:
    info = flowcore.parse_key("r-1/@2/tick[3]/ping#1")
    assert (info.run_id, info.incarnation, info.step, info.loops) == ("r-1", 2, "ping", (3,))
    assert flowcore.parse_key("r-1/@12/$deadline").role is KeyRole.DEADLINE
    assert flowcore.parse_key("r-1/tick[3]/ping#1").incarnation == 1
    with pytest.raises(ValueError):
        flowcore.parse_key("r-1/@1/ping#1")  # the first incarnation has no @


def test_run_incarnation_in_expressions_and_a_child_keeps_its_remainder() -> None:
    spec = """
flow: child
tools: {work: {class: idempotent}}
steps:
  - {id: w, await_signal: {signal: go}}
  - {id: job, call_tool: {tool: work, input: "${run.incarnation}"}}
  - id: next
    switch:
      - if: "run.incarnation == null"
        steps: [{id: again, continue_as_new: {}}]
output: "${run.incarnation}"
"""
    flow = flowcore.parse_flow(spec)
    budget = flowcore.BudgetRemaining(steps=5)
    d = flowcore.start(flow, None, run_id="p/child#1", now_ms=0, budget=budget, depth=1)
    d = flowcore.advance(d.state, signal("go", 1, 1))
    assert d.effects[0].input is None  # type: ignore[union-attr]
    d = flowcore.advance(d.state, ok("p/child#1/job#1", 2))
    effect = flowcore.plan(d).continued
    assert effect is not None and effect.budget_remaining == flowcore.BudgetRemaining(steps=4)
    d = flowcore.continue_run(flow, effect, "p/child#1", 3, depth=1)
    d = flowcore.advance(d.state, signal("go", 1, 4))
    assert d.effects[0].input == 2  # type: ignore[union-attr]
    assert d.state.ledger.steps == 4
    d = flowcore.advance(d.state, ok("p/child#1/@2/job#1", 5))
    assert isinstance(d.effects[0], Settled) and d.effects[0].output == 2


@pytest.mark.parametrize(
    ("steps", "error"),
    [
        (  # nothing waited for, and no idle incarnation allowed
            "  - {id: again, continue_as_new: {}}\nlimits: {max_idle_incarnations: 0}",
            "continue-refused",
        ),
        (
            "  - {id: w, await_signal: {signal: go}}\n"
            "  - {id: again, continue_as_new: {input: {x: 1}}}",
            "invalid-input",  # input_schema wants n
        ),
    ],
)
def test_refusals_fail_the_step(steps: str, error: str) -> None:
    spec = "flow: f\ninput_schema: {type: object, required: [n]}\nsteps:\n" + steps + "\n"
    flow = flowcore.parse_flow(spec)
    d = flowcore.start(flow, {"n": 1}, run_id="r", now_ms=0)
    if not isinstance(d.effects[-1], Settled):
        d = flowcore.advance(d.state, signal("go", 1, 2))
    settled = d.state.settled
    assert settled is not None and settled.error is not None
    assert (settled.status, settled.error.type) == ("failed", error)


COUNTDOWN = """
flow: countdown
tools: {work: {class: readonly}}
steps:
  - id: next
    switch:
      - if: "run.incarnation == null || run.incarnation < `3`"
        steps: [{id: again, continue_as_new: {}}]
  - {id: job, call_tool: {tool: work, input: "${run.incarnation}"}}
output: "${run.incarnation}"
"""


def idle_run(spec: str, limit: int = 5000) -> tuple[list[ContinueAsNew], flowcore.Decision]:
    """Start ``spec`` and every incarnation it continues into at once."""
    flow = flowcore.parse_flow(spec)
    d = flowcore.start(flow, None, run_id="r", now_ms=0)
    effects: list[ContinueAsNew] = []
    while (effect := flowcore.plan(d).continued) is not None and len(effects) < limit:
        effects.append(effect)
        d = flowcore.continue_run(flow, effect, "r", len(effects))
    return effects, d


def test_an_idle_incarnation_continues_and_the_next_may_take_another_way() -> None:
    effects, d = idle_run(COUNTDOWN)
    assert [(e.incarnation, e.idle_incarnations) for e in effects] == [(2, 1), (3, 2)]
    wire = flowcore.effect_to_wire(effects[-1])
    assert wire["idleIncarnations"] == 2
    (call,) = d.effects
    assert isinstance(call, CallTool) and call.input == 3
    d = flowcore.advance(d.state, ok("r/@3/job#1", 9))
    assert d.state.settled is not None and d.state.settled.output == 3


@pytest.mark.parametrize("bound", [None, 2])
def test_idle_incarnations_past_the_bound_fail_and_say_which_limit(bound: int | None) -> None:
    spec = "flow: spin\nsteps:\n  - {id: again, continue_as_new: {}}\n"
    if bound is not None:
        spec += f"limits: {{max_idle_incarnations: {bound}}}\n"
    effects, d = idle_run(spec)
    assert len(effects) == (1000 if bound is None else bound)
    settled = d.state.settled
    assert settled is not None and settled.error is not None
    assert settled.error.type == "continue-refused"
    assert "limits.max_idle_incarnations" in settled.error.message
    assert settled.error.message == (
        f"step 'again': the run has continued {len(effects)} times in a row from incarnations"
        " that waited for nothing and took no signal, and this one has not waited either:"
        f" limits.max_idle_incarnations is {len(effects)}; raise it if the run ends after"
        " more of them"
    )


def test_an_incarnation_that_waits_starts_the_count_again() -> None:
    spec = """
flow: f
limits: {max_idle_incarnations: 1}
steps:
  - id: first
    switch:
      - if: "run.incarnation == `2`"
        steps: [{id: w, await_signal: {signal: go}}]
  - id: next
    switch:
      - if: "run.incarnation == null || run.incarnation < `3`"
        steps: [{id: again, continue_as_new: {}}]
output: "${run.incarnation}"
"""
    flow = flowcore.parse_flow(spec)
    d = flowcore.start(flow, None, run_id="r", now_ms=0)
    first = flowcore.plan(d).continued
    assert first is not None and first.idle_incarnations == 1
    d = flowcore.continue_run(flow, first, "r", 1)
    d = flowcore.advance(d.state, signal("go", 1, 2))  # incarnation 2 waited
    second = flowcore.plan(d).continued
    assert second is not None and second.idle_incarnations == 0
    assert "idleIncarnations" not in flowcore.effect_to_wire(second)
    d = flowcore.continue_run(flow, second, "r", 3)
    assert d.state.settled is not None and d.state.settled.output == 3


def test_an_idle_count_replays_from_the_log() -> None:
    flow = flowcore.parse_flow(COUNTDOWN)
    recorder = Recorder("r")
    d = flowcore.start(flow, None, run_id="r", now_ms=0)
    records = recorder.started(flow, None, 0, d)
    while (effect := flowcore.plan(d).continued) is not None:
        d = flowcore.continue_run(flow, effect, "r", 1)
        records += recorder.started(flow, None, 1, d, continued=effect)
    event = ok("r/@3/job#1", 2)
    d = flowcore.advance(d.state, event)
    records += recorder.applied(event, d)
    assert [r.data.get("idleIncarnations") for r in records if r.type == "run.started"] == [
        None,
        1,
        2,
    ]
    assert flowcore.replay(records, flow).status == "completed"
    data = flowcore.encode_records(records).replace(
        b'"idleIncarnations":2', b'"idleIncarnations":1'
    )
    with pytest.raises(flowcore.ReplayDivergence):
        flowcore.replay(data, flow)


def test_a_compensation_cannot_continue() -> None:
    spec = """
flow: f
tools: {work: {class: idempotent}}
steps:
  - id: a
    call_tool: {tool: work}
    compensate: [{id: again, continue_as_new: {}}]
  - {id: w, await_signal: {signal: go}}
  - {id: boom, fail: {type: boom}}
"""
    flow = flowcore.parse_flow(spec)
    d = flowcore.start(flow, None, run_id="r", now_ms=0)
    d = flowcore.advance(d.state, ok("r/a#1", 1))
    d = flowcore.advance(d.state, signal("go", 1, 2))
    (settled,) = d.effects
    assert isinstance(settled, Settled) and settled.error is not None
    assert (settled.status, settled.error.type) == ("failed", "boom")


def _log() -> tuple[flowcore.Flow, list[Record]]:
    flow, _ = first_incarnation()
    recorder = Recorder("r-1")
    d = flowcore.start(flow, {"n": 0}, run_id="r-1", now_ms=0)
    records = recorder.started(flow, {"n": 0}, 0, d)
    events: list[flowcore.Event] = [signal("go", "a", 1), signal("go", "b", 2), ok("r-1/job#1", 10)]
    for event in events:
        d = flowcore.advance(d.state, event)
        records += recorder.applied(event, d)
    effect = flowcore.plan(d).continued
    assert effect is not None
    d = flowcore.continue_run(flow, effect, "r-1", 10)
    records += recorder.started(flow, effect.input, 10, d, continued=effect)
    d = flowcore.advance(d.state, ok("r-1/@2/job#1", 11))
    records += recorder.applied(ok("r-1/@2/job#1", 11), d)
    return flow, records


def test_replay_checks_the_next_incarnations_start() -> None:
    flow, records = _log()
    report = flowcore.replay(records, flow)
    assert report.divergence is None and report.status == "running"
    # The log ends at incarnation 2's continue-as-new (the host would start the third).
    assert report.state is not None and report.state.incarnation == 2
    assert report.state.tree.continued is not None
    entries = [e for e in report.trajectory if e.kind == "continue-as-new"]
    assert [e.target for e in entries] == ["incarnation 2", "incarnation 3"]
    # A log that begins at the second incarnation replays to the same state.
    start = next(i for i, r in enumerate(records) if r.type == "run.started" and r.index)
    tail = flowcore.replay(records[start:], flow)
    assert tail.divergence is None
    assert flowcore.encode_state(tail.state) == flowcore.encode_state(report.state)  # type: ignore[arg-type]
    # A run.started that does not say what the effect said diverges there.
    edited = list(records)
    data = dict(edited[start].data, input={"n": 9})
    edited[start] = Record(edited[start].type, edited[start].index, "r-1", edited[start].at, data)
    bad = flowcore.replay(edited, flow, raise_on_divergence=False)
    assert bad.divergence is not None and bad.divergence.index == records[start].index
    # A second run.started where the run did not continue is corruption.
    with pytest.raises(flowcore.LogCorrupt, match=r"second run\.started"):
        flowcore.replay([*records[:3], Record("run.started", 3, "r-1", 2, records[0].data)], flow)


def test_children_at_the_end_of_an_incarnation_follow_parent_close_without_waiting() -> None:
    """A continue never waits for a child: ``wait`` and ``cancel`` children are
    cancelled, ``abandon`` ones detached (language.md §4.18)."""
    flow = flowcore.parse_flow(
        """
flow: p
steps:
  - id: kids
    parallel:
      branches:
        a: [{id: w, run_subflow: {flow: c, parent_close: wait}}]
        b: [{id: x, run_subflow: {flow: c, parent_close: abandon}}]
        c: [{id: go, await_signal: {signal: go}}, {id: again, continue_as_new: {}}]
"""
    )
    d = flowcore.start(flow, None, run_id="r", now_ms=0)
    d = flowcore.advance(d.state, flowcore.SignalReceived(signal="go", at_ms=1))
    assert [type(e).__name__ for e in d.effects] == ["ContinueAsNew"]
    p = flowcore.plan(d)
    assert (p.cancel, p.detach) == (("r/w#1",), ("r/x#1",))
