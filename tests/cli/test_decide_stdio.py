"""``flowcore decide --stdio``, driven as a host in another language drives it: a real process.

Every test starts ``flowcore decide --stdio`` (the console script of this
environment) and talks to it through pipes, one JSON line each way. What it
answers must be what ``flowcore.start`` / ``flowcore.advance`` answer in this
process; every reply must validate against specs/schema/decide-replies.json;
bad requests get typed errors and the process goes on.
"""

from __future__ import annotations

import base64
import json
import queue
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from jsonschema import Draft202012Validator

import flowcore
from flowcore_cli._decide import ERROR_TYPES, STATE_FORMAT

REPO = Path(__file__).resolve().parents[2]
VECTORS = REPO / "specs" / "conformance"
FLOWCORE = Path(sys.executable).parent / "flowcore"
REPLIES = Draft202012Validator(
    json.loads((REPO / "specs/schema/decide-replies.json").read_text(encoding="utf-8"))
)
REQUESTS = Draft202012Validator(
    json.loads((REPO / "specs/schema/decide-requests.json").read_text(encoding="utf-8"))
)
TIMEOUT_S = 120  # generous: a reply on a loaded machine, never a measurement

SEQUENCE = (VECTORS / "sequence-call-tool" / "flow.yaml").read_text(encoding="utf-8")
TRIAGE = (VECTORS / "triage-example" / "flow.yaml").read_text(encoding="utf-8")


