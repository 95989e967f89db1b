"""A world for generated flows: a simulator every generated flow can run in."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .simulator import (
    Call,
    Fault,
    Ok,
    Signal,
    Simulator,
    Spec,
    Update,
)
from .vocabulary import CHILD_SPEC

# --- a world for generated flows ----------------------------------------------------------


def _echo(call: Call) -> Any:
    if call.kind == "run-agent":
        return Ok({"n": call.n, "green": call.n % 2 == 0}, steps=call.n % 2, cost=call.n % 7)
    return {"n": call.n, "green": call.n % 2 == 0}


def _answer_humans(call: Call) -> Any:
    options = call.options
    return options[call.n % len(options)] if options else f"answer {call.n}"


def generated_world(
    faults: Iterable[Fault] = (),
    signals: Iterable[Signal] = (),
    order: Sequence[int] = (),
    cancel_at_ms: int | None = None,
    paranoid: bool = True,
    subflows: Mapping[str, Spec] | None = None,
    updates: Iterable[Update] = (),
) -> Simulator:
    """A simulator that can run any flow from ``flows()``: every tool, agent and team
    answers, humans pick an option (or answer with text), ``child`` is
    ``CHILD_SPEC``; ``subflows`` adds flows to that registry; ``updates`` are
    update requests (``Update``) sent at their times."""
    return Simulator(
        default=_echo,
        humans=_answer_humans,
        subflows={"child": CHILD_SPEC, **(subflows or {})},
        faults=faults,
        signals=signals,
        order=order,
        cancel_at_ms=cancel_at_ms,
        updates=updates,
        paranoid=paranoid,
        max_events=5_000,
    )
