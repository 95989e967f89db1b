"""repeat: the steps once per tick, on a fixed cadence or a cron, until done.

Each fire runs in a scope of its own (``poll[3]/``) with ``fire_count``; the
scope is dropped when the fire ends unless a compensation recorded during
the fire needs it, so a repeat that fires for ever keeps a bounded state.
Fires missed while the body overran are skipped. The step ends after
``max_fires`` or once ``until`` holds, with the last fire's output.

A cadence decided by an expression is evaluated once, when the step begins,
and kept in the frame's progress (``every_ms``), so that a snapshot and a
replay tick at the same times. A cron is read in its ``timezone`` (UTC when
none) by ``times.next_cron_ms``, which says how DST gaps and repeats fire.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from ...language.expr import TemplateError
from ...language.spec import RepeatStep
from ...language.times import next_cron_ms
from .. import keys
from ..outcome import Failed, err
from ..state import Env, ListKind, PendingKind, RepeatProgress, StepFrame

if TYPE_CHECKING:
    from ..outcome import Outcome
    from ..txn import Txn

__all__ = ["begin", "child_done", "tick"]


def begin(t: Txn, frame: StepFrame, body: RepeatStep) -> Outcome | None:
    every = 0  # a literal cadence is read from the spec; only a decided one is kept
    if body.every_ms is not None and not isinstance(body.every_ms, int):
        every = t.duration(frame, body.every_ms, "repeat.every_ms", zero=False)
    t.set_frame(frame, progress=RepeatProgress(due_ms=t.now_ms, every_ms=every))
    _arm(t, frame.id, body, 1, t.now_ms)
    return None


def _arm(t: Txn, fid: str, body: RepeatStep, fire: int, after_ms: int) -> None:
    frame = t.frame(fid)
    prog = frame.progress
    assert isinstance(prog, RepeatProgress)
    every = prog.every_ms or body.every_ms
    if every is not None:
        assert isinstance(every, int)
        due = after_ms + every
        if due <= t.now_ms:
            # Fires that were missed (the body overran) are skipped: the next
            # tick is the next point on the cadence after now.
            due += ((t.now_ms - due) // every + 1) * every
    else:
        assert body.cron is not None
        due = next_cron_ms(body.cron, body.timezone, max(after_ms, t.now_ms))
    t.set_frame(frame, progress=msgspec.structs.replace(prog, due_ms=due))
    scope = keys.loop_scope(
        keys.child_prefix(frame.prefix, frame.step, frame.attempt), frame.step, fire
    )
    t.timer(keys.tick_key(t.key_run, scope), due, PendingKind.TICK, fid)


def tick(t: Txn, frame: StepFrame) -> None:
    """The tick timer fired: run the next fire."""
    step = t.step_of(frame)
    body = step.body
    assert isinstance(body, RepeatStep)
    prog = frame.progress
    assert isinstance(prog, RepeatProgress)
    fire = prog.fires + 1
    frame = t.set_frame(
        frame, progress=msgspec.structs.replace(prog, fires=fire, comp_depth=t.comp_depth())
    )
    scope = keys.loop_scope(keys.child_prefix(frame.prefix, step.id, frame.attempt), step.id, fire)
    t.set_env(scope, Env(parent=frame.env, scope=scope, vars={"fire_count": fire}))
    res = t.start_list(
        keys.iteration_list(frame.id, fire), frame.id, scope, scope, step.id, ListKind.BODY, fire
    )
    if res is None:
        return
    out = child_done(t, frame, body, res)
    if out is not None:
        t.step_ended(frame.id, out)


def child_done(t: Txn, frame: StepFrame, body: RepeatStep, out: Outcome) -> Outcome | None:
    """The current fire ended with ``out``."""
    frame_now = t.frame(frame.id)
    prog = frame_now.progress
    assert isinstance(prog, RepeatProgress)
    if type(out) is Failed:
        return out
    fire = prog.fires
    prefix = keys.child_prefix(frame_now.prefix, frame_now.step, frame_now.attempt)
    scope = keys.loop_scope(prefix, frame_now.step, fire)
    done = body.max_fires is not None and fire >= body.max_fires
    if not done and body.until is not None:
        try:
            done = body.until.test(t.resolver(scope, frame_now.attempt))
        except TemplateError as exc:
            return Failed(err("expression-error", f"repeat {frame_now.step!r} until: {exc}"))
    # The fire's scope is finished with, unless a compensation recorded
    # during the fire will need it later.
    if t.comp_depth() == prog.comp_depth:
        t.end_scope(scope, t.step_of(frame_now), uncompensated=True)
    t.set_frame(frame_now, progress=msgspec.structs.replace(prog, last=out.value))
    if done:
        return out
    _arm(t, frame_now.id, body, fire + 1, prog.due_ms)
    return None