class Decide:
    """One ``flowcore decide --stdio`` process; ``ask`` writes a line and reads its reply."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [str(FLOWCORE), "decide", "--stdio", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.lines: queue.Queue[bytes] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(b"")

    def send(self, line: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + b"\n")
        self.proc.stdin.flush()

    def receive(self) -> dict[str, Any]:
        line = self.lines.get(timeout=TIMEOUT_S)
        assert line.endswith(b"\n"), f"the process ended: {self.stderr()}"
        reply: dict[str, Any] = json.loads(line)
        errors = [e.message for e in REPLIES.iter_errors(reply)]
        assert errors == [], (reply, errors)
        return reply

    def ask(self, request: dict[str, Any] | bytes) -> dict[str, Any]:
        if isinstance(request, dict):
            self.send(json.dumps(request).encode())
        else:
            self.send(request)
        return self.receive()

    def close(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        code = self.proc.wait(timeout=TIMEOUT_S)
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self.proc.stdout.close()
        self.proc.stderr.close()
        return code

    def stderr(self) -> str:
        assert self.proc.stderr is not None
        self.proc.wait(timeout=TIMEOUT_S)
        return self.proc.stderr.read().decode("utf-8", "replace")


@pytest.fixture
def decide() -> Iterator[Decide]:
    process = Decide()
    yield process
    assert process.close() == 0


def start_request(spec: Any, input: Any = None, **more: Any) -> dict[str, Any]:
    request = {"id": 1, "op": "start", "spec": spec, "input": input, "runId": "r-1", "nowMs": 0}
    request.update(more)
    assert list(REQUESTS.iter_errors(request)) == []
    return request


def advance_request(state: str, event: dict[str, Any], id: Any = 2) -> dict[str, Any]:
    request = {"id": id, "op": "advance", "state": state, "event": event}
    return request


def wire(decision: flowcore.Decision) -> list[dict[str, Any]]:
    return [flowcore.effect_to_wire(e) for e in decision.effects]


def error_of(reply: dict[str, Any], type: str) -> dict[str, Any]:
    assert reply["ok"] is False, reply
    error: dict[str, Any] = reply["error"]
    assert error["type"] == type, error
    assert error["type"] in ERROR_TYPES
    assert len(error["message"]) <= 1100
    return error


# --- the vectors, through the wire and in process ---------------------------------------------


def replayable() -> list[str]:
    """The vectors whose logs replay as recorded (not divergent, not corrupt)."""
    out = []
    for folder in sorted(p for p in VECTORS.iterdir() if p.is_dir()):
        expect = json.loads((folder / "expect.json").read_text(encoding="utf-8"))
        if expect.get("error") is None and expect.get("divergenceIndex") is None:
            out.append(folder.name)
    return out


def records(case: str) -> list[flowcore.Record]:
    return list(flowcore.decode_log((VECTORS / case / "log.ndjson").read_bytes()).records)


def test_every_replayable_vector_gives_over_the_wire_what_it_gives_in_process(
    decide: Decide,
) -> None:
    """Start and advance through each vector's recorded events: every reply equals the
    in-process decision (effects, status), rejected events included."""
    cases = replayable()
    assert len(cases) >= 40
    for case in cases:
        spec = (VECTORS / case / "flow.yaml").read_text(encoding="utf-8")
        flow = flowcore.parse_flow(spec)
        log = records(case)
        started = log[0]
        budget = started.data.get("budget")
        decision = flowcore.start(
            flow,
            started.data["input"],
            run_id=started.run_id,
            now_ms=started.at,
            budget=flowcore.budget_from_wire(budget),
            depth=started.data["depth"],
        )
        more = {"budget": budget} if budget is not None else {}
        reply = decide.ask(
            start_request(
                spec,
                started.data["input"],
                runId=started.run_id,
                nowMs=started.at,
                depth=started.data["depth"],
                **more,
            )
        )
        assert reply["ok"] is True, (case, reply)
        assert reply["effects"] == wire(decision), case
        state = reply["state"]
        for n, record in enumerate(log):
            continued = decision.state.tree.continued
            if record.type == "run.started" and continued is not None:
                # The next incarnation: a start request that carries the effect.
                depth = started.data["depth"]
                decision = flowcore.continue_run(flow, continued, record.run_id, record.at, depth)
                reply = decide.ask(
                    start_request(
                        spec,
                        runId=record.run_id,
                        nowMs=record.at,
                        depth=depth,
                        continued=flowcore.effect_to_wire(continued),
                    )
                )
                assert reply["ok"] is True, (case, reply)
                assert reply["effects"] == wire(decision), case
                state = reply["state"]
                continue
            if record.type not in ("event.reported", "event.rejected"):
                continue
            event = record.data if record.type == "event.reported" else record.data["event"]
            reply = decide.ask(advance_request(state, event, id=f"{case}-{n}"))
            assert reply["id"] == f"{case}-{n}"
            if record.type == "event.rejected":
                try:
                    flowcore.advance(decision.state, flowcore.event_from_wire(event))
                except flowcore.UpdateRefused as refused:  # an update's refusal has its type
                    error = error_of(reply, "update-refused")
                    assert error["code"] == refused.code, case
                except flowcore.EventRejected:
                    error = error_of(reply, "event-rejected")
                else:
                    raise AssertionError(f"{case}: event {n} applies in process")
                assert error["message"] == record.data["reason"], case
                continue
            decision = flowcore.advance(decision.state, flowcore.event_from_wire(event))
            assert reply["ok"] is True, (case, n, reply)
            assert reply["effects"] == wire(decision), (case, n)
            replied = [flowcore.update_reply_to_wire(r) for r in decision.replies]
            assert reply.get("replies", []) == replied, (case, n)
            settled = decision.state.settled
            assert reply["status"] == (settled.status if settled is not None else "running")
            state = reply["state"]


def test_the_state_string_is_the_snapshot_and_the_spec_in_an_envelope(decide: Decide) -> None:
    flow = flowcore.parse_flow(SEQUENCE)
    reply = decide.ask(start_request(SEQUENCE, {"id": "u-7"}))
    envelope = msgspec.msgpack.decode(base64.b64decode(reply["state"]))
    assert set(envelope) == {"format", "spec", "state"}
    assert envelope["format"] == STATE_FORMAT
    again = flowcore.parse_flow(json.loads(envelope["spec"]))
    assert again.spec_hash == flow.spec_hash
    expected = flowcore.start(flow, {"id": "u-7"}, run_id="r-1", now_ms=0).state
    assert envelope["state"] == flowcore.encode_state(expected)
    # The same spec as JSON text, or as an object, gives the same state string.
    as_object = decide.ask(start_request(json.loads(envelope["spec"]), {"id": "u-7"}))
    assert as_object["state"] == reply["state"]


CLASSES = """
flow: classes
tools:
  look: {class: readonly}
  put: {class: idempotent}
  send: {class: uncertain}
  post: {}
  ping:
steps:
  - {id: a, call_tool: {tool: send}}
  - {id: b, continue_as_new: {input: 1}}
"""


def test_a_start_reply_gives_the_execution_class_of_every_declared_tool(decide: Decide) -> None:
    """What a host in another language needs to know which lost calls may run
    again: the flow's own classes (a tool declared without one is uncertain),
    on every start reply (a continued incarnation's too), on no other."""
    classes = {
        "look": "readonly",
        "put": "idempotent",
        "send": "uncertain",
        "post": "uncertain",
        "ping": "uncertain",
    }
    started = decide.ask(start_request(CLASSES))
    assert started["toolClasses"] == classes
    (call,) = started["effects"]
    event = {"kind": "effect-succeeded", "idempotencyKey": call["idempotencyKey"], "atMs": 1}
    advanced = decide.ask(advance_request(started["state"], event))
    assert "toolClasses" not in advanced
    (continued,) = advanced["effects"]
    assert continued["kind"] == "continue-as-new"
    again = decide.ask(start_request(CLASSES, continued=continued, nowMs=2))
    assert again["ok"] is True and again["toolClasses"] == classes
    assert decide.ask(start_request(SEQUENCE, {"id": "u-7"}))["toolClasses"] == {
        "lookup": "readonly",
        "store": "idempotent",
    }
    none = decide.ask(start_request("flow: none\nsteps: [{id: a, sleep: {for_ms: 1}}]\n"))
    assert none["toolClasses"] == {}


def test_a_restarted_process_continues_from_a_state_string() -> None:
    first = Decide()
    started = first.ask(start_request(SEQUENCE, {"id": "u-7"}))
    event = {"kind": "effect-succeeded", "idempotencyKey": "r-1/fetch#1", "output": {"name": "A"}}
    one = first.ask(advance_request(started["state"], {**event, "atMs": 5}))
    assert first.close() == 0
    second = Decide()  # nothing cached: everything comes from the string
    two = second.ask(
        advance_request(
            one["state"],
            {"kind": "effect-succeeded", "idempotencyKey": "r-1/enrich#1", "atMs": 6},
        )
    )
    assert second.close() == 0
    flow = flowcore.parse_flow(SEQUENCE)
    d = flowcore.start(flow, {"id": "u-7"}, run_id="r-1", now_ms=0)
    d = flowcore.advance(d.state, flowcore.event_from_wire({**event, "atMs": 5}))
    assert one["effects"] == wire(d)
    d = flowcore.advance(
        d.state,
        flowcore.EffectSucceeded(idempotency_key="r-1/enrich#1", output=None, at_ms=6),
    )
    assert two["effects"] == wire(d)
    assert (
        two["state"]
        == base64.b64encode(
            msgspec.msgpack.encode(
                {
                    "format": STATE_FORMAT,
                    "spec": msgspec.msgpack.decode(base64.b64decode(one["state"]))["spec"],
                    "state": flowcore.encode_state(d.state),
                }
            )
        ).decode()
    )


# --- subflows -------------------------------------------------------------------------------

PARENT = """
flow: parent
budget: {steps: 10, cost_minor_units: 500}
steps:
  - id: child
    run_subflow: {flow: child, input: {n: "${input.n}"}}
output: "${steps.child.output}"
"""
CHILD = """
flow: child
tools: {double: {class: readonly}}
steps:
  - id: twice
    call_tool: {tool: double, input: "${input.n}"}
output: "${steps.twice.output}"
"""


def test_a_child_run_gets_its_depth_and_budget_from_the_effect_and_reports_its_usage(
    decide: Decide,
) -> None:
    parent = decide.ask(start_request(PARENT, {"n": 21}))
    (run_subflow,) = parent["effects"]
    assert run_subflow["kind"] == "run-subflow" and run_subflow["depth"] == 1
    key = run_subflow["idempotencyKey"]
    child = decide.ask(
        start_request(
            CHILD,
            run_subflow["input"],
            runId=key,
            budget=run_subflow["budgetRemaining"],
            depth=run_subflow["depth"],
        )
    )
    (call,) = child["effects"]
    assert call["kind"] == "call-tool" and call["input"] == 21
    done = decide.ask(
        advance_request(
            child["state"],
            {
                "kind": "effect-succeeded",
                "idempotencyKey": call["idempotencyKey"],
                "output": 42,
                "usage": {"costMinorUnits": 30},
                "atMs": 1,
            },
        )
    )
    assert done["status"] == "completed"
    assert done["usage"] == {"steps": 1, "costMinorUnits": 30, "toolCalls": 1}
    settled = done["effects"][-1]
    report = {
        "kind": "subflow-settled",
        "idempotencyKey": key,
        "status": done["status"],
        "output": settled["output"],
        "usage": done["usage"],
        "atMs": 2,
    }
    end = decide.ask(advance_request(parent["state"], report))
    assert end["status"] == "completed" and end["effects"][-1]["output"] == 42
    # The same in process: the child's usage lands in the parent's ledger.
    d = flowcore.start(flowcore.parse_flow(PARENT), {"n": 21}, run_id="r-1", now_ms=0)
    d = flowcore.advance(d.state, flowcore.event_from_wire(report))
    assert end["effects"] == wire(d)
    assert end["usage"] == {"steps": 2, "costMinorUnits": 30, "toolCalls": 1}


def test_a_child_started_deeper_than_its_flow_allows_settles_failed(decide: Decide) -> None:
    reply = decide.ask(start_request(CHILD, 1, runId="r-1/child#1", depth=99))
    (settled,) = reply["effects"]
    assert reply["status"] == "failed"
    assert settled["error"]["type"] == "depth-exceeded"


# --- errors -----------------------------------------------------------------------------------


def test_a_garbage_line_gets_an_error_and_the_next_request_is_served(decide: Decide) -> None:
    error_of(decide.ask(b"this is not json"), "not-json")
    error_of(decide.ask(b"\xff\xfe{}"), "not-json")
    error_of(decide.ask(b""), "not-json")
    error_of(decide.ask(b'{"id": 1, "op": "start"'), "not-json")
    # Valid to some parsers, not flowcore data: refused whole, never rewritten.
    twice = error_of(decide.ask(b'{"id": 1, "op": "start", "op": "advance"}'), "not-json")
    assert "key 'op' appears twice" in twice["message"]
    nan = error_of(decide.ask(b'{"id": 1, "op": "start", "input": NaN}'), "not-json")
    assert nan["message"].startswith("the line at $.input: nan is not a JSON number")
    surrogate = error_of(decide.ask(b'{"id": 1, "input": "\\ud800"}'), "not-json")
    assert "surrogate" in surrogate["message"]
    deep = error_of(decide.ask(b"[" * 100 + b"]" * 100), "not-json")
    assert deep["message"].endswith(": nested deeper than 64 levels")
    reply = decide.ask(start_request(SEQUENCE, {"id": "u-7"}))
    assert reply["ok"] is True and reply["id"] == 1


def test_requests_that_are_not_objects_or_name_no_known_op(decide: Decide) -> None:
    for line in (b"[1, 2]", b'"start"', b"42", b"null"):
        assert error_of(decide.ask(line), "not-object")["message"]
    error = error_of(decide.ask({"id": "x", "op": "stop"}), "unknown-op")
    assert error["where"] == "$.op" and "start, advance" in error["message"]
    assert error_of(decide.ask({"op": 7}), "unknown-op")["where"] == "$.op"
    error = error_of(decide.ask({"id": "x"}), "bad-request")
    assert error["where"] == "$.op"


@pytest.mark.parametrize(
    ("change", "where"),
    [
        ({"runId": None}, "$.runId"),
        ({"runId": ""}, "$.runId"),
        ({"nowMs": "0"}, "$.nowMs"),
        ({"nowMs": -1}, "$.nowMs"),
        ({"spec": 3}, "$.spec"),
        ({"budget": {"steps": -1}}, "$.budget.steps"),
        ({"budget": {"step": 1}}, "$.budget.step"),
        ({"depth": 1.5}, "$.depth"),
        ({"id": {"an": "object"}}, "$.id"),
    ],
)
def test_an_ill_typed_start_field_is_named(
    decide: Decide, change: dict[str, Any], where: str
) -> None:
    request = {**start_request(SEQUENCE), **change}
    error = error_of(decide.ask(request), "bad-request")
    assert error["where"] == where


def test_missing_fields_are_named(decide: Decide) -> None:
    for missing in ("spec", "runId", "nowMs"):
        request = start_request(SEQUENCE)
        del request[missing]
        error = error_of(decide.ask(request), "bad-request")
        assert error["where"] == f"$.{missing}" and missing in error["message"]
    for missing in ("state", "event"):
        request = advance_request("x", {})
        del request[missing]
        error = error_of(decide.ask(request), "bad-request")
        assert error["where"] == f"$.{missing}"


def test_a_bad_spec_gets_every_problem_with_its_location(decide: Decide) -> None:
    spec = "flow: bad\nsteps:\n  - id: a\n    call_tool: {tool: nope}\n  - id: a\n    sleep: {}\n"
    error = error_of(decide.ask(start_request(spec)), "bad-spec")
    assert error["where"].startswith("spec:")
    assert len(error["problems"]) >= 2
    assert all(p.startswith("spec:") for p in error["problems"])
    error = error_of(decide.ask(start_request("flow: [unclosed")), "bad-spec")
    assert re.fullmatch(r"spec:\d+:\d+", error["where"]), error
    error = error_of(decide.ask(start_request({"flow": "x"})), "bad-spec")
    assert "steps" in error["message"]
    many = "flow: many\nsteps:\n" + "".join(f"  - {{id: s{i}, nope: 1}}\n" for i in range(30))
    error = error_of(decide.ask(start_request(many)), "bad-spec")
    assert len(error["problems"]) == 21 and error["problems"][-1].endswith("more")


def test_bad_input_is_refused_by_the_input_schema(decide: Decide) -> None:
    error = error_of(decide.ask(start_request(TRIAGE, {"incident": 7})), "bad-input")
    assert "incident_id" in error["message"] and error["where"] == "$.input"
    assert decide.ask(start_request(TRIAGE, {"incident_id": "INC-7"}))["ok"] is True


def test_a_bad_or_rejected_event_leaves_the_run_as_it_was(decide: Decide) -> None:
    started = decide.ask(start_request(SEQUENCE, {"id": "u-7"}))
    state = started["state"]
    error = error_of(
        decide.ask(advance_request(state, {"kind": "effect-succeeded", "atMs": 1})), "bad-event"
    )
    assert error["where"] == "$.event.idempotencyKey"
    error = error_of(decide.ask(advance_request(state, {"kind": "nope", "atMs": 1})), "bad-event")
    assert error["where"] == "$.event.kind"
    wrong = {"kind": "effect-succeeded", "idempotencyKey": "r-1/nope#1", "atMs": 1}
    error = error_of(decide.ask(advance_request(state, wrong)), "event-rejected")
    assert error["key"] == "r-1/nope#1" and "no such effect is pending" in error["message"]
    # The host keeps its state string; the right event then applies to it.
    right = {"kind": "effect-succeeded", "idempotencyKey": "r-1/fetch#1", "atMs": 1}
    reply = decide.ask(advance_request(state, right))
    assert reply["ok"] is True and reply["effects"][0]["idempotencyKey"] == "r-1/enrich#1"


def _envelope(**fields: Any) -> str:
    return base64.b64encode(msgspec.msgpack.encode(fields)).decode()


def test_a_bad_state_string_is_refused(decide: Decide) -> None:
    event = {"kind": "cancel-requested", "atMs": 1}
    started = decide.ask(start_request(SEQUENCE, {"id": "u-7"}))
    envelope = msgspec.msgpack.decode(base64.b64decode(started["state"]))
    for state in (
        "not base64!",
        "ünïcode",
        base64.b64encode(b"\x93\x01\x02\x03").decode(),
        _envelope(format=STATE_FORMAT, spec=envelope["spec"]),
        _envelope(format=STATE_FORMAT, spec=b"{", state=envelope["state"]),
        _envelope(format=STATE_FORMAT, spec=envelope["spec"], state=b"\x01"),
        # A spec whose keys are not sorted is not the canonical form its hash pins.
        _envelope(
            format=STATE_FORMAT,
            spec=b'{"steps":[{"id":"a","sleep":{"for_ms":1}}],"flow":"x"}',
            state=envelope["state"],
        ),
    ):
        error = error_of(decide.ask(advance_request(state, event)), "bad-state")
        assert error["where"] == "$.state"


def test_a_state_string_of_another_format_or_spec_is_a_mismatch(decide: Decide) -> None:
    event = {"kind": "cancel-requested", "atMs": 1}
    one = decide.ask(start_request(SEQUENCE, {"id": "u-7"}))
    other = decide.ask(start_request(TRIAGE, {"incident_id": "INC-7"}))
    mine = msgspec.msgpack.decode(base64.b64decode(one["state"]))
    theirs = msgspec.msgpack.decode(base64.b64decode(other["state"]))
    error = error_of(
        decide.ask(advance_request(_envelope(**{**mine, "format": 99}), event)), "state-mismatch"
    )
    assert "format 99" in error["message"] and f"format {STATE_FORMAT}" in error["message"]
    swapped = _envelope(format=STATE_FORMAT, spec=theirs["spec"], state=mine["state"])
    error = error_of(decide.ask(advance_request(swapped, event)), "state-mismatch")
    assert "pins flow 'sequence'" in error["message"]


def test_a_line_over_the_limit_is_discarded_and_the_next_one_served() -> None:
    process = Decide("--max-line-bytes", "4096")
    try:
        request = start_request(SEQUENCE, {"pad": "x" * 100_000})
        error = error_of(process.ask(request), "too-large")
        assert "4,096 bytes" in error["message"]
        assert process.ask(start_request(SEQUENCE, {"id": "u-7"}))["ok"] is True
        # A line of exactly the limit is read.
        line = json.dumps(start_request(SEQUENCE, {"pad": ""})).encode()
        padded = line[:-1] + b" " * (4096 - len(line)) + b"}"
        assert len(padded) == 4096 and process.ask(padded)["ok"] is True
    finally:
        assert process.close() == 0


def test_messages_are_bounded_and_ids_echoed(decide: Decide) -> None:
    error = error_of(decide.ask({"id": 7.5, "op": "x" * 100_000}), "unknown-op")
    assert len(error["message"]) < 200
    reply = decide.ask(start_request(SEQUENCE, {"id": "u"}, id="a" * 10))
    assert reply["id"] == "a" * 10
    assert decide.ask(start_request(SEQUENCE, {"id": "u"}, id=None))["id"] is None
    assert decide.ask(start_request(SEQUENCE, {"id": "u"}, id=True))["id"] is True


def test_end_of_input_ends_the_process_with_0_and_without_stdio_is_a_usage_error() -> None:
    done = subprocess.run(
        [str(FLOWCORE), "decide", "--stdio"], input=b"", capture_output=True, timeout=TIMEOUT_S
    )
    assert (done.returncode, done.stdout) == (0, b"")
    # The last request needs no newline.
    done = subprocess.run(
        [str(FLOWCORE), "decide", "--stdio"],
        input=json.dumps(start_request(SEQUENCE, {"id": "u"})).encode(),
        capture_output=True,
        timeout=TIMEOUT_S,
    )
    assert done.returncode == 0 and json.loads(done.stdout)["ok"] is True
    done = subprocess.run(
        [str(FLOWCORE), "decide"], input=b"", capture_output=True, timeout=TIMEOUT_S
    )
    assert done.returncode == 2 and done.stdout == b""
    assert b"flowcore decide --stdio" in done.stderr and b"Traceback" not in done.stderr


def test_start_metadata_goes_in_and_the_current_metadata_comes_back(decide: Decide) -> None:
    spec = (
        "flow: meta\nmetadata: {customer: string, stage: string}\n"
        "steps:\n  - {id: w, await_signal: {signal: go}}\n"
        "  - {id: s, set_metadata: {stage: done}}\n"
    )
    started = decide.ask(start_request(spec, None, metadata={"customer": "acme"}))
    assert started["metadata"] == {"customer": "acme"}
    event = {"kind": "signal-received", "signal": "go", "atMs": 1}
    ended = decide.ask(advance_request(started["state"], event))
    assert ended["status"] == "completed"
    assert ended["metadata"] == {"customer": "acme", "stage": "done"}
    plain = decide.ask(start_request(SEQUENCE, {"id": "u-7"}))
    assert "metadata" not in plain  # omitted when no field is set
    error = error_of(decide.ask(start_request(spec, None, metadata={"stage": 3})), "bad-input")
    assert error["where"] == "$.metadata"
    assert error["problems"] == [
        "metadata field 'stage' (string) must be a string, got the number 3"
    ]


@pytest.mark.parametrize("case", ["sequence-call-tool", "schedule-recurring", "continue-as-new"])
def test_with_log_index_a_decision_carries_the_records_its_log_holds(
    decide: Decide, case: str
) -> None:
    """A host in another language appends what ``records`` holds and writes the
    vector's own log: every record, ``scheduled.changed`` and ``run.settled`` too."""
    logged = records(case)
    spec = (VECTORS / case / "flow.yaml").read_text(encoding="utf-8")
    first = logged[0]
    data = first.data
    reply = decide.ask(
        start_request(
            spec,
            data["input"],
            runId=first.run_id,
            nowMs=first.at,
            budget=data["budget"],
            depth=data["depth"],
            logIndex=0,
        )
    )
    written = list(reply["records"])
    for record in logged[1:]:
        if record.type == "run.started":
            continued = written[-1]["data"] if written[-1]["type"] == "effect.emitted" else None
            assert continued is not None and continued["kind"] == "continue-as-new"
            request = {"op": "start", "spec": spec, "runId": first.run_id, "nowMs": record.at}
            reply = decide.ask({**request, "continued": continued, "logIndex": len(written)})
        elif record.type == "event.reported":
            reply = decide.ask(
                {**advance_request(reply["state"], record.data), "logIndex": len(written)}
            )
        else:
            continue
        assert reply["ok"] is True, reply
        written.extend(reply["records"])
    assert written == [msgspec.to_builtins(r) for r in logged]
    plain = decide.ask(start_request(spec, data["input"], runId=first.run_id, nowMs=first.at))
    assert plain["ok"] is True and "records" not in plain  # only when asked for
