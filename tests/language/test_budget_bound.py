"""flowcore.budget_bound: a flow's worst-case spend from its spec alone.

Exact bounds on written flows, every construct that leaves a bound open named
with its place, the runtime ``max_items`` check, and the soundness property:
no simulated run of a generated flow ever spends more than its bound.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import flowcore
from flowcore import Budget, budget_bound, parse_flow
from flowcore.diagram import build_graph, to_mermaid
from flowcore.language.spec import Amount
from flowcore.testing import (
    AGENTS,
    CHILD_SPEC,
    Fault,
    faults,
    flow_inputs,
    flows,
    generated_world,
    simulate,
)

from ..harness import SCHEDULES_AT_RUN_TIME

EXAMPLES = Path(__file__).resolve().parents[2] / "specs" / "examples"

HEAD = """
flow: f
tools:
  t: {max_usage: {}}
  ro: {class: readonly, max_usage: {}}
  paid: {max_usage: {steps: 2, cost_minor_units: 30, tool_calls: 1}}
agents:
  bot: {max_usage: {steps: 1, cost_minor_units: 100, tool_calls: 4}}
"""


def bound(steps: str, head: str = HEAD, **kw: Any) -> flowcore.BudgetBound:
    return budget_bound(parse_flow(head + "steps:\n" + steps), **kw)


def spend(b: flowcore.BudgetBound) -> tuple[int | None, int | None, int | None]:
    return (b.steps, b.cost_minor_units, b.tool_calls)


# --- exact bounds ----------------------------------------------------------------------------


def test_a_sequence_adds_each_call_and_its_declared_usage() -> None:
    b = bound("""
  - {id: a, call_tool: {tool: t}}
  - {id: b, call_tool: {tool: paid}}
  - {id: c, run_agent: {agent: bot, prompt: p}}
  - {id: d, sleep: {for_ms: 5}}
""")
    # t: 1 step 1 call; paid: 1+2 steps, 30 cost, 1+1 calls; bot: 1+1 steps, 100, 4
    assert spend(b) == (6, 130, 7)
    assert b.bounded and b.unbounded == ()
    assert [(r.id, r.path, r.spend.steps) for r in b.breakdown] == [
        ("a", "steps[0]", 1),
        ("b", "steps[1]", 3),
        ("c", "steps[2]", 2),
        ("d", "steps[3]", 0),
    ]
    assert b.incarnation == b.spend


def test_retry_multiplies_by_attempts_and_safe_calls_add_their_reissues() -> None:
    # uncertain tool, 4 attempts: 4 issues. Readonly tool, no retry: 3 issues
    # (DEFAULT_UNKNOWN_REISSUES). Readonly tool, 3 attempts: attempt a may be
    # issued 3 - a + 1 times (re-issues are counted per attempt): 3 + 2 + 1.
    assert bound("  - {id: a, call_tool: {tool: t}, retry: {max_attempts: 4}}\n").steps == 4
    assert bound("  - {id: a, call_tool: {tool: ro}}\n").steps == 3
    assert bound("  - {id: a, call_tool: {tool: ro}, retry: {max_attempts: 3}}\n").steps == 6
    assert bound("  - {id: a, call_tool: {tool: ro}, retry: {max_attempts: 1}}\n").steps == 1
    # an agent is never re-issued: attempts only
    b = bound("  - {id: a, run_agent: {agent: bot, prompt: p}, retry: {max_attempts: 2}}\n")
    assert spend(b) == (4, 200, 8)


def test_reissues_per_attempt_really_happen() -> None:
    """The readonly tool with 3 attempts is issued 6 times: twice unknown, then a
    retryable failure of the re-issue; once unknown, then a failure; then a success."""
    flow = parse_flow(
        HEAD + "steps:\n  - {id: a, call_tool: {tool: ro}, retry: "
        "{max_attempts: 3, initial_interval_ms: 0}}\n"
    )
    faults = [
        Fault("unknown", "ro", calls=[1, 2, 4]),
        Fault("fail-retryable", "ro", calls=[3, 5]),
    ]
    traj = simulate(flow, None, faults=faults, default=lambda call: "ok")
    assert traj.status == "completed"
    keys = [e.idempotency_key for e in traj.effects("call-tool")]  # type: ignore[union-attr]
    assert keys == ["run/a#1"] * 3 + ["run/a#2"] * 2 + ["run/a#3"]
    assert traj.state.ledger.used_steps == 6 == budget_bound(flow).steps


def test_switch_takes_the_costliest_case_and_parallel_adds_every_branch() -> None:
    b = bound("""
  - id: s
    switch:
      - if: "input.x"
        steps: [{id: a, call_tool: {tool: t}}]
      - else:
          - {id: b, call_tool: {tool: paid}}
          - {id: c, call_tool: {tool: t}}
  - id: p
    parallel:
      mode: race
      branches:
        x: [{id: d, call_tool: {tool: t}}]
        y: [{id: e, run_agent: {agent: bot, prompt: p}}]
