"""Replay: re-deriving effects from a log, divergences, corruption, trajectories, snapshots."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import flowcore
from flowcore import (
    CancelRequested,
    EffectOutcomeUnknown,
    EffectSucceeded,
    Event,
    EventRejected,
    HumanAnswered,
    Record,
    Recorder,
    ReplayDivergence,
    SignalReceived,
    SnapshotMismatch,
    SubflowSettled,
    TimerFired,
    Usage,
)
from flowcore.log.records import (
    LogCorrupt,
    LogFormat,
    UnknownRecordType,
    decode_log,
    encode_records,
)
from flowcore.log.replay import ReplayError, ReplayReport, replay
from flowcore.testing import event_streams, flow_inputs, flows

TRIAGE = """
flow: triage
version: 3
budget: {steps: 40, cost_minor_units: 5000, wall_clock_ms: 86400000}
tools: {fetch: {class: readonly}, page: {class: idempotent}, post: {}}
teams:
  reviewers:
    mode: parallel
    members: [{member: security, agent: sec-bot}, {member: style, agent: style-bot}]
steps:
  - id: get
    call_tool: {tool: fetch, input: {id: "${input.id}"}}
  - id: review
    run_team: {team: reviewers, prompt: "Review ${steps.get.output.title}"}
  - id: decide
    ask_human: {question: "Page?", options: [page, ignore]}
  - id: child
    run_subflow: {flow: postmortem, input: {id: "${input.id}"}}
  - id: nap
    sleep: {for_ms: 1000}
  - id: fix
    await_signal: {signal: fixed}
  - id: page
    call_tool: {tool: page, input: {who: "${steps.decide.answer}"}}
