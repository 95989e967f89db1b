"""The joint-overspend property (specs/language.md §11.7): members that each
spend everything they are handed never make the ledger spend more than the
budget, in any order of their reports.

``explore`` walks every ordering of a world whose agents, teams and child
runs answer with ``spend_all`` (usage equal to their whole
``budgetRemaining``) over a few hand-written parallel flows, and hypothesis
generates more (parallel, for_each, nested, weights, first-come, agents and
children). The same exploration over a core that hands each member the whole
remainder (as flowcore did before shares) finds the overspend.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import flowcore.decision.shares as shares
from flowcore.decision.state import Ledger
from flowcore.testing import Ok, Point, World, explore, spend_all

WORLD = World(
    agents={"*": (spend_all, Ok())},
    teams={"*": (spend_all,)},
    subflows={"*": (spend_all,)},
)

_LIMITS = (
    ("steps", "used_steps"),
    ("cost", "used_cost"),
    ("tokens", "used_tokens"),
    ("tool_calls", "used_tool_calls"),
    ("turns", "used_turns"),
)


def never_overspent(point: Point) -> str | None:
    led: Ledger = point.state.ledger
    for limit, used in _LIMITS:
        cap, spent = getattr(led, limit), getattr(led, used)
        if cap is not None and spent > cap:
            return f"{limit}: {spent} used of {cap}"
    return None


def agent(i: str, **extra: Any) -> dict[str, Any]:
    return {"id": i, "run_agent": {"agent": "w", "prompt": i}, **extra}


def child(i: str) -> dict[str, Any]:
    return {"id": i, "run_subflow": {"flow": "c"}}


BUDGET = {"steps": 30, "cost_minor_units": 100, "tokens": 1000, "turns": 10}

FLOWS: dict[str, list[dict[str, Any]]] = {
    "two agents": [{"id": "p", "parallel": {"branches": {"a": [agent("x")], "b": [agent("y")]}}}],
    "weights, a child": [
        {
            "id": "p",
            "parallel": {
                "weights": {"a": 3},
                "branches": {"a": [child("k"), agent("x")], "b": [agent("y")]},
            },
        }
    ],
    "for_each": [
        {
            "id": "per",
            "for_each": {"items": "${input}", "max_concurrency": 2, "steps": [agent("x")]},
        }
    ],
    "nested": [
        {
            "id": "p",
            "parallel": {
                "branches": {
                    "a": [
                        {
                            "id": "q",
                            "parallel": {"branches": {"c": [agent("x")], "d": [child("k")]}},
                        }
                    ],
                    "b": [agent("y"), agent("z")],
                }
            },
        }
    ],
    "first-come": [
        {
            "id": "p",
            "parallel": {
                "share": "first-come",
                "branches": {
                    "a": [agent("x", max_usage={"cost_minor_units": 30})],
                    "b": [agent("y")],
                    "c": [child("k")],
                },
            },
        }
    ],
    "teams": [
        {
            "id": "p",
            "parallel": {
                "branches": {
                    "a": [{"id": "t", "run_team": {"team": "duo", "prompt": "t"}}],
                    "b": [{"id": "h", "run_team": {"team": "outsiders", "prompt": "h"}}],
                }
            },
        }
    ],
}
TEAMS = {
    "duo": {
        "mode": "parallel",
        "members": [{"member": "m1", "agent": "w"}, {"member": "m2", "agent": "w"}],
    }
}


def spec(steps: list[dict[str, Any]], budget: dict[str, int] | None = None) -> dict[str, Any]:
    return {"flow": "f", "budget": budget or BUDGET, "teams": TEAMS, "steps": steps}


@pytest.mark.parametrize("name", list(FLOWS))
def test_members_spending_all_they_are_handed_never_overspend_in_any_order(name: str) -> None:
    x = explore(spec(FLOWS[name]), [1, 2, 3], WORLD, invariants=[never_overspent])
    assert x.ok and x.complete, x.violations
    assert x.settled.get("completed", 0) >= 1


def test_handing_each_member_the_whole_remainder_overspends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The property is no tautology: flowcore before shares breaks it."""
    monkeypatch.setattr(shares, "hand", lambda led, left, at, cap: left)
    monkeypatch.setattr(shares, "needs_room", lambda led, tool_call: False)
    x = explore(spec(FLOWS["two agents"]), None, WORLD, invariants=[never_overspent])
    (v,) = x.violations
    assert v.invariant == "never_overspent" and v.message.startswith("steps: ")


# --- generated flows ---------------------------------------------------------------------


@st.composite
def members(draw: st.DrawFn, depth: int = 0) -> list[dict[str, Any]]:
    """A list of steps: agents, children, and (not too deep) parallels and for_each."""
    out: list[dict[str, Any]] = []
    kinds = ["agent", "child"] + (["parallel", "for_each"] if depth < 2 else [])
    for _ in range(draw(st.integers(1, 2))):
        i = f"s{depth}_{draw(st.integers(0, 10**6))}_{len(out)}"
        kind = draw(st.sampled_from(kinds))
        share = draw(st.sampled_from(["even", "first-come"]))
        if kind == "agent":
            cap = draw(st.none() | st.integers(0, 60))
            out.append(
                agent(i, **({} if cap is None else {"max_usage": {"cost_minor_units": cap}}))
            )
        elif kind == "child":
            out.append(child(i))
        elif kind == "parallel":
            names = ["a", "b", "c"][: draw(st.integers(2, 3))]
            body: dict[str, Any] = {
                "share": share,
                "branches": {n: draw(members(depth + 1)) for n in names},
            }
            if share == "even" and draw(st.booleans()):
                body["weights"] = {names[0]: draw(st.integers(1, 4))}
            out.append({"id": i, "parallel": body})
        else:
            body = {"items": "${input}", "share": share, "steps": [agent(i + "_x")]}
            body["max_concurrency"] = draw(st.integers(1, 3))
            out.append({"id": i, "for_each": body})
    return out


def _unique(steps: list[dict[str, Any]], seen: set[str]) -> None:
    for s in steps:
        while s["id"] in seen:
            s["id"] += "_"
        seen.add(s["id"])
        for key in ("parallel", "for_each"):
            body = s.get(key)
            if body is None:
                continue
            for inner in body.get("branches", {}).values():
                _unique(inner, seen)
            _unique(body.get("steps", []), seen)


@settings(max_examples=25, deadline=None)
@given(
    steps=members(),
    cost=st.integers(0, 120),
    steps_limit=st.integers(2, 40),
    items=st.integers(1, 3),
)
def test_generated_parallel_flows_never_overspend(
    steps: list[dict[str, Any]], cost: int, steps_limit: int, items: int
) -> None:
    _unique(steps, set())
    budget = {"steps": steps_limit, "cost_minor_units": cost, "tokens": 500}
    world = World(agents={"*": (spend_all,)}, subflows={"*": (spend_all,)})
    x = explore(
        spec(steps, budget),
        list(range(items)),
        world,
        invariants=[never_overspent],
        max_states=1500,
        determinism=False,
    )
    assert not x.violations, x.violations[0].describe() if x.violations else ""
