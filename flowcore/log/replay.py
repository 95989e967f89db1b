"""Replay: re-derive a run's effects from its log and compare them with the recorded ones.

Theory of operation
-------------------

A log (``records``) records what the interpreter decided (``effect.emitted``)
and what the host reported (``event.reported``). Because ``start`` and
``advance`` are pure, feeding the recorded events back in must re-derive the
recorded effects exactly, in the same order. ``replay`` does that in one pass:

* ``run.started`` calls ``start`` with the recorded input, run id, clock,
  budget and depth (or a snapshot stands in for everything up to the tail);
* ``event.reported`` calls ``advance``; the effects it returns are queued;
* each ``effect.emitted`` must equal the next queued effect. The recorded
  bytes are compared with the encoding of the re-derived effect first (one
  ``memcmp`` when the log was written by flowcore); only when the bytes differ
  is the record decoded into an ``Effect`` and compared as a value, so a log
  written by another host with other key order or explicit nulls still
  matches;
* every other record (``event.*``, ``run.settled``, the end of the log) first
  requires the queue to be empty: the log must record every effect;
* ``event.rejected`` must still be rejected; ``run.settled`` must agree with
  the ``settled`` effect;
* ``scheduled.changed`` records come after a decision's ``event.reported``
  (or ``run.started``) and before its effects, one per scheduled call the
  decision changed: each must equal the re-derived one. A log written before
  the record existed has none: the first decision that changes a scheduled
  call says whether the log records them, and from then on it must record
  all of them or none;
* ``effect.redispatched`` (a host ran pending work again under its key after
  a recovery) must name work the run waits for at that point; it changes no
  state and only adds a note to that key's trajectory entry;
* every record's ``at`` must be what the record says it is: an event record's
  is its event's ``atMs``, an effect's and ``run.settled``'s the ``at`` of the
  decision that produced it. Replay does not require ``at`` to increase: the
  core accepts an event from the past (its clock is the max), and flowcore's
  hosts record such events (``specs/log.md`` §1).

The first disagreement is a ``ReplayDivergence`` (index, expected = what the
log records, actual = what the interpreter derives now), raised or returned in
the report. Structural problems are ``LogCorrupt`` and never skipped: index
gaps, another run's records, a log that does not begin with ``run.started``,
an ``at`` that breaks the rule above, a record type replay does not know
(``UnknownRecordType``, unless ``allow_unknown_types``), and bytes that do not
decode anywhere in a record, even where they would otherwise be compared as
bytes and only differ. A log may end in the middle of a decision, its last
record torn or not: replayed with the spec that wrote it, the effects derived
past the end are returned as ``unrecorded`` (the log was cut); with another
spec that is a divergence, since a new version may add effects there
(``fold`` says why). ``until`` cuts the log with any spec.

Hostile bytes raise only flowcore's errors: every decode also catches the
``RecursionError`` of deep nesting, values that are not flowcore data are
refused before anything recurses over them, and messages (divergences
included) quote only short prefixes of what the log holds.

While it folds, replay tells an observer (``trajectory.Trajectory``) what
happened; it collects the run's trajectory: one entry per effect (with the
event that answered it), signal, cancel request and rejected event.

Decided by benchmark (per record, 2k-step log, either byte format): comparing
encoded bytes costs 0.4 us, decoding into an ``Effect`` and comparing values
0.6 us, comparing wire dicts (decode + ``effect_to_wire``) 1.9 us; decoding an
event straight into its Struct costs 0.3 us, a dict through
``event_from_wire`` 12 us. Records are read in chunks (``records.RawReader``)
with ``data`` left undecoded until needed.

This module must never do I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import chain
from typing import Any

import msgspec

from .._data import DataError, check_data, short
from .._errors import EventRejected, ReplayDivergence
from ..decision.interp import advance
from ..decision.state import PendingKind
from ..decision.wire import (
    Effect,
    Event,
    SignalReceived,
    Usage,
    check_event,
    effect_to_wire,
    event_to_wire,
)
from ..language.spec import Flow
from .formats import TOO_DEEP
from .record_types import why
from .records import (
    EFFECT_EMITTED,
    EFFECT_REDISPATCHED,
    EVENT_REJECTED,
    EVENT_REPORTED,
    RUN_SETTLED,
    RUN_STARTED,
    SCHEDULED_CHANGED,
    LogCorrupt,
    LogFormat,
    LogRead,
    RawReader,
    RawRecord,
    Record,
    UnknownRecordType,
    scheduled_changed_data,
    settled_record_data,
)
from .replay_start import _Starting
from .replay_state import (
    _CODECS,
    _as_raw,
    _at_byte,
    _diverged,
    _Stop,
    _without_nulls,
)
from .report import (
    ReplayError,
    ReplayReport,
    TrajectoryEntry,
    _Rejected,
)

__all__ = ["ReplayError", "ReplayReport", "TrajectoryEntry", "replay"]


_NO_USAGE = Usage()
_WORK = frozenset({"call-tool", "run-agent", "run-team", "run-subflow", "signal-run"})
_REDISPATCHABLE = frozenset({"call-tool", "run-agent", "run-team"})
_WORK_KINDS = frozenset({PendingKind.WORK, PendingKind.SCHEDULED_CALL, PendingKind.CANCELLING})
_NO_LIMIT = float("inf")


def replay(
    records: bytes | bytearray | memoryview | LogRead | Iterable[Record],
    flow: Flow,
    *,
    snapshot: bytes | None = None,
    until: int | None = None,
    raise_on_divergence: bool = True,
    format: LogFormat | None = None,
    allow_unknown_types: bool = False,
) -> ReplayReport:
    """Replay a run's log against ``flow``; see the module docstring.

    ``records`` is the log's bytes (NDJSON or framed MessagePack, detected
    unless ``format`` says), a ``LogRead`` or the records themselves.
    ``snapshot`` is ``encode_state`` bytes: ``records`` is then the tail that
    follows it. ``until`` stops after the record with that index.
    ``allow_unknown_types`` skips records of types this reader does not know
    (a newer writer's) instead of refusing them.

    Raises ``ReplayDivergence`` on the first divergence (unless
    ``raise_on_divergence`` is false: the report's ``divergence`` then holds
    it), ``LogCorrupt`` for a log that cannot be read or is inconsistent
    (``UnknownRecordType`` for a record type it does not know),
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
        raw = _as_raw(records)
        offset = _no_offset
    r = _Replayer(flow, _CODECS[fmt], snapshot, until, offset, allow_unknown_types)
    r.torn = torn
    report = r.run(raw, reader)
    if report.divergence is not None and raise_on_divergence:
        raise report.divergence
    return report


def _no_offset(position: int) -> int | None:
    return None


class _Replayer(_Starting):
    """One replay: the fold over the records and the trajectory it collects."""

    # --- the fold ------------------------------------------------------------------

    def run(self, source: Iterator[RawRecord], reader: RawReader | None) -> ReplayReport:
        divergence: ReplayDivergence | None = None
        try:
            self.fold(source, reader)
        except _Stop as stop:
            divergence = stop.divergence
        return self.report(divergence)

    def fold(self, source: Iterator[RawRecord], reader: RawReader | None) -> None:
        """Read every record in order: check its envelope, then let its kind's method judge it."""
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
            if self.batch is None:
                if first.type != RUN_STARTED:
                    raise self.corrupt(
                        f"is {short(first.type)}: a log begins with run.started", first.index, 0
                    )
                if first.index != 0 and self.incarnation_of(first) == 1:
                    raise self.corrupt(
                        "is run.started: a run's indices begin at 0 (a log may begin later"
                        " only at a later incarnation's run.started)",
                        first.index,
                        0,
                    )
                run_id = self.run_id = first.run_id
            elif first.type == EFFECT_EMITTED:
                raise ReplayError(
                    "the tail after a snapshot must begin with an event record, "
                    f"not effect.emitted (index {first.index})"
                )
        limit = until if until is not None else _NO_LIMIT
        position = -1
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
                        f"belongs to run {short(rec.run_id)}, not {short(run_id)}: "
                        "a log holds exactly one run",
                        index,
                        position,
                    )
                if index > limit:
                    self.cut = True
                    break
                expected_index = index + 1
                kind = rec.type
                # A record is read (its bytes decoded, its at checked) before
                # it is compared with anything: bytes that do not decode are
                # corruption wherever they are, never a divergence.
                if kind == EFFECT_EMITTED:
                    self.on_effect(rec, position)
                elif kind == EVENT_REPORTED:
                    self.on_event(rec, position)
                elif kind == EVENT_REJECTED:
                    self.on_rejected(rec, position)
                elif kind == RUN_SETTLED:
                    self.on_settled(rec, position)
                elif kind == RUN_STARTED:
                    self.on_started(rec, position)
                elif kind == EFFECT_REDISPATCHED:
                    self.on_redispatched(rec, position)
                elif kind == SCHEDULED_CHANGED:
                    self.on_scheduled(rec, position)
                else:
                    self.unknown(rec, position)
            else:
                if reader is not None:
                    self.torn = reader.torn
        finally:
            if first is not None:
                self.last_index = expected_index - 1
                self.n_records = expected_index - self.first_index
        self.at_end(first is not None)

    def on_scheduled(self, rec: RawRecord, position: int) -> None:
        """``scheduled.changed``: the next scheduled call the decision changed, as it left it."""
        index = rec.index
        recorded = self.recorded(rec, position)
        self.check_at(rec, position, self.decision_at, self.decision_index)
        if self.qi > 0 or self.ci >= len(self.changes) or self.records_changes is False:
            why_not = (
                "the log recorded no scheduled.changed before"
                if self.records_changes is False
                else "the interpreter changes no (further) scheduled call here"
            )
            raise _diverged(index, recorded, None, f"the log records a scheduled change: {why_not}")
        expected = self.changes[self.ci]
        self.ci += 1
        self.records_changes = True
        if _without_nulls(recorded) != expected:
            raise _diverged(
                index,
                recorded,
                expected,
                "the recorded scheduled change differs from the re-derived one",
            )

    def need_changes_recorded(self, index: int) -> None:
        """The decision's scheduled changes are all recorded, or the log records none."""
        if self.ci >= len(self.changes):
            return
        if self.records_changes is None and self.ci == 0:
            self.records_changes = False  # a log from before scheduled.changed existed
        if self.records_changes:
            raise _diverged(
                index,
                None,
                self.changes[self.ci],
                "the interpreter changes a scheduled call the log does not record",
            )
        self.ci = len(self.changes)

    def on_effect(self, rec: RawRecord, position: int) -> None:
        """``effect.emitted``: the next effect the interpreter derived, byte for byte."""
        index = rec.index
        if self.qi == 0:
            self.need_changes_recorded(index)
        if rec.at != self.decision_at:
            self.check_at(rec, position, self.decision_at, self.decision_index)
        if self.qi >= len(self.queue):
            raise _diverged(
                index,
                self.recorded(rec, position),
                None,
                "the log records an effect the interpreter does not emit",
            )
        effect = self.queue[self.qi]
        self.qi += 1
        if bytes(rec.data) != self.codec.encode(effect) and not self.same_effect(
            rec, position, effect
        ):
            raise _diverged(
                index,
                self.recorded(rec, position),
                effect_to_wire(effect),
                "the recorded effect differs from the re-derived one",
            )
        self.n_effects += 1
        self.trajectory.effect(index, rec.at, effect)

    def on_event(self, rec: RawRecord, position: int) -> None:
        """``event.reported``: applied; its effects are what the log must record next."""
        event = self.event(rec, position, self.codec.event)
        self.need_changes_recorded(rec.index)
        if self.qi < len(self.queue):
            self.need_empty_queue(rec.index)
        self.decision_at = rec.at
        self.decision_index = rec.index
        self.apply(rec.index, position, event)

    def on_rejected(self, rec: RawRecord, position: int) -> None:
        """``event.rejected``: the event must be rejected again."""
        index = rec.index
        try:
            rejected = self.codec.rejected(rec.data)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise self.corrupt(f"is not a rejected event: {why(exc)}", index, position) from None
        except RecursionError:
            raise self.corrupt(f"is not a rejected event: {TOO_DEEP}", index, position) from None
        if self.codec.unread:
            self.decoded(rec, position)
        if rec.at != rejected.event.at_ms:
            raise self.corrupt(
                f"has at {rec.at}, but its event's atMs is "
                f"{rejected.event.at_ms}: an event record's at is its event's atMs",
                index,
                position,
            )
        self.need_empty_queue(index)
        self.check_rejected(index, rejected)

    def on_settled(self, rec: RawRecord, position: int) -> None:
        """``run.settled``: agrees with the settled effect."""
        recorded = self.recorded(rec, position)
        self.check_at(rec, position, self.decision_at, self.decision_index)
        self.need_empty_queue(rec.index)
        self.check_settled(rec.index, recorded)

    def on_redispatched(self, rec: RawRecord, position: int) -> None:
        """``effect.redispatched``: work the run waits for, run again; no state changes."""
        index = rec.index
        try:
            data = self.codec.redispatched(rec.data)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise self.corrupt(
                f"is not a valid effect.redispatched: {why(exc)}", index, position
            ) from None
        except RecursionError:
            raise self.corrupt(
                f"is not a valid effect.redispatched: {TOO_DEEP}", index, position
            ) from None
        if self.codec.unread:
            self.decoded(rec, position)
        key = data.idempotency_key
        for name, text in (("idempotencyKey", key), ("worker", data.worker)):
            if text is not None:
                try:
                    check_data(text, f"$.{name}", "effect.redispatched")
                except DataError as exc:
                    raise self.corrupt(
                        f"is not a valid effect.redispatched: {why(exc)}", index, position
                    ) from None
        # Written in a transaction of its own, between decisions: every effect
        # of the decision before it is recorded already.
        self.need_empty_queue(index)
        batch = self.batch
        assert batch is not None  # the log began with run.started, or a snapshot stands in
        entry = batch.pending.get(key)
        if entry is None or entry.kind not in _WORK_KINDS or entry.effect not in _REDISPATCHABLE:
            waits = None if entry is None else {"pending": entry.kind.value, "effect": entry.effect}
            raise _diverged(
                index,
                {"redispatched": key, "recovery": data.recovery},
                waits,
                "the log re-dispatches work the run does not wait for",
            )
        self.trajectory.redispatched(key, data.recovery)

    def on_started(self, rec: RawRecord, position: int) -> None:
        """``run.started``: the first record, or the start of the incarnation the
        run's last ``continue-as-new`` effect begins."""
        index = rec.index
        continued = None
        if position > 0 or self.batch is not None:
            batch = self.batch
            continued = None if batch is None else batch.t.tree.continued
            if continued is None:
                raise self.corrupt(
                    "is a second run.started, and the run did not continue as new",
                    index,
                    position,
                )
            self.need_empty_queue(index)
        try:
            started = self.codec.started(rec.data)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise self.corrupt(f"is not a valid run.started: {why(exc)}", index, 0) from None
        except RecursionError:
            raise self.corrupt(f"is not a valid run.started: {TOO_DEEP}", index, 0) from None
        if self.codec.unread:
            self.decoded(rec, 0)
        if continued is not None:
            self.check_continued(index, rec, position, started, continued)
        self.begin(index, rec, started)
        self.decision_at = rec.at
        self.decision_index = index

    def at_end(self, read_any: bool) -> None:
        """The log ended (or ``until`` was reached): empty, cut, or ending inside a decision."""
        until = self.until
        if not read_any and self.batch is None:  # no snapshot either
            if self.torn is not None:
                raise LogCorrupt(
                    f"not a flowcore log: no complete record ({self.torn.reason})",
                    self.torn.offset,
                )
            raise LogCorrupt("the log is empty")
        # A cut: a torn tail, or ``until`` reached (whether or not records
        # follow it: ``until`` says "the log as it stood after this record").
        self.cut = self.cut or self.torn is not None
        if until is not None and self.last_index >= until:
            self.cut = True
        if self.qi < len(self.queue) and not (until is not None and self.last_index >= until):
            # The log ends inside a decision: effects derived for its last
            # event are not in it. Whether the last record was torn or the
            # bytes end cleanly at a line does not decide what that means (a
            # cut one byte further must not change the verdict, specs/log.md
            # §5); the spec does. Replayed with the spec that wrote it, the
            # interpreter derives what the host derived, so the only way to
            # lack those effects is to lose records: the log was cut, and they
            # are ``unrecorded``. Replayed with another spec (moving a run to
            # a new version, §9), an effect past the end may be one the new
            # version adds, which the host never dispatched: that cannot be
            # told from a lost record, so it is a divergence, torn or not.
            # ``until`` is a cut the caller asked for, with any spec.
            if self.spec_hash == self.flow.spec_hash:
                self.cut = True
            else:
                raise _diverged(
                    self.last_index + 1,
                    None,
                    effect_to_wire(self.queue[self.qi]),
                    f"the log ends inside the decision of record {self.decision_index} and was"
                    " written with another spec: the interpreter emits an effect the log does"
                    " not record, which a new version may add",
                )

    def unknown(self, rec: RawRecord, position: int) -> None:
        """A record type this reader does not know: refused, or skipped when allowed."""
        index = rec.index
        if not self.allow_unknown_types:
            offset = self.offset(position)
            raise UnknownRecordType(
                f"record {index}{_at_byte(offset)} is of unknown type {short(rec.type)}: "
                "a damaged record, or one a newer writer added (replay with "
                "allow_unknown_types=True, or flowcore replay --allow-unknown-types, "
                "to skip such records)",
                rec.type,
                offset,
                index,
            )
        self.decoded(rec, position)  # skipped, but read: its bytes must decode like any record's
        self.trajectory.skipped(index, rec.type, rec.at)

    def need_empty_queue(self, index: int) -> None:
        self.need_changes_recorded(index)
        if self.qi < len(self.queue):
            raise _diverged(
                index,
                None,
                effect_to_wire(self.queue[self.qi]),
                "the interpreter emits an effect the log does not record",
            )

    # --- records ---------------------------------------------------------------------

    def apply(self, index: int, position: int, event: Event) -> None:
        batch = self.batch
        assert batch is not None
        self.n_events += 1
        try:
            effects = batch.advance(event)
        except EventRejected as exc:
            raise self.refused(index, position, event, exc) from None
        receiver = batch.signal_taker if type(event) is SignalReceived else None
        self.queue = effects
        self.qi = 0
        self.set_changes(
            [scheduled_changed_data(sid, sched) for sid, sched in batch.scheduled_changes()]
        )
        self.trajectory.applied(index, event, effects, batch, receiver)

    def refused(self, index: int, position: int, event: Event, exc: EventRejected) -> Exception:
        """``advance`` rejects an event the log reports as applied.

        When the event is not flowcore data at all (an integer beyond 64 bits,
        nesting past ``MAX_DEPTH``, over the size limit), no host could have
        applied it: the record is corrupt. Otherwise the interpreter disagrees
        with the log (a divergence), as when a newer version refuses it.
        """
        try:
            check_event(event)
        except DataError as bad:
            return self.corrupt(f"is not a valid event: {why(bad)}", index, position)
        return _diverged(
            index,
            event_to_wire(event),
            {"rejected": str(exc)},
            "the interpreter rejects an event the log reports as applied",
        )

    def check_rejected(self, index: int, rejected: _Rejected) -> None:
        batch = self.batch
        assert batch is not None
        self.n_rejected += 1
        event = rejected.event
        try:
            effects = advance(batch.state(), event).effects  # a probe: the batch goes on as it is
        except EventRejected as exc:
            # A host records what it refused, including events that are not
            # flowcore data (an oversize payload, say): show what can be shown.
            try:
                check_event(event)
                shown: Any = event_to_wire(event)
            except DataError:
                shown = None
            self.trajectory.rejected(index, event, shown, exc.reason)
            return
        raise _diverged(
            index,
            {"rejected": rejected.reason, "event": event_to_wire(event)},
            {"applied": [effect_to_wire(e) for e in effects]},
            "the interpreter applies an event the log records as rejected",
        )

    def check_settled(self, index: int, recorded: Any) -> None:
        batch = self.batch
        assert batch is not None
        if batch.settled is None:
            raise _diverged(
                index, recorded, None, "the log says the run settled; the interpreter has not"
            )
        derived = settled_record_data(batch.settled)
        if _without_nulls(recorded) != _without_nulls(derived):
            raise _diverged(index, recorded, derived, "run.settled differs from the settled effect")

    # --- the report ---------------------------------------------------------------------

    def report(self, divergence: ReplayDivergence | None) -> ReplayReport:
        state = self.batch.state() if self.batch is not None else None
        if state is not None:
            self.trajectory.close(state)
        usage, by_member, delegated = self.trajectory.usage()
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
            trajectory=tuple(self.trajectory.rows),
            usage=usage,
            usage_by_member=by_member,
            usage_delegated=delegated,
            steps_used=ledger.used_steps if ledger is not None else 0,
            cost_used=ledger.used_cost if ledger is not None else 0,
            unrecorded=unrecorded,
            torn=self.torn,
            divergence=divergence,
            state=state,
            forked_from=self.forked_from,
        )
