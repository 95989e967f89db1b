"""Shares of the budget (specs/language.md §11.7): what runs at once is handed
parts of the remainder that add up to at most the remainder.

Each test drives one run by hand and reads the ``budgetRemaining`` each effect
is handed: even shares, weights, for_each iterations, first-come with
``max_usage``, nested parallels, a child run, a team, what an effect holds
being released on every way pending work stops, work held while others hold
the steps it needs, the spec's errors, and older snapshots and logs decoding.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

import flowcore
from flowcore import Usage
from flowcore.decision.state import Ledger, Pending, PendingKind
from flowcore.decision.wire import BudgetRemaining, RunTeam, effect_from_wire
from tests.harness import Run


def handed(r: Run, what: str = "cost_minor_units") -> dict[str, Any]:
    """Key -> the amount of ``what`` each budgeted effect of the last decision was handed."""
    out: dict[str, Any] = {}
    for e in r.effects:
        br = getattr(e, "budget_remaining", None)
        if br is not None:
            out[e.idempotency_key] = getattr(br, what)  # type: ignore[union-attr]
    return out


def held(r: Run) -> tuple[int, int]:
    """What the ledger holds back: steps and cost."""
    led = r.state.ledger
    return led.reserved_steps, led.reserved_cost


TWO = """
flow: f
budget: {steps: 100, cost_minor_units: 100}
steps:
  - id: p
    parallel:
      %s
      branches:
        a: [{id: x, run_agent: {agent: w, prompt: a}}]
        b: [{id: y, run_agent: {agent: w, prompt: b}}]
"""


def test_two_agents_at_once_are_each_handed_half() -> None:
    r = Run(TWO % "")
    assert handed(r) == {"r/x#1": 50, "r/y#1": 50}
    # Steps: each issue costs one first (99 left, then 98 of which 49 held).
    assert handed(r, "steps") == {"r/x#1": 49, "r/y#1": 49}
    assert held(r) == (98, 100)


def test_weights_split_the_remainder_three_to_one() -> None:
    r = Run(TWO % "weights: {a: 3}")
    assert handed(r) == {"r/x#1": 75, "r/y#1": 25}


def test_a_lane_that_spent_part_of_its_share_is_handed_what_is_left() -> None:
    spec = """
flow: f
budget: {cost_minor_units: 100}
steps:
  - id: p
    parallel:
      branches:
        a: [{id: x1, run_agent: {agent: w, prompt: a}}, {id: x2, run_agent: {agent: w, prompt: a}}]
        b: [{id: y, run_agent: {agent: w, prompt: b}}]
"""
    r = Run(spec)
    assert handed(r) == {"r/x1#1": 50, "r/y#1": 50}
    r.ok("r/x1#1", usage=Usage(cost_minor_units=20))
    # 80 remain, y holds 50: x2 gets the 30 its lane has left, not half of 80.
    assert handed(r) == {"r/x2#1": 30}
    r.ok("r/y#1", usage=Usage(cost_minor_units=50))
    r.ok("r/x2#1", usage=Usage(cost_minor_units=30))
    assert r.settled is not None and r.settled.status == "completed"
    assert r.state.ledger.used_cost == 100 and held(r) == (0, 0)


def test_for_each_with_concurrency_two_over_four_items() -> None:
    spec = """
flow: f
budget: {cost_minor_units: 100}
steps:
  - id: per
    for_each:
      items: "${input}"
      max_concurrency: 2
      steps: [{id: x, run_agent: {agent: w, prompt: "${item}"}}]
"""
    r = Run(spec, [1, 2, 3, 4])
    assert handed(r) == {"r/per[0]/x#1": 50, "r/per[1]/x#1": 50}
    r.ok("r/per[0]/x#1", usage=Usage(cost_minor_units=30))
    # 70 remain, item 1 holds 50: item 2 is handed the 20 that are free.
    assert handed(r) == {"r/per[2]/x#1": 20}
    r.ok("r/per[1]/x#1", usage=Usage(cost_minor_units=0))
    # 70 remain, item 2 holds 20: half of 70 is 35.
    assert handed(r) == {"r/per[3]/x#1": 35}


def test_for_each_with_fewer_items_than_its_concurrency_splits_by_items() -> None:
    spec = """
flow: f
budget: {cost_minor_units: 90}
steps:
  - id: per
    for_each:
      items: "${input}"
      max_concurrency: 5
      steps: [{id: x, run_agent: {agent: w, prompt: "${item}"}}]