output: "${ {answer: steps.decide.answer, fix: steps.fix.output} }"
"""


class Log:
    """Drive a run and record it."""

    def __init__(self, spec: str = TRIAGE, input: Any = None, run_id: str = "r-1") -> None:
        self.flow = flowcore.parse_flow(spec)
        self.rec = Recorder(run_id)
        d = flowcore.start(self.flow, input, run_id=run_id, now_ms=0)
        self.state = d.state
        self.records: list[Record] = self.rec.started(self.flow, input, 0, d)

    def send(self, *events: Event) -> Log:
        for event in events:
            try:
                d = flowcore.advance(self.state, event)
            except EventRejected as exc:
                self.records += self.rec.rejected(event, exc.reason)
                continue
            self.state = d.state
            self.records += self.rec.applied(event, d)
        return self

    def data(self, fmt: LogFormat = "json") -> bytes:
        return encode_records(self.records, fmt)

    def wire(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.data().splitlines()]


def ok(key: str, output: Any = None, at: int = 1, usage: Usage | None = None) -> EffectSucceeded:
    return EffectSucceeded(idempotency_key=f"r-1/{key}", output=output, usage=usage, at_ms=at)


def triage_log() -> Log:
    return Log(input={"id": "INC-1"}).send(
        ok("get#1", {"title": "slow"}, 1),
        ok("review/style#1", "tidy", 2, Usage(steps=1, cost_minor_units=20)),
    )


def full_triage() -> Log:
    return Log(input={"id": "INC-1"}).send(
        ok("get#1", {"title": "slow"}, 1),
        ok("review/style#1", "tidy", 2, Usage(steps=1, cost_minor_units=20)),
        ok("review/security#1", "safe", 3, Usage(steps=2, cost_minor_units=5)),
        HumanAnswered(idempotency_key="r-1/decide#1", answer="maybe", at_ms=4),  # rejected
        HumanAnswered(idempotency_key="r-1/decide#1", answer="page", at_ms=5),
        SubflowSettled(
            idempotency_key="r-1/child#1",
            status="completed",
            output={"doc": "pm"},
            usage=Usage(steps=3, cost_minor_units=1),
            at_ms=6,
        ),
        TimerFired(idempotency_key="r-1/nap#1", at_ms=1006),
        SignalReceived(signal="other", payload=1, at_ms=1007),
        SignalReceived(signal="fixed", payload={"sha": "abc"}, at_ms=1008),
        ok("page#1", {"paged": True}, 1009),
    )


# --- faithful logs ---------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["json", "msgpack"])
def test_a_faithful_log_replays_from_bytes_records_and_log_read(fmt: LogFormat) -> None:
    log = full_triage()
    reports = [
        replay(log.data(fmt), log.flow),
        replay(decode_log(log.data(fmt)), log.flow),
        replay(log.records, log.flow),
    ]
    for report in reports:
        assert report.ok and report.divergence is None
        assert report.status == "completed"
        assert report.records == len(log.records)
        assert report.last_index == len(log.records) - 1
        assert report.spec_matches
        assert report.state is not None
        assert flowcore.encode_state(report.state) == flowcore.encode_state(log.state)
    assert reports[0].trajectory == reports[1].trajectory == reports[2].trajectory


def test_the_trajectory_holds_every_effect_with_its_outcome() -> None:
    report = replay(full_triage().data(), flowcore.parse_flow(TRIAGE))
    rows = {(e.kind, e.key.removeprefix("r-1/")): e for e in report.trajectory}
    get = rows["call-tool", "get#1"]
    assert (get.target, get.input, get.status, get.output) == (
        "fetch",
        {"id": "INC-1"},
        "succeeded",
        {"title": "slow"},
    )
    assert (get.at, get.ended_at) == (0, 1)
    sec = rows["run-agent", "review/security#1"]
    assert (sec.target, sec.member, sec.input, sec.status) == (
        "sec-bot",
        "security",
        "Review slow",
        "succeeded",
    )
    assert sec.usage == Usage(steps=2, cost_minor_units=5)
    ask = rows["ask-human", "decide#1"]
    assert (ask.input, ask.status, ask.output, ask.note) == (
        "Page?",
        "answered",
        "page",
        "options: page, ignore",
    )
    child = rows["run-subflow", "child#1"]
    assert (child.target, child.status, child.output) == ("postmortem", "succeeded", {"doc": "pm"})
    nap = rows["sleep", "nap#1"]
    assert (nap.target, nap.input, nap.status) == ("wait", 1006, "fired")
    assert rows["sleep", "$deadline"].status == "cancelled"
    assert rows["await-signal", "fix#1"].output == {"sha": "abc"}
    signals = [e for e in report.trajectory if e.kind == "signal-received"]
    assert [(s.target, s.status, s.key) for s in signals] == [
        ("other", "buffered", ""),
        ("fixed", "delivered", "r-1/fix#1"),
    ]
    rejected = [e for e in report.trajectory if e.kind == "event-rejected"]
    assert len(rejected) == 1 and "maybe" in rejected[0].note
    assert report.rejected == 1
    assert report.usage == Usage(steps=6, cost_minor_units=26)
    assert report.usage_by_member == {
        "security": Usage(steps=2, cost_minor_units=5),
        "style": Usage(steps=1, cost_minor_units=20),
    }
    assert report.steps_used == 5 + 6  # five work effects plus reported usage
    assert report.settled is not None and report.settled.output == {
        "answer": "page",
        "fix": {"sha": "abc"},
    }
    assert [e.index for e in report.trajectory] == sorted(e.index for e in report.trajectory)


def test_re_issues_after_an_unknown_outcome_fold_into_one_entry() -> None:
    spec = "flow: f\ntools: {t: {class: readonly}}\nsteps:\n  - {id: a, call_tool: {tool: t}}\n"
    log = Log(spec).send(
        EffectOutcomeUnknown(idempotency_key="r-1/a#1", at_ms=1),
        EffectOutcomeUnknown(idempotency_key="r-1/a#1", at_ms=2),
        ok("a#1", "done", 3),
    )
    (entry,) = replay(log.data(), log.flow).trajectory
    assert (entry.status, entry.issues, entry.output) == ("succeeded", 3, "done")


def test_an_unknown_outcome_that_is_not_re_issued_is_uncertain() -> None:
    spec = "flow: f\ntools: {t: {}}\nsteps:\n  - {id: a, call_tool: {tool: t}}\n"
    log = Log(spec).send(EffectOutcomeUnknown(idempotency_key="r-1/a#1", at_ms=1))
    (entry,) = replay(log.data(), log.flow).trajectory
    assert (entry.status, entry.issues) == ("uncertain", 1)


def test_a_late_result_is_noted_in_the_trajectory() -> None:
    spec = """
