"""Warnings about a valid flow: what it does that its author may not mean.

A warning never refuses a flow (``parse_flow`` accepted it); ``flowcore
validate`` prints them. Two kinds: a ``schedule`` step whose call the run may
cancel before it is due, because the run can settle first (it has no
``outlive_run: true`` and nothing that waits comes after it): a reminder at
the end of a flow is cancelled as the run completes; and a ``schedule`` step
of a tool declared ``needs_approval``, whose call is issued without asking.

This module never does I/O.
"""

from __future__ import annotations

from typing import NamedTuple

from .spec import (
    AskHumanStep,
    AwaitSignalStep,
    Flow,
    ForEachStep,
    ParallelStep,
    RepeatStep,
    RunSubflowStep,
    ScheduleStep,
    SleepStep,
    Step,
    SwitchStep,
    TryStep,
)

__all__ = ["SpecWarning", "spec_warnings"]


class SpecWarning(NamedTuple):
    step: str  # the step it is about
    path: str  # the step's path in the spec (``steps[2]``)
    message: str


def _inner(step: Step) -> list[tuple[Step, ...]]:
    """The lists of steps a step runs as part of itself (not its compensation)."""
    body = step.body
    if isinstance(body, SwitchStep):
        return [case.steps for case in body.cases]
    if isinstance(body, ParallelStep):
        return list(body.branches.values())
    if isinstance(body, ForEachStep | RepeatStep):
        return [body.steps]
    if isinstance(body, TryStep):
        return [body.steps, *(clause.steps for clause in body.catch)]
    return []


def _waits(step: Step) -> bool:
    """Whether the step, or a step it runs, may wait for time to pass or for
    something from outside: a sleep, a question, a signal, a repeat's cadence,
    a child run the step waits for."""
    body = step.body
    if isinstance(body, SleepStep | AskHumanStep | AwaitSignalStep | RepeatStep):
        return True
    if isinstance(body, RunSubflowStep):
        return not body.detached
    return any(_waits(s) for steps in _inner(step) for s in steps)


def spec_warnings(flow: Flow) -> list[SpecWarning]:
    """The warnings of a parsed flow, in the order of its steps."""
    out: list[SpecWarning] = []
    asks = frozenset(name for name, decl in flow.tools.items() if decl.needs_approval)
    _walk(flow.steps, False, out, asks)
    if flow.on_exhausted is not None:
        _walk(flow.on_exhausted.steps, False, out, asks)
    return out


def _walk(
    steps: tuple[Step, ...], waited: bool, out: list[SpecWarning], asks: frozenset[str]
) -> None:
    """``waited``: something that waits may run after this list ends; ``asks``:
    the tools declared ``needs_approval``."""
    for i, step in enumerate(steps):
        later = waited or any(_waits(s) for s in steps[i + 1 :])
        body = step.body
        if isinstance(body, ScheduleStep) and body.tool in asks:
            message = (
                f"schedule step {step.id!r}: tool {body.tool!r} needs approval, but a"
                " scheduled call is issued without asking; call it with call_tool to ask"
            )
            out.append(SpecWarning(step.id, step.path, message))
        if isinstance(body, ScheduleStep) and not body.outlive_run and not later:
            message = (
                f"schedule step {step.id!r}: the run may settle before its call to"
                f" {body.tool!r} is due, and settling cancels a call not yet due (nothing"
                " that waits comes after it); set outlive_run: true to keep the call"
            )
            out.append(SpecWarning(step.id, step.path, message))
        if isinstance(body, RepeatStep):
            _walk(body.steps, True, out, asks)  # the repeat waits between its fires
        elif isinstance(body, ForEachStep):
            # a later iteration may wait after this one
            _walk(body.steps, later or any(_waits(s) for s in body.steps), out, asks)
        elif isinstance(body, ParallelStep):
            for name, branch in body.branches.items():
                others = (s for n, b in body.branches.items() if n != name for s in b)
                _walk(branch, later or any(_waits(s) for s in others), out, asks)
        elif isinstance(body, TryStep):
            handlers = any(_waits(s) for clause in body.catch for s in clause.steps)
            _walk(body.steps, later or handlers, out, asks)
            for clause in body.catch:
                _walk(clause.steps, later, out, asks)
        else:
            for case in _inner(step):  # a switch: one case runs
                _walk(case, later, out, asks)
