"""What each step needs at run time, worked out once per flow: a speed-up.

``Txn.start_step`` begins a step the general way: it builds the step's frame,
looks at its timeouts, dispatches on its kind (``constructs.begin``), and the
construct reads the spec's tables (the tool's declaration, the step's
cancellation mode) and hands its effect to ``emit_work``, which looks the
frame up again. For the commonest step, a ``call_tool`` without a timeout of
its own, a heartbeat, an approval or an input schema to consult, all of that
is the same every time the step begins; ``plain_call`` works it out the
first time (a ``PlainCall``, kept in ``Flow.compiled`` by step id) and
``PlainCall.start`` begins the step directly.

``start`` writes exactly what the general path writes, in the same order:
the step's frame with its key, then ``Txn.issue``'s effect, pending entry,
budget and sequence number. Whenever the general path would do anything
else (the input template raises, the work must be held for
``max_concurrency`` or for what pending work holds), ``start`` declines
before it writes anything, and the general path begins the step.
tests/decision/test_compiled.py runs both paths side by side on generated
flows and event streams and compares every state, effect and rejection.

Listed in specs/architecture.md §5 (the speed-ups). This module must never
do I/O, read a clock or draw a random number.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from ..language.expr import Template, TemplateError
from ..language.spec import CallToolStep, Flow, Step
from . import shares
from .state import StepFrame
from .txn_records import Resolver
from .wire import CallTool, CancellationType

if TYPE_CHECKING:
    from .txn import Txn

__all__ = ["ENABLED", "PlainCall", "plain_call"]

ENABLED = True
"""Whether ``Txn.start_step`` uses this module (the lockstep tests switch it off)."""

_GENERAL: Final = object()
"""``Flow.compiled``'s entry for a step the general path always begins."""

_WIRE_CANCELLATION: Final[dict[str, CancellationType]] = {
    "wait_cancellation_completed": "wait-cancellation-completed",
    "abandon": "abandon",
}


class PlainCall:
    """A plain ``call_tool`` step, as it begins: see the module docstring."""

    __slots__ = ("cancellation", "input", "step_id", "tool")

    def __init__(self, step: Step, body: CallToolStep, cancellation: CancellationType) -> None:
        self.step_id = step.id
        self.tool = body.tool
        self.input: Template = body.input
        self.cancellation = cancellation

    def start(self, t: Txn, parent: str, env: str, prefix: str) -> bool:
        """Begin the step's first attempt in the list ``parent``; False: nothing was
        written, and the general path must begin it."""
        template = self.input
        if template.constant:
            value = template.source
        else:
            try:
                value = template.evaluate(Resolver(t, env, 1, None))
            except TemplateError:
                return False  # the step fails: the general path says how
        w = t.waiting
        if w.queue_head < w.queue_tail:
            return False  # held work goes first
        cap = t.flow.limits.max_concurrency
        if cap is not None and t.in_flight >= cap:
            return False
        fid = prefix + self.step_id
        if (t.schedules and fid in t.schedules) or shares.needs_room(t.ledger, True):
            return False
        key = f"{t.key_run}/{fid}#1"  # keys.step_key
        frame = StepFrame(id=fid, parent=parent, env=env, prefix=prefix, step=self.step_id, key=key)
        t.frames = t.frames.set(fid, frame)
        if self.cancellation == "try-cancel":
            effect = CallTool(tool=self.tool, input=value, idempotency_key=key)
        else:
            effect = CallTool(
                tool=self.tool, input=value, idempotency_key=key, cancellation=self.cancellation
            )
        t.issue(fid, effect, "", t.seq + 1, self.tool, "call-tool")
        return True


def plain_call(flow: Flow, step: Step) -> PlainCall | None:
    """``step``'s ``PlainCall``, worked out on first use; None if it is not plain."""
    got: Any = flow.compiled.get(step.id)
    if got is None:
        got = _compile(flow, step)
        flow.compiled[step.id] = got
    return None if got is _GENERAL else got


def _compile(flow: Flow, step: Step) -> PlainCall | object:
    body = step.body
    if (
        not isinstance(body, CallToolStep)
        or step.timeout_ms is not None
        or step.attempt_timeout_ms is not None
        or step.heartbeat_timeout_ms is not None
    ):
        return _GENERAL
    decl = flow.tools.get(body.tool)
    if decl is None or decl.needs_approval is not False or decl.input_schema is not None:
        return _GENERAL
    mode = flow.cancellation(step)
    return PlainCall(step, body, _WIRE_CANCELLATION.get(mode, "try-cancel"))
