"""``flowcore flows``: the catalogue's ``flows`` on the command line — the flows of
``--flows``, each with the ``--tools`` modules (repeatable) that run it, or what
is missing, as ``GET /api/flows`` says it for a server."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from flowcore_cli.main import run
from flowcore_local import LocalHost

SHIP = """
flow: ship
tools: {ship: {class: idempotent}}
steps:
  - {id: ship, call_tool: {tool: ship, input: 1}}
"""
BEAM = """
flow: beam
tools: {beam: {class: readonly}}
steps:
  - {id: beam, call_tool: {tool: beam, input: 1}}
"""


def test_flows_says_which_module_runs_each_flow(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FLOWCORE_TEMPORAL_ADDRESS", raising=False)
    monkeypatch.delenv("FLOWCORE_DB", raising=False)
    folder = tmp_path / "flows"
    folder.mkdir()
    (folder / "ship.yaml").write_text(SHIP)
    (folder / "beam.yaml").write_text(BEAM)
    (folder / "notes.yaml").write_text("not: a flow\n")
    tools = tmp_path / "ship_tools.py"
    tools.write_text("TOOLS = {'ship': lambda call: 'shipped'}\n")

    async def made() -> None:
        async with LocalHost(tmp_path / "f.db"):
            pass

    asyncio.run(made())
    db = str(tmp_path / "f.db")
    capfd.readouterr()
    argv = ["flows", "--db", db, "--flows", str(folder), "--tools", str(tools)]
    assert run([*argv, "--json"]) == 0
    found = {f["flowId"]: f for f in json.loads(capfd.readouterr().out)["flows"]}
    assert sorted(found) == ["beam", "ship"]
    assert (found["ship"]["runnable"], found["ship"]["modules"]) == (True, [str(tools)])
    assert (found["beam"]["runnable"], found["beam"]["missing"]) == (False, ["tool 'beam'"])
    assert run(argv) == 0
    text = capfd.readouterr().out.replace("\n", "")  # (however the terminal wraps)
    assert "beam v1  not runnable: no handler for tool 'beam'" in text
    assert f"ship v1  runs with {tools}" in text
    assert run(["flows", "--db", db, "--flows", str(folder), "--tools", "no_such_module_x"]) == 2
    assert "no_such_module_x" in capfd.readouterr().err
