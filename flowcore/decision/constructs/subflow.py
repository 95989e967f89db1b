"""run_subflow: a child run, started by the host from one run-subflow effect.

The child gets the parent's remaining budget and runs one level deeper; a
run at ``limits.max_subflow_depth`` cannot start one. The child's settlement
comes back as ``subflow-settled`` (see ``transitions``); its usage is
charged to the parent.

``parent_close`` says what becomes of the child when the run stops waiting
for it (``txn.Txn.drop_key``): cancelled (the default), left to run on
(``abandon``: ``flowcore.plan`` lists it under ``detach``), or waited for
before the run settles (``wait``: it stays pending as ``PendingKind.CHILD``).
A ``detached`` child is a root run of its own: the host answers
``effect-succeeded`` once it has started it, and the parent never hears more.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from ...language.spec import RunSubflowStep
from ..outcome import NO_BUDGET, Failed, err
from ..state import StepFrame
from ..wire import RunSubflow

if TYPE_CHECKING:
    from ..outcome import Outcome
    from ..txn import Txn

__all__ = ["begin"]


def begin(t: Txn, frame: StepFrame, body: RunSubflowStep) -> Outcome | None:
    # A detached child is a root run of its own (depth 0, its own flow's budget).
    depth = 0 if body.detached else t.run.depth + 1
    limit = t.flow.limits.max_subflow_depth
    if depth > limit:
        message = f"subflow {body.flow!r} at depth {depth} exceeds max_subflow_depth {limit}"
        return Failed(err("depth-exceeded", message))
    key = t.key(frame)
    t.set_frame(frame, key=key)
    effect = RunSubflow(
        flow_id=body.flow,
        depth=depth,
        idempotency_key=key,
        input=body.input.evaluate(t.resolver(frame.env, frame.attempt)),
        budget_remaining=NO_BUDGET,
    )
    if body.detached:
        effect = msgspec.structs.replace(effect, detached=True)
    elif body.close_policy != "cancel":  # the default is left out on the wire
        effect = msgspec.structs.replace(effect, parent_close=body.close_policy)
    t.emit_work(frame.id, effect, body.flow)
    return None
