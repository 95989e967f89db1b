"""The event log: records, their byte formats, and a recorder for hosts.

A log is a sequence of envelopes ``{"type", "index", "runId", "at", "data"}``,
one per line as NDJSON, or as MessagePack with each record prefixed by its
length (a 4-byte unsigned big-endian integer) so that a torn tail can be told
from corruption. ``index`` increases by one within a run, from 0.

Record types:

``run.started``     data: flowId, version, specHash, input, budget, depth, runId
``event.reported``  data: the event, as wire JSON
``event.rejected``  data: {event, reason} - optional; replay checks it is still rejected
``effect.emitted``  data: the effect, as wire JSON
``run.settled``     data: status, output, error, exhausted

Within one decision the order is fixed: ``event.reported`` first, then one
``effect.emitted`` per effect in emission order; when the run settles, the
``settled`` effect is followed by ``run.settled``.

Unknown record types and unknown fields are ignored by readers, so that new
fields never break old logs. This module turns bytes into records and back;
reading and writing files is the caller's business.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from typing import Any, Literal, TypeAlias

import msgspec

from ._errors import FlowcoreError
from ._interp import Decision
from ._spec import Flow
from ._wire import BudgetRemaining, Effect, Event, Settled, effect_to_wire, event_to_wire

__all__ = [
    "LogCorrupt",
    "LogFormat",
    "LogRead",
    "Record",
    "Recorder",
    "TornTail",
    "decode_log",
    "encode_record",
    "encode_records",
    "iter_records",
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
    """A record in the middle of a log cannot be read: never skipped."""

    def __init__(self, message: str, offset: int, line: int | None = None) -> None:
        self.offset = offset
        self.line = line
        super().__init__(message)


_json_encoder = msgspec.json.Encoder()
_json_decoder = msgspec.json.Decoder(Record)
_mp_encoder = msgspec.msgpack.Encoder()
_mp_decoder = msgspec.msgpack.Decoder(Record)
_LEN = struct.Struct(">I")


def encode_record(record: Record, format: LogFormat = "json") -> bytes:
    """One record as bytes: a JSON line (with its newline) or a framed MessagePack map."""
    if format == "json":
        return _json_encoder.encode(record) + b"\n"
    body = _mp_encoder.encode(record)
    return _LEN.pack(len(body)) + body


def encode_records(records: Iterable[Record], format: LogFormat = "json") -> bytes:
    return b"".join(encode_record(r, format) for r in records)


def _detect(data: bytes) -> LogFormat:
    stripped = data.lstrip()
    return "json" if not stripped or stripped[:1] == b"{" else "msgpack"


def iter_records(data: bytes, format: LogFormat | None = None) -> Iterator[Record | TornTail]:
    """Records one by one; a torn tail is yielded last as a ``TornTail``.

    Raises ``LogCorrupt`` for an unreadable record that is not the last one.
    """
    fmt = format or _detect(data)
    if fmt == "json":
        yield from _iter_json(data)
    else:
        yield from _iter_msgpack(data)


def _iter_json(data: bytes) -> Iterator[Record | TornTail]:
    offset = 0
    line_no = 0
    size = len(data)
    while offset < size:
        end = data.find(b"\n", offset)
        complete = end >= 0
        stop = end if complete else size
        line = data[offset:stop]
        line_no += 1
        if line.strip():
            try:
                yield _json_decoder.decode(line)
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                if not complete:
                    yield TornTail(offset, len(line), f"incomplete last line: {exc}")
                    return
                raise LogCorrupt(
                    f"line {line_no} (byte {offset}) is not a log record: {exc}", offset, line_no
                ) from None
        offset = stop + 1


def _iter_msgpack(data: bytes) -> Iterator[Record | TornTail]:
    offset = 0
    size = len(data)
    n = 0
    while offset < size:
        n += 1
        if size - offset < _LEN.size:
            yield TornTail(offset, size - offset, "incomplete length prefix")
            return
        (length,) = _LEN.unpack_from(data, offset)
        start = offset + _LEN.size
        if start + length > size:
            yield TornTail(offset, size - offset, f"record of {length} bytes cut short")
            return
        try:
            yield _mp_decoder.decode(data[start : start + length])
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise LogCorrupt(
                f"record {n} (byte {offset}) is not a log record: {exc}", offset
            ) from None
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


class Recorder:
    """Builds the log records of one run as a host drives it.

    ``started`` after ``start``, ``applied`` after each ``advance`` that was
    accepted, ``rejected`` (optionally) for events that were not.
    """

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.index = 0

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
        budget: BudgetRemaining | None = None,
        depth: int = 0,
    ) -> list[Record]:
        data = {
            "flowId": flow.id,
            "version": flow.version,
            "specHash": flow.spec_hash,
            "input": input,
            "budget": None if budget is None else msgspec.to_builtins(budget),
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
                wire = effect_to_wire(effect)
                data = {k: wire[k] for k in ("status", "output", "error", "exhausted") if k in wire}
                out.append(self._make(RUN_SETTLED, at, data))
        return out