""")
    assert spend(b) == (4 + 3, 30 + 100, 3 + 5)
    assert [(r.id, r.level) for r in b.breakdown] == [
        ("s", 0),
        ("a", 1),
        ("b", 1),
        ("c", 1),
        ("p", 0),
        ("d", 1),
        ("e", 1),
    ]


def test_loops_multiply_by_max_items_and_max_fires() -> None:
    b = bound("""
  - id: per
    for_each:
      items: "${input}"
      max_items: 4
      steps:
        - {id: a, call_tool: {tool: t}}
        - id: again
          repeat:
            every_ms: 10
            max_fires: 3
            steps: [{id: b, call_tool: {tool: paid}}]
""")
    assert spend(b) == (4 * (1 + 3 * 3), 4 * 3 * 30, 4 * (1 + 3 * 2))


def test_try_adds_the_body_and_the_costliest_handler_and_compensations_add() -> None:
    b = bound("""
  - id: g
    try:
      - id: a
        call_tool: {tool: t}
        compensate: [{id: undo, call_tool: {tool: paid}}]
    catch:
      - errors: [x]
        steps: [{id: h1, call_tool: {tool: t}}]
      - steps:
          - {id: h2, call_tool: {tool: t}}
          - {id: h3, call_tool: {tool: t}}
    retry: {max_attempts: 2, errors: ["*"]}
""")
    # one attempt: a (1) + its compensation (3) + the larger handler (2) = 6
    assert b.steps == 12
    assert [r.id for r in b.breakdown] == ["g", "a", "undo", "h1", "h2", "h3"]


def test_declared_teams_cost_one_run_agent_per_member() -> None:
    head = (
        HEAD
        + """
  ana: {max_usage: {steps: 2}}
teams:
  crew:
    members:
      - {member: one, agent: bot}
      - {member: two, agent: ana}
"""
    )
    b = bound("  - {id: r, run_team: {team: crew, prompt: p}, retry: {max_attempts: 2}}\n", head)
    assert spend(b) == (2 * (2 + 3), 2 * 100, 2 * 4)


def test_subflows_add_their_issues_and_the_childs_whole_bound() -> None:
    child = parse_flow(
        HEAD.replace("flow: f", "flow: kid")
        + """steps:
  - {id: k1, call_tool: {tool: paid}}
  - {id: k2, run_subflow: {flow: grandkid}}
"""
    )
    grandkid = parse_flow(
        HEAD.replace("flow: f", "flow: grandkid") + "steps: [{id: g1, call_tool: {tool: t}}]\n"
    )
    steps = "  - {id: c, run_subflow: {flow: kid}}\n"
    # c: 3 issues (re-issues) + kid: 3 + (3 + grandkid 1) = 10
    b = bound(steps, subflows={"kid": child, "grandkid": grandkid})
    assert spend(b) == (3 + 3 + 3 + 1, 30, 2 + 1)
    # with retry 2: 2 + 1 issues, and the child twice (one child run per attempt)
    b = bound(
        "  - {id: c, run_subflow: {flow: kid}, retry: {max_attempts: 2}}\n",
        subflows={"kid": child, "grandkid": grandkid},
    )
    assert b.steps == 3 + 2 * 7
    # a detached child costs its issues only
    b = bound("  - {id: c, run_subflow: {flow: kid, detached: true}}\n")
    assert spend(b) == (3, 0, 0)


def test_a_flow_that_recurses_into_itself_is_bounded_by_the_depth_limit() -> None:
    spec = (
        HEAD
        + """limits: {max_subflow_depth: 2}
