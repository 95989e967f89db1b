"""Scheduled calls on the local host: the table, the commands, retention, crashes.

Every command runs for real in a subprocess against a real SQLite file;
retention runs on an injected clock (nothing waits for a day to pass); the
records are followed by ``flowcore events --follow`` in a subprocess while a
worker runs the run; a scheduled call whose worker is SIGKILLed is issued
again up to three times when its tool is idempotent, once when it is not.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from flowcore_local import HostError, LocalHost, ScheduledRetention

from ..local_helpers import tools_file

HERE = Path(__file__).resolve().parents[1]  # tests/local, with the crash tools
CRASH_TOOLS = HERE / "crash_tools.py"
DAY = 24 * 3600 * 1000

SPEC = """
flow: reminders
tools:
  send_reminder: {class: idempotent, schedulable: true}
  cleanup: {class: readonly}
  pager: {schedulable: true}
steps:
  - id: nudge
    schedule: {tool: send_reminder, input: {to: "${input.who}"}, delay_ms: 7200000}
  - id: wait
    await_signal: {signal: done}
"""

TOOLS = """
from flowcore_handlers import HandlerError


def send_reminder(call):
    return {{"sent": call.input}}


def cleanup(call):
    return "clean"


def pager(call):
    raise HandlerError("pager-down", "the pager is down")


