"""Hostile and damaged event logs: never misclassified, never a foreign error.

A real log (the incident-response example flow, driven by the simulator and
recorded with ``flowcore.Recorder``) is damaged the way disks, copies and
editors damage files: cuts, flipped bytes, invalid UTF-8, edited fields,
values no host can write. Each case is classified through the Python API and
through ``flowcore replay`` in a subprocess: exit 0 replays, 1 diverges, 2
refuses (corruption); never a traceback, never an "internal error", and
messages quote only short prefixes of what they could not read.

The rules are in specs/log.md: §1 (the ``at`` rule), §5 (torn tails,
corruption, and a log that ends inside a decision: cut with its own spec,
divergent against another), §6 (unknown record types).
"""

from __future__ import annotations

import functools
import os
import re
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

import flowcore
from flowcore import EventRejected, FlowcoreError, Record, Recorder, ReplayDivergence
from flowcore.log.records import (
    LogCorrupt,
    LogFormat,
    UnknownRecordType,
    decode_log,
    encode_records,
)
from flowcore.log.replay import ReplayReport, replay
from flowcore.testing import Fail, Ok, Responses, Signal, simulate

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "specs" / "examples"
INCIDENT = EXAMPLES / "incident.yaml"

# The incident log's last records (see test_the_log_is_the_one_the_cases_assume).
EVENT = 28  # event.reported: the postmortem subflow settled, at 5003
SETTLED_EFFECT = 29  # effect.emitted: the settled effect of that decision
RUN_SETTLED = 30  # run.settled
SUBFLOW_EFFECT = 27  # effect.emitted: run-subflow, from the decision of record 26 (at 5000)


def _world(**overrides: Any) -> dict[str, Any]:
    tools: dict[str, Any] = {
        "pagerduty.get_incident": Responses(
            [
                Fail("unavailable", "503", retryable=True),
                {"id": "INC-7", "title": "checkout latency", "service": "checkout"},
            ]
        ),
        "logs.search": {"errors": 42, "top": "db pool exhausted"},
        "metrics.query": {"p99_ms": 2300},
        "pagerduty.page": {"paged": "payments-oncall"},
        "slack.post": {"posted": True},
    }
    tools.update(overrides)
    return {
        "tools": tools,
        "agents": {
            "triager": Ok(
                {"owner": "payments-oncall", "severity": "high", "plan": "raise the db pool"},
                steps=1,
                cost=120,
            ),
            "security-reviewer": Ok("security: approved", steps=1, cost=40),
            "sre-reviewer": Ok("sre: approved", steps=1, cost=40),
            "writer": Ok("Postmortem: done", steps=1, cost=80),
        },
        "humans": {"decide": "page"},
        "signals": [Signal("fix-deployed", {"commit": "abc123"}, at_ms=5000)],
        "subflows": [flowcore.parse_flow((EXAMPLES / "postmortem.yaml").read_bytes())],
    }


def _simulated(**overrides: Any) -> tuple[Record, ...]:
    flow = flowcore.parse_flow(INCIDENT.read_bytes())
    run = simulate(flow, {"incident_id": "INC-7"}, run_id="r-1", **_world(**overrides))
    return tuple(run.log_of("r-1"))


@functools.cache
def _incident() -> tuple[flowcore.Flow, tuple[Record, ...]]:
    return flowcore.parse_flow(INCIDENT.read_bytes()), _simulated()


def flow() -> flowcore.Flow:
    return _incident()[0]


def records() -> tuple[Record, ...]:
    return _incident()[1]


def log(fmt: LogFormat = "json") -> bytes:
    return encode_records(records(), fmt)


def lines() -> list[bytes]:
    return log().splitlines(keepends=True)


def with_line(index: int, line: bytes) -> bytes:
    """The NDJSON log with the line of record ``index`` replaced."""
    out = lines()
    out[index] = line
    return b"".join(out)