steps:
  - {id: a, call_tool: {tool: t}}
  - id: deeper
    try: [{id: again, run_subflow: {flow: f}}]
    catch: [{steps: [{id: rest, sleep: {for_ms: 1}}]}]
"""
    )
    flow = parse_flow(spec)
    # depth 2: a (1), the run_subflow beyond the limit fails at once, costing nothing.
    # depth 1: 1 + 3 + 1 = 5; depth 0: 1 + 3 + 5 = 9
    assert budget_bound(flow, subflows={"f": flow}).steps == 9
    assert budget_bound(flow, subflows={"f": flow}, depth=2).steps == 1
    # the simulator agrees: every issue answered, the chain reaches depth 2
    traj = simulate(flow, None, subflows={"f": flow}, default=lambda call: "ok")
    assert traj.status == "completed"
    assert traj.state.ledger.used_steps == 1 + 1 + (1 + 1 + 1)
    assert len(traj.runs) == 3


def test_a_scheduled_call_costs_its_issues_when_it_fires() -> None:
    b = bound("""
  - {id: later, schedule: {tool: ro, delay_ms: 10}}
  - {id: once, schedule: {tool: paid, delay_ms: 10}}
""")
    # ro: safe, up to 3 issues; paid: uncertain, one issue of 3 steps, 30, 2 calls
    assert spend(b) == (3 + 3, 30, 3 + 2)


def test_a_recurring_call_costs_its_issues_per_firing_and_needs_a_count() -> None:
    b = bound("""
  - {id: daily, schedule: {tool: paid, cron: "0 9 * * *", count: 4}}
""")
    assert spend(b) == (4 * 3, 4 * 30, 4 * 2)
    b = bound("""
  - {id: ever, schedule: {tool: ro, every_ms: 1000}}
""")
    assert b.steps is None
    assert ("schedule", "steps[0].schedule", "schedule 'ever' has no count") in reasons(b)


def test_scheduled_calls_carry_over_to_the_next_incarnation() -> None:
    b = bound("""
  - {id: later, schedule: {tool: ro, delay_ms: 10}}
  - {id: w, sleep: {for_ms: 5}}
  - {id: again, continue_as_new: {}}
""")
    assert b.incarnation == flowcore.Spend(None, 0, None)
    assert (
        "schedule",
        "steps[0].schedule",
        "schedule 'later': calls not yet fired carry over to the next incarnation "
        "(continue_as_new 'again')",
    ) in reasons(b)


def test_a_recursion_deeper_than_the_computation_goes_is_named() -> None:
    spec = (
        HEAD
        + """limits: {max_subflow_depth: 1000}
steps:
  - {id: a, call_tool: {tool: t}}
  - {id: again, run_subflow: {flow: f}}
"""
    )
    flow = parse_flow(spec)
    b = budget_bound(flow, subflows={"f": flow})
    assert spend(b) == (None, None, None)
    assert reasons(b) == {
        (
            "run_subflow",
            "steps[1].run_subflow",
            "in flow 'f' at depth 65: subflows nest deeper than 64 levels: not computed",
        )
    }
    # 64 levels are computed: 1 + 3 per level, and the last level's own call
    shallow = parse_flow(spec.replace("1000", "64"))
    assert budget_bound(shallow, subflows={"f": shallow}).steps == 64 * 4 + 1


def test_continue_as_new_where_it_is_refused_leaves_the_run_bounded() -> None:
    b = bound("""
  - id: a
    call_tool: {tool: t}
    compensate: [{id: again, continue_as_new: {}}]
""")
    assert spend(b) == (1, 0, 1) and b.bounded


def test_on_budget_exhausted_steps_are_added_without_their_compensations() -> None:
    head = (
        HEAD
        + """
on_budget_exhausted:
  reserve: {steps: 2}
  steps:
    - id: best
      run_agent: {agent: bot, prompt: p}
      compensate: [{id: never, call_tool: {tool: t}}]
"""
    )
    assert spend(bound("  - {id: a, call_tool: {tool: t}}\n", head)) == (3, 100, 5)


# --- open bounds, each named ---------------------------------------------------------------


def reasons(b: flowcore.BudgetBound) -> set[tuple[str, str, str]]:
    return {(u.construct, u.path, u.why) for u in b.unbounded}


def test_a_repeat_without_max_fires_and_a_for_each_without_max_items() -> None:
    b = bound("""
  - id: poll
    repeat:
      every_ms: 10
      steps: [{id: a, call_tool: {tool: t}}]
  - id: per_item
    for_each: {items: "${input}", steps: [{id: b, call_tool: {tool: t}}]}
