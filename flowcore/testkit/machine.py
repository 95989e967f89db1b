"""``FlowMachine``: a hypothesis state machine that drives one run and checks it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from ..decision.wire import (
    Effect,
    Event,
    TimerFired,
)
from ..language.spec import Flow
from .checks import check_determinism, check_history
from .events import _FRIENDLY, _OPS, _Host, _output
from .simulator import (
    RunHistory,
    Turn,
    as_flow,
    drive,
)

# --- the state machine -------------------------------------------------------------------------

_CHOICE = st.integers(0, 2**16)


class FlowMachine(RuleBasedStateMachine):
    """Drive one run of ``flow`` with hypothesis rules; check the invariants after each.

    Subclass it and set ``flow`` (a ``Flow`` or a spec) and ``input``; hypothesis
    then explores sequences of rules: deliver a result, fail, report an
    unknown outcome, re-send an event (duplicate), advance the clock (fire the
    timers that are due), send a signal, answer a question, request one of
    the flow's updates (with one of its examples, under a fresh or a repeated
    id), cancel, and send hostile events. ``outputs`` maps a tool, agent or team id to the output
    its results carry (a value, or a callable taking the effect). After every
    rule the history so far must pass ``check_history``; at the end of each
    example, ``check_determinism``.

    Use it as ``TestMyFlow = MyFlowMachine.TestCase``.
    """

    flow: ClassVar[Flow | str | Mapping[str, Any] | None] = None
    input: ClassVar[Any] = None
    run_id: ClassVar[str] = "r"
    outputs: ClassVar[Mapping[str, Any]] = {}
    _parsed: ClassVar[dict[type, Flow]] = {}

    def __init__(self) -> None:
        super().__init__()
        cls = type(self)
        flow = cls._parsed.get(cls)
        if flow is None:
            if cls.flow is None:
                raise TypeError(f"{cls.__name__} must set flow = <a Flow or a spec>")
            flow = as_flow(cls.flow)
            cls._parsed[cls] = flow
        history = drive(flow, cls.input, run_id=cls.run_id)
        self.host = _Host(history, paranoid=True, outputs=self._output_for)

    def _output_for(self, effect: Effect, choice: int) -> Any:
        target = getattr(effect, "tool", None) or getattr(effect, "agent_id", None)
        target = target or getattr(effect, "team_id", None)
        if isinstance(target, str) and target in self.outputs:
            out = self.outputs[target]
            return out(effect) if callable(out) else out
        return _output(choice)

    @property
    def history(self) -> RunHistory:
        return self.host.h

    def send(self, event: Event) -> Turn:
        return self.host.send(event)

    @precondition(lambda self: self.host.has("work"))
    @rule(choice=_CHOICE)
    def deliver_result(self, choice: int) -> None:
        self.send(self.host.make("succeed", choice))

    @precondition(lambda self: self.host.has("work"))
    @rule(choice=_CHOICE)
    def fail(self, choice: int) -> None:
        self.send(self.host.make("fail", choice))

    @precondition(lambda self: self.host.has("work"))
    @rule(choice=_CHOICE)
    def outcome_unknown(self, choice: int) -> None:
        self.send(self.host.make("unknown", choice))

    @precondition(lambda self: self.host.has("subflow"))
    @rule(choice=_CHOICE)
    def settle_subflow(self, choice: int) -> None:
        self.send(self.host.make("subflow", choice))

    @precondition(lambda self: self.host.has("sent"))
    @rule(choice=_CHOICE)
    def duplicate(self, choice: int) -> None:
        self.send(self.host.make("duplicate", choice))

    @precondition(lambda self: self.host.has("timer"))
    @rule(ms=st.integers(0, 100_000_000))
    def advance_clock(self, ms: int) -> None:
        """Fire, in due order, every timer due within ``ms`` of the host's clock."""
        horizon = self.host.clock + ms
        for _ in range(100):  # a cadence of 1 ms would otherwise take a while
            due = self.host.due_timers()
            if not due or due[0][0] > horizon:
                break
            until, key = due[0]
            self.send(TimerFired(idempotency_key=key, at_ms=max(until, self.host.clock)))
        self.host.clock = max(self.host.clock, horizon)

    @rule(choice=_CHOICE)
    def signal(self, choice: int) -> None:
        self.send(self.host.make("signal", choice))

    @precondition(lambda self: self.host.has("ask"))
    @rule(choice=_CHOICE)
    def answer(self, choice: int) -> None:
        self.send(self.host.make("answer", choice))

    @precondition(lambda self: bool(self.host.h.flow.updates))
    @rule(choice=_CHOICE)
    def update(self, choice: int) -> None:
        self.send(self.host.make("update", choice))

    @rule(choice=_CHOICE)
    def cancel(self, choice: int) -> None:
        self.send(self.host.make("cancel", choice))

    @rule(op=st.integers(_FRIENDLY, 99), choice=_CHOICE)
    def hostile(self, op: int, choice: int) -> None:
        self.send(self.host.make(_OPS[op], choice))

    @rule(choice=_CHOICE)
    def late_result(self, choice: int) -> None:
        self.send(self.host.make("stale", choice))

    @invariant()
    def invariants_hold(self) -> None:
        check_history(self.host.h)

    def teardown(self) -> None:
        check_determinism(self.host.h)
