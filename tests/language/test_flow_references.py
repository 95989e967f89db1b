"""``flow_references``: what a flow's steps name outside the flow, read without its step types.

Hosts check these before a run starts (a handler for every tool, agent and
team; the subflows a run can start; the signals it waits for).
"""

from __future__ import annotations

import flowcore

SPEC = """
flow: refs
version: 1
tools: {lookup: {}, unlookup: {}, remind: {}, report: {}}
teams:
  pair:
    mode: sequential
    members:
      - {member: first, agent: a-two}
steps:
  - id: look
    call_tool: {tool: lookup}
    compensate: [{id: undo, call_tool: {tool: unlookup}}]
  - id: later
    schedule: {tool: remind, delay_ms: 5000}
  - id: again
    call_tool: {tool: lookup}
  - id: think
    run_agent: {agent: a-one, prompt: hi}
  - id: both
    parallel:
      branches:
        x: [{id: declared, run_team: {team: pair, prompt: hi}}]
        y: [{id: undeclared, run_team: {team: hosts-own, prompt: hi}}]
  - id: child
    run_subflow: {flow: kid}
  - id: wait
    await_signal: {signals: [go, stop]}
  - id: wait2
    await_signal: {signal: go}
  - id: poke
    signal_run: {run: other, signal: nudge}
on_budget_exhausted:
  reserve: {steps: 2}
  steps:
    - {id: last, call_tool: {tool: report}}
"""


def test_every_name_once_in_the_flows_step_order() -> None:
    used = flowcore.flow_references(flowcore.parse_flow(SPEC))
    assert used == flowcore.FlowReferences(
        tools=("unlookup", "lookup", "remind", "report"),  # a compensation comes first
        agents=("a-one",),
        teams=("pair", "hosts-own"),
        subflows=("kid",),
        signals=("go", "stop"),
    )


def test_a_flow_that_names_nothing() -> None:
    flow = flowcore.parse_flow("flow: f\nversion: 1\nsteps:\n  - {id: s, sleep: {for_ms: 5}}\n")
    used = flowcore.flow_references(flow)
    assert (used.tools, used.agents, used.teams, used.subflows, used.signals) == ((),) * 5