""")
    assert spend(b) == (None, 0, None)  # the bodies cost nothing
    assert reasons(b) == {
        ("repeat", "steps[0].repeat", "repeat 'poll' has no max_fires"),
        ("for_each", "steps[1].for_each", "for_each 'per_item' declares no max_items"),
    }
    assert {u.limit for u in b.unbounded} == {"steps", "tool_calls"}
    # a loop whose body spends nothing stays bounded
    quiet = bound("  - {id: w, repeat: {every_ms: 9, steps: [{id: s, sleep: {for_ms: 1}}]}}\n")
    assert spend(quiet) == (0, 0, 0) and quiet.bounded


def test_a_tool_without_max_usage_bounds_steps_and_tool_calls_not_cost() -> None:
    b = bound(
        """
  - {id: a, call_tool: {tool: quiet}, retry: {max_attempts: 2}}
  - {id: b, call_tool: {tool: quiet}}
""",
        "\nflow: f\ntools:\n  quiet: {}\n",
    )
    assert spend(b) == (3, None, 3)
    assert {(u.limit, u.path) for u in b.unbounded} == {
        ("cost", "steps[0].call_tool"),
        ("cost", "steps[1].call_tool"),
    }


def test_unknown_usage_missing_subflows_and_outside_calls() -> None:
    head = """
flow: f
tools:
  quiet: {}
  cleanup: {schedulable: true, max_usage: {}}
"""
    b = bound(
        """
  - {id: a, call_tool: {tool: quiet}}
  - {id: triage, run_agent: {agent: triager, prompt: p}}
  - {id: c, run_subflow: {flow: x}}
  - {id: r, run_team: {team: outsiders, prompt: p}}
""",
        head,
    )
    assert spend(b) == (None, None, None)
    assert reasons(b) == {
        ("tool", "steps[0].call_tool", "tool 'quiet' declares no max_usage: its cost is unknown"),
        ("agent", "steps[1].run_agent", "agent 'triager' declares no max_usage"),
        ("run_subflow", "steps[2].run_subflow", "run_subflow 'c': flow 'x' not given"),
        (
            "run_team",
            "steps[3].run_team",
            "team 'outsiders' is not declared: the usage of its run-team is unknown",
        ),
        (
            "tool",
            "tools.cleanup",
            "tool 'cleanup' is schedulable: calls may be added from outside the run",
        ),
    }


def test_continue_as_new_leaves_the_run_open_but_bounds_each_incarnation() -> None:
    b = bound("""
  - {id: a, call_tool: {tool: paid}}
  - {id: w, sleep: {for_ms: 5}}
  - {id: again, continue_as_new: {}}
""")
    assert spend(b) == (None, None, None)
    assert b.incarnation == flowcore.Spend(3, 30, 2)
    assert reasons(b) == {
        (
            "continue_as_new",
            "steps[2].continue_as_new",
            "continue_as_new 'again' starts the run again: each incarnation spends afresh",
        )
    }


def test_a_child_that_is_open_names_its_construct_in_the_parent() -> None:
    child = parse_flow("flow: kid\nsteps: [{id: k, run_agent: {agent: z, prompt: p}}]\n")
    b = bound("  - {id: c, run_subflow: {flow: kid}}\n", subflows={"kid": child})
    assert b.steps is None
    assert (
        "agent",
        "steps[0].run_subflow",
        "in flow 'kid' at depth 1, steps[0].run_agent: agent 'z' declares no max_usage",
    ) in reasons(b)


# --- below: the validate warning ---------------------------------------------------------------


def test_below_lists_the_declared_limits_under_the_worst_case() -> None:
    b = bound("  - {id: a, call_tool: {tool: paid}, retry: {max_attempts: 3}}\n")
    assert spend(b) == (9, 90, 6)
    short = b.below(Budget(steps=Amount(5), cost_minor_units=Amount(100), tool_calls=Amount(6)))
    assert [(s.limit, s.declared, s.worst) for s in short] == [("steps", 5, 9)]
    assert short[0].message == (
        "budget.steps 5 is below the worst case 9: a run may be stopped budget-exhausted"
    )
    assert b.below(Budget()) == ()  # 1000 default steps, no other limit
    big = bound(
        "  - {id: per, for_each: {items: '${input}', max_items: 2000, "
        "steps: [{id: a, call_tool: {tool: t}}]}}\n"
    )
    (default,) = big.below(Budget())
    assert default.default and default.declared == 1000 and default.worst == 2000


# --- max_items at run time -------------------------------------------------------------------


MAX_ITEMS = """
flow: capped
tools: {t: {class: idempotent}}
steps:
  - id: per
    for_each:
      items: "${input}"
      max_items: 2
      steps: [{id: a, call_tool: {tool: t, input: "${item}"}}]
