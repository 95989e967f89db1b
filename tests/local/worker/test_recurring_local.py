"""Recurring scheduled calls and replays on the local host (real SQLite files).

A tool schedules a reminder that fires three times and signals its own run
each time: the run waits for three signals and completes. A call added from
outside with ``every_ms`` fires, is listed with its recurrence and firings,
and once finished is replayed under its own key; the same request replays
once, and a call still pending is refused with the reason.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

from flowcore_handlers import ContextError, HandlerContext
from flowcore_local import HostError, LocalHost
from flowcore_local._db import SCHEMA_VERSION, connect
from flowcore_local._scheduled import list_scheduled
from flowcore_local._worker import _scheduled_call

from ..client.test_scheduled_local import bad, listed, ok, started
from ..local_helpers import settle, tools_file, work_until

REMINDERS = """
from flowcore_handlers import context


def remind_me(call):
    ctx = context()
    return ctx.schedule("send_reminder", {{"text": call.input["text"]}}, every_ms=30, count=3)


def send_reminder(call):
    ctx = context()
    ctx.signal(ctx.run_id, "reminder", call.input)
    return {{"sent": call.input["text"]}}


TOOLS = {{"remind_me": remind_me, "send_reminder": send_reminder}}
"""

THRICE = """
flow: thrice
tools:
  remind_me: {class: idempotent}
  send_reminder: {class: idempotent, schedulable: true}
steps:
  - id: ask
    call_tool: {tool: remind_me, input: {text: "${input.text}"}}
  - id: first
    await_signal: {signal: reminder, timeout_ms: 600000}
  - id: second
    await_signal: {signal: reminder, timeout_ms: 600000}
  - id: third
    await_signal: {signal: reminder, timeout_ms: 600000}
output: "${ {reminder: steps.ask.output, last: steps.third.output} }"
"""


def test_a_recurring_reminder_wakes_its_run_three_times(
    tmp_path: Path, local_db: Path | str
) -> None:
    asyncio.run(_a_recurring_reminder_wakes_its_run_three_times(tmp_path, local_db))


async def _a_recurring_reminder_wakes_its_run_three_times(tmp_path: Path, db: Path | str) -> None:
    tools = tools_file(tmp_path, "thrice_tools", REMINDERS)
    async with LocalHost(db, str(tools)) as host:
        run_id = await host.start(THRICE, {"text": "stretch"}, "thrice-1")
        row = await settle(host, run_id)
        assert row.status == "completed", row.error
        records = await host.records(run_id)
        (call,) = await host.scheduled(run_id)
    sid = row.output["reminder"]
    assert row.output["last"] == {"text": "stretch"}
    assert (call.id, call.every_ms, call.count, call.fires) == (sid, 30, 3, 3)
    keys = [
        r.data["idempotencyKey"]
        for r in records
        if r.type == "effect.emitted" and r.data["kind"] == "call-tool"
    ]
    assert [k for k in keys if k.startswith(sid)] == [
        f"{sid}/call",
        f"{sid}/call-2",
        f"{sid}/call-3",
    ]
    signals = [
        r.data
        for r in records
        if r.type == "event.reported" and r.data["kind"] == "signal-received"
    ]
    assert len(signals) == 3


MANAGED = """
flow: managed
tools:
  send_reminder: {class: idempotent, schedulable: true}
steps:
  - id: wait
    await_signal: {signal: done, timeout_ms: 600000}
"""

QUIET = """
def send_reminder(call):
    return {{"sent": call.input}}


