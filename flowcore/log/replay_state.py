"""One replay's state and how it reads a record: the codecs of record data, the
state the fold keeps (``_Reading``: what it has read and what the log must
record next), decoding a record's data (bytes that do not decode are
corruption), and the errors a record makes (``LogCorrupt``, the first
divergence). ``replay`` describes replay.

This module must never do I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import msgspec

from .._data import MAX_DEPTH, format_path, problems, short
from .._errors import ReplayDivergence
from ..decision.interp import Batch
from ..decision.snapshot import decode_state
from ..decision.wire import Effect, Event
from ..language.spec import Flow
from .formats import TOO_DEEP
from .record_types import why
from .records import EffectRedispatchedData, LogCorrupt, LogFormat, RawRecord, Record, TornTail
from .report import ForkedFrom, _Rejected, _Started
from .trajectory import Trajectory


class _Codec:
    """Decoders and the encoder for one byte format of record data."""

    def __init__(self, format: LogFormat) -> None:
        mod: Any = msgspec.json if format == "json" else msgspec.msgpack
        self.encode = mod.Encoder().encode
        self.event = mod.Decoder(Event).decode
        self.effect = mod.Decoder(Effect).decode
        self.started = mod.Decoder(_Started).decode
        self.rejected = mod.Decoder(_Rejected).decode
        self.redispatched = mod.Decoder(EffectRedispatchedData).decode
        self.any = mod.Decoder().decode
        # Whether the reader left bytes of a record's data unread: typed
        # decoders skip unknown fields without reading them, and the NDJSON
        # reader checks every byte as UTF-8, the MessagePack reader only the
        # envelope. For MessagePack, replay then reads in full any data it
        # did not decode completely and that is not exactly as flowcore
        # encodes it.
        self.unread = format == "msgpack"


_CODECS = {"json": _Codec("json"), "msgpack": _Codec("msgpack")}
_json_encode = msgspec.json.Encoder().encode
# flowcore data nests at most MAX_DEPTH levels; a record wraps it in a few more
# (a settled effect: report, entry, output). Anything deeper is no flowcore
# record, and deep enough to break whatever recurses over it (a CLI printing it).
_MAX_RECORD_DEPTH = MAX_DEPTH + 8
_MAX_COUNT = 2**63 - 1  # indexes, times, depths and budgets are signed 64-bit counts


class _Stop(Exception):
    """Internal: the first divergence was found."""

    def __init__(self, divergence: ReplayDivergence) -> None:
        self.divergence = divergence


def _as_raw(records: Iterable[Record]) -> Iterator[RawRecord]:
    """Records built in Python, as the ``RawRecord``s bytes would decode to.

    They were never decoded, so nothing checked them: the envelope is checked
    here as decoding checks it, and data JSON cannot hold (a lone surrogate,
    an object that is not data) is corruption, not a ``UnicodeEncodeError``.
    """
    for record in records:
        if not isinstance(record, Record):
            raise LogCorrupt(f"not a log record: {short(record)}")
        index, at = record.index, record.at
        if not _is_count(index):
            raise LogCorrupt(f"a record's index is not an integer >= 0: {short(index)}")
        if not isinstance(record.type, str) or not isinstance(record.run_id, str):
            raise LogCorrupt(f"record {index}: type and runId must be strings", index=index)
        if not _is_count(at):
            raise LogCorrupt(
                f"record {index}: at is not an integer from 0 to 2**63-1: {short(at)}",
                index=index,
            )
        try:
            data = _json_encode(record.data)
        except (TypeError, ValueError, OverflowError, RecursionError) as exc:
            # UnicodeEncodeError (a lone surrogate) is a ValueError.
            raise LogCorrupt(
                f"record {index}: its data cannot be written as JSON: {why(exc)}", index=index
            ) from None
        yield RawRecord(record.type, index, record.run_id, at, msgspec.Raw(data))


def _is_count(value: object) -> bool:
    return type(value) is int and 0 <= value <= _MAX_COUNT


def _diverged(index: int, expected: Any, actual: Any, message: str) -> _Stop:
    """The first divergence, with a message that quotes only short prefixes.

    ``ReplayDivergence`` itself formats the full ``repr`` of what the log
    records and what the interpreter derives, and a hostile log can record a
    value megabytes long; ``expected`` and ``actual`` keep the full values.
    """
    divergence = ReplayDivergence(index, expected, actual, message)
    divergence.args = (
        f"{message} at index {index}: expected {short(expected, 300)}, got {short(actual, 300)}",
    )
    return _Stop(divergence)


def _at_byte(offset: int | None) -> str:
    return "" if offset is None else f" (byte {offset})"


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    return value


def _not_record_data(value: Any, limit: int) -> str | None:
    """What makes ``value`` something no flowcore record holds, or None.

    flowcore's data rule (``_data.problems``), with nesting allowed to
    ``limit``. The walk is iterative: the value may be nested deeper than
    Python's recursion limit lets a recursive walk go.
    """
    found = next(problems(value, max_depth=limit), None)
    return None if found is None else f"{found[1]} (at {format_path(found[0])})"


class _Reading:
    """One replay's state, and how it reads a record's data."""

    def __init__(
        self,
        flow: Flow,
        codec: _Codec,
        snapshot: bytes | None,
        until: int | None,
        offset: Callable[[int], int | None],
        allow_unknown_types: bool = False,
    ) -> None:
        self.offset = offset
        self.flow = flow
        self.codec = codec
        self.until = until
        self.allow_unknown_types = allow_unknown_types
        self.torn: TornTail | None = None
        self.batch: Batch | None = None  # the run's state, events applied in one batch
        self.run_id: str | None = None
        self.version = flow.version
        self.spec_hash = flow.spec_hash
        self.forked_from: ForkedFrom | None = None
        self.trajectory = Trajectory()
        if snapshot is not None:
            state = decode_state(snapshot, flow)
            self.batch = Batch(state)
            self.run_id = state.run_id
            self.trajectory.started(state.waiting.pending)
        self.queue: Sequence[Effect] = ()  # the effects of the decision being matched
        self.qi = 0  # the next of them the log must record
        # The scheduled.changed data of the decision being matched, the next
        # of them the log must record, and whether the log records them at
        # all (None: no decision changed a scheduled call yet).
        self.changes: list[dict[str, Any]] = []
        self.ci = 0
        self.records_changes: bool | None = None
        # The decision whose effects are being matched: the index of its
        # run.started or event.reported record, and its at (start's now_ms or
        # the event's atMs), which its effects and run.settled must carry.
        # Unknown (-1, None) in a snapshot tail until its first event.
        self.decision_index = -1
        self.decision_at: int | None = None
        self.first_index = -1
        self.last_index = -1
        self.n_records = 0
        self.n_events = 0
        self.n_rejected = 0
        self.n_effects = 0
        self.cut = False

    def corrupt(self, what: str, index: int, position: int) -> LogCorrupt:
        """A ``LogCorrupt`` for the record at ``position`` (``what`` follows "record N")."""
        offset = self.offset(position)
        return LogCorrupt(f"record {index}{_at_byte(offset)} {what}", offset, index=index)

    def check_at(
        self, rec: RawRecord, position: int, decision_at: int | None, decision_index: int
    ) -> None:
        """An effect or ``run.settled`` carries the ``at`` of the decision that produced it."""
        if decision_at is None or rec.at == decision_at:
            return  # (a snapshot tail that does not begin with an event: nothing to compare)
        raise self.corrupt(
            f"has at {rec.at}, but it belongs to the decision of record {decision_index}, "
            f"whose at is {decision_at}: a decision's effects and run.settled carry its at",
            rec.index,
            position,
        )

    def event(self, rec: RawRecord, position: int, decode: Callable[[msgspec.Raw], Event]) -> Event:
        """The event an ``event.reported`` record holds, its ``at`` checked."""
        try:
            event = decode(rec.data)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise self.corrupt(f"is not a valid event: {why(exc)}", rec.index, position) from None
        except RecursionError:
            raise self.corrupt(f"is not a valid event: {TOO_DEEP}", rec.index, position) from None
        if rec.at != event.at_ms:
            raise self.corrupt(
                f"has at {rec.at}, but its event's atMs is {event.at_ms}: "
                "an event record's at is its event's atMs",
                rec.index,
                position,
            )
        if self.codec.unread and self.codec.encode(event) != bytes(rec.data):
            self.decoded(rec, position)  # unknown fields, other encodings: read every byte
        return event

    def recorded(self, rec: RawRecord, position: int) -> Any:
        """A record's data, decoded: a divergence's ``expected``, a ``run.settled``.

        Bytes that do not decode, and values no record a flowcore host writes
        holds (not flowcore data, or nested deeper than any record), are
        corruption.
        """
        value = self.decoded(rec, position)
        problem = _not_record_data(value, _MAX_RECORD_DEPTH)
        if problem is not None:
            raise self.corrupt(f"holds {problem}: no flowcore record does", rec.index, position)
        return value

    def decoded(self, rec: RawRecord, position: int) -> Any:
        """A record's data decoded in full, every byte read (corruption if one does not decode)."""
        try:
            value = self.codec.any(rec.data)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise self.corrupt(
                f"holds data that does not decode: {why(exc)}", rec.index, position
            ) from None
        except RecursionError:
            raise self.corrupt(f"holds data {TOO_DEEP}", rec.index, position) from None
        return value

    def same_effect(self, rec: RawRecord, position: int, effect: Effect) -> bool:
        """Compare as values: another writer may order keys or spell defaults differently."""
        try:
            recorded = self.codec.effect(rec.data)
        except msgspec.ValidationError:
            return False  # data, but not this effect: a divergence
        except msgspec.DecodeError as exc:  # bytes that are not JSON / MessagePack at all
            raise self.corrupt(
                f"holds data that does not decode: {why(exc)}", rec.index, position
            ) from None
        except RecursionError:
            raise self.corrupt(f"holds data {TOO_DEEP}", rec.index, position) from None
        if recorded != effect:
            return False
        if self.codec.unread:
            self.decoded(rec, position)  # the same effect, but bytes were left unread
        return True

    def set_changes(self, changes: list[dict[str, Any]]) -> None:
        self.changes = changes
        self.ci = 0
