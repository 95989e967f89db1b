"""Crash safety with real processes: a worker is SIGKILLed at random moments
(seeded), restarted, and the run must end as if nothing had happened.

Also: two workers on one database run every effect once, and an effect that
kills its worker every time ends in the dead letters instead of looping.

The random kills and the dead letters run on both stores (``local_db``): a
SQLite file, and a schema of the session's PostgreSQL server, which the
worker processes get as ``--db``.
On PostgreSQL the random-kill test kills fewer times (``PG_KILLS``), to keep
the suite's time in check: every worker start there opens a new connection
and checks the schema.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import flowcore
from flowcore_local import DURABILITY

HERE = Path(__file__).resolve().parents[1]  # tests/local, with the crash tools
FLOW = HERE / "crash_flow.yaml"
TOOLS = HERE / "crash_tools.py"
KILLS = int(os.environ.get("FLOWCORE_CRASH_KILLS", "20"))
PG_KILLS = int(os.environ.get("FLOWCORE_PG_CRASH_KILLS", "6"))
INPUT = {"seed": "s", "items": ["i0", "i1", "i2", "i3", "i4", "i5"]}
IN_FLIGHT = 3  # crash_flow.yaml runs at most three calls at once (fan, max_concurrency)


def flowcore_cmd(*args: str, env: dict[str, str]) -> list[str]:
    return [sys.executable, "-m", "flowcore_cli", *args]


def environment(tmp: Path, delay: str = "0.02") -> dict[str, str]:
    env = dict(os.environ)
    env["FLOWCORE_TEST_JOURNAL"] = str(tmp / "journal.txt")
    env["FLOWCORE_TEST_DELAY"] = delay
    return env


def start(db: Path | str, run_id: str, env: dict[str, str]) -> None:
    subprocess.run(
        flowcore_cmd(
            "run",
            str(FLOW),
            "--input",
            json.dumps(INPUT),
            "--tools",
            str(TOOLS),
            "--db",
            str(db),
            "--run-id",
            run_id,
            "--detach",
            env=env,
        ),
        env=env,
        check=True,
        capture_output=True,
        timeout=60,
    )


def worker(
    db: Path | str, env: dict[str, str], max_recoveries: int | None = None
) -> subprocess.Popen[bytes]:
    more = [] if max_recoveries is None else ["--max-recoveries", str(max_recoveries)]
    return subprocess.Popen(
        flowcore_cmd("worker", "--db", str(db), "--until-idle", *more, env=env),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def finish(db: Path | str, env: dict[str, str], max_recoveries: int | None = None) -> None:
    proc = worker(db, env, max_recoveries)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr.decode()


def show(db: Path | str, run_id: str, env: dict[str, str]) -> dict[str, Any]:
    out = subprocess.run(
        flowcore_cmd("show", run_id, "--db", str(db), "--json", env=env),
        env=env,
        check=True,
        capture_output=True,
        timeout=60,
    )
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def exported(db: Path | str, run_id: str, env: dict[str, str]) -> bytes:
    out = subprocess.run(
        flowcore_cmd("export", run_id, "--db", str(db), env=env),
        env=env,
        check=True,
        capture_output=True,
        timeout=60,
    )
    return out.stdout


def journal(tmp: Path) -> tuple[Counter[str], Counter[str]]:
    starts: Counter[str] = Counter()
    ends: Counter[str] = Counter()
    path = tmp / "journal.txt"
    if path.exists():
        for line in path.read_text().splitlines():
            mark, key, _ = line.split(" ")
            (starts if mark == "S" else ends)[key] += 1
    return starts, ends


def started_handlers(tmp: Path, proc: subprocess.Popen[bytes], wanted: int) -> bool:
    """Wait until the journal holds ``wanted`` handler starts (True), or the
    worker has ended (False: the run has nothing left to do)."""
    deadline = time.monotonic() + 120  # a worker's start may be slow on a busy machine
    while sum(journal(tmp)[0].values()) < wanted:
        if proc.poll() is not None:
            return False
        assert time.monotonic() < deadline, f"no handler started within 120 s (wanted {wanted})"
        time.sleep(0.005)
    return True


def uncertain(key: str) -> bool:
    return "/tell#" in key or "/ping_call#" in key


def why_not_completed(info: dict[str, Any], starts: Counter[str], kills: int) -> str:
    """The run's status, error and dead letters in full (an assert would cut the dict)."""
    lines = [
        f"the run is {info['status']!r} after {kills} kills, not 'completed'",
        f"error: {json.dumps(info.get('error'), indent=2)}",
        f"dead letters: {json.dumps(info.get('deadLetters'), indent=2)}",
        f"handler starts per key (journal): {json.dumps(dict(starts), indent=2)}",
    ]
    return "\n".join(lines)


