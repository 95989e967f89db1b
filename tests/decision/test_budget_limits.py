"""Tokens, tool calls and turns, and ``on_budget_exhausted`` (specs/language.md §11).

The conformance vectors budget-tokens-turns-tool-calls and budget-reserve play
these on every host; here the edges: what parses, what each limit counts,
the reserve running out, the final steps failing, and a child's share.
"""

from __future__ import annotations

from typing import Any

import pytest

import flowcore
from flowcore import EffectFailed, EffectSucceeded, ErrorInfo, Usage


def parse(spec: str) -> flowcore.Flow:
    return flowcore.parse_flow(spec, "t.yaml")


def problems(spec: str) -> list[str]:
    with pytest.raises(flowcore.SpecError) as caught:
        parse(spec)
    return [str(p) for p in caught.value.problems]


RESERVED = """\
flow: f
budget: {steps: 10, tokens: 1000, tool_calls: 5, turns: 8}
tools: {t: {class: readonly}}
steps:
  - {id: a, call_tool: {tool: t}}
  - {id: b, run_agent: {agent: x, prompt: p}}
  - {id: c, run_agent: {agent: x, prompt: q}}
on_budget_exhausted:
  reserve: {steps: 2, tokens: 100, tool_calls: 1, turns: 1}
  steps:
    - {id: last, run_agent: {agent: w, prompt: "best of ${steps.b.output}"}}
"""


def test_the_reserve_is_taken_off_what_the_main_work_sees() -> None:
    d = flowcore.start(parse(RESERVED), None, run_id="r", now_ms=0)
    d = flowcore.advance(d.state, EffectSucceeded(idempotency_key="r/a#1", at_ms=1))
    (agent,) = d.effects
    assert isinstance(agent, flowcore.RunAgent)
    assert agent.budget_remaining == flowcore.BudgetRemaining(
        steps=6, tokens=900, tool_calls=3, turns=7
    )


def drive(spec: str, b_usage: Usage, last: Any = "done") -> flowcore.Settled:
    d = flowcore.start(parse(spec), None, run_id="r", now_ms=0)
    d = flowcore.advance(d.state, EffectSucceeded(idempotency_key="r/a#1", at_ms=1))
    d = flowcore.advance(
        d.state, EffectSucceeded(idempotency_key="r/b#1", output="B", usage=b_usage, at_ms=2)
    )
    if d.state.settled is None:
        (final,) = d.effects
        assert isinstance(final, flowcore.RunAgent) and final.idempotency_key == "r/last#1"
        assert final.prompt == "best of B"
        if isinstance(last, ErrorInfo):
            event: Any = EffectFailed(idempotency_key="r/last#1", error=last, at_ms=3)
        else:
            event = EffectSucceeded(
                idempotency_key="r/last#1", output=last, usage=Usage(tokens=50), at_ms=3
            )
        d = flowcore.advance(d.state, event)
    settled = d.state.settled
    assert settled is not None
    return settled


def test_each_limit_names_itself_and_the_final_steps_give_the_output() -> None:
    for usage, limit in (
        (Usage(tokens=901), "tokens"),
        (Usage(turns=7), "turns"),  # 7 of 7 used: c cannot take a turn
        (Usage(tool_calls=4), "tool-calls"),
        (Usage(steps=6), "steps"),
    ):
        settled = drive(RESERVED, usage)
        assert (settled.status, settled.exhausted, settled.output) == (
            "budget-exhausted",
            limit,
            "done",
        ), usage


def test_final_steps_that_fail_settle_without_an_output() -> None:
    settled = drive(RESERVED, Usage(tokens=901), ErrorInfo(type="model-error", message="down"))
    assert settled.output is None and settled.exhausted == "tokens"
    assert settled.error is not None
    assert settled.error.message == (
        "token budget exhausted; its final steps failed (model-error: down)"
    )


def test_running_out_of_the_reserve_settles_at_once() -> None:
    d = flowcore.start(parse(RESERVED), None, run_id="r", now_ms=0)
    d = flowcore.advance(d.state, EffectSucceeded(idempotency_key="r/a#1", at_ms=1))
    d = flowcore.advance(
        d.state, EffectSucceeded(idempotency_key="r/b#1", usage=Usage(tokens=950), at_ms=2)
    )
    d = flowcore.advance(
        d.state, EffectSucceeded(idempotency_key="r/last#1", usage=Usage(tokens=60), at_ms=3)
    )
    assert isinstance(d.effects[-1], flowcore.Settled)
    assert d.effects[-1].status == "budget-exhausted" and d.effects[-1].output is None
    assert d.effects[-1].exhausted == "tokens"


