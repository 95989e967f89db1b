"""An idle worker on PostgreSQL wakes on another connection's commit, not on its
poll (specs/local.md §6 and §20): every write transaction but a heartbeat
notifies the schema's channel, and a worker's sleep ends when one arrives.

The workers poll once a minute here, so a run that settles within the
``asyncio.wait_for`` below was woken by the notification, however slow the
machine: the poll would have come ``POLL_S - WAIT_S`` seconds too late.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import psycopg

from flowcore_handlers import Registry
from flowcore_handlers._limits import ToolLimit
from flowcore_local import LocalHost
from flowcore_local._pg import PgDatabase, channel_name, connect_pg
from tests.local.worker.test_idle_rounds import WAITS, counting

POLL_S = 60.0
WAIT_S = 30.0  # well under the poll: reaching it means the worker was not woken

ECHO = """
flow: echoes
tools: {echo: {class: readonly}}
steps:
  - {id: e, call_tool: {tool: echo, input: "${input}"}}
output: "${steps.e.output}"
"""


async def echo(call: Any) -> Any:
    return call.input


def sleeping(host: LocalHost) -> asyncio.Event:
    """Set each time ``host``'s worker goes to sleep (and cleared by the caller)."""
    entered = asyncio.Event()
    sleep = host._sleep

    async def noted(delay: float) -> None:
        entered.set()
        await sleep(delay)

    host._sleep = noted  # type: ignore[method-assign]
    return entered


def dozing(host: LocalHost) -> asyncio.Event:
    """Set while ``host``'s worker sleeps between rounds."""
    asleep = asyncio.Event()
    sleep = host._sleep

    async def noted(delay: float) -> None:
        asleep.set()
        try:
            await sleep(delay)
        finally:
            asleep.clear()

    host._sleep = noted  # type: ignore[method-assign]
    return asleep


def test_an_idle_worker_wakes_on_a_run_another_connection_starts(
    pg_url: str, tmp_path: Path
) -> None:
    spec = tmp_path / "echoes.yaml"
    spec.write_text(ECHO)

    async def main() -> list[Any]:
        worker = LocalHost(pg_url, registry=Registry(tools={"echo": echo}), poll_ms=60_000)
        other = LocalHost(pg_url, registry=Registry(tools={}))  # another connection
        await worker.open()
        await other.open()
        idle = sleeping(worker)
        stop = asyncio.Event()
        working = asyncio.ensure_future(worker.work(stop))
        rows = []
        try:
            for n in range(3):  # each time from a worker asleep for a minute
                await asyncio.wait_for(idle.wait(), WAIT_S)
                idle.clear()
                run_id = f"e{n}"
                await other.start(spec, n, run_id)

                async def settled(run_id: str = run_id) -> Any:
                    while (row := await other.run(run_id)).status == "running":
                        await asyncio.sleep(0.01)
                    return row

                rows.append(await asyncio.wait_for(settled(), WAIT_S))
        finally:
            stop.set()
            worker._wake.set()  # type: ignore[union-attr]  # not a minute's poll
            await working
            await worker.close()
            await other.close()
        return rows

    rows = asyncio.run(main())
    assert [(r.status, r.output) for r in rows] == [("completed", n) for n in range(3)]


def test_heartbeats_do_not_wake_an_idle_worker(pg_url: str, tmp_path: Path) -> None:
    """Two idle workers beat every 50 ms; neither runs a round for the other's
    beats (nor its own), and a signal still wakes them."""
    spec = tmp_path / "waits.yaml"
    spec.write_text(WAITS)

    async def main() -> tuple[int, int, Any]:
        hosts = [
            LocalHost(pg_url, registry=Registry(tools={}), poll_ms=60_000, lease_ms=150)
            for _ in range(2)
        ]
        for host in hosts:
            await host.open()
        await hosts[0].start(spec, None, "w1")
        idles = [sleeping(host) for host in hosts]
        stop = asyncio.Event()
        working = [asyncio.ensure_future(host.work(stop)) for host in hosts]
        try:
            for idle in idles:
                await asyncio.wait_for(idle.wait(), WAIT_S)
            rounds = [counting(host) for host in hosts]
            beaten = [host._beaten for host in hosts]
            # Idle, until each worker has beaten at least ten times.
            while min(h._beaten - b for h, b in zip(hosts, beaten, strict=True)) < 10:
                await asyncio.sleep(0.05)
            idle_rounds = sum(len(r) for r in rounds)
            beats = min(h._beaten - b for h, b in zip(hosts, beaten, strict=True))
            await hosts[1].signal("w1", "go", {"n": 1})

            async def settled() -> Any:
                while (row := await hosts[1].run("w1")).status == "running":
                    await asyncio.sleep(0.01)
                return row

            row = await asyncio.wait_for(settled(), WAIT_S)
        finally:
            stop.set()
            for host in hosts:
                host._wake.set()  # type: ignore[union-attr]  # not a minute's poll
            for task in working:
                await task
            for host in hosts:
                await host.close()
        return idle_rounds, beats, row

    idle_rounds, beats, row = asyncio.run(main())
    assert beats >= 10
    assert idle_rounds == 0, idle_rounds
    assert row.status == "completed" and row.output == {"n": 1}