flow: f
tools: {t: {class: readonly}}
steps:
  - id: race
    parallel:
      mode: race
      branches: {a: [{id: a, call_tool: {tool: t}}], b: [{id: b, call_tool: {tool: t}}]}
  - id: q
    ask_human: {question: "ok?"}
"""
    log = Log(spec).send(ok("a#1", 1, 1), ok("b#1", 2, 2))
    report = replay(log.data(), log.flow)
    b = next(e for e in report.trajectory if e.key == "r-1/b#1")
    assert b.status == "succeeded" and "late" in b.note
    assert next(e for e in report.trajectory if e.key == "r-1/q#1").status == "pending"


def test_cancel_and_abandoned_work_in_the_trajectory() -> None:
    log = triage_log().send(CancelRequested(reason="stop", at_ms=9))
    report = replay(log.data(), log.flow)
    assert report.status == "cancelled"
    cancel = next(e for e in report.trajectory if e.kind == "cancel-requested")
    assert (cancel.input, cancel.status) == ("stop", "requested")


def test_an_in_flight_log_replays_to_a_running_state() -> None:
    log = triage_log()
    report = replay(log.data(), log.flow)
    assert report.ok and report.status == "running" and report.settled is None
    assert report.unrecorded == ()


# --- divergence ------------------------------------------------------------------------------


def _diverge(records: list[dict[str, Any]], flow: flowcore.Flow) -> ReplayDivergence:
    data = b"".join(json.dumps(r).encode() + b"\n" for r in records)
    with pytest.raises(ReplayDivergence) as info:
        replay(data, flow)
    report = replay(data, flow, raise_on_divergence=False)
    assert report.divergence is not None and not report.ok
    assert report.divergence.index == info.value.index
    return info.value


def test_an_edited_effect_diverges_at_its_index_with_expected_and_actual() -> None:
    log = triage_log()
    wire = log.wire()
    wire[2]["data"]["input"] = {"id": "INC-2"}
    div = _diverge(wire, log.flow)
    assert div.index == 2
    assert div.expected["input"] == {"id": "INC-2"}
    assert div.actual["input"] == {"id": "INC-1"}


def test_an_edited_event_diverges_at_the_first_effect_it_changes() -> None:
    log = triage_log()
    wire = log.wire()
    i = next(i for i, r in enumerate(wire) if r["type"] == "event.reported")
    wire[i]["data"]["output"] = {"title": "fast"}
    div = _diverge(wire, log.flow)
    assert wire[div.index]["type"] == "effect.emitted"
    assert div.expected["prompt"] == "Review slow" and div.actual["prompt"] == "Review fast"


def test_a_missing_effect_diverges_where_the_log_goes_on_without_it() -> None:
    log = triage_log()
    wire = [
        r
        for r in log.wire()
        if not (
            r["type"] == "effect.emitted" and r["data"]["idempotencyKey"] == "r-1/review/style#1"
        )
    ]
    wire = [{**r, "index": i} for i, r in enumerate(wire)]
    div = _diverge(wire, log.flow)
    assert div.expected is None and div.actual["idempotencyKey"] == "r-1/review/style#1"


def test_an_extra_effect_diverges() -> None:
    log = triage_log()
    wire = log.wire()
    wire.insert(3, {**wire[2], "data": {**wire[2]["data"], "idempotencyKey": "r-1/x#1"}})
    wire = [{**r, "index": i} for i, r in enumerate(wire)]
    div = _diverge(wire, log.flow)
    assert div.index == 3 and div.actual is None


def test_a_log_ending_inside_a_decision_was_cut_unless_another_spec_replays_it() -> None:
    """Torn or not, the spec decides (specs/log.md §5): with its own spec the log was
    cut; against another version the missing effects may be new ones, so it diverges."""
    log = full_triage()
    wire = log.wire()[:-2]
    data = b"".join(json.dumps(r).encode() + b"\n" for r in wire)
    report = replay(data, log.flow)
    assert report.ok and [e.__struct_config__.tag for e in report.unrecorded] == ["settled"]
    newer = flowcore.parse_flow(TRIAGE.replace("version: 3\n", "version: 4\n"))
    div = _diverge(wire, newer)
    assert div.index == len(wire) and div.actual["kind"] == "settled"
    assert "written with another spec" in str(div)


def test_an_applied_event_the_interpreter_rejects_diverges() -> None:
    log = triage_log()
    wire = log.wire()
    wire.append(
        {
            "type": "event.reported",
            "index": len(wire),
            "runId": "r-1",
            "at": 9,
            "data": {"kind": "effect-succeeded", "idempotencyKey": "r-1/nope#1", "atMs": 9},
        }
    )
    div = _diverge(wire, log.flow)
    assert div.index == len(wire) - 1 and "rejected" in div.actual


def test_a_rejected_event_must_still_be_rejected() -> None:
    log = full_triage()
    wire = log.wire()
    i = next(i for i, r in enumerate(wire) if r["type"] == "event.rejected")
    wire[i]["data"]["event"]["answer"] = "ignore"
    div = _diverge(wire, log.flow)
    assert div.index == i and "applied" in div.actual


def test_run_settled_must_agree_with_the_settled_effect() -> None:
    log = full_triage()
    wire = log.wire()
    wire[-1]["data"]["output"] = {"answer": "ignore"}
    assert _diverge(wire, log.flow).index == len(wire) - 1


def test_another_writer_may_order_keys_and_spell_defaults_differently() -> None:
    log = full_triage()
    wire = log.wire()
    for record in wire:
        if record["type"] == "effect.emitted" and record["data"]["kind"] == "call-tool":
            record["data"] = dict(reversed(list(record["data"].items())))
            record["data"]["input"] = record["data"].get("input")
        if record["type"] == "effect.emitted" and record["data"]["kind"] == "ask-human":
            record["data"]["options"] = record["data"].get("options")
            record["data"]["futureField"] = "ignored"
    data = b"".join(json.dumps(r, indent=None).encode() + b"\n" for r in wire)
    assert replay(data, log.flow).ok


def test_a_newer_spec_that_acts_the_same_replays_with_a_hash_mismatch() -> None:
    log = triage_log()
    newer = flowcore.parse_flow(
        TRIAGE.replace("version: 3", "version: 4").replace(
            "sleep: {for_ms: 1000}", "sleep: {for_ms: 2000}"
        )
    )
    report = replay(log.data(), newer)
    assert report.ok and not report.spec_matches
    assert report.version == 3 and report.spec_hash == log.flow.spec_hash
    assert report.replayed_spec_hash == newer.spec_hash


def test_a_newer_spec_that_acts_differently_names_the_first_index() -> None:
    log = full_triage()
    newer = flowcore.parse_flow(TRIAGE.replace("sleep: {for_ms: 1000}", "sleep: {for_ms: 2000}"))
    report = replay(log.data(), newer, raise_on_divergence=False)
    assert report.divergence is not None and not report.spec_matches
    assert report.divergence.expected["untilMs"] == 1006
    assert report.divergence.actual["untilMs"] == 2006


def test_a_newer_spec_that_refuses_the_recorded_input_diverges_at_zero() -> None:
    log = triage_log()
    strict = TRIAGE.replace(
        "version: 3\n", "version: 3\ninput_schema: {type: object, required: [tenant]}\n"
    )
    report = replay(log.data(), flowcore.parse_flow(strict), raise_on_divergence=False)
    assert report.divergence is not None and report.divergence.index == 0
    assert report.state is None and report.status == "not-started"


# --- bad logs --------------------------------------------------------------------------------


def test_a_log_of_another_flow_is_refused() -> None:
    other = flowcore.parse_flow("flow: other\nsteps:\n  - {id: s, sleep: {for_ms: 1}}\n")
    with pytest.raises(ReplayError, match="flow 'triage', not 'other'"):
        replay(triage_log().data(), other)


def test_records_of_another_run_are_corruption() -> None:
    log = triage_log()
    wire = log.wire()
    wire[3]["runId"] = "r-2"
    data = b"".join(json.dumps(r).encode() + b"\n" for r in wire)
    with pytest.raises(LogCorrupt, match="belongs to run 'r-2'") as info:
        replay(data, log.flow)
    assert info.value.index == 3 and info.value.offset == sum(
        len(x) for x in data.splitlines(True)[:3]
    )


@pytest.mark.parametrize("how", ["gap", "repeat", "start"])
def test_index_gaps_are_corruption(how: str) -> None:
    log = triage_log()
    wire = log.wire()
    if how == "gap":
        del wire[3]
    elif how == "repeat":
        wire[4]["index"] = 3
    else:
        for r in wire:
            r["index"] += 1
    data = b"".join(json.dumps(r).encode() + b"\n" for r in wire)
    with pytest.raises(LogCorrupt):
        replay(data, log.flow)
    with pytest.raises(LogCorrupt):
        replay(
            msgspec.json.decode(b"[" + b",".join(data.splitlines()) + b"]", type=list[Record]),
            log.flow,
        )


def test_a_log_must_begin_with_run_started_and_hold_one() -> None:
    log = triage_log()
    wire = log.wire()
    with pytest.raises(LogCorrupt, match=r"begins with run\.started"):
        replay(
            b"".join(
                json.dumps({**r, "index": i}).encode() + b"\n" for i, r in enumerate(wire[1:])
            ),
            log.flow,
        )
    again = [*wire, {**wire[0], "index": len(wire)}]
    with pytest.raises(LogCorrupt, match=r"second run\.started"):
        replay(b"".join(json.dumps(r).encode() + b"\n" for r in again), log.flow)


def test_undecodable_event_data_is_corruption() -> None:
    log = triage_log()
    wire = log.wire()
    i = next(i for i, r in enumerate(wire) if r["type"] == "event.reported")
    wire[i]["data"] = {"kind": "effect-succeeded"}
    with pytest.raises(LogCorrupt, match="not a valid event"):
        replay(b"".join(json.dumps(r).encode() + b"\n" for r in wire), log.flow)


@pytest.mark.parametrize("data", [b"", b"\n\n", b"flow: x\nsteps: []\n", b"\x00\x00\x00\x09abc"])
def test_empty_or_foreign_bytes_are_not_a_log(data: bytes) -> None:
    with pytest.raises(LogCorrupt):
        replay(data, flowcore.parse_flow(TRIAGE))


def test_unknown_record_types_are_refused_unless_allowed_and_count_in_the_indices() -> None:
    log = full_triage()
    wire = log.wire()
    wire.insert(3, {"type": "host.note", "index": 3, "runId": "r-1", "at": 1, "data": [1]})
    wire = [{**r, "index": i} for i, r in enumerate(wire)]
    data = b"".join(json.dumps(r).encode() + b"\n" for r in wire)
    with pytest.raises(UnknownRecordType, match=r"record 3 .*unknown type 'host\.note'") as info:
        replay(data, log.flow)
    assert (info.value.index, info.value.record_type) == (3, "host.note")
    report = replay(data, log.flow, allow_unknown_types=True)
    assert report.ok and report.records == len(wire)
    (skipped,) = [e for e in report.trajectory if e.kind == "unknown-record"]
    assert (skipped.index, skipped.target, skipped.status) == (3, "host.note", "skipped")


# --- effect.redispatched --------------------------------------------------------------------


def _redispatched_log() -> Log:
    """The triage run, with r-1/get#1 re-dispatched twice after recoveries before its result."""
    log = Log(input={"id": "INC-1"})
    log.records += log.rec.redispatched("r-1/get#1", 1, "host:1:aa", 5)
    log.records += log.rec.redispatched("r-1/get#1", 2, None, 7)
    return log.send(ok("get#1", {"title": "slow"}, 9))


