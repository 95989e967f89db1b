"""Replay: re-derive a run's effects from its log and compare them with the recorded ones.

Theory of operation
-------------------

A log (``_log``) records what the interpreter decided (``effect.emitted``)
and what the host reported (``event.reported``). Because ``start`` and
``advance`` are pure, feeding the recorded events back in must re-derive the
recorded effects exactly, in the same order. ``replay`` does that in one pass:

* ``run.started`` calls ``start`` with the recorded input, run id, clock,
  budget and depth (or a snapshot stands in for everything up to the tail);
* ``event.reported`` calls ``advance``; the effects it returns are queued.
  The commonest event, pending work answered with success, is folded into
  one scratch copy of the state instead (``_interp.Fold``): the same
  transition and effects, without freezing a new ``State`` per event; the
  state is frozen when something else needs it and at the end;
* each ``effect.emitted`` must equal the next queued effect. The recorded
  bytes are compared with the encoding of the re-derived effect first (one
  ``memcmp`` when the log was written by flowcore); only when the bytes differ
  is the record decoded into an ``Effect`` and compared as a value, so a log
  written by another host with other key order or explicit nulls still
  matches;
* every other record (``event.*``, ``run.settled``, the end of the log) first
  requires the queue to be empty: the log must record every effect;
* ``event.rejected`` must still be rejected; ``run.settled`` must agree with
  the ``settled`` effect.

The first disagreement is a ``ReplayDivergence`` (index, expected = what the
log records, actual = what the interpreter derives now), raised or returned in
the report. Structural problems (index gaps, another run's records, undecodable
data, a log that does not begin with ``run.started``) are ``LogCorrupt``: they
are never skipped. A log cut short by a torn last record, or by ``until``, may
end in the middle of a decision: effects derived past the cut are returned as
``unrecorded`` instead of diverging.

While it folds, replay collects the run's trajectory: one entry per effect
(with the event that answered it), signal, cancel request and rejected event.

Decided by benchmark (per record, 2k-step log, either byte format): comparing
encoded bytes costs 0.4 us, decoding into an ``Effect`` and comparing values
0.6 us, comparing wire dicts (decode + ``effect_to_wire``) 1.9 us; decoding an
event straight into its Struct costs 0.3 us, a dict through
``event_from_wire`` 12 us. Records are read in chunks (``_log.RawReader``)
with ``data`` left undecoded until needed.

This module must never do I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import chain
from typing import Any, assert_never

import msgspec

from ._errors import EventRejected, InputError, ReplayDivergence
from ._interp import Fold, advance, start
from ._log import (
    EFFECT_EMITTED,
    EVENT_REJECTED,
    EVENT_REPORTED,
    RUN_SETTLED,
    RUN_STARTED,
    LogCorrupt,
    LogFormat,
    LogRead,
    RawReader,
    RawRecord,
    Record,
    TornTail,
    settled_record_data,
)
from ._report import ReplayError, ReplayReport, TrajectoryEntry, _Rejected, _Started
from ._spec import Budget, Flow
from ._state import State, decode_state
from ._wire import (
    AskHuman,
    AwaitSignal,
    CallTool,
    CancelRequested,
    Effect,
    EffectFailed,
    EffectOutcomeUnknown,
    EffectSucceeded,
    Event,
    HumanAnswered,
    RunAgent,
    RunSubflow,
    RunTeam,
    Settled,
    SignalReceived,
    Sleep,
    SubflowSettled,
    TimerFired,
    Usage,
    effect_to_wire,
    event_to_wire,
)

__all__ = ["ReplayError", "ReplayReport", "TrajectoryEntry", "replay"]


class _Codec:
    """Decoders and the encoder for one byte format of record data."""

    def __init__(self, format: LogFormat) -> None:
        mod: Any = msgspec.json if format == "json" else msgspec.msgpack
        self.encode = mod.Encoder().encode
        self.event = mod.Decoder(Event).decode
        self.effect = mod.Decoder(Effect).decode
        self.started = mod.Decoder(_Started).decode
        self.rejected = mod.Decoder(_Rejected).decode
        self.any = mod.Decoder().decode


_CODECS = {"json": _Codec("json"), "msgpack": _Codec("msgpack")}
_json_encode = msgspec.json.Encoder().encode
_NO_USAGE = Usage()
_WORK = frozenset({"call-tool", "run-agent", "run-team", "run-subflow"})
_NO_LIMIT = float("inf")


class _Stop(Exception):
    """Internal: the first divergence was found."""

    def __init__(self, divergence: ReplayDivergence) -> None:
        self.divergence = divergence


def replay(
    records: bytes | bytearray | memoryview | LogRead | Iterable[Record],
    flow: Flow,
    *,
    snapshot: bytes | None = None,
    until: int | None = None,
    raise_on_divergence: bool = True,
    format: LogFormat | None = None,
) -> ReplayReport:
    """Replay a run's log against ``flow``; see the module docstring.

    ``records`` is the log's bytes (NDJSON or framed MessagePack, detected
    unless ``format`` says), a ``LogRead`` or the records themselves.
    ``snapshot`` is ``encode_state`` bytes: ``records`` is then the tail that
    follows it. ``until`` stops after the record with that index.

    Raises ``ReplayDivergence`` on the first divergence (unless
    ``raise_on_divergence`` is false: the report's ``divergence`` then holds
    it), ``LogCorrupt`` for a log that cannot be read or is inconsistent,
    ``ReplayError`` for a log that does not belong to ``flow``.
    """
    reader: RawReader | None = None
    if isinstance(records, (bytes, bytearray, memoryview)):
        reader = RawReader(bytes(records), format)
        fmt = reader.format
        raw: Iterator[RawRecord] = chain.from_iterable(reader.chunks())
        torn = None
        offset = reader.offset
    else:
        fmt = "json"
        torn = None
        if isinstance(records, LogRead):
            torn = records.torn
            records = records.records
        raw = (
            RawRecord(r.type, r.index, r.run_id, r.at, msgspec.Raw(_json_encode(r.data)))
            for r in records
        )
        offset = _no_offset
    r = _Replayer(flow, _CODECS[fmt], snapshot, until, offset)
    r.torn = torn
    report = r.run(raw, reader)
    if report.divergence is not None and raise_on_divergence:
        raise report.divergence
    return report


def _no_offset(position: int) -> int | None:
    return None


class _Replayer:
    """One replay: the fold over the records and the trajectory it collects."""

    def __init__(
        self,
        flow: Flow,
        codec: _Codec,
        snapshot: bytes | None,
        until: int | None,
        offset: Callable[[int], int | None],
    ) -> None:
        self.offset = offset
        self.flow = flow
        self.codec = codec
        self.until = until
        self.torn: TornTail | None = None
        self.state: State | None = None
        self.run_id: str | None = None
        self.version = flow.version
        self.spec_hash = flow.spec_hash
        if snapshot is not None:
            self.state = decode_state(snapshot, flow)
            self.run_id = self.state.run_id
        self.queue: Sequence[Effect] = ()
        self.fold_in_place: Fold | None = None  # set while events fold in place
        self.qi = 0
        self.first_index = -1
        self.last_index = -1
        self.n_records = 0
        self.n_events = 0
        self.n_rejected = 0
        self.n_effects = 0
        self.cut = False
        self.rows: list[TrajectoryEntry] = []
        self.where: dict[str, int] = {}  # key -> position in rows
        self.usage_steps = 0
        self.usage_cost = 0
        self.by_member: dict[str, list[int]] = {}

    # --- the fold ------------------------------------------------------------------

    def run(self, source: Iterator[RawRecord], reader: RawReader | None) -> ReplayReport:
        divergence: ReplayDivergence | None = None
        try:
            self.fold(source, reader)
        except _Stop as stop:
            divergence = stop.divergence
        return self.report(divergence)

    def corrupt(self, what: str, index: int, position: int) -> LogCorrupt:
        """A ``LogCorrupt`` for the record at ``position`` (``what`` follows "record N")."""
        offset = self.offset(position)
        return LogCorrupt(f"record {index}{_at_byte(offset)} {what}", offset, index=index)

    def fold(self, source: Iterator[RawRecord], reader: RawReader | None) -> None:
        codec = self.codec
        encode = codec.encode
        until = self.until
        run_id = self.run_id
        expected_index = -1
        first = next(source, None)
        if reader is not None:
            self.torn = reader.torn  # known already if the log held no complete record
        if first is not None:
            source = chain((first,), source)
            expected_index = self.first_index = first.index
            if until is not None and until < first.index:
                raise ReplayError(f"until {until} is before the log's first index {first.index}")
            if self.state is None:
                if first.type != RUN_STARTED:
                    raise self.corrupt(
                        f"is {first.type}: a log begins with run.started", first.index, 0
                    )
                if first.index != 0:
                    raise self.corrupt("is run.started: a run's indices begin at 0", first.index, 0)
                run_id = self.run_id = first.run_id
            elif first.type == EFFECT_EMITTED:
                raise ReplayError(
                    "the tail after a snapshot must begin with an event record, "
                    f"not effect.emitted (index {first.index})"
                )
        limit = until if until is not None else _NO_LIMIT
        rows = self.rows
        where = self.where
        decode_event = codec.event
        position = -1
        # The hot loop keeps its counters and the effect queue in locals; the
        # finally clause writes them back (the cold paths sync them first).
        queue = self.queue
        qi = self.qi
        effects = events = 0
        try:
            for rec in source:
                position += 1
                index = rec.index
                if index != expected_index:
                    raise self.corrupt(
                        f"is out of order: index {expected_index} was due", index, position
                    )
                if rec.run_id != run_id:
                    raise self.corrupt(
                        f"belongs to run {rec.run_id!r}, not {run_id!r}: "
                        "a log holds exactly one run",
                        index,
                        position,
                    )
                if index > limit:
                    self.cut = True
                    break
                expected_index = index + 1
                kind = rec.type
                if kind == EFFECT_EMITTED:
                    if qi >= len(queue):
                        raise _Stop(
                            ReplayDivergence(
                                index,
                                self.recorded(rec),
                                None,
                                "the log records an effect the interpreter does not emit",
                            )
                        )
                    effect = queue[qi]
                    qi += 1
                    if bytes(rec.data) != encode(effect) and not self.same_effect(rec, effect):
                        raise _Stop(
                            ReplayDivergence(
                                index,
                                self.recorded(rec),
                                effect_to_wire(effect),
                                "the recorded effect differs from the re-derived one",
                            )
                        )
                    effects += 1
                    if type(effect) is CallTool and where.setdefault(
                        effect.idempotency_key, len(rows)
                    ) == len(rows):
                        # The common case, inline: a first issue of a tool call
                        # (setdefault has just recorded where its entry goes).
                        rows.append(_tool_entry(index, effect, rec.at))
                    else:
                        self.queue = queue
                        self.qi = qi
                        self.sync()
                        self.on_effect(index, rec.at, effect)
                    continue
                self.queue = queue
                self.qi = qi
                if kind != EVENT_REPORTED:
                    self.sync()
                if kind == EVENT_REPORTED:
                    if qi < len(queue):
                        self.need_empty_queue(index)
                    try:
                        event: Event = decode_event(rec.data)
                    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                        raise self.corrupt(
                            f"is not a valid event: {exc}", index, position
                        ) from None
                    state = self.state
                    assert state is not None
                    if type(event) is EffectSucceeded:
                        # The common case, inline: work answered while still
                        # pending, folded in place (see _interp.Fold).
                        fold = self.fold_in_place
                        if fold is None:
                            fold = self.fold_in_place = Fold(state)
                        derived = fold.answered(event)
                        if derived is not None:
                            events += 1
                            queue = derived
                            qi = 0
                            pos = where.get(event.idempotency_key)
                            if pos is not None:
                                row = rows[pos]
                                row.status = "succeeded"
                                row.output = event.output
                                row.ended_at = event.at_ms
                            continue
                    self.sync()
                    self.apply(index, event)
                elif kind == EVENT_REJECTED:
                    self.need_empty_queue(index)
                    try:
                        rejected = codec.rejected(rec.data)
                    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                        raise self.corrupt(
                            f"is not a rejected event: {exc}", index, position
                        ) from None
                    self.check_rejected(index, rejected)
                elif kind == RUN_SETTLED:
                    self.need_empty_queue(index)
                    self.check_settled(index, rec)
                elif kind == RUN_STARTED:
                    if position > 0 or self.state is not None:
                        raise self.corrupt("is a second run.started", index, position)
                    try:
                        started = codec.started(rec.data)
                    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                        raise self.corrupt(f"is not a valid run.started: {exc}", index, 0) from None
                    self.begin(index, rec, started)
                # Unknown record types are skipped: newer writers may add some.
                queue = self.queue
                qi = self.qi
            else:
                if reader is not None:
                    self.torn = reader.torn
        finally:
            self.sync()
            self.queue = queue
            self.qi = qi
            self.n_effects += effects
            self.n_events += events
            if first is not None:
                self.last_index = expected_index - 1
                self.n_records = expected_index - self.first_index
        if first is None and self.state is None:  # no snapshot either
            if self.torn is not None:
                raise LogCorrupt(
                    f"not a flowcore log: no complete record ({self.torn.reason})",
                    self.torn.offset,
                )
            raise LogCorrupt("the log is empty")
        self.cut = self.cut or self.torn is not None
        if self.qi < len(self.queue) and not self.cut:
            raise _Stop(
                ReplayDivergence(
                    self.last_index + 1,
                    None,
                    effect_to_wire(self.queue[self.qi]),
                    "the interpreter emits an effect the log does not record",
                )
            )

    def sync(self) -> None:
        """Bring ``self.state`` up to date after events folded in place."""
        if self.fold_in_place is not None:
            self.state = self.fold_in_place.state()
            self.fold_in_place = None

    def need_empty_queue(self, index: int) -> None:
        if self.qi < len(self.queue):
            raise _Stop(
                ReplayDivergence(
                    index,
                    None,
                    effect_to_wire(self.queue[self.qi]),
                    "the interpreter emits an effect the log does not record",
                )
            )

    def recorded(self, rec: RawRecord) -> Any:
        try:
            return self.codec.any(rec.data)
        except msgspec.DecodeError:
            return bytes(rec.data).decode("utf-8", "replace")

    def same_effect(self, rec: RawRecord, effect: Effect) -> bool:
        """Compare as values: another writer may order keys or spell defaults differently."""
        try:
            recorded = self.codec.effect(rec.data)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return False
        return bool(recorded == effect)

    # --- records ---------------------------------------------------------------------

    def begin(self, index: int, rec: RawRecord, started: _Started) -> None:
        flow = self.flow
        if started.flow_id != flow.id:
            raise ReplayError(
                f"the log is a run of flow {started.flow_id!r}, not {flow.id!r}: "
                "replay it against its own flow (or a newer version of it)"
            )
        self.version = started.version
        self.spec_hash = started.spec_hash
        budget = None
        if started.budget is not None:
            b = started.budget
            budget = Budget(
                steps=b.get("steps"),  # type: ignore[arg-type]
                cost_minor_units=b.get("costMinorUnits"),  # type: ignore[arg-type]
                wall_clock_ms=b.get("wallClockMs"),  # type: ignore[arg-type]
            )
        try:
            decision = start(
                flow,
                started.input,
                run_id=rec.run_id,
                now_ms=rec.at,
                budget=budget,
                depth=started.depth,
            )
        except InputError as exc:
            raise _Stop(
                ReplayDivergence(
                    index,
                    {"input": started.input},
                    {"rejected": str(exc)},
                    "the flow does not accept the recorded input",
                )
            ) from None
        except ValueError as exc:  # a run id or clock start() refuses
            raise LogCorrupt(f"run.started is not valid: {exc}", index=index) from None
        self.state = decision.state
        self.queue = decision.effects
        self.qi = 0

    def apply(self, index: int, event: Event) -> None:
        state = self.state
        assert state is not None
        self.n_events += 1
        before = self.before_event(index, event, state)
        try:
            decision = advance(state, event)
        except EventRejected as exc:
            raise self.diverged_rejected(index, event, exc) from None
        self.state = decision.state
        self.queue = decision.effects
        self.qi = 0
        self.after_event(index, event, before)

    def diverged_rejected(self, index: int, event: Event, exc: EventRejected) -> _Stop:
        return _Stop(
            ReplayDivergence(
                index,
                event_to_wire(event),
                {"rejected": str(exc)},
                "the interpreter rejects an event the log reports as applied",
            )
        )

    def check_rejected(self, index: int, rejected: _Rejected) -> None:
        state = self.state
        assert state is not None
        self.n_rejected += 1
        event = rejected.event
        try:
            decision = advance(state, event)
        except EventRejected as exc:
            self.rows.append(
                TrajectoryEntry(
                    index=index,
                    kind="event-rejected",
                    key=getattr(event, "idempotency_key", ""),
                    target=_tag(event),
                    input=event_to_wire(event),
                    status="rejected",
                    at=event.at_ms,
                    note=exc.reason,
                )
            )
            return
        raise _Stop(
            ReplayDivergence(
                index,
                {"rejected": rejected.reason, "event": event_to_wire(event)},
                {"applied": [effect_to_wire(e) for e in decision.effects]},
                "the interpreter applies an event the log records as rejected",
            )
        )

    def check_settled(self, index: int, rec: RawRecord) -> None:
        state = self.state
        assert state is not None
        recorded = self.recorded(rec)
        if state.settled is None:
            raise _Stop(
                ReplayDivergence(
                    index, recorded, None, "the log says the run settled; the interpreter has not"
                )
            )
        derived = settled_record_data(state.settled)
        if _without_nulls(recorded) != _without_nulls(derived):
            raise _Stop(
                ReplayDivergence(
                    index, recorded, derived, "run.settled differs from the settled effect"
                )
            )

    # --- the trajectory -------------------------------------------------------------------

    def on_effect(self, index: int, at: int, effect: Effect) -> None:
        if isinstance(effect, Settled):
            return
        key = effect.idempotency_key
        pos = self.where.get(key)
        if pos is not None:  # re-issued after an unknown outcome
            row = self.rows[pos]
            row.status = "pending"
            row.issues += 1
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
                state = self.state
                assert state is not None
                pending = state.pending.get(key)
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
            case _:
                assert_never(effect)
        self.where[key] = len(self.rows)
        self.rows.append(entry)

    def before_event(self, index: int, event: Event, state: State) -> Any:
        """What ``after_event`` needs to know about the state before the event."""
        if type(event) is SignalReceived:
            waiting = state.waiters.get(event.signal)
            return waiting[0] if waiting else None
        key = getattr(event, "idempotency_key", None)
        return key is not None and key not in state.pending  # a late answer

    def after_event(self, index: int, event: Event, before: Any) -> None:
        at = event.at_ms
        match event:
            case EffectSucceeded():
                row = self.row(event.idempotency_key, before)
                if row is not None:
                    row.status = "succeeded"
                    row.output = event.output
                    row.ended_at = at
                    if event.usage is not None:
                        row.usage = event.usage
                        self.count_usage(row, event.usage)
            case EffectFailed():
                row = self.row(event.idempotency_key, before)
                if row is not None:
                    row.status = "failed"
                    row.error = event.error
                    row.ended_at = at
            case EffectOutcomeUnknown():
                row = self.row(event.idempotency_key, before)
                if row is not None and not before:
                    key = row.key
                    if not any(getattr(e, "idempotency_key", None) == key for e in self.queue):
                        row.status = "uncertain"  # not re-issued under the same key
                        row.ended_at = at
            case HumanAnswered():
                row = self.row(event.idempotency_key, before)
                if row is not None:
                    row.status = "answered"
                    row.output = event.answer
                    row.ended_at = at
            case TimerFired():
                row = self.row(event.idempotency_key, before)
                if row is not None:
                    row.status = "fired"
                    row.ended_at = at
            case SignalReceived():
                if before is not None:
                    row = self.row(before, False)
                    if row is not None:
                        row.status = "received"
                        row.output = event.payload
                        row.ended_at = at
                self.rows.append(
                    TrajectoryEntry(
                        index=index,
                        kind="signal-received",
                        key=before or "",
                        target=event.signal,
                        output=event.payload,
                        status="delivered" if before is not None else "buffered",
                        at=at,
                    )
                )
            case SubflowSettled():
                row = self.row(event.idempotency_key, before)
                if row is not None:
                    row.status = "succeeded" if event.status == "completed" else "failed"
                    row.output = event.output
                    row.ended_at = at
                    row.note = _join(row.note, f"child {event.status}")
                    if event.usage is not None:
                        row.usage = event.usage
                        self.count_usage(row, event.usage)
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
        self.usage_steps += usage.steps
        self.usage_cost += usage.cost_minor_units
        if row.member is not None:
            acc = self.by_member.setdefault(row.member, [0, 0])
            acc[0] += usage.steps
            acc[1] += usage.cost_minor_units

    # --- the report ---------------------------------------------------------------------

    def close_rows(self, state: State) -> None:
        """Entries nothing answered: still pending, or dropped along the way."""
        final: dict[str, str] | None = None
        pending = state.pending
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

    def report(self, divergence: ReplayDivergence | None) -> ReplayReport:
        state = self.state
        rows = self.rows
        if state is not None:
            self.close_rows(state)
        unrecorded: tuple[Effect, ...] = ()
        if divergence is None and self.qi < len(self.queue):
            unrecorded = tuple(self.queue[self.qi :])
        settled = state.settled if state is not None else None
        ledger = state.ledger if state is not None else None
        return ReplayReport(
            run_id=self.run_id or (state.run_id if state is not None else ""),
            flow_id=self.flow.id,
            version=self.version,
            spec_hash=self.spec_hash,
            replayed_spec_hash=self.flow.spec_hash,
            first_index=self.first_index,
            last_index=self.last_index,
            records=self.n_records,
            events=self.n_events,
            rejected=self.n_rejected,
            effects=self.n_effects,
            status=state.status if state is not None else "not-started",
            settled=settled,
            trajectory=tuple(rows),
            usage=Usage(steps=self.usage_steps, cost_minor_units=self.usage_cost)
            if self.usage_steps or self.usage_cost
            else _NO_USAGE,
            usage_by_member={
                m: Usage(steps=s, cost_minor_units=c) for m, (s, c) in self.by_member.items()
            },
            steps_used=ledger.used_steps if ledger is not None else 0,
            cost_used=ledger.used_cost if ledger is not None else 0,
            unrecorded=unrecorded,
            torn=self.torn,
            divergence=divergence,
            state=state,
        )


def _tool_entry(index: int, effect: CallTool, at: int) -> TrajectoryEntry:
    return TrajectoryEntry(
        index=index,
        kind="call-tool",
        key=effect.idempotency_key,
        target=effect.tool,
        input=effect.input,
        at=at,
    )


def _at_byte(offset: int | None) -> str:
    return "" if offset is None else f" (byte {offset})"


def _tag(event: Event) -> str:
    tag = event.__struct_config__.tag
    assert isinstance(tag, str)
    return tag


def _join(note: str, more: str) -> str:
    return f"{note}; {more}" if note else more


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    return value
