"""The local host through its Python API, on real SQLite files."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import flowcore
from flowcore import CallTool, RunAgent
from flowcore_handlers import HandlerError, Registry, Result
from flowcore_local import HostError, LocalHost, NotAFlowcoreDatabase

from .local_helpers import LOOP, work_until

CALLS: list[str] = []


def echo(call: CallTool) -> Any:
    CALLS.append(call.idempotency_key)
    return {"echo": call.input}


async def slow(call: CallTool) -> Any:
    await asyncio.sleep(0.05)
    return "slow"


def broken(call: CallTool) -> Any:
    raise HandlerError("busy", "come back later", retryable=True)


def agent(run: RunAgent) -> Result:
    return Result(f"done: {run.prompt}", flowcore.Usage(steps=1, cost_minor_units=7))


REGISTRY = Registry(
    tools={"echo": echo, "slow": slow, "broken": broken, "undo": echo},
    agents={"bot": agent},
)

FLOW = """
flow: api
budget: {steps: 50, cost_minor_units: 100}
tools: {echo: {class: readonly}, slow: {}, broken: {}, undo: {}}
steps:
  - {id: a, call_tool: {tool: echo, input: "${input.x}"}}
  - {id: b, run_agent: {agent: bot, prompt: "hi ${steps.a.output.echo}"}}
  - {id: c, call_tool: {tool: slow}}
output: "${ {a: steps.a.output, b: steps.b.output, c: steps.c.output} }"
"""


def run_host(db: Path | str, body: Any, **options: Any) -> Any:
    async def main() -> Any:
        async with LocalHost(db, registry=REGISTRY, **options) as host:
            return await body(host)

    return asyncio.run(main())


def test_a_run_goes_from_start_to_settled_and_its_log_replays(
    tmp_path: Path, local_db: Path | str
) -> None:
    async def body(host: LocalHost) -> Any:
        rid = await host.start(FLOW, {"x": 5}, "r1")
        await host.work(until_settled=rid)
        return await host.run(rid), await host.export(rid), await host.show(rid)

    row, log, info = run_host(local_db, body)
    assert row.status == "completed"
    assert row.output == {"a": {"echo": 5}, "b": "done: hi 5", "c": "slow"}
    assert info["budget"] == {
        "stepsUsed": 4,
        "stepsLeft": 46,
        "costUsed": 7,
        "costLeft": 93,
        "tokensUsed": 0,
        "tokensLeft": None,
        "inputTokensUsed": 0,
        "outputTokensUsed": 0,
        "cacheReadTokensUsed": 0,
        "toolCallsUsed": info["budget"]["toolCallsUsed"],
        "toolCallsLeft": None,
        "turnsUsed": 0,
        "turnsLeft": None,
    }
    flow = flowcore.parse_flow(FLOW)
    report = flowcore.replay(flowcore.decode_log(log).records, flow)
    assert report.status == "completed"


def test_start_is_idempotent_by_run_id_and_conflicting_input_is_an_error(
    tmp_path: Path, local_db: Path | str
) -> None:
    async def body(host: LocalHost) -> Any:
        first = await host.start(FLOW, {"x": 1}, "same")
        again = await host.start(FLOW, {"x": 1}, "same")
        with pytest.raises(HostError, match="already exists with a different input"):
            await host.start(FLOW, {"x": 2}, "same")
        return first, again, len(await host.runs())

    assert run_host(local_db, body) == ("same", "same", 1)


def test_timers_are_durable_across_a_restart(tmp_path: Path, local_db: Path | str) -> None:
    spec = "flow: t\nsteps:\n  - {id: nap, sleep: {for_ms: 300}}\noutput: done\n"
    db = local_db

    async def first(host: LocalHost) -> str:
        rid = await host.start(spec, {}, "sleepy")
        stop = asyncio.Event()
        asyncio.get_running_loop().call_later(0.05, stop.set)
        await host.work(stop)  # stops long before the timer is due
        assert (await host.run(rid)).status == "running"
        return rid

    rid = run_host(db, first)

    async def second(host: LocalHost) -> Any:
        await asyncio.sleep(0.3)  # the timer falls due while no host runs
        await host.work(until_settled=rid)
        return await host.run(rid)

    row = run_host(db, second)
    assert (row.status, row.output) == ("completed", "done")


def test_signals_are_buffered_answers_checked_and_cancel_compensates(
    tmp_path: Path, local_db: Path | str
) -> None:
    spec = """