@pytest.mark.parametrize("fmt", ["json", "msgpack"])
def test_a_redispatched_record_notes_the_work_and_changes_nothing_else(fmt: LogFormat) -> None:
    log = _redispatched_log()
    plain = Log(input={"id": "INC-1"}).send(ok("get#1", {"title": "slow"}, 9))
    report = replay(log.data(fmt), log.flow)
    same = replay(plain.records, plain.flow)
    assert report.ok and report.records == same.records + 2
    assert (report.events, report.effects, report.rejected) == (same.events, same.effects, 0)
    assert report.state is not None and same.state is not None
    assert flowcore.encode_state(report.state) == flowcore.encode_state(same.state)
    (get,) = [e for e in report.trajectory if e.key == "r-1/get#1"]
    assert (get.status, get.issues) == ("succeeded", 1)
    assert get.note == "re-dispatched after recovery (1); re-dispatched after recovery (2)"
    assert [e.key for e in report.trajectory] == [e.key for e in same.trajectory]


def test_a_redispatched_record_is_allowed_at_the_start_of_a_snapshot_tail() -> None:
    log = _redispatched_log()
    head = replay(log.records[:3], log.flow)  # run.started and its two effects
    assert head.state is not None
    tail = replay(log.records[3:], log.flow, snapshot=flowcore.encode_state(head.state))
    assert tail.ok and tail.events == 1


