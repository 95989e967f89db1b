"""When partial-order reduction may answer one piece of work first: ``Reducible``.

``explore`` may try only the answers to one pending piece of work at a state
(a persistent set) when every order it leaves out reaches the same states
later. Two answers that commute *now* (checked by applying both orders) are
not enough: a move made while the work waits may later take the wait away
(a cancel, a timeout, a deadline, a race won, a failure that ends a
``parallel``, a budget run out) or depend on the order in another way (a
compensation stack, metadata, a step reading another branch's result, work
held back by ``max_concurrency``). This module rules those out from the spec
and the state:

* the flow declares no ``compensate``, ``set_metadata``,
  ``continue_as_new``, ``on_budget_exhausted`` or ``max_concurrency``; no
  step reads a step of another branch of a ``parallel`` it shares; its
  worst-case steps (``budget_bound``) fit its step budget, and its budget
  has no other limit;
* the world can no longer cancel the run, no timer is armed, and the run has
  no wall-clock limit;
* the work is a plain work effect of a step (not a team member, a scheduled
  call, or a child the run waits for), and every construct around it that
  runs things at once is a ``parallel`` in mode ``all_settled``.

Anything else is explored in every order. This module must never do I/O.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import attrs

from ..decision.state import ListKind, Pending, PendingKind, SeqFrame, State, StepFrame
from ..decision.transitions import TIMERS
from ..language.bound import budget_bound
from ..language.spec import (
    ContinueAsNewStep,
    Flow,
    ForEachStep,
    ParallelStep,
    RunTeamStep,
    SetMetadataStep,
    Step,
)

__all__ = ["Reducible"]


def _children(value: Any) -> Iterator[Step]:
    """The steps directly inside a step's body (its lists), in any container."""
    if isinstance(value, Step):
        yield value
    elif isinstance(value, tuple | list):
        for v in value:
            yield from _children(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _children(v)
    elif attrs.has(type(value)):
        for f in attrs.fields(type(value)):
            yield from _children(getattr(value, f.name))


def _reads(value: Any, refs: set[str]) -> bool:
    """Collect the step ids the expressions of one step's own fields read (not
    those of the steps inside it); True when one reads every step."""
    if isinstance(value, Step):
        return False  # a step of its own
    wholesale = False
    if hasattr(value, "refs") and hasattr(value, "wholesale"):
        refs.update(value.refs)
        wholesale = bool(value.wholesale)
    if isinstance(value, tuple | list):
        for v in value:
            wholesale = _reads(v, refs) or wholesale
    elif isinstance(value, dict):
        for v in value.values():
            wholesale = _reads(v, refs) or wholesale
    elif attrs.has(type(value)):
        for f in attrs.fields(type(value)):
            wholesale = _reads(getattr(value, f.name), refs) or wholesale
    return wholesale


def _within(step: Step) -> set[str]:
    """``step`` and every step inside it."""
    out = {step.id}
    for child in _children(step.body):
        out |= _within(child)
    return out


class Reducible:
    """What decides, for one flow, whether the answers to a piece of work may be
    explored alone at a state (``explore``'s partial-order reduction)."""

    def __init__(self, flow: Flow) -> None:
        self.flow = flow
        self.why_not = self._flow_rules(flow)

    def _flow_rules(self, flow: Flow) -> str | None:
        """Why the flow never allows the reduction (None: it may)."""
        if flow.on_exhausted is not None:
            return "on_budget_exhausted"
        if flow.limits.max_concurrency is not None:
            return "limits.max_concurrency"
        budget = flow.budget
        if any(
            v is not None
            for v in (
                budget.cost_minor_units,
                budget.wall_clock_ms,
                budget.tokens,
                budget.tool_calls,
                budget.turns,
            )
        ):
            return "a budget beyond steps"
        for step in flow.by_id.values():
            body = step.body
            if step.compensate:
                return f"step {step.id!r} declares compensate"
            if isinstance(body, SetMetadataStep | ContinueAsNewStep):
                return f"step {step.id!r} is a {step.kind}"
            if isinstance(body, ParallelStep):
                if body.max_concurrency is not None:
                    return f"parallel {step.id!r} has max_concurrency"
                why = self._coupled(step, body)
                if why is not None:
                    return why
        worst = budget_bound(flow).incarnation.steps
        limit = 1000 if budget.steps is None else int(budget.steps)
        if worst is None or worst >= limit:
            return "the step budget may run out"
        return None

    def _coupled(self, step: Step, body: ParallelStep) -> str | None:
        """Why a branch of ``step`` reads another branch's steps (None: none does)."""
        ids = {
            name: set().union(*(_within(s) for s in steps)) for name, steps in body.branches.items()
        }
        for name, steps in body.branches.items():
            others = set().union(*(ids[n] for n in ids if n != name))
            for inner in set().union(*(_within(s) for s in steps)):
                refs: set[str] = set()
                target = self.flow.by_id[inner]
                if _reads(target.body, refs) or refs & others:
                    return f"parallel {step.id!r}: step {inner!r} reads another branch"
        return None

    def may_commit(self, state: State, entry: Pending, cancel_left: bool) -> bool:
        """Whether the answers to ``entry``'s work may be explored alone at ``state``."""
        if self.why_not is not None or cancel_left or state.ledger.wall_clock_ms is not None:
            return False
        if entry.kind is not PendingKind.WORK or entry.member:
            return False
        if any(p.kind in TIMERS for p in state.waiting.pending.values()):
            return False
        frames = state.tree.frames
        frame = frames.get(entry.frame)
        first = True
        while frame is not None:
            if isinstance(frame, StepFrame):
                step = self.flow.by_id.get(frame.step)
                if step is None:
                    return False
                body = step.body
                if not first:
                    if isinstance(body, ForEachStep | RunTeamStep):
                        return False
                    if isinstance(body, ParallelStep) and body.mode != "all_settled":
                        return False
                first = False
                frame = frames.get(frame.parent)
            else:
                assert isinstance(frame, SeqFrame)
                if frame.list in (ListKind.COMPENSATION, ListKind.FINAL):
                    return False
                frame = frames.get(frame.parent) if frame.parent else None
        return True
