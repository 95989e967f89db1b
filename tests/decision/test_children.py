"""run_subflow's parent_close (cancel, abandon, wait) and detached children, in the core
and on the simulator (language.md §4.7, §13)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

import flowcore
from flowcore import (
    CancelRequested,
    EffectFailed,
    EffectOutcomeUnknown,
    EffectSucceeded,
    ErrorInfo,
    EventRejected,
    RunSubflow,
    SubflowSettled,
    TimerFired,
    Usage,
)
from flowcore.decision.state import PendingKind
from flowcore.testing import Simulator

from .test_transitions import check_tables

KEY = "r/child#1"


def race(policy: str, extra: str = "") -> str:
    """A race between a child (of ``policy``) and a quick call; ``extra`` steps after."""
    close = "detached: true" if policy == "detached" else f"parent_close: {policy}"
    return f"""
flow: parent
tools: {{quick: {{class: idempotent}}}}
steps:
  - id: first
    parallel:
      mode: race
      branches:
        slow: [{{id: child, run_subflow: {{flow: kid, input: 7, {close}}}}}]
        fast: [{{id: quick, call_tool: {{tool: quick}}}}]
{extra}output: "${{steps.first.output}}"
"""


def start(spec: str, **options: Any) -> flowcore.Decision:
    return flowcore.start(flowcore.parse_flow(spec), None, run_id="r", **options)


def settled(key: str, status: str = "completed", output: Any = None, at: int = 2) -> SubflowSettled:
    return SubflowSettled(
        idempotency_key=key,
        status=status,  # type: ignore[arg-type]
        output=output,
        usage=Usage(steps=2),
        at_ms=at,
    )


def quick_wins(d: flowcore.Decision) -> flowcore.Decision:
    return flowcore.advance(
        d.state, EffectSucceeded(idempotency_key="r/quick#1", output=1, at_ms=1)
    )


# --- the wire and the spec ----------------------------------------------------------------


def test_the_default_policy_is_left_out_and_the_others_are_on_the_effect() -> None:
    default = start(race("cancel").replace(", parent_close: cancel", "")).effects[0]
    written = start(race("cancel")).effects[0]
    assert flowcore.effect_to_wire(default) == flowcore.effect_to_wire(written)
    assert "parentClose" not in flowcore.effect_to_wire(written)
    for policy in ("abandon", "wait"):
        wire = flowcore.effect_to_wire(start(race(policy)).effects[0])
        assert wire["parentClose"] == policy and "detached" not in wire
    wire = flowcore.effect_to_wire(start(race("detached")).effects[0])
    assert wire["detached"] is True and wire["depth"] == 0 and "parentClose" not in wire
    assert flowcore.effect_from_wire(wire) == start(race("detached")).effects[0]


def test_detached_with_parent_close_is_a_spec_error_with_its_path() -> None:
    spec = race("detached").replace("detached: true", "detached: true, parent_close: wait")
    with pytest.raises(flowcore.SpecError) as caught:
        flowcore.parse_flow(spec, source_name="p.yaml")
    (problem,) = caught.value.problems
    assert problem.path == "steps[0].parallel.branches.slow[0].run_subflow.parent_close"
    assert "detached" in problem.message
    with pytest.raises(flowcore.SpecError) as caught:
        flowcore.parse_flow(race("later"))
    assert "'later' is not one of: cancel, abandon, wait" in str(caught.value)


# --- cancel: as before -------------------------------------------------------------------


def test_cancel_lists_the_child_to_cancel() -> None:
    plan = flowcore.plan(quick_wins(start(race("cancel"))))
    assert plan.cancel == (KEY,) and plan.detach == ()
    assert plan.settled is not None and plan.settled.status == "completed"


# --- abandon ---------------------------------------------------------------------------------

HOLD = "  - {id: hold, await_signal: {signal: go}}\n"


def test_abandon_detaches_the_child_and_its_late_settlement_changes_nothing_but_the_report() -> (
    None
):
    d = quick_wins(start(race("abandon", HOLD)))
    plan = flowcore.plan(d)
    assert plan.detach == (KEY,) and plan.cancel == ()
    used = flowcore.waiting_for(d.state).used_steps
    late = flowcore.advance(d.state, settled(KEY, "failed"))
    assert late.effects == () and flowcore.plan(late).cancel == ()
    assert flowcore.waiting_for(late.state).used_steps == used + 2  # its usage is charged
    with pytest.raises(EventRejected, match="duplicate"):
        flowcore.advance(late.state, settled(KEY))
    end = flowcore.advance(late.state, flowcore.SignalReceived(signal="go", payload=None, at_ms=3))
    done = end.state.settled
    assert done is not None and end.effects[-1] == done and done.status == "completed"
    assert {e.idempotency_key: e.status for e in done.report}[KEY] == "failed"


def test_a_cancelled_run_detaches_an_abandon_child_still_waited_for() -> None:
    spec = "flow: p\nsteps:\n  - {id: child, run_subflow: {flow: kid, parent_close: abandon}}\n"
    d = start(spec)
    end = flowcore.advance(d.state, CancelRequested(reason="stop", at_ms=1))
    plan = flowcore.plan(end)
    assert plan.settled is not None and plan.settled.status == "cancelled"
    assert plan.detach == (KEY,) and plan.cancel == ()
    with pytest.raises(EventRejected):  # settled: nothing applies any more
        flowcore.advance(end.state, settled(KEY))


# --- wait ------------------------------------------------------------------------------------


def test_wait_holds_the_settlement_until_the_child_settles_whatever_it_ends_with() -> None:
    d = quick_wins(start(race("wait")))
    plan = flowcore.plan(d)
    assert plan.settled is None and plan.cancel == () and plan.detach == ()
    view = flowcore.waiting_for(d.state)
    assert [(w.key, w.step) for w in view.work] == [(KEY, None)]
    assert d.state.waiting.pending[KEY].kind is PendingKind.CHILD
    with pytest.raises(EventRejected, match="cannot answer run-subflow"):
        flowcore.advance(d.state, EffectSucceeded(idempotency_key=KEY, output=1, at_ms=2))
    for event, status in (
        (settled(KEY, "failed"), "failed"),
        (settled(KEY, "completed", {"big": 1}), "succeeded"),
        (
            EffectFailed(idempotency_key=KEY, error=ErrorInfo(type="x", message="x"), at_ms=2),
            "failed",
        ),
        (EffectOutcomeUnknown(idempotency_key=KEY, at_ms=2), "uncertain"),
    ):
        end = flowcore.advance(d.state, event)
        done = end.state.settled
        assert done is not None and (done.status, done.output) == ("completed", {"fast": 1})
        assert {e.idempotency_key: e.status for e in done.report}[KEY] == status
        assert flowcore.plan(end).cancel == ()


def test_each_event_kind_answers_a_waited_child_as_the_tables_say() -> None:
    d = quick_wins(start(race("wait")))
    seen = check_tables(d.state)
    assert {kind for kind, pending in seen if pending is PendingKind.CHILD} == {
        "effect-succeeded",
        "effect-failed",
        "effect-outcome-unknown",
        "subflow-settled",
        "human-answered",
        "timer-fired",
    }


def test_a_cancelled_run_waits_for_its_child_and_a_second_cancel_settles_it() -> None:
    spec = "flow: p\nsteps:\n  - {id: child, run_subflow: {flow: kid, parent_close: wait}}\n"
    d = start(spec)
    first = flowcore.advance(d.state, CancelRequested(reason="stop", at_ms=1))
    plan = flowcore.plan(first)
    assert plan.settled is None and plan.cancel == ()
    # The child settles: the run settles cancelled.
    end = flowcore.advance(first.state, settled(KEY, at=2))
    assert end.state.settled is not None and end.state.settled.status == "cancelled"
    # Or a second cancel: the run settles at once and the child is cancelled.
    second = flowcore.advance(first.state, CancelRequested(reason="now", at_ms=2))
    plan = flowcore.plan(second)
    assert plan.settled is not None and plan.settled.status == "cancelled"
    assert plan.settled.error is not None and plan.settled.error.message == "now"
    assert plan.cancel == (KEY,)


def test_a_budget_that_runs_out_settles_at_once_and_cancels_a_waited_child() -> None:
    spec = race("wait").replace("flow: parent", "flow: parent\nbudget: {wall_clock_ms: 100}")
    d = quick_wins(start(spec))
    assert d.state.settled is None
    end = flowcore.advance(d.state, TimerFired(idempotency_key="r/$deadline", at_ms=100))
    plan = flowcore.plan(end)
    assert plan.settled is not None and plan.settled.status == "budget-exhausted"
    assert KEY in plan.cancel


def test_a_waited_child_keeps_the_run_after_a_failure_too() -> None:
    spec = """
