"""``flowcore.budget_shares``: the share of what remains each step handed a
budget gets, from the spec alone (specs/language.md §11.7), and that a run
hands the same when everything around the step starts at once."""

from __future__ import annotations

from fractions import Fraction

import flowcore

SPEC = """
flow: f
budget: {cost_minor_units: 100, tokens: 1000}
teams: {duo: {mode: parallel, members: [{member: a, agent: w}, {member: b, agent: w}]}}
steps:
  - id: p
    parallel:
      weights: {a: 3}
      branches:
        a:
          - id: per
            for_each:
              items: "${input}"
              max_concurrency: 2
              steps: [{id: k, run_subflow: {flow: c}}]
        b:
          - id: q
            parallel:
              share: first-come
              branches:
                c: [{id: y, run_agent: {agent: w, prompt: a}, max_usage: {cost_minor_units: 10}}]
                d: [{id: t, run_team: {team: duo, prompt: a}}]
  - id: loose
    for_each: {items: "${input}", steps: [{id: z, run_agent: {agent: w, prompt: a}}]}
"""


def test_shares_multiply_down_the_lanes() -> None:
    flow = flowcore.parse_flow(SPEC)
    shares = {s.id: s for s in flowcore.budget_shares(flow)}
    assert list(shares) == ["k", "y", "t", "z"]
    assert (shares["k"].share, shares["k"].even) == (Fraction(3, 8), Fraction(3, 8))
    # first-come does not divide cost and tokens, but steps and tool calls still are.
    assert (shares["y"].share, shares["y"].even) == (Fraction(1, 4), Fraction(1, 8))
    assert (shares["t"].share, shares["t"].even) == (Fraction(1, 8), Fraction(1, 16))
    assert shares["t"].why.endswith("x 1/2: 2 team members at once")
    # Neither max_concurrency nor max_items: it depends on the items.
    assert shares["z"].share is None and "1/(number of items)" in shares["z"].why
    assert shares["y"].handed(flow.budget)["cost_minor_units"] == 10
    assert shares["z"].handed(flow.budget)["cost_minor_units"] is None


def test_a_run_hands_what_the_static_shares_say_when_all_start_at_once() -> None:
    flow = flowcore.parse_flow(SPEC)
    shares = {s.id: s for s in flowcore.budget_shares(flow)}
    d = flowcore.start(flow, [1, 2], run_id="r")
    got = {
        e.idempotency_key: e.budget_remaining.cost_minor_units  # type: ignore[union-attr]
        for e in d.effects
        if getattr(e, "budget_remaining", None) is not None
    }
    want = shares["k"].handed(flow.budget)["cost_minor_units"]
    assert got["r/per[0]/k#1"] == got["r/per[1]/k#1"] == want == 37
    assert got["r/y#1"] == shares["y"].handed(flow.budget)["cost_minor_units"]
    member = shares["t"].handed(flow.budget)["cost_minor_units"]
    assert got["r/t/a#1"] == member == 12
