"""Progress streams on the local host (specs/local.md, "Progress streams"):
handlers publish with ``flowcore_handlers.publish``; the host keeps the items
per run, indexed from 0, capped (oldest dropped, readers told the gap), deleted
with the run, never read by the decision (the log is the same with or without).
A real SQLite file and real handlers, sync and ``async``."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import pytest

import flowcore
import flowcore_handlers
from flowcore import CallTool
from flowcore_cli.main import run
from flowcore_handlers import ProgressError, Registry
from flowcore_local import LocalHost, ProgressCap
from flowcore_local._db import SCHEMA_VERSION, connect

TWO = """
flow: two
tools: {write: {class: idempotent}, talk: {class: idempotent}}
steps:
  - {id: draft, call_tool: {tool: write, input: {n: 3}}}
  - {id: chat, call_tool: {tool: talk, input: {n: 2}}}
output: "${steps.chat.output}"
"""


def write(call: CallTool) -> Any:
    for i in range(call.input["n"]):
        flowcore_handlers.publish(f"chunk {i}")
    flowcore_handlers.publish({"done": True, "of": call.input["n"]})
    return "written"


async def talk(call: CallTool) -> Any:
    for i in range(call.input["n"]):
        flowcore_handlers.publish({"said": i})
        await asyncio.sleep(0)
    return "talked"


REGISTRY = Registry(tools={"write": write, "talk": talk})


def _writes(n: int) -> str:
    """A flow of one call of ``write``, which publishes ``n`` chunks and a summary."""
    return (
        "flow: c\ntools: {write: {class: idempotent}}\n"
        f"steps: [{{id: a, call_tool: {{tool: write, input: {{n: {n}}}}}}}]\n"
    )


def _items(records: list[flowcore.Record]) -> list[tuple[int, str, Any]]:
    return [(r.index, r.type, r.data) for r in records]


def test_sync_and_async_handlers_publish_in_order_under_their_step(
    tmp_path: Path, local_db: Path | str
) -> None:
    async def main() -> tuple[Any, list[flowcore.Record], list[flowcore.Record]]:
        async with LocalHost(local_db, registry=REGISTRY) as host:
            rid = await host.start(TWO, None, "r")
            await asyncio.wait_for(host.work(until_settled=rid), timeout=60)
            followed = [r async for r in host.progress(rid, follow=True)]
            return await host.run(rid), followed, await host.progress_records(rid, 3)

    row, followed, later = asyncio.run(main())
    assert row.status == "completed"
    assert _items(followed) == [
        (0, "progress", {"key": "r/draft#1", "step": "draft", "data": "chunk 0"}),
        (1, "progress", {"key": "r/draft#1", "step": "draft", "data": "chunk 1"}),
        (2, "progress", {"key": "r/draft#1", "step": "draft", "data": "chunk 2"}),
        (3, "progress", {"key": "r/draft#1", "step": "draft", "data": {"done": True, "of": 3}}),
        (4, "progress", {"key": "r/chat#1", "step": "chat", "data": {"said": 0}}),
        (5, "progress", {"key": "r/chat#1", "step": "chat", "data": {"said": 1}}),
    ]
    assert [r.index for r in later] == [3, 4, 5]
    assert all(r.run_id == "r" for r in followed)


def test_a_follower_sees_items_live_while_the_handler_still_runs(
    tmp_path: Path, local_db: Path | str
) -> None:
    release = threading.Event()

    def slow(call: CallTool) -> Any:
        flowcore_handlers.publish("first")
        assert release.wait(60)
        flowcore_handlers.publish("second")
        return "ok"

    spec = (
        "flow: s\ntools: {slow: {class: idempotent}}\nsteps: [{id: a, call_tool: {tool: slow}}]\n"
    )

    async def main() -> list[Any]:
        async with LocalHost(local_db, registry=Registry(tools={"slow": slow})) as host:
            rid = await host.start(spec, None, "r")
            worker = asyncio.create_task(host.work(until_settled=rid))
            seen: list[Any] = []
            async for record in host.progress(rid, follow=True):
                seen.append(record.data["data"])
                if len(seen) == 1:  # the handler is still waiting: the item came live
                    assert not worker.done()
                    release.set()
            await asyncio.wait_for(worker, timeout=60)
            return seen

    assert asyncio.run(main()) == ["first", "second"]


def test_the_cap_drops_the_oldest_and_readers_are_told_the_gap(
    tmp_path: Path, local_db: Path | str
) -> None:
    spec = _writes(9)

    async def main() -> tuple[list[flowcore.Record], list[flowcore.Record], list[flowcore.Record]]:
        async with LocalHost(local_db, registry=REGISTRY) as host:
            host.progress_cap = ProgressCap(items=4, bytes=1_000_000)
            rid = await host.start(spec, None, "r")
            await asyncio.wait_for(host.work(until_settled=rid), timeout=60)
            return (
                await host.progress_records(rid),
                await host.progress_records(rid, 7),
                await host.progress_records(rid, 99),
            )

    whole, tail, past = asyncio.run(main())
    # 10 items (0..9): the newest 4 are kept; indexes keep counting.
    assert [(r.index, r.type) for r in whole] == [
        (5, "progress.dropped"),
        (6, "progress"),
        (7, "progress"),
        (8, "progress"),
        (9, "progress"),
    ]
    assert whole[0].data == {"from": 0, "count": 6}
    assert [r.index for r in tail] == [7, 8, 9]  # nothing dropped from 7 on
    assert past == []


def test_the_byte_cap_keeps_the_newest_items_within_it(
    tmp_path: Path, local_db: Path | str
) -> None:
    spec = _writes(5)

    async def main() -> list[flowcore.Record]:
        async with LocalHost(local_db, registry=REGISTRY) as host:
            # "chunk 0" is 9 bytes as JSON; {"done":true,"of":5} is 20: 20 + 9 fit in 30.
            host.progress_cap = ProgressCap(items=100, bytes=30)
            rid = await host.start(spec, None, "r")
            await asyncio.wait_for(host.work(until_settled=rid), timeout=60)
            return await host.progress_records(rid)

    found = asyncio.run(main())
    assert [(r.index, r.type) for r in found] == [
        (3, "progress.dropped"),
        (4, "progress"),
        (5, "progress"),
    ]


def test_a_cap_must_be_positive() -> None:
    with pytest.raises(ValueError, match=r"ProgressCap.items must be a positive integer, not 0"):
        ProgressCap(items=0)
    with pytest.raises(ValueError, match=r"ProgressCap.bytes must be a positive integer"):
        ProgressCap(bytes=-1)


def test_progress_is_deleted_with_the_run_and_the_log_does_not_hold_it(
    tmp_path: Path, local_db: Path | str
) -> None:
    async def main() -> tuple[list[str], int]:
        async with LocalHost(local_db, registry=REGISTRY) as host:
            rid = await host.start(TWO, None, "r")
            await asyncio.wait_for(host.work(until_settled=rid), timeout=60)
            types = [r.type for r in await host.records(rid)]
            await host.delete(rid)
            left = host.store.conn.execute("SELECT COUNT(*) FROM progress").fetchone()[0]
            return types, left

    types, left = asyncio.run(main())
    assert not any(t.startswith("progress") for t in types)
    assert left == 0


def test_the_log_is_the_same_with_or_without_publishing(tmp_path: Path) -> None:
    def quiet(call: CallTool) -> Any:
        return "written"

    def loud(call: CallTool) -> Any:
        flowcore_handlers.publish("chunk")
        return "written"

    spec = (
        "flow: q\ntools: {write: {class: idempotent}}\nsteps: [{id: a, call_tool: {tool: write}}]\n"
    )

    async def log(handler: Any, name: str) -> list[tuple[str, Any]]:
        async with LocalHost(tmp_path / name, registry=Registry(tools={"write": handler})) as host:
            rid = await host.start(spec, None, "r")
            await asyncio.wait_for(host.work(until_settled=rid), timeout=60)
            out = []
            for r in await host.records(rid):
                data = dict(r.data) if isinstance(r.data, dict) else r.data
                if isinstance(data, dict):
                    data.pop("atMs", None)
                out.append((r.type, data))
            return out

    assert asyncio.run(log(quiet, "q.db")) == asyncio.run(log(loud, "l.db"))


def test_bad_items_and_calls_outside_a_handler_raise_progress_error(
    tmp_path: Path, local_db: Path | str
) -> None:
    with pytest.raises(ProgressError, match="outside a handler"):
        flowcore_handlers.publish("x")
    seen: list[str] = []

    def bad(call: CallTool) -> Any:
        for item in (
            {1: "not a string key"},
            "x" * (flowcore_handlers.MAX_PROGRESS_ITEM_BYTES + 1),
        ):
            try:
                flowcore_handlers.publish(item)
            except ProgressError as exc:
                seen.append(str(exc))
        flowcore_handlers.publish("fine")
        return "ok"

    spec = "flow: b\ntools: {bad: {class: idempotent}}\nsteps: [{id: a, call_tool: {tool: bad}}]\n"

    async def main() -> list[flowcore.Record]:
        async with LocalHost(local_db, registry=Registry(tools={"bad": bad})) as host:
            rid = await host.start(spec, None, "r")
            await asyncio.wait_for(host.work(until_settled=rid), timeout=60)
            return await host.progress_records(rid)

    found = asyncio.run(main())
    assert [r.data["data"] for r in found] == ["fine"]
    assert len(seen) == 2
    assert seen[0].startswith("progress item cannot be stored:")
    assert "bytes as JSON; at most 65,536 are kept" in seen[1]


def test_the_command_prints_the_items_and_the_gap(
    tmp_path: Path, local_db: Path | str, capfd: pytest.CaptureFixture[str]
) -> None:
    db = local_db

    async def main() -> None:
        async with LocalHost(db, registry=REGISTRY) as host:
            host.progress_cap = ProgressCap(items=3, bytes=1_000_000)
            rid = await host.start(_writes(3), None, "r")
            await asyncio.wait_for(host.work(until_settled=rid), timeout=60)

    asyncio.run(main())
    capfd.readouterr()
    assert run(["progress", "r", "--db", str(db)]) == 0
    assert capfd.readouterr().out.splitlines() == [
        "0: (1 item from 0 dropped by the run's cap)",
        "1 a: chunk 1",
        "2 a: chunk 2",
        '3 a: {"done":true,"of":3}',
    ]
    assert run(["progress", "r", "--db", str(db), "--from", "3", "--follow", "--json"]) == 0
    lines = [json.loads(x) for x in capfd.readouterr().out.splitlines()]
    assert [(x["type"], x["index"], x["data"]["data"]) for x in lines] == [
        ("progress", 3, {"done": True, "of": 3})
    ]
    assert run(["progress", "ghost", "--db", str(db)]) == 2
    assert "no run 'ghost'" in capfd.readouterr().err


# SQLite only: it reads or doctors the SQLite file itself.
def test_a_database_of_the_schema_before_gets_the_progress_table_empty(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    conn = connect(db)
    conn.execute("DROP TABLE progress")  # as schema 9 was
    conn.execute("ALTER TABLE schedules DROP COLUMN owner")  # as schema 10 was
    conn.execute("ALTER TABLE scheduled_calls DROP COLUMN recurrence")  # as schema 11 was
    conn.execute("PRAGMA user_version = 9")
    conn.close()
    conn = connect(db)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION >= 10
        assert conn.execute("SELECT COUNT(*) FROM progress").fetchone()[0] == 0
    finally:
        conn.close()


def test_a_handler_run_without_a_progress_sink_publishes_into_nothing() -> None:
    # As a host with no progress sink runs it (`run_handler` alone): the
    # item is checked, then dropped; the handler goes on.
    def tool(call: CallTool) -> Any:
        flowcore_handlers.publish("dropped")
        try:
            flowcore_handlers.publish({1: 2})
        except ProgressError:
            return "checked"
        return "unchecked"

    effect = CallTool(tool="t", input=None, idempotency_key="r/a#1")
    registry = Registry(tools={"t": tool})
    event = asyncio.run(flowcore_handlers.call_handler(registry, effect, lambda: 0))
    assert isinstance(event, flowcore.EffectSucceeded)
    assert event.output == "checked"


def test_a_handler_publishes_through_its_context(tmp_path: Path, local_db: Path | str) -> None:
    """``context().publish`` adds to the same stream as ``flowcore_handlers.publish``."""

    def through_context(call: CallTool) -> Any:
        ctx = flowcore_handlers.context()
        ctx.publish(f"from {ctx.step} attempt {ctx.attempt}")
        flowcore_handlers.publish({"plain": True})
        return "ok"

    async def main() -> list[flowcore.Record]:
        registry = Registry(tools={"write": through_context})
        async with LocalHost(local_db, registry=registry) as host:
            rid = await host.start(_writes(1), None, "r")
            await asyncio.wait_for(host.work(until_settled=rid), timeout=60)
            return [r async for r in host.progress(rid, follow=True)]

    assert _items(asyncio.run(main())) == [
        (0, "progress", {"key": "r/a#1", "step": "a", "data": "from a attempt 1"}),
        (1, "progress", {"key": "r/a#1", "step": "a", "data": {"plain": True}}),
    ]
