"""try/catch: a failure of the try list whose type a clause names runs that clause.

The handler sees the error as ``error``; its outcome is the step's. A
failure inside a handler, or of a type no clause names, fails the step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...language.spec import Step, TryStep
from .. import keys
from ..outcome import Ok, error_dict, matches
from ..state import Env, ListKind, StepFrame, TryProgress

if TYPE_CHECKING:
    from ..outcome import Outcome
    from ..txn import Txn

__all__ = ["begin", "child_done"]


def begin(t: Txn, frame: StepFrame, step: Step) -> Outcome | None:
    t.set_frame(frame, progress=TryProgress())
    prefix = keys.child_prefix(frame.prefix, step.id, frame.attempt)
    out = t.start_list(keys.try_list(frame.id), frame.id, frame.env, prefix, step.id, ListKind.TRY)
    return t.child_outcome(frame.id, None, out)


def child_done(t: Txn, frame: StepFrame, step: Step, body: TryStep, out: Outcome) -> Outcome | None:
    prog = frame.progress
    assert isinstance(prog, TryProgress)
    if type(out) is Ok or prog.phase == "catch":
        return out
    error = out.error
    for i, clause in enumerate(body.catch):
        if matches(clause.errors, error):
            env_id = keys.catch_env(frame.id)
            t.set_env(
                env_id,
                Env(
                    parent=frame.env, scope=t.scope_of(frame.env), vars={"error": error_dict(error)}
                ),
            )
            t.set_frame(frame, progress=TryProgress(phase="catch"))
            prefix = keys.child_prefix(frame.prefix, step.id, frame.attempt)
            return t.start_list(
                keys.catch_list(frame.id, i), frame.id, env_id, prefix, step.id, ListKind.CATCH, i
            )
    return out