def test_a_redispatch_of_work_the_run_does_not_wait_for_diverges() -> None:
    log = Log(input={"id": "INC-1"}).send(ok("get#1", {"title": "slow"}, 1))
    for key in ("r-1/get#1", "r-1/$deadline", "r-1/nowhere#1"):  # answered, a timer, unknown
        records = [*log.records, *Recorder("r-1", len(log.records)).redispatched(key, 1, None, 2)]
        with pytest.raises(ReplayDivergence) as info:
            replay(records, log.flow)
        assert info.value.index == len(log.records)
        assert info.value.expected == {"redispatched": key, "recovery": 1}
        assert "re-dispatches work the run does not wait for" in str(info.value)
    assert info.value.actual is None
    timer = [
        *log.records,
        *Recorder("r-1", len(log.records)).redispatched("r-1/$deadline", 1, None, 2),
    ]
    with pytest.raises(ReplayDivergence) as timed:
        replay(timer, log.flow)
    assert timed.value.actual == {"pending": "deadline", "effect": ""}


def test_a_redispatch_inside_a_decision_diverges_and_a_malformed_one_is_corruption() -> None:
    log = Log(input={"id": "INC-1"})
    wire = log.wire()
    inside = [
        *wire[:1],
        {
            "type": "effect.redispatched",
            "index": 1,
            "runId": "r-1",
            "at": 0,
            "data": {"idempotencyKey": "r-1/get#1", "recovery": 1},
        },
        *wire[1:],
    ]
    inside = [{**r, "index": i} for i, r in enumerate(inside)]
    data = b"".join(json.dumps(r).encode() + b"\n" for r in inside)
    with pytest.raises(ReplayDivergence, match="emits an effect the log does not record") as info:
        replay(data, log.flow)
    assert info.value.index == 1
    for bad in (
        {"idempotencyKey": "r-1/get#1"},
        {"idempotencyKey": "r-1/get#1", "recovery": -1},
        {"idempotencyKey": 7, "recovery": 1},
        {"idempotencyKey": "r-1/get#1", "recovery": 2**64},
    ):
        record = {"type": "effect.redispatched", "index": len(wire), "runId": "r-1", "at": 3}
        data = log.data() + json.dumps({**record, "data": bad}).encode() + b"\n"
        with pytest.raises(
            LogCorrupt, match=f"record {len(wire)} .*not a valid effect.redispatched"
        ):
            replay(data, log.flow)
    surrogate = Record(
        "effect.redispatched", len(wire), "r-1", 3, {"idempotencyKey": "\ud800", "recovery": 1}
    )
    with pytest.raises(LogCorrupt):
        replay([*log.records, surrogate], log.flow)


