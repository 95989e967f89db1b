"""Hostile values never harm a run on the Temporal host, nor its worker.

Against a real ``temporal server start-dev``:

- a real tool returns values flowcore cannot store (beyond 64 bits, a lone
  surrogate, NaN, infinity, a datetime, a set, an integer key, too deep, too
  large) beside a dozen healthy runs on the same worker: each bad result fails
  its own effect once with ``unencodable-output`` naming where the bad value
  is, the tool runs once, and every healthy run completes;
- any Temporal client sends hostile signals, answers, cancel reasons and
  start arguments (raw payloads included): signals are refused and listed,
  answers rejected by the update's validator, a long cancel reason still
  cancels, a bad start fails the workflow at once with a clear error;
- a foreign worker serves the activity with garbled results: each fails its
  effect;
- a bug planted in the workflow's own code fails the workflow task (Temporal
  shows it, and retries after a fix) instead of vanishing in a background task.

Apart from the planted bug, no workflow task may fail (Temporal would retry
it for ever): every history is checked for ``WorkflowTaskFailed``.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
import zlib
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest

pytest.importorskip("temporalio", reason="the Temporal host tests need temporalio (.[dev])")

from temporalio import activity, workflow
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

import flowcore
import flowcore_temporal as ft
from flowcore import Sleep

from ..hostile_values import (
    BAD,
    BAD_FLOW,
    CAUGHT_FLOW,
    DEEP,
    EXECUTIONS,
    HEALTHY_FLOW,
    LONE,
    REGISTRY,
)
from .support import question, running_host, unique

UNENCODABLE = "unencodable-output"  # flowcore_handlers.UNENCODABLE_OUTPUT
BIG = "z" * (3 << 19)  # 1.5 MiB: under Temporal's payload limit, over flowcore's event limit
WAIT_S = 60.0


def raw(data: bytes, encoding: bytes = b"json/plain") -> RawValue:
    """A payload as a client in any language might send it, bytes and all."""
    return RawValue(Payload(metadata={"encoding": encoding}, data=data))


TOO_DEEP_JSON = raw(b"[" * 100_000 + b"]" * 100_000)  # Python's json gives up
NOT_UTF8 = raw(b'"\xff\xfe"')
NOT_JSON = raw(b"{")
UNKNOWN_ENCODING = raw(b"?", b"application/x-mystery")


async def task_failures(handle: WorkflowHandle[Any, Any]) -> list[str]:
    """The workflow task failures in a workflow's history (each one Temporal retries)."""
    history = await handle.fetch_history()
    return [
        event.workflow_task_failed_event_attributes.failure.message
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
    ]


def activity_events(history_events: Any) -> Counter[str]:
    kinds = {
        EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED: "scheduled",
        EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED: "completed",
        EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED: "failed",
        EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT: "timed-out",
    }
    return Counter(kinds[e.event_type] for e in history_events if e.event_type in kinds)


async def wait_for(check: Callable[[], Awaitable[Any]], what: str) -> Any:
    """Poll ``check`` until it returns something truthy; generous, never a fixed sleep."""
    deadline = time.monotonic() + WAIT_S
    while not (value := await check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)
    return value


async def settled(host: ft.TemporalHost, run_id: str) -> dict[str, Any]:
    """The run's result; a run that never settles fails the test instead of hanging it."""
    return await asyncio.wait_for(host.result(run_id), WAIT_S)


def replays(log: bytes, spec: str) -> str | None:
    """The status replaying ``log`` (flowcore's NDJSON) re-derives, if it replays."""
    read = flowcore.decode_log(log)
    assert read.torn is None
    report = flowcore.replay(read.records, flowcore.parse_flow(spec))
    return report.status if report.ok else None


def shown(*values: Any) -> str:
    """An assertion's message: printable and short, whatever a failing run returned."""
    return ascii(values)[:500]


def no_lost_errors(caplog: pytest.LogCaptureFixture) -> None:
    """Nothing was logged as an error: no failed activation, no lost task exception."""
    bad = [
        r
        for r in caplog.records
        if r.levelno >= logging.ERROR
        or "Failed activation" in r.getMessage()
        or "never retrieved" in r.getMessage()
    ]
    assert not bad, "\n".join(r.getMessage() for r in bad)


# --- a real tool returns what flowcore cannot store --------------------------------------------


