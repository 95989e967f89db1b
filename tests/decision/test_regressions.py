"""Regressions: each test pins a bug that was found and fixed."""

from __future__ import annotations

import pytest

import flowcore
from flowcore import EventRejected, SpecError, Usage
from tests.harness import Run


def test_repeat_until_failing_at_run_time_fails_the_step_not_advance() -> None:
    spec = """
flow: f
tools: {t: {}}
steps:
  - id: rec
    repeat:
      every_ms: 10
      until: "abs(steps.s.output)"
      steps: [{id: s, call_tool: {tool: t}}]
"""
    run = Run(spec)
    run.fire("r/rec[1]/tick")
    run.ok("r/rec[1]/s#1", "text")
    assert run.settled is not None and run.settled.error is not None
    assert run.settled.error.type == "expression-error"


def test_a_later_team_member_prompt_failing_is_an_expression_error() -> None:
    spec = """
flow: f
teams: {t: {members: [{member: a, agent: x}, {member: b, agent: y}]}}
steps:
  - {id: rv, run_team: {team: t, prompt: "${length(members.a || 'x')}"}}
"""
    run = Run(spec)
    run.ok("r/rv/a#1", 5)
    assert run.settled is not None and run.settled.error is not None
    assert run.settled.error.type == "expression-error"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("teams: {t: {members: []}}\n", "a team needs at least one member"),
        (
            "teams: {t: {members: [{member: a, agent: x}, {member: a, agent: y}]}}\n",
            "duplicate member name 'a'",
        ),
    ],
)
def test_bad_teams_are_spec_errors(body: str, message: str) -> None:
    with pytest.raises(SpecError) as info:
        flowcore.parse_flow(f"flow: f\n{body}steps: [{{id: s, sleep: {{for_ms: 1}}}}]\n")
    assert [p.message for p in info.value.problems] == [message]


@pytest.mark.parametrize(
    ("ask", "message"),
    [
        ("{question: q, options: []}", "options must not be empty"),
        ("{question: q, options: [a, a]}", "options must be distinct"),
        (
            "{question: q, options: [yes, no], timeout_ms: 5, default: maybe}",
            "default 'maybe' is not one of ['yes', 'no']",
        ),
        ("{question: q, default: x}", "a default answer needs a timeout_ms"),
    ],
)
def test_ask_human_options_and_default_are_checked(ask: str, message: str) -> None:
    with pytest.raises(SpecError) as info:
        flowcore.parse_flow(f"flow: f\nsteps: [{{id: s, ask_human: {ask}}}]\n")
    assert [p.message for p in info.value.problems] == [message]


@pytest.mark.parametrize("name", ["input", "steps", "run", "error", "fire_count", "members"])
def test_loop_variables_cannot_shadow_the_context(name: str) -> None:
    loop = f"{{items: '${{input.x}}', as: {name}, steps: [{{id: c, call_tool: {{tool: t}}}}]}}"
    spec = f"flow: f\ntools: {{t: {{}}}}\nsteps:\n  - id: e\n    for_each: {loop}\n"
    with pytest.raises(SpecError) as info:
        flowcore.parse_flow(spec)
    assert [p.message for p in info.value.problems] == [
        f"{name!r} is reserved in expressions; choose another name"
    ]


def test_late_answers_to_abandoned_questions_are_still_checked() -> None:
    spec = """
flow: f
tools: {t: {}}
steps:
  - {id: q, ask_human: {question: ok?, options: [yes, no], timeout_ms: 10, default: "no"}}
  - {id: w, call_tool: {tool: t}}
"""
    run = Run(spec)
    run.fire("r/q#1/timeout")
    before = flowcore.encode_state(run.state)
    with pytest.raises(EventRejected, match=r"answer 'zzz' is not one of \['yes', 'no'\]"):
        run.answer("r/q#1", "zzz")
    with pytest.raises(EventRejected, match="effect-succeeded cannot answer ask-human"):
        run.ok("r/q#1")
    assert flowcore.encode_state(run.state) == before
    run.answer("r/q#1", "yes")  # a late but valid answer: accepted, ignored
    assert run.effects == ()
    with pytest.raises(EventRejected, match="already late"):
        run.answer("r/q#1", "yes")


def test_timer_of_a_finished_step_cannot_be_answered_as_work() -> None:
    spec = "flow: f\ntools: {t: {}}\nsteps:\n  - {id: a, call_tool: {tool: t}, timeout_ms: 50}\n"
    run = Run(spec)
    run.ok("r/a#1")
    with pytest.raises(EventRejected):
        run.ok("r/a/timeout")


def test_scheduled_calls_respect_a_spent_cost_budget() -> None:
    spec = """
flow: f
budget: {cost_minor_units: 10}
tools: {t: {}, n: {}}
steps:
  - {id: s, schedule: {tool: n, delay_ms: 100}}
  - {id: a, call_tool: {tool: t}}
  - {id: b, sleep: {for_ms: 500}}
"""
    run = Run(spec)
    run.ok("r/a#1", usage=Usage(cost_minor_units=10))
    run.fire("r/s#1/delay")
    assert run.settled is not None
    assert (run.settled.status, run.settled.exhausted) == ("budget-exhausted", "cost")


def test_a_race_decided_at_once_never_sends_the_losers_work() -> None:
    spec = """
flow: f
tools: {t: {}}
steps:
  - id: race
    parallel:
      mode: race
      branches:
        slow: [{id: w, call_tool: {tool: t}}]
        fast: [{id: z, sleep: {for_ms: 0}}]
  - {id: after, call_tool: {tool: t}}
"""
    run = Run(spec)
    assert run.keys() == ["r/after#1"]
    assert run.state.ledger.used_steps == 1
    run.ok("r/after#1")
    assert run.report() == {"r/w#1": "not-started", "r/after#1": "succeeded"}


def test_one_cancel_settles_even_with_an_outliving_call_pending() -> None:
    spec = """
flow: f
tools: {t: {}, n: {}}
steps:
  - {id: s, schedule: {tool: n, delay_ms: 100, outlive_run: true}}
  - {id: a, call_tool: {tool: t}}
"""
    run = Run(spec)
    run.cancel("stop")
    assert run.settled is not None and run.settled.status == "cancelled"
    assert run.settled.error is not None and run.settled.error.message == "stop"
