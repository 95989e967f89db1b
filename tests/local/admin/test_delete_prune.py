"""Deleting runs and pruning old ones on the local host, on real SQLite files.

A run goes with its whole tree and every row of it, in one transaction; a run
still running is refused unless forced (then cancelled, compensated, deleted);
nothing of another run is touched; a delete killed in the middle leaves the
run whole. Time is the host's injected clock: nothing here waits for a real
day to pass.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

import flowcore
from flowcore import CallTool
from flowcore_handlers import HandlerError, Registry, publish
from flowcore_local import Deleted, HostError, LocalHost, _prune
from flowcore_local._db import RUN_TABLES, SHARED_TABLES, connect

from ..local_helpers import dispatch_to_ghost, query, work_until

DAY = 86_400_000
T0 = 1_900_000_000_000  # the fake clock's start (2030)

CALLS: list[str] = []
FLAKY = {"fail": True}


def echo(call: CallTool) -> Any:
    CALLS.append(call.idempotency_key)
    publish({"echoing": call.input})  # a progress row
    return {"echo": call.input}


def flaky(call: CallTool) -> Any:
    CALLS.append(call.idempotency_key)
    if FLAKY["fail"]:
        raise ValueError("flaky is down")
    return "fine"


def down(call: CallTool) -> Any:
    raise HandlerError("down", "the service is down")


REGISTRY = Registry(
    tools={"echo": echo, "flaky": flaky, "charge": echo, "refund": echo, "down": down}
)


class Clock:
    """The host's clock, moved by the test (epoch milliseconds)."""

    def __init__(self, ms: int = T0) -> None:
        self.ms = ms

    def __call__(self) -> int:
        return self.ms


def on_host(db: Path | str, body: Callable[[LocalHost], Awaitable[Any]], **options: Any) -> Any:
    async def main() -> Any:
        async with LocalHost(db, registry=REGISTRY, **options) as host:
            return await body(host)

    return asyncio.run(main())


async def settle(host: LocalHost, run_id: str) -> str:
    await asyncio.wait_for(host.work(until_settled=run_id), timeout=30)
    return (await host.run(run_id)).status


