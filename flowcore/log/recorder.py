"""``Recorder``: the log records of one run as a host drives it, and the wire
form of what they hold (a start budget, a continue-as-new's carry, a
settlement). ``records`` describes the log.

This module must never do I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from ..decision.interp import Decision
from ..decision.wire import (
    BudgetRemaining,
    ContinueAsNew,
    Effect,
    Event,
    Settled,
    effect_to_wire,
    event_to_wire,
)
from ..language.spec import Budget, Flow
from .record_types import (
    EFFECT_EMITTED,
    EFFECT_REDISPATCHED,
    EVENT_REJECTED,
    EVENT_REPORTED,
    RUN_SETTLED,
    RUN_STARTED,
    SCHEDULED_CHANGED,
    Record,
    scheduled_changed_data,
)

# A budget's limits: (attribute, camelCase wire name).
_BUDGET_WIRE: tuple[tuple[str, str], ...] = (
    ("steps", "steps"),
    ("cost_minor_units", "costMinorUnits"),
    ("wall_clock_ms", "wallClockMs"),
    ("tokens", "tokens"),
    ("tool_calls", "toolCalls"),
    ("turns", "turns"),
)


def budget_to_wire(budget: Budget | BudgetRemaining | None) -> dict[str, int] | None:
    """A start budget as the camelCase mapping ``run.started`` records (unset limits omitted)."""
    if budget is None:
        return None
    out: dict[str, int] = {}
    for field, name in _BUDGET_WIRE:
        value = getattr(budget, field)
        if value is not None:
            out[name] = int(value)
    return out


def budget_from_wire(data: dict[str, Any] | None) -> Budget | None:
    """The start budget a ``run.started`` record (or a client) gives as camelCase
    limits (``steps``, ``costMinorUnits``, ``wallClockMs``; absent = not capped).
    The amounts are checked where the budget is used (``start``)."""
    if data is None:
        return None
    caps: Any = {field: data.get(name) for field, name in _BUDGET_WIRE}
    return Budget(**caps)


class Recorder:
    """Builds the log records of one run as a host drives it.

    ``started`` after ``start``, ``applied`` after each ``advance`` that was
    accepted, ``rejected`` (optionally) for events that were not, and
    ``redispatched`` when the host runs pending work again under its key
    after recovering it from a lost worker.
    """

    def __init__(self, run_id: str, index: int = 0) -> None:
        self.run_id = run_id
        self.index = index

    def _make(self, kind: str, at: int, data: Any) -> Record:
        record = Record(kind, self.index, self.run_id, at, data)
        self.index += 1
        return record

    def started(
        self,
        flow: Flow,
        input: Any,
        at: int,
        decision: Decision,
        budget: Budget | BudgetRemaining | None = None,
        depth: int = 0,
        metadata: Mapping[str, Any] | None = None,
        continued: ContinueAsNew | None = None,
    ) -> list[Record]:
        """The records of ``start`` (``continued``: of ``continue_run``, whose
        ``run.started`` says the incarnation and what it carried)."""
        if continued is not None:  # the effect's budget and metadata are the incarnation's
            budget = continued.budget_remaining
            metadata = continued.metadata if metadata is None else metadata
        data = {
            "flowId": flow.id,
            "version": flow.version,
            "specHash": flow.spec_hash,
            "input": input,
            "budget": budget_to_wire(budget),
            "depth": depth,
        }
        semantics = decision.state.run.semantics
        if semantics != 1:  # absent means 1 (logs written before the field)
            data["semantics"] = semantics
        if metadata:  # absent when none was given (logs stay as they were)
            data["metadata"] = dict(metadata)
        if continued is not None:  # a later incarnation: what it took over
            data["incarnation"] = continued.incarnation
            data.update(carried_to_wire(continued))
        out = [self._make(RUN_STARTED, at, data)]
        out.extend(self._scheduled(decision, at))
        out.extend(self._effects(decision.effects, at, _wire_forms(decision.effects)))
        return out

    def applied(self, event: Event, decision: Decision) -> list[Record]:
        at = event.at_ms
        effects = decision.effects
        wire = _wire_forms((event, *effects))  # the decision's event and effects at once
        out = [self._make(EVENT_REPORTED, at, wire[0])]
        out.extend(self._scheduled(decision, at))
        out.extend(self._effects(effects, at, wire[1:]))
        return out

    def _scheduled(self, decision: Decision, at: int) -> list[Record]:
        state = decision.state
        return [
            self._make(SCHEDULED_CHANGED, at, scheduled_changed_data(sid, state.schedules[sid]))
            for sid in state.journal.scheduled
        ]

    def rejected(self, event: Event, reason: str) -> list[Record]:
        data = {"event": event_to_wire(event), "reason": reason}
        return [self._make(EVENT_REJECTED, event.at_ms, data)]

    def redispatched(self, key: str, recovery: int, worker: str | None, at: int) -> list[Record]:
        data: dict[str, Any] = {"idempotencyKey": key, "recovery": recovery}
        if worker is not None:
            data["worker"] = worker
        return [self._make(EFFECT_REDISPATCHED, at, data)]

    def _effects(
        self, effects: tuple[Effect, ...], at: int, wire: list[dict[str, Any]]
    ) -> list[Record]:
        out = [self._make(EFFECT_EMITTED, at, data) for data in wire]
        for effect in effects:
            if isinstance(effect, Settled):
                out.append(self._make(RUN_SETTLED, at, settled_record_data(effect)))
        return out


def _wire_forms(items: tuple[Event | Effect, ...]) -> list[dict[str, Any]]:
    """Each event or effect as ``event_to_wire`` / ``effect_to_wire`` gives it
    (the same JSON bytes, decoded), all of them in one pass through JSON."""
    forms: list[dict[str, Any]] = _json_decode(_json_encode(items))
    return forms


_json_encode = msgspec.json.Encoder().encode
_json_decode = msgspec.json.Decoder().decode


def carried_to_wire(continued: ContinueAsNew) -> dict[str, Any]:
    """The signals, scheduled calls and idle count a ``run.started`` of a later
    incarnation records (each omitted when empty), as the effect's wire spells them."""
    wire = effect_to_wire(continued)
    return {k: wire[k] for k in ("signals", "scheduled", "idleIncarnations") if k in wire}


def settled_record_data(effect: Settled) -> dict[str, Any]:
    """The data of the ``run.settled`` record that follows a ``settled`` effect."""
    wire = effect_to_wire(effect)
    return {k: wire[k] for k in ("status", "output", "error", "exhausted") if k in wire}
