"""parallel: named branches, started in declared order up to ``max_concurrency``.

The mode decides when the step ends: ``all`` (every branch, or the first
failure), ``all_settled`` (every branch, failures included), ``race`` (the
first branch to end), ``any`` (the first success, or all failed). Branches
still running when the step is decided are abandoned.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, assert_never

import msgspec

from ...language.spec import ParallelStep, Step
from .. import keys
from ..outcome import Failed, Ok, err, error_dict
from ..state import ListKind, ParallelProgress, StepFrame

if TYPE_CHECKING:
    from ..outcome import Outcome
    from ..txn import Txn

__all__ = ["begin", "child_done"]


def begin(t: Txn, frame: StepFrame, step: Step, body: ParallelStep) -> Outcome | None:
    names = tuple(body.branches)
    if not names:
        return Ok({})
    t.set_frame(frame, progress=ParallelProgress(waiting=names))
    return _fill(t, frame.id, step, body)


def _fill(t: Txn, fid: str, step: Step, body: ParallelStep) -> Outcome | None:
    """Start waiting branches, in declared order, up to max_concurrency."""
    width = body.max_concurrency or len(body.branches)
    while True:
        frame = t.frames.get(fid)
        if not isinstance(frame, StepFrame):
            return None
        prog = frame.progress
        assert isinstance(prog, ParallelProgress)
        if not prog.waiting or len(prog.running) >= width:
            return None
        name = prog.waiting[0]
        frame = t.set_frame(
            frame,
            progress=msgspec.structs.replace(
                prog, waiting=prog.waiting[1:], running=(*prog.running, name)
            ),
        )
        prefix = keys.child_prefix(frame.prefix, step.id, frame.attempt)
        res = t.start_list(
            keys.branch_list(fid, name),
            fid,
            frame.env,
            prefix,
            step.id,
            ListKind.BRANCH,
            branch=name,
        )
        if res is not None:
            out = child_done(t, t.frame(fid), body, name, res, refill=False)
            if out is not None:
                return out
        elif t.halt is not None:
            return None


def child_done(
    t: Txn, frame: StepFrame, body: ParallelStep, name: str, out: Outcome, refill: bool = True
) -> Outcome | None:
    """Branch ``name`` ended with ``out``."""
    prog = frame.progress
    assert isinstance(prog, ParallelProgress)
    mode = body.mode
    match out:
        case Ok():
            record: dict[str, Any] = {"status": "succeeded", "output": out.value}
        case Failed():
            record = {"status": "failed", "error": error_dict(out.error)}
        case _:
            assert_never(out)
    # In the branches' order, not the order they ended in: a state is the same
    # however its branches' answers interleaved (the output reads them by name).
    ended = {**prog.outcomes, name: record}
    outcomes = {n: ended[n] for n in body.branches if n in ended}
    running = tuple(n for n in prog.running if n != name)
    decided: Outcome | None = None
    if type(out) is Ok:
        if mode == "race" or mode == "any":
            decided = Ok({name: out.value})
    elif mode == "race" or mode == "all":
        decided = out
    if decided is not None:
        for other in running:
            t.abandon_frame(keys.branch_list(frame.id, other))
        # Re-read: the losers' calls being cancelled may now be waited for by it.
        t.set_frame(t.frame(frame.id), progress=ParallelProgress(outcomes=outcomes))
        return decided
    t.set_frame(
        frame, progress=ParallelProgress(waiting=prog.waiting, running=running, outcomes=outcomes)
    )
    if refill and prog.waiting:
        res = _fill(t, frame.id, t.step_of(frame), body)
        if res is not None or t.halt is not None:
            return res
        current = t.frames.get(frame.id)
        if not isinstance(current, StepFrame):
            return None
        prog = current.progress
        assert isinstance(prog, ParallelProgress)
        running, outcomes = prog.running, prog.outcomes
        if prog.waiting:
            return None
    elif prog.waiting:
        return None
    if running:
        return None
    # Every branch has ended.
    if mode == "all":
        return Ok({n: outcomes[n]["output"] for n in body.branches})
    if mode == "all_settled":
        return Ok({n: outcomes[n] for n in body.branches})
    failures = "; ".join(f"{n}: {outcomes[n]['error']['type']}" for n in body.branches)
    return Failed(err("all-branches-failed", f"every branch failed ({failures})"))
