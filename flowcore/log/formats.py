"""The log's byte formats: NDJSON and framed MessagePack, written
(``encode_records``) and read (``iter_records``, ``decode_log``, and
``RawReader`` in chunks for replay), with a torn tail told from corruption.
``records`` describes the log.

This module turns bytes into records and back; it must never do I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from typing import TypeVar

import msgspec

from .record_types import LogCorrupt, LogFormat, LogRead, RawRecord, Record, why
from .report import TornTail

# What decoding a record can raise besides DecodeError/ValidationError: msgspec
# recurses once per nesting level, so 50,000 nested lists raise RecursionError.
# flowcore data nests at most MAX_DEPTH (64) levels, so no record a flowcore
# host writes, nor any prefix of one, comes near the limit: such a record is
# corruption, never a torn tail.
TOO_DEEP = "nested too deeply to decode"


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
                # msgspec reads past unknown fields without checking their
                # bytes: the whole text is checked as UTF-8 here, so that no
                # damaged byte goes unnoticed (0.05 us a step, measured).
                piece.decode("utf-8")
                records = bulk(b"[" + piece.replace(b"\n", b",") + b"]")
            except (msgspec.DecodeError, msgspec.ValidationError, RecursionError, ValueError):
                records = None  # the careful path below says which line and why
            if records is None or len(records) != lines:
                records = []
                for item in _iter_json(data, _json_raw_decoder, start, end + 1, line_no):
                    assert not isinstance(item, TornTail)  # every line here is complete
                    records.append(item[1])
            yield records
            line_no += lines
            start = end + 1
        if data[cut:].strip():
            torn = _last_json_line(data, cut, line_no, _json_raw_decoder)
            if isinstance(torn, TornTail):
                self.torn = torn
            else:
                yield [torn]

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
                self.torn = _short_frame(data, offset, length, len(offsets) + 1)
                break
            # A bytes slice, not a memoryview: a Raw that keeps a view alive
            # made replay of a 50k-step log 40% slower (measured).
            frame = data[start:end]
            try:
                record = decode(frame)
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                raise LogCorrupt(
                    f"record {len(offsets) + 1} (byte {offset}) is not a log record: {why(exc)}",
                    offset,
                ) from None
            except RecursionError:
                raise LogCorrupt(
                    f"record {len(offsets) + 1} (byte {offset}) is not a log record: {TOO_DEEP}",
                    offset,
                ) from None
            # Five entries, the last one ``data``, as flowcore writes them: the
            # other four are then the required fields, which the decoder read
            # and checked, and ``data`` is replay's to read. Otherwise an
            # unknown field, whose bytes the decoder skipped unread, may hide
            # a damaged byte: read the frame in full. (Two byte comparisons,
            # not a decode: this runs for every record.)
            if frame[0] != 0x85 or not frame.startswith(
                b"\xa4data", len(frame) - len(record.data) - 5
            ):
                _check_msgpack_frame(frame, offset, record.index)
            records.append(record)
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
        if end < 0:  # the last line, without its newline: a record or a torn tail
            if data[offset:size].strip():
                last = _last_json_line(data, offset, line_no, decoder, size)
                yield last if isinstance(last, TornTail) else (offset, last)
            return
        line = data[offset:end]
        line_no += 1
        try:
            item = decode(line)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            if line.strip():  # blank lines are allowed (a trailing one, an editor's)
                raise LogCorrupt(
                    f"line {line_no} (byte {offset}) is not a log record: {why(exc)}",
                    offset,
                    line_no,
                ) from None
        except RecursionError:
            raise _too_deep(offset, line_no) from None
        else:
            _check_utf8(line, offset, line_no, item.index)
            yield offset, item
        offset = end + 1


def _last_json_line(
    data: bytes,
    offset: int,
    line_no: int,
    decoder: msgspec.json.Decoder[_R],
    size: int | None = None,
) -> _R | TornTail:
    """The unterminated last line from ``offset``: a record, or a torn tail.

    ``line_no`` lines come before it. A torn tail is a record cut short: a
    *prefix* of a record's line, which begins its JSON object and never gets
    to close it. A line that does not decode but whose object closes (a
    damaged final newline leaves ``{...}x``), or that does not begin with
    ``{``, is no prefix of a record: corruption, not a tear.
    """
    line = data[offset:size]
    line_no += 1
    try:
        record = decoder.decode(line)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        reason = why(exc)
    except RecursionError:
        raise _too_deep(offset, line_no) from None
    else:
        _check_utf8(line, offset, line_no, record.index)
        return record
    try:
        line.decode("utf-8")
    except UnicodeDecodeError as exc:
        # A tear may cut a character in two, at the very end; nowhere else.
        if exc.end != len(line) or exc.reason != "unexpected end of data":
            raise _not_utf8(exc, offset, line_no) from None
    if not _json_prefix_of_object(line):
        first = "not a flowcore log: " if offset == 0 else ""
        raise LogCorrupt(
            f"{first}line {line_no} (byte {offset}), the last, is not a log record and not one "
            f"cut short: {reason}",
            offset,
            line_no,
        )
    return TornTail(offset, len(line), f"incomplete last line: {reason}")


def _too_deep(offset: int, line_no: int) -> LogCorrupt:
    return LogCorrupt(
        f"line {line_no} (byte {offset}) is not a log record: {TOO_DEEP}", offset, line_no
    )


def _check_utf8(line: bytes, offset: int, line_no: int, index: int) -> None:
    """A decoded line must be UTF-8 throughout: msgspec skips unknown fields' bytes."""
    try:
        line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _not_utf8(exc, offset, line_no, index) from None


def _not_utf8(
    exc: UnicodeDecodeError, offset: int, line_no: int, index: int | None = None
) -> LogCorrupt:
    """A line that is not UTF-8 text (``index`` when its envelope could be read)."""
    record = "" if index is None else f", record {index}"
    return LogCorrupt(
        f"line {line_no} (byte {offset}{record}) is not UTF-8 text: {exc.reason} at byte "
        f"{offset + exc.start}",
        offset,
        line_no,
        index,
    )


def _check_msgpack_frame(frame: bytes, offset: int, index: int) -> None:
    """Decode every byte of a framed record (``LogCorrupt`` if one does not decode).

    The envelope decoder skips unknown fields without reading them (not even
    their text as UTF-8); a frame that is not exactly as flowcore encodes its
    envelope is read in full once, so that no damaged byte goes unnoticed.
    """
    try:
        msgspec.msgpack.decode(frame)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        problem = why(exc)
    except RecursionError:
        problem = TOO_DEEP
    else:
        return
    raise LogCorrupt(
        f"the record at byte {offset} (index {index}) holds bytes that do not decode: {problem}",
        offset,
        index=index,
    )


_JSON_SPACE = b" \t\r\n"
_OPEN = frozenset(b"{[")
_CLOSE = frozenset(b"}]")
_QUOTE = ord('"')
_BACKSLASH = ord("\\")


def _json_prefix_of_object(line: bytes) -> bool:
    """Whether ``line`` can be a JSON object cut short: ``{`` first, never closed.

    A scan of brackets outside strings, not a parse: for a prefix of a valid
    object it is exact (the outer object closes only at its last byte), and it
    never recurses, however deep the nesting.
    """
    text = line.lstrip(_JSON_SPACE)
    if not text.startswith(b"{"):
        return False
    depth = 0
    in_string = escaped = False
    for byte in text:
        if in_string:
            if escaped:
                escaped = False
            elif byte == _BACKSLASH:
                escaped = True
            elif byte == _QUOTE:
                in_string = False
        elif byte == _QUOTE:
            in_string = True
        elif byte in _OPEN:
            depth += 1
        elif byte in _CLOSE:
            depth -= 1
            if depth == 0:
                return False  # the object closed: whatever follows, it is no prefix
    return True


def _short_frame(data: bytes, offset: int, length: int, n: int) -> TornTail:
    """The MessagePack frame at ``offset`` claims more bytes than remain: a torn tail.

    Unless what remains after its length prefix is no prefix of a record: a
    record is a map, so the bytes must begin a map, and must not hold a
    complete value (the record was then written whole and its length is
    damaged, or the frames after it were read as its body).
    """
    rest = data[offset + 4 :]
    if rest and (rest[0] not in _MP_MAPS or _msgpack_end(rest) is not None):
        if offset == 0:  # nothing before it was a record either
            raise LogCorrupt(
                "not a flowcore log: it is not NDJSON (it does not begin with '{'), and as "
                f"MessagePack its first record would be {length} bytes long, more than the "
                f"{len(data)} bytes there are",
                0,
            )
        raise LogCorrupt(
            f"record {n} (byte {offset}) claims {length} bytes, more than remain, but the "
            f"{len(rest)} bytes after its length prefix are not a record cut short: "
            "its length prefix is damaged",
            offset,
        )
    return TornTail(offset, len(data) - offset, f"record of {length} bytes cut short")


_MP_MAPS = frozenset((*range(0x80, 0x90), 0xDE, 0xDF))
# MessagePack's fixed-size types: first byte -> bytes the value takes.
_MP_FIXED = {
    0xC0: 1, 0xC2: 1, 0xC3: 1,  # nil, false, true
    0xCA: 5, 0xCB: 9,  # float 32, 64
    0xCC: 2, 0xCD: 3, 0xCE: 5, 0xCF: 9,  # uint 8..64
    0xD0: 2, 0xD1: 3, 0xD2: 5, 0xD3: 9,  # int 8..64
    0xD4: 3, 0xD5: 4, 0xD6: 6, 0xD7: 10, 0xD8: 18,  # fixext 1..16
}  # fmt: skip
# Types with a length: first byte -> (bytes of the length, extra header bytes).
_MP_SIZED = {
    0xC4: (1, 0), 0xC5: (2, 0), 0xC6: (4, 0),  # bin
    0xC7: (1, 1), 0xC8: (2, 1), 0xC9: (4, 1),  # ext (and its type byte)
    0xD9: (1, 0), 0xDA: (2, 0), 0xDB: (4, 0),  # str
}  # fmt: skip
# Containers: first byte -> (bytes of the count, items per count).
_MP_CONTAINERS = {0xDC: (2, 1), 0xDD: (4, 1), 0xDE: (2, 2), 0xDF: (4, 2)}


def _msgpack_end(data: bytes) -> int | None:
    """Where the MessagePack value at the start of ``data`` ends; None if it does not.

    None when ``data`` stops before the value is complete (or holds a byte no
    value begins with). Iterative: it counts the items still due instead of
    recursing, so deep nesting cannot exhaust the stack.
    """
    pos = 0
    due = 1  # values still to skip
    size = len(data)
    while due:
        if pos >= size:
            return None
        first = data[pos]
        due -= 1
        if first <= 0x7F or first >= 0xE0:  # positive / negative fixint
            pos += 1
        elif first <= 0x8F:  # fixmap
            pos += 1
            due += 2 * (first & 0x0F)
        elif first <= 0x9F:  # fixarray
            pos += 1
            due += first & 0x0F
        elif first <= 0xBF:  # fixstr
            pos += 1 + (first & 0x1F)
        elif first in _MP_FIXED:
            pos += _MP_FIXED[first]
        elif first in _MP_SIZED or first in _MP_CONTAINERS:
            width, extra = _MP_SIZED.get(first) or _MP_CONTAINERS[first]
            if pos + 1 + width > size:
                return None
            count = int.from_bytes(data[pos + 1 : pos + 1 + width], "big")
            pos += 1 + width
            if first in _MP_SIZED:
                pos += extra + count
            else:
                due += extra * count
        else:  # 0xC1: never used
            return None
    return pos if pos <= size else None


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
            yield _short_frame(data, offset, length, n)
            return
        frame = data[start : start + length]
        try:
            record = decode(frame)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise LogCorrupt(
                f"record {n} (byte {offset}) is not a log record: {why(exc)}", offset
            ) from None
        except RecursionError:
            raise LogCorrupt(
                f"record {n} (byte {offset}) is not a log record: {TOO_DEEP}", offset
            ) from None
        if _mp_encoder.encode(record) != frame:  # (decode_log is not replay's hot path)
            _check_msgpack_frame(frame, offset, record.index)
        yield offset, record
        offset = start + length


def as_records(records: bytes | LogRead | Iterable[Record]) -> list[Record]:
    """The records of a log given as its bytes (decoded), a ``LogRead`` or the records."""
    if isinstance(records, (bytes, bytearray, memoryview)):
        records = decode_log(bytes(records))
    if isinstance(records, LogRead):
        records = records.records
    return list(records)


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