flow: s
tools: {echo: {class: readonly}, undo: {}}
steps:
  - id: charge
    call_tool: {tool: echo, input: charge}
    compensate: [{id: refund, call_tool: {tool: undo, input: refund}}]
  - {id: q, ask_human: {question: "go?", options: [yes, no]}}
  - {id: w, await_signal: {signal: go}}
  - {id: w2, await_signal: {signal: never}}
output: "${steps.w.output}"
"""

    async def body(host: LocalHost) -> Any:
        rid = await host.start(spec, {}, "sig")
        await host.signal(rid, "go", {"n": 1})  # before the flow waits for it
        stop = asyncio.Event()
        worker = asyncio.create_task(host.work(stop))
        while not (await host.show(rid))["questions"]:
            await asyncio.sleep(0.01)
        with pytest.raises(HostError, match=r"answer 'maybe' is not one of \['yes', 'no'\]"):
            await host.answer(rid, "sig/q#1", "maybe")
        await host.answer(rid, "sig/q#1", "yes")
        while (await host.show(rid))["waitingFor"] != ["never"]:
            await asyncio.sleep(0.01)
        await host.cancel(rid, "enough")
        row = await host.wait(rid, timeout=10)
        stop.set()
        await worker
        return row, [r.data for r in await host.records(rid)]

    row, records = run_host(local_db, body)
    assert row.status == "cancelled"
    tools = [d.get("tool") for d in records if isinstance(d, dict) and d.get("kind") == "call-tool"]
    assert tools == ["echo", "undo"]


def test_subflows_run_as_child_runs_sharing_the_budget(
    tmp_path: Path, local_db: Path | str
) -> None:
    parent = """
flow: parent
budget: {steps: 10}
steps:
  - {id: kid, run_subflow: {flow: child, input: {x: 3}}}
output: "${steps.kid.output}"
"""
    child = tmp_path / "child.yaml"
    child.write_text(
        "flow: child\ntools: {echo: {class: readonly}}\n"
        "steps:\n  - {id: e, call_tool: {tool: echo, input: '${input.x}'}}\n"
        "output: '${steps.e.output}'\n"
    )

    async def body(host: LocalHost) -> Any:
        rid = await host.start(parent, {}, "p", flows=[child])
        await host.work(until_settled=rid)
        kid = await host.run("p/kid#1")
        return await host.run(rid), kid, await host.show(rid)

    row, kid, info = run_host(local_db, body)
    assert row.output == {"echo": 3}
    assert (kid.parent_run, kid.depth, kid.status) == ("p", 1, "completed")
    assert info["children"] == ["p/kid#1"]
    assert info["budget"]["stepsUsed"] == 2  # the subflow effect + the child's call


WAITING_CHILD = "flow: kid\nsteps:\n  - {id: w, await_signal: {signal: never}}\n"


def test_a_subflow_abandoned_by_a_timeout_is_cancelled_and_the_parent_goes_on(
    tmp_path: Path,
    local_db: Path | str,
) -> None:
    parent = """
flow: impatient
tools: {echo: {class: readonly}}
steps:
  - id: t
    try:
      - {id: k, run_subflow: {flow: kid}, timeout_ms: 200}
    catch:
      - steps: [{id: fallback, call_tool: {tool: echo, input: gave up}}]
output: "${steps.t.output}"
"""
    child = tmp_path / "kid.yaml"
    child.write_text(WAITING_CHILD)

    async def body(host: LocalHost) -> Any:
        rid = await host.start(parent, {}, "p", flows=[child])
        await asyncio.wait_for(host.work(until_settled=rid), timeout=20)
        return await host.run(rid), await host.run("p/k#1"), await host.export(rid)

    row, kid, log = run_host(local_db, body)
    assert (row.status, row.output) == ("completed", {"echo": "gave up"})
    assert kid.status == "cancelled"
    records = flowcore.decode_log(log).records
    assert flowcore.replay(records, flowcore.parse_flow(parent)).status == "completed"


def test_cancelling_a_parent_cancels_its_running_children(
    tmp_path: Path, local_db: Path | str
) -> None:
    parent = "flow: p\nsteps:\n  - {id: k, run_subflow: {flow: kid}}\n"
    child = tmp_path / "kid.yaml"
    child.write_text(WAITING_CHILD)

    async def body(host: LocalHost) -> Any:
        rid = await host.start(parent, {}, "p", flows=[child])

        async def child_waits() -> bool:
            return bool(await host.children(rid)) and (await host.run("p/k#1")).status == "running"

        await work_until(host, child_waits)
        await host.cancel(rid, "no longer needed")
        return await host.run(rid), await host.run("p/k#1")

    row, kid = run_host(local_db, body)
    assert row.status == "cancelled"
    assert kid.status == "cancelled"


MIRROR = """
flow: mirror
budget: {wall_clock_ms: 3600000}
tools: {echo: {class: readonly}}
steps:
  - id: both
    parallel:
      branches:
        one: [{id: w1, await_signal: {signal: go, timeout_ms: 60000}}]
        two: [{id: w2, await_signal: {signal: go}}]
  - id: race
    parallel:
      mode: race
      branches:
        call: [{id: f, call_tool: {tool: echo}, timeout_ms: 60000}]
        human: [{id: q, ask_human: {question: "which?", options: [a, b]}}]