def tables(db: Path) -> list[str]:
    with sqlite3.connect(db) as conn:
        return sorted(
            name
            for (name,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        )


def rows_of(db: Path | str, run_ids: list[str]) -> dict[str, int]:
    """Rows of ``run_ids`` in every table that holds rows of runs (``runs`` included)."""
    marks = ",".join("?" * len(run_ids))
    return {
        table: query(db, f"SELECT count(*) FROM {table} WHERE {column} IN ({marks})", run_ids)[0][0]
        for table, column in {**RUN_TABLES, "runs": "run_id"}.items()
    }


def dump(db: Path | str, run_ids: list[str], specs: bool = True) -> dict[str, list[Any]]:
    """Every row of ``run_ids`` (and every spec), to compare before and after."""
    marks = ",".join("?" * len(run_ids))
    out = {
        table: sorted(
            query(db, f"SELECT * FROM {table} WHERE {column} IN ({marks})", run_ids), key=repr
        )
        for table, column in {**RUN_TABLES, "runs": "run_id"}.items()
    }
    if specs:
        out["flows"] = sorted(query(db, "SELECT * FROM flows"), key=repr)
    return out


CHILD = """
flow: kid
tools: {flaky: {class: idempotent}, echo: {class: readonly}}
steps:
  - {id: e, call_tool: {tool: echo, input: "${input.x}"}}
  - {id: f, call_tool: {tool: flaky}}
output: "${steps.f.output}"
"""
CALM = """
flow: kid
tools: {echo: {class: readonly}}
steps:
  - {id: e, call_tool: {tool: echo, input: "${input.x}"}}
output: "${steps.e.output}"
"""
PARENT = """
flow: parent
tools: {echo: {class: readonly}}
steps:
  - {id: later, schedule: {tool: echo, delay_ms: 3600000}}
  - id: loop
    for_each:
      items: [1, 2]
      as: i
      steps: [{id: each, call_tool: {tool: echo, input: "${i}"}}]
  - {id: k, run_subflow: {flow: kid, input: {x: 3}}}
output: "${steps.k.output}"
"""
OTHER = """
flow: other
tools: {echo: {class: readonly}}
steps:
  - {id: later, schedule: {tool: echo, delay_ms: 3600000}}
  - {id: a, call_tool: {tool: echo, input: 1}}
  - {id: w, await_signal: {signal: go}}
"""


# --- what a delete removes ------------------------------------------------------------------


# SQLite only: it reads or doctors the SQLite file itself.
def test_every_table_holds_rows_of_one_run_or_is_declared_shared(tmp_path: Path) -> None:
    """A table added to the schema must say whose rows it holds (``_db.RUN_TABLES``),
    or a delete would leave its rows behind."""
    db = tmp_path / "schema.db"
    connect(db).close()
    declared = set(RUN_TABLES) | {"runs"} | set(SHARED_TABLES)
    assert set(tables(db)) == declared, "a table of the schema is not in RUN_TABLES/SHARED_TABLES"
    with sqlite3.connect(db) as conn:
        for table in tables(db):
            columns = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
            # A shared table may name runs as history (a schedule's actions
            # name the runs it started, kept after they are deleted).
            if "run_id" in columns and table != "runs" and table not in SHARED_TABLES:
                assert RUN_TABLES.get(table) == "run_id", table
            if table in RUN_TABLES:
                assert RUN_TABLES[table] in columns, table


def _fill(conn: sqlite3.Connection, table: str, column: str, run_id: str) -> None:
    """Insert one row of ``run_id`` into ``table``, whatever its columns."""
    columns = list(conn.execute(f"PRAGMA table_info({table})"))
    values: list[Any] = []
    for _, name, type_, _notnull, _default, _pk in columns:
        if name == column:
            values.append(run_id)
        elif "INT" in type_.upper():
            values.append(10**9)  # past any index a real row of the run has
        elif "BLOB" in type_.upper():
            values.append(b"x")
        else:
            values.append("x")
    marks = ",".join("?" * len(values))
    conn.execute(f"INSERT INTO {table} VALUES ({marks})", values)


# SQLite only: it reads or doctors the SQLite file itself.
def test_a_row_in_any_run_table_goes_with_its_run_and_no_other(tmp_path: Path) -> None:
    """Whatever a per-run table holds (outbox rows of a settled run included)."""
    db = tmp_path / "every.db"

    async def make(host: LocalHost) -> None:
        for rid in ("a", "b"):
            await settle(host, await host.start(ONE_CALL, {}, rid))

    on_host(db, make)
    with sqlite3.connect(db) as conn:
        for table, column in RUN_TABLES.items():
            for rid in ("a", "b"):
                _fill(conn, table, column, rid)
    before_b = dump(db, ["b"])
    assert all(n > 0 for n in rows_of(db, ["a"]).values())

    deleted = on_host(db, lambda host: host.delete("a"))
    assert rows_of(db, ["a"]) == dict.fromkeys({**RUN_TABLES, "runs": 0}, 0)
    assert dump(db, ["b"]) == before_b
    assert deleted.runs == ["a"] and deleted.rows["outbox"] == 1 and "flows" not in deleted.rows


def test_delete_removes_a_settled_tree_from_every_table_and_leaves_another_run(
    tmp_path: Path,
    local_db: Path | str,
) -> None:
    """A tree that failed in its child, was resumed with its child and completed;
    a cancelled run; a dead-lettered run; another run, waiting: only the last stays."""
    db = local_db
    kid = tmp_path / "kid.yaml"
    kid.write_text(CHILD)
    FLAKY["fail"] = True

    async def make(host: LocalHost) -> None:
        await host.start(PARENT, {}, "p", flows=[kid])
        assert await settle(host, "p") == "failed"
        FLAKY["fail"] = False
        await host.resume("p")
        assert await settle(host, "p") == "completed"
        await host.start(OTHER, {}, "o")
        await work_until(host, lambda: _waits(host, "o"))
        await host.start(TAGGED, {}, "x", metadata={"owner": "ops"})  # a run_metadata row
        await host.cancel("x")  # the wait it abandons is resolved
        await host.start(DEAD, {}, "d")

    on_host(db, make)
    dispatch_to_ghost(db)  # d/x#1 is lost with a worker ...
    on_host(db, lambda host: settle(host, "d"), max_recoveries=0)  # ... and dead-lettered

    tree = ["p", "p/k#1"]
    before = rows_of(db, [*tree, "x", "d"])
    # They have rows in every per-run table but the outbox (settled: none open)
    # and schedule_runs (no schedule started them; the test above fills it).
    assert {t for t, n in before.items() if n == 0} == {"outbox", "schedule_runs"}, before
    other = dump(db, ["o"], specs=False)
    assert rows_of(db, ["o"])["outbox"] > 0

    async def delete(host: LocalHost) -> tuple[list[Deleted], Any]:
        return [await host.delete(r) for r in ("p", "x", "d")], await host.show("o")

    deleted, shown = on_host(db, delete)
    assert (deleted[0].roots, deleted[0].runs, deleted[0].cancelled) == (["p"], tree, [])
    assert [d.runs for d in deleted[1:]] == [["x"], ["d"]]
    assert rows_of(db, [*tree, "x", "d"]) == dict.fromkeys({**RUN_TABLES, "runs": 0}, 0)
    removed = {t: sum(d.rows.get(t, 0) for d in deleted) for t in before}
    assert removed == before  # the counts say what went
    # The specs of parent, kid, waits and dead went with their last runs; o's stays.
    assert query(db, "SELECT flow_id FROM flows") == [("other",)]
    assert sum(d.rows.get("flows", 0) for d in deleted) == 4
    assert dump(db, ["o"], specs=False) == other
    assert shown["waitingFor"] == ["go"]

    async def finish(host: LocalHost) -> Any:
        await host.signal("o", "go")
        await settle(host, "o")
        return await host.run("o"), flowcore.decode_log(await host.export("o")).records

    row, records = on_host(db, finish)
    assert row.status == "completed"
    assert flowcore.replay(records, flowcore.parse_flow(OTHER)).status == "completed"


async def _waits(host: LocalHost, run_id: str) -> bool:
    return bool((await host.show(run_id))["waitingFor"])


def test_a_spec_stays_while_a_run_refers_to_it_or_may_start_it(
    tmp_path: Path, local_db: Path | str
) -> None:
    """kid's spec is kept while a running parent may still start it as a subflow."""
    db = local_db
    kid = tmp_path / "kid.yaml"
    kid.write_text(CALM)
    wait = "  - {id: w, await_signal: {signal: go}}\n"
    waiting_parent = PARENT.replace("  - {id: k, run_subflow", wait + "  - {id: k, run_subflow")

    async def body(host: LocalHost) -> list[str]:
        await settle(host, await host.start(kid, {"x": 1}, "solo"))  # a run of kid alone
        await host.start(waiting_parent, {}, "p", flows=[kid])
        await work_until(host, lambda: _waits(host, "p"))
        deleted = await host.delete("solo")
        assert "flows" not in deleted.rows  # p may start kid: its spec stays
        await host.signal("p", "go")
        assert await settle(host, "p") == "completed"  # and it does
        await host.delete("p")
        return sorted(r.run_id for r in await host.runs())

    assert on_host(db, body) == []
    assert query(db, "SELECT count(*) FROM flows") == [(0,)]


# --- what a delete refuses ---------------------------------------------------------------

CHILD_WAITS = "flow: kid\nsteps:\n  - {id: w, await_signal: {signal: never}}\n"


def test_a_running_run_is_refused_naming_the_running_runs_of_its_tree(
    tmp_path: Path, local_db: Path | str
) -> None:
    db = local_db
    kid = tmp_path / "kid.yaml"
    kid.write_text(CHILD_WAITS)
    parent = "flow: p\nsteps:\n  - {id: k, run_subflow: {flow: kid}}\n"

    async def body(host: LocalHost) -> list[str]:
        await host.start(parent, {}, "p", flows=[kid])

        async def child_waits() -> bool:
            return bool(await host.children("p")) and await _waits(host, "p/k#1")

        await work_until(host, child_waits)
        errors = []
        for rid in ("p", "p/k#1", "nope"):
            with pytest.raises(HostError) as refused:
                await host.delete(rid)
            errors.append(str(refused.value))
        with pytest.raises(HostError) as forced_child:  # force never reaches past the parent
            await host.delete("p/k#1", force=True)
        errors.append(str(forced_child.value))
        return errors

    errors = on_host(db, body)
    assert errors == [
        "cannot delete run 'p': runs of its tree are ('p', 'p/k#1') still running; cancel it"
        " and delete it once it settles, or force the delete (--force), which does both",
        "cannot delete run 'p/k#1': it is a child run of 'p', which is still running; a child"
        " run goes with its parent's tree: delete 'p' once it settles",
        "no run 'nope' in the database",
        "cannot delete run 'p/k#1': it is a child run of 'p', which is still running; a child"
        " run goes with its parent's tree: delete 'p' once it settles",
    ]
    assert rows_of(db, ["p", "p/k#1"])["runs"] == 2
    assert rows_of(db, ["p", "p/k#1"])["outbox"] > 0


def test_a_settled_child_of_a_settled_parent_may_go_alone(
    tmp_path: Path, local_db: Path | str
) -> None:
    db = local_db
    kid = tmp_path / "kid.yaml"
    kid.write_text(CALM)

    async def body(host: LocalHost) -> tuple[Deleted, Any, Deleted]:
        await settle(host, await host.start(PARENT, {}, "p", flows=[kid]))
        return await host.delete("p/k#1"), await host.show("p"), await host.delete("p")

    child, shown, parent = on_host(db, body)
    # kid's spec stays: no run of it is left, but p's flow names it (a subflow step) ...
    assert child.runs == ["p/k#1"] and "flows" not in child.rows
    assert (shown["status"], shown["children"]) == ("completed", [])
    # ... and goes with p, the last run that could start it.
    assert parent.runs == ["p"] and parent.rows["flows"] == 2
    assert query(db, "SELECT count(*) FROM flows") == [(0,)]


# --- --force: cancel, compensate, delete ---------------------------------------------------

SAGA = """
flow: saga
tools: {charge: {}, refund: {}}
steps:
  - id: pay
    call_tool: {tool: charge, input: 5}
    compensate: [{id: refund, call_tool: {tool: refund, input: 5}}]
  - {id: w, await_signal: {signal: go}}
"""


def test_force_cancels_runs_the_compensations_then_deletes(
    tmp_path: Path, local_db: Path | str
) -> None:
    db = local_db
    CALLS.clear()

    async def body(host: LocalHost) -> Deleted:
        await host.start(SAGA, {}, "s")
        await work_until(host, lambda: _waits(host, "s"))
        # Not working now: the delete works the run itself, for its compensation.
        return await host.delete("s", force=True)

    deleted = on_host(db, body)
    assert CALLS == ["s/pay#1", "s/refund#1"]
    assert (deleted.cancelled, deleted.runs) == (["s"], ["s"])
    assert rows_of(db, ["s"]) == dict.fromkeys({**RUN_TABLES, "runs": 0}, 0)


def test_force_while_the_host_works_lets_its_worker_compensate(
    tmp_path: Path, local_db: Path | str
) -> None:
    db = local_db
    CALLS.clear()

    async def body(host: LocalHost) -> Deleted:
        stop = asyncio.Event()
        worker = asyncio.create_task(host.work(stop))
        await host.start(SAGA, {}, "s")
        while not await _waits(host, "s"):
            await asyncio.sleep(0.02)
        deleted = await asyncio.wait_for(host.delete("s", force=True), timeout=30)
        stop.set()
        await worker
        return deleted

    deleted = on_host(db, body)
    assert CALLS == ["s/pay#1", "s/refund#1"] and deleted.cancelled == ["s"]
    assert rows_of(db, ["s"])["runs"] == 0


QUESTION_SAGA = """
flow: ask
tools: {charge: {}}
steps:
  - id: pay
    call_tool: {tool: charge, input: 5}
    compensate: [{id: check, ask_human: {question: "Refund by hand?", options: [done]}}]
  - {id: w, await_signal: {signal: go}}
"""


def test_force_gives_up_after_its_timeout_leaving_the_run_cancelling(
    tmp_path: Path, local_db: Path | str
) -> None:
    """A compensation that waits for a person: the tree cannot settle on its own."""
    db = local_db

    async def body(host: LocalHost) -> tuple[str, Any, Deleted]:
        await host.start(QUESTION_SAGA, {}, "q")
        await work_until(host, lambda: _waits(host, "q"))
        with pytest.raises(HostError) as refused:
            await host.delete("q", force=True, timeout=0.3)
        shown = await host.show("q")
        await host.answer("q", "check", "done")  # the person answers: it settles
        await settle(host, "q")
        return str(refused.value), shown, await host.delete("q")

    error, shown, deleted = on_host(db, body)
    assert error == (
        "cannot delete run 'q': it was cancelled and has not settled within 0.3 s (running:"
        " 'q'), so it is not deleted; delete it once it settles"
    )
    assert shown["status"] == "running" and shown["questions"][0]["question"] == "Refund by hand?"
    assert deleted.runs == ["q"]


# --- a delete interrupted -----------------------------------------------------------------

KILLED = """
import asyncio, sys, time
from flowcore_local import LocalHost

async def main():
    async with LocalHost(sys.argv[1]) as host:
        def trace(statement):
            if statement.startswith("DELETE FROM runs"):
                # Every other table of the run is deleted by now, uncommitted.
                print("MID", flush=True)
                time.sleep(600)
        host.store.conn.set_trace_callback(trace)
        await host.delete(sys.argv[2])

asyncio.run(main())
"""


# SQLite only: the delete is stopped mid-transaction through SQLite's statement trace.
def test_a_delete_killed_in_the_middle_leaves_the_run_whole(tmp_path: Path) -> None:
    db = tmp_path / "k.db"
    kid = tmp_path / "kid.yaml"
    kid.write_text(CALM)
    on_host(db, lambda host: _started_and_settled(host, kid))
    before = dump(db, ["p", "p/k#1"])
    script = tmp_path / "delete.py"
    script.write_text(textwrap.dedent(KILLED))
    proc = subprocess.Popen(
        [sys.executable, str(script), str(db), "p"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "MID"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert dump(db, ["p", "p/k#1"]) == before  # nothing of it went
    assert on_host(db, lambda host: host.delete("p")).runs == ["p", "p/k#1"]
    assert rows_of(db, ["p", "p/k#1"])["runs"] == 0


async def _started_and_settled(host: LocalHost, kid: Path) -> None:
    await settle(host, await host.start(PARENT, {}, "p", flows=[kid]))


# SQLite only: it injects SQLite's own errors into the store.
def test_an_error_inside_the_delete_rolls_all_of_it_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "error.db"
    kid = tmp_path / "kid.yaml"
    kid.write_text(CALM)
    on_host(db, lambda host: _started_and_settled(host, kid))
    before = dump(db, ["p", "p/k#1"])

    def broken(store: Any, candidates: set[str]) -> int:
        raise sqlite3.OperationalError("disk I/O error")  # after every run row is deleted

    monkeypatch.setattr(_prune, "_drop_specs", broken)

    async def body(host: LocalHost) -> Any:
        with pytest.raises(sqlite3.OperationalError):
            await host.delete("p")
        return await host.show("p")  # this host's cache did not keep a deleted state

    assert on_host(db, body)["status"] == "completed"
    assert dump(db, ["p", "p/k#1"]) == before


# --- prune ----------------------------------------------------------------------------------

ONE_CALL = "flow: one\ntools: {echo: {}}\nsteps:\n  - {id: a, call_tool: {tool: echo}}\n"
DEAD = "flow: dead\ntools: {down: {}}\nsteps:\n  - {id: x, call_tool: {tool: down}}\n"
FAILS = "flow: bad\ntools: {down: {}}\nsteps:\n  - {id: a, call_tool: {tool: down}}\n"
WAITS = "flow: waits\nsteps:\n  - {id: w, await_signal: {signal: go}}\n"
TAGGED = (
    "flow: tagged\nmetadata: {owner: string}\nsteps:\n  - {id: w, await_signal: {signal: go}}\n"
)


async def _history(host: LocalHost, clock: Clock) -> None:
    """completed c1 at day 0, failed f1 at day 1, cancelled x1 at day 2, completed c2 at
    day 10, w1 running since day 0."""
    await host.start(WAITS, {}, "w1")
    await settle(host, await host.start(ONE_CALL, {}, "c1"))
    clock.ms = T0 + DAY
    await settle(host, await host.start(FAILS, {}, "f1"))
    clock.ms = T0 + 2 * DAY
    await host.start(WAITS, {}, "x1")
    await host.cancel("x1")
    clock.ms = T0 + 10 * DAY
    await settle(host, await host.start(ONE_CALL, {}, "c2"))


def test_prune_deletes_root_runs_settled_before_the_cutoff_by_status(
    tmp_path: Path, local_db: Path | str
) -> None:
    db = local_db
    clock = Clock()

    async def body(host: LocalHost) -> list[Any]:
        await _history(host, clock)
        clock.ms = T0 + 40 * DAY
        seen: list[Any] = []
        dry = await host.prune(T0 + 5 * DAY, dry_run=True)
        seen.append((dry.dry_run, dry.roots, sorted(r.run_id for r in await host.runs())))
        failed = await host.prune(T0 + 5 * DAY, ["failed", "cancelled"])
        seen.append((failed.roots, dry.rows == _sum(failed, await host.prune(T0 + DAY))))
        seen.append(sorted(r.run_id for r in await host.runs()))
        seen.append((await host.prune(clock.ms)).roots)  # everything settled goes; w1 stays
        seen.append(sorted(r.run_id for r in await host.runs()))
        return seen

    dry, failed, left, last, end = on_host(db, body, clock=clock)
    assert dry == (True, ["c1", "f1", "x1"], ["c1", "c2", "f1", "w1", "x1"])
    assert failed == (["f1", "x1"], True)  # then c1 alone, by age: the dry run's rows in all
    assert left == ["c2", "w1"]
    assert (last, end) == (["c2"], ["w1"])


def _sum(a: Deleted, b: Deleted) -> dict[str, int]:
    total = Deleted()
    total.add(a)
    total.add(b)
    return total.rows


def test_prune_keeps_a_tree_until_every_run_of_it_has_settled_before_the_cutoff(
    tmp_path: Path,
    local_db: Path | str,
) -> None:
    """A cancelled parent settles while its child still compensates: the tree stays
    until the child settles, and then until the child's settlement is old enough."""
    db = local_db
    clock = Clock()
    kid = tmp_path / "kid.yaml"
    kid.write_text(QUESTION_SAGA.replace("flow: ask", "flow: kid"))
    parent = "flow: p\nsteps:\n  - {id: k, run_subflow: {flow: kid}}\n"

    async def body(host: LocalHost) -> list[Any]:
        await host.start(parent, {}, "p", flows=[kid])

        async def child_waits() -> bool:
            return bool(await host.children("p")) and await _waits(host, "p/k#1")

        await work_until(host, child_waits)
        await host.cancel("p")
        statuses = [(await host.run(r)).status for r in ("p", "p/k#1")]
        clock.ms = T0 + 10 * DAY
        seen: list[Any] = [statuses, (await host.prune(clock.ms)).roots]
        await host.answer("p/k#1", "check", "done")  # the child's compensation ends at day 10
        await settle(host, "p/k#1")
        clock.ms = T0 + 40 * DAY
        seen.append((await host.prune(T0 + 5 * DAY)).roots)  # the parent is old, the child not
        seen.append((await host.prune(T0 + 11 * DAY)).runs)
        return seen

    assert on_host(db, body, clock=clock) == [
        ["cancelled", "running"],
        [],
        [],
        ["p", "p/k#1"],
    ]


def test_prune_refuses_what_is_not_a_settled_status_or_a_time(tmp_path: Path) -> None:
    async def body(host: LocalHost) -> list[str]:
        errors = []
        bad: list[tuple[Any, Any]] = [(T0, ["running"]), (T0, ["done"]), ("30d", None)]
        for cutoff, statuses in bad:
            with pytest.raises(HostError) as refused:
                await host.prune(cutoff, statuses)
            errors.append(str(refused.value))
        return errors

    assert on_host(tmp_path / "x.db", body) == [
        "cannot prune runs with status 'running': a status is one of completed, failed,"
        " cancelled, budget-exhausted (running runs are never pruned)",
        "cannot prune runs with status 'done': a status is one of completed, failed,"
        " cancelled, budget-exhausted (running runs are never pruned)",
        "settled_before_ms must be an integer (epoch milliseconds), not '30d'",
    ]
    with pytest.raises(HostError, match="retention_ms must be an integer from 1"):
        LocalHost(tmp_path / "y.db", retention_ms=0)


# --- the worker's retention -----------------------------------------------------------------


def test_a_worker_with_a_retention_prunes_as_its_clock_moves(
    tmp_path: Path, local_db: Path | str
) -> None:
    db = local_db
    clock = Clock()
    pruned: list[list[str]] = []

    async def body(host: LocalHost) -> list[Any]:
        await _history(host, clock)  # c1 day 0, f1 day 1, x1 day 2, c2 day 10; w1 running
        stop = asyncio.Event()
        worker = asyncio.create_task(host.work(stop, on_pruned=lambda d: pruned.append(d.runs)))

        async def until(runs: list[str]) -> list[str]:
            for _ in range(3000):
                ids = sorted(r.run_id for r in await host.runs())
                if ids == runs:
                    return ids
                await asyncio.sleep(0.01)
            return ids

        seen = [await until(["c1", "c2", "f1", "w1", "x1"])]  # day 10: nothing is 30 days old
        clock.ms = T0 + 31 * DAY + 12 * 3_600_000  # c1 is now 31.5 days old, f1 30.5
        seen.append(await until(["c2", "w1", "x1"]))
        clock.ms = T0 + 41 * DAY  # everything settled is over 30 days old; w1 runs on
        seen.append(await until(["w1"]))
        stop.set()
        await worker
        return seen

    seen = on_host(db, body, clock=clock, retention_ms=30 * DAY)
    assert seen == [["c1", "c2", "f1", "w1", "x1"], ["c2", "w1", "x1"], ["w1"]]
    assert pruned == [["c1", "f1"], ["x1", "c2"]]


def test_a_worker_limited_to_one_run_does_not_prune(tmp_path: Path, local_db: Path | str) -> None:
    db = local_db
    clock = Clock()

    async def body(host: LocalHost) -> list[str]:
        await settle(host, await host.start(ONE_CALL, {}, "old"))
        clock.ms = T0 + 100 * DAY
        rid = await host.start(ONE_CALL, {}, "new")
        await asyncio.wait_for(host.work(until_settled=rid, only=rid), timeout=30)
        return sorted(r.run_id for r in await host.runs())

    assert on_host(db, body, clock=clock, retention_ms=DAY) == ["new", "old"]


# --- the commands -----------------------------------------------------------------------------


def fc(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flowcore_cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
        check=False,
    )


def bad(*args: str) -> str:
    proc = fc(*args)
    assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


TOOLS = """
def down(call):
    raise RuntimeError("down")


TOOLS = {"echo": lambda call: call.input, "charge": lambda call: "charged",
         "refund": lambda call: "refunded", "down": down}
"""


def test_the_commands_delete_and_prune_and_say_what_went(tmp_path: Path) -> None:
    db = tmp_path / "cli.db"
    tools = tmp_path / "tools.py"
    tools.write_text(TOOLS)
    old = Clock(_wall() - 40 * DAY)  # forty days ago, on the wall clock

    async def make(host: LocalHost) -> None:
        await settle(host, await host.start(ONE_CALL, {}, "old-c", tools=str(tools)))
        await settle(host, await host.start(FAILS, {}, "old-f", tools=str(tools)))
        old.ms = _wall()
        await settle(host, await host.start(ONE_CALL, {}, "new", tools=str(tools)))
        await host.start(SAGA, {}, "saga", tools=str(tools))
        await work_until(host, lambda: _waits(host, "saga"))

    on_host(db, make, clock=old)
    d = ("--db", str(db))
    assert bad("prune", "--settled-before", "3x", *d) == (
        "flowcore: --settled-before: '3x' is not a duration: write it like '90s', '2h30m',"
        " '1d', '250ms' or ISO-8601 'PT2H'"
    )
    assert bad("prune", "--settled-before", "30d", "--status", "running", *d).startswith(
        "flowcore: Invalid value for '--status': 'running' is not one of 'completed', 'failed',"
    )
    assert bad("prune", "--settled-before", "30d", "--dry-run", "--vacuum", *d) == (
        "flowcore: --vacuum and --dry-run go against each other: a dry run changes nothing"
    )
    assert bad("delete", "nope", *d) == "flowcore: no run 'nope' in the database"
    assert bad("delete", "saga", *d) == (
        "flowcore: cannot delete run 'saga': it is still running; cancel it and delete it once"
        " it settles, or force the delete (--force), which does both"
    )
    assert bad("delete", "saga", "--timeout", "5m", *d) == (
        "flowcore: --timeout is the wait of --force: give --force with it"
    )
    assert bad("delete", "saga", "--force", "--timeout", "soon", *d).startswith(
        "flowcore: --timeout: 'soon' is not a duration"
    )
    assert bad("worker", "--retention", "-1d", *d) == (
        "flowcore: --retention: a duration cannot be negative, got '-1d'"
    )
    assert bad("prune", "--settled-before", "30d", "--db", str(tmp_path / "none.db")).startswith(
        "flowcore: no database at"
    )

    dry = fc("prune", "--settled-before", "30d", "--dry-run", "--json", *d)
    assert dry.returncode == 0, dry.stderr
    document = json.loads(dry.stdout)
    assert (document["dryRun"], document["roots"], document["vacuum"]) == (
        True,
        ["old-c", "old-f"],
        None,
    )
    assert document["rowsTotal"] == sum(document["rows"].values()) > 0
    assert document["statuses"] == ["completed", "failed", "cancelled", "budget-exhausted"]

    failed = fc("prune", "--settled-before", "30d", "--status", "failed", *d)
    assert failed.returncode == 0, failed.stderr
    assert failed.stdout.startswith("deleted 1 run: 1 root run (failed) settled before ")
    assert "; 1" in failed.stdout and "(log " in failed.stdout

    pruned = fc("prune", "--settled-before", "30d", "--vacuum", *d)
    assert pruned.returncode == 0, pruned.stderr
    first, second = pruned.stdout.splitlines()
    assert first.startswith("deleted 1 run: 1 root run settled before ")
    assert second.startswith(f"vacuumed {db}: ") and second.endswith(" after")

    forced = fc("delete", "saga", "--force", *d)
    assert forced.returncode == 0, forced.stderr
    assert forced.stderr == (
        "cancelling saga: deleted once settled (Ctrl-C leaves a run that is still compensating"
        " cancelled, not deleted)\n"
    )
    assert forced.stdout.startswith("deleted run saga (cancelled first: saga): ")

    gone = fc("delete", "new", "--json", *d)
    assert gone.returncode == 0, gone.stderr
    deleted = json.loads(gone.stdout)
    assert (deleted["runId"], deleted["runs"], deleted["cancelled"]) == ("new", ["new"], [])
    assert deleted["rows"]["runs"] == 1 and deleted["rows"]["flows"] == 1
    assert tables(db) and rows_of(db, ["old-c", "old-f", "new", "saga"])["runs"] == 0
    assert query(db, "SELECT count(*) FROM flows") == [(0,)]


def _wall() -> int:
    import time

    return int(time.time() * 1000)


# SQLite only: it reads or doctors the SQLite file itself.
def test_worker_retention_prunes_and_says_so(tmp_path: Path) -> None:
    db = tmp_path / "worker.db"
    tools = tmp_path / "tools.py"
    tools.write_text(TOOLS)
    clock = Clock(_wall() - 40 * DAY)

    async def make(host: LocalHost) -> None:
        await settle(host, await host.start(ONE_CALL, {}, "old", tools=str(tools)))
        clock.ms = _wall()
        await host.start(ONE_CALL, {}, "new", tools=str(tools))  # a worker runs it

    on_host(db, make, clock=clock)
    proc = fc("worker", "--retention", "30d", "--until-idle", "--db", str(db))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(f"worker on {db}: 1 run(s) running; concurrency 64; retention 30d")
    assert any(line.startswith("pruned 1 run(s) settled more than 30d ago: ") for line in lines), (
        lines
    )
    assert [r for (r,) in sqlite3.connect(db).execute("SELECT run_id FROM runs")] == ["new"]


# SQLite only: it injects SQLite's own errors into the store.
def test_a_prune_that_fails_does_not_stop_the_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "locked.db"
    clock = Clock()
    real = _prune.prunable_roots
    failures = [sqlite3.OperationalError("database is locked")]

    def locked_once(*args: Any) -> list[str]:
        if failures:
            raise failures.pop()
        return real(*args)

    monkeypatch.setattr(_prune, "prunable_roots", locked_once)

    async def body(host: LocalHost) -> list[str]:
        await settle(host, await host.start(ONE_CALL, {}, "old"))
        clock.ms = T0 + 2 * DAY
        rid = await host.start(ONE_CALL, {}, "new")
        stop = asyncio.Event()
        worker = asyncio.create_task(host.work(stop))  # its first prune fails ...
        await eventually(lambda: _status_is(host, rid, "completed"))
        assert not failures
        clock.ms += 60_000  # ... it works on, and a minute later prunes again
        await eventually(lambda: _gone(host, "old"))
        stop.set()
        await asyncio.wait_for(worker, timeout=30)
        return sorted(r.run_id for r in await host.runs())

    assert on_host(db, body, clock=clock, retention_ms=DAY) == ["new"]
    assert "flowcore: pruning failed (OperationalError: database is locked)" in caplog.text


async def eventually(check: Callable[[], Awaitable[bool]]) -> None:
    """Wait until ``check()`` holds (a generous bound, not a timed assertion)."""
    for _ in range(3000):
        if await check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the condition never held")


async def _status_is(host: LocalHost, run_id: str, status: str) -> bool:
    return (await host.run(run_id)).status == status


async def _gone(host: LocalHost, run_id: str) -> bool:
    return run_id not in {r.run_id for r in await host.runs()}
