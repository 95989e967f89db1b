"""``explore`` on generated flows, and against the worst-case budget.

* On flows that use every construct, the built-in invariants hold on every
  explored path, and partial-order reduction and deduplication lose no
  settled outcome: a reduced exploration reaches exactly the settlements a
  full one does.
* No explored path spends more than ``flowcore.budget_bound`` computes: on
  the example flows, on generated flows, and on a flow whose bound some path
  reaches exactly; a flow whose spend has no bound spends more the deeper it
  is explored.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import flowcore
from flowcore import budget_bound, parse_flow
from flowcore.decision.wire import encode_effect
from flowcore.testing import (
    AGENTS,
    CHILD_SPEC,
    SIGNALS,
    Exploration,
    Fail,
    Ok,
    Point,
    Signal,
    Unknown,
    World,
    explore,
    flow_inputs,
    flows,
)

from ..harness import SCHEDULES_AT_RUN_TIME
from ..language.test_budget_bound import AGENT_USAGE, declared

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "specs" / "examples"

GENERATED = World(
    default=[Ok({"k": 1}), Fail("boom", retryable=True)],
    subflows={"child": [Ok({"k": 1}), Fail("child-failed")]},
    signals=[Signal(SIGNALS[0], {"n": 1}), Signal(SIGNALS[1], {"n": 2}, key="k")],
    cancel_at_ms=0,
)


def settlements(
    spec: Any, inp: Any, world: World, **options: Any
) -> tuple[Exploration, set[bytes]]:
    seen: set[bytes] = set()

    def collect(point: Point) -> None:
        for e in point.effects:
            if e is point.settled:
                seen.add(encode_effect(e))

    x = explore(spec, inp, world, invariants=[collect], max_states=1500, max_depth=30, **options)
    return x, seen


# Found by the thorough profile: a cancel, then a settlement, leave a
# scheduled call unanswered, which answering it first had hidden.
CANCEL_BEFORE_A_SCHEDULED_CALL = {
    "flow": "generated",
    "tools": {
        "read": {"class": "readonly"},
        "put": {"class": "idempotent", "schedulable": True},
        "send": {"class": "uncertain"},
        "poke": {},
    },
    "steps": [
        {
            "id": "s1",
            "parallel": {
                "mode": "race",
                "branches": {
                    "a": [
                        {
                            "id": "s2",
                            "parallel": {
                                "mode": "race",
                                "branches": {
                                    "b": [
                                        {
                                            "id": "s3",
                                            "schedule": {
                                                "tool": "poke",
                                                "delay_ms": 0,
                                                "outlive_run": False,
                                            },
                                            "timeout_ms": "1ms",
                                            "retry": {
                                                "max_attempts": 1,
                                                "initial_interval_ms": 0,
                                                "backoff": 2.0,
                                                "max_interval_ms": 2000,
                                                "jitter": 0.0,
                                            },
                                        }
                                    ],
                                    "c": [
                                        {
                                            "id": "s4",
                                            "call_tool": {
                                                "tool": "poke",
                                                "input": {"v": "${input.n}"},
                                            },
                                        }
                                    ],
                                },
                            },
                            "compensate": [
                                {
                                    "id": "s5",
                                    "call_tool": {"tool": "poke", "input": {"v": "${input.n}"}},
                                }
                            ],
                        },
                        {
                            "id": "s6",
                            "repeat": {
                                "max_fires": 1,
                                "steps": [
                                    {
                                        "id": "s7",
                                        "call_tool": {
                                            "tool": "poke",
                                            "input": {"v": "${steps.s2.output}"},
                                        },
                                    },
                                    {
                                        "id": "s8",
                                        "call_tool": {
                                            "tool": "poke",
                                            "input": {"v": "${steps.s2.output}"},
                                        },
                                    },
                                ],
                                "every_ms": "1ms",
                            },
                        },
                    ],
                    "c": [
                        {
                            "id": "s9",
                            "repeat": {
                                "max_fires": 2,
                                "steps": [{"id": "s10", "await_signal": {"signal": "go"}}],
                                "every_ms": "1ms",
                            },
                            "compensate": [
                                {
                                    "id": "s11",
                                    "call_tool": {"tool": "poke", "input": {"v": "${input.n}"}},
                                }
                            ],
                        }
                    ],
                },
                "max_concurrency": 2,
            },
        }
    ],
    "output": "${input.n}",
    "limits": {"max_subflow_depth": 0, "max_buffered_signals": 2},
    "input_schema": {"type": "object", "required": ["n"]},
}


@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(flows(max_steps=3), flow_inputs())
@example(spec=CANCEL_BEFORE_A_SCHEDULED_CALL, inp={"flag": False, "items": [], "n": 0})
def test_reduction_loses_no_settlement_and_every_invariant_holds(
    spec: dict[str, Any], inp: dict[str, Any]
) -> None:
    try:
        full, everything = settlements(spec, inp, GENERATED, reduce=False)
    except flowcore.InputError:
        return
    assert full.ok, full.violations[0].describe()
    reduced, some = settlements(spec, inp, GENERATED)
    assert reduced.ok, reduced.violations[0].describe()
    if full.complete and reduced.complete:
        assert some == everything
        assert reduced.states <= full.states


# --- against the worst-case budget --------------------------------------------------------


def usage_world(flow: flowcore.Flow) -> World:
    """Every call reports its declared max_usage (or none); some fail and retry."""

    def ok(usage: Any) -> Ok:
        if usage is None:
            return Ok({"k": 1})
        return Ok(
            {"k": 1},
            steps=usage.steps,
            cost=usage.cost_minor_units,
            tool_calls=usage.tool_calls,
        )

    busy = Fail("busy", retryable=True)
    return World(
        tools={n: [ok(d.max_usage), busy, Unknown()] for n, d in flow.tools.items()},
        agents={n: [ok(d.max_usage), busy] for n, d in flow.agents.items()},
        default=[Ok({"k": 1}), busy],
    )


def within(x: Exploration, flow: flowcore.Flow, subflows: dict[str, flowcore.Flow]) -> None:
    b = budget_bound(flow, subflows=subflows)
    worst = b.incarnation
    if worst.steps is not None:
        assert x.max_steps <= worst.steps, (x.max_steps, worst.steps)
    if worst.cost_minor_units is not None:
        assert x.max_cost <= worst.cost_minor_units, (x.max_cost, worst.cost_minor_units)


AGENT_DECL = {"max_usage": {"steps": 2, "cost_minor_units": 50, "tool_calls": 3}}


def with_usage(path: Path) -> dict[str, Any]:
    """The example's spec with every agent's (and undeclared tool's) usage declared."""
    spec: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    names: set[str] = set()

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            agent = value.get("agent")
            if isinstance(agent, str):
                names.add(agent)
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    walk(spec["steps"])
    walk(spec.get("teams", {}))
    walk(spec.get("on_budget_exhausted", {}))
    spec["agents"] = {name: AGENT_DECL for name in sorted(names)}
    for name, decl in list((spec.get("tools") or {}).items()):
        decl = dict(decl or {})
        decl.setdefault("max_usage", {"cost_minor_units": 10})
        spec["tools"][name] = decl
    return spec


def test_no_explored_path_of_an_example_flow_spends_more_than_its_bound() -> None:
    specs = {p.stem: with_usage(p) for p in EXAMPLES.glob("*.yaml")}
    flows_ = {name: parse_flow(spec) for name, spec in specs.items()}
    by_id = {f.id: f for f in flows_.values()}
    inputs = {
        "triage": {"incident_id": "I-1"},
        "incident": {"incident_id": "I-1"},
        "mcp_flow": {"sku": "widget", "quantity": 2},
    }
    bounded = 0
    for name, flow in sorted(flows_.items()):
        x = explore(flow, inputs.get(name, {}), usage_world(flow), max_states=4000)
        assert x.ok, x.violations[0].describe()
        within(x, flow, by_id)
        worst = budget_bound(flow, subflows=by_id).incarnation
        if worst.steps is not None and worst.cost_minor_units is not None:
            bounded += 1
            assert x.max_steps > 0
    # every example compared, steps and cost, but those whose handlers schedule calls
    assert bounded == len(flows_.keys() - SCHEDULES_AT_RUN_TIME)


# Found by the ci profile: an incarnation that ends as it starts (then
# continue-refused; now it continues at once, and the next settles at once)
# after the event that continued the run.
SETTLES_AS_IT_CONTINUES = {
    "flow": "generated",
    "tools": {"poke": {}},
    "steps": [
        {"id": "s1", "sleep": {"until": "1970-01-01T00:00:01Z"}},
        {
            "id": "s3",
            "switch": [
                {
                    "if": "run.incarnation == null || run.incarnation < `3`",
                    "steps": [{"id": "s2", "continue_as_new": {}}],
                }
            ],
        },
    ],
    "output": "${input.n}",
    "limits": {"max_subflow_depth": 0},
    "input_schema": {"type": "object", "required": ["n"]},
}


@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(flows(max_steps=3), flow_inputs())
@example(spec=SETTLES_AS_IT_CONTINUES, inp={"flag": False, "items": [], "n": 0})
def test_no_explored_path_of_a_generated_flow_spends_more_than_its_bound(
    spec: dict[str, Any], inp: dict[str, Any]
) -> None:
    flow = parse_flow(declared(spec))
    child = parse_flow(declared(CHILD_SPEC))
    agent = Ok({"k": 1}, steps=AGENT_USAGE["steps"], cost=AGENT_USAGE["cost_minor_units"])
    world = World(
        agents={a: [agent, Fail("busy", retryable=True)] for a in AGENTS},
        default=[Ok({"k": 1}), Fail("busy", retryable=True), Unknown()],
        subflows={"child": [Ok({"k": 1}), Fail("child-failed")]},
        signals=GENERATED.signals,
    )
    try:
        x = explore(flow, inp, world, max_states=1500, max_depth=30)
    except flowcore.InputError:
        return
    assert x.ok, x.violations[0].describe()
    within(x, flow, {"child": child})


EXACT = """
flow: exact
tools:
  fetch: {max_usage: {}}
  charge: {max_usage: {steps: 1, cost_minor_units: 30}}
agents:
  checker: {max_usage: {steps: 2, cost_minor_units: 40}}
steps:
  - id: fetch
    call_tool: {tool: fetch}
    retry: {max_attempts: 2, initial_interval_ms: 10}
  - id: check
    run_agent: {agent: checker, prompt: "ok?"}
  - id: lines
    for_each:
      items: "${input.lines}"
      max_items: 2
      steps:
        - id: pay
          call_tool: {tool: charge, input: "${item}"}
"""


def test_a_bound_some_explored_path_reaches_exactly() -> None:
    flow = parse_flow(EXACT)
    b = budget_bound(flow)
    world = World(
        tools={
            "fetch": [Ok(1), Fail("busy", retryable=True)],
            "charge": [Ok(1, steps=1, cost=30)],
        },
        agents={"checker": [Ok("yes", steps=2, cost=40)]},
    )
    x = explore(flow, {"lines": [1, 2]}, world)
    assert x.ok and x.complete
    # fetch twice (2), the agent (1 + 2), two charges (2 x (1 + 1)): 9 steps, 100 cost.
    assert (b.steps, b.cost_minor_units) == (9, 100)
    assert (x.max_steps, x.max_cost) == (b.steps, b.cost_minor_units)


UNBOUNDED = """
flow: poll
tools: {ci: {class: readonly}}
steps:
  - id: wait_green
    repeat:
      every_ms: 1000
      until: "steps.check.output.green"
      steps:
        - {id: check, call_tool: {tool: ci}}
"""


def test_an_unbounded_flow_spends_more_the_deeper_it_is_explored() -> None:
    flow = parse_flow(UNBOUNDED)
    b = budget_bound(flow)
    assert b.steps is None
    assert [(u.limit, u.path) for u in b.unbounded if u.limit == "steps"] == [
        ("steps", "steps[0].repeat")
    ]
    world = World(tools={"ci": [Ok({"green": False})]})
    spent = [explore(flow, None, world, max_depth=d).max_steps for d in (4, 8, 16)]
    assert spent[0] < spent[1] < spent[2]
    assert st  # hypothesis strategies are imported for the properties above