def sub(index: int, pattern: bytes, repl: bytes) -> bytes:
    """``sed -E 's/pattern/repl/'`` on the line of record ``index`` (``repl`` literally)."""
    line = lines()[index]
    changed = re.sub(pattern, lambda _: repl, line, count=1)
    assert changed != line, (pattern, line)
    return with_line(index, changed)


def offset_of(index: int, fmt: LogFormat = "json") -> int:
    return len(encode_records(records()[:index], fmt))


# --- the command, in a subprocess ---------------------------------------------------------------


def cli(tmp_path: Path, data: bytes, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m flowcore_cli replay LOG`` with the flow next to the log."""
    path = tmp_path / "log.ndjson"
    path.write_bytes(data)
    (tmp_path / "flow.yaml").write_bytes(INCIDENT.read_bytes())
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    proc = subprocess.run(
        [sys.executable, "-m", "flowcore_cli", "replay", str(path), *args],
        capture_output=True,
        text=True,
        encoding="utf-8",
        errors="replace",
        timeout=120,
        env=env,
        check=False,
    )
    everything = proc.stdout + proc.stderr
    assert "Traceback" not in everything, everything
    assert "internal error" not in proc.stderr, proc.stderr
    return proc


def cli_refuses(tmp_path: Path, data: bytes, *args: str) -> str:
    """The command exits 2 with one ``flowcore: ...`` line on stderr: that line."""
    proc = cli(tmp_path, data, *args)
    assert proc.returncode == 2, (proc.stdout[-2000:], proc.stderr)
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("flowcore: ")
    return line


def corrupt(data: bytes | list[Record], **kwargs: Any) -> LogCorrupt:
    with pytest.raises(LogCorrupt) as info:
        replay(data, flow(), **kwargs)
    assert len(str(info.value)) < 1000
    return info.value


def test_the_log_is_the_one_the_cases_assume() -> None:
    types = [r.type for r in records()]
    assert len(types) == RUN_SETTLED + 1
    assert types[SUBFLOW_EFFECT:] == [
        "effect.emitted",
        "event.reported",
        "effect.emitted",
        "run.settled",
    ]
    assert [r.at for r in records()[SUBFLOW_EFFECT - 1 :]] == [5000, 5000, 5003, 5003, 5003]
    report = replay(log(), flow())
    assert report.ok and report.status == "completed"
    assert replay(log("msgpack"), flow()).ok


# --- 1. at ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("index", "should"),
    [
        (RUN_SETTLED, "belongs to the decision of record 28, whose at is 5003"),
        (SETTLED_EFFECT, "belongs to the decision of record 28, whose at is 5003"),
        (EVENT, "its event's atMs is 5003"),
        (SUBFLOW_EFFECT, "belongs to the decision of record 26, whose at is 5000"),
        (2, "belongs to the decision of record 0, whose at is 0"),
    ],
)
def test_an_at_that_contradicts_its_record_is_corruption(
    tmp_path: Path, index: int, should: str
) -> None:
    # sed -E 's/"at":[0-9]+/"at":7/' on one line: replay never looked at it.
    damaged = sub(index, rb'"at":[0-9]+', b'"at":7')
    exc = corrupt(damaged)
    assert exc.index == index and exc.offset == offset_of(index)
    assert f"record {index} (byte {offset_of(index)}) has at 7, but" in str(exc)
    assert should in str(exc)
    # The same records as MessagePack, and as records built in Python.
    edited = decode_log(damaged).records
    assert corrupt(encode_records(edited, "msgpack")).index == index
    assert corrupt(list(edited)).index == index
    line = cli_refuses(tmp_path, damaged)
    assert f"record {index}" in line and "has at 7" in line and should in line


def test_an_event_rejected_record_carries_its_events_at() -> None:
    spec = "flow: f\nsteps:\n  - {id: q, ask_human: {question: ok?, options: [yes, no]}}\n"
    f = flowcore.parse_flow(spec)
    rec = Recorder("r")
    d = flowcore.start(f, None, run_id="r", now_ms=0)
    out = rec.started(f, None, 0, d)
    bad = flowcore.HumanAnswered(idempotency_key="r/q#1", answer="maybe", at_ms=3)
    with pytest.raises(EventRejected) as refused:
        flowcore.advance(d.state, bad)
    out += rec.rejected(bad, refused.value.reason)
    good = flowcore.HumanAnswered(idempotency_key="r/q#1", answer="yes", at_ms=4)
    out += rec.applied(good, flowcore.advance(d.state, good))
    assert replay(encode_records(out), f).ok
    wire = encode_records(out).splitlines(keepends=True)
    i = next(i for i, r in enumerate(out) if r.type == "event.rejected")
    wire[i] = wire[i].replace(b'"at":3', b'"at":9', 1)
    with pytest.raises(LogCorrupt, match="has at 9, but its event's atMs is 3") as info:
        replay(b"".join(wire), f)
    assert info.value.index == i


def test_at_may_go_back_between_decisions_as_the_core_allows(tmp_path: Path) -> None:
    """The core takes max(clock, atMs) and accepts an event from the past; hosts
    record it as reported (specs/log.md §1). Such a log replays."""
    spec = """
flow: f
tools: {t: {class: readonly}}
steps:
  - id: both
    parallel:
      mode: all
      branches: {a: [{id: a, call_tool: {tool: t}}], b: [{id: b, call_tool: {tool: t}}]}
"""
    f = flowcore.parse_flow(spec)
    rec = Recorder("r")
    d = flowcore.start(f, None, run_id="r", now_ms=100)
    out = rec.started(f, None, 100, d)
    state = d.state
    for key, at in (("r/a#1", 50), ("r/b#1", 20)):  # both before the start, the second earlier
        event = flowcore.EffectSucceeded(idempotency_key=key, output=1, at_ms=at)
        d = flowcore.advance(state, event)
        state = d.state
        out += rec.applied(event, d)
    assert [r.at for r in out if r.type == "event.reported"] == [50, 20]
    report = replay(encode_records(out), f)
    assert report.ok and report.status == "completed"
    path = tmp_path / "back.ndjson"
    path.write_bytes(encode_records(out))
    (tmp_path / "f.yaml").write_text(spec)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "flowcore_cli",
            "replay",
            str(path),
            "--spec",
            str(tmp_path / "f.yaml"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


# --- 2. unknown record types --------------------------------------------------------------------


def test_an_unknown_record_type_is_refused_unless_allowed(tmp_path: Path) -> None:
    # sed 's/"type":"run.settled"/"type":"run.settlex"/': it used to be skipped without a word.
    damaged = sub(RUN_SETTLED, rb'"type":"run\.settled"', b'"type":"run.settlex"')
    with pytest.raises(UnknownRecordType) as info:
        replay(damaged, flow())
    exc = info.value
    assert isinstance(exc, LogCorrupt)
    assert (exc.index, exc.record_type, exc.offset) == (
        RUN_SETTLED,
        "run.settlex",
        offset_of(RUN_SETTLED),
    )
    assert f"record {RUN_SETTLED}" in str(exc) and "'run.settlex'" in str(exc)
    line = cli_refuses(tmp_path, damaged)
    assert f"record {RUN_SETTLED}" in line and "'run.settlex'" in line
    assert "--allow-unknown-types" in line
    # Allowed: skipped, counted, and shown in the trajectory.
    report = replay(damaged, flow(), allow_unknown_types=True)
    assert report.ok and report.records == len(records())
    (skipped,) = [e for e in report.trajectory if e.kind == "unknown-record"]
    assert (skipped.index, skipped.target, skipped.status) == (
        RUN_SETTLED,
        "run.settlex",
        "skipped",
    )
    proc = cli(tmp_path, damaged, "--allow-unknown-types")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "unknown-record" in proc.stdout and "run.settlex" in proc.stdout


def test_skipping_unknown_types_does_not_hide_a_missing_effect(tmp_path: Path) -> None:
    damaged = sub(SETTLED_EFFECT, rb'"type":"effect\.emitted"', b'"type":"effect.emitteX"')
    assert corrupt(damaged).index == SETTLED_EFFECT
    report = replay(damaged, flow(), allow_unknown_types=True, raise_on_divergence=False)
    assert report.divergence is not None and report.divergence.index == RUN_SETTLED
    assert cli(tmp_path, damaged, "--allow-unknown-types").returncode == 1


@pytest.mark.parametrize("fmt", ["json", "msgpack"])
def test_a_skipped_record_must_still_decode(fmt: LogFormat) -> None:
    line = lines()[RUN_SETTLED].replace(b'"type":"run.settled"', b'"type":"run.settlex"')
    damaged = with_line(RUN_SETTLED, line)
    if fmt == "msgpack":
        damaged = encode_records(decode_log(damaged).records, "msgpack")
    damaged = damaged[:-20] + damaged[-20:].replace(b"done", b"d\xffne")
    exc = corrupt(damaged, allow_unknown_types=True)
    assert exc.index == RUN_SETTLED, str(exc)


# --- 3. bytes that do not decode ---------------------------------------------------------------


# A string inside the data of each of the last records.
WORDS = {
    SUBFLOW_EFFECT: b"postmortem",
    EVENT: b"Postmortem: done",
    SETTLED_EFFECT: b"payments-oncall",
    RUN_SETTLED: b"abc123",
}


@pytest.mark.parametrize("index", sorted(WORDS))
@pytest.mark.parametrize("bad", [b"\xff", b"\xc3(", b"\xed\xa0\x80"])  # the last: a CESU surrogate
def test_invalid_utf8_anywhere_in_a_record_is_corruption(
    tmp_path: Path, index: int, bad: bytes
) -> None:
    line = lines()[index]
    at = line.index(WORDS[index], line.index(b'"data":')) + 1
    damaged = with_line(index, line[:at] + bad + line[at + 1 :])
    exc = corrupt(damaged)
    assert exc.index == index and exc.offset == offset_of(index), str(exc)
    if bad == b"\xff":
        assert f"record {index}" in cli_refuses(tmp_path, damaged)


@pytest.mark.parametrize("index", sorted(WORDS))
def test_invalid_utf8_in_a_msgpack_record_is_corruption(index: int) -> None:
    data = bytearray(log("msgpack"))
    start = offset_of(index, "msgpack")
    at = data.index(WORDS[index], data.index(b"data", start)) + 1
    assert at < offset_of(index + 1, "msgpack")
    data[at] = 0xFF
    exc = corrupt(bytes(data))
    assert exc.index == index and exc.offset == start, str(exc)


@pytest.mark.parametrize("fmt", ["json", "msgpack"])
def test_invalid_utf8_in_a_field_no_reader_knows_is_corruption(
    tmp_path: Path, fmt: LogFormat
) -> None:
    """Decoders skip unknown fields unread; a flipped byte in a key makes one. The
    event below still applies (its usage is only counted), so nothing else tells."""
    data = log(fmt)
    start, end = offset_of(EVENT, fmt), offset_of(EVENT + 1, fmt)
    key = b'"usage"' if fmt == "json" else b"\xa5usage"
    at = data.index(key, start) + len(key) - 5
    assert at < end
    damaged = data[:at] + b"\xf5" + data[at + 1 :]
    exc = corrupt(damaged)
    assert exc.index == EVENT and exc.offset == start, str(exc)
    assert f"record {EVENT}" in cli_refuses(tmp_path, damaged)
    # An unknown field of the envelope itself.
    if fmt == "json":
        line = lines()[EVENT].replace(b'"at":5003,', b'"at":5003,"n\xffte":1,', 1)
        extra = with_line(EVENT, line)
    else:
        frame = data[start + 4 : end]
        body = b"\x86" + frame[1:] + b"\xa2n\xff\x01"  # a sixth entry, after data
        extra = data[:start] + struct.pack(">I", len(body)) + body + data[end:]
    exc = corrupt(extra)
    assert exc.index == EVENT and exc.offset == start, str(exc)


# --- 4. a log that ends inside a decision ---------------------------------------------------


def test_a_clean_end_inside_a_decision_is_a_cut_like_a_torn_tail(tmp_path: Path) -> None:
    """``head -c N`` and ``head -c N+1`` agree: the log was cut inside a decision."""
    clean = log()[: offset_of(EVENT + 1)]  # head -c N: right after the last event.reported
    torn = log()[: offset_of(EVENT + 1) + 1]  # head -c N+1: one byte of the next record
    for data in (clean, torn):
        report = replay(data, flow())
        assert report.ok and [e.__struct_config__.tag for e in report.unrecorded] == ["settled"]
        assert report.last_index == EVENT
    proc = cli(tmp_path, clean)
    assert proc.returncode == 0, proc.stdout
    out = " ".join(proc.stdout.split())
    assert f"the log ends inside the decision of record {EVENT} (event.reported)" in out
    assert "unrecorded: the log was cut by its end" in out
    assert replay(clean, flow(), until=EVENT).ok  # until = the last index: a cut too


def test_a_log_ending_inside_a_decision_diverges_against_another_spec(tmp_path: Path) -> None:
    """Moving a run to a new version: an effect past the end may be one it adds."""
    newer_text = INCIDENT.read_text().replace("\nsteps:", "\ndescription: v2\nsteps:", 1)
    newer = flowcore.parse_flow(newer_text)
    assert newer.spec_hash != flow().spec_hash
    for data in (log()[: offset_of(EVENT + 1)], log()[: offset_of(EVENT + 1) + 1]):
        with pytest.raises(ReplayDivergence) as info:
            replay(data, newer)
        div = info.value
        assert div.index == EVENT + 1 and div.expected is None and div.actual["kind"] == "settled"
        assert f"the log ends inside the decision of record {EVENT}" in str(div)
    spec = tmp_path / "newer.yaml"
    spec.write_text(newer_text)
    proc = cli(tmp_path, log()[: offset_of(EVENT + 1)], "--spec", str(spec))
    assert proc.returncode == 1
    assert f"DIVERGED at index {EVENT + 1}" in proc.stdout
    assert f"--until {EVENT}" in " ".join(proc.stdout.split())
    proc = cli(tmp_path, log()[: offset_of(EVENT + 1)], "--spec", str(spec), "--until", str(EVENT))
    assert proc.returncode == 0, proc.stdout
    assert "unrecorded: the log was cut by --until" in " ".join(proc.stdout.split())


def test_a_torn_tail_inside_a_decision_says_which_effects_are_unrecorded(tmp_path: Path) -> None:
    torn = log()[: offset_of(EVENT + 1) + 1]  # head -c N+1: one byte of the settled effect
    report = replay(torn, flow())
    assert report.ok and report.torn is not None and report.torn.offset == offset_of(EVENT + 1)
    assert [e.__struct_config__.tag for e in report.unrecorded] == ["settled"]
    proc = cli(tmp_path, torn)
    assert proc.returncode == 0, proc.stdout
    out = " ".join(proc.stdout.split())
    assert f"torn last record at byte {offset_of(EVENT + 1)}" in out
    assert f"the log ends inside the decision of record {EVENT} (event.reported)" in out
    assert "are not recorded (unrecorded: the log was cut by a torn last record): settled" in out


def test_a_divergence_says_how_to_replay_the_records_before_it(tmp_path: Path) -> None:
    damaged = sub(SUBFLOW_EFFECT, rb'"flowId":"postmortem"', b'"flowId":"postmortex"')
    with pytest.raises(ReplayDivergence) as info:
        replay(damaged, flow())
    assert info.value.index == SUBFLOW_EFFECT
    # A folder with a long name: the command to copy is printed whole on its line,
    # never broken inside (the output is 160 columns wide when piped).
    folder = tmp_path / ("a-folder-with-a-long-name-" * 4)
    folder.mkdir()
    proc = cli(folder, damaged)
    assert proc.returncode == 1
    assert f"DIVERGED at index {SUBFLOW_EFFECT}" in proc.stdout
    assert "to replay only the records before the divergence" in proc.stdout
    (hint,) = [line for line in proc.stdout.splitlines() if "before the divergence" in line]
    assert hint.endswith(f"--until {SUBFLOW_EFFECT - 1}"), hint
    cut = cli(folder, damaged, "--until", str(SUBFLOW_EFFECT - 1))
    assert cut.returncode == 0, cut.stdout


# --- torn tails are records cut short, nothing else ------------------------------------------


@pytest.mark.parametrize("last", [b"x", b"{", b"\x00", b"\x0b", b"}"])
def test_a_damaged_final_newline_is_corruption_not_a_torn_tail(tmp_path: Path, last: bytes) -> None:
    damaged = log()[:-1] + last
    exc = corrupt(damaged)
    assert (exc.line, exc.offset) == (RUN_SETTLED + 1, offset_of(RUN_SETTLED))
    if last == b"x":
        assert f"line {RUN_SETTLED + 1}" in cli_refuses(tmp_path, damaged)


@pytest.mark.parametrize("last", [b" ", b"\t", b"\r"])
def test_a_final_newline_turned_into_json_whitespace_changes_nothing(last: bytes) -> None:
    damaged = log()[:-1] + last
    assert decode_log(damaged).records == records()
    report = replay(damaged, flow())
    assert report.ok and report.torn is None


def test_a_damaged_msgpack_length_is_corruption_not_a_torn_tail(tmp_path: Path) -> None:
    data = log("msgpack")
    for index in (RUN_SETTLED, SETTLED_EFFECT, EVENT):
        at = offset_of(index, "msgpack")
        (length,) = struct.unpack_from(">I", data, at)
        for bigger in (length + 1, length + 1000, 1 << 30):
            damaged = data[:at] + struct.pack(">I", bigger) + data[at + 4 :]
            exc = corrupt(damaged)
            assert exc.offset == at, (index, bigger, str(exc))
    assert "its length prefix is damaged" in cli_refuses(tmp_path, damaged)
    # A real tear is still one.
    torn = replay(data[:-3], flow())
    assert torn.ok and torn.torn is not None


# --- hostile values: only flowcore's errors, short messages ----------------------------------

NESTED = b"[" * 50_000 + b"]" * 50_000
DEEP_DICT = b'{"a":' * 900 + b"1" + b"}" * 900
BIG = str(2**70).encode()

HOSTILE_JSON = {
    "lone surrogate in an event": (EVENT, rb'"Postmortem: done"', rb'"\ud800"'),
    "lone low surrogate in an effect": (SUBFLOW_EFFECT, rb'"INC-7"', rb'"\udc00x"'),
    "lone surrogate in run.settled": (RUN_SETTLED, rb'"abc123"', rb'"a\ud800"'),
    "integer beyond 64 bits in an event": (EVENT, rb'"Postmortem: done"', BIG),
    "integer beyond 64 bits in at": (RUN_SETTLED, rb'"at":5003', b'"at":' + BIG),
    "integer beyond 64 bits in index": (RUN_SETTLED, rb'"index":30', b'"index":' + BIG),
    "integer beyond 64 bits in an input": (0, rb'"INC-7"', BIG),
    "integer beyond 64 bits in a budget": (
        0,
        rb'"budget":null',
        b'"budget":{"steps":' + BIG + b"}",
    ),
    "a 5000-digit integer": (EVENT, rb'"Postmortem: done"', b"9" * 5000),
    "50,000 nested lists in an event": (EVENT, rb'"Postmortem: done"', NESTED),
    "50,000 nested lists in an effect": (SUBFLOW_EFFECT, rb'"INC-7"', NESTED),
    "50,000 nested lists in run.settled": (RUN_SETTLED, rb'"abc123"', NESTED),
    "50,000 nested lists in the envelope": (
        RUN_SETTLED,
        rb'"at":5003,',
        b'"at":5003,"x":' + NESTED + b",",
    ),
    "50,000 nested lists in an input": (0, rb'"INC-7"', NESTED),
    "900 nested objects in run.settled": (RUN_SETTLED, rb'"abc123"', DEEP_DICT),
    "900 nested objects in an effect": (SETTLED_EFFECT, rb'"abc123"', DEEP_DICT),
    "a number JSON cannot hold": (RUN_SETTLED, rb'"abc123"', b"1e400"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_JSON))
def test_hostile_values_are_corruption_with_flowcores_own_error(tmp_path: Path, case: str) -> None:
    index, pattern, value = HOSTILE_JSON[case]
    damaged = sub(index, pattern, value)
    exc = corrupt(damaged)
    assert exc.index in (index, None), str(exc)
    assert exc.offset == offset_of(index), str(exc)
    cli_refuses(tmp_path, damaged)


def test_hostile_msgpack_values_are_corruption() -> None:
    data = log("msgpack")
    at = offset_of(RUN_SETTLED, "msgpack")
    head = msgspec.msgpack.encode({"type": "run.settled", "index": 30, "runId": "r-1", "at": 5003})
    # 50,000 nested arrays, an extension type, a NaN and an infinity (MessagePack
    # holds both; flowcore data does not).
    nan, inf = b"\xcb\x7f\xf8" + b"\x00" * 6, b"\xcb\x7f\xf0" + b"\x00" * 6
    for data_bytes in (b"\x91" * 50_000 + b"\xc0", b"\xc7\x01\x05x", nan, inf):
        body = bytes([head[0] + 1]) + head[1:] + b"\xa4data" + data_bytes
        damaged = data[:at] + struct.pack(">I", len(body)) + body
        exc = corrupt(damaged)
        assert exc.index in (RUN_SETTLED, None) and exc.offset == at, str(exc)


def test_records_built_in_python_that_json_cannot_hold_are_corruption() -> None:
    base = list(records())
    last = base[-1]
    cases: list[Any] = [
        {"status": "completed", "output": "\ud800"},  # UnicodeEncodeError
        {"status": "completed", "output": object()},  # TypeError
    ]
    for data in cases:
        exc = corrupt([*base[:-1], msgspec.structs.replace(last, data=data)])
        assert exc.index == RUN_SETTLED
    assert corrupt([*base[:-1], msgspec.structs.replace(last, at=-1)]).index == RUN_SETTLED
    assert "index" in str(corrupt([*base[:-1], msgspec.structs.replace(last, index="30")]))


MIB = 1 << 20


def test_messages_quote_only_a_short_prefix_of_a_huge_value(tmp_path: Path) -> None:
    huge_type = sub(RUN_SETTLED, rb'"type":"run\.settled"', b'"type":"' + b"x" * (10 * MIB) + b'"')
    assert len(str(corrupt(huge_type))) < 1000
    huge_run = sub(RUN_SETTLED, rb'"runId":"r-1"', b'"runId":"' + b"r" * MIB + b'"')
    assert "belongs to run" in str(corrupt(huge_run))
    huge_kind = sub(EVENT, rb'"kind":"subflow-settled"', b'"kind":"' + b"k" * MIB + b'"')
    assert "is not a valid event" in str(corrupt(huge_kind))
    # A divergence keeps the full values, and quotes a prefix of them.
    huge_input = sub(SUBFLOW_EFFECT, rb'"INC-7"', b'"' + b"i" * (10 * MIB) + b'"')
    with pytest.raises(ReplayDivergence) as info:
        replay(huge_input, flow())
    assert len(str(info.value)) < 2000
    assert len(info.value.expected["input"]["incident"]) == 10 * MIB
    proc = cli(tmp_path, huge_input)
    assert proc.returncode == 1 and len(proc.stdout) < 40_000
    assert len(cli_refuses(tmp_path, huge_type)) <= 500


def test_markup_in_the_log_prints_as_itself(tmp_path: Path) -> None:
    text = "[/] [bold]not bold[/bold] [red"
    data = encode_records(_simulated(**{"logs.search": {"top": text}}))
    proc = cli(tmp_path, data)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[/] [bold]not" in proc.stdout and "bold[/bold] [red" in proc.stdout  # the cell wraps


def test_a_terminal_that_cannot_show_a_character_does_not_fail(tmp_path: Path) -> None:
    data = encode_records(_simulated(**{"logs.search": {"top": "café → ☕"}}))
    path = tmp_path / "log.ndjson"
    path.write_bytes(data)
    env = {**os.environ, "PYTHONIOENCODING": "ascii"}
    env.pop("COLUMNS", None)
    proc = subprocess.run(
        [sys.executable, "-m", "flowcore_cli", "replay", str(path), "--spec", str(INCIDENT)],
        capture_output=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert b"caf\\xe9" in proc.stdout


# --- properties: any damage to the last records ----------------------------------------------

TAIL = 6  # damage only the last records: the decisions a crash or a copy can hit


def _outcome(data: bytes) -> ReplayReport | FlowcoreError:
    try:
        return replay(data, flow(), raise_on_divergence=False)
    except FlowcoreError as exc:  # anything else propagates: the test fails
        assert len(str(exc)) < 1000
        return exc


def _check_cut(data: bytes) -> None:
    outcome = _outcome(data)
    # A cut is never corruption: what remains is records and at most a torn one.
    assert isinstance(outcome, ReplayReport), outcome
    # ... nor a divergence: replayed with its own spec, a log that ends inside
    # a decision, torn or not, was cut (specs/log.md §5).
    assert outcome.divergence is None, outcome.divergence


def _check_flip(data: bytes, fmt: LogFormat) -> None:
    outcome = _outcome(data)
    if not isinstance(outcome, ReplayReport) or not outcome.ok:
        return  # refused or diverged: a damaged log, said so
    # It replays: then it reads as the same records, but for the data of events
    # (what the host reported: replay checks it only through the decisions it
    # leads to, so a changed output no step reads changes nothing).
    read = decode_log(data, fmt)
    assert read.torn is None and len(read.records) == len(records())
    for before, after in zip(records(), read.records, strict=True):
        if before != after:
            assert after.type in ("event.reported", "event.rejected"), (before, after)
            assert (before.type, before.index, before.run_id, before.at) == (
                after.type,
                after.index,
                after.run_id,
                after.at,
            )


@given(st.sampled_from(["json", "msgpack"]), st.data())
def test_damage_to_the_last_records_is_classified_by_flowcores_own_errors(
    fmt: LogFormat, data: st.DataObject
) -> None:
    original = log(fmt)
    start = offset_of(len(records()) - TAIL, fmt)
    pos = data.draw(st.integers(start, len(original) - 1), label="position")
    if data.draw(st.booleans(), label="cut"):
        _check_cut(original[:pos])
    else:
        mask = data.draw(st.integers(1, 255), label="xor")
        _check_flip(original[:pos] + bytes([original[pos] ^ mask]) + original[pos + 1 :], fmt)


def test_every_cut_and_high_bit_flip_in_the_last_three_records() -> None:
    """Exhaustive for the last three records of the NDJSON log: every cut, and
    every byte with its high bit flipped (which makes the text invalid UTF-8)."""
    original = log()
    for pos in range(offset_of(len(records()) - 3), len(original)):
        _check_cut(original[:pos])
        flipped = original[:pos] + bytes([original[pos] ^ 0x80]) + original[pos + 1 :]
        assert isinstance(_outcome(flipped), LogCorrupt), pos
