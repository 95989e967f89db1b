"""Carrying a flowcore run into a new Temporal run of the same workflow id: a long
history carried over by the workflow itself, and ``continue-as-new``.

This module runs inside Temporal's workflow sandbox: it must never do I/O,
read the system clock or draw a random number.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import TYPE_CHECKING, Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    import msgspec

import flowcore
from flowcore import Recorder, SignalReceived

from ._types import RunArgs, pack_state, unpack_state
from ._workflow_base import _CARRIED_LOG_BYTES, _LARGEST_CARRY_BYTES, _SWITCH_PATCH, _signal_keys
from ._workflow_effects import WorkflowEffects


class WorkflowCarrying(WorkflowEffects):
    """A run carried over to the next Temporal run (see ``FlowcoreWorkflow``)."""

    if TYPE_CHECKING:

        def _cancel_requested(self, exc: asyncio.CancelledError) -> None: ...  # _workflow

        def _refuse_signal(self, name: str, reason: str, now: int) -> None: ...  # handlers

    # --- carrying a long run into a new Temporal run ------------------------------------

    def _check_switch(self) -> None:
        """Begin to carry the run over when its history is long: Temporal
        suggests it, or it reached ``continue_after_events``. From then on new
        work is held (its effects stay pending in the state) while the work
        out finishes; timers go on."""
        if self._draining or not self._may_switch or self._state is None:
            return
        if self._settled is not None or self._continued is not None:
            return
        info = workflow.info()
        limit = self._args.continue_after_events
        if not info.is_continue_as_new_suggested() and (
            limit is None or info.get_current_history_length() < limit
        ):
            return
        if not workflow.patched(_SWITCH_PATCH):
            # A history recorded before runs carried themselves over replays as
            # it was recorded: such a run never switches.
            self._may_switch = False
            return
        self._draining = True

    def _drained(self) -> bool:
        """Carrying the run over, with no work, child or signal-run left out."""
        return self._draining and all(kind == "timer" for kind, _ in self._tasks.values())

    async def _switch(self) -> None:
        """Continue as new with the run's state: the same run, the same
        incarnation, its log going on at the next index. Updates that come now
        are refused as ``run-switching`` (``TemporalHost`` sends them again,
        to the new Temporal run); signals are applied, and go over in the
        state. Returns only when the state is too large to carry: the run then
        goes on here, and the held work starts."""
        self._switching = True
        try:
            await workflow.wait_condition(workflow.all_handlers_finished)
        except asyncio.CancelledError as exc:
            self._cancel_requested(exc)
        self._switching = False
        if self._settled is not None or self._continued is not None or self._crash is not None:
            return  # the run ended (or broke) meanwhile: nothing to carry
        assert self._state is not None
        snapshot = pack_state(self._state)
        fork = self._args.fork
        args = self._next_args(
            input=None,  # (the state holds all the run needs)
            snapshot=snapshot,
            continued=None,
            log_index=self._recorder.index,
            signals=[],
            previous=[],
            fork=None if fork is None else {**fork, "records": []},
        )
        size = len(msgspec.json.encode(dataclasses.asdict(args)))
        if size > _LARGEST_CARRY_BYTES:
            workflow.logger.warning(
                "flowcore run %s cannot continue as new: its state and arguments take"
                " %d bytes, over %d; it goes on in this Temporal run",
                self._run_id,
                size,
                _LARGEST_CARRY_BYTES,
            )
            self._draining = False
            self._may_switch = False
            self._start_open()
            return
        for _, task in self._tasks.values():  # timers: the next run arms them again
            task.cancel()
        self._tasks.clear()
        workflow.continue_as_new(args)

    def _go_on(self, flow: flowcore.Flow, snapshot: str, log_index: int) -> None:
        """Take over a run carried over from the Temporal run before: its state
        (pinned to ``flow``), its log's next index, what it waits for."""
        state = unpack_state(snapshot, flow)
        self._semantics = state.run.semantics
        self._recorder = Recorder(self._run_id, log_index)
        self._state = state
        # Temporal carries the search attributes over with the run.
        self._indexed = state.metadata
        self._signal_keys = _signal_keys(state)
        self._start_open()

    def _start_open(self) -> None:
        """Start everything the state waits for that is not out yet: work,
        children and signal-runs held while draining, and every timer, at its
        due time (questions and signal waits need nothing)."""
        assert self._state is not None
        for key, entry in sorted(self._state.waiting.pending.items()):
            if key not in self._tasks:
                self._start_effect(entry.sent)

    def _next_args(self, **changes: Any) -> RunArgs:
        """The argument of the next Temporal run of this run."""
        args = self._args
        origin, started = args.clock_origin_ms, args.clock_started_ms
        if origin is not None:  # a scaled clock goes on from where it is
            origin, started = self._now(), workflow.time_ns() // 1_000_000
        return dataclasses.replace(
            args,
            run_id=self._run_id,
            schedule=None,
            clock_origin_ms=origin,
            clock_started_ms=started,
            execution=args.execution + 1,
            progress_next=self._progress_next,  # its progress indexes go on counting
            **changes,
        )

    def _continue_as_new(self, effect: flowcore.ContinueAsNew) -> None:
        """Carry the run into a new Temporal run: the effect (without its report,
        which only this incarnation needs), the log's next index, late signals."""
        for _, task in self._tasks.values():
            task.cancel()
        self._tasks.clear()
        wire = flowcore.effect_to_wire(effect)
        wire.pop("report", None)
        # This incarnation's records go along (from its run.started), unless
        # they would make the argument too large for Temporal: the log then
        # begins at the new incarnation.
        first = max((i for i, r in enumerate(self._records) if r.type == "run.started"), default=0)
        previous: list[dict[str, Any]] = msgspec.to_builtins(self._records[first:])
        if len(msgspec.json.encode(previous)) > _CARRIED_LOG_BYTES:
            previous = []
        workflow.continue_as_new(
            self._next_args(
                input=effect.input,
                snapshot=None,
                continued=wire,
                log_index=self._recorder.index,
                signals=list(self._late),
                previous=previous,
            )
        )

    def _carry_signal(self, event: SignalReceived) -> None:
        """A signal after the incarnation ended: kept for the next one (up to the
        flow's buffer limit, as the interpreter would; beyond, refused)."""
        assert self._state is not None
        limit = self._state.flow.limits.max_buffered_signals
        if len(self._late) >= limit:
            self._refuse_signal(
                event.signal,
                f"{len(self._late)} signals already carried (limit {limit})",
                event.at_ms,
            )
            return
        carried: dict[str, Any] = {"signal": event.signal, "payload": event.payload}
        if event.key is not None:
            carried["key"] = event.key
        self._late.append(carried)
