"""What a parsed flow names outside itself: the handlers, subflows and signals its steps use.

Hosts check these before a run starts: a handler for every tool, agent and
team a flow can call, the flows it can start as subflows, the signal names it
waits for. They read them here rather than walking the spec's step types,
which stay private to the core.

This module never does I/O.
"""

from __future__ import annotations

import attrs

from .spec import (
    AwaitSignalStep,
    CallToolStep,
    Flow,
    RunAgentStep,
    RunSubflowStep,
    RunTeamStep,
    ScheduleStep,
)

__all__ = ["FlowReferences", "flow_references"]


@attrs.frozen
class FlowReferences:
    """The names a flow's own steps use (subflows are flows of their own: not
    followed), each name once, in the order of ``Flow.by_id``: a fixed order,
    the same for the same spec."""

    tools: tuple[str, ...]  # called by ``call_tool`` and ``schedule`` steps
    agents: tuple[str, ...]  # run by ``run_agent`` steps (a team's members: ``Flow.teams``)
    teams: tuple[str, ...]  # run by ``run_team`` steps, declared by the flow or not
    subflows: tuple[str, ...]  # the flow ids ``run_subflow`` steps start
    signals: tuple[str, ...]  # the names ``await_signal`` steps wait for


def flow_references(flow: Flow) -> FlowReferences:
    """The tools, agents, teams, subflows and signal names ``flow``'s steps use,
    compensations and ``on_budget_exhausted`` steps included."""
    # dicts, not sets: each name once, in a fixed order
    tools: dict[str, None] = {}
    agents: dict[str, None] = {}
    teams: dict[str, None] = {}
    subflows: dict[str, None] = {}
    signals: dict[str, None] = {}
    for step in flow.by_id.values():
        body = step.body
        if isinstance(body, (CallToolStep, ScheduleStep)):
            tools[body.tool] = None
        elif isinstance(body, RunAgentStep):
            agents[body.agent] = None
        elif isinstance(body, RunTeamStep):
            teams[body.team] = None
        elif isinstance(body, RunSubflowStep):
            subflows[body.flow] = None
        elif isinstance(body, AwaitSignalStep):
            signals.update(dict.fromkeys(body.names))
    return FlowReferences(
        tools=tuple(tools),
        agents=tuple(agents),
        teams=tuple(teams),
        subflows=tuple(subflows),
        signals=tuple(signals),
    )
