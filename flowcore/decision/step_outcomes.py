"""How each step of a run ended, read from its state: what a run's diagram is
coloured by.

``step_outcomes(state)`` maps every step id that has a result to how it
ended: ``succeeded``, ``failed`` or ``cancelled``. A step that ran more than
once (in a loop, a retried composite, a repeat) is named once, by its worst
ending: failed over cancelled over succeeded. Composite steps (switch,
parallel, try, loops) and waits met without an effect (a signal that was
buffered before the step waited) have results too, so they are named like any
other step. Results a loop has let go of are not here.

This module must never do I/O.
"""

from __future__ import annotations

from .state import State

__all__ = ["step_outcomes"]

_RANK = {"succeeded": 0, "cancelled": 1, "failed": 2}


def step_outcomes(state: State) -> dict[str, str]:
    """Step id -> ``succeeded``, ``failed`` or ``cancelled``, for every step with a result."""
    found: dict[str, str] = {}
    for name, record in state.results.live().items():
        if not isinstance(record, dict):
            continue
        status = record.get("status")
        if status not in _RANK:
            continue
        step = name.rsplit("/", 1)[-1]  # a scope ends with '/': the step id follows
        seen = found.get(step)
        if seen is None or _RANK[status] > _RANK[seen]:
            found[step] = status
    return dict(sorted(found.items()))
