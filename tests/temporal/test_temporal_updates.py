"""A flow's updates and queries on Temporal, against the real dev server: Temporal's
own updates (a dynamic handler whose validator is ``flowcore.validate_update``)
and queries, update-with-start and signal-with-start."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("temporalio", reason="the Temporal host tests need temporalio (.[dev])")

from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.client import (
    WithStartWorkflowOperation,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
    WorkflowUpdateStage,
)
from temporalio.common import RawValue, WorkflowIDConflictPolicy
from temporalio.exceptions import ApplicationError
from temporalio.worker import Replayer

import flowcore
import flowcore_temporal as ft
from flowcore_handlers import RunSettled, UnknownRun, UnknownUpdate, UpdateOutcome
from flowcore_temporal._types import MIN_CONTINUE_AFTER_EVENTS as MIN_EVENTS
from flowcore_temporal._types import flow_name, temporal_name

from ..ops.surfaces import TOKEN, http_client
from .support import ROOT, TOOLS, eventually, question, running_host, unique

EXPENSE = """
flow: expense
input_schema:
  type: object
  properties: {amount: {type: number}, requester: {type: string}}
metadata: {stage: string}
updates:
  approve:
    description: Approve or reject the expense
    input_schema: {type: object, properties: {by: {type: string}}, required: [by]}
    validator: "update.input.by != input.requester"
    steps:
      - id: decide
        ask_human: {question: "Approve ${input.amount} for ${input.requester}?", options: [yes, no]}
      - id: note
        set_metadata: {stage: "${steps.decide.answer}"}
    reply: "${ {decision: steps.decide.answer, by: update.input.by} }"
  veto:
    steps:
      - id: veto_now
        fail: {type: not-allowed, message: "vetoes are off"}
  answer:
    reply: "${ {echo: update.input} }"
queries:
  decision:
    value: "${ {stage: metadata.stage, status: status} }"
  status:
    args_schema: {type: object, properties: {shout: {type: boolean}}}
    value: "${ {status: status, args: args} }"
steps:
  - id: wait_close
    await_signal: {signal: close}