output: "${steps.per.output}"
"""


def test_more_items_than_max_items_fail_the_step_before_anything_is_issued() -> None:
    traj = simulate(MAX_ITEMS, [1, 2, 3], default=lambda call: call.input)
    assert traj.status == "failed"
    assert traj.error is not None and traj.error.type == "too-many-items"
    assert traj.error.message == "for_each 'per': 3 items, over max_items 2"
    assert not traj.error.retryable
    assert traj.effects("call-tool") == [] and traj.state.ledger.used_steps == 0
    ok = simulate(MAX_ITEMS, [1, 2], default=lambda call: call.input)
    assert ok.status == "completed" and ok.output == [1, 2]
    # the diagram shows the cap beside the loop
    assert "max 2 items" in to_mermaid(build_graph(parse_flow(MAX_ITEMS)))


def test_each_row_says_why_it_counts_what_it_counts() -> None:
    b = bound(
        """
  - id: fetch
    call_tool: {tool: ro}
    retry: {max_attempts: 3}
  - {id: once, call_tool: {tool: t}}
  - {id: safe, call_tool: {tool: ro}}
  - {id: ask, run_agent: {agent: bot, prompt: p}, retry: {max_attempts: 2}}
  - {id: guess, run_agent: {agent: nobody, prompt: p}}
  - id: each
    for_each: {items: "${input.xs}", max_items: 4, steps: [{id: inner, call_tool: {tool: t}}]}
  - id: both
    parallel: {branches: {a: [{id: pa, call_tool: {tool: t}}], b: [{id: pb, call_tool: {tool: t}}]}}
  - id: guarded
    try: [{id: risky, call_tool: {tool: t}}]
    catch: [{errors: [boom], steps: [{id: fallback, call_tool: {tool: t}}]}]
  - id: pay
    call_tool: {tool: paid}
    compensate: [{id: undo, call_tool: {tool: t}}]
  - {id: later, schedule: {tool: ro, delay_ms: 10}}
  - {id: wait, sleep: {for_ms: 5}}
"""
    )
    why = {r.id: r.why for r in b.breakdown}
    assert why["fetch"] == (
        "6 issues: 3 attempts + re-issues after an unknown outcome (3+2+1);"
        " per issue 1 step, 1 tool call + max_usage"
    )
    assert why["once"] == "1 issue; per issue 1 step, 1 tool call + max_usage"
    assert why["safe"].startswith("3 issues: 1 + 2 re-issues after an unknown outcome;")
    assert why["ask"] == "2 issues: 2 attempts (retry); per issue 1 step + max_usage"
    assert why["guess"] == "1 issue; per issue 1 step + no max_usage (usage unknown)"
    assert why["each"] == "its body, max_items 4 times"
    assert why["both"] == "its 2 branches added (all may run, whatever the mode)"
    assert why["guarded"] == "its body + its costliest catch clause"
    assert why["pay"].endswith("; + compensate")
    assert why["later"].startswith("its call when the delay fires: 3 issues")
    assert why["wait"] == "costs nothing (no work effect)"
    rows = {r.id: r.spend for r in b.breakdown}
    assert (rows["fetch"].steps, rows["safe"].steps, rows["ask"].steps) == (6, 3, 4)
    team = parse_flow(
        HEAD
        + """teams:
  r: {mode: sequential, members: [{member: a, agent: bot}, {member: b, agent: ghost}]}
steps:
  - {id: review, run_team: {team: r, prompt: p}, retry: {max_attempts: 2}}
