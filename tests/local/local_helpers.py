"""Shared pieces of the local host's API tests: tools modules written as real files.

A tools module is written to the test's ``tmp_path`` and loaded by the host
from its path, as a user's would be. Handlers note every call in a journal
file next to it, so a test can count how often each key really ran.
"""

from __future__ import annotations

import asyncio
import textwrap
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flowcore_local import LocalHost, RunRow

if TYPE_CHECKING:
    from flowcore_local._store import Store

# A for_each of calls, then a wait for the signal ``go``, then one more call.
LOOP = """
flow: loop
tools: {echo: {class: readonly}}
steps:
  - id: each
    for_each:
      items: "${input.items}"
      steps: [{id: one, call_tool: {tool: echo, input: "${item}"}}]
  - {id: go, await_signal: {signal: go}}
  - {id: last, call_tool: {tool: echo, input: last}}
output: "${length(steps.each.output)}"
"""


JOURNALED = """
from pathlib import Path

from flowcore_handlers import HandlerError

JOURNAL = Path({journal!r})


def note(call):
    with JOURNAL.open("a") as f:
        f.write(call.idempotency_key + "\\n")


def echo(call):
    note(call)
    return {{"echo": call.input}}


def down(call):
    note(call)
    raise HandlerError("down", "the service is down")


def boom(call):
    note(call)
    raise ValueError("boom")
"""


def tools_file(folder: Path, name: str, body: str, **names: Any) -> Path:
    """Write a tools module ``name.py`` into ``folder``; ``body`` is formatted with
    ``journal`` (the journal file's path) and ``names``, then dedented."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.py"
    journal = folder / "journal.txt"
    path.write_text(textwrap.dedent(body.format(journal=str(journal), **names)))
    return path


def journal(folder: Path) -> Counter[str]:
    """How many times each key was called, by the handlers of ``folder``'s modules."""
    path = folder / "journal.txt"
    if not path.exists():
        return Counter()
    return Counter(path.read_text().split())


async def settle(host: LocalHost, run_id: str, timeout: float = 20, **options: Any) -> RunRow:
    """Work until ``run_id`` settles; its row."""
    await asyncio.wait_for(host.work(until_settled=run_id, **options), timeout=timeout)
    return await host.run(run_id)


async def work_until(
    host: LocalHost, done: Callable[[], Awaitable[bool]], timeout: float = 30, **options: Any
) -> None:
    """Run the worker until ``done()`` holds (checked while it works)."""
    stop = asyncio.Event()

    async def watch() -> None:
        while not await done():
            await asyncio.sleep(0.02)
        stop.set()

    watcher = asyncio.create_task(watch())
    await asyncio.wait_for(host.work(stop, **options), timeout=timeout)
    await watcher


def dispatch_to_ghost(db: Path | str, worker: str = "ghost") -> list[str]:
    """Claim the ready work of ``db`` (a SQLite file or a PostgreSQL URL) for a
    worker that is then lost.

    As a worker process that recorded the dispatch and was killed before its
    handlers finished: the rows are ``dispatched`` to ``worker``, whose
    heartbeat is ancient, so the next worker recovers them. Returns the keys.
    """
    import time

    from flowcore_local._db import open_db
    from flowcore_local._store import Store

    conn, database = open_db(db)
    try:
        store = Store(conn, worker, db=database)
        with store.tx():
            claimed = store.claim_ready_work(int(time.time() * 1000), 100)
            conn.execute(
                "INSERT INTO workers (worker_id, pid, hostname, heartbeat_ms)"
                " VALUES (?, 0, 'elsewhere', 0) ON CONFLICT (worker_id) DO UPDATE"
                " SET pid = 0, hostname = 'elsewhere', heartbeat_ms = 0",
                (worker,),
            )
    finally:
        conn.close()
    return [c.key for c in claimed]


def open_store(db: Path | str, worker: str) -> Store:
    """A store of its own on ``db`` (a SQLite file or a PostgreSQL URL): another
    connection, as another process has."""
    from flowcore_local._db import open_db
    from flowcore_local._store import Store

    conn, database = open_db(db)
    return Store(conn, worker, db=database)


def query(db: Path | str, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """The rows of ``sql`` (``?`` placeholders, SQL both databases take), read from
    ``db`` on a connection of its own."""
    from flowcore_local._db import open_db

    conn, _ = open_db(db)
    try:
        return [tuple(row) for row in conn.execute(sql, params).fetchall()]
    finally:
        conn.close()