"""
INPUT = {"amount": 40, "requester": "bob"}
APPROVAL = ROOT / "examples" / "approval" / "approval.yaml"


def _events(history: Any, kind: int) -> list[Any]:
    return [e for e in history.events if e.event_type == kind]


def test_reserved_names_go_under_a_prefix() -> None:
    assert temporal_name("approve", "update") == "approve"
    assert temporal_name("answer", "update") == "flowcore/answer"
    assert temporal_name("status", "query") == "flowcore/status"
    assert temporal_name("status", "update") == "status"
    assert temporal_name("__stack_trace", "query") == "flowcore/__stack_trace"
    assert flow_name("flowcore/answer") == "answer" and flow_name("approve") == "approve"


def test_refused_updates_never_reach_the_history(temporal_address: str) -> None:
    async def main() -> None:
        async with running_host(temporal_address) as host:
            rid = await host.start(EXPENSE, INPUT, unique("refuse"))
            cases = [
                ("approve", {"by": "bob"}, "validator"),  # the requester approving
                ("approve", {"who": "amy"}, "bad-input"),  # the input schema
                ("nope", None, "unknown-update"),
            ]
            for name, value, code in cases:
                with pytest.raises(flowcore.UpdateRefused) as refused:
                    await host.update(rid, name, value, f"u-{code}")
                assert refused.value.code == code, refused.value
            # Refused by the validator: no accepted update in Temporal's history,
            # no update-requested in flowcore's log.
            history = await host.history(rid)
            assert not _events(history, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED)
            records = await host.log(rid)
            assert not [r for r in records if r.type.startswith("event.") and "u-" in str(r.data)]
            with pytest.raises(UnknownRun):
                await host.update(unique("nobody"), "approve", {"by": "amy"})
            with pytest.raises(UnknownRun):
                await host.query(unique("nobody"), "decision")
            await host.signal(rid, "close")
            assert (await host.result(rid))["status"] == "completed"

    asyncio.run(main())


def test_an_update_replies_once_whatever_the_repeats(temporal_address: str) -> None:
    async def main() -> None:
        async with running_host(temporal_address) as host:
            rid = await host.start(EXPENSE, INPUT, unique("approve"))
            sent = await host.update(rid, "approve", {"by": "amy"}, "u-1", wait=False)
            assert sent == UpdateOutcome(
                run_id=rid, update_id="u-1", name="approve", status="running"
            )
            # Waited for a while: still running (nobody has answered).
            waited = await host.update(rid, "approve", {"by": "amy"}, "u-1", timeout_s=0.2)
            assert waited.status == "running"
            asked = await question(host, rid)
            assert asked["question"] == "Approve 40 for bob?"
            assert (await host.query(rid, "decision")) == {"stage": None, "status": "running"}
            await host.answer(rid, asked["key"], "yes")
            done = await host.update_result(rid, "u-1", wait=True)
            reply = {"decision": "yes", "by": "amy"}
            assert done.status == "completed" and done.output == reply
            # The same id again, with another input: the first reply, nothing run.
            again = await host.update(rid, "approve", {"by": "zed"}, "u-1")
            assert again == done
            assert (await host.update_result(rid, "u-1")) == done
            assert [u.update_id for u in await host.updates(rid)] == ["u-1"]
            assert (await host.query(rid, "decision")) == {"stage": "yes", "status": "running"}
            # A failed update is an outcome, not a failed run; a reserved name
            # (``answer``) reaches the flow's own update.
            vetoed = await host.update(rid, "veto", None, "u-2")
            assert vetoed.status == "failed" and vetoed.error is not None
            assert (vetoed.error.type, vetoed.error.message) == ("not-allowed", "vetoes are off")
            echoed = await host.update(rid, "answer", {"x": 1})
            assert echoed.status == "completed" and echoed.output == {"echo": {"x": 1}}
            with pytest.raises(UnknownUpdate):
                await host.update_result(rid, "u-none")
            await host.signal(rid, "close")
            result = await host.result(rid)
            assert result["status"] == "completed"
            # The closed run still answers: the update by its id, the queries.
            assert (await host.update(rid, "approve", {"by": "amy"}, "u-1")) == done
            with pytest.raises(RunSettled):
                await host.update(rid, "approve", {"by": "amy"}, "u-new")
            assert (await host.query(rid, "decision")) == {"stage": "yes", "status": "completed"}
            assert (await host.query(rid, "status", {"shout": True})) == {
                "status": "completed",
                "args": {"shout": True},
            }
            with pytest.raises(flowcore.QueryError) as failed:
                await host.query(rid, "nope")
            assert failed.value.code == "unknown-query"
            with pytest.raises(flowcore.QueryError) as failed:
                await host.query(rid, "status", {"shout": "loud"})
            assert failed.value.code == "bad-args"
            # flowcore's log holds each update once; its history replays as it ran.
            records = await host.log(rid)
            requested = [
                r.data["updateId"]
                for r in records
                if r.type == "event.reported" and r.data["kind"] == "update-requested"
            ]
            assert requested[:2] == ["u-1", "u-2"] and len(requested) == 3
            history = await host.history(rid)
            accepted = _events(history, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED)
            # u-1 once whatever its repeats; the person's answer; the reserved name.
            requests = [
                e.workflow_execution_update_accepted_event_attributes.accepted_request
                for e in accepted
            ]
            names = [(r.input.name, r.meta.update_id) for r in requests]
            assert names[0] == ("approve", "u-1") and names[2] == ("veto", "u-2")
            assert [n for n, _ in names] == ["approve", "answer", "veto", "flowcore/answer"]
            runner = ft.workflow_runner()
            replayer = Replayer(workflows=[ft.FlowcoreWorkflow], workflow_runner=runner)
            await replayer.replay_workflow(history)  # raises on nondeterminism

    asyncio.run(main())


def test_update_with_start_and_signal_with_start(temporal_address: str) -> None:
    async def main() -> None:
        async with running_host(temporal_address) as host:
            rid = unique("uws")
            echoed = await host.update_with_start(EXPENSE, INPUT, rid, "answer", {"hi": 1}, "w-1")
            assert echoed.status == "completed" and echoed.output == {"echo": {"hi": 1}}
            assert (await host.status(rid))["status"] == "running"
            # The same again: the run exists, the update id is known: the first reply.
            again = await host.update_with_start(EXPENSE, INPUT, rid, "answer", {"hi": 2}, "w-1")
            assert again == echoed
            with pytest.raises(ft.TemporalHostError, match="already exists"):
                await host.update_with_start(
                    EXPENSE, INPUT, rid, "answer", None, "w-2", on_conflict="refuse"
                )
            # A refused update-with-start starts nothing; the refusal is typed.
            fresh = unique("uws-refused")
            with pytest.raises(flowcore.UpdateRefused) as refused:
                await host.update_with_start(EXPENSE, INPUT, fresh, "approve", {"by": "bob"})
            assert refused.value.code == "validator"
            with pytest.raises(UnknownRun):
                await host.status(fresh)
            # Sent by any Temporal client, the workflow's validator refuses it in
            # the run's first task (against the state the run starts in): the
            # update never reaches the history; the run it started goes on.
            sent = await host.client.start_update_with_start_workflow(
                "approve",
                args=[{"by": "bob"}],
                id="raw-1",
                start_workflow_operation=WithStartWorkflowOperation(
                    ft.FlowcoreWorkflow.run,
                    (await host._start_args(EXPENSE, INPUT, fresh))[1],
                    id=fresh,
                    task_queue=host.task_queue,
                    id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                ),
                wait_for_stage=WorkflowUpdateStage.ACCEPTED,
            )
            with pytest.raises(WorkflowUpdateFailedError) as failed:
                await sent.result()
            assert isinstance(failed.value.cause, ApplicationError)
            assert failed.value.cause.details[0] == {"code": "validator", "update": "approve"}
            assert (await host.status(fresh))["status"] == "running"
            history = await host.history(fresh)
            assert not _events(history, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED)

            sid = unique("sws")
            assert await host.signal_with_start(EXPENSE, INPUT, sid, "close") == sid
            assert (await host.result(sid))["status"] == "completed"
            with pytest.raises(RunSettled):
                await host.signal_with_start(EXPENSE, INPUT, sid, "close")
            with pytest.raises(ft.TemporalHostError, match="already exists"):
                await host.signal_with_start(EXPENSE, INPUT, rid, "close", on_conflict="refuse")
            await host.signal_with_start(EXPENSE, INPUT, rid, "close")  # the running one
            assert (await host.result(rid))["status"] == "completed"
            await host.signal(fresh, "close")

    asyncio.run(main())


def test_the_approval_api_on_temporal(temporal_address: str, tmp_path: Path) -> None:
    """The worked example (``examples/approval``) served by the HTTP API over the
    Temporal host (in process): ``approve`` with an update id, sent by
    update-with-start to a run id that does not exist yet, waits until a person
    answers through the API; the same request again answers the same reply and
    runs nothing again (the log holds one ``update-requested``, one question)."""
    flows = tmp_path / "flows"
    flows.mkdir()
    shutil.copy(APPROVAL, flows / "approval.yaml")
    admin = {"Authorization": f"Bearer {TOKEN['admin']}"}

    async def main() -> None:
        async with running_host(temporal_address) as host, http_client(host, flows) as client:
            rid = unique("expense")
            request = {
                "flow": "expense",
                "runId": rid,
                "input": {"amount": 120, "requester": "bob"},
                "name": "approve",
                "updateInput": {"by": "amy"},
                "updateId": "approve-1",
            }
            # Nobody approves their own expense: refused, and no run is started.
            own = dict(request, updateInput={"by": "bob"}, updateId="approve-0")
            refused = await client.post("/api/runs/update-with-start", json=own, headers=admin)
            assert refused.status_code == 422, refused.text
            assert (refused.json()["type"], refused.json()["code"]) == (
                "/problems/update-refused",
                "validator",
            )
            assert (await client.get(f"/api/runs/{rid}", headers=admin)).status_code == 404

            def send() -> Any:
                return client.post("/api/runs/update-with-start", json=request, headers=admin)

            sent = asyncio.create_task(send())

            async def asked() -> Any:
                got = await client.get(f"/api/runs/{rid}/questions", headers=admin)
                return got.status_code == 200 and got.json()["questions"]

            questions = await eventually(asked, f"a question in {rid}")
            assert not sent.done()  # the request waits for the person
            assert questions[0]["question"] == "Approve 120 for bob? (asked by amy)"
            answer = {"key": questions[0]["key"], "answer": "yes"}
            answered = await client.post(f"/api/runs/{rid}/answers", json=answer, headers=admin)
            assert answered.status_code == 200, answered.text
            reply = await asyncio.wait_for(sent, 30)
            assert reply.status_code == 200, reply.text
            first = reply.json()
            assert (first["status"], first["output"]) == (
                "completed",
                {"decision": "yes", "by": "amy"},
            )
            result = await host.result(rid)  # the handler told the main steps
            assert (result["status"], result["output"]) == ("completed", first["output"])
            again = await send()  # the run has closed: its update is still answered
            assert again.status_code == 200 and again.json() == first
            fetched = await client.get(f"/api/runs/{rid}/updates/approve-1", headers=admin)
            assert fetched.json() == first
            decided = await client.post(f"/api/runs/{rid}/queries/decision", headers=admin)
            assert decided.status_code == 200, decided.text
            assert decided.json()["value"] == {
                "decision": "yes",
                "by": "amy",
                "status": "completed",
                "waiting": [],
            }
            records = await host.log(rid)
            reported = [r.data["kind"] for r in records if r.type == "event.reported"]
            emitted = [r.data["kind"] for r in records if r.type == "effect.emitted"]
            assert reported.count("update-requested") == 1
            assert reported.count("human-answered") == 1
            assert emitted.count("ask-human") == 1

    asyncio.run(main())


def test_an_update_waiting_for_a_person_outlives_a_switch_of_temporal_runs(
    temporal_address: str,
) -> None:
    """A run whose history is long goes over to a new Temporal run while an update
    waits for a person: the update goes on in the state, the host sends its id
    again to the new Temporal run, and the caller gets the reply."""

    async def main() -> None:
        async with running_host(temporal_address) as host:
            rid = await host.start(
                EXPENSE, INPUT, unique("switch"), continue_after_events=MIN_EVENTS
            )
            waiting = asyncio.create_task(host.update(rid, "approve", {"by": "amy"}, "s-1"))
            asked = await question(host, rid)
            # Other updates make the history long: the run carries itself over.
            for n in range(MIN_EVENTS // 4):
                echoed = await host.update(rid, "answer", n, f"echo-{n}")
                assert echoed.output == {"echo": n}

            async def switched() -> bool:
                execution: int = (await host.status(rid)).get("execution", 1)
                return execution > 1

            await eventually(switched, f"{rid} in a new Temporal run")
            assert not waiting.done()
            await host.answer(rid, asked["key"], "no")
            done = await asyncio.wait_for(waiting, 30)
            assert done.status == "completed" and done.output == {"decision": "no", "by": "amy"}
            assert (await host.update(rid, "approve", {"by": "amy"}, "s-1")) == done
            await host.signal(rid, "close")
            assert (await host.result(rid))["status"] == "completed"
            records = await host.log(rid)
            requested = [
                r.data["updateId"]
                for r in records
                if r.type == "event.reported" and r.data["kind"] == "update-requested"
            ]
            assert requested.count("s-1") == 1

    asyncio.run(main())


def _raw(data: bytes) -> RawValue:
    return RawValue(Payload(metadata={"encoding": b"json/plain"}, data=data))


def test_hostile_updates_and_queries_from_any_client(temporal_address: str) -> None:
    """What a raw Temporal client in any language may send to a flow's update or
    query: refused with its reason, never a failed workflow task, nothing in
    the history or the log."""

    async def main() -> None:
        async with running_host(temporal_address) as host:
            rid = await host.start(EXPENSE, INPUT, unique("hostile"))
            handle = host.handle(rid)
            await question_free(host, rid)
            sent: list[tuple[str, list[Any]]] = [
                ("approve", [_raw(b"{")]),  # not JSON
                ("approve", [_raw(b"[" * 100_000 + b"]" * 100_000)]),  # too deep to decode
                ("approve", [{"by": "amy"}, 5]),  # a principal that is not text
                ("approve", [{"by": "amy"}, "amy", "more"]),  # three arguments
                ("veto", [_raw(b'{"n": NaN}')]),  # not flowcore data
                ("flowcore/answer", [_raw(b'"\\ud800"')]),  # a lone surrogate
            ]
            refused = []
            for name, args in sent:
                with pytest.raises(WorkflowUpdateFailedError) as caught:
                    await handle.execute_update(name, args=args)
                cause = caught.value.cause
                assert isinstance(cause, ApplicationError), cause
                assert cause.type == "update-refused", (name, cause.type, cause.message)
                refused.append((cause.details[0]["code"], cause.message))
            assert all(code == "bad-input" for code, _ in refused)
            messages = [m for _, m in refused]
            assert "the input cannot be decoded (json/plain)" in messages[0]
            assert "the input cannot be decoded" in messages[1]
            assert "the principal must be a string, got int" in messages[2]
            assert "at most, got 3 arguments" in messages[3]
            assert "nan" in messages[4].lower() and "surrogate" in messages[5]
            assert all(len(m) < 600 for m in messages)
            # A long update id: refused by the host before sending, by the run if sent.
            with pytest.raises(flowcore.UpdateRefused):
                await host.update(rid, "approve", {"by": "amy"}, "x" * 300)
            with pytest.raises(WorkflowUpdateFailedError):
                await handle.execute_update("approve", args=[{"by": "amy"}], id="x" * 300)
            for args in ([_raw(b"{")], [{}, {}]):
                with pytest.raises(WorkflowQueryFailedError, match=r"^bad-args: "):
                    await handle.query("decision", args=args)
            history = await host.history(rid)
            assert not _events(history, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED)
            assert not _events(history, EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED)
            assert not [r for r in await host.log(rid) if r.type.startswith("event.")]
            await host.signal(rid, "close")
            assert (await host.result(rid))["status"] == "completed"

    asyncio.run(main())


async def question_free(host: ft.TemporalHost, run_id: str) -> None:
    """Until the run has started (its status has its flow)."""

    async def started() -> bool:
        return "flowId" in await host.status(run_id)

    await eventually(started, f"{run_id} started")


@pytest.mark.parametrize("sandbox", ["passthrough", "reimport"])
def test_updates_and_queries_in_the_sandbox(temporal_address: str, sandbox: str) -> None:
    """The update and query handlers under Temporal's sandbox, flowcore passed
    through or imported again there (nothing they do is nondeterministic)."""

    async def main() -> None:
        async with running_host(temporal_address, sandbox=sandbox) as host:
            rid = unique(f"sandbox-{sandbox}")
            echoed = await host.update_with_start(EXPENSE, INPUT, rid, "answer", [1], "e-1")
            assert echoed.output == {"echo": [1]}
            with pytest.raises(flowcore.UpdateRefused):
                await host.update(rid, "approve", {"by": "bob"})
            vetoed = await host.update(rid, "veto")
            assert vetoed.error is not None and vetoed.error.type == "not-allowed"
            assert (await host.query(rid, "decision")) == {"stage": None, "status": "running"}
            await host.signal(rid, "close")
            assert (await host.result(rid))["status"] == "completed"

    asyncio.run(main())


def test_a_worker_that_replays_every_task_gives_the_same_replies(temporal_address: str) -> None:
    """A worker that keeps no workflow in its cache replays the whole history at
    every workflow task, as a restarted worker does: the update handlers run
    again from the history (without their validators) and the run's updates,
    replies and repeats come out the same."""

    async def main() -> None:
        client = await ft.connect(temporal_address)
        queue = unique("q-nocache")
        worker = ft.new_worker(client, task_queue=queue, tools=str(TOOLS), max_cached_workflows=0)
        async with worker:
            host = ft.TemporalHost(client, queue)
            rid = unique("nocache")
            waiting = asyncio.create_task(
                host.update_with_start(EXPENSE, INPUT, rid, "approve", {"by": "amy"}, "n-1")
            )
            asked = await first_question(host, rid)
            echoed = await host.update(rid, "answer", "hi", "n-2")
            assert echoed.output == {"echo": "hi"}
            await host.answer(rid, asked["key"], "yes")
            done = await asyncio.wait_for(waiting, 30)
            assert done.output == {"decision": "yes", "by": "amy"}
            assert (await host.update(rid, "approve", {"by": "amy"}, "n-1")) == done
            assert [u.update_id for u in await host.updates(rid)] == ["n-1", "n-2"]
            await host.signal(rid, "close")
            assert (await host.result(rid))["status"] == "completed"
            failures = _events(await host.history(rid), EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED)
            assert failures == []

    asyncio.run(main())


async def first_question(host: ft.TemporalHost, run_id: str) -> dict[str, Any]:
    """The run's first open question, once it has one (the run may not exist yet)."""

    async def asked() -> Any:
        try:
            questions = await host.questions(run_id)
        except ft.TemporalUnknownRun:
            return None  # the request that starts it has not reached Temporal yet
        return questions[0] if questions else None

    found: dict[str, Any] = await eventually(asked, f"a question in {run_id}")
    return found


def test_an_update_nobody_takes_is_a_clear_error(
    temporal_address: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No worker polls the run's task queue: the update is not taken in time, and
    the error says what to check (not Temporal's timeout)."""
    from datetime import timedelta

    from flowcore_temporal import _updates

    monkeypatch.setattr(_updates, "_QUERY_TIMEOUT", timedelta(seconds=0.5))

    async def main() -> None:
        host = ft.TemporalHost(await ft.connect(temporal_address), unique("q-nobody"))
        rid = await host.start(EXPENSE, INPUT, unique("nobody"))
        with pytest.raises(ft.TemporalHostError, match="is a worker polling task queue"):
            await host.update(rid, "approve", {"by": "amy"})
        await host.handle(rid).terminate("test over")

    asyncio.run(main())
