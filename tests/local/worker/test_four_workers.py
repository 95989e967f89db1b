"""Four ``flowcore worker`` processes on one database, on both stores (``local_db``):
a batch of runs executes every idempotency key exactly once, with a tool's
concurrency and rate limits held across all four; and a schedule's every
slot starts exactly one run while all four are working.

What ran is read from two exact records, not from timings: the handlers'
journal (one line per start and end, written with ``O_APPEND``, so the
file's order is the order the handlers began and ended), and, for the rate,
every ``tool_starts`` row the workers wrote (a trigger copies each to a
table of the test's own: the workers delete the rows that left the window).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from flowcore.schedules import run_id_for
from flowcore_local import LocalHost

from ..local_helpers import query

WORKERS = 4
RUNS = 8
ITEMS = 3
CONCURRENCY, RATE, PER_MS = 2, 3, 200
LIMITS = f"charge=concurrency:{CONCURRENCY},rate:{RATE}/{PER_MS}"

FLOW = """
flow: batch
tools: {charge: {class: idempotent}, send: {}, read: {class: readonly}}
steps:
  - id: each
    for_each:
      items: "${input.items}"
      max_concurrency: 3
      steps:
        - {id: look, call_tool: {tool: read, input: "${item}"}}
        - {id: pay, call_tool: {tool: charge, input: "${item}"}}
        - {id: tell, call_tool: {tool: send, input: "${item}"}}
output: "${length(steps.each.output)}"
"""

TOOLS = """
import os
import time

JOURNAL = {journal!r}