"""
    r = Run(spec, [1, 2, 3])
    assert list(handed(r).values()) == [30, 30, 30]


FIRST_COME = """
flow: f
budget: {cost_minor_units: 100, tokens: 5000}
steps:
  - id: p
    parallel:
      share: first-come
      branches:
        a:
          - id: x
            run_agent: {agent: w, prompt: a}
            max_usage: {cost_minor_units: 30, tokens: 2000}
        b: [{id: y, run_agent: {agent: w, prompt: b}}]
        c: [{id: z, run_agent: {agent: w, prompt: c}}]
"""


def test_first_come_hands_each_member_its_max_usage_or_all_that_is_free() -> None:
    r = Run(FIRST_COME)
    assert handed(r) == {"r/x#1": 30, "r/y#1": 70, "r/z#1": 0}
    assert handed(r, "tokens") == {"r/x#1": 2000, "r/y#1": 3000, "r/z#1": 0}
    # Steps, which issuing itself costs, are split evenly all the same.
    assert handed(r, "steps") == {"r/x#1": 333, "r/y#1": 332, "r/z#1": 332}
    r.ok("r/y#1", usage=Usage(cost_minor_units=10))
    assert held(r)[1] == 30  # y released its 70: only x's 30 is held


def test_max_usage_caps_an_even_share() -> None:
    spec = TWO.replace(
        "b: [{id: y, run_agent: {agent: w, prompt: b}}]",
        "b: [{id: y, run_agent: {agent: w, prompt: b}, max_usage: {cost_minor_units: 10}}]",
    )
    r = Run(spec % "")
    assert handed(r) == {"r/x#1": 50, "r/y#1": 10}


def test_nested_parallels_multiply_their_shares() -> None:
    spec = """
flow: f
budget: {cost_minor_units: 100}
steps:
  - id: outer
    parallel:
      branches:
        a:
          - id: inner
            parallel:
              branches:
                a1: [{id: x1, run_agent: {agent: w, prompt: a}}]
                a2: [{id: x2, run_agent: {agent: w, prompt: a}}]
        b: [{id: y, run_agent: {agent: w, prompt: b}}]
"""
    r = Run(spec)
    assert handed(r) == {"r/x1#1": 25, "r/x2#1": 25, "r/y#1": 50}


def test_a_child_run_is_handed_its_share_and_spends_from_it() -> None:
    spec = """
flow: f
budget: {cost_minor_units: 100}
steps:
  - id: p
    parallel:
      branches:
        a: [{id: kid, run_subflow: {flow: c}}]
        b: [{id: y, run_agent: {agent: w, prompt: b}}]
"""
    r = Run(spec)
    assert handed(r) == {"r/kid#1": 50, "r/y#1": 50}
    child = flowcore.parse_flow("flow: c\nsteps: [{id: z, run_agent: {agent: w, prompt: z}}]")
    (sub,) = [e for e in r.effects if isinstance(e, flowcore.RunSubflow)]
    d = flowcore.start(child, None, run_id="r/kid#1", budget=sub.budget_remaining, depth=1)
    (agent,) = [e for e in d.effects if isinstance(e, flowcore.RunAgent)]
    assert agent.budget_remaining.cost_minor_units == 50  # the child's whole is its share
    r.child("r/kid#1", usage=Usage(cost_minor_units=50))
    assert held(r)[1] == 50 and r.state.ledger.used_cost == 50


def test_a_team_is_handed_its_share() -> None:
    spec = """
flow: f
budget: {cost_minor_units: 100}
teams:
  duo:
    mode: parallel
    members: [{member: m1, agent: w}, {member: m2, agent: w}]
steps:
  - id: p
    parallel:
      branches:
        a: [{id: host_team, run_team: {team: outsiders, prompt: a}}]
        b: [{id: own_team, run_team: {team: duo, prompt: b}}]
"""
    r = Run(spec)
    # The host's team (one run-team effect) gets its branch's half; a declared
    # parallel team's members split theirs.
    assert handed(r) == {"r/host_team#1": 50, "r/own_team/m1#1": 25, "r/own_team/m2#1": 25}
    (team,) = [e for e in r.effects if isinstance(e, RunTeam)]
    assert flowcore.effect_to_wire(team)["budgetRemaining"]["costMinorUnits"] == 50


# --- release: every way pending work stops ---------------------------------------------

RELEASE = """
flow: f
budget: {cost_minor_units: 100}
tools: {t: {class: readonly}}
steps:
  - id: p
    parallel:
      mode: %s
      branches:
        a:
          - id: x
            run_agent: {agent: w, prompt: a}
            timeout_ms: 1000
            %s
        b: [{id: y, await_signal: {signal: go}}]