# --- torn tails and until --------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["json", "msgpack"])
def test_a_torn_tail_is_reported_and_the_records_before_it_replay(fmt: LogFormat) -> None:
    log = full_triage()
    data = log.data(fmt)
    cut = data[:-7]
    report = replay(cut, log.flow)
    assert report.ok and report.torn is not None
    assert report.torn.offset == len(encode_records(log.records[:-1], fmt))
    assert report.last_index == len(log.records) - 2


def test_a_torn_tail_mid_decision_leaves_unrecorded_effects() -> None:
    log = triage_log()
    data = encode_records(log.records[:2], "json") + b'{"type":"effect.em'
    report = replay(data, log.flow)
    assert report.ok and report.torn is not None
    assert [flowcore.effect_to_wire(e)["kind"] for e in report.unrecorded] == ["call-tool"]


def test_until_stops_after_an_index() -> None:
    log = full_triage()
    report = replay(log.data(), log.flow, until=4)
    assert report.ok and report.last_index == 4 and report.records == 5
    assert all(e.index <= 4 for e in report.trajectory)
    with pytest.raises(ReplayError):
        replay(log.data(), log.flow, until=-1)
    assert replay(log.data(), log.flow, until=10_000).last_index == len(log.records) - 1


# --- snapshots -------------------------------------------------------------------------------


