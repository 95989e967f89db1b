"""continue_as_new on the local host, on real SQLite files: a run that loops
forever keeps a bounded log, loses no signal, and survives a restart."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import flowcore
from flowcore import CallTool
from flowcore_handlers import Registry
from flowcore_local import LocalHost

from ..local_helpers import query

CALLS: list[str] = []


def echo(call: CallTool) -> Any:
    CALLS.append(call.idempotency_key)
    return call.input


REGISTRY = Registry(tools={"echo": echo})

# A reminder that fires three times per incarnation, then continues with the
# next round, until round 12 (a stand-in for "forever" that a test can end).
REMINDER = """
flow: reminder
tools: {echo: {class: idempotent}}
steps:
  - id: tick
    repeat:
      every_ms: 1
      max_fires: 3
      steps:
        - {id: ping, call_tool: {tool: echo, input: "${input.round}"}}
  - id: next
    switch:
      - if: "input.round < `12`"
        steps:
          - id: again
            continue_as_new: {input: {round: "${sum([input.round, `1`])}"}}
output: "${ {round: input.round, incarnation: run.incarnation} }"
"""

# Takes one signal per incarnation, so the others wait in the buffer and
# are carried from one incarnation to the next.
SIGNALS = """
flow: notes
tools: {echo: {class: idempotent}}
steps:
  - {id: take, await_signal: {signal: note}}
  - {id: keep, call_tool: {tool: echo, input: "${steps.take.output}"}}
  - id: next
    switch:
      - if: "length(input.seen) < `7`"
        steps:
          - id: again
            continue_as_new:
              input: {seen: "${[input.seen, [steps.take.output]][]}"}
output: "${[input.seen, [steps.take.output]][]}"
"""


def run_host(db: Path | str, body: Any) -> Any:
    async def main() -> Any:
        async with LocalHost(db, registry=REGISTRY) as host:
            return await body(host)

    return asyncio.run(main())


def log_rows(db: Path | str, run_id: str) -> list[tuple[int, str]]:
    rows = query(db, "SELECT idx, type FROM log WHERE run_id = ? ORDER BY idx", (run_id,))
    return [(idx, type_) for idx, type_ in rows]


def test_a_looping_run_keeps_a_bounded_log_and_replays(
    tmp_path: Path, local_db: Path | str
) -> None:
    db = local_db
    CALLS.clear()

    async def body(host: LocalHost) -> Any:
        rid = await host.start(REMINDER, {"round": 0}, "r-1")
        await asyncio.wait_for(host.work(until_settled=rid), timeout=120)
        return await host.run(rid), await host.export(rid), await host.show(rid)

    row, log, shown = run_host(db, body)
    assert row.status == "completed"
    assert row.output == {"round": 12, "incarnation": 13}
    assert shown["incarnation"] == 13
    # Every fire of every incarnation ran once, under keys of its incarnation.
    expected = [f"r-1/tick[{f}]/ping#1" for f in (1, 2, 3)]
    expected += [f"r-1/@{n}/tick[{f}]/ping#1" for n in range(2, 14) for f in (1, 2, 3)]
    assert sorted(CALLS) == sorted(expected)
    # The log holds the last two incarnations only (the one that ended, and
    # the current one); its indices went on from the first.
    rows = log_rows(db, "r-1")
    assert rows[0][1] == "run.started" and rows[0][0] > 5 * len(rows)
    assert [t for _, t in rows].count("run.started") == 2
    records = flowcore.decode_log(log).records
    assert records[0].data["incarnation"] == 12
    report = flowcore.replay(records, flowcore.parse_flow(REMINDER))
    assert report.status == "completed"


def test_buffered_signals_carry_over_in_order(tmp_path: Path, local_db: Path | str) -> None:
    db = local_db
    notes = [f"n{i}" for i in range(8)]

    async def body(host: LocalHost) -> Any:
        rid = await host.start(SIGNALS, {"seen": []}, "s-1")
        for note in notes:  # all before the run takes any: buffered
            await host.signal(rid, "note", note)
        await asyncio.wait_for(host.work(until_settled=rid), timeout=60)
        return await host.run(rid)

    row = run_host(db, body)
    assert row.status == "completed"
    assert row.output == notes


def test_signals_sent_while_the_run_continues_are_not_lost(
    tmp_path: Path, local_db: Path | str
) -> None:
    db = local_db
    notes = [f"n{i}" for i in range(8)]

    async def body(host: LocalHost) -> Any:
        rid = await host.start(SIGNALS, {"seen": []}, "s-2")
        stop = asyncio.Event()
        worker = asyncio.create_task(host.work(stop))
        for note in notes:  # while the worker runs incarnations
            await host.signal(rid, "note", note)
            await asyncio.sleep(0.005)
        row = await host.wait(rid, timeout=60)
        stop.set()
        await worker
        return row

    row = run_host(db, body)
    assert row.status == "completed"
    assert row.output == notes


def test_a_restart_between_incarnations_resumes_the_current_one(
    tmp_path: Path, local_db: Path | str
) -> None:
    db = local_db

    async def first(host: LocalHost) -> Any:
        rid = await host.start(SIGNALS, {"seen": []}, "s-3")
        for note in ("a", "b"):
            await host.signal(rid, "note", note)

        async def two_taken() -> bool:
            return (await host.show(rid)).get("incarnation") == 3

        stop = asyncio.Event()
        worker = asyncio.create_task(host.work(stop))
        while not await two_taken():
            await asyncio.sleep(0.01)
        stop.set()
        await worker
        return rid

    rid = run_host(db, first)

    async def second(host: LocalHost) -> Any:
        shown = await host.show(rid)
        assert shown["incarnation"] == 3 and shown["waitingFor"] == ["note"]
        for note in ("c", "d", "e", "f", "g", "h"):
            await host.signal(rid, "note", note)
        await asyncio.wait_for(host.work(until_settled=rid), timeout=60)
        return await host.run(rid), await host.export(rid)

    row, log = run_host(db, second)
    assert row.status == "completed"
    assert row.output == ["a", "b", "c", "d", "e", "f", "g", "h"]
    report = flowcore.replay(flowcore.decode_log(log).records, flowcore.parse_flow(SIGNALS))
    assert report.status == "completed"


CARRY = """
flow: carry
tools: {echo: {class: idempotent}}
steps:
  - id: first
    switch:
      - if: "run.incarnation == null"
        steps: [{id: later, schedule: {tool: echo, delay_ms: 300, input: nudge}}]
  - {id: take, await_signal: {signal: go}}
  - id: next
    switch:
      - if: "run.incarnation == null"
        steps: [{id: again, continue_as_new: {}}]
