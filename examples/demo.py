"""Run the example triage flow through the pure core with scripted answers.

Every effect the interpreter emits is printed, then the event this script
reports back for it. Nothing here is a host: tools, agents and the human are
canned answers; time is whatever the script says it is.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import flowcore
from flowcore import (
    AskHuman,
    AwaitSignal,
    CallTool,
    EffectSucceeded,
    Event,
    HumanAnswered,
    RunAgent,
    Settled,
    SignalReceived,
    Sleep,
    Usage,
)

SPEC = Path(__file__).resolve().parent.parent / "specs" / "examples" / "triage.yaml"

TOOLS: dict[str, Any] = {
    "pagerduty.get_incident": {"title": "checkout latency p99 > 2s", "services": ["api"]},
    "pagerduty.page": {"paged": True},
    "slack.post": {"ok": True},
}


def respond(effect: Any, now: int) -> Event | None:
    """The scripted world: how each effect is answered."""
    if isinstance(effect, CallTool):
        return EffectSucceeded(
            idempotency_key=effect.idempotency_key, output=TOOLS[effect.tool], at_ms=now
        )
    if isinstance(effect, RunAgent):
        return EffectSucceeded(
            idempotency_key=effect.idempotency_key,
            output={"owner": "payments-oncall", "severity": "high"},
            usage=Usage(steps=1, cost_minor_units=42),
            at_ms=now,
        )
    if isinstance(effect, AskHuman):
        return HumanAnswered(idempotency_key=effect.idempotency_key, answer="page", at_ms=now)
    if isinstance(effect, AwaitSignal):
        return SignalReceived(signal=effect.signal, payload={"commit": "a1b2c3"}, at_ms=now)
    return None  # sleeps (timeouts, the deadline) are never due in this script


def show(prefix: str, wire: dict[str, Any]) -> None:
    print(f"{prefix} {json.dumps(wire, separators=(', ', ': '))}")


def main() -> None:
    flow = flowcore.parse_flow(SPEC.read_text(encoding="utf-8"), source_name=SPEC.name)
    decision = flowcore.start(flow, {"incident_id": "INC-42"}, run_id="demo-1", now_ms=0)
    now = 0
    queue = list(decision.effects)
    state = decision.state
    for effect in decision.effects:
        show("effect ->", flowcore.effect_to_wire(effect))
    while queue:
        effect = queue.pop(0)
        if isinstance(effect, (Settled, Sleep)):
            continue
        now += 1000
        event = respond(effect, now)
        if event is None:
            continue
        show("event  <-", flowcore.event_to_wire(event))
        decision = flowcore.advance(state, event)
        state = decision.state
        for new in decision.effects:
            show("effect ->", flowcore.effect_to_wire(new))
        queue.extend(decision.effects)
    assert state.settled is not None
    print(f"\nsettled: {state.settled.status}; output {json.dumps(state.settled.output)}")


if __name__ == "__main__":
    main()
