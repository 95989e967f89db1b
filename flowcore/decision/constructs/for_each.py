"""for_each: the steps once per item, up to ``max_concurrency`` at a time.

Each iteration runs in a scope of its own (``items[i]/``) with the item and
its index as variables; its results are dropped when it ends, and its
output is kept with the step results until the loop ends (not in the
progress record, which would then be copied whole on every event). The
output lists the iterations' outputs in item order; the first failure
fails the step and abandons the other iterations. A list longer than
``max_items`` fails the step ``too-many-items`` before any iteration starts
(what makes ``flowcore.budget_bound`` of the loop sound).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from ..._data import short_json
from ...language.spec import ForEachStep, Step
from .. import keys
from ..outcome import Failed, Ok, err
from ..state import Env, ForEachProgress, ListKind, StepFrame

if TYPE_CHECKING:
    from ..outcome import Outcome
    from ..txn import Txn

__all__ = ["begin", "child_done"]


def begin(t: Txn, frame: StepFrame, step: Step, body: ForEachStep) -> Outcome | None:
    items = body.items.evaluate(t.resolver(frame.env, frame.attempt))
    if not isinstance(items, list):
        message = f"for_each {step.id!r}: items is not a list: {short_json(items)}"
        return Failed(err("expression-error", message))
    if body.max_items is not None and len(items) > body.max_items:
        message = f"for_each {step.id!r}: {len(items)} items, over max_items {body.max_items}"
        return Failed(err("too-many-items", message))
    if not items:
        return Ok([])
    frame = t.set_frame(frame, progress=ForEachProgress(items=tuple(items)))
    return _fill(t, frame, step, body)


def _fill(
    t: Txn, frame: StepFrame, step: Step, body: ForEachStep, prog: ForEachProgress | None = None
) -> Outcome | None:
    """Start iterations while there are items and room.

    ``prog``: a progress of ``frame`` not stored yet (an iteration just
    ended); it is stored together with the next start, in one write.
    """
    width = body.max_concurrency or 1_000_000_000
    if prog is None:
        stored = frame.progress
        assert isinstance(stored, ForEachProgress)
        prog = stored
    while True:
        if prog.next >= len(prog.items) or prog.running >= width:
            if prog is not frame.progress:
                t.set_frame(frame, progress=prog)
            return None
        i = prog.next
        frame = t.set_frame(
            frame, progress=msgspec.structs.replace(prog, next=i + 1, running=prog.running + 1)
        )
        scope = keys.loop_scope(keys.child_prefix(frame.prefix, step.id, frame.attempt), step.id, i)
        t.set_env(
            scope, Env(parent=frame.env, scope=scope, vars={body.as_: prog.items[i], body.index: i})
        )
        res = t.start_list(
            keys.iteration_list(frame.id, i), frame.id, scope, scope, step.id, ListKind.BODY, i
        )
        if res is not None:
            out = child_done(t, frame, step, body, i, res, refill=False)
            if out is not None:
                return out
        elif t.halt is not None:
            return None
        current = t.frames.get(frame.id)
        if not isinstance(current, StepFrame):
            return None
        frame = current
        progress = frame.progress
        assert isinstance(progress, ForEachProgress)
        prog = progress


def child_done(
    t: Txn,
    frame: StepFrame,
    step: Step,
    body: ForEachStep,
    index: int,
    out: Outcome,
    refill: bool = True,
) -> Outcome | None:
    """Iteration ``index`` ended with ``out``."""
    frame_now = t.frame(frame.id)
    prog = frame_now.progress
    assert isinstance(prog, ForEachProgress)
    if type(out) is Failed:
        frames = t.frames
        for j in range(prog.next):
            if j != index and keys.iteration_list(frame.id, j) in frames:
                t.abandon_frame(keys.iteration_list(frame.id, j))
        return out
    prefix = keys.child_prefix(frame_now.prefix, step.id, frame_now.attempt)
    scope = keys.loop_scope(prefix, step.id, index)
    t.end_scope(scope, step)
    t.record(keys.loop_output(scope), {"output": out.value})
    prog = msgspec.structs.replace(prog, running=prog.running - 1, done=prog.done + 1)
    if refill and prog.done < len(prog.items):
        return _fill(t, frame_now, step, body, prog)  # stores prog
    t.set_frame(frame_now, progress=prog)
    if prog.done == len(prog.items):
        names = [keys.loop_output(keys.loop_scope(prefix, step.id, i)) for i in range(prog.done)]
        return Ok([record["output"] for record in t.take_results(names)])
    return None