TOOLS = {{"send_reminder": send_reminder}}
"""


async def _until(host: LocalHost, run_id: str, sid: str, status: str, fires: int = 0) -> None:
    """Work until ``sid`` is ``status`` after ``fires`` firings."""

    async def done() -> bool:
        (call,) = [c for c in await host.scheduled(run_id) if c.id == sid]
        return call.status == status and call.fires >= fires

    await work_until(host, done)


def test_recurring_add_and_replay_from_outside(tmp_path: Path, local_db: Path | str) -> None:
    asyncio.run(_recurring_add_and_replay_from_outside(tmp_path, local_db))


async def _recurring_add_and_replay_from_outside(tmp_path: Path, db: Path | str) -> None:
    tools = tools_file(tmp_path, "quiet_tools", QUIET)
    async with LocalHost(db, str(tools)) as host:
        run_id = await host.start(MANAGED, {}, "m-1")
        with pytest.raises(HostError, match=r"cron: .*not a valid cron"):
            await host.add_scheduled(run_id, "send_reminder", cron="61 * * * *")
        with pytest.raises(HostError, match="count: applies to a recurring call"):
            await host.add_scheduled(run_id, "send_reminder", count=2)
        sid = await host.add_scheduled(run_id, "send_reminder", {"n": 1}, every_ms=20, count=2)
        (listed,) = await host.scheduled(run_id)
        assert (listed.status, listed.every_ms, listed.count, listed.fires) == (
            "pending",
            20,
            2,
            0,
        )
        with pytest.raises(HostError, match="is still pending: only a succeeded"):
            await host.replay_scheduled(run_id, sid, request="again-1")
        await _until(host, run_id, sid, "completed", fires=2)
        await host.replay_scheduled(run_id, sid, request="again-1")
        await host.replay_scheduled(run_id, sid, request="again-1")  # a retry: nothing more
        await _until(host, run_id, sid, "completed")
        (done,) = await host.scheduled(run_id)
        assert (done.fires, done.replays) == (2, 1)
        with pytest.raises(HostError, match="no scheduled call 'm-1/~scheduled-9'"):
            await host.replay_scheduled(run_id, "~scheduled-9")
        await host.signal(run_id, "done")
        row = await settle(host, run_id)
        records = await host.records(run_id)
    assert row.status == "completed", row.error
    keys = [
        r.data["idempotencyKey"]
        for r in records
        if r.type == "effect.emitted" and r.data["kind"] == "call-tool"
    ]
    assert keys == [f"{sid}/call", f"{sid}/call-2", f"{sid}/replay-1"]


def test_a_database_of_the_schema_before_gets_the_recurrence_column(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    conn = connect(db)
    conn.execute("ALTER TABLE scheduled_calls DROP COLUMN recurrence")  # as schema 11 was
    conn.execute(
        "INSERT INTO scheduled_calls (run_id, id, tool, input, status, created_ms, due_ms,"
        " attempts, finished_ms, error, outside) VALUES"
        " ('r', 'r/~scheduled-1', 't', 'null', 'pending', 0, 5, 0, NULL, NULL, 1)"
    )
    conn.execute("PRAGMA user_version = 11")
    conn.close()
    conn = connect(db)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 12
        (row,) = list_scheduled(conn)
    finally:
        conn.close()
    assert (row.id, row.every_ms, row.fires, row.replays) == ("r/~scheduled-1", None, 0, 0)


# SQLite only, for the suite's time: many command processes, each opening the
# database (up to 3x slower on PostgreSQL on two busy cores); others run on both.
def test_recurring_add_and_replay_on_the_command_line(tmp_path: Path) -> None:
    db, _ = started(tmp_path, tmp_path / "cli.db")
    d = str(db)
    added = json.loads(
        ok("scheduled", "add", "r-1", "pager", "--every", "1h", "--count", "2", "--json", "--db", d)
    )
    row = listed(db)[added["id"]]
    assert (row["everyMs"], row["count"], row["fires"], row["status"]) == (
        3_600_000,
        2,
        0,
        "pending",
    )
    assert row["dueMs"] - row["createdMs"] == 3_600_000  # one period in
    table = ok("scheduled", "list", "r-1", "--db", d, env={**os.environ, "COLUMNS": "250"})
    assert "pending (every 1 h 00 min, fired 0/2)" in table
    assert "--every" in bad("scheduled", "add", "r-1", "pager", "--every", "soon", "--db", d)
    assert "cron: " in bad("scheduled", "add", "r-1", "pager", "--cron", "0 25 * * *", "--db", d)
    refused = bad("scheduled", "replay", "r-1", "nudge#1", "--db", d)
    assert "is still pending: only a succeeded, failed or uncertain call is replayed" in refused


class _Recording:
    """A ContextHost that records what ``add_scheduled`` is given."""

    def __init__(self) -> None:
        self.asked: list[dict[str, Any]] = []

    def now(self) -> int:
        return 1_000

    async def add_scheduled(self, run_id: str, tool: str, *args: Any, **named: Any) -> str:
        self.asked.append({"args": (run_id, tool, *args), **named})
        return f"{run_id}/~scheduled-r0"


def test_the_context_hands_the_recurrence_to_its_host_only_when_given() -> None:
    async def main() -> list[dict[str, Any]]:
        host = _Recording()
        ctx = HandlerContext(run_id="r", idempotency_key="r/a#1", host=host)  # type: ignore[arg-type]
        await ctx.aschedule("t", 1, delay_ms=5)
        await ctx.aschedule("t", 2, cron="0 9 * * *", timezone="Europe/Paris", count=2)
        await ctx.aschedule("t", 3, every_ms=60_000, until_ms=9_000)
        for wrong, why in (
            ({"every_ms": -1}, "every_ms must be an integer >= 0, not -1"),
            ({"count": "2"}, "count must be an integer >= 0, not '2'"),
            ({"cron": 5}, "cron must be text, not 5"),
        ):
            with pytest.raises(ContextError, match=why):
                await ctx.aschedule("t", **wrong)
        return host.asked

    asked = asyncio.run(main())
    assert asked == [
        {"args": ("r", "t", 1, 5), "request": "r/a#1#1"},
        {
            "args": ("r", "t", 2, 0),
            "request": "r/a#1#2",
            "cron": "0 9 * * *",
            "timezone": "Europe/Paris",
            "count": 2,
        },
        {"args": ("r", "t", 3, 0), "request": "r/a#1#3", "every_ms": 60_000, "until_ms": 9_000},
    ]


@pytest.mark.parametrize(
    ("key", "scheduled"),
    [
        ("r/~scheduled-1/call", True),
        ("r/~scheduled-1/call-2", True),
        ("r/nudge#1/replay-1", True),
        ("r/nudge#1", False),
        ("r/nudge#1/delay-2", False),
    ],
)
def test_firings_and_replays_go_back_to_the_interpreter_after_a_crash(
    key: str, scheduled: bool
) -> None:
    # A scheduled call's worker that dies is reported unknown, never re-dispatched
    # by the host: each firing and each replay as the first call is.
    assert _scheduled_call("r", key) is scheduled