flow: p
tools: {bad: {}}
steps:
  - id: both
    parallel:
      branches:
        a: [{id: child, run_subflow: {flow: kid, parent_close: wait}}]
        b: [{id: b, call_tool: {tool: bad}}]
"""
    d = start(spec)
    error = ErrorInfo(type="boom", message="boom")
    failed = flowcore.advance(d.state, EffectFailed(idempotency_key="r/b#1", error=error, at_ms=1))
    assert failed.state.settled is None and flowcore.plan(failed).cancel == ()
    end = flowcore.advance(failed.state, settled(KEY, "completed", "fine"))
    assert end.state.settled is not None
    assert (end.state.settled.status, end.state.settled.error) == ("failed", error)


# --- detached --------------------------------------------------------------------------------

DETACHED = """
flow: p
tools: {note: {}}
limits: {max_subflow_depth: 1}
steps:
  - id: kick
    run_subflow: {flow: kid, input: {n: 1}, detached: true}
  - id: note
    call_tool: {tool: note, input: "${steps.kick.output.run_id}"}
output: "${steps.kick.output}"
"""


def test_a_detached_child_is_answered_once_started_and_never_settles_into_the_parent() -> None:
    d = start(DETACHED, depth=1)  # at the depth limit: a detached child is a root run
    (effect,) = d.effects
    assert isinstance(effect, RunSubflow)
    assert (effect.depth, effect.detached, effect.idempotency_key) == (0, True, "r/kick#1")
    with pytest.raises(EventRejected, match="detached"):
        flowcore.advance(d.state, settled("r/kick#1"))
    started = flowcore.advance(
        d.state, EffectSucceeded(idempotency_key="r/kick#1", output={"run_id": "r/kick#1"}, at_ms=1)
    )
    (call,) = started.effects
    assert call == flowcore.CallTool(tool="note", input="r/kick#1", idempotency_key="r/note#1")
    end = flowcore.advance(
        started.state, EffectSucceeded(idempotency_key="r/note#1", output=None, at_ms=2)
    )
    assert end.state.settled is not None and end.state.settled.output == {"run_id": "r/kick#1"}


def test_a_detached_start_abandoned_before_its_answer_is_detached_not_cancelled() -> None:
    d = start(DETACHED)
    end = flowcore.advance(d.state, CancelRequested(at_ms=1))
    plan = flowcore.plan(end)
    assert plan.detach == ("r/kick#1",) and plan.cancel == ()


def test_a_detached_start_whose_outcome_is_unknown_is_issued_again_under_its_key() -> None:
    d = start(DETACHED)
    again = flowcore.advance(d.state, EffectOutcomeUnknown(idempotency_key="r/kick#1", at_ms=1))
    (first,), (second,) = d.effects, again.effects
    assert isinstance(second, RunSubflow)
    assert second == msgspec.structs.replace(first, budget_remaining=second.budget_remaining)


# --- on the simulator -------------------------------------------------------------------------

KID = """
flow: kid
tools: {work: {}}
steps:
  - {id: w, sleep: {for_ms: 5000}}
  - {id: t, call_tool: {tool: work, input: "${input}"}}
