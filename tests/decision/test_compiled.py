"""The compiled start of plain call steps (``flowcore/decision/compiled.py``).

``PlainCall.start`` begins a plain ``call_tool`` step directly from what was
worked out once per flow; the general path (``constructs.begin`` and
``emit_work``) begins every other step, and this one whenever ``start``
declines. The two must decide alike: on generated flows and event streams
(hostile ones included) every state's snapshot, every effect, reply and
rejection is the same with the compiled start on and off; the cases where it
must decline (held work, what pending work holds, an input template that
fails) decide as the general path does; and it is really used.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import flowcore
from flowcore import EventRejected
from flowcore.decision import compiled, constructs
from flowcore.decision.interp import Batch
from flowcore.decision.wire import CallTool, EffectSucceeded, Event, Settled
from flowcore.testing import event_streams, flow_inputs, flows


@contextmanager
def general_only() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(compiled, "ENABLED", False)
        yield


def decide(flow: flowcore.Flow, inp: Any, events: list[Event]) -> list[Any]:
    """Everything a run of ``flow`` decides for ``events``, in comparable form,
    by ``advance`` and by a ``Batch`` (replay's batch apply) beside it."""
    out: list[Any] = []
    d = flowcore.start(flow, inp, run_id="r", now_ms=0)
    state = d.state
    batch = Batch(state)
    out.append((flowcore.encode_state(state), d.effects))
    for event in events:
        try:
            d = flowcore.advance(state, event)
        except EventRejected as exc:
            out.append(("rejected", exc.reason))
            with pytest.raises(EventRejected):
                batch.advance(event)
            continue
        state = d.state
        applied = batch.advance(event)
        assert tuple(applied) == d.effects
        out.append((flowcore.encode_state(state), d.effects, d.replies, d.scheduled))
    out.append(flowcore.encode_state(batch.state()))
    return out


def both(flow: flowcore.Flow, inp: Any, events: list[Event]) -> list[Any]:
    fast = decide(flow, inp, events)
    with general_only():
        general = decide(flowcore.parse_flow(flow_spec(flow), source_name="again"), inp, events)
    assert fast == general
    return fast


_SPECS: dict[str, Any] = {}


def flow_spec(flow: flowcore.Flow) -> Any:
    return _SPECS[flow.spec_hash]


def parse(spec: Any) -> flowcore.Flow:
    flow = flowcore.parse_flow(spec, source_name="generated")
    _SPECS[flow.spec_hash] = spec
    return flow


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(spec=flows(updates=True), inp=flow_inputs(), data=st.data())
def test_compiled_and_general_paths_decide_alike(spec: Any, inp: Any, data: st.DataObject) -> None:
    flow = parse(spec)
    events = data.draw(event_streams(flow, inp, run_id="r", max_events=30))
    both(flow, inp, events)


CALLS = (
    "call_tool",
    "run_agent",
    "schedule",
    "parallel",
    "for_each",
    "repeat",
    "switch",
    "try",
    "sleep",
)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(spec=flows(kinds=CALLS, max_steps=6), inp=flow_inputs(), data=st.data())
def test_compiled_and_general_paths_decide_alike_on_lists_of_calls(
    spec: Any, inp: Any, data: st.DataObject
) -> None:
    """Flows of mostly plain calls, in every kind of list: the compiled start's
    commonest ground."""
    flow = parse(spec)
    events = data.draw(event_streams(flow, inp, run_id="r", max_events=40))
    both(flow, inp, events)


SEQUENTIAL = """
flow: plain
tools:
  t: {class: idempotent}
  w: {class: idempotent}
limits: {max_concurrency: MAXC}
budget: {steps: STEPS}
steps:
  - {id: a, call_tool: {tool: t, input: {n: 1}}}
  - {id: b, call_tool: {tool: t, input: {got: "${steps.a.output.n}"}}}
  - id: c
    call_tool: {tool: w, input: "${steps.b.output}"}
    cancellation: wait_cancellation_completed
  - {id: d, call_tool: {tool: t, input: "${length(steps.c.output.x)}"}}
"""


def run_through(text: str, outputs: list[Any]) -> list[Any]:
    flow = parse(_yaml(text))
    d = flowcore.start(flow, None, run_id="r")
    events: list[Event] = []
    state = d.state
    effects = list(d.effects)
    for n, output in enumerate(outputs):
        calls = [e for e in effects if isinstance(e, CallTool)]
        if not calls:
            break
        ev = EffectSucceeded(idempotency_key=calls[0].idempotency_key, output=output, at_ms=n)
        events.append(ev)
        d = flowcore.advance(state, ev)
        state, effects = d.state, list(d.effects)
    return both(flow, None, events)


def _yaml(text: str) -> Any:
    import yaml

    return yaml.safe_load(text)


def test_plain_steps_begin_alike_with_cancellation_modes_and_a_failing_template() -> None:
    text = SEQUENTIAL.replace("MAXC", "4").replace("STEPS", "20")
    decided = run_through(text, [{"n": 1}, {"k": 2}, {"x": 3}])
    effects = [e for entry in decided[1:-1] for e in entry[1]]
    calls = [e for e in effects if isinstance(e, CallTool)]
    modes = {e.idempotency_key.split("/")[1]: e.cancellation for e in calls}
    assert modes == {"b#1": "try-cancel", "c#1": "wait-cancellation-completed"}
    # d's input template fails: the general path fails the step, and the run.
    settled = effects[-1]
    assert isinstance(settled, Settled) and settled.status == "failed"
    assert settled.error is not None and settled.error.type == "expression-error"


def test_budget_running_out_at_a_plain_step_decides_alike() -> None:
    run_through(SEQUENTIAL.replace("MAXC", "4").replace("STEPS", "2"), [{"n": 1}, {"k": 2}])


def test_held_work_decides_alike() -> None:
    text = """
flow: held
tools: {t: {class: idempotent}}
limits: {max_concurrency: 1}
steps:
  - id: both
    parallel:
      branches:
        one: [{id: a1, call_tool: {tool: t}}, {id: a2, call_tool: {tool: t}}]
        two: [{id: b1, call_tool: {tool: t}}, {id: b2, call_tool: {tool: t}}]
"""
    run_through(text, [1, 2, 3, 4, 5])


def test_a_plain_step_skips_the_general_begin(monkeypatch: pytest.MonkeyPatch) -> None:
    """Counted: the compiled start begins plain call steps; the general path is
    not asked to (it is, with the compiled start off)."""
    flow = parse(_yaml(SEQUENTIAL.replace("MAXC", "4").replace("STEPS", "20")))
    calls: list[str] = []
    real = constructs.begin

    def counting(t: Any, frame: Any, step: Any) -> Any:
        calls.append(step.id)
        return real(t, frame, step)

    monkeypatch.setattr(flowcore.decision.interp._Above, "begin", staticmethod(counting))
    d = flowcore.start(flow, None, run_id="r")
    first = d.effects[0]
    assert isinstance(first, CallTool)
    ev = EffectSucceeded(idempotency_key=first.idempotency_key, output={"n": 1}, at_ms=1)
    flowcore.advance(d.state, ev)
    assert calls == []
    assert isinstance(compiled.plain_work(flow, flow.by_id["a"]), compiled.PlainCall)
    with general_only():
        d = flowcore.start(flow, None, run_id="r")
        flowcore.advance(d.state, ev)
    assert calls == ["a", "b"]


def test_what_is_worked_out_is_no_part_of_the_flow() -> None:
    """``Flow.compiled`` changes neither the flow's equality nor its hash."""
    spec = _yaml(SEQUENTIAL.replace("MAXC", "4").replace("STEPS", "20"))
    used, fresh = parse(spec), parse(spec)
    flowcore.start(used, None, run_id="r")
    assert used.compiled and not fresh.compiled
    assert used == fresh and hash(used) == hash(fresh)


def test_a_copied_flow_still_begins_its_steps_alike() -> None:
    """What was worked out travels with a flow that is copied, and a step the
    general path begins is still told apart from a plain one."""
    import copy

    spec = _yaml(SEQUENTIAL.replace("MAXC", "4").replace("STEPS", "20"))
    spec["steps"].insert(0, {"id": "nap", "sleep": {"for_ms": 5}})
    flow = parse(spec)
    d = flowcore.start(flow, None, run_id="r")  # works out "nap" (general) and more
    assert flow.compiled["nap"] is False
    for other in (copy.deepcopy(flow), copy.copy(flow)):
        assert compiled.plain_work(other, other.by_id["nap"]) is None
        again = flowcore.start(other, None, run_id="r")
        assert flowcore.encode_state(again.state) == flowcore.encode_state(d.state)
        assert again.effects == d.effects
