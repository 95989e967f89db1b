"""The catalogue's commands on Temporal: the same `flowcore show` (and the others)
as on the local host, with Temporal chosen by the environment; `flowcore temporal
show` as its alias. Each command runs in its own process; the worker runs here."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest

pytest.importorskip("temporalio", reason="the Temporal host tests need temporalio (.[dev])")

from flowcore_ops import BY_NAME

from .support import eventually, running_host, unique

SPEC = """\
flow: catalogued
steps:
  - {id: q, ask_human: {question: 'ship it?', options: ['yes', 'no']}}
  - {id: w, await_signal: {signal: go}}
output: "${steps.w.output}"
"""


def flowcore(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flowcore_cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def ok(env: dict[str, str], *args: str) -> str:
    proc = flowcore(env, *args)
    assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
    return proc.stdout


def decoded(name: str, text: str) -> Any:
    return msgspec.json.decode(text.strip().splitlines()[-1], type=BY_NAME[name].output)


def test_the_same_commands_act_on_temporal_chosen_by_the_environment(
    temporal_address: str, tmp_path: Path
) -> None:
    spec = tmp_path / "catalogued.yaml"
    spec.write_text(SPEC)
    run_id = unique("cat")

    async def main() -> None:
        async with running_host(temporal_address) as host:
            env = dict(
                os.environ,
                FLOWCORE_TEMPORAL_ADDRESS=temporal_address,
                FLOWCORE_TEMPORAL_TASK_QUEUE=host.task_queue,
            )
            env.pop("FLOWCORE_DB", None)

            def cli(*args: str) -> str:
                return ok(env, *args)

            async def run(*args: str) -> str:
                return await asyncio.to_thread(cli, *args)

            started = decoded("start", await run("start", str(spec), "--run-id", run_id, "--json"))
            assert (started.run_id, started.status) == (run_id, "running")

            async def asked() -> bool:
                found = decoded("questions", await run("questions", run_id, "--json"))
                return [q.key for q in found.questions] == [f"{run_id}/q#1"]

            await eventually(asked, "the question to be open", timeout=30)
            # `flowcore show` with Temporal chosen by the environment, and its alias.
            shown = decoded("show", await run("show", run_id, "--json"))
            assert shown.run.run_id == run_id and shown.run.status == "running"
            text = await run("temporal", "show", run_id, "--no-history")
            assert f"question: {run_id}/q#1: ship it? ['yes', 'no']" in text
            assert "question:" in await run(
                "show", run_id, "--temporal", "--address", temporal_address
            )
            decoded("answer", await run("answer", run_id, "q#1", "yes", "--json"))
            decoded("signal", await run("signal", run_id, "go", '"now"', "--json"))
            result = await asyncio.wait_for(host.result(run_id), 30)
            assert result["output"] == "now"
            lines = (await run("events", run_id, "--json")).splitlines()
            assert json.loads(lines[0])["type"] == "run.started"
            # A --db given names the local host, even with Temporal in the environment.
            db = str(tmp_path / "none.db")
            proc = await asyncio.to_thread(flowcore, env, "show", run_id, "--db", db)
            assert proc.returncode == 2 and proc.stderr.startswith("flowcore: no database at")
            # An operation the host does not do: its refusal, one line, exit 2.
            proc = await asyncio.to_thread(flowcore, env, "prune", "--settled-before", "30d")
            assert proc.returncode == 2, proc.stderr
            assert "retention period" in proc.stderr and len(proc.stderr.splitlines()) == 1

    asyncio.run(main())