def test_notifications_are_sent_at_commit_on_the_schemas_channel(pg_url: str) -> None:
    conn, db = connect_pg(pg_url)
    listener = db.listen()
    try:
        assert listener.heard() == 0
        conn.execute("BEGIN")
        db.notify(conn)
        db.notify(conn)
        conn.execute("ROLLBACK")  # rolled back: nothing sent
        conn.execute("BEGIN")
        db.notify(conn)
        db.notify(conn)  # one transaction: one notification
        conn.execute("COMMIT")
        # That one came from the store's own connection (its worker knows its
        # own writes): not counted. The queue is in commit order, so once
        # another connection's notification is heard, ours was consumed before it.
        with psycopg.connect(pg_url, autocommit=True) as raw:
            raw.execute("BEGIN")
            raw.execute("SELECT pg_notify(%s, '')", [db.channel])
            raw.execute("COMMIT")
        heard = 0
        for _ in range(1000):  # delivered asynchronously after the commit
            heard += listener.heard()
            if heard:
                break
            conn.execute("SELECT pg_sleep(0.01)")
        assert heard == 1
    finally:
        listener.close()
        conn.close()


def test_the_channel_name_is_a_stable_identifier_per_database_and_schema() -> None:
    name = channel_name("postgres", "s" * 63)
    assert name == channel_name("postgres", "s" * 63)
    assert name != channel_name("postgres", "t" * 63)
    assert name != channel_name("other", "s" * 63)
    assert len(name.encode()) <= 63 and name.isidentifier() and name == name.lower()
    assert PgDatabase("postgres", "public").channel == channel_name("postgres", "public")


CHARGES = """
flow: charges
tools: {charge: {class: idempotent}}
steps:
  - id: each
    for_each:
      items: [1, 2]
      steps:
        - {id: pay, call_tool: {tool: charge, input: "${item}"}}
output: "${steps.each.output}"
"""


def test_workers_waiting_for_a_tools_room_do_not_wake_one_another(
    pg_url: str, tmp_path: Path
) -> None:
    """Two workers, a tool with room for one call: one call runs (held), the
    other waits ``ready``. A round's claim finds no room and writes nothing,
    so it notifies nobody: once both sleep, neither runs another round until
    the held call ends. (A claim that notified though it wrote nothing woke
    the other worker, whose claim woke the first, for ever: each worker ran
    rounds back to back, starving its heartbeats until the others took its
    work for lost and ran it again.)"""
    spec = tmp_path / "charges.yaml"
    spec.write_text(CHARGES)
    release = asyncio.Event()
    started: list[Any] = []

    async def charge(call: Any) -> Any:
        started.append(call.input)
        await release.wait()
        return call.input

    async def main() -> tuple[int, list[Any], Any]:
        limits = {"charge": ToolLimit(concurrency=1)}
        hosts = [
            LocalHost(
                pg_url,
                registry=Registry(tools={"charge": charge}),
                poll_ms=60_000,
                tool_limits=limits,
            )
            for _ in range(2)
        ]
        for host in hosts:
            await host.open()
        await hosts[0].start(spec, None, "c1")
        stop = asyncio.Event()
        asleep = [dozing(host) for host in hosts]
        working = [asyncio.ensure_future(host.work(stop)) for host in hosts]
        try:

            async def both_asleep() -> None:
                while not (started and all(a.is_set() for a in asleep)):
                    await asyncio.sleep(0.01)

            await asyncio.wait_for(both_asleep(), WAIT_S)
            rounds = [counting(host) for host in hosts]
            await asyncio.sleep(0.5)  # both asleep: nothing commits, nobody wakes
            idle_rounds = sum(len(r) for r in rounds)
            release.set()

            async def settled() -> Any:
                while (row := await hosts[1].run("c1")).status == "running":
                    await asyncio.sleep(0.01)
                return row

            row = await asyncio.wait_for(settled(), WAIT_S)
        finally:
            release.set()
            stop.set()
            for host in hosts:
                host._wake.set()  # type: ignore[union-attr]
            for task in working:
                await task
            for host in hosts:
                await host.close()
        return idle_rounds, sorted(started), row

    idle_rounds, charged, row = asyncio.run(main())
    assert idle_rounds == 0, idle_rounds
    assert charged == [1, 2]  # each once: nothing was taken for lost
    assert row.status == "completed" and row.output == [1, 2]


def test_a_worker_whose_listening_connection_is_lost_polls_instead(
    pg_url: str, tmp_path: Path
) -> None:
    spec = tmp_path / "echoes.yaml"
    spec.write_text(ECHO)

    async def main() -> tuple[bool, Any]:
        worker = LocalHost(pg_url, registry=Registry(tools={"echo": echo}), poll_ms=20)
        other = LocalHost(pg_url, registry=Registry(tools={}))
        await worker.open()
        await other.open()
        idle = sleeping(worker)
        stop = asyncio.Event()
        working = asyncio.ensure_future(worker.work(stop))
        try:
            await asyncio.wait_for(idle.wait(), WAIT_S)
            listener = worker._listener
            assert listener is not None
            pid = listener.raw.info.backend_pid  # type: ignore[attr-defined]
            with psycopg.connect(pg_url, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", [pid])
            while worker._listener is not None:
                await asyncio.sleep(0.01)
            await other.start(spec, 7, "e7")
            while (row := await other.run("e7")).status == "running":
                await asyncio.sleep(0.01)
            return listener.closed, row
        finally:
            stop.set()
            await working
            await worker.close()
            await other.close()

    closed, row = asyncio.run(main())
    assert closed and (row.status, row.output) == ("completed", 7)