"""


def _stop(r: Run, how: str) -> None:
    match how:
        case "succeeded":
            r.ok("r/x#1")
        case "failed":
            r.fail("r/x#1")
        case "outcome-unknown":
            r.unknown("r/x#1")
        case "timeout":
            (timer,) = [k for k in r.timers if k.endswith("/timeout")]
            r.fire(timer)
        case "cancelled":
            r.cancel()
        case "race-lost":
            r.signal("go")
        case "heartbeat-timeout":
            r.send(
                flowcore.EffectFailed(
                    idempotency_key="r/x#1",
                    error=flowcore.ErrorInfo(type="heartbeat-timeout", message="silent"),
                    at_ms=r.tick(None),
                )
            )


@pytest.mark.parametrize(
    "how",
    [
        "succeeded",
        "failed",
        "outcome-unknown",
        "timeout",
        "cancelled",
        "race-lost",
        "heartbeat-timeout",
    ],
)
def test_what_work_holds_is_released_however_it_stops(how: str) -> None:
    mode = "race" if how == "race-lost" else "all"
    extra = "heartbeat_timeout_ms: 500" if how == "heartbeat-timeout" else ""
    r = Run(RELEASE % (mode, extra))
    assert handed(r) == {"r/x#1": 50}
    assert held(r)[1] == 50
    _stop(r, how)
    assert "r/x#1" not in r.state.waiting.pending
    assert held(r) == (0, 0)


def test_work_being_cancelled_holds_its_share_until_its_end_is_reported() -> None:
    r = Run(RELEASE % ("race", "cancellation: wait_cancellation_completed"))
    r.signal("go")
    assert r.state.waiting.pending["r/x#1"].kind is PendingKind.CANCELLING
    assert held(r)[1] == 50  # it may still spend: the host has not stopped it yet
    r.ok("r/x#1", usage=Usage(cost_minor_units=50))
    assert held(r) == (0, 0) and r.state.ledger.used_cost == 50


def test_work_whose_step_would_come_out_of_what_others_hold_waits_for_them() -> None:
    spec = """
flow: f
budget: {steps: 4}
tools: {t: {class: readonly}}
steps:
  - id: p
    parallel:
      branches:
        a: [{id: x, run_agent: {agent: w, prompt: a}}]
        b:
          - {id: go, await_signal: {signal: go}}
          - {id: t1, call_tool: {tool: t}}
          - {id: t2, call_tool: {tool: t}}
          - {id: t3, call_tool: {tool: t}}
"""
    r = Run(spec)
    assert handed(r, "steps") == {"r/x#1": 1}  # half of the 3 left after its own
    r.signal("go")
    r.ok("r/t1#1")
    r.ok("r/t2#1")
    # 3 used, x holds 1: t3's own step would be x's. It waits, the run goes on.
    assert r.keys() == [] and r.settled is None
    r.ok("r/x#1", usage=Usage(steps=0))
    assert r.keys() == ["r/t3#1"]  # x released its step
    r.ok("r/t3#1")
    assert r.settled is not None and r.settled.status == "completed"
    assert r.state.ledger.used_steps == 4


def test_work_issued_again_after_an_unknown_outcome_is_never_held() -> None:
    spec = """
flow: f
budget: {steps: 4}
tools: {t: {class: readonly}}
steps:
  - id: p
    parallel:
      branches:
        a: [{id: x, run_agent: {agent: w, prompt: a}}]
        b: [{id: go, await_signal: {signal: go}}, {id: t1, call_tool: {tool: t}}]
"""
    r = Run(spec)
    r.signal("go")
    r.unknown("r/t1#1")
    r.unknown("r/t1#1")
    # Issued again right after the unknown outcome (§9.3), though x holds the step.
    assert r.keys() == ["r/t1#1"]
    assert (r.state.ledger.used_steps, held(r)[0]) == (4, 1)


def test_a_scheduled_call_is_issued_though_a_running_agent_holds_the_steps() -> None:
    spec = """
flow: f
budget: {steps: 10}
tools: {remind: {class: idempotent}}
steps:
  - {id: later, schedule: {tool: remind, delay_ms: 100}}
  - {id: x, run_agent: {agent: w, prompt: a}}
"""
    r = Run(spec)
    assert handed(r, "steps") == {"r/x#1": 9}  # alone: all that is left
    (delay,) = [k for k in r.timers if k.endswith("/delay")]
    r.fire(delay)
    assert r.kinds() == ["call-tool"]  # outside the steps: never held


def test_with_nothing_held_a_spent_step_budget_still_exhausts_the_run() -> None:
    spec = """
flow: f
budget: {steps: 1}
tools: {t: {class: readonly}}
steps:
  - {id: t1, call_tool: {tool: t}}
  - {id: t2, call_tool: {tool: t}}
