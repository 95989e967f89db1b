"""A small driver for unit tests: one run, events by key, effects by kind."""

from __future__ import annotations

from typing import Any

import flowcore
from flowcore import (
    CancelRequested,
    Effect,
    EffectFailed,
    EffectOutcomeUnknown,
    EffectSucceeded,
    ErrorInfo,
    Event,
    HumanAnswered,
    Settled,
    SignalReceived,
    SubflowSettled,
    TimerFired,
    Usage,
)


class Run:
    """Drive one run by hand. ``effects`` holds the last decision's effects."""

    def __init__(
        self,
        spec: str | dict[str, Any],
        input: Any = None,
        run_id: str = "r",
        now_ms: int = 0,
        **start: Any,
    ) -> None:
        self.flow = flowcore.parse_flow(spec, source_name="test.yaml")
        d = flowcore.start(self.flow, input, run_id=run_id, now_ms=now_ms, **start)
        self.state = d.state
        self.effects: tuple[Effect, ...] = d.effects
        self.history: list[Effect] = list(d.effects)
        self.timers = {s.idempotency_key: s.until_ms for s in flowcore.plan(d).arm}  # armed: due
        self.now = now_ms

    # --- reading ---------------------------------------------------------------------

    def wire(self) -> list[dict[str, Any]]:
        return [flowcore.effect_to_wire(e) for e in self.effects]

    def keys(self, kind: str | None = None) -> list[str]:
        out = []
        for e in self.effects:
            wire = flowcore.effect_to_wire(e)
            if kind is None or wire["kind"] == kind:
                out.append(wire.get("idempotencyKey", ""))
        return out

    def kinds(self) -> list[str]:
        return [flowcore.effect_to_wire(e)["kind"] for e in self.effects]

    @property
    def settled(self) -> Settled | None:
        return self.state.settled

    def result(self, scoped_id: str) -> Any:
        """A step's result record (``{status, output, ...}``) by scoped id."""
        return self.state.results.get(scoped_id)

    def report(self) -> dict[str, str]:
        assert self.settled is not None
        return {r.idempotency_key: r.status for r in self.settled.report}

    # --- events ------------------------------------------------------------------------

    def send(self, event: Event) -> tuple[Effect, ...]:
        d = flowcore.advance(self.state, event)
        self.state = d.state
        self.effects = d.effects
        self.history.extend(d.effects)
        self.timers.update({s.idempotency_key: s.until_ms for s in flowcore.plan(d).arm})
        return d.effects

    def tick(self, at: int | None) -> int:
        if at is None:
            self.now += 1
        else:
            self.now = max(self.now, at)
        return self.now

    def ok(
        self, key: str, output: Any = None, at: int | None = None, usage: Usage | None = None
    ) -> tuple[Effect, ...]:
        return self.send(
            EffectSucceeded(idempotency_key=key, output=output, usage=usage, at_ms=self.tick(at))
        )

    def fail(
        self,
        key: str,
        type: str = "boom",
        retryable: bool = False,
        at: int | None = None,
    ) -> tuple[Effect, ...]:
        error = ErrorInfo(type=type, message=f"{type} happened", retryable=retryable)
        return self.send(EffectFailed(idempotency_key=key, error=error, at_ms=self.tick(at)))

    def unknown(self, key: str, at: int | None = None) -> tuple[Effect, ...]:
        return self.send(EffectOutcomeUnknown(idempotency_key=key, at_ms=self.tick(at)))

    def answer(self, key: str, answer: Any, at: int | None = None) -> tuple[Effect, ...]:
        return self.send(HumanAnswered(idempotency_key=key, answer=answer, at_ms=self.tick(at)))

    def fire(self, key: str, at: int | None = None) -> tuple[Effect, ...]:
        """Fire a timer; by default at the time its last arming asked for."""
        at = self.timers.get(key) if at is None else at
        return self.send(TimerFired(idempotency_key=key, at_ms=self.tick(at)))

    def signal(self, name: str, payload: Any = None, at: int | None = None) -> tuple[Effect, ...]:
        return self.send(SignalReceived(signal=name, payload=payload, at_ms=self.tick(at)))

    def child(
        self,
        key: str,
        status: str = "completed",
        output: Any = None,
        usage: Usage | None = None,
        at: int | None = None,
        error: ErrorInfo | None = None,
    ) -> tuple[Effect, ...]:
        return self.send(
            SubflowSettled(
                idempotency_key=key,
                status=status,  # type: ignore[arg-type]
                output=output,
                usage=usage,
                error=error,
                at_ms=self.tick(at),
            )
        )

    def cancel(self, reason: str = "stop", at: int | None = None) -> tuple[Effect, ...]:
        return self.send(CancelRequested(reason=reason, at_ms=self.tick(at)))


# Example flows (specs/examples) whose static budget bound is unbounded by
# design: a handler schedules calls of a ``schedulable`` tool while the run
# runs, which the spec alone cannot count (``budget_bound`` says so, naming the
# tool). Every other example is bounded and its budget covers the worst case.
SCHEDULES_AT_RUN_TIME = frozenset({"remind_me"})
