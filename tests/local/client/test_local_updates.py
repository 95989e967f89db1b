"""Updates and queries on the local host, on real SQLite files (local.md,
"Updates and queries"; hosts.md; language.md §16): a refusal logs nothing,
an update is waited for or not, its outcome outlives a restart, a repeated id
runs nothing twice, a failed handler fails only the update, a cancel abandons
a waiting update, update-with-start and signal-with-start are one write, and
queries read running and settled runs."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import flowcore
from flowcore_handlers import RunSettled, UnknownRun, UnknownUpdate, UpdateOutcome
from flowcore_local import HostError, LocalHost

from ..local_helpers import JOURNALED, journal, settle, tools_file, work_until

FLOW = """
flow: upd
version: 1
tools: {echo: {class: readonly}, down: {class: readonly}}
updates:
  ask:
    description: Ask a person, then echo the answer
    input_schema: {type: object, properties: {by: {type: string}}, required: [by]}
    validator: "update.input.by != 'mallory'"
    steps:
      - id: q
        ask_human: {question: "ok?", options: ["yes", "no"]}
      - id: e
        call_tool: {tool: echo, input: "${steps.q.answer}"}
    reply: "${ {answer: steps.q.answer, echo: steps.e.output, by: update.input.by} }"
  quick:
    reply: "${update.input}"
  boom:
    steps:
      - {id: b, call_tool: {tool: down, input: 1}}
queries:
  seen:
    args_schema: {type: object}
    value: "${ {status: status, args: args, updates: updates} }"
steps:
  - {id: go, await_signal: {signal: go}}
output: done
"""


def host_of(tmp_path: Path, db: Path | str) -> LocalHost:
    body = JOURNALED + '\nTOOLS = {{"echo": echo, "down": down}}\n'
    tools = tools_file(tmp_path, "upd_tools", body)
    return LocalHost(db, tools=str(tools))


async def count(host: LocalHost, run_id: str) -> int:
    return len(await host.records(run_id))


async def requested(host: LocalHost, run_id: str) -> list[str]:
    """The update ids of the run's logged ``update-requested`` events."""
    return [
        r.data["updateId"]
        for r in await host.records(run_id)
        if r.type == "event.reported" and r.data["kind"] == "update-requested"
    ]


async def answer_open(host: LocalHost, run_id: str, answer: str = "yes") -> None:
    """Answer the run's one open question once it is there."""
    for _ in range(500):
        questions = await host.open_questions(run_id)
        if questions:
            await host.answer(run_id, questions[0].key, answer)
            return
        await asyncio.sleep(0.01)
    raise AssertionError("no question opened")


async def until_ended(host: LocalHost, run_id: str, update_id: str) -> UpdateOutcome:
    """Run the worker until the update has ended; its outcome."""

    async def ended() -> bool:
        return (await host.update_result(run_id, update_id)).status != "running"

    await work_until(host, ended)
    return await host.update_result(run_id, update_id)


def test_a_refused_update_logs_nothing_and_says_why(tmp_path: Path, local_db: Path | str) -> None:
    async def main() -> None:
        async with host_of(tmp_path, local_db) as host:
            await host.start(FLOW, {}, "r")
            before = await count(host, "r")
            for name, given, code in (
                ("nope", None, "unknown-update"),
                ("ask", {"who": "x"}, "bad-input"),
                ("ask", {"by": "mallory"}, "validator"),
            ):
                with pytest.raises(flowcore.UpdateRefused) as refused:
                    await host.update("r", name, given, "u-" + code, wait=False)
                assert refused.value.code == code
                assert refused.value.update == name
            assert await count(host, "r") == before
            assert await requested(host, "r") == []
            with pytest.raises(UnknownUpdate):
                await host.update_result("r", "u-validator")
            with pytest.raises(UnknownRun):
                await host.update("nobody", "ask", {"by": "bob"})

    asyncio.run(main())