output: "${steps.race.output}"
"""


# SQLite only: it reads or doctors the SQLite file itself.
def test_the_outbox_holds_what_the_run_waits_for(tmp_path: Path) -> None:
    """Rows are opened and closed as ``flowcore.plan`` says; ``show`` reads ``waiting_for``."""
    Seen = tuple[set[str], set[str], dict[str, Any]]  # outbox keys, waits, show

    async def body(host: LocalHost) -> list[Seen]:
        rid = await host.start(MIRROR, {}, "m")

        async def look() -> Seen:
            view = flowcore.waiting_for(host.store.state(rid))
            waits = {w.key for w in view.work if not w.held} | {q.key for q in view.questions}
            waits |= {s.key for s in view.signals} | {t.key for t in view.timers}
            with sqlite3.connect(host.db_path) as conn:
                query = "SELECT key FROM outbox WHERE run_id = ?"
                rows = {key for (key,) in conn.execute(query, (rid,))}
            return rows, waits, await host.show(rid)

        await host.signal(rid, "go")  # w1 takes it (its timeout goes); w2 waits
        one = await look()
        await host.signal(rid, "go")  # w2 takes it: the race starts
        two = await look()
        await host.answer(rid, "m/q#1", "b")  # the human wins: f#1 and the timers go
        return [one, two, await look()]

    one, two, three = run_host(tmp_path / "m.db", body)
    for rows, waits, _ in (one, two, three):
        assert rows == waits
    assert one[0] == {"m/$deadline", "m/w2#1"} and one[2]["waitingFor"] == ["go"]
    assert two[0] == {"m/$deadline", "m/f#1", "m/f/timeout", "m/q#1"}
    assert two[2]["questions"] == [{"key": "m/q#1", "question": "which?", "options": ["a", "b"]}]
    assert three[0] == set() and three[2]["output"] == {"human": "b"}


def test_unknown_subflow_fails_the_step_clearly(tmp_path: Path, local_db: Path | str) -> None:
    spec = "flow: p\nsteps:\n  - {id: kid, run_subflow: {flow: nowhere}}\n"

    async def body(host: LocalHost) -> Any:
        rid = await host.start(spec, {}, "p")
        await host.work(until_settled=rid)
        return await host.run(rid)

    row = run_host(local_db, body)
    assert row.status == "failed"
    assert row.error["type"] == "unknown-flow"


def test_handler_errors_become_effect_failed_with_their_type(
    tmp_path: Path, local_db: Path | str
) -> None:
    spec = "flow: b\ntools: {broken: {}}\nsteps:\n  - {id: x, call_tool: {tool: broken}}\n"

    async def body(host: LocalHost) -> Any:
        rid = await host.start(spec, {}, "b")
        await host.work(until_settled=rid)
        return await host.run(rid)

    row = run_host(local_db, body)
    assert row.error == {"type": "busy", "message": "come back later", "retryable": True}


# SQLite only: it reads or doctors the SQLite file itself.
def test_a_file_that_is_not_a_flowcore_database_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE mine (x)")
    conn.commit()
    conn.close()

    async def body(host: LocalHost) -> None:
        return None

    with pytest.raises(NotAFlowcoreDatabase):
        run_host(other, body)
    assert sqlite3.connect(other).execute("SELECT count(*) FROM mine").fetchone() == (0,)


# SQLite only: it reads or doctors the SQLite file itself.
def test_a_restart_restores_what_the_run_holds_not_its_history(tmp_path: Path) -> None:
    """After a restart the loop's results and report rows are not read back.

    Finished iterations deleted their result rows; the report rows are read
    once, when the run settles.
    """
    db = tmp_path / "loop.db"

    async def first(host: LocalHost) -> Any:
        rid = await host.start(LOOP, {"items": list(range(150))}, "loop")

        async def waiting() -> bool:
            return bool((await host.show(rid))["waitingFor"])

        await work_until(host, waiting)

    run_host(db, first)
    with sqlite3.connect(db) as conn:
        (results,) = conn.execute("SELECT count(*) FROM results WHERE run_id = 'loop'").fetchone()
        (rows,) = conn.execute("SELECT count(*) FROM report WHERE run_id = 'loop'").fetchone()
    assert results == 1  # the for_each's own result; no per-iteration rows
    assert rows == 150

    async def second(host: LocalHost) -> Any:
        state = host.store.state("loop")
        assert state.report_complete is False
        await host.signal("loop", "go")
        await host.work(until_settled="loop")
        return await host.run("loop"), await host.export("loop")

    row, log = run_host(db, second)
    assert (row.status, row.output) == ("completed", 150)
    records = flowcore.decode_log(log).records
    settled = records[-2].data
    assert len(settled["report"]) == 151  # every call, read back for settlement
    report = flowcore.replay(records, flowcore.parse_flow(LOOP))
    assert report.status == "completed"


def test_a_failing_event_in_a_group_commit_leaves_the_others_applied(
    tmp_path: Path, local_db: Path | str
) -> None:
    """One bad event rolls the optimistic batch back; the retry isolates it."""
    wait_spec = "flow: w\nsteps:\n  - {id: go, await_signal: {signal: go}}\noutput: done\n"

    async def body(host: LocalHost) -> Any:
        rid = await host.start(wait_spec, {}, "good")
        loop = asyncio.get_running_loop()
        batch: list[tuple[str, flowcore.Event, asyncio.Future[Any]]] = [
            ("good", flowcore.SignalReceived(signal="go", at_ms=1), loop.create_future()),
            ("missing", flowcore.SignalReceived(signal="go", at_ms=1), loop.create_future()),
        ]
        results = host._commit(batch, 1)
        return results, await host.run(rid), await host.records(rid)

    results, row, records = run_host(local_db, body)
    (good, _), (missing, _) = results
    assert good.rejected is None and good.settled is not None
    assert missing.rejected == "no run 'missing' in the database"
    assert (row.status, row.output) == ("completed", "done")
    # Written once: the rolled-back attempt left no rows behind.
    assert [r.type for r in records].count("event.reported") == 1


def test_a_tools_file_that_fails_to_import_fails_the_step_with_the_reason(
    tmp_path: Path,
    local_db: Path | str,
) -> None:
    tools = tmp_path / "broken_tools.py"
    tools.write_text("raise RuntimeError('no network here')\nTOOLS = {}\n")
    spec = "flow: t\ntools: {x: {}}\nsteps:\n  - {id: a, call_tool: {tool: x}}\n"

    async def body(host: LocalHost) -> Any:
        rid = await host.start(spec, {}, "t1", tools=str(tools))
        await asyncio.wait_for(host.work(until_settled=rid), timeout=20)
        return await host.run(rid)

    async def main() -> Any:
        async with LocalHost(local_db) as host:
            first = await body(host)
        async with LocalHost(local_db) as host:  # a second load fails alike
            rid = await host.start(spec, {}, "t2", tools=str(tools))
            await asyncio.wait_for(host.work(until_settled=rid), timeout=20)
            return first, await host.run(rid)

    for row in asyncio.run(main()):
        assert row.status == "failed"
        assert row.error["type"] == "tools-module-error"
        assert "no network here" in row.error["message"]


def test_sync_handlers_run_up_to_the_host_concurrency_at_once(
    tmp_path: Path, local_db: Path | str
) -> None:
    """Twelve blocking sync handlers meet at a barrier: all must run at once."""
    import threading

    barrier = threading.Barrier(12, timeout=10)

    def meet(call: CallTool) -> Any:
        barrier.wait()
        return call.input

    spec = """
flow: fan
tools: {meet: {class: readonly}}
steps:
  - id: all
    for_each:
      items: "${input.items}"
      steps: [{id: m, call_tool: {tool: meet, input: "${item}"}}]
output: "${steps.all.output}"
"""

    async def main() -> Any:
        registry = Registry(tools={"meet": meet})
        async with LocalHost(local_db, registry=registry, concurrency=16) as host:
            rid = await host.start(spec, {"items": list(range(12))}, "fan")
            await asyncio.wait_for(host.work(until_settled=rid), timeout=30)
            return await host.run(rid)

    row = asyncio.run(main())
    assert (row.status, row.output) == ("completed", list(range(12)))