TOOLS = {{"send_reminder": send_reminder, "cleanup": cleanup, "pager": pager}}
"""


def fc(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flowcore_cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env or dict(os.environ),
        check=False,
    )


def ok(*args: str, env: dict[str, str] | None = None) -> str:
    proc = fc(*args, env=env)
    assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
    return proc.stdout


def nothing(*args: str) -> str:
    """A cancel or run-now with nothing to do: ``false``, one line on stderr, exit 1."""
    proc = fc(*args)
    assert proc.returncode == 1, (args, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("flowcore: no pending scheduled call ") and line.endswith(
        ("nothing to cancel", "nothing to run now")
    ), line
    return proc.stdout


def bad(*args: str) -> str:
    proc = fc(*args)
    assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def listed(db: Path | str, *args: str) -> dict[str, dict[str, Any]]:
    rows = json.loads(ok("scheduled", "list", "--json", "--db", str(db), *args))
    return {row["id"]: row for row in rows}


def wait_for(what: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def started(tmp_path: Path, db: Path | str, run_id: str = "r-1") -> tuple[Path | str, Path]:
    spec = tmp_path / "flow.yaml"
    spec.write_text(SPEC)
    tools = tools_file(tmp_path, "remind_tools", TOOLS)
    ok(
        "run",
        str(spec),
        "--input",
        '{"who": "ana"}',
        "--tools",
        str(tools),
        "--db",
        str(db),
        "--run-id",
        run_id,
        "--detach",
    )
    return db, tools


# SQLite only, for the suite's time: many command processes, each opening the
# database (up to 3x slower on PostgreSQL on two busy cores); others run on both.
def test_every_scheduled_command_end_to_end(tmp_path: Path) -> None:
    db, _ = started(tmp_path, tmp_path / "cli.db")
    d = str(db)
    rows = listed(db)
    assert list(rows) == ["r-1/nudge#1"]
    nudge = rows["r-1/nudge#1"]
    assert (nudge["status"], nudge["tool"], nudge["input"], nudge["attempts"]) == (
        "pending",
        "send_reminder",
        {"to": "ana"},
        0,
    )
    assert nudge["dueMs"] - nudge["createdMs"] == 7_200_000
    table = ok("scheduled", "list", "--db", d)
    assert "nudge#1" in table and "send_reminder" in table and "pending" in table

    # add: only schedulable tools, the id is counted by the run
    line = bad("scheduled", "add", "r-1", "cleanup", "--db", d)
    assert line == (
        "flowcore: tool 'cleanup' is not declared schedulable in flow 'reminders':"
        " the schedulable tools are 'pager', 'send_reminder'"
    )
    assert "--delay" in bad("scheduled", "add", "r-1", "pager", "--delay", "soon", "--db", d)
    assert "no run" in bad("scheduled", "add", "nope", "pager", "--db", d).lower()
    assert (
        ok(
            "scheduled",
            "add",
            "r-1",
            "pager",
            "--input",
            '{"who": "oncall"}',
            "--delay",
            "2h",
            "--db",
            d,
        )
        == "r-1/~scheduled-1\n"
    )
    added = json.loads(
        ok(
            "scheduled",
            "add",
            "r-1",
            "send_reminder",
            "--input",
            '{"to": "bo"}',
            "--delay",
            "90s",
            "--json",
            "--db",
            d,
        )
    )
    assert added == {"runId": "r-1", "id": "r-1/~scheduled-2", "delayMs": 90_000}
    rows = listed(db)
    assert rows["r-1/~scheduled-1"]["dueMs"] - rows["r-1/~scheduled-1"]["createdMs"] == 7_200_000
    assert rows["r-1/~scheduled-1"]["outside"] is True

    # cancel: true once; then there is nothing to cancel (nor for an unknown id):
    # false, exit 1, and nothing is written to the run's log
    assert ok("scheduled", "cancel", "r-1", "nudge#1", "--db", d) == "true\n"
    logged = len(ok("events", "r-1", "--json", "--db", d).splitlines())
    assert nothing("scheduled", "cancel", "r-1", "r-1/nudge#1", "--db", d) == "false\n"
    assert json.loads(nothing("scheduled", "cancel", "r-1", "nope#9", "--json", "--db", d)) == {
        "runId": "r-1",
        "id": "r-1/nope#9",
        "done": False,
    }
    assert len(ok("events", "r-1", "--json", "--db", d).splitlines()) == logged
    assert listed(db, "--status", "cancelled").keys() == {"r-1/nudge#1"}

    # run-now: both added calls now; a worker runs them (one fails, it never fails the run)
    assert ok("scheduled", "run-now", "r-1", "~scheduled-1", "--db", d) == "true\n"
    assert ok("scheduled", "run-now", "r-1", "~scheduled-2", "--db", d) == "true\n"
    assert nothing("scheduled", "run-now", "r-1", "~scheduled-2", "--db", d) == "false\n"
    worker = subprocess.Popen(
        [sys.executable, "-m", "flowcore_cli", "worker", "--db", d, "--until-idle"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(
            lambda: (
                {r["status"] for r in listed(db, "--run", "r-1").values()}
                == {"cancelled", "failed", "completed"}
            )
        )
        ok("signal", "r-1", "done", "--db", d)
        _, err = worker.communicate(timeout=60)
    finally:
        worker.kill()
    assert worker.returncode == 0, err
    rows = listed(db)
    failed = rows["r-1/~scheduled-1"]
    assert (failed["status"], failed["attempts"]) == ("failed", 1)
    assert failed["error"] == {"type": "pager-down", "message": "the pager is down"}
    assert failed["finishedMs"] >= failed["createdMs"]
    done = rows["r-1/~scheduled-2"]
    assert (done["status"], done["attempts"], done["error"]) == ("completed", 1, None)
    # finished calls stay listed with their outcome; filters
    assert listed(db, "--tool", "pager").keys() == {"r-1/~scheduled-1"}
    assert listed(db, "--status", "pending") == {}
    assert json.loads(ok("show", "r-1", "--json", "--db", d))["status"] == "completed"
    # the settled run: cancel and run-now answer false, add is refused
    assert nothing("scheduled", "cancel", "r-1", "~scheduled-1", "--db", d) == "false\n"
    assert "has settled" in bad("scheduled", "add", "r-1", "pager", "--db", d)
    # everything is in the log: replay reproduces it
    log = tmp_path / "r-1.ndjson"
    ok("export", "r-1", "--db", d, "--output", str(log))
    replayed = ok("replay", str(log), "--spec", str(tmp_path / "flow.yaml"))
    assert "scheduled-cancel-requested" in replayed and "re-derived identically" in replayed


# SQLite only, for the suite's time: many command processes, each opening the
# database (up to 3x slower on PostgreSQL on two busy cores); others run on both.
def test_the_list_spans_runs(tmp_path: Path) -> None:
    db, tools = started(tmp_path, tmp_path / "cli.db", "a")
    ok(
        "run",
        str(tmp_path / "flow.yaml"),
        "--input",
        '{"who": "bo"}',
        "--tools",
        str(tools),
        "--db",
        str(db),
        "--run-id",
        "b",
        "--detach",
    )
    assert listed(db).keys() == {"a/nudge#1", "b/nudge#1"}
    assert listed(db, "--run", "b").keys() == {"b/nudge#1"}
    assert "no run" in bad("scheduled", "list", "--run", "c", "--db", str(db)).lower()


async def _until(condition: Callable[[], Awaitable[bool]]) -> None:
    while not await condition():
        await asyncio.sleep(0.01)


async def _some(rows: Awaitable[list[Any]]) -> bool:
    return bool(await rows)


async def _none(rows: Awaitable[list[Any]]) -> bool:
    return not await rows


class Clock:
    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def test_retention_on_the_hosts_clock(tmp_path: Path, local_db: Path | str) -> None:
    spec = tmp_path / "flow.yaml"
    spec.write_text(SPEC)
    tools = tools_file(tmp_path, "remind_tools", TOOLS)
    clock = Clock(1_000_000)

    async def main() -> None:
        retention = ScheduledRetention(per_run=3)
        async with LocalHost(
            local_db, str(tools), clock=clock, scheduled_retention=retention
        ) as host:
            await host.start(spec, {"who": "ana"}, run_id="r")
            ids = [await host.add_scheduled("r", "pager", {"n": n}, DAY) for n in range(2)]
            ids += [await host.add_scheduled("r", "send_reminder", {"n": n}, DAY) for n in range(3)]
            assert await host.cancel_scheduled("r", "nudge#1")
            stop = asyncio.Event()
            worker = asyncio.create_task(host.work(stop))

            async def finished(sid: str) -> bool:
                rows = {row.id: row for row in await host.scheduled("r")}
                return rows[sid].status in ("failed", "completed")

            for sid in ids:
                clock.now += 1000  # each finishes at its own time
                assert await host.run_scheduled_now("r", sid)
                await asyncio.wait_for(_until(functools.partial(finished, sid)), 60)
            stop.set()
            await worker
            rows = {row.id: row for row in await host.scheduled()}
            assert len(rows) == 6
            # per run, the newest three finished stay listed
            assert await host.trim_scheduled() == 3
            kept = {row.id for row in await host.scheduled()}
            assert kept == {"r/~scheduled-3", "r/~scheduled-4", "r/~scheduled-5"}

            # a day later, failed ones go; thirty days later, the rest
            host.scheduled_retention = ScheduledRetention()
            added = await host.add_scheduled("r", "pager", None, DAY)
            clock.now += 1
            assert await host.run_scheduled_now("r", added)
            worker = asyncio.create_task(host.work(stop := asyncio.Event()))
            await asyncio.wait_for(_until(lambda: _some(host.scheduled("r", status="failed"))), 60)
            stop.set()
            await worker
            clock.now += DAY - 1
            assert await host.trim_scheduled() == 0
            clock.now += 10
            assert await host.trim_scheduled() == 1  # the failed one
            clock.now += 30 * DAY
            assert await host.trim_scheduled() == 3
            assert await host.scheduled() == []
            # the run's state keeps them all: the table is only the listing
            state = host.store.state("r")
            assert len(state.schedules) == 7

    asyncio.run(main())


def test_the_worker_applies_retention(tmp_path: Path, local_db: Path | str) -> None:
    spec = tmp_path / "flow.yaml"
    spec.write_text(SPEC)
    tools = tools_file(tmp_path, "remind_tools", TOOLS)
    clock = Clock(5_000)

    async def main() -> None:
        async with LocalHost(local_db, str(tools), clock=clock) as host:
            await host.start(spec, {"who": "ana"}, run_id="r")
            assert await host.cancel_scheduled("r", "nudge#1")
            assert [row.status for row in await host.scheduled()] == ["cancelled"]
            clock.now += 30 * DAY + 1
            stop = asyncio.Event()
            worker = asyncio.create_task(host.work(stop))
            await asyncio.wait_for(_until(lambda: _none(host.scheduled())), 60)
            stop.set()
            await worker

    asyncio.run(main())


def test_bad_ids_and_values_are_refused_cleanly(tmp_path: Path) -> None:
    db, _ = started(tmp_path, tmp_path / "s.db")
    d = str(db)
    assert "--input" in bad("scheduled", "add", "r-1", "pager", "--input", "{nope", "--db", d)
    assert "--keep-failed" in bad("worker", "--db", d, "--keep-failed", "a while")
    assert "'garbage'" in bad("scheduled", "list", "--status", "garbage", "--db", d)

    async def main() -> None:
        async with LocalHost(db) as host:
            with pytest.raises(HostError, match="delay must be"):
                await host.add_scheduled("r-1", "pager", None, -1)

    asyncio.run(main())


# SQLite only, for the suite's time: many command processes, each opening the
# database (up to 3x slower on PostgreSQL on two busy cores); others run on both.
def test_events_follow_shows_every_change(tmp_path: Path) -> None:
    db, _ = started(tmp_path, tmp_path / "cli.db")
    d = str(db)
    follower = subprocess.Popen(
        [sys.executable, "-m", "flowcore_cli", "events", "r-1", "--follow", "--db", d],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # Idle only once the run has settled: its nudge (due in 2 h) is within the horizon.
    idle = ["--until-idle", "--idle-horizon", "3h"]
    worker = subprocess.Popen(
        [sys.executable, "-m", "flowcore_cli", "worker", "--db", d, *idle],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        ok("scheduled", "add", "r-1", "pager", "--delay", "1h", "--db", d)
        ok("scheduled", "run-now", "r-1", "nudge#1", "--db", d)
        wait_for(lambda: listed(db)["r-1/nudge#1"]["status"] == "completed")
        ok("scheduled", "cancel", "r-1", "~scheduled-1", "--db", d)
        ok("signal", "r-1", "done", "--db", d)
        out, err = follower.communicate(timeout=60)
        worker.communicate(timeout=60)
    finally:
        follower.kill()
        worker.kill()
    assert follower.returncode == 0, err
    changes = [
        line.split("scheduled.changed", 1)[1].strip()
        for line in out.splitlines()
        if "scheduled.changed" in line
    ]
    assert changes[0].startswith("◷ scheduled r-1/nudge#1 send_reminder pending due ")
    assert changes[1:] == [
        changes[1],
        "◷ scheduled r-1/nudge#1 send_reminder running",
        "◷ scheduled r-1/nudge#1 send_reminder completed",
        "◷ scheduled r-1/~scheduled-1 pager cancelled",
    ]
    assert changes[1].startswith("◷ scheduled r-1/~scheduled-1 pager pending due ")
    assert "run-now of scheduled r-1/nudge#1 requested" in out
    assert "■ settled completed" in out


# --- crashes: a real worker SIGKILLed by the scheduled call itself ----------------------------


@pytest.mark.parametrize(
    ("exec_class", "starts", "why"),
    [("idempotent", 3, "was issued 3 times without an answer"), ("uncertain", 1, "not safe")],
)
def test_an_interrupted_scheduled_call_is_tried_up_to_three_times(
    tmp_path: Path, local_db: Path | str, exec_class: str, starts: int, why: str
) -> None:
    env = dict(os.environ)
    env["FLOWCORE_TEST_JOURNAL"] = str(tmp_path / "journal.txt")
    spec = tmp_path / "deadly.yaml"
    spec.write_text(
        f"flow: deadly\ntools: {{crash: {{class: {exec_class}}}}}\n"
        "steps:\n  - {id: later, schedule: {tool: crash, delay_ms: 0, outlive_run: true}}\n"
    )
    db = str(local_db)
    ok(
        "run",
        str(spec),
        "--tools",
        str(CRASH_TOOLS),
        "--db",
        db,
        "--run-id",
        "k",
        "--detach",
        env=env,
    )
    kills = 0
    for _ in range(10):
        proc = fc("worker", "--db", db, "--until-idle", env=env)
        if proc.returncode == 0:
            break
        assert proc.returncode == -9, proc.stderr  # the call SIGKILLed its worker
        kills += 1
    assert kills == starts
    lines = (tmp_path / "journal.txt").read_text().splitlines()
    assert [line.split()[1] for line in lines] == ["k/later#1/call"] * starts
    call = listed(db)["k/later#1"]
    assert (call["status"], call["attempts"]) == ("uncertain", starts)
    assert call["error"]["type"] == "outcome-unknown" and why in call["error"]["message"]
    info = json.loads(ok("show", "k", "--json", "--db", db, env=env))
    assert info["status"] == "completed"  # the call's fate never fails the run
    assert info["deadLetters"] == []
    events = ok("events", "k", "--db", db, env=env)
    changes = [line for line in events.splitlines() if "scheduled.changed" in line]
    # pending, then running once per issue, then uncertain: the attempts are in the log
    assert sum("crash running" in line for line in changes) == starts
    assert "crash uncertain" in changes[-1]
    assert ("(attempt 3)" in changes[-1]) == (starts == 3)


def test_a_scheduled_call_with_bad_arguments_fails_alone_and_the_run_goes_on(
    tmp_path: Path,
    local_db: Path | str,
) -> None:
    """The seed's rule: arguments that fail the tool's input schema fail that
    call's run and nothing else."""
    from flowcore_handlers import Registry

    spec = """
flow: bad-args
tools:
  send_reminder:
    class: idempotent
    input_schema: {type: object, required: [to], properties: {to: {type: string}}}
  cleanup: {class: readonly}
steps:
  - id: nudge
    schedule: {tool: send_reminder, input: {to: "${input.who}"}, delay_ms: 0}
  - id: tidy
    call_tool: {tool: cleanup}
output: "${ {nudge: steps.nudge.output, tidy: steps.tidy.output} }"
"""
    sent: list[Any] = []
    registry = Registry(
        tools={
            "send_reminder": lambda call: sent.append(call.input),
            "cleanup": lambda call: "clean",
        }
    )

    async def main() -> Any:
        async with LocalHost(local_db, registry=registry) as host:
            rid = await host.start(spec, {"who": 7}, "bad-1")
            await asyncio.wait_for(host.work(until_settled=rid), 30)
            return await host.run(rid), await host.scheduled(rid), await host.records(rid)

    row, (call,), records = asyncio.run(main())
    assert (row.status, row.output) == ("completed", {"nudge": "bad-1/nudge#1", "tidy": "clean"})
    assert (call.id, call.status, call.attempts) == ("bad-1/nudge#1", "failed", 0)
    assert call.error is not None and call.error.type == "invalid-input"
    assert call.error.message == "input of tool 'send_reminder' at $.to: expected a string, got 7"
    assert sent == []  # the tool was never called
    changed = [r.data for r in records if r.type == "scheduled.changed"]
    assert [(c["id"], c["status"]) for c in changed] == [("bad-1/nudge#1", "failed")]
