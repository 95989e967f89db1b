"""What each step handed a budget gets of it, from the spec alone: ``budget_shares``.

A run hands the work of ``run_agent``, ``run_team`` and ``run_subflow`` steps
a share of what remains (specs/language.md §11.7): the lane fraction of the
frame it runs in (branches of an ``even`` parallel split their parent's by
weight, iterations of an ``even`` for_each by min(max_concurrency, number of
items), members of a parallel team by their number), at most the step's
``max_usage``, never more than what others do not hold. This module says,
per such step, the fraction it is handed when everything around it runs at
once (the smallest: fewer items make a for_each's iterations' larger), and
what that is of a declared budget when it is issued first.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction

import attrs

from .defaults import DEFAULT_STEP_BUDGET
from .spec import (
    Budget,
    Flow,
    ForEachStep,
    ParallelStep,
    RepeatStep,
    RunAgentStep,
    RunSubflowStep,
    RunTeamStep,
    Step,
    SwitchStep,
    TryStep,
    UsageCap,
)

__all__ = ["StepShare", "budget_shares"]

_WHOLE = Fraction(1)


@attrs.frozen
class StepShare:
    """The share of the remaining budget a step's work is handed.

    ``share``: the fraction of the remainder for cost, tokens and turns when
    every member around it runs at once (1 under ``first-come``); ``even``:
    the same for steps and tool calls, which are always split evenly; each
    None when it depends on how many items a for_each gets (neither
    ``max_concurrency`` nor ``max_items``). ``cap``: the step's
    ``max_usage``. ``why``: how the share comes about, in words.
    """

    id: str
    path: str
    kind: str
    share: Fraction | None
    even: Fraction | None
    cap: UsageCap | None
    why: str

    def handed(self, budget: Budget) -> dict[str, int | None]:
        """What it is handed of ``budget`` when issued first, before anything is
        spent (its own step charged): None for an unlimited limit, or a share
        that depends on the items."""
        cap = self.cap or UsageCap()

        def part(limit: int | None, f: Fraction | None, most: int | None) -> int | None:
            if limit is None or f is None:
                return None if limit is None or most is None else min(limit, most)
            n = limit * f.numerator // f.denominator
            return n if most is None else min(n, most)

        steps = budget.steps if budget.steps is not None else DEFAULT_STEP_BUDGET
        return {
            "steps": part(max(0, steps - 1), self.even, cap.steps),
            "cost_minor_units": part(budget.cost_minor_units, self.share, cap.cost_minor_units),
            "tokens": part(budget.tokens, self.share, cap.tokens),
            "tool_calls": part(budget.tool_calls, self.even, cap.tool_calls),
            "turns": part(budget.turns, self.share, cap.turns),
        }


@attrs.frozen
class _Lane:
    share: Fraction | None = _WHOLE
    even: Fraction | None = _WHOLE
    why: tuple[str, ...] = ()

    def times(self, part: Fraction | None, first_come: bool, why: str) -> _Lane:
        even = None if self.even is None or part is None else self.even * part
        share = self.share
        if not first_come:
            share = None if share is None or part is None else share * part
        return _Lane(share, even, (*self.why, why))


def budget_shares(flow: Flow) -> tuple[StepShare, ...]:
    """Every step of ``flow`` handed a budget, in spec order, with its share."""
    final = flow.on_exhausted.steps if flow.on_exhausted is not None else ()
    return tuple(_steps((*flow.steps, *final), _Lane(), flow))


def _steps(steps: tuple[Step, ...], lane: _Lane, flow: Flow) -> Iterator[StepShare]:
    for step in steps:
        yield from _step(step, lane, flow)
        yield from _steps(step.compensate, lane, flow)


def _step(step: Step, lane: _Lane, flow: Flow) -> Iterator[StepShare]:
    body = step.body
    if isinstance(body, RunAgentStep | RunSubflowStep | RunTeamStep):
        team = flow.teams.get(body.team) if isinstance(body, RunTeamStep) else None
        if team is not None and team.mode == "parallel":
            n = len(team.members)
            lane = lane.times(Fraction(1, n), False, f"1/{n}: {n} team members at once")
        why = " x ".join(lane.why) or "the whole remainder: nothing runs beside it"
        if step.max_usage is not None:
            why += "; at most its max_usage"
        yield StepShare(step.id, step.path, step.kind, lane.share, lane.even, step.max_usage, why)
    elif isinstance(body, ParallelStep):
        total = sum(body.weights.get(name, 1) for name in body.branches)
        first = body.share == "first-come"
        for name, branch in body.branches.items():
            w = body.weights.get(name, 1)
            part = Fraction(w, total)
            why = f"{part}: branch {name!r} of {step.id!r}" + (f" (weight {w})" if w != 1 else "")
            if first:
                why = f"first-come: branch {name!r} of {step.id!r} ({part} of steps)"
            yield from _steps(branch, lane.times(part, first, why), flow)
    elif isinstance(body, ForEachStep):
        widths = [w for w in (body.max_concurrency, body.max_items) if w is not None]
        width = min(widths) if widths else None
        each = None if width is None else Fraction(1, width)
        first = body.share == "first-come"
        at = f"1/{width}" if width is not None else "1/(number of items)"
        why = f"{at}: an iteration of {step.id!r}"
        if first:
            why = f"first-come: an iteration of {step.id!r} ({at} of steps)"
        yield from _steps(body.steps, lane.times(each, first, why), flow)
    elif isinstance(body, SwitchStep):
        for case in body.cases:
            yield from _steps(case.steps, lane, flow)
    elif isinstance(body, TryStep):
        yield from _steps(body.steps, lane, flow)
        for clause in body.catch:
            yield from _steps(clause.steps, lane, flow)
    elif isinstance(body, RepeatStep):
        yield from _steps(body.steps, lane, flow)