def test_a_reserved_wall_clock_moves_the_deadline() -> None:
    flow = parse(
        "flow: f\nbudget: {wall_clock_ms: 10000}\n"
        "steps:\n  - {id: w, await_signal: {signal: go}}\n"
        "on_budget_exhausted:\n  reserve: {wall_clock_ms: 2000}\n"
        "  steps:\n    - {id: ask, ask_human: {question: 'what now?'}}\n"
        "  output: '${steps.ask.answer}'\n"
    )
    d = flowcore.start(flow, None, run_id="r", now_ms=0)
    assert flowcore.Sleep(until_ms=8000, idempotency_key="r/$deadline") in d.effects
    d = flowcore.advance(d.state, flowcore.TimerFired(idempotency_key="r/$deadline", at_ms=8000))
    assert flowcore.Sleep(until_ms=10000, idempotency_key="r/$deadline-reserve") in d.effects
    ask = next(e for e in d.effects if isinstance(e, flowcore.AskHuman))
    assert flowcore.parse_key("r/$deadline-reserve", "r").role is flowcore.KeyRole.DEADLINE
    done = flowcore.advance(
        d.state, flowcore.HumanAnswered(idempotency_key=ask.idempotency_key, answer="x", at_ms=9)
    )
    settled = done.state.settled
    assert settled is not None and (settled.exhausted, settled.output) == ("wall-clock", "x")
    late = flowcore.advance(
        d.state, flowcore.TimerFired(idempotency_key="r/$deadline-reserve", at_ms=10000)
    )
    assert late.state.settled is not None and late.state.settled.output is None


def test_what_parses_and_what_does_not() -> None:
    assert problems(RESERVED.replace("turns: 1}", "turns: 1, naps: 2}")) == [
        "t.yaml:9:61 (on_budget_exhausted.reserve.naps): unknown key 'naps'"
    ]
    dup = RESERVED.replace("id: last", "id: b")
    assert any("duplicate step id 'b'" in p for p in problems(dup))
    bad_ref = RESERVED.replace("steps.b.output", "steps.nope.output")
    assert any("expression reads unknown step 'nope'" in p for p in problems(bad_ref))
    missing = "flow: f\nsteps: [{id: a, sleep: {for_ms: 1}}]\non_budget_exhausted: {steps: []}\n"
    assert any("reserve" in p for p in problems(missing))


def test_what_failed_work_spent_is_charged() -> None:
    """An agent cut off by its own limits reports what it spent on ``effect-failed``:
    that is charged, so the run's limit is reached and the reserve's steps run."""
    d = flowcore.start(parse(RESERVED), None, run_id="r", now_ms=0)
    d = flowcore.advance(d.state, EffectSucceeded(idempotency_key="r/a#1", at_ms=1))
    cut = EffectFailed(
        idempotency_key="r/b#1",
        error=ErrorInfo(type="usage-limit-exceeded", message="over"),
        usage=Usage(tokens=950, turns=2),
        at_ms=2,
    )
    d = flowcore.advance(d.state, cut)
    (final,) = d.effects
    assert isinstance(final, flowcore.RunAgent) and final.idempotency_key == "r/last#1"
    assert flowcore.waiting_for(d.state).used_tokens == 950
    assert final.budget_remaining.tokens == 50  # 1,000 with the reserve back, 950 spent


def test_replay_sums_usage_by_member_and_by_child_run() -> None:
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "specs" / "conformance"
    child = root / "subflow-completed"
    flow = flowcore.parse_flow((child / "flow.yaml").read_text())
    report = flowcore.replay(flowcore.decode_log((child / "log.ndjson").read_bytes()).records, flow)
    assert report.usage_delegated == Usage(steps=4, cost_minor_units=80)
    assert report.usage == report.usage_delegated  # the parent's only reported usage
    team = root / "team-sequential"
    flow = flowcore.parse_flow((team / "flow.yaml").read_text())
    report = flowcore.replay(flowcore.decode_log((team / "log.ndjson").read_bytes()).records, flow)
    assert set(report.usage_by_member) == {"security", "style"}
    assert report.usage_delegated == Usage()
