"""The trajectory of a replayed run: one entry per effect, signal, cancel and rejected event.

Replay (``replay``) applies each recorded event with ``advance`` and tells
this observer what happened: an effect the log records (``effect``), an
event applied (``applied``; for a signal, the wait it went to, which the
batch tells after applying it), a rejected event, a record skipped, work re-dispatched after a
recovery (a note on its entry). The observer keeps one ``TrajectoryEntry`` per
effect key, updated as its answer comes (a late answer noted as such), and
closes the entries nothing answered when the replay ends.

This module must never do I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeAlias, assert_never

import immutables

from ..decision.outcome import NO_USAGE, add_usage
from ..decision.state import Pending, State
from ..decision.wire import (
    AskHuman,
    AwaitSignal,
    CallTool,
    CancelRequested,
    ContinueAsNew,
    Effect,
    EffectFailed,
    EffectOutcomeUnknown,
    EffectSucceeded,
    Event,
    HumanAnswered,
    KeyEvent,
    RunAgent,
    RunSubflow,
    RunTeam,
    ScheduledAddRequested,
    ScheduledCancelRequested,
    ScheduledReplayRequested,
    ScheduledRunNowRequested,
    Settled,
    SignalReceived,
    SignalRun,
    Sleep,
    SubflowSettled,
    TimerFired,
    UpdateRequested,
    Usage,
)
from .report import TrajectoryEntry

if TYPE_CHECKING:
    from ..decision.interp import Batch

__all__ = ["Trajectory"]

_WORK = frozenset({"call-tool", "run-agent", "run-team", "run-subflow", "signal-run"})
_NONE: immutables.Map[str, Pending] = immutables.Map()
_Answer: TypeAlias = (
    EffectSucceeded
    | EffectFailed
    | EffectOutcomeUnknown
    | HumanAnswered
    | TimerFired
    | SubflowSettled
)
_Request: TypeAlias = (
    SignalReceived
    | CancelRequested
    | ScheduledCancelRequested
    | ScheduledRunNowRequested
    | ScheduledAddRequested
    | ScheduledReplayRequested
    | UpdateRequested
)


class Trajectory:
    """The trajectory being collected; ``rows`` in the order of the log."""

    def __init__(self) -> None:
        self.rows: list[TrajectoryEntry] = []
        self.where: dict[str, int] = {}  # key -> position in rows
        self.total = NO_USAGE
        self.delegated = NO_USAGE  # what child runs (run-subflow) used
        self.by_member: dict[str, Usage] = {}
        self.pending: immutables.Map[str, Pending] = _NONE  # what the run waits for now
        self.updates: dict[str, int] = {}  # update id -> position in rows

    def started(self, pending: immutables.Map[str, Pending]) -> None:
        self.pending = pending

    def rejected(self, index: int, event: Event, shown: Any, reason: str) -> None:
        """An event the log records as rejected, and that is rejected again."""
        self.rows.append(
            TrajectoryEntry(
                index=index,
                kind="event-rejected",
                key=event.idempotency_key if isinstance(event, KeyEvent) else "",
                target=_tag(event),
                input=shown,
                status="rejected",
                at=event.at_ms,
                note=reason,
            )
        )

    def skipped(self, index: int, record_type: str, at: int) -> None:
        """A record of a type this reader does not know, skipped."""
        self.rows.append(
            TrajectoryEntry(
                index=index,
                kind="unknown-record",
                target=record_type if len(record_type) <= 60 else record_type[:60] + "…",
                status="skipped",
                at=at,
                note="a record type this reader does not know (allow_unknown_types)",
            )
        )

    def redispatched(self, key: str, recovery: int) -> None:
        """Pending work the host ran again under its key after recovering it: a note, no more."""
        pos = self.where.get(key)
        if pos is not None:
            row = self.rows[pos]
            row.note = _join(row.note, f"re-dispatched after recovery ({recovery})")

    def usage(self) -> tuple[Usage, dict[str, Usage], Usage]:
        """Usage reported in all, by team member, and by child runs (delegated)."""
        return self.total, dict(self.by_member), self.delegated

    def effect(self, index: int, at: int, effect: Effect) -> None:
        """An effect the log records (and the interpreter derived)."""
        rows = self.rows
        if type(effect) is CallTool:  # the commonest: a first issue, or a re-issue
            pos = self.where.setdefault(effect.idempotency_key, len(rows))
            if pos == len(rows):
                rows.append(_tool_entry(index, effect, at))
            else:
                _reissued(rows[pos])
            return
        if isinstance(effect, Settled):
            return
        key = effect.idempotency_key
        found = self.where.get(key)
        if found is not None:
            _reissued(rows[found])
            return
        entry: TrajectoryEntry
        match effect:
            case CallTool():
                entry = _tool_entry(index, effect, at)
            case RunAgent():
                entry = TrajectoryEntry(
                    index=index,
                    kind="run-agent",
                    key=key,
                    target=effect.agent_id,
                    member=effect.member,
                    input=effect.prompt,
                    at=at,
                )
            case RunTeam():
                entry = TrajectoryEntry(
                    index=index,
                    kind="run-team",
                    key=key,
                    target=effect.team_id,
                    input=effect.prompt,
                    at=at,
                )
            case AskHuman():
                entry = TrajectoryEntry(
                    index=index,
                    kind="ask-human",
                    key=key,
                    target="human",
                    input=effect.question,
                    at=at,
                    note="" if effect.options is None else "options: " + ", ".join(effect.options),
                )
            case Sleep():
                pending = self.pending.get(key)
                entry = TrajectoryEntry(
                    index=index,
                    kind="sleep",
                    key=key,
                    target=pending.kind if pending is not None else "timer",
                    input=effect.until_ms,
                    at=at,
                )
            case AwaitSignal():
                entry = TrajectoryEntry(
                    index=index, kind="await-signal", key=key, target=effect.signal, at=at
                )
            case RunSubflow():
                entry = TrajectoryEntry(
                    index=index,
                    kind="run-subflow",
                    key=key,
                    target=effect.flow_id,
                    input=effect.input,
                    at=at,
                    note=f"depth {effect.depth}",
                )
            case SignalRun():
                entry = TrajectoryEntry(
                    index=index,
                    kind="signal-run",
                    key=key,
                    target=effect.run_id,
                    input=effect.payload,
                    at=at,
                    note=f"signal {effect.signal}"
                    + ("" if effect.key is None else f" key {effect.key}"),
                )
            case ContinueAsNew():
                carried = len(effect.signals), len(effect.scheduled)
                entry = TrajectoryEntry(
                    index=index,
                    kind="continue-as-new",
                    key=key,
                    target=f"incarnation {effect.incarnation}",
                    input=effect.input,
                    status="continued",
                    at=at,
                    note=f"carried {carried[0]} signal(s), {carried[1]} scheduled call(s)",
                )
            case _:
                assert_never(effect)
        self.where[key] = len(self.rows)
        self.rows.append(entry)

    def applied(
        self,
        index: int,
        event: Event,
        effects: Sequence[Effect],
        batch: Batch,
        receiver: str | None = None,
    ) -> None:
        """``event`` was applied, giving ``effects``: its row shows how the effect ended.

        ``receiver``: for a signal, the wait it went to (asked with ``receiver``
        before the signal was applied).
        """
        self.pending = batch.pending
        at = event.at_ms
        if type(event) is EffectSucceeded:  # the commonest: an exact check is the cheapest
            key = event.idempotency_key
        else:
            key = event.idempotency_key if isinstance(event, KeyEvent) else ""
        late = batch.was_late(key) if key else False
        if type(event) is EffectSucceeded and not late and event.usage is None:
            pos = self.where.get(key)  # the commonest: work answered
            if pos is not None:
                answered = self.rows[pos]
                answered.status = "succeeded"
                answered.output = event.output
                answered.ended_at = at
            if batch.t.replies:
                self.replied(batch, at)
            return
        match event:
            case (
                EffectSucceeded()
                | EffectFailed()
                | EffectOutcomeUnknown()
                | HumanAnswered()
                | TimerFired()
                | SubflowSettled()
            ):
                self.answered(event, effects, late, at)
            case _:
                self.requested(index, event, batch, receiver, at)
        if batch.t.replies:
            self.replied(batch, at)

    def replied(self, batch: Batch, at: int) -> None:
        """The rows of the updates the last event ended show how they ended."""
        for reply in batch.t.replies:
            pos = self.updates.get(reply.update_id)
            if pos is not None:
                row = self.rows[pos]
                row.status = reply.status
                row.output = reply.output
                row.error = reply.error
                row.ended_at = at

    def answered(self, event: _Answer, effects: Sequence[Effect], late: bool, at: int) -> None:
        """The row of the work, question or timer ``event`` answers, ended as it says."""
        match event:
            case EffectSucceeded():
                row = self.row(event.idempotency_key, late)
                if row is not None:
                    row.status = "succeeded"
                    row.output = event.output
                    row.ended_at = at
                    if event.usage is not None:
                        row.usage = event.usage
                        self.count_usage(row, event.usage)
            case EffectFailed():
                row = self.row(event.idempotency_key, late)
                if row is not None:
                    row.status = "failed"
                    row.error = event.error
                    row.ended_at = at
                    if event.usage is not None:  # spent before it failed: charged too
                        row.usage = event.usage
                        self.count_usage(row, event.usage)
            case EffectOutcomeUnknown():
                row = self.row(event.idempotency_key, late)
                if row is not None and not late:
                    key = row.key
                    if not any(
                        not isinstance(e, Settled) and e.idempotency_key == key for e in effects
                    ):
                        row.status = "uncertain"  # not re-issued under the same key
                        row.ended_at = at
            case HumanAnswered():
                row = self.row(event.idempotency_key, late)
                if row is not None:
                    row.status = "answered"
                    row.output = event.answer
                    row.ended_at = at
            case TimerFired():
                row = self.row(event.idempotency_key, late)
                if row is not None:
                    row.status = "fired"
                    row.ended_at = at
            case SubflowSettled():
                row = self.row(event.idempotency_key, late)
                if row is not None:
                    row.status = "succeeded" if event.status == "completed" else "failed"
                    row.output = event.output
                    row.ended_at = at
                    row.note = _join(row.note, f"child {event.status}")
                    if event.usage is not None:
                        row.usage = event.usage
                        self.count_usage(row, event.usage)
            case _:
                assert_never(event)

    def requested(
        self, index: int, event: _Request, batch: Batch, receiver: str | None, at: int
    ) -> None:
        """The row of a signal, a cancel or a request about scheduled calls (and of
        the wait a signal went to)."""
        match event:
            case SignalReceived():
                if receiver is not None:
                    row = self.row(receiver, False)
                    if row is not None:
                        row.status = "received"
                        row.output = event.payload
                        row.ended_at = at
                self.rows.append(
                    TrajectoryEntry(
                        index=index,
                        kind="signal-received",
                        key=receiver or "",
                        target=event.signal,
                        output=event.payload,
                        status="delivered" if receiver is not None else "buffered",
                        at=at,
                    )
                )
            case CancelRequested():
                self.rows.append(
                    TrajectoryEntry(
                        index=index,
                        kind="cancel-requested",
                        input=event.reason,
                        status="requested",
                        at=at,
                    )
                )
            case ScheduledCancelRequested() | ScheduledRunNowRequested():
                answer = batch.answer
                done = answer is not None and answer.done
                if isinstance(event, ScheduledCancelRequested):
                    status = "cancelled" if done else "not-pending"
                else:
                    status = "issued" if done else "not-pending"
                self.rows.append(
                    TrajectoryEntry(
                        index=index,
                        kind=event.__struct_config__.tag,  # type: ignore[arg-type]
                        key=event.schedule_id,
                        status=status,
                        at=at,
                    )
                )
            case ScheduledAddRequested():
                answer = batch.answer
                self.rows.append(
                    TrajectoryEntry(
                        index=index,
                        kind="scheduled-add-requested",
                        key="" if answer is None else answer.id,
                        target=event.tool,
                        input=event.input,
                        status="scheduled",
                        at=at,
                        note=f"delay {event.delay_ms} ms",
                    )
                )
            case ScheduledReplayRequested():
                self.rows.append(
                    TrajectoryEntry(
                        index=index,
                        kind="scheduled-replay-requested",
                        key=event.schedule_id,
                        status="replayed",
                        at=at,
                    )
                )
            case UpdateRequested():
                self.updates[event.update_id] = len(self.rows)
                self.rows.append(
                    TrajectoryEntry(
                        index=index,
                        kind="update-requested",
                        key=event.update_id,
                        target=event.name,
                        input=event.input,
                        status="running",
                        at=at,
                    )
                )
            case _:
                assert_never(event)

    def row(self, key: str, late: bool) -> TrajectoryEntry | None:
        pos = self.where.get(key)
        if pos is None:
            return None
        row = self.rows[pos]
        if late:
            row.note = _join(row.note, "late: after the step had moved on")
        return row

    def count_usage(self, row: TrajectoryEntry, usage: Usage) -> None:
        self.total = add_usage(self.total, usage)
        if row.member is not None:
            self.by_member[row.member] = add_usage(self.by_member.get(row.member, NO_USAGE), usage)
        if row.kind == "run-subflow":
            self.delegated = add_usage(self.delegated, usage)

    def close(self, state: State) -> None:
        """Entries nothing answered: still pending, or dropped along the way."""
        final: dict[str, str] | None = None
        pending = state.waiting.pending
        for row in self.rows:
            if row.status != "pending" or row.key in pending:
                continue
            if row.kind == "sleep":
                row.status = "cancelled"  # a timeout or backoff no longer needed
            elif row.kind in _WORK and state.settled is not None:
                if final is None:
                    final = {e.idempotency_key: e.status for e in state.settled.report}
                row.status = final.get(row.key, "abandoned")
            else:
                row.status = "abandoned"


def _reissued(row: TrajectoryEntry) -> None:
    """The same key issued again, after an unknown outcome."""
    row.status = "pending"
    row.issues += 1


def _tool_entry(index: int, effect: CallTool, at: int) -> TrajectoryEntry:
    return TrajectoryEntry(
        index=index,
        kind="call-tool",
        key=effect.idempotency_key,
        target=effect.tool,
        input=effect.input,
        at=at,
    )


def _tag(event: Event) -> str:
    tag = event.__struct_config__.tag
    assert isinstance(tag, str)
    return tag


def _join(note: str, more: str) -> str:
    return f"{note}; {more}" if note else more
