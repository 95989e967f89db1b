"""A recovered readonly or idempotent effect runs again under its key, and the log says so.

A worker that dies holding dispatched work is simulated exactly: its claim is
recorded in the database (``dispatch_to_ghost``) and its heartbeat is stale.
The next worker recovers the work, claims it and, in that claiming
transaction, appends ``effect.redispatched`` (the key, the recovery count,
the lost worker) to the run's log, which still replays.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import flowcore
from flowcore_local import LocalHost

from ..local_helpers import JOURNALED, dispatch_to_ghost, journal, settle, tools_file

SPEC = """
flow: safe
tools: {echo: {class: readonly}, put: {class: idempotent}}
steps:
  - {id: a, call_tool: {tool: echo, input: 1}}
  - {id: b, call_tool: {tool: put, input: 2}}
output: "${ {a: steps.a.output, b: steps.b.output} }"
"""


def run(db: Path | str, body: Any, **options: Any) -> Any:
    async def main() -> Any:
        async with LocalHost(db, **options) as host:
            return await body(host)

    return asyncio.run(main())


def test_recovered_work_is_logged_as_redispatched_in_its_claim_and_the_log_replays(
    tmp_path: Path,
    local_db: Path | str,
) -> None:
    tools = tools_file(
        tmp_path, "safe_tools", JOURNALED + 'TOOLS = {{"echo": echo, "put": echo}}\n'
    )
    db = local_db
    run(db, lambda host: host.start(SPEC, {}, "s", tools=str(tools)))
    assert dispatch_to_ghost(db, "host-a:123:dead") == ["s/a#1"]

    async def body(host: LocalHost) -> Any:
        return await settle(host, "s"), await host.records("s")

    row, records = run(db, body)
    assert (row.status, row.output) == ("completed", {"a": {"echo": 1}, "b": {"echo": 2}})
    assert journal(tmp_path) == {"s/a#1": 1, "s/b#1": 1}  # the ghost never ran it
    types = [r.type for r in records]
    assert types[:4] == ["run.started", "effect.emitted", "effect.redispatched", "event.reported"]
    assert types.count("effect.redispatched") == 1
    note = records[2]
    assert note.data == {"idempotencyKey": "s/a#1", "recovery": 1, "worker": "host-a:123:dead"}
    report = flowcore.replay(records, flowcore.parse_flow(SPEC))
    assert report.status == "completed"
    # The record counts as neither an event nor an effect.
    assert (report.events, report.effects, report.records) == (2, 3, 8)
    entry = next(e for e in report.trajectory if e.key == "s/a#1")
    assert (entry.status, entry.note, entry.issues) == (
        "succeeded",
        "re-dispatched after recovery (1)",
        1,
    )


# SQLite only: it reads or doctors the SQLite file itself.
def test_each_recovery_is_counted_and_a_fresh_dispatch_is_not_a_redispatch(
    tmp_path: Path,
) -> None:
    tools = tools_file(
        tmp_path, "safe_tools", JOURNALED + 'TOOLS = {{"echo": echo, "put": echo}}\n'
    )
    db = tmp_path / "twice.db"
    run(db, lambda host: host.start(SPEC, {}, "t", tools=str(tools)))
    dispatch_to_ghost(db, "ghost-1")

    async def lose_again(host: LocalHost) -> None:
        # A worker recovers the work and claims it, then is lost in its turn.
        await host._recover()
        with host.store.tx():
            host.store.claim_ready_work(host.now(), 10)

    run(db, lose_again)
    with sqlite3.connect(db) as conn:
        (owner,) = conn.execute("SELECT lease_owner FROM outbox WHERE key = 't/a#1'").fetchone()
        conn.execute(
            "INSERT INTO workers (worker_id, pid, hostname, heartbeat_ms)"
            " VALUES (?, 0, 'elsewhere', 0)",
            (owner,),
        )

    async def body(host: LocalHost) -> Any:
        return await settle(host, "t"), await host.records("t")

    row, records = run(db, body)
    assert row.status == "completed"
    notes = [r.data for r in records if r.type == "effect.redispatched"]
    assert notes == [
        {"idempotencyKey": "t/a#1", "recovery": 1, "worker": "ghost-1"},
        {"idempotencyKey": "t/a#1", "recovery": 2, "worker": owner},
    ]
    report = flowcore.replay(records, flowcore.parse_flow(SPEC))
    entry = next(e for e in report.trajectory if e.key == "t/a#1")
    assert entry.note == "re-dispatched after recovery (1); re-dispatched after recovery (2)"
    # b was dispatched once, by a live worker: no record for it.
    assert all(n["idempotencyKey"] != "t/b#1" for n in notes)