def test_no_wait_then_result_after_a_restart_and_a_repeated_id_runs_nothing(
    tmp_path: Path,
    local_db: Path | str,
) -> None:
    async def first() -> tuple[UpdateOutcome, UpdateOutcome]:
        async with host_of(tmp_path, local_db) as host:
            await host.start(FLOW, {}, "r")
            accepted = await host.update("r", "ask", {"by": "bob"}, "u1", wait=False)
            await answer_open(host, "r")
            return accepted, await until_ended(host, "r", "u1")

    accepted, done = asyncio.run(first())
    assert accepted == UpdateOutcome(run_id="r", update_id="u1", name="ask", status="running")
    reply = {"answer": "yes", "echo": {"echo": "yes"}, "by": "bob"}
    assert done.status == "completed" and done.output == reply

    async def again() -> tuple[UpdateOutcome, UpdateOutcome, int, int]:
        async with host_of(tmp_path, local_db) as host:  # a new host on the same file: a restart
            before = await count(host, "r")
            result = await host.update_result("r", "u1")
            repeated = await host.update("r", "ask", {"by": "someone else"}, "u1")
            return result, repeated, before, await count(host, "r")

    result, repeated, before, after = asyncio.run(again())
    assert result == done and repeated == done
    assert after == before  # the repeat logged nothing
    assert journal(tmp_path) == {"r/~update-1/e#1": 1}

    async def settled() -> UpdateOutcome:
        async with host_of(tmp_path, local_db) as host:
            await host.signal("r", "go")
            assert (await settle(host, "r")).status == "completed"
        async with host_of(tmp_path, local_db) as host:  # read from the settled run's checkpoint
            return await host.update("r", "ask", {"by": "bob"}, "u1")

    assert asyncio.run(settled()) == done
    assert journal(tmp_path) == {"r/~update-1/e#1": 1}


def test_a_waiting_caller_gets_the_reply_and_a_timeout_answers_running(
    tmp_path: Path, local_db: Path | str
) -> None:
    async def main() -> tuple[UpdateOutcome, UpdateOutcome, UpdateOutcome]:
        async with host_of(tmp_path, local_db) as host:
            await host.start(FLOW, {}, "r")
            timed = await host.update("r", "ask", {"by": "bob"}, "u1", timeout_s=0.05)
            waiting = asyncio.create_task(host.update_result("r", "u1", wait=True))
            await asyncio.sleep(0.05)
            assert not waiting.done()
            await answer_open(host, "r", "no")

            async def answered() -> bool:
                return waiting.done()

            await work_until(host, answered)
            quick = await host.update("r", "quick", [1, 2])  # ends in the decision itself
            return timed, waiting.result(), quick

    timed, waited, quick = asyncio.run(main())
    assert timed.status == "running"
    assert waited.status == "completed"
    assert waited.output == {"answer": "no", "echo": {"echo": "no"}, "by": "bob"}
    assert quick.status == "completed" and quick.output == [1, 2]
    assert len(quick.update_id) == 32  # made by the host: a uuid4's hex


def test_a_failed_handler_fails_the_update_not_the_run(
    tmp_path: Path, local_db: Path | str
) -> None:
    async def main() -> tuple[UpdateOutcome, str]:
        async with host_of(tmp_path, local_db) as host:
            await host.start(FLOW, {}, "r")
            await host.update("r", "boom", None, "b1", wait=False)
            outcome = await until_ended(host, "r", "b1")
            return outcome, (await host.run("r")).status

    outcome, status = asyncio.run(main())
    assert outcome.status == "failed"
    assert outcome.error is not None and outcome.error.type == "down"
    assert status == "running"


def test_a_cancel_abandons_a_waiting_update(tmp_path: Path, local_db: Path | str) -> None:
    async def main() -> tuple[UpdateOutcome, Any]:
        async with host_of(tmp_path, local_db) as host:
            await host.start(FLOW, {}, "r")
            waiting = asyncio.create_task(host.update("r", "ask", {"by": "bob"}, "u1"))
            await question_opened(host, "r")
            await host.cancel("r", "no longer needed")
            outcome = await asyncio.wait_for(waiting, 10)
            with pytest.raises(RunSettled):
                await host.update("r", "quick", 1, "late")
            return outcome, await host.update("r", "ask", {"by": "bob"}, "u1")

    outcome, again = asyncio.run(main())
    assert outcome.status == "failed"
    assert outcome.error is not None and outcome.error.type == "update-abandoned"
    assert again == outcome  # a settled run still answers a known id


async def question_opened(host: LocalHost, run_id: str) -> None:
    for _ in range(500):
        if await host.open_questions(run_id):
            return
        await asyncio.sleep(0.01)
    raise AssertionError("no question opened")


AGAIN = """
flow: again
version: 1
updates:
  ask:
    steps:
      - id: q
        ask_human: {question: "ok?"}
steps:
  - {id: next, await_signal: {signal: next}}
  - {id: over, continue_as_new: {}}
"""