@pytest.fixture(scope="module")
def clean_output(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("clean")
    env = environment(tmp)
    db = tmp / "clean.db"
    start(db, "run", env)
    finish(db, env)
    info = show(db, "run", env)
    assert info["status"] == "completed"
    return info["output"]


@pytest.mark.parametrize("durability", DURABILITY)
def test_sigkill_at_random_moments_loses_nothing_and_repeats_only_in_flight_work(
    tmp_path: Path, clean_output: Any, durability: str, local_db: Path | str
) -> None:
    """In both durability modes: each promises to survive a killed process."""
    env = environment(tmp_path)
    env["FLOWCORE_DURABILITY"] = durability
    db = local_db
    kills_wanted = KILLS if isinstance(db, Path) else PG_KILLS
    rng = random.Random(20261130)
    start(db, "run", env)
    # Every kill here is the test's, not an effect's. Kills in a row can land
    # on the same effect (a worker killed right after it started one, the
    # next killed right after it started it again), and after the default
    # three recoveries it would go to the dead letters and fail the run (the
    # rule the last test checks, for an effect that kills its own worker).
    # What this test expects is that a safe effect runs again after every kill
    # that interrupts it, so the workers allow one recovery per kill and no
    # effect is ever dead-lettered.
    recoveries = kills_wanted
    kills = 0
    # The moments are chosen by progress, not by the clock, so that the kills
    # land inside the run however fast or busy the machine is: each worker is
    # killed once it has started 1 to 3 handlers of its own (seeded), after a
    # seeded pause of up to 20 ms (inside a handler, a commit, or the loop).
    while kills < kills_wanted:
        before = sum(journal(tmp_path)[0].values())
        proc = worker(db, env, recoveries)
        wanted = before + rng.randint(1, 3)
        if not started_handlers(tmp_path, proc, wanted):
            break  # the run finished before this kill: nothing left to crash
        time.sleep(rng.uniform(0.0, 0.02))
        if proc.poll() is not None:
            break
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        kills += 1
    finish(db, env, recoveries)
    info = show(db, "run", env)
    starts, _ = journal(tmp_path)
    assert info["status"] == "completed", why_not_completed(info, starts, kills)
    assert info["deadLetters"] == []
    assert info["output"] == clean_output
    repeats = {k: n for k, n in starts.items() if n > 1}
    assert not any(uncertain(k) for k in repeats), f"an uncertain call ran twice: {repeats}"
    # A kill repeats at most the handlers in flight when it landed: at most
    # IN_FLIGHT (the flow's widest concurrency), never work already committed.
    assert sum(n - 1 for n in repeats.values()) <= kills * IN_FLIGHT, (kills, repeats)
    assert all(n <= 1 + kills for n in starts.values())
    records = flowcore.decode_log(exported(db, "run", env)).records
    report = flowcore.replay(records, flowcore.parse_flow(FLOW.read_text()))
    assert report.status == "completed"
    assert kills >= min(kills_wanted, 3), "the run finished too fast to be crashed"


def test_two_workers_on_one_database_run_every_effect_once(tmp_path: Path) -> None:
    """SQLite only, for the suite's time: on PostgreSQL, test_four_workers.py
    checks the same with four workers."""
    env = environment(tmp_path, delay="0.005")
    db = tmp_path / "two.db"
    runs = [f"run{i}" for i in range(6)]
    for run_id in runs:
        start(db, run_id, env)
    a, b = worker(db, env), worker(db, env)
    for proc in (a, b):
        _, stderr = proc.communicate(timeout=180)
        assert proc.returncode == 0, stderr.decode()
    starts, ends = journal(tmp_path)
    assert starts and all(n == 1 for n in starts.values()), {
        k: n for k, n in starts.items() if n > 1
    }
    assert starts == ends
    for run_id in runs:
        assert show(db, run_id, env)["status"] == "completed"


def test_an_effect_that_keeps_killing_its_worker_goes_to_the_dead_letters(
    tmp_path: Path, local_db: Path | str
) -> None:
    env = environment(tmp_path)
    db = local_db
    spec = tmp_path / "dead.yaml"
    spec.write_text(
        "flow: deadly\ntools: {crash: {class: idempotent}}\n"
        "steps:\n  - {id: boom, call_tool: {tool: crash}}\n"
    )
    subprocess.run(
        flowcore_cmd(
            "run",
            str(spec),
            "--tools",
            str(TOOLS),
            "--db",
            str(db),
            "--run-id",
            "d",
            "--detach",
            env=env,
        ),
        env=env,
        check=True,
        capture_output=True,
        timeout=60,
    )
    for _ in range(10):
        proc = worker(db, env)
        proc.wait(timeout=60)
        if proc.returncode == 0:
            break
    info = show(db, "d", env)
    assert info["status"] == "failed"
    assert info["error"]["type"] == "dead-letter"
    assert [d["key"] for d in info["deadLetters"]] == ["d/boom#1"]
    starts, _ = journal(tmp_path)
    assert starts["d/boom#1"] == 4  # the first dispatch and three recoveries
