"""switch: the first case whose condition holds runs; its last output is the step's."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...language.spec import Step, SwitchStep
from .. import keys
from ..outcome import Ok
from ..state import ListKind, StepFrame

if TYPE_CHECKING:
    from ..outcome import Outcome
    from ..txn import Txn

__all__ = ["begin"]


def begin(t: Txn, frame: StepFrame, step: Step, body: SwitchStep) -> Outcome | None:
    r = t.resolver(frame.env, frame.attempt)
    for i, case in enumerate(body.cases):
        if case.cond is None or case.cond.test(r):
            t.set_frame(frame)
            prefix = keys.child_prefix(frame.prefix, step.id, frame.attempt)
            return t.start_list(
                keys.case_list(frame.id, i), frame.id, frame.env, prefix, step.id, ListKind.CASE, i
            )
    return Ok(None)
