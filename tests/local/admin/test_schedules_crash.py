"""Exactly once per slot: three worker processes on one database, killed with
SIGKILL at random moments (seeded) and restarted, while a fake clock jumps.
On both stores (``local_db``): a SQLite file, and a schema of the session's
PostgreSQL server.

Every slot in the range must end with exactly one run, started once (one
``run.started`` record, one ``started`` action), and no slot skipped. The
clock is a file the workers read (``schedule_worker.py``); it only moves
forward, and the catch-up window is a day, so a slow machine delays the
starts but never changes what is started.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from flowcore.schedules import run_id_for
from flowcore_local import LocalHost

from ..local_helpers import query

HERE = Path(__file__).resolve().parent
WORKER = HERE / "schedule_worker.py"
MIN = 60_000
T0 = 1_796_083_200_000  # 2026-12-01T00:00:00Z
SLOTS = 60
KILLS = int(os.environ.get("FLOWCORE_CRASH_KILLS", "20"))

FLOW = """\
flow: tick
steps:
  - {id: nap, sleep: {for_ms: 1}}
output: "${input}"
schedules:
  every_minute:
    every: 1m
    jitter: 20s
    overlap: allow_all
    catchup_window: 1d
    input: {at: "${schedule.at}"}
"""


def set_clock(path: Path, at: int) -> None:
    part = path.with_suffix(".part")
    part.write_text(str(at))
    os.replace(part, path)


def spawn(db: Path | str, clock: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), str(db), str(clock)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def test_three_workers_killed_at_random_start_every_slot_exactly_once(
    tmp_path: Path, local_db: Path | str
) -> None:
    db, clock, spec = local_db, tmp_path / "clock", tmp_path / "tick.yaml"
    spec.write_text(FLOW)
    set_clock(clock, T0)

    async def add() -> None:
        async with LocalHost(db, clock=lambda: T0) as host:
            await host.add_schedules(spec)

    asyncio.run(add())
    rng = random.Random(20261202)
    workers = [spawn(db, clock) for _ in range(3)]
    kills = 0
    end = T0 + SLOTS * MIN
    now = T0
    try:
        while now < end + MIN:  # a minute past the last slot: its jitter is below 20s
            now += MIN // 2
            set_clock(clock, now)
            time.sleep(rng.uniform(0.02, 0.15))
            if rng.random() < 0.5:
                victim = rng.randrange(3)
                workers[victim].send_signal(signal.SIGKILL)
                workers[victim].wait(timeout=60)
                kills += 1
                workers[victim] = spawn(db, clock)
        extra = 0
        while kills + extra < KILLS:  # more kills while the workers catch up
            time.sleep(rng.uniform(0.05, 0.3))
            victim = rng.randrange(3)
            workers[victim].send_signal(signal.SIGKILL)
            workers[victim].wait(timeout=60)
            extra += 1
            workers[victim] = spawn(db, clock)
        kills += extra
        deadline = time.monotonic() + 300
        while True:
            [(considered,)] = query(
                db, "SELECT considered_ms FROM schedules WHERE name = 'every_minute'"
            )
            if considered >= end:
                break
            for proc in workers:
                assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            assert time.monotonic() < deadline, f"the workers decided up to {considered} only"
            time.sleep(0.1)
    finally:
        for proc in workers:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=60)
    expected = {run_id_for("every_minute", T0 + k * MIN) for k in range(1, SLOTS + 1)}
    runs = {r[0] for r in query(db, "SELECT run_id FROM runs")}
    assert runs == expected
    starts = Counter(r[0] for r in query(db, "SELECT run_id FROM log WHERE type = 'run.started'"))
    assert starts == Counter(expected), {k: n for k, n in starts.items() if n != 1}
    actions = Counter(
        (r[0], r[1]) for r in query(db, "SELECT action, run_id FROM schedule_actions")
    )
    assert actions == Counter(("started", run_id) for run_id in expected), {
        k: n for k, n in actions.items() if n != 1 or k[0] != "started"
    }
    # Inputs come from the slot, not from when a worker got to it.
    for run_id, data in query(db, "SELECT run_id, input FROM runs"):
        assert data == '{"at":"' + run_id.split("@")[1] + '"}'
    assert kills >= KILLS