output: "${run.incarnation}"
"""


def test_a_scheduled_call_not_yet_due_fires_in_the_next_incarnation(
    tmp_path: Path, local_db: Path | str
) -> None:
    db = local_db
    CALLS.clear()

    async def body(host: LocalHost) -> Any:
        rid = await host.start(CARRY, None, "c-1")
        await host.signal(rid, "go")
        stop = asyncio.Event()
        worker = asyncio.create_task(host.work(stop))
        while "c-1/later#1/call" not in CALLS:  # due 300 ms after the start
            await asyncio.sleep(0.01)
        shown = await host.show(rid)
        await host.signal(rid, "go")
        row = await host.wait(rid, timeout=30)
        stop.set()
        await worker
        return shown, row

    shown, row = run_host(db, body)
    assert shown["incarnation"] == 2 and shown["waitingFor"] == ["go"]
    assert (row.status, row.output) == ("completed", 2)
    assert CALLS == ["c-1/later#1/call"]


# SQLite only, for the suite's time: many command processes, each opening the
# database (up to 3x slower on PostgreSQL on two busy cores); others run on both.
def test_the_cli_shows_the_incarnation_and_replays_what_the_log_keeps(tmp_path: Path) -> None:
    from ..test_local_cli import ok

    spec = tmp_path / "notes.yaml"
    spec.write_text(SIGNALS)
    tools = tmp_path / "tools.py"
    tools.write_text("def echo(call):\n    return call.input\n\n\nTOOLS = {'echo': echo}\n")
    db = str(tmp_path / "cli.db")
    ok(
        "run",
        str(spec),
        "--input",
        '{"seen": []}',
        "--tools",
        str(tools),
        "--db",
        db,
        "--run-id",
        "n-1",
        "--detach",
    )
    for i in range(8):
        ok("signal", "n-1", "note", "--data", json.dumps(f"n{i}"), "--db", db)
    ok("worker", "--db", db, "--until-idle")
    shown = json.loads(ok("show", "n-1", "--db", db, "--json"))
    assert (shown["status"], shown["incarnation"]) == ("completed", 8)
    assert shown["output"] == [f"n{i}" for i in range(8)]
    events = ok("events", "n-1", "--db", db)
    assert "▶ incarnation 7" in events and "▶ incarnation 8" in events
    assert "continues as new: incarnation 8" in events
    assert "▶ started" not in events  # the first incarnations' records are gone
    assert "completed" in ok("replay", "n-1", "--db", db)


def test_a_run_whose_early_incarnations_were_dropped_forks_from_its_current_one(
    tmp_path: Path,
    local_db: Path | str,
) -> None:
    """The local host keeps the last two incarnations; a fork of a step in the
    current one starts from that incarnation's run.started (log.md §16)."""
    db = local_db

    async def body(host: LocalHost) -> Any:
        rid = await host.start(SIGNALS, {"seen": []}, "s-4")
        for note in "abcdefgh":
            await host.signal(rid, "note", note)
        await asyncio.wait_for(host.work(until_settled=rid), timeout=60)
        first = log_rows(db, rid)[0]
        fid = await host.fork(rid, from_step="keep")
        await asyncio.wait_for(host.work(until_settled=fid), timeout=60)
        return first, await host.run(rid), await host.run(fid), await host.show(fid)

    first, source, forked, shown = run_host(db, body)
    assert first[0] > 0 and first[1] == "run.started"  # earlier incarnations dropped
    assert source.status == forked.status == "completed"
    assert forked.output == source.output == list("abcdefgh")
    assert shown["incarnation"] == 8 and shown["forkedFrom"]["runId"] == "s-4"


def test_a_run_that_continues_at_once_for_ever_is_refused_at_the_bound(
    tmp_path: Path, local_db: Path | str
) -> None:
    """Each incarnation continues at once (no recursion per incarnation in the
    store): the run fails continue-refused at limits.max_idle_incarnations."""
    spec = "flow: spin\nsteps:\n  - {id: again, continue_as_new: {}}\n"

    async def main() -> Any:
        async with LocalHost(local_db) as host:
            rid = await host.start(spec, None, "spin-1")
            await asyncio.wait_for(host.work(until_settled=rid), 60)
            return await host.run(rid), await host.records(rid)

    row, records = asyncio.run(main())
    assert row.status == "failed"
    assert row.error["type"] == "continue-refused"
    assert "the run has continued 1000 times in a row" in row.error["message"]
    assert "limits.max_idle_incarnations is 1000" in row.error["message"]
    started = [r.data for r in records if r.type == "run.started"]
    assert [(s["incarnation"], s["idleIncarnations"]) for s in started] == [
        (1000, 999),
        (1001, 1000),
    ]
