"""``flowcore worker --until-idle`` and ``LocalHost.idle``: idle is "no run can go on
now without an answer, a signal or a timer due later than the horizon" (a real
SQLite file; the command in a real subprocess)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from flowcore_handlers import Registry
from flowcore_local import LocalHost

ASKS = """
flow: asks
steps:
  - id: decide
    ask_human: {question: "Ship?", options: [ship, hold], timeout_ms: 600000}
output: "${steps.decide.answer}"
"""

WAITS = """
flow: waits
steps:
  - {id: go, await_signal: {signal: go}}
"""

NAPS = """
flow: naps
tools: {echo: {class: readonly}}
steps:
  - {id: nap, sleep: {for_ms: 300}}
  - {id: e, call_tool: {tool: echo, input: done}}
output: "${steps.e.output}"
"""

TOOLS = """
def echo(call):
    return call.input


TOOLS = {"echo": echo}
"""


def specs(tmp_path: Path) -> dict[str, Path]:
    out = {}
    for name, text in (("asks", ASKS), ("waits", WAITS), ("naps", NAPS)):
        out[name] = tmp_path / f"{name}.yaml"
        out[name].write_text(text)
    return out


def test_idle_waits_for_work_and_near_timers_only(tmp_path: Path, local_db: Path | str) -> None:
    files = specs(tmp_path)
    registry = Registry(tools={"echo": lambda call: call.input})

    async def main() -> dict[str, Any]:
        async with LocalHost(local_db, registry=registry) as host:
            got: dict[str, Any] = {"empty": await host.idle(60_000)}
            await host.start(files["asks"], None, "asks")
            await host.start(files["waits"], None, "waits")
            got["people"] = await host.idle(60_000)  # a question and a signal: idle
            await host.start(files["naps"], None, "naps")
            got["near"] = await host.idle(60_000)  # its sleep is due within the horizon
            got["far"] = await host.idle(100)  # ... but not within 100 ms
            await host.work(until_settled="naps")
            got["after"] = await host.idle(60_000)
            got["naps"] = (await host.run("naps")).status
            return got

    got = asyncio.run(main())
    assert got == {
        "empty": True,
        "people": True,
        "near": False,
        "far": True,
        "after": True,
        "naps": "completed",
    }


def fc(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flowcore_cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ),
        check=False,
    )


def test_the_worker_stops_when_only_people_and_signals_are_awaited(
    tmp_path: Path, local_db: Path | str
) -> None:
    files = specs(tmp_path)
    tools = tmp_path / "idle_tools.py"
    tools.write_text(TOOLS)
    db = str(local_db)
    for name in ("asks", "waits", "naps"):
        start = ["run", str(files[name]), "--run-id", name, "--tools", str(tools)]
        assert fc(*start, "--db", db, "--detach").returncode == 0
    worker = fc("worker", "--until-idle", "--db", db, timeout=30)
    assert worker.returncode == 0, worker.stderr
    assert "worker stopped: 1 run(s) settled (1 completed); 2 still running" in worker.stdout
    runs = {r["runId"]: r["status"] for r in json.loads(fc("runs", "--json", "--db", db).stdout)}
    assert runs == {"asks": "running", "waits": "running", "naps": "completed"}
    assert "--idle-horizon" in fc("worker", "--help").stdout
