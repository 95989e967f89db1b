"""The event log: records, their byte formats, and a recorder for hosts.

A log is a sequence of envelopes ``{"type", "index", "runId", "at", "data"}``,
one per line as NDJSON, or as MessagePack with each record prefixed by its
length (a 4-byte unsigned big-endian integer) so that a torn tail can be told
from corruption. ``index`` increases by one within a run, from 0.

Record types:

``run.started``     data: flowId, version, specHash, input, budget, depth
``event.reported``  data: the event, as wire JSON
``event.rejected``  data: {event, reason} - optional; replay checks it is still rejected
``effect.emitted``  data: the effect, as wire JSON
``run.settled``     data: status, output, error, exhausted

Within one decision the order is fixed: ``event.reported`` first, then one
``effect.emitted`` per effect in emission order; when the run settles, the
``settled`` effect is followed by ``run.settled``.

Unknown record types and unknown fields are ignored by readers, so that new
fields never break old logs. A torn last record (a crash mid-write) is
reported as a ``TornTail``; an unreadable record before it is ``LogCorrupt``.

``Record`` holds decoded data; ``RawRecord`` leaves ``data`` as bytes for
replay's hot path, read in chunks by ``RawReader``. The typed records
(``RunStartedRecord`` ...) describe the format and generate
``specs/schema/records.json``.

This module turns bytes into records and back; reading and writing files is
the caller's business. It must never do I/O. ``specs/log.md`` is the reference
for other languages.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from typing import Any, Literal, TypeAlias, TypeVar

import msgspec

from ._errors import FlowcoreError
from ._interp import Decision
from ._spec import Budget, Flow
from ._wire import (
    BudgetRemaining,
    Effect,
    ErrorInfo,
    Event,
    ExhaustedLimit,
    NonNegInt,
    Settled,
    SettledStatus,
    effect_to_wire,
    event_to_wire,
)

__all__ = [
    "EFFECT_EMITTED",
    "EVENT_REJECTED",
    "EVENT_REPORTED",
    "RUN_SETTLED",
    "RUN_STARTED",
    "LogCorrupt",
    "LogFormat",
    "LogRead",
    "RawRecord",
    "Record",
    "Recorder",
    "EffectEmittedRecord",
    "EventRejectedData",
    "EventRejectedRecord",
    "EventReportedRecord",
    "RunSettledData",
    "RunSettledRecord",
    "RunStartedData",
    "RunStartedRecord",
    "StartBudget",
    "TornTail",
    "TypedRecord",
    "budget_to_wire",
    "decode_log",
    "detect_format",
    "encode_record",
    "encode_records",
    "RawLog",
    "RawReader",
    "read_raw_log",
    "iter_records",
    "settled_record_data",
]

LogFormat: TypeAlias = Literal["json", "msgpack"]

RUN_STARTED = "run.started"
EVENT_REPORTED = "event.reported"
EVENT_REJECTED = "event.rejected"
EFFECT_EMITTED = "effect.emitted"
RUN_SETTLED = "run.settled"


class Record(msgspec.Struct, frozen=True, rename="camel"):
    """One log envelope. ``at`` is the host's clock (ms) when it was written."""

    type: str
    index: int
    run_id: str
    at: int
    data: Any = None


# --- the typed records: what each record type's data holds ----------------------------
# These describe the format (``specs/schema/records.json`` is generated from
# them); readers go through ``Record`` / ``RawRecord`` so that unknown record
# types and fields are skipped rather than rejected.


