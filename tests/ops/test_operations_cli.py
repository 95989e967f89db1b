"""Every catalogue operation with command words on the command line, against the
local host (a real SQLite file, the commands run in process): each exits 0 and
prints its output as JSON with ``--json`` (``run-counts`` is ``runs --counts``);
those without words (``whoami``, ``graph``) are the HTTP API's and the console's
only, as the catalogue says."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from flowcore_cli.main import run
from flowcore_ops import BY_NAME

from .local_world import local_world
from .parity import ORDER, SCENARIOS
from .surfaces import command_line

NO_COMMAND = {"whoami", "graph"}


def test_every_operation_on_the_command_line_on_the_local_host(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FLOWCORE_TEMPORAL_ADDRESS", raising=False)
    monkeypatch.delenv("FLOWCORE_DB", raising=False)

    async def world() -> dict[str, Any]:
        async with local_world(tmp_path) as (_host, facts):
            return facts  # the database stays, closed, for the commands

    facts = asyncio.run(world())
    assert {n for n in ORDER if BY_NAME[n].command is None} == NO_COMMAND | {
        "follow",
        "progress-follow",
        "run-counts",
    }
    db = str(tmp_path / "parity.db")
    printed: dict[str, str] = {}
    for name in ORDER:
        if name in NO_COMMAND:
            continue
        scenario = SCENARIOS[name]
        argv = [*command_line(name, scenario.input(facts)), "--db", db]
        capfd.readouterr()
        code = run(argv)
        out, err = capfd.readouterr()
        assert code == 0, (name, argv, err)
        printed[name] = out
        if name in ("progress", "progress-follow"):
            lines = [json.loads(line) for line in out.splitlines() if line.strip()]
            assert [x["data"]["data"] for x in lines] == ["calling the service"], (name, out)
            continue
        if name in ("events", "follow", "export"):
            lines = [json.loads(line) for line in out.splitlines() if line.strip()]
            assert lines and lines[0]["type"] == "run.started", (name, out[:200])
            continue
        document = json.loads(out)
        if name == "schedule.add":
            facts["schedule"] = "nightly"
        assert document is not None or BY_NAME[name].output is None, name
    assert json.loads(printed["show"])["run"]["runId"] == "p-main"
    assert json.loads(printed["start"])["runId"] == "p-new"
