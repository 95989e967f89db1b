"""Starting over a taken run id, and cancels that would change nothing, on the
local host: the Python API, the command line (real subprocesses) and what the
database holds afterwards (a real SQLite file)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from flowcore_handlers import Registry
from flowcore_local import HostError, LocalHost, NothingToCancel

WAITS = """
flow: waits
tools: {remind: {class: idempotent, schedulable: true}}
steps:
  - {id: go, await_signal: {signal: go}}
output: "${input}"
"""

REGISTRY = Registry(tools={"remind": lambda call: None})


def in_host(db: Path | str, body: Any) -> Any:
    async def main() -> Any:
        async with LocalHost(db, registry=REGISTRY) as host:
            return await body(host)

    return asyncio.run(main())


def spec(tmp_path: Path) -> Path:
    path = tmp_path / "waits.yaml"
    path.write_text(WAITS)
    return path


def test_on_conflict_refuses_by_default_or_uses_the_existing_run(
    tmp_path: Path, local_db: Path | str
) -> None:
    path = spec(tmp_path)

    async def body(host: LocalHost) -> None:
        assert await host.start(path, 1, "r") == "r"
        assert await host.start(path, 1, "r") == "r"  # the same options: that run
        with pytest.raises(HostError, match="already exists with a different input"):
            await host.start(path, 2, "r")
        logged = await host.records("r")
        assert await host.start(path, 2, "r", on_conflict="use-existing") == "r"
        other = tmp_path / "other.yaml"
        other.write_text(WAITS.replace("flow: waits", "flow: other"))
        assert await host.start(other, 3, "r", on_conflict="use-existing") == "r"
        row = await host.run("r")
        assert (row.input, row.flow_id, row.status) == (1, "waits", "running")
        assert await host.records("r") == logged  # nothing written
        with pytest.raises(HostError, match="on_conflict must be one of refuse, use-existing"):
            await host.start(path, 1, "s", on_conflict="ignore")
        assert [r.run_id for r in await host.runs()] == ["r"]

    in_host(local_db, body)


def test_a_cancel_that_changes_nothing_writes_nothing(tmp_path: Path, local_db: Path | str) -> None:
    path = spec(tmp_path)

    async def body(host: LocalHost) -> None:
        await host.start(path, 1, "r")
        sid = await host.add_scheduled("r", "remind", None, 60_000)
        logged = await host.records("r")
        # Unknown scheduled calls: no, and nothing logged.
        assert await host.cancel_scheduled("r", "nope#9") is False
        assert await host.run_scheduled_now("r", "~scheduled-7") is False
        assert await host.records("r") == logged
        assert await host.cancel_scheduled("r", sid) is True
        logged = await host.records("r")
        assert await host.cancel_scheduled("r", sid) is False  # finished: no
        assert await host.run_scheduled_now("r", sid) is False
        assert await host.records("r") == logged
        await host.cancel("r", "done with it")
        await host.work(until_settled="r")
        logged = await host.records("r")
        with pytest.raises(NothingToCancel, match=r"'r' has settled \(cancelled\): nothing"):
            await host.cancel("r")
        assert await host.cancel_scheduled("r", sid) is False
        assert await host.records("r") == logged

    in_host(local_db, body)


def fc(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flowcore_cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
        check=False,
    )


def test_the_command_line_says_the_same(tmp_path: Path) -> None:
    path = spec(tmp_path)
    db = str(tmp_path / "cli.db")
    start = ["run", str(path), "--db", db, "--detach", "--run-id"]
    assert fc(*start, "r", "--input", "1").stdout == "r\n"
    refused = fc(*start, "r", "--input", "2")
    assert refused.returncode == 2
    assert "already exists with a different input" in refused.stderr
    used = fc(*start, "r", "--input", "2", "--on-conflict", "use-existing")
    assert (used.returncode, used.stdout) == (0, "r\n"), used.stderr
    assert "run 'r' exists (running): using it as it is, nothing written" in used.stderr
    child = fc(*start, "X2/child#1", "--input", "1")
    assert child.returncode == 2 and "Traceback" not in child.stderr
    assert "'X2/child#1'" in child.stderr and "reserved" in child.stderr
    assert fc("cancel", "r", "--db", db).returncode == 0
    events = fc("events", "r", "--json", "--db", db).stdout.splitlines()
    again = fc("cancel", "r", "--db", db)
    assert again.returncode == 1, again.stderr
    assert "nothing to cancel" in again.stderr and "Traceback" not in again.stderr
    assert fc("events", "r", "--json", "--db", db).stdout.splitlines() == events
    shown = json.loads(fc("show", "r", "--json", "--db", db).stdout)
    assert shown["status"] == "cancelled"
