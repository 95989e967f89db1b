"""Shares of the budget: what each piece of work handed a budget is handed.

Theory of operation. Work that is handed a budget (``budgetRemaining`` of
run-agent, run-team, run-subflow) may spend all it is handed. So that what
runs at once can never jointly spend more than the run has left, what an
effect is handed is never more than what is *free* (what remains less what
the pending work already holds), and it is then held (``Pending.reserved``,
summed in the ledger's ``reserved_*``) until the work stops being pending:
answered, abandoned, cancelled, taken back. Its reported usage is charged
as before.

How much of the free part an effect is handed is the flow's policy. Each
running frame has a lane fraction: the root's is 1; a branch of an ``even``
parallel has its parent's times its weight over the sum of the branches'
weights; an iteration of an ``even`` for_each its parent's over
min(max_concurrency, number of items); a member of a parallel team its
step's over the number of members; a ``first-come`` parallel or for_each
does not divide, but for steps and tool calls, which issuing work itself
costs: those are always split evenly, so that a first-come member never
keeps its siblings from being issued. The effect is handed, per limit,
min(free, floor(remaining x fraction), the step's ``max_usage``).
Remaining, not free: siblings issued one after the other get equal parts,
while a lane that already spent part of its share gets what is left of it.
An unlimited limit stays unlimited; the wall clock is time, not shared, and
is handed as it remains.

Issuing work costs a step (and a call-tool a tool call) of its own; when
that step would come out of what others hold, the work is held until one
of them reports (``needs_room``); with nothing held, the budget is spent
and the run is exhausted as before. A scheduled call and work issued again
after an unknown outcome are never held (``TxnWaits.emit_work``).

This module must never do I/O, read a clock or draw a random number.
"""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING, Any, NamedTuple

import msgspec

from ..language.spec import Flow, ForEachStep, ParallelStep, RunTeamStep, UsageCap
from .state import ForEachProgress, Ledger, ListKind, SeqFrame, StepFrame
from .wire import BudgetRemaining

if TYPE_CHECKING:
    from collections.abc import Callable

    from .state import Frame

__all__ = ["Lane", "hand", "lane", "needs_room", "release", "reserve", "unreserved"]

_replace = msgspec.structs.replace
_WHOLE = Fraction(1)


class Lane(NamedTuple):
    """The fractions of the remaining budget the work of a frame may be handed:
    ``share`` under the flow's policy; ``even``, always split as ``even`` splits
    (for steps and tool calls: what issuing itself costs)."""

    share: Fraction
    even: Fraction


def lane(flow: Flow, find: Callable[[str], Frame | None], fid: str, member: str = "") -> Lane:
    """The lane of the work of frame ``fid`` (``find``: a frame by id)."""
    share = even = _WHOLE
    frame = find(fid)
    if isinstance(frame, StepFrame) and member:
        step = flow.by_id.get(frame.step)
        body = None if step is None else step.body
        if isinstance(body, RunTeamStep):
            team = flow.teams.get(body.team)
            if team is not None and team.mode == "parallel":
                share = even = Fraction(1, len(team.members))
    while frame is not None:
        if isinstance(frame, SeqFrame) and frame.parent is not None:
            part, first_come = _split(flow, find(frame.parent), frame)
            even *= part
            share *= _WHOLE if first_come else part
        parent = frame.parent
        frame = find(parent) if parent is not None else None
    return Lane(share, even)


def _split(flow: Flow, owner: Frame | None, frame: SeqFrame) -> tuple[Fraction, bool]:
    """What part of its owner's lane the list ``frame`` runs in as even shares, and
    whether its owner is ``first-come``."""
    if not isinstance(owner, StepFrame):
        return _WHOLE, False
    step = flow.by_id.get(owner.step)
    body: Any = None if step is None else step.body
    if frame.list is ListKind.BRANCH and isinstance(body, ParallelStep):
        total = sum(body.weights.get(name, 1) for name in body.branches)
        part = Fraction(body.weights.get(frame.branch, 1), total)
        return part, body.share == "first-come"
    if frame.list is ListKind.BODY and isinstance(body, ForEachStep):
        prog = owner.progress
        if not isinstance(prog, ForEachProgress):
            return _WHOLE, False
        width = len(prog.items)
        if body.max_concurrency is not None:
            width = min(width, body.max_concurrency)
        return Fraction(1, max(1, width)), body.share == "first-come"
    return _WHOLE, False


def hand(led: Ledger, left: BudgetRemaining, at: Lane, cap: UsageCap | None) -> BudgetRemaining:
    """What an effect in lane ``at`` is handed, ``left`` being what remains."""

    def part(remains: int | None, held: int, most: int | None, f: Fraction) -> int | None:
        if remains is None:
            return None
        n = min(max(0, remains - held), remains * f.numerator // f.denominator)
        return n if most is None else min(n, most)

    c = cap or UsageCap()
    s = at.share
    return BudgetRemaining(
        steps=part(left.steps, led.reserved_steps, c.steps, at.even) or 0,
        cost_minor_units=part(left.cost_minor_units, led.reserved_cost, c.cost_minor_units, s),
        wall_clock_ms=left.wall_clock_ms,
        tokens=part(left.tokens, led.reserved_tokens, c.tokens, s),
        tool_calls=part(left.tool_calls, led.reserved_tool_calls, c.tool_calls, at.even),
        turns=part(left.turns, led.reserved_turns, c.turns, s),
    )


def reserve(led: Ledger, held: BudgetRemaining, sign: int = 1) -> Ledger:
    """``led`` holding ``held`` back (``sign`` -1: no longer)."""
    return _replace(
        led,
        reserved_steps=led.reserved_steps + sign * held.steps,
        reserved_cost=led.reserved_cost + sign * (held.cost_minor_units or 0),
        reserved_tokens=led.reserved_tokens + sign * (held.tokens or 0),
        reserved_tool_calls=led.reserved_tool_calls + sign * (held.tool_calls or 0),
        reserved_turns=led.reserved_turns + sign * (held.turns or 0),
    )


def release(led: Ledger, held: BudgetRemaining | None) -> Ledger:
    return led if held is None else reserve(led, held, -1)


def unreserved(led: Ledger) -> Ledger:
    """``led`` holding nothing back (the run settled: nothing is pending)."""
    return _replace(
        led,
        reserved_steps=0,
        reserved_cost=0,
        reserved_tokens=0,
        reserved_tool_calls=0,
        reserved_turns=0,
    )


def needs_room(led: Ledger, tool_call: bool) -> bool:
    """Whether issuing work now would take its own step (or tool call) out of
    what pending work holds: then it waits until some of that is released."""
    if led.reserved_steps and led.steps is not None:
        if led.used_steps + 1 <= led.steps < led.used_steps + led.reserved_steps + 1:
            return True
    calls = led.tool_calls
    if tool_call and led.reserved_tool_calls and calls is not None:
        return led.used_tool_calls + 1 <= calls < led.used_tool_calls + led.reserved_tool_calls + 1
    return False