output: "${steps.t.output}"
"""


def simulate(spec: str, **world: Any) -> flowcore.testing.Trajectory:
    sim = Simulator(tools={"quick": "Q", "work": "W", "note": "N"}, subflows={"kid": KID}, **world)
    return sim.run(spec, None, run_id="r")


def test_on_the_simulator_each_policy_does_what_it_says() -> None:
    runs = {policy: simulate(race(policy)) for policy in ("cancel", "abandon", "wait")}
    status = {
        p: (t.histories["r"].state.status, t.histories[KEY].state.status) for p, t in runs.items()
    }
    assert status == {
        "cancel": ("completed", "cancelled"),
        "abandon": ("completed", "completed"),
        "wait": ("completed", "completed"),
    }
    # abandon: the parent settled long before its child; wait: only after it.
    child_end = {p: t.histories[KEY].turns[-1].state.now_ms for p, t in runs.items()}
    assert runs["abandon"].settled is not None
    assert runs["abandon"].end_ms == child_end["abandon"]
    parent_end = {
        p: next(
            e.at_ms
            for e in t.entries
            if e.run_id == "r" and e.kind == "effect" and isinstance(e.effect, flowcore.Settled)
        )
        for p, t in runs.items()
    }
    assert parent_end["abandon"] < child_end["abandon"] <= parent_end["wait"]
    assert runs["wait"].settled.output == {"fast": "Q"}  # type: ignore[union-attr]


def test_on_the_simulator_a_detached_child_outlives_its_cancelled_parent() -> None:
    t = simulate(
        DETACHED.replace("limits: {max_subflow_depth: 1}\n", "").replace(
            "  - id: note\n", "  - {id: hold, await_signal: {signal: never}}\n  - id: note\n"
        ),
        cancel_at_ms=10,
    )
    assert t.status == "cancelled"
    kid = t.histories["r/kick#1"]
    assert kid.state.status == "completed" and kid.state.settled is not None
    assert kid.state.settled.output == "W"
    assert kid.depth == 0 and kid.budget is None  # a root run with its own flow's budget
    assert flowcore.waiting_for(t.histories["r"].state).used_steps == 1  # only the start


def test_the_diagram_says_what_becomes_of_the_child() -> None:
    from flowcore.diagram import build_graph, to_mermaid

    def label(spec: str) -> str:
        graph = to_mermaid(build_graph(flowcore.parse_flow(spec)))
        return next(line for line in graph.splitlines() if "run_subflow kid" in line)

    assert label(race("wait")).endswith('run_subflow kid<br/>parent_close wait"]]')
    assert label(race("abandon")).endswith('run_subflow kid<br/>parent_close abandon"]]')
    assert label(race("detached")).endswith('run_subflow kid<br/>detached"]]')
    assert label(race("cancel")).endswith('run_subflow kid"]]')
