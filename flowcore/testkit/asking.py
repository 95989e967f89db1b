"""What a simulated handler asks of its run through its ``Call``: schedule a call,
cancel one, list them, signal a run, publish progress. ``simulator`` describes
the simulator.

Each request is done as a host's context does it (hosts/flowcore_handlers,
specs/local.md §4.1): at once, while the handler runs, at its ``now_ms``, in
the order the handler makes them, as an event reported to the run
(``scheduled-add-requested``, ``scheduled-cancel-requested``,
``signal-received``) whose decision is carried out before the handler
returns. The handler's own result is reported later (its latency), so what it
caused always comes first, as on a host, where the request's transaction
commits before the handler's result can be written. A request the run
refuses raises ``CallError`` and leaves nothing in the run (a host's
transaction rolls back); a cancel of a call that is not pending answers
False without an event, as a host writes nothing then.

This module must never do I/O, read a clock or draw a random number.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from .._data import DataError, check_data
from .._errors import FlowcoreError
from ..decision.waiting import ScheduledCall, scheduled_calls
from ..decision.wire import (
    Event,
    ScheduledAddRequested,
    ScheduledCancelRequested,
    SignalReceived,
    event_from_wire,
    event_to_wire,
)
from ..language.references import flow_references
from .history import ProgressItem, Turn
from .script import Call, CallError, SimulationError

if TYPE_CHECKING:
    from .simulation import _Simulation, _Slot

__all__ = ["MAX_PROGRESS_ITEM_BYTES", "Asking"]

MAX_PROGRESS_ITEM_BYTES = 64 * 1024
"""A progress item is JSON data of at most this many bytes, as on every host
(``flowcore_handlers.MAX_PROGRESS_ITEM_BYTES``)."""

# The fields of scheduled-add-requested a Call's schedule sets itself.
_OWN_FIELDS = frozenset(("tool", "input", "delay_ms", "at_ms", "request"))


class Asking:
    """The ``CallWorld`` of one simulation: carries out its handlers' requests."""

    def __init__(self, simulation: _Simulation) -> None:
        self.simulation = simulation
        self.progress: dict[str, list[ProgressItem]] = {}

    def schedule(
        self,
        call: Call,
        tool: str,
        input: Any,
        delay_ms: int,
        request: str,
        fields: Mapping[str, Any],
    ) -> str:
        slot = self._running(call, "schedule", "no call can be scheduled")
        extra = set(ScheduledAddRequested.__struct_fields__) - _OWN_FIELDS
        for name in fields:
            if name not in extra:
                known = ", ".join(sorted(extra)) or "none"
                raise CallError(f"schedule: no field {name!r} to give (the others are: {known})")
        value = _data(input, f"the input of the call {call.key} schedules")
        at = self.simulation.now
        try:
            event = event_from_wire(
                event_to_wire(
                    ScheduledAddRequested(
                        tool=tool,
                        input=value,
                        delay_ms=delay_ms,
                        at_ms=at,
                        request=request,
                        **fields,
                    )
                )
            )
        except (FlowcoreError, TypeError, ValueError) as exc:
            raise CallError(f"schedule: {exc}") from None
        turn = self._apply(slot, event, call, "schedule")
        assert turn.scheduled is not None
        return turn.scheduled.id

    def cancel_scheduled(self, call: Call, schedule_id: str) -> bool:
        slot = self.simulation.runs[call.run_id]
        if slot.state.settled is not None:
            return False  # a settled run has no pending call
        sid = (
            schedule_id
            if schedule_id.startswith(call.run_id + "/")
            else f"{call.run_id}/{schedule_id}"
        )
        found = scheduled_calls(slot.state, [sid])
        if not found or found[0].status != "pending":
            return False  # unknown, issued or finished: nothing to do, nothing recorded
        event = ScheduledCancelRequested(schedule_id=sid, at_ms=self.simulation.now)
        turn = self._apply(slot, event, call, "cancel_scheduled")
        assert turn.scheduled is not None
        return turn.scheduled.done

    def scheduled(self, call: Call) -> tuple[ScheduledCall, ...]:
        calls = scheduled_calls(self.simulation.runs[call.run_id].state)
        return tuple(sorted(calls, key=lambda c: (c.due_ms, c.created_ms, c.id)))

    def signal(self, call: Call, run_id: str, name: str, payload: Any) -> None:
        sim = self.simulation
        slot = sim.runs.get(run_id)
        if slot is None:
            raise CallError(
                f"signal: no run {run_id!r} in the simulation (its runs: {sorted(sim.runs)})"
            )
        if slot.state.settled is not None:
            status = slot.state.settled.status
            raise CallError(f"signal: run {run_id!r} has settled ({status}): it takes no signal")
        names = _declared_signals(sim, slot)
        if name not in names:
            listed = ", ".join(repr(n) for n in sorted(names))
            raise CallError(
                f"signal: run {run_id!r} never waits for signal {name!r}: "
                + (f"its flow and subflows declare {listed}" if names else "it declares no signals")
            )
        value = _data(payload, f"the payload of signal {name!r}")
        event = SignalReceived(signal=name, payload=value, at_ms=sim.now)
        self._apply(slot, event, call, "signal")

    def publish(self, call: Call, data: Any) -> None:
        try:
            check_data(data, "$", "progress item")
            encoded = msgspec.json.encode(data)
        except (DataError, TypeError, ValueError) as exc:
            raise CallError(f"progress item cannot be stored: {exc}") from None
        if len(encoded) > MAX_PROGRESS_ITEM_BYTES:
            raise CallError(
                f"progress item is {len(encoded):,} bytes as JSON; "
                f"at most {MAX_PROGRESS_ITEM_BYTES:,} are kept"
            )
        items = self.progress.setdefault(call.run_id, [])
        step = call.place.step if call.place is not None else None
        item = ProgressItem(len(items), call.key, step, call.now_ms, msgspec.json.decode(encoded))
        items.append(item)

    # --- carrying a request out ----------------------------------------------------------

    def _running(self, call: Call, what: str, why: str) -> _Slot:
        slot = self.simulation.runs[call.run_id]
        settled = slot.state.settled
        if settled is not None:
            raise CallError(f"{what}: run {call.run_id!r} has settled ({settled.status}): {why}")
        return slot

    def _apply(self, slot: _Slot, event: Event, call: Call, what: str) -> Turn:
        """Report ``event`` to ``slot``'s run now and carry its decision out."""
        try:
            turn = self.simulation.deliver(slot, event, asked=True)
        except (AssertionError, SimulationError, CallError):
            raise
        except Exception as exc:
            # Not the handler's to catch as its own failure: the simulation broke.
            raise SimulationError(
                f"{what} asked by {call.key} broke the simulation: {type(exc).__name__}: {exc}"
            ) from exc
        if turn.rejected is not None:
            raise CallError(f"{what}: run {slot.run_id!r} refuses it: {turn.rejected}")
        return turn


def _data(value: Any, what: str) -> Any:
    """A fresh copy of ``value`` as a JSON host would pass it, or ``CallError``."""
    try:
        check_data(value, "$", what)
        return msgspec.json.decode(msgspec.json.encode(value))
    except (DataError, TypeError, ValueError) as exc:
        raise CallError(f"{what} is not flowcore data: {exc}") from None


def _declared_signals(simulation: _Simulation, slot: _Slot) -> set[str]:
    """The signal names the run's flow, and every subflow it can start that the
    simulation's registry holds, wait for (what a host checks)."""
    registry = simulation.sim.subflows
    found = {slot.flow.id: slot.flow}
    todo = [slot.flow]
    names: set[str] = set()
    while todo:
        refs = flow_references(todo.pop())
        names.update(refs.signals)
        for flow_id in refs.subflows:
            child = registry.get(flow_id)
            if child is not None and flow_id not in found:
                found[flow_id] = child
                todo.append(child)
    return names
