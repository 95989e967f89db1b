"""run_subflow: a child run, started by the host from one run-subflow effect.

The child gets the parent's remaining budget and runs one level deeper; a
run at ``limits.max_subflow_depth`` cannot start one. The child's settlement
comes back as ``subflow-settled`` (see ``_transitions``); its usage is
charged to the parent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._outcome import FAIL, NO_BUDGET, err
from .._spec import RunSubflowStep
from .._state import StepFrame
from .._wire import RunSubflow

if TYPE_CHECKING:
    from .._outcome import Outcome
    from .._txn import Txn

__all__ = ["begin"]


def begin(t: Txn, frame: StepFrame, body: RunSubflowStep) -> Outcome | None:
    depth = t.run.depth + 1
    limit = t.flow.limits.max_subflow_depth
    if depth > limit:
        message = f"subflow {body.flow!r} at depth {depth} exceeds max_subflow_depth {limit}"
        return (FAIL, err("depth-exceeded", message))
    key = t.key(frame)
    t.set_frame(frame, key=key)
    effect = RunSubflow(
        flow_id=body.flow,
        depth=depth,
        idempotency_key=key,
        input=body.input.evaluate(t.resolver(frame.env, frame.attempt)),
        budget_remaining=NO_BUDGET,
    )
    t.emit_work(frame.id, effect, body.flow)
    return None