def _split_at_event(records: list[Record], k: int) -> int:
    events = [i for i, r in enumerate(records) if r.type.startswith("event.")]
    return events[k - 1] if k <= len(events) else len(records)


@pytest.mark.parametrize("k", range(1, 11))
def test_snapshot_plus_tail_equals_a_full_replay(k: int) -> None:
    log = full_triage()
    full = replay(log.records, log.flow)
    cut = _split_at_event(log.records, k)
    head = replay(log.records[:cut], log.flow)
    assert head.state is not None
    snapshot = flowcore.encode_state(head.state)
    tail = replay(log.records[cut:], log.flow, snapshot=snapshot)
    assert tail.ok and tail.state is not None and full.state is not None
    assert flowcore.encode_state(tail.state) == flowcore.encode_state(full.state)
    assert tail.run_id == "r-1"


def test_a_snapshot_refuses_another_flow_and_a_tail_that_starts_mid_decision() -> None:
    log = full_triage()
    head = replay(log.records[:3], log.flow)
    assert head.state is not None
    snapshot = flowcore.encode_state(head.state)
    other = flowcore.parse_flow(TRIAGE.replace("version: 3", "version: 4"))
    with pytest.raises(SnapshotMismatch):
        replay(log.records[3:], other, snapshot=snapshot)
    with pytest.raises(ReplayError, match="must begin with an event"):
        replay(log.records[2:], log.flow, snapshot=snapshot)


# --- property: any run a host records replays exactly ----------------------------------------


def _record(flow: flowcore.Flow, input: Any, events: list[Event]) -> tuple[list[Record], Any]:
    rec = Recorder("r")
    d = flowcore.start(flow, input, run_id="r", now_ms=0)
    records = rec.started(flow, input, 0, d)
    state = d.state
    for event in events:
        try:
            d = flowcore.advance(state, event)
        except EventRejected as exc:
            records += rec.rejected(event, exc.reason)
            continue
        state = d.state
        records += rec.applied(event, d)
    return records, state


@settings(max_examples=60)
@given(st.data())
def test_every_recorded_run_replays_identically_in_both_formats(data: st.DataObject) -> None:
    flow = flowcore.parse_flow(data.draw(flows()))
    input = data.draw(flow_inputs())
    events = data.draw(event_streams(flow, input, run_id="r", max_events=30))
    records, state = _record(flow, input, events)
    expected = flowcore.encode_state(state)
    for fmt in ("json", "msgpack"):
        report: ReplayReport = replay(encode_records(records, fmt), flow)
        assert report.ok
        assert report.state is not None and flowcore.encode_state(report.state) == expected
        assert report.records == len(records)
        assert report.status == state.status


def test_a_snapshot_tail_holds_no_run_started_and_may_be_only_a_torn_record() -> None:
    log = full_triage()
    cut = _split_at_event(log.records, 2)
    head = replay(log.records[:cut], log.flow)
    assert head.state is not None
    snapshot = flowcore.encode_state(head.state)
    with pytest.raises(LogCorrupt, match=r"second run\.started"):
        replay([log.records[0], *log.records[cut:]], log.flow, snapshot=snapshot)
    torn = replay(encode_records(log.records[cut:], "json")[:20], log.flow, snapshot=snapshot)
    assert torn.ok and torn.torn is not None and torn.torn.offset == 0
    assert torn.state is not None
    assert flowcore.encode_state(torn.state) == snapshot