def test_a_continue_as_new_abandons_a_waiting_update_and_opens_a_fresh_window(
    tmp_path: Path,
    local_db: Path | str,
) -> None:
    async def main() -> tuple[UpdateOutcome, UpdateOutcome]:
        async with host_of(tmp_path, local_db) as host:
            await host.start(AGAIN, {}, "c")
            waiting = asyncio.create_task(host.update("c", "ask", None, "u1"))
            await question_opened(host, "c")
            await host.signal("c", "next")
            outcome = await asyncio.wait_for(waiting, 10)
            with pytest.raises(UnknownUpdate):
                await host.update_result("c", "u1")  # the new incarnation's window is fresh
            again = await host.update("c", "ask", None, "u1", wait=False)  # sent again: runs
            return outcome, again

    outcome, again = asyncio.run(main())
    assert outcome.status == "failed"
    assert outcome.error is not None and outcome.error.type == "update-abandoned"
    assert (outcome.name, outcome.update_id) == ("ask", "u1")
    assert again.status == "running"


def test_update_with_start_on_a_new_and_an_existing_run_and_refuse(
    tmp_path: Path, local_db: Path | str
) -> None:
    async def main() -> None:
        async with host_of(tmp_path, local_db) as host:
            first = await host.update_with_start(FLOW, {}, "w", "quick", "a", "q1")
            assert first.status == "completed" and first.output == "a"
            assert (await host.run("w")).status == "running"
            # The id is taken: the update goes to that run (its input is not compared).
            second = await host.update_with_start(FLOW, {"other": 1}, "w", "quick", "b", "q2")
            assert second.output == "b"
            assert await requested(host, "w") == ["q1", "q2"]
            with pytest.raises(HostError, match="already exists"):
                await host.update_with_start(
                    FLOW, {}, "w", "quick", "c", "q3", on_conflict="refuse"
                )
            # A refused update starts no run either: one transaction.
            with pytest.raises(flowcore.UpdateRefused):
                await host.update_with_start(FLOW, {}, "v", "ask", {"by": "mallory"})
            with pytest.raises(UnknownRun):
                await host.run("v")
            # The same request again answers the first outcome.
            assert await host.update_with_start(FLOW, {}, "w", "quick", "zzz", "q1") == first
            assert await requested(host, "w") == ["q1", "q2"]

    asyncio.run(main())


def test_signal_with_start_starts_or_signals_in_one_write(
    tmp_path: Path, local_db: Path | str
) -> None:
    async def main() -> None:
        async with host_of(tmp_path, local_db) as host:
            assert await host.signal_with_start(FLOW, {}, "s", "go", {"n": 1}) == "s"
            assert (await settle(host, "s")).output == "done"
            with pytest.raises(HostError, match="never waits for signal 'nope'"):
                await host.signal_with_start(FLOW, {}, "t", "nope")
            with pytest.raises(UnknownRun):
                await host.run("t")  # the refused signal started nothing
            await host.start(FLOW, {}, "e")
            assert await host.signal_with_start(FLOW, {}, "e", "go") == "e"
            assert (await settle(host, "e")).status == "completed"
            with pytest.raises(HostError, match="already exists"):
                await host.signal_with_start(FLOW, {}, "e", "go", on_conflict="refuse")

    asyncio.run(main())


def test_queries_read_running_and_settled_runs_and_write_nothing(
    tmp_path: Path, local_db: Path | str
) -> None:
    async def main() -> None:
        async with host_of(tmp_path, local_db) as host:
            await host.start(FLOW, {}, "r")
            await host.update("r", "quick", 7, "q1")
            before = await count(host, "r")
            running = await host.query("r", "seen", {"x": 1})
            assert running["status"] == "running" and running["args"] == {"x": 1}
            assert running["updates"]["q1"]["output"] == 7
            assert await count(host, "r") == before
            with pytest.raises(flowcore.QueryError) as unknown:
                await host.query("r", "nope")
            assert unknown.value.code == "unknown-query"
            with pytest.raises(flowcore.QueryError) as bad:
                await host.query("r", "seen", [1])
            assert bad.value.code == "bad-args"
            await host.signal("r", "go")
            await settle(host, "r")
            settled = await host.query("r", "seen", {})
            assert settled["status"] == "completed"
            assert settled["updates"]["q1"]["status"] == "completed"

    asyncio.run(main())