class StartBudget(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    """The budget a host passed to ``start`` (a child's share); unset limits are omitted."""

    steps: NonNegInt | None = None
    cost_minor_units: NonNegInt | None = None
    wall_clock_ms: NonNegInt | None = None


class RunStartedData(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """``run.started``: what ``start`` was called with; ``at`` is its ``now_ms``."""

    flow_id: str
    version: int
    spec_hash: str
    input: Any = None
    budget: StartBudget | None = None
    depth: NonNegInt = 0


class EventRejectedData(msgspec.Struct, frozen=True, kw_only=True):
    """``event.rejected``: an event the interpreter refused, and why."""

    event: Event
    reason: str = ""


class RunSettledData(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """``run.settled``: the settled effect's outcome (its report stays in the effect)."""

    status: SettledStatus
    output: Any = None
    error: ErrorInfo | None = None
    exhausted: ExhaustedLimit | None = None


class _Envelope(msgspec.Struct, frozen=True, kw_only=True, rename="camel", tag_field="type"):
    index: NonNegInt
    run_id: str
    at: NonNegInt


class RunStartedRecord(_Envelope, frozen=True, kw_only=True, tag=RUN_STARTED):
    data: RunStartedData


class EventReportedRecord(_Envelope, frozen=True, kw_only=True, tag=EVENT_REPORTED):
    data: Event


class EventRejectedRecord(_Envelope, frozen=True, kw_only=True, tag=EVENT_REJECTED):
    data: EventRejectedData


class EffectEmittedRecord(_Envelope, frozen=True, kw_only=True, tag=EFFECT_EMITTED):
    data: Effect


class RunSettledRecord(_Envelope, frozen=True, kw_only=True, tag=RUN_SETTLED):
    data: RunSettledData


TypedRecord: TypeAlias = (
    RunStartedRecord
    | EventReportedRecord
    | EventRejectedRecord
    | EffectEmittedRecord
    | RunSettledRecord
)


class RawRecord(msgspec.Struct, frozen=True, rename="camel", gc=False):
    """A log envelope whose ``data`` is left as undecoded bytes (JSON or MessagePack).

    Replay reads logs this way: an event is decoded straight into its typed
    Struct, and a recorded effect is compared byte for byte with the encoding
    of the re-derived one before anything is decoded at all.
    """

    type: str
    index: int
    run_id: str
    at: int
    data: msgspec.Raw = msgspec.Raw(b"null")


class TornTail(msgspec.Struct, frozen=True):
    """An incomplete last record (a crash mid-write), at byte ``offset``."""

    offset: int
    length: int
    reason: str


class LogRead(msgspec.Struct, frozen=True):
    """The complete records of a log, and the torn tail if there was one."""

    records: tuple[Record, ...]
    torn: TornTail | None = None


class LogCorrupt(FlowcoreError, ValueError):
    """A log that cannot be read or is not consistent: never skipped.

    ``offset`` is the byte offset of the bad record and ``line`` its line
    (NDJSON), when the log was read from bytes; ``index`` is the record index,
    when the envelope itself could be read.
    """

    def __init__(
        self,
        message: str,
        offset: int | None = None,
        line: int | None = None,
        index: int | None = None,
    ) -> None:
        self.offset = offset
        self.line = line
        self.index = index
        super().__init__(message)


_json_encoder = msgspec.json.Encoder()
_json_decoder = msgspec.json.Decoder(Record)
_json_raw_decoder = msgspec.json.Decoder(RawRecord)
_mp_encoder = msgspec.msgpack.Encoder()
_mp_decoder = msgspec.msgpack.Decoder(Record)
_mp_raw_decoder = msgspec.msgpack.Decoder(RawRecord)
_LEN = struct.Struct(">I")

_R = TypeVar("_R", Record, RawRecord)


def encode_record(record: Record, format: LogFormat = "json") -> bytes:
    """One record as bytes: a JSON line (with its newline) or a framed MessagePack map."""
    if format == "json":
        return _json_encoder.encode(record) + b"\n"
    body = _mp_encoder.encode(record)
    return _LEN.pack(len(body)) + body


def encode_records(records: Iterable[Record], format: LogFormat = "json") -> bytes:
    return b"".join(encode_record(r, format) for r in records)


def detect_format(data: bytes) -> LogFormat:
    """NDJSON when the first non-blank byte is ``{``, MessagePack otherwise.

    A MessagePack log starts with a big-endian length, whose first byte is 0
    for any record under 16 MiB; ``{`` (0x7b) would mean a 2 GiB record.
    """
    stripped = data.lstrip()
    return "json" if not stripped or stripped[:1] == b"{" else "msgpack"


def iter_records(data: bytes, format: LogFormat | None = None) -> Iterator[Record | TornTail]:
    """Records one by one; a torn tail is yielded last as a ``TornTail``.

    Raises ``LogCorrupt`` for an unreadable record that is not the last one.
    """
    for item in _iter(data, format, _json_decoder, _mp_decoder):
        yield item if isinstance(item, TornTail) else item[1]


class RawReader:
    """Reads a log's complete records as ``RawRecord``s, in chunks.

    Replay is the hot path: an NDJSON chunk of about ``chunk_bytes`` is
    decoded by one decoder call (a JSON string cannot hold a raw newline, so
    every newline separates two records), MessagePack in a tight loop; and
    reading chunk by chunk keeps memory flat however long the log. Anything
    odd in a chunk (blank lines, a damaged record) takes the careful
    line-by-line path, which skips blank lines and raises ``LogCorrupt``.

    After ``chunks()`` is exhausted, ``torn`` holds the torn tail, if any.
    ``offset(position)`` is the byte offset of the record at that position
    (counting complete records from 0), for error messages.
    """

    def __init__(
        self, data: bytes, format: LogFormat | None = None, chunk_bytes: int = 1 << 18
    ) -> None:
        self.data = data
        self.format: LogFormat = format or detect_format(data)
        self.chunk_bytes = chunk_bytes
        self.torn: TornTail | None = None
        self._offsets: list[int] | None = [] if self.format == "msgpack" else None

    def chunks(self) -> Iterator[list[RawRecord]]:
        if self.format == "msgpack":
            return self._msgpack_chunks()
        return self._json_chunks()

    def offset(self, position: int) -> int | None:
        if self._offsets is None:  # NDJSON: find the non-blank lines
            offsets = []
            at = 0
            for line in self.data.split(b"\n"):
                if line.strip():
                    offsets.append(at)
                at += len(line) + 1
            self._offsets = offsets
        return self._offsets[position] if 0 <= position < len(self._offsets) else None

    def _json_chunks(self) -> Iterator[list[RawRecord]]:
        data = self.data
        cut = data.rfind(b"\n") + 1  # everything before is complete lines
        start = 0
        line_no = 0
        bulk = _json_raw_list.decode
        while start < cut:
            end = data.find(b"\n", min(start + self.chunk_bytes, cut - 1))
            piece = data[start:end]
            lines = piece.count(b"\n") + 1
            records: list[RawRecord] | None
            try:
                records = bulk(b"[" + piece.replace(b"\n", b",") + b"]")
            except (msgspec.DecodeError, msgspec.ValidationError):
                records = None
            if records is None or len(records) != lines:
                records = []
                for item in _iter_json(data, _json_raw_decoder, start, end + 1, line_no):
                    assert not isinstance(item, TornTail)  # every line here is complete
                    records.append(item[1])
            yield records
            line_no += lines
            start = end + 1
        if data[cut:].strip():
            try:
                yield [_json_raw_decoder.decode(data[cut:])]
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                self.torn = TornTail(cut, len(data) - cut, f"incomplete last line: {exc}")

    def _msgpack_chunks(self) -> Iterator[list[RawRecord]]:
        data = self.data
        offsets = self._offsets
        assert offsets is not None
        decode = _mp_raw_decoder.decode
        unpack = _LEN.unpack_from
        size = len(data)
        offset = 0
        records: list[RawRecord] = []
        while offset < size:
            if size - offset < 4:
                self.torn = TornTail(offset, size - offset, "incomplete length prefix")
                break
            (length,) = unpack(data, offset)
            start = offset + 4
            end = start + length
            if end > size:
                self.torn = TornTail(offset, size - offset, f"record of {length} bytes cut short")
                break
            try:
                # A bytes slice, not a memoryview: a Raw that keeps a view
                # alive made replay of a 50k-step log 40% slower (measured).
                records.append(decode(data[start:end]))
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                raise LogCorrupt(
                    f"record {len(offsets) + 1} (byte {offset}) is not a log record: {exc}",
                    offset,
                ) from None
            offsets.append(offset)
            offset = end
            if len(records) == 4096:
                yield records
                records = []
        if records:
            yield records


class RawLog(msgspec.Struct, frozen=True):
    """Every complete record of a log as a ``RawRecord``, and the torn tail, if any."""

    records: list[RawRecord]
    torn: TornTail | None = None


_json_raw_list = msgspec.json.Decoder(list[RawRecord])


def read_raw_log(data: bytes, format: LogFormat | None = None) -> RawLog:
    """Every complete record as a ``RawRecord``, and the torn tail, if any.

    Raises ``LogCorrupt`` for an unreadable record that is not the last one.
    """
    reader = RawReader(data, format)
    records = [r for chunk in reader.chunks() for r in chunk]
    return RawLog(records, reader.torn)


def _iter(
    data: bytes,
    format: LogFormat | None,
    json_decoder: msgspec.json.Decoder[_R],
    mp_decoder: msgspec.msgpack.Decoder[_R],
) -> Iterator[tuple[int, _R] | TornTail]:
    fmt = format or detect_format(data)
    if fmt == "json":
        return _iter_json(data, json_decoder)
    return _iter_msgpack(data, mp_decoder)


def _iter_json(
    data: bytes,
    decoder: msgspec.json.Decoder[_R],
    offset: int = 0,
    size: int | None = None,
    line_no: int = 0,
) -> Iterator[tuple[int, _R] | TornTail]:
    """Line by line from ``offset`` to ``size``; ``line_no`` lines come before ``offset``."""
    size = len(data) if size is None else size
    decode = decoder.decode
    find = data.find
    while offset < size:
        end = find(b"\n", offset, size)
        complete = end >= 0
        stop = end if complete else size
        line = data[offset:stop]
        line_no += 1
        try:
            yield offset, decode(line)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            if not line.strip():
                pass  # blank lines are allowed (a trailing one, an editor's)
            elif not complete:
                yield TornTail(offset, len(line), f"incomplete last line: {exc}")
                return
            else:
                raise LogCorrupt(
                    f"line {line_no} (byte {offset}) is not a log record: {exc}", offset, line_no
                ) from None
        offset = stop + 1


def _iter_msgpack(
    data: bytes, decoder: msgspec.msgpack.Decoder[_R]
) -> Iterator[tuple[int, _R] | TornTail]:
    offset = 0
    size = len(data)
    n = 0
    decode = decoder.decode
    unpack = _LEN.unpack_from
    while offset < size:
        n += 1
        if size - offset < 4:
            yield TornTail(offset, size - offset, "incomplete length prefix")
            return
        (length,) = unpack(data, offset)
        start = offset + 4
        if start + length > size:
            yield TornTail(offset, size - offset, f"record of {length} bytes cut short")
            return
        try:
            record = decode(data[start : start + length])
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise LogCorrupt(
                f"record {n} (byte {offset}) is not a log record: {exc}", offset
            ) from None
        yield offset, record
        offset = start + length


def decode_log(data: bytes, format: LogFormat | None = None) -> LogRead:
    """All complete records of a log, and its torn tail, if any."""
    records: list[Record] = []
    torn: TornTail | None = None
    for item in iter_records(data, format):
        if isinstance(item, TornTail):
            torn = item
        else:
            records.append(item)
    return LogRead(tuple(records), torn)


def budget_to_wire(budget: Budget | BudgetRemaining | None) -> dict[str, int] | None:
    """A start budget as the camelCase mapping ``run.started`` records (unset limits omitted)."""
    if budget is None:
        return None
    out: dict[str, int] = {}
    for field, name in (
        ("steps", "steps"),
        ("cost_minor_units", "costMinorUnits"),
        ("wall_clock_ms", "wallClockMs"),
    ):
        value = getattr(budget, field)
        if value is not None:
            out[name] = int(value)
    return out


class Recorder:
    """Builds the log records of one run as a host drives it.

    ``started`` after ``start``, ``applied`` after each ``advance`` that was
    accepted, ``rejected`` (optionally) for events that were not.
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
    ) -> list[Record]:
        data = {
            "flowId": flow.id,
            "version": flow.version,
            "specHash": flow.spec_hash,
            "input": input,
            "budget": budget_to_wire(budget),
            "depth": depth,
        }
        out = [self._make(RUN_STARTED, at, data)]
        out.extend(self._effects(decision.effects, at))
        return out

    def applied(self, event: Event, decision: Decision) -> list[Record]:
        at = event.at_ms
        out = [self._make(EVENT_REPORTED, at, event_to_wire(event))]
        out.extend(self._effects(decision.effects, at))
        return out

    def rejected(self, event: Event, reason: str) -> list[Record]:
        data = {"event": event_to_wire(event), "reason": reason}
        return [self._make(EVENT_REJECTED, event.at_ms, data)]

    def _effects(self, effects: tuple[Effect, ...], at: int) -> list[Record]:
        out = [self._make(EFFECT_EMITTED, at, effect_to_wire(e)) for e in effects]
        for effect in effects:
            if isinstance(effect, Settled):
                out.append(self._make(RUN_SETTLED, at, settled_record_data(effect)))
        return out


def settled_record_data(effect: Settled) -> dict[str, Any]:
    """The data of the ``run.settled`` record that follows a ``settled`` effect."""
    wire = effect_to_wire(effect)
    return {k: wire[k] for k in ("status", "output", "error", "exhausted") if k in wire}