"""
    r = Run(spec)
    r.ok("r/t1#1")
    assert r.settled is not None and r.settled.exhausted == "steps"


# --- the spec --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            "parallel: {weights: {c: 2}, branches: {a: [], b: []}}",
            "(steps[0].parallel.weights.c): weight for 'c', which is not a branch",
        ),
        (
            "parallel: {weights: {a: 0}, branches: {a: [], b: []}}",
            "(steps[0].parallel.weights.a): 0 is out of range",
        ),
        (
            "parallel: {share: first-come, weights: {a: 2}, branches: {a: [], b: []}}",
            "(steps[0].parallel.weights): weights share the budget evenly",
        ),
        (
            "for_each: {items: '${input}', share: firstcome, steps: []}",
            "(steps[0].for_each.share): 'firstcome' is not one of: even, first-come",
        ),
        (
            "sleep: {for_ms: 1}\n    max_usage: {cost_minor_units: 3}",
            "(steps[0].max_usage): max_usage is only allowed on run_agent, run_team",
        ),
        (
            "run_agent: {agent: w, prompt: p}\n    max_usage: {wall_clock_ms: 3}",
            "(steps[0].max_usage.wall_clock_ms)",
        ),
    ],
)
def test_bad_share_settings_are_spec_errors_naming_where(body: str, message: str) -> None:
    spec = f"flow: f\nsteps:\n  - id: s\n    {body}\n"
    with pytest.raises(flowcore.SpecError) as caught:
        flowcore.parse_flow(spec, "t.yaml")
    assert any(message in str(p) for p in caught.value.problems), caught.value.problems


# --- older snapshots and logs ----------------------------------------------------------


def test_an_older_ledger_and_pending_entry_decode_holding_nothing() -> None:
    # A ledger as snapshots wrote it before shares (it ended at used_cache_read_tokens).
    old_ledger = msgspec.json.encode([10, 100, None, 3, 20, None, None, None, 0, 0, 0, 0, 0, 0])
    led = msgspec.json.decode(old_ledger, type=Ledger)
    assert (led.used_steps, led.used_cost, led.reserved_steps, led.reserved_cost) == (3, 20, 0, 0)
    sent = flowcore.RunAgent(
        agent_id="w", prompt="p", idempotency_key="r/x#1", budget_remaining=BudgetRemaining(steps=7)
    )
    encoded = msgspec.msgpack.encode(Pending(PendingKind.WORK, "f", sent, "run-agent"))
    entry = msgspec.msgpack.decode(encoded, type=Pending)
    assert entry.reserved is None  # released as nothing: the ledger held nothing for it


def test_a_logged_run_team_without_budget_remaining_decodes() -> None:
    old = {"kind": "run-team", "teamId": "t", "prompt": "p", "idempotencyKey": "r/x#1"}
    team = effect_from_wire(old)
    assert isinstance(team, RunTeam) and team.budget_remaining is None
    assert flowcore.effect_to_wire(team) == old


def test_a_snapshot_with_shares_held_round_trips() -> None:
    r = Run(TWO % "")
    again = flowcore.decode_state(flowcore.encode_state(r.state), r.flow)
    assert again.ledger == r.state.ledger and held(r) == (98, 100)
    assert again.waiting.pending["r/x#1"].reserved == BudgetRemaining(steps=49, cost_minor_units=50)


def test_a_run_snapshotted_before_shares_goes_on_and_shares_from_then_on() -> None:
    """``snapshot-before-shares.msgpack``: ``snapshot_shares_flow.yaml`` started by
    a flowcore that handed each agent the whole remainder (x and y: 100 each)."""
    here = Path(__file__).resolve().parents[1] / "fixtures"
    flow = flowcore.parse_flow((here / "snapshot_shares_flow.yaml").read_text())
    state = flowcore.decode_state((here / "snapshot-before-shares.msgpack").read_bytes(), flow)
    assert held_by(state) == (0, 0)
    pending = state.waiting.pending
    assert pending["r/x#1"].reserved is None and pending["r/y#1"].reserved is None
    sent = pending["r/x#1"].sent
    assert isinstance(sent, flowcore.RunAgent) and sent.budget_remaining.cost_minor_units == 100
    d = flowcore.advance(
        state,
        flowcore.EffectSucceeded(
            idempotency_key="r/x#1", usage=Usage(cost_minor_units=60), at_ms=1
        ),
    )
    d = flowcore.advance(
        d.state,
        flowcore.EffectSucceeded(
            idempotency_key="r/y#1", usage=Usage(cost_minor_units=10), at_ms=2
        ),
    )
    (z,) = d.effects
    # 30 left, nothing held: z, in branch b's half, is handed 15 and holds it.
    assert isinstance(z, flowcore.RunAgent) and z.budget_remaining.cost_minor_units == 15
    assert held_by(d.state)[1] == 15


def held_by(state: flowcore.State) -> tuple[int, int]:
    return state.ledger.reserved_steps, state.ledger.reserved_cost
