"""MCP tools on the Temporal host: the same tools module, a real dev server and worker."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

pytest.importorskip("temporalio", reason="the Temporal host tests need temporalio (.[dev])")

from tests.temporal.support import running_host, unique

from .support import EXPECTED, FLOW, calls, crash_flow, tools_module


def test_mcp_tools_on_temporal(temporal_address: str, tmp_path: Path) -> None:
    log = tmp_path / "calls.jsonl"
    tools = tools_module(tmp_path, log)

    async def main() -> None:
        async with running_host(temporal_address, tools) as host:
            demo = await host.start(FLOW, {"name": "ada"}, unique("mcp"))
            result = await asyncio.wait_for(host.result(demo), 120)
            assert (result["status"], result["output"]) == ("completed", EXPECTED)
            assert [(c["tool"], c["key"]) for c in calls(log)] == [
                ("lookup", f"{demo}/look#1"),
                ("note", f"{demo}/jot#1"),
                ("refuse", f"{demo}/nope#1"),
                ("note", f"{demo}/caught#1"),
            ]

            again = await host.start(
                crash_flow("idempotent"), {"marker": str(tmp_path / "one")}, unique("crash")
            )
            result = await asyncio.wait_for(host.result(again), 120)
            assert result["status"] == "completed", result
            assert result["output"]["survived"] is True
            keys = [c["key"] for c in calls(log) if c["tool"] == "crash_once"]
            assert keys == [f"{again}/boom#1", f"{again}/boom#1"]

            once = await host.start(
                crash_flow("uncertain"), {"marker": str(tmp_path / "two")}, unique("crash")
            )
            result = await asyncio.wait_for(host.result(once), 120)
            assert result["status"] == "failed"
            assert result["error"]["type"] == "outcome-unknown"
            keys = [c["key"] for c in calls(log) if c["key"].startswith(once)]
            assert keys == [f"{once}/boom#1"]

    asyncio.run(main())
