"""What each step needs at run time, worked out once per flow: a speed-up.

``Txn.start_step`` begins a step the general way: it builds the step's frame,
looks at its timeouts, dispatches on its kind (``constructs.begin``), and the
construct reads the spec's tables (the tool's declaration, the step's
cancellation mode) and hands its effect to ``emit_work``, which looks the
frame up again. For the commonest steps, a ``call_tool`` or a ``run_agent``
without a timeout of its own or a heartbeat (and, for a call, without an
approval or an input schema to consult), all of that is the same every time
the step begins: ``plain_work`` works it out the first time (a ``PlainCall``
or a ``PlainAgent``, kept in ``Flow.compiled`` by step id), and ``start``
(which ``interp`` wires in as ``Above.start``) begins the step directly.

A plain step begins with exactly the writes of the general path, in the same
order: the step's frame with its key, then ``Txn.issue``'s effect, pending
entry, budget (an agent's share, ``hand_budget``) and sequence number.
Whenever the general path would do anything else (a template raises, the
work must be held for ``max_concurrency`` or for what pending work holds),
``start`` declines before it writes anything, and the general path begins the
step. tests/decision/test_compiled.py runs both paths side by side on
generated flows and event streams and compares every state, effect and
rejection.

Listed in specs/architecture.md §5 (the speed-ups). This module must never
do I/O, read a clock or draw a random number.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import msgspec

from ..language.expr import Template, TemplateError
from ..language.spec import CallToolStep, Flow, RunAgentStep, Step
from . import shares
from .constructs.leaf import as_text
from .outcome import NO_BUDGET
from .state import StepFrame
from .txn_records import Resolver
from .wire import CallTool, CancellationType, RunAgent

if TYPE_CHECKING:
    from .txn import Txn

__all__ = ["ENABLED", "PlainAgent", "PlainCall", "plain_work", "start"]

ENABLED = True
"""Whether ``start`` begins plain steps (the lockstep tests switch it off)."""

_GENERAL: Final = False
"""``Flow.compiled``'s entry for a step the general path always begins (a value
that stays itself when a flow is copied)."""

_WIRE_CANCELLATION: Final[dict[str, CancellationType]] = {
    "wait_cancellation_completed": "wait-cancellation-completed",
    "abandon": "abandon",
}


def start(t: Txn, step: Step, parent: str, env: str, prefix: str) -> bool:
    """Begin ``step``'s first attempt in the list ``parent`` if it is plain; False:
    nothing was written, and the general path must begin it."""
    if not ENABLED:
        return False
    plain = plain_work(t.flow, step)
    return plain is not None and plain.start(t, parent, env, prefix)


class PlainWork:
    """A plain work step, as it begins: see the module docstring."""

    __slots__ = ("cancellation", "step_id", "target", "tool_call")

    def __init__(self, step: Step, target: str, cancellation: str, tool_call: bool) -> None:
        self.step_id = step.id
        self.target = target  # the tool or agent: the report's target
        self.cancellation: CancellationType = _WIRE_CANCELLATION.get(cancellation, "try-cancel")
        self.tool_call = tool_call

    def effect(self, t: Txn, env: str, key: str) -> CallTool | RunAgent:
        """The step's effect; raises ``TemplateError`` as the general path would."""
        raise NotImplementedError

    def start(self, t: Txn, parent: str, env: str, prefix: str) -> bool:
        w = t.waiting
        if w.queue_head < w.queue_tail:
            return False  # held work goes first
        cap = t.flow.limits.max_concurrency
        if cap is not None and t.in_flight >= cap:
            return False
        fid = prefix + self.step_id
        if (t.schedules and fid in t.schedules) or shares.needs_room(t.ledger, self.tool_call):
            return False
        key = f"{t.key_run}/{fid}#1"  # keys.step_key
        try:
            effect = self.effect(t, env, key)
        except TemplateError:
            return False  # the step fails: the general path says how
        frame = StepFrame(id=fid, parent=parent, env=env, prefix=prefix, step=self.step_id, key=key)
        t.frames = t.frames.set(fid, frame)
        t.issue(fid, effect, "", t.seq + 1, self.target, "call-tool" if self.tool_call else "")
        return True


class PlainCall(PlainWork):
    """A ``call_tool`` step: its input, then a ``call-tool`` effect."""

    __slots__ = ("input",)

    def __init__(self, step: Step, body: CallToolStep, cancellation: str) -> None:
        super().__init__(step, body.tool, cancellation, tool_call=True)
        self.input: Template = body.input

    def effect(self, t: Txn, env: str, key: str) -> CallTool:
        template = self.input
        value = (
            template.source if template.constant else template.evaluate(Resolver(t, env, 1, None))
        )
        if self.cancellation == "try-cancel":
            return CallTool(tool=self.target, input=value, idempotency_key=key)
        return CallTool(
            tool=self.target, input=value, idempotency_key=key, cancellation=self.cancellation
        )


class PlainAgent(PlainWork):
    """A ``run_agent`` step: its texts, then a ``run-agent`` effect (``issue`` hands
    it its share of the budget)."""

    __slots__ = ("body",)

    def __init__(self, step: Step, body: RunAgentStep, cancellation: str) -> None:
        super().__init__(step, body.agent, cancellation, tool_call=False)
        self.body = body

    def effect(self, t: Txn, env: str, key: str) -> RunAgent:
        body = self.body
        r = Resolver(t, env, 1, None)
        instructions = body.instructions
        effect = RunAgent(
            agent_id=body.agent,
            prompt=as_text(body.prompt.evaluate(r)),
            instructions=None if instructions is None else as_text(instructions.evaluate(r)),
            member=body.member,
            idempotency_key=key,
            budget_remaining=NO_BUDGET,
        )
        if self.cancellation == "try-cancel":  # the default, left out as encoded
            return effect
        return msgspec.structs.replace(effect, cancellation=self.cancellation)


def plain_work(flow: Flow, step: Step) -> PlainWork | None:
    """``step``'s ``PlainWork``, worked out on first use; None if it is not plain."""
    got: Any = flow.compiled.get(step.id)
    if got is None:
        got = _compile(flow, step)
        flow.compiled[step.id] = got
    return None if got is _GENERAL else got


def _compile(flow: Flow, step: Step) -> PlainWork | bool:
    body = step.body
    if (
        step.timeout_ms is not None
        or step.attempt_timeout_ms is not None
        or step.heartbeat_timeout_ms is not None
    ):
        return _GENERAL
    if isinstance(body, RunAgentStep):
        return PlainAgent(step, body, flow.cancellation(step))
    if not isinstance(body, CallToolStep):
        return _GENERAL
    decl = flow.tools.get(body.tool)
    if decl is None or decl.needs_approval is not False or decl.input_schema is not None:
        return _GENERAL
    return PlainCall(step, body, flow.cancellation(step))