"""
    )
    [row] = budget_bound(team).breakdown
    assert row.why == (
        "2 members ('bot', 'ghost'): per member 1 step + its agent's max_usage"
        " ('ghost': no max_usage, usage unknown), in each of 2 attempts (retry)"
    )


# --- every example flow -------------------------------------------------------------------------


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_flow_gets_a_bound_or_its_reasons(path: Path) -> None:
    flow = parse_flow(path.read_text(encoding="utf-8"), path.name)
    parsed = [parse_flow(p.read_text(encoding="utf-8")) for p in EXAMPLES.glob("*.yaml")]
    examples = {f.id: f for f in parsed}
    b = budget_bound(flow, subflows=examples)
    assert len(b.breakdown) == len(flow.by_id)
    assert all(r.why for r in b.breakdown)
    if path.stem in SCHEDULES_AT_RUN_TIME:  # what its handlers schedule is not in the spec
        assert b.unbounded and all(
            u.construct == "tool" and "is schedulable" in u.why for u in b.unbounded
        ), b.unbounded
        return
    # Every example declares the usage of its tools and agents: its run is bounded,
    # and its declared budget covers the worst case.
    assert b.bounded, b.unbounded
    assert b.below(flow.budget) == ()
    for limit in ("steps", "cost", "tool_calls"):
        value = b.spend.get(limit)
        named = [u for u in b.unbounded if u.limit == limit]
        assert (value is None) == bool(named), (limit, value, named)
        for u in named:
            assert u.why and (u.path.startswith(("steps[", "tools.", "on_budget")))


# --- soundness on generated flows --------------------------------------------------------------

TOOL_USAGE: dict[str, Any] = {}  # the generated world's tools report no usage
AGENT_USAGE = {"steps": 1, "cost_minor_units": 6}  # testing._echo: steps n % 2, cost n % 7


def declared(spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` with what the generated world reports declared, its loops capped
    (``flow_inputs`` gives at most three items) and no tool schedulable from
    outside (the world adds no calls)."""
    spec = copy.deepcopy(spec)
    spec["tools"] = {
        name: {**{k: v for k, v in decl.items() if k != "schedulable"}, "max_usage": TOOL_USAGE}
        for name, decl in spec.get("tools", {}).items()
    }
    spec["agents"] = {name: {"max_usage": AGENT_USAGE} for name in AGENTS}

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            if isinstance(value.get("for_each"), dict):
                value["for_each"]["max_items"] = 3
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    walk(spec["steps"])
    return spec


CHILD = declared(CHILD_SPEC)


@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(flows(), flow_inputs(), faults(), st.integers(0, 40_000) | st.none())
def test_no_simulated_run_spends_more_than_its_bound(
    spec: dict[str, Any], inp: dict[str, Any], injected: list[Fault], cancel_at: int | None
) -> None:
    flow = parse_flow(declared(spec))
    child = parse_flow(CHILD)
    b = budget_bound(flow, subflows={"child": child})
    world = generated_world(injected, cancel_at_ms=cancel_at, subflows={"child": CHILD})
    try:
        traj = world.run(flow, inp)
    except flowcore.InputError:
        return
    led = traj.state.ledger  # the last incarnation's: each gets the budget afresh
    for used, worst in (
        (led.used_steps, b.incarnation.steps),
        (led.used_cost, b.incarnation.cost_minor_units),
        (led.used_tool_calls, b.incarnation.tool_calls),
    ):
        if worst is not None:
            assert used <= worst, (used, worst, traj.describe())
    if not any(u.construct == "continue_as_new" for u in b.unbounded):
        assert b.incarnation == b.spend


def test_the_generated_world_bound_is_mostly_bounded() -> None:
    """The property above asserts something: a plain generated flow is bounded."""
    spec = declared(
        {
            "flow": "g",
            "tools": {"read": {"class": "readonly"}},
            "steps": [
                {"id": "a", "call_tool": {"tool": "read"}},
                {"id": "b", "run_agent": {"agent": "bot", "prompt": "p"}},
                {"id": "c", "run_subflow": {"flow": "child"}},
            ],
        }
    )
    b = budget_bound(parse_flow(spec), subflows={"child": parse_flow(CHILD)})
    assert b.bounded and b.steps is not None
    assert yaml.safe_dump(spec)  # a plain mapping