def _note(mark, call):
    fd = os.open(JOURNAL, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{{mark}} {{call.idempotency_key}} {{call.tool}} {{os.getpid()}}\\n".encode())
    finally:
        os.close(fd)


def _work(call):
    _note("S", call)
    time.sleep(0.01)
    _note("E", call)
    return call.input


TOOLS = {{"charge": _work, "send": _work, "read": _work}}
"""

# Every row the workers insert into tool_starts, copied to a table of the test's.
SQLITE_TRIGGER = [
    "CREATE TABLE seen_starts (tool TEXT NOT NULL, at_ms INTEGER NOT NULL)",
    "CREATE TRIGGER copy_starts AFTER INSERT ON tool_starts BEGIN "
    "INSERT INTO seen_starts VALUES (NEW.tool, NEW.at_ms); END",
]
PG_TRIGGER = [
    "CREATE TABLE seen_starts (tool TEXT NOT NULL, at_ms BIGINT NOT NULL)",
    "CREATE FUNCTION copy_starts() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    "INSERT INTO seen_starts VALUES (NEW.tool, NEW.at_ms); RETURN NEW; END $$",
    "CREATE TRIGGER copy_starts AFTER INSERT ON tool_starts "
    "FOR EACH ROW EXECUTE FUNCTION copy_starts()",
]


def fc(*args: str, env: dict[str, str]) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "flowcore_cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, (args, proc.stderr)


def write(db: Path | str, statements: list[str]) -> None:
    """Runs DDL of the test's own on the database, on a connection of its own."""
    if isinstance(db, Path):
        import sqlite3

        conn = sqlite3.connect(db)
        try:
            for sql in statements:
                conn.execute(sql)
            conn.commit()
        finally:
            conn.close()
        return
    import psycopg

    with psycopg.connect(db, autocommit=True) as pg:
        for sql in statements:
            pg.execute(sql)


def workers(db: Path | str, env: dict[str, str], *more: str) -> list[subprocess.Popen[str]]:
    return [
        subprocess.Popen(
            [sys.executable, "-m", "flowcore_cli", "worker", "--db", str(db), *more],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(WORKERS)
    ]


def test_four_workers_run_every_key_once_within_the_tools_limits(
    tmp_path: Path, local_db: Path | str
) -> None:
    db = local_db
    journal = tmp_path / "journal.txt"
    tools = tmp_path / "batch_tools.py"
    tools.write_text(TOOLS.format(journal=str(journal)))
    spec = tmp_path / "batch.yaml"
    spec.write_text(FLOW)
    env = {**os.environ, "FLOWCORE_TOOL_LIMITS": LIMITS}
    fc("db", "migrate", "--db", str(db), env=env)
    write(db, SQLITE_TRIGGER if isinstance(db, Path) else PG_TRIGGER)
    for i in range(RUNS):
        items = json.dumps({"items": [f"{i}.{k}" for k in range(ITEMS)]})
        fc("run", str(spec), "--input", items, "--tools", str(tools), "--db", str(db),
           "--run-id", f"r{i}", "--detach", env=env)  # fmt: skip
    procs = workers(db, env, "--until-idle")
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    lines = [line.split(" ") for line in journal.read_text().splitlines()]
    starts = Counter(key for mark, key, _, _ in lines if mark == "S")
    ends = Counter(key for mark, key, _, _ in lines if mark == "E")
    expected = {
        f"r{i}/each[{k}]/{step}#1" for i in range(RUNS) for k in range(ITEMS)
        for step in ("look", "pay", "tell")
    }  # fmt: skip
    assert set(starts) == expected, set(starts) ^ expected
    assert all(n == 1 for n in starts.values()), {k: n for k, n in starts.items() if n > 1}
    assert starts == ends
    # Concurrency: the journal's order is the handlers' order; a charge handler
    # runs inside its call's dispatched span, which the limit counts.
    running = high = 0
    for mark, _, tool, _ in lines:
        if tool == "charge":
            running += 1 if mark == "S" else -1
            high = max(high, running)
    assert high <= CONCURRENCY, high
    # Rate: every dispatch of charge, at the host's clock, as the store counts
    # them (a start counts in the window (now - PER_MS, now]).
    at = sorted(row[0] for row in query(db, "SELECT at_ms FROM seen_starts WHERE tool = 'charge'"))
    assert len(at) == RUNS * ITEMS
    busiest = max(sum(1 for t in at if s - PER_MS < t <= s) for s in at)
    assert busiest <= RATE, at
    statuses = {row[0] for row in query(db, "SELECT status FROM runs")}
    assert statuses == {"completed"}


TICK = """\
flow: tick
steps:
  - {id: nap, sleep: {for_ms: 1}}
output: "${input}"
schedules:
  every_second:
    every: 1s
    overlap: allow_all
    catchup_window: 1d
    input: {at: "${schedule.at}"}
"""
SLOTS = 4  # decided slots the test waits for


def test_four_workers_start_each_slot_of_a_schedule_exactly_once(
    tmp_path: Path, local_db: Path | str
) -> None:
    db = local_db
    spec = tmp_path / "tick.yaml"
    spec.write_text(TICK)

    async def add() -> None:
        async with LocalHost(db) as host:
            await host.add_schedules(spec)

    asyncio.run(add())
    [(created,)] = query(db, "SELECT created_ms FROM schedules WHERE name = 'every_second'")
    procs = workers(db, dict(os.environ))
    try:
        deadline = time.monotonic() + 120
        while True:
            [(considered,)] = query(
                db, "SELECT considered_ms FROM schedules WHERE name = 'every_second'"
            )
            if considered is not None and considered >= created + SLOTS * 1000:
                break
            for proc in procs:
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, f"slots decided up to {considered} only"
            time.sleep(0.05)
        for proc in procs:  # all four were working throughout
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=60)
    # Every slot after the schedule was added, up to the last decided one.
    first = created - created % 1000 + 1000
    [(considered,)] = query(db, "SELECT considered_ms FROM schedules WHERE name = 'every_second'")
    expected = {run_id_for("every_second", s) for s in range(first, considered + 1, 1000)}
    assert len(expected) >= SLOTS
    runs = {row[0] for row in query(db, "SELECT run_id FROM runs")}
    assert runs == expected, runs ^ expected
    started = Counter(
        row[0] for row in query(db, "SELECT run_id FROM log WHERE type = 'run.started'")
    )
    assert started == Counter(expected), {k: n for k, n in started.items() if n != 1}
    actions = Counter(
        (row[0], row[1]) for row in query(db, "SELECT action, run_id FROM schedule_actions")
    )
    assert actions == Counter(("started", run_id) for run_id in expected), actions
