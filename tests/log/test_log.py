"""The event log: both byte formats, torn tails, corruption, the recorder, the schema."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

import flowcore
from flowcore import EffectSucceeded, ErrorInfo, HumanAnswered, Record, Recorder
from flowcore.language.spec import Budget
from flowcore.log.records import (
    LogCorrupt,
    LogFormat,
    RawReader,
    RawRecord,
    TornTail,
    TypedRecord,
    decode_log,
    detect_format,
    encode_record,
    encode_records,
    iter_records,
    read_raw_log,
)
from scripts.gen_schemas import wire_schemas

REPO = Path(__file__).resolve().parents[2]
CONFORMANCE = REPO / "specs" / "conformance"

SPEC = """
flow: tiny
budget: {steps: 10}
tools: {t: {class: readonly}}
steps:
  - id: q
    ask_human: {question: "go?", options: [yes, no]}
  - id: a
    call_tool: {tool: t, input: {x: "${input.x}"}}
output: "${steps.a.output}"
"""


def recorded_run(budget: Any = None) -> list[Record]:
    """A complete run of SPEC, with one rejected event."""
    flow = flowcore.parse_flow(SPEC)
    rec = Recorder("r-1")
    d = flowcore.start(flow, {"x": 1.5}, run_id="r-1", now_ms=0, budget=budget)
    records = rec.started(flow, {"x": 1.5}, 0, d, budget=budget)
    bad = HumanAnswered(idempotency_key="r-1/q#1", answer="maybe", at_ms=1)
    with pytest.raises(flowcore.EventRejected) as info:
        flowcore.advance(d.state, bad)
    records += rec.rejected(bad, info.value.reason)
    for event in (
        HumanAnswered(idempotency_key="r-1/q#1", answer="yes", at_ms=2),
        EffectSucceeded(idempotency_key="r-1/a#1", output={"ok": [1, 2]}, at_ms=3),
    ):
        d = flowcore.advance(d.state, event)
        records += rec.applied(event, d)
    return records


FORMATS: tuple[LogFormat, ...] = ("json", "msgpack")


# --- the recorder ----------------------------------------------------------------------


def test_recorder_numbers_records_and_follows_settled_with_run_settled() -> None:
    records = recorded_run()
    assert [r.index for r in records] == list(range(len(records)))
    assert {r.run_id for r in records} == {"r-1"}
    assert [r.type for r in records] == [
        "run.started",
        "effect.emitted",
        "event.rejected",
        "event.reported",
        "effect.emitted",
        "event.reported",
        "effect.emitted",
        "run.settled",
    ]
    assert records[0].data == {
        "flowId": "tiny",
        "version": 1,
        "specHash": flowcore.parse_flow(SPEC).spec_hash,
        "input": {"x": 1.5},
        "budget": None,
        "depth": 0,
        "semantics": flowcore.SEMANTICS,
    }
    assert records[-2].data["kind"] == "settled"
    assert records[-1].data == {"status": "completed", "output": {"ok": [1, 2]}}
    assert records[2].data["reason"].startswith("answer 'maybe' is not one of")


@pytest.mark.parametrize(
    "budget",
    [Budget(steps=5, cost_minor_units=7), flowcore.BudgetRemaining(steps=5, cost_minor_units=7)],  # type: ignore[arg-type]
    ids=["Budget", "BudgetRemaining"],
)
def test_recorder_writes_the_start_budget_in_camel_case_whatever_its_type(budget: Any) -> None:
    assert recorded_run(budget)[0].data["budget"] == {"steps": 5, "costMinorUnits": 7}


def test_recorder_can_continue_at_an_index() -> None:
    rec = Recorder("r-1", index=41)
    event = flowcore.CancelRequested(at_ms=5)
    assert rec.rejected(event, "no")[0].index == 41
    assert rec.index == 42


# --- byte formats ----------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_round_trip(fmt: LogFormat) -> None:
    records = recorded_run()
    data = encode_records(records, fmt)
    assert detect_format(data) == fmt
    read = decode_log(data)
    assert read.torn is None
    assert list(read.records) == records
    raw = read_raw_log(data)
    assert raw.torn is None
    assert [(r.type, r.index, r.run_id, r.at) for r in raw.records] == [
        (r.type, r.index, r.run_id, r.at) for r in records
    ]
    decode = msgspec.json.decode if fmt == "json" else msgspec.msgpack.decode
    assert [decode(bytes(r.data)) for r in raw.records] == [r.data for r in records]


def test_json_is_one_record_per_line_and_msgpack_is_length_framed() -> None:
    record = recorded_run()[0]
    line = encode_record(record, "json")
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert json.loads(line) == {
        "type": "run.started",
        "index": 0,
        "runId": "r-1",
        "at": 0,
        "data": record.data,
    }
    framed = encode_record(record, "msgpack")
    (length,) = struct.unpack(">I", framed[:4])
    assert length == len(framed) - 4
    assert msgspec.msgpack.decode(framed[4:]) == json.loads(line)


def test_unknown_fields_and_blank_lines_are_ignored() -> None:
    lines = [json.loads(encode_record(r)) for r in recorded_run()]
    lines[0]["future"] = {"added": "later"}
    lines[0]["data"]["alsoNew"] = 1
    text = "\n".join(json.dumps(x) for x in lines[:3]) + "\n\n" + json.dumps(lines[3]) + "\n\n"
    read = decode_log(text.encode())
    assert [r.index for r in read.records] == [0, 1, 2, 3]
    assert [r.index for r in read_raw_log(text.encode()).records] == [0, 1, 2, 3]


def test_the_bulk_reader_agrees_with_the_line_reader_on_odd_input() -> None:
    good = encode_records(recorded_run(), "json")
    two_on_a_line = good.replace(b"}\n{", b"},{", 1)  # not NDJSON: must not be accepted
    with pytest.raises(LogCorrupt):
        read_raw_log(two_on_a_line)
    with pytest.raises(LogCorrupt):
        decode_log(two_on_a_line)
    crlf = good.replace(b"\n", b"\r\n")
    assert len(read_raw_log(crlf).records) == len(decode_log(crlf).records) == 8


# --- torn tails --------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_cut_anywhere_in_the_last_record_is_a_torn_tail(fmt: LogFormat) -> None:
    records = recorded_run()
    head = encode_records(records[:-1], fmt)
    last = encode_record(records[-1], fmt)
    for cut in range(1, len(last) - (1 if fmt == "json" else 0)):
        data = head + last[:cut]
        read = decode_log(data)
        assert read.records == tuple(records[:-1]), cut
        assert read.torn is not None and read.torn.offset == len(head), cut
        assert read.torn.length == cut
        raw = read_raw_log(data)
        assert len(raw.records) == len(records) - 1
        assert raw.torn == read.torn


def test_a_complete_last_line_without_its_newline_is_not_torn() -> None:
    data = encode_records(recorded_run(), "json").rstrip(b"\n")
    assert decode_log(data).torn is None
    assert read_raw_log(data).torn is None
    assert len(read_raw_log(data).records) == 8


# --- corruption ---------------------------------------------------------------------------------


def test_a_damaged_line_in_the_middle_is_corruption_with_line_and_offset() -> None:
    lines = encode_records(recorded_run(), "json").splitlines(keepends=True)
    offset = sum(len(x) for x in lines[:3])
    lines[3] = b'{"type": "event.reported", "index": 3, oops}\n'
    data = b"".join(lines)
    for read in (decode_log, read_raw_log):
        with pytest.raises(LogCorrupt) as info:
            read(data)
        assert (info.value.line, info.value.offset) == (4, offset)
        assert f"line 4 (byte {offset})" in str(info.value)


def test_a_line_that_is_json_but_not_a_record_is_corruption() -> None:
    lines = encode_records(recorded_run(), "json").splitlines(keepends=True)
    lines[1] = b'{"type": "effect.emitted"}\n'
    with pytest.raises(LogCorrupt, match="line 2"):
        read_raw_log(b"".join(lines))


def test_a_damaged_msgpack_record_in_the_middle_is_corruption() -> None:
    records = recorded_run()
    head = encode_records(records[:2], "msgpack")
    garbage = struct.pack(">I", 3) + b"\xc1\xc1\xc1"
    data = head + garbage + encode_records(records[2:], "msgpack")
    for read in (decode_log, read_raw_log):
        with pytest.raises(LogCorrupt) as info:
            read(data)
        assert info.value.offset == len(head)


def test_iter_records_yields_the_torn_tail_last() -> None:
    data = encode_records(recorded_run(), "json")[:-5]
    items = list(iter_records(data))
    assert isinstance(items[-1], TornTail)
    assert all(isinstance(i, Record) for i in items[:-1])


@given(st.binary(max_size=200))
def test_garbage_is_read_or_refused_with_the_logs_own_error(data: bytes) -> None:
    for read in (decode_log, read_raw_log):
        try:
            read(data)
        except LogCorrupt:
            pass


# --- the JSON Schema -----------------------------------------------------------------------------


def _validator() -> Draft202012Validator:
    return Draft202012Validator(wire_schemas()["records"])


def test_records_schema_lists_every_record_type() -> None:
    schema = wire_schemas()["records"]
    assert schema["discriminator"]["propertyName"] == "type"
    assert set(schema["discriminator"]["mapping"]) == {
        "run.started",
        "event.reported",
        "event.rejected",
        "effect.emitted",
        "run.settled",
        "effect.redispatched",
        "scheduled.changed",
    }


def test_a_redispatched_record_is_built_validated_and_decoded() -> None:
    """``Recorder.redispatched``: the key, the recovery count and the lost worker."""
    rec = Recorder("r", index=7)
    (record,) = rec.redispatched("r/q#1", 2, "host:12:ab", 40)
    assert (record.type, record.index, record.at, rec.index) == ("effect.redispatched", 7, 40, 8)
    assert record.data == {"idempotencyKey": "r/q#1", "recovery": 2, "worker": "host:12:ab"}
    (unknown,) = rec.redispatched("r/q#1", 1, None, 41)
    assert unknown.data == {"idempotencyKey": "r/q#1", "recovery": 1}  # the worker left out
    validator = _validator()
    for each in (record, unknown):
        wire = json.loads(encode_record(each))
        assert [e.message for e in validator.iter_errors(wire)] == [], wire
        typed = msgspec.json.decode(encode_record(each), type=TypedRecord)
        assert typed.data.idempotency_key == "r/q#1"  # type: ignore[union-attr]
    for format in ("json", "msgpack"):
        assert decode_log(encode_records([record], format)).records == (record,)
    bad = {**json.loads(encode_record(record)), "data": {"idempotencyKey": "r/q#1", "recovery": -1}}
    assert list(validator.iter_errors(bad))


def test_every_recorded_record_validates_against_the_schema() -> None:
    validator = _validator()
    for record in recorded_run(Budget(steps=5)):  # type: ignore[arg-type]
        wire = json.loads(encode_record(record))
        assert [e.message for e in validator.iter_errors(wire)] == [], wire
        msgspec.json.decode(encode_record(record), type=TypedRecord)


def test_every_conformance_record_validates_against_the_schema() -> None:
    validator = _validator()
    checked = 0
    for log in sorted(CONFORMANCE.glob("*/log.ndjson")):
        if log.parent.name in ("corrupt-middle", "torn-tail"):
            continue
        for line in log.read_bytes().splitlines():
            wire = json.loads(line)
            assert [e.message for e in validator.iter_errors(wire)] == [], (log, wire)
            checked += 1
    assert checked > 400


def test_the_schema_rejects_a_malformed_record() -> None:
    validator = _validator()
    bad = {"type": "run.started", "index": -1, "runId": "r", "at": 0, "data": {}}
    assert list(validator.iter_errors(bad))


def test_raw_record_keeps_data_undecoded() -> None:
    raw = msgspec.json.decode(
        b'{"type":"x","index":0,"runId":"r","at":0,"data":{"b":1, "a":[2]}}', type=RawRecord
    )
    assert bytes(raw.data) == b'{"b":1, "a":[2]}'
    assert raw.type == "x"


def test_error_info_in_run_settled_round_trips() -> None:
    flow = flowcore.parse_flow(
        "flow: f\ntools: {t: {}}\nsteps:\n  - {id: a, call_tool: {tool: t}}\n"
    )
    rec = Recorder("r")
    d = flowcore.start(flow, None, run_id="r")
    records = rec.started(flow, None, 0, d)
    event = flowcore.EffectFailed(idempotency_key="r/a#1", error=ErrorInfo(type="x"), at_ms=1)
    records += rec.applied(event, flowcore.advance(d.state, event))
    assert records[-1].data == {"status": "failed", "error": {"type": "x"}}


@pytest.mark.parametrize("chunk", [1, 50, 300, 1 << 18])
def test_chunked_reading_agrees_with_line_by_line_reading(chunk: int) -> None:
    records = recorded_run() * 3
    records = [msgspec.structs.replace(r, index=i) for i, r in enumerate(records)]
    data = encode_records(records, "json")
    reader = RawReader(data, chunk_bytes=chunk)
    raw = [r for c in reader.chunks() for r in c]
    assert [(r.index, bytes(r.data)) for r in raw] == [
        (r.index, msgspec.json.encode(r.data)) for r in records
    ]
    assert reader.torn is None
    lines = data.splitlines(keepends=True)
    assert [reader.offset(i) for i in range(len(lines))] == [
        sum(len(x) for x in lines[:i]) for i in range(len(lines))
    ]
    # blank lines in some chunk, a damaged line in a later one: the exact line
    lines.insert(5, b"\n")
    lines[17] = b"{oops}\n"
    with pytest.raises(LogCorrupt) as info:
        for _ in RawReader(b"".join(lines), chunk_bytes=chunk).chunks():
            pass
    assert info.value.line == 18
    assert info.value.offset == sum(len(x) for x in lines[:17])
    torn = RawReader(b"".join(lines[:10]) + b'{"type":', chunk_bytes=chunk)
    assert sum(len(c) for c in torn.chunks()) == 9
    assert torn.torn is not None and torn.torn.offset == sum(len(x) for x in lines[:10])
