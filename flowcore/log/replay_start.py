"""How replay judges a ``run.started`` record: the run it starts (``start`` with
what the record says), a later incarnation's start against the
continue-as-new effect that began it, and values no flowcore host records.
``replay`` describes replay.

This module must never do I/O.
"""

from __future__ import annotations

from typing import Any

import msgspec

from .._data import DataError, check_data, short
from .._errors import InputError, MetadataError
from ..decision.interp import SEMANTICS, Batch, start
from ..decision.wire import ContinueAsNew, effect_to_wire
from .record_types import why
from .records import (
    RawRecord,
    budget_from_wire,
    budget_to_wire,
    carried_to_wire,
    scheduled_changed_data,
)
from .replay_state import _MAX_COUNT, _diverged, _Reading, _without_nulls
from .report import ReplayError, _Started


class _Starting(_Reading):
    """The run a ``run.started`` record starts."""

    def incarnation_of(self, rec: RawRecord) -> int:
        """The incarnation a ``run.started`` record names (1 if it does not decode:
        ``on_started`` says what is wrong with it)."""
        try:
            n = self.codec.started(rec.data).incarnation
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            return 1
        return n if isinstance(n, int) else 1

    def begin(self, index: int, rec: RawRecord, started: _Started) -> None:
        flow = self.flow
        if started.flow_id != flow.id:
            raise ReplayError(
                f"the log is a run of flow {short(started.flow_id)}, not {flow.id!r}: "
                "replay it against its own flow (or a newer version of it)"
            )
        self.check_started(index, started)
        if isinstance(started.semantics, int) and started.semantics > SEMANTICS:
            raise ReplayError(
                f"the log was recorded by a newer flowcore (decision level"
                f" {short(started.semantics)}; this one decides up to {SEMANTICS}):"
                " replay it with that flowcore or a newer one"
            )
        self.version = started.version
        self.spec_hash = started.spec_hash
        self.forked_from = started.forked_from
        budget = budget_from_wire(started.budget)
        continued = None
        if started.incarnation != 1:
            continued = ContinueAsNew(
                input=started.input,
                incarnation=started.incarnation,
                idempotency_key="",
                signals=started.signals,
                scheduled=started.scheduled,
                idle_incarnations=started.idle_incarnations,
            )
        try:
            decision = start(
                flow,
                started.input,
                run_id=rec.run_id,
                now_ms=rec.at,
                budget=budget,
                depth=started.depth,
                semantics=started.semantics,
                metadata=started.metadata,
                continued=continued,
            )
        except MetadataError as exc:
            raise _diverged(
                index,
                {"metadata": started.metadata},
                {"rejected": str(exc)},
                "the flow does not accept the recorded metadata",
            ) from None
        except InputError as exc:
            raise _diverged(
                index,
                {"input": started.input},
                {"rejected": str(exc)},
                "the flow does not accept the recorded input",
            ) from None
        except ValueError as exc:  # a run id or clock start() refuses
            raise self.corrupt(f"is not a valid run.started: {why(exc)}", index, 0) from None
        self.batch = Batch(decision.state)
        self.queue = decision.effects
        self.qi = 0
        state = decision.state
        self.set_changes(
            [scheduled_changed_data(sid, state.schedules[sid]) for sid in state.journal.scheduled]
        )
        self.trajectory.started(decision.state.waiting.pending)

    def check_continued(
        self, index: int, rec: RawRecord, position: int, started: _Started, effect: ContinueAsNew
    ) -> None:
        """A later incarnation's ``run.started`` begins what the effect says."""
        if rec.run_id != self.run_id:  # (fold checked it already)
            raise self.corrupt("belongs to another run", index, position)
        wire = effect_to_wire(effect)
        expected: dict[str, Any] = {"input": wire.get("input"), "incarnation": effect.incarnation}
        expected.update(carried_to_wire(effect))
        expected["budget"] = _limits(budget_to_wire(effect.budget_remaining))
        recorded: dict[str, Any] = {
            "input": started.input,
            "incarnation": started.incarnation,
            "budget": _limits(started.budget),
        }
        recorded.update(
            carried_to_wire(
                ContinueAsNew(
                    incarnation=started.incarnation,
                    idempotency_key="",
                    signals=started.signals,
                    scheduled=started.scheduled,
                    idle_incarnations=started.idle_incarnations,
                )
            )
        )
        if _without_nulls(recorded) != _without_nulls(expected):
            raise _diverged(
                index,
                recorded,
                expected,
                "the next incarnation's run.started differs from the continue-as-new effect",
            )

    def check_started(self, index: int, started: _Started) -> None:
        """What no flowcore host can record: values outside flowcore data (corruption).

        An input the flow's ``input_schema`` refuses is another matter: a
        newer version may refuse what the recorded one accepted (§9), so
        ``start`` refusing it is a divergence at index 0.
        """
        problem = None
        if not -_MAX_COUNT - 1 <= started.version <= _MAX_COUNT:
            problem = f"version {short(started.version)} is not a 64-bit integer"
        elif not 0 <= started.depth <= _MAX_COUNT:
            problem = f"depth {short(started.depth)} is not an integer from 0 to 2**63-1"
        elif started.budget is not None and not all(
            v is None or 0 <= v <= _MAX_COUNT for v in started.budget.values()
        ):
            problem = f"budget {short(started.budget)} holds a limit outside 0 to 2**63-1"
        else:
            try:
                check_data(started.input, "$.input", "run.started")
                check_data(started.metadata, "$.metadata", "run.started")
            except DataError as exc:
                problem = why(exc)
        if problem is not None:
            raise self.corrupt(f"is not a valid run.started: {problem}", index, 0)


def _limits(budget: dict[str, Any] | None) -> dict[str, Any] | None:
    """A budget's limits, unset ones left out (None when none is set)."""
    if budget is None:
        return None
    return {k: v for k, v in budget.items() if v is not None} or None