def test_bad_tool_results_fail_their_own_effect_once_and_healthy_runs_complete(
    temporal_address: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    prefix = unique("t")

    async def main() -> dict[str, Any]:
        async with running_host(temporal_address, None, registry=REGISTRY) as host:
            starts = [
                *(host.start(BAD_FLOW, {"case": c}, f"{prefix}-bad-{c}") for c in BAD),
                *(host.start(CAUGHT_FLOW, {"case": c}, f"{prefix}-caught-{c}") for c in BAD),
                *(host.start(HEALTHY_FLOW, {"n": i}, f"{prefix}-ok-{i}") for i in range(12)),
            ]
            run_ids = await asyncio.gather(*starts)
            results = await asyncio.gather(*(settled(host, r) for r in run_ids))
            out: dict[str, Any] = {}
            for rid, result in zip(run_ids, results, strict=True):
                history = await host.history(rid)
                out[rid] = {
                    "result": result,
                    "failures": await task_failures(host.handle(rid)),
                    "activities": activity_events(history.events),
                    "log": await host.export(rid),
                }
            return out

    began = time.monotonic()
    runs = asyncio.run(main())
    took = time.monotonic() - began
    for case, (_, where) in BAD.items():
        rid = f"{prefix}-bad-{case}"
        run = runs[rid]
        result = run["result"]
        assert result["status"] == "failed", shown(case, result)
        error = result["error"]
        assert error["type"] == UNENCODABLE, shown(case, error)
        assert error["message"].startswith(f"the {where}"), shown(case, error)
        assert f" of {rid}/call#1 cannot be stored: " in error["message"], shown(case, error)
        assert len(error["message"]) < 400  # a short prefix, never the value
        # Ran once; one activity, completed (its result is the failed effect),
        # never failed or retried by Temporal.
        assert EXECUTIONS[f"{rid}/call#1"] == 1, case
        assert run["activities"] == Counter(scheduled=1, completed=1), case
        caught = runs[f"{prefix}-caught-{case}"]["result"]
        assert (caught["status"], caught["output"]) == ("completed", {"fine": UNENCODABLE})
        assert EXECUTIONS[f"{prefix}-caught-{case}/call#1"] == 1, case
        assert replays(run["log"], BAD_FLOW) == "failed"
    for i in range(12):
        rid = f"{prefix}-ok-{i}"
        result = runs[rid]["result"]
        assert (result["status"], result["output"]) == ("completed", {"fine": i}), shown(result)
        assert EXECUTIONS[f"{rid}/call#1"] == 1
        assert replays(runs[rid]["log"], HEALTHY_FLOW) == "completed"
    assert all(run["failures"] == [] for run in runs.values())
    no_lost_errors(caplog)
    print(f"\n{len(runs)} runs settled in {took:.2f}s")


# --- any client sends hostile signals ----------------------------------------------------------

LISTEN = """
flow: listen
steps:
  - id: wait
    await_signal: {signal: go}
output: "${steps.wait.output}"
"""


@asynccontextmanager
async def client_and_host(address: str) -> AsyncIterator[tuple[Client, ft.TemporalHost]]:
    """A worker and a host, and a bare temporalio client on the same task queue."""
    async with running_host(address) as host:
        yield host.client, host


def test_hostile_signals_are_refused_listed_and_the_run_goes_on(
    temporal_address: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    # (how it is sent, what the refusal must say)
    hostile: list[tuple[Callable[[WorkflowHandle[Any, Any]], Awaitable[None]], str]] = [
        (lambda h: h.signal("go", float("nan")), "$.payload: nan is not a JSON number"),
        (lambda h: h.signal("go", {"n": 10**20}), "$.payload.n: integer 100000000000000000000"),
        (lambda h: h.signal("go", [LONE]), "$.payload[0]: string '\\ud800' holds a lone surr"),
        (lambda h: h.signal("go", DEEP), "nested deeper than 64 levels"),
        (lambda h: h.signal("go", BIG), "bytes as JSON, over the limit of 1,048,576"),
        (lambda h: h.signal("go", b"\x00bytes"), "$.payload: a bytes is not JSON data"),
        (lambda h: h.signal("go", TOO_DEEP_JSON), "cannot be decoded (json/plain): Recursion"),
        (lambda h: h.signal("go", NOT_UTF8), "cannot be decoded (json/plain)"),
        (lambda h: h.signal("go", UNKNOWN_ENCODING), "cannot be decoded (application/x-mystery)"),
        (lambda h: h.signal("go", args=[1, 2]), "a signal's key must be text, got int"),
        (
            lambda h: h.signal("go", args=[1, "k", 3]),
            "a signal carries a payload and a key at most, got 3 arguments",
        ),
    ]

    async def main() -> tuple[dict[str, Any], dict[str, Any], bytes, list[str], str]:
        async with client_and_host(temporal_address) as (client, host):
            rid = unique("listen")
            # One comes with the start, before the run exists: held, then refused.
            handle = await client.start_workflow(
                ft.WORKFLOW_NAME,
                ft.RunArgs(spec=LISTEN, run_id=rid),
                id=rid,
                task_queue=host.task_queue,
                start_signal="go",
                start_signal_args=[float("inf")],
            )
            for send, _ in hostile:
                await send(handle)

            async def refused_all() -> dict[str, Any] | None:
                status = await host.status(rid)
                done = status["refused"]["count"] == len(hostile) + 1
                return status if done else None

            status = await wait_for(refused_all, "every hostile signal to be refused")
            # Our own client refuses before sending: the sender hears of it.
            with pytest.raises(ft.TemporalHostError, match=r"signal 'go' refused: .*\$\.payload"):
                await host.signal(rid, "go", {"n": 10**20})
            await host.signal(rid, "go", {"ok": True})
            result = await settled(host, rid)
            log = await host.export(rid)
            return status, result, log, await task_failures(handle), rid

    status, result, log, failures, rid = asyncio.run(main())
    assert failures == []
    assert status["status"] == "running" and status["waitingFor"] == ["go"]
    reasons = [entry["reason"] for entry in status["refused"]["latest"]]
    assert "$.payload: inf is not a JSON number" in reasons[0]
    for reason, (_, expected) in zip(reasons[1:], hostile, strict=True):
        assert expected in reason, shown(expected, reason)
        assert len(reason) < 400
    assert {entry["signal"] for entry in status["refused"]["latest"]} == {"go"}
    # The good signal came through; the refused ones never reached the run or its log.
    assert (result["status"], result["output"]) == ("completed", {"ok": True})
    reported = [r for r in flowcore.decode_log(log).records if r.type.startswith("event.")]
    assert [r.data["kind"] for r in reported] == ["signal-received"]
    assert replays(log, LISTEN) == "completed"
    warned = [r.getMessage() for r in caplog.records if "refused signal" in r.getMessage()]
    assert len(warned) == len(hostile) + 1 and rid in warned[0]
    no_lost_errors(caplog)


# --- any client sends hostile answers ----------------------------------------------------------

ASK = """
flow: ask
steps:
  - id: q
    ask_human: {question: "Why?"}
output: "${steps.q.answer}"
"""


def test_hostile_answers_are_rejected_by_the_update_validator(
    temporal_address: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)

    async def main() -> tuple[list[tuple[str, str]], dict[str, Any], bytes, list[str]]:
        async with client_and_host(temporal_address) as (client, host):
            rid = await host.start(ASK, None, unique("ask"))
            key = (await question(host, rid))["key"]
            handle = client.get_workflow_handle(rid)
            sent: list[list[Any]] = [
                [key, float("nan")],
                [key, {"n": -(10**20)}],
                [key, {"why": LONE}],
                [key, DEEP],
                [key, BIG],
                [key, TOO_DEEP_JSON],
                [key, NOT_UTF8],
                [5, "because"],
                [NOT_JSON, "because"],
                ["x" * 5000, "because"],
            ]
            rejected = []
            for args in sent:
                with pytest.raises(WorkflowUpdateFailedError) as caught:
                    await asyncio.wait_for(
                        handle.execute_update(ft.ANSWER_UPDATE, args=args), WAIT_S
                    )
                cause = caught.value.cause
                assert isinstance(cause, ApplicationError)
                rejected.append((cause.type or "", cause.message))
            with pytest.raises(ft.TemporalHostError, match=r"answer refused: .*\$\.answer"):
                await host.answer(rid, key, float("nan"))
            await host.answer(rid, key, "a fine reason")
            result = await settled(host, rid)
            return rejected, result, await host.export(rid), await task_failures(handle)

    rejected, result, log, failures = asyncio.run(main())
    assert failures == []
    expected = [
        "$.answer: nan is not a JSON number",
        "$.answer.n: integer -100000000000000000000 is outside the 64-bit range",
        "$.answer.why: string '\\ud800' holds a lone surrogate",
        "nested deeper than 64 levels",
        "bytes as JSON, over the limit of 1,048,576",
        "the answer cannot be decoded (json/plain): RecursionError",
        "the answer cannot be decoded (json/plain)",
        "the key must be a string (a question's key), got int",
        "the key cannot be decoded (json/plain)",
        "$.idempotencyKey: ",
    ]
    for (kind, message), part in zip(rejected, expected, strict=True):
        assert kind == "answer-rejected", shown(kind, message)
        assert message.startswith("answer refused: ") and part in message, shown(part, message)
        assert len(message) < 400
    # Only the good answer reached the run and its log.
    assert (result["status"], result["output"]) == ("completed", "a fine reason")
    reported = [r for r in flowcore.decode_log(log).records if r.type.startswith("event.")]
    assert [r.data["answer"] for r in reported] == ["a fine reason"]
    assert replays(log, ASK) == "completed"
    no_lost_errors(caplog)


# --- a long cancel reason, a sleep past Temporal's longest timer --------------------------------

FOREVER = """
flow: forever
steps:
  - id: nap
    sleep: {until: "${input.t}"}
"""


def test_a_huge_cancel_reason_still_cancels_and_a_sleep_may_outlast_any_timer(
    temporal_address: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    far = 9_000_000_000_000_000_000  # epoch ms, some 285 million years from now

    async def main() -> tuple[str, list[int], dict[str, Any], dict[str, Any], list[str]]:
        async with client_and_host(temporal_address) as (client, host):
            rid = await host.start(FOREVER, {"t": far}, unique("forever"))
            handle = client.get_workflow_handle(rid)

            async def timers() -> list[int]:
                history = await handle.fetch_history()
                return [
                    e.timer_started_event_attributes.start_to_fire_timeout.seconds
                    for e in history.events
                    if e.event_type == EventType.EVENT_TYPE_TIMER_STARTED
                ]

            started = await wait_for(timers, "the run's timer")
            status = await host.status(rid)
            await handle.cancel(reason="r" * 100_000)
            return rid, started, status, await settled(host, rid), await task_failures(handle)

    rid, timers, status, result, failures = asyncio.run(main())
    assert failures == []
    # The first piece of the sleep: Temporal's timer for a century, not an overflow.
    assert timers == [100 * 365 * 24 * 3600]
    assert status["status"] == "running"
    assert [p["key"] for p in status["pending"]] == [f"{rid}/nap#1"]
    # The cancel applied, its reason cut to a note.
    assert result["status"] == "cancelled"
    assert result["error"]["message"] == "r" * 4096 + "… (100,000 characters)"
    no_lost_errors(caplog)


# --- any client starts a run with hostile arguments ---------------------------------------------

START = """
flow: start
steps:
  - {id: nap, sleep: {for_ms: 1}}
"""


def _snapshot_of_another_flow() -> str:
    """A sound carried-over state, of another flow than ``START``."""
    other = flowcore.parse_flow("flow: other\nsteps:\n  - {id: nap, sleep: {for_ms: 1}}\n")
    state = flowcore.start(other, None, "r-1", now_ms=0).state
    return base64.b64encode(zlib.compress(flowcore.encode_state(state))).decode()


SNAPSHOT_OF_ANOTHER = _snapshot_of_another_flow()


def test_hostile_start_arguments_fail_the_workflow_at_once(
    temporal_address: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    args: dict[str, Any] = {"spec": START}
    # (the workflow's argument, the failure's type, what its message must say)
    cases: list[tuple[Any, str, str]] = [
        ({**args, "input": float("nan")}, "InputError", "input at $: nan is not a JSON number"),
        ({**args, "input": {"n": 10**20}}, "InputError", "input at $.n: integer 1000000000"),
        ({**args, "input": [LONE]}, "InputError", "input at $[0]: string '\\ud800' holds"),
        ({**args, "input": DEEP}, "InputError", "nested deeper than 64 levels"),
        ({**args, "input": BIG}, "InputError", "bytes as JSON, over 1,048,576"),
        ({"spec": 5}, "RunArgsError", "spec: expected a string, got 5"),
        ({"spec": LONE}, "RunArgsError", "spec: string '\\ud800' holds a lone surrogate"),
        ({**args, "budget": {"steps": "x"}}, "RunArgsError", "budget.steps: expected an integer"),
        ({**args, "depth": float("nan")}, "RunArgsError", "depth: expected an integer"),
        ({**args, "clock_scale": float("inf")}, "RunArgsError", "clock_scale: expected a number"),
        ({**args, "activity_timeout_ms": 10**30}, "RunArgsError", "activity_timeout_ms: expec"),
        ({**args, "imput": 1}, "RunArgsError", "unknown field 'imput'"),
        ({"input": 1}, "RunArgsError", "spec: missing"),
        ([START], "RunArgsError", "expected a JSON object, got a list"),
        (TOO_DEEP_JSON, "RunArgsError", "cannot be decoded (json/plain): RecursionError"),
        (NOT_UTF8, "RunArgsError", "cannot be decoded (json/plain)"),
        (UNKNOWN_ENCODING, "RunArgsError", "cannot be decoded (application/x-mystery)"),
        ({"spec": "steps: [{"}, "SpecError", "not valid YAML/JSON"),
        ({**args, "metadata": "x"}, "RunArgsError", "metadata: expected an object or null"),
        ({**args, "metadata": {"nope": 1}}, "MetadataError", "field 'nope' is not declared"),
        # The state a long run carries over, and the pin.
        ({**args, "snapshot": "not base64!"}, "ValueError", "the snapshot is not a compressed"),
        ({**args, "snapshot": "AAAA"}, "ValueError", "the snapshot is not a compressed"),
        ({**args, "snapshot": SNAPSHOT_OF_ANOTHER}, "SnapshotMismatch", "pins flow 'other'"),
        ({**args, "spec_hash": "0" * 64}, "RunArgsError", "not the pinned spec 000000000000"),
        ({**args, "continue_after_events": 3}, "RunArgsError", "continue_after_events: expected"),
        ({"spec": ""}, "RunArgsError", "spec: empty, and no spec_hash"),
    ]

    async def main() -> list[tuple[str, str, WorkflowExecutionStatus | None, list[str]]]:
        async with client_and_host(temporal_address) as (client, host):

            async def one(arg: Any) -> tuple[str, str, WorkflowExecutionStatus | None, list[str]]:
                rid = unique("start")
                handle = await client.start_workflow(
                    ft.WORKFLOW_NAME, arg, id=rid, task_queue=host.task_queue
                )
                with pytest.raises(WorkflowFailureError) as caught:
                    await asyncio.wait_for(handle.result(), WAIT_S)
                cause = caught.value.cause
                assert isinstance(cause, ApplicationError)
                assert cause.non_retryable
                desc = await handle.describe()
                return cause.type or "", cause.message, desc.status, await task_failures(handle)

            out = await asyncio.gather(*(one(arg) for arg, _, _ in cases))
            # Through TemporalHost the same mistakes are refused before anything starts.
            with pytest.raises(flowcore.InputError, match=r"\$\.n: integer"):
                await host.start(START, {"n": 10**20}, unique("host-start"))
            with pytest.raises(ft.TemporalHostError, match=r"budget\.steps: expected an integer"):
                await host.start(START, None, unique("host-start"), budget={"steps": -1})
            with pytest.raises(ft.TemporalHostError, match="the spec is not valid text"):
                await host.start(LONE, None, unique("host-start"))
            return out

    results = asyncio.run(main())
    for (kind, message, status, failures), (_, want_kind, part) in zip(results, cases, strict=True):
        assert (kind, failures) == (want_kind, []), shown(part, kind, message, failures)
        assert part in message, shown(part, message)
        assert len(message) < 4200
        assert status == WorkflowExecutionStatus.FAILED
    no_lost_errors(caplog)


# --- a foreign worker serves the activity with garbled results ----------------------------------


@activity.defn(name=ft.ACTIVITY_NAME)
async def foreign_work(wire: dict[str, Any], tools: str | None = None, context: Any = None) -> Any:
    """Not flowcore's activity: answers each effect with the garbage its input names."""
    key = wire["idempotencyKey"]
    succeeded = {"kind": "effect-succeeded", "idempotencyKey": key, "atMs": 0}
    match wire["input"]["case"]:
        case "bigint":
            return {**succeeded, "output": {"n": 10**20}}
        case "nan":
            return {**succeeded, "output": float("nan")}
        case "huge":
            return {**succeeded, "output": BIG}
        case "list":
            return [1, 2]
        case "not-json":
            return NOT_JSON
        case "too-deep":
            return TOO_DEEP_JSON
        case "other-key":
            return {**succeeded, "idempotencyKey": "someone-else/x#1", "output": 1}
        case "timer":
            return {"kind": "timer-fired", "idempotencyKey": key, "atMs": 0}
        case "long-failure":
            raise ApplicationError("m" * 100_000, type="t" * 1000, non_retryable=True)
    raise AssertionError(wire)


FOREIGN_FLOW = """
flow: foreign
tools: {t: {}}
steps:
  - {id: call, call_tool: {tool: t, input: {case: "${input.case}"}}}
"""


def test_garbled_activity_results_fail_their_effect(
    temporal_address: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    # case: (the error type, what its message must say)
    cases = {
        "bigint": (UNENCODABLE, "the output.n of {key} cannot be stored: integer 1000"),
        "nan": (UNENCODABLE, "the output of {key} cannot be stored: nan is not a JSON number"),
        "huge": (UNENCODABLE, "the result of {key} cannot be stored: the event is"),
        "list": ("bad-activity-result", "invalid event at $: expected an object, got list"),
        "not-json": ("bad-activity-result", "the result of {key} cannot be decoded (json/plain)"),
        "too-deep": ("bad-activity-result", "cannot be decoded (json/plain): RecursionError"),
        "other-key": ("bad-activity-result", "answered effect-succeeded for 'someone-else/x#1'"),
        "timer": ("bad-activity-result", "answered timer-fired for"),
        "long-failure": ("t" * 200 + "… (1,000 characters)", "m" * 4096 + "… (100,000 char"),
    }

    async def main() -> dict[str, tuple[dict[str, Any], list[str]]]:
        client = await ft.connect(temporal_address)
        queue = unique("q")
        worker = Worker(
            client,
            task_queue=queue,
            workflows=[ft.FlowcoreWorkflow],
            activities=[foreign_work],
            workflow_runner=ft.workflow_runner(),
        )
        async with worker:
            host = ft.TemporalHost(client, queue)
            rids = {c: await host.start(FOREIGN_FLOW, {"case": c}, unique(c)) for c in cases}
            results = await asyncio.gather(*(settled(host, rid) for rid in rids.values()))
            return {
                case: (result, await task_failures(host.handle(rid)))
                for (case, rid), result in zip(rids.items(), results, strict=True)
            }

    runs = asyncio.run(main())
    for case, (kind, part) in cases.items():
        result, failures = runs[case]
        assert failures == [], shown(case, failures)
        assert result["status"] == "failed", shown(case, result)
        key = result["report"][0]["idempotencyKey"]
        assert result["error"]["type"] == kind, shown(case, result["error"])
        assert part.format(key=key) in result["error"]["message"], shown(case, result["error"])
        assert len(result["error"]["message"]) < 4200
    no_lost_errors(caplog)


# --- a bug in the workflow's own code is never lost in a background task -------------------------


@workflow.defn(name=ft.WORKFLOW_NAME, sandboxed=False)
class _BrokenTimers(ft.FlowcoreWorkflow):
    """The workflow with a bug planted: every timer task raises."""

    @workflow.init
    def __init__(self, args: ft.RunArgs) -> None:
        super().__init__(args)

    @workflow.run
    async def run(self, args: ft.RunArgs) -> dict[str, Any]:
        return await super().run(args)

    async def _timer(self, effect: Sleep) -> None:
        raise ZeroDivisionError("a planted bug")


def test_a_bug_in_a_task_fails_the_workflow_task_instead_of_vanishing(
    temporal_address: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)

    async def main() -> list[str]:
        client = await ft.connect(temporal_address)
        queue = unique("q")
        async with Worker(client, task_queue=queue, workflows=[_BrokenTimers]):
            host = ft.TemporalHost(client, queue)
            rid = await host.start(START, None, unique("broken"))
            handle = host.handle(rid)
            failures: list[str] = await wait_for(
                lambda: task_failures(handle), "the workflow task to fail"
            )
            await handle.terminate("the test is over")
            return failures

    failures = asyncio.run(main())
    assert "flowcore workflow bug in the timer task of " in failures[0]
    assert "ZeroDivisionError: a planted bug" in failures[0]
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()]
