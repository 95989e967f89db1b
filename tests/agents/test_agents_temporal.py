"""The same pydantic-ai team on the Temporal host, against a real dev server.

The worker loads the tools module from its path, as the local host does;
the agents run in the worker's activity, outside the workflow sandbox.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("temporalio", reason="the Temporal host tests need temporalio (.[dev])")

from tests.temporal.support import running_host, unique

from .support import (
    LOOP_FLOW,
    TEAM_COST,
    TEAM_FLOW,
    TEAM_INPUT_TOKENS,
    TEAM_OUTPUT_TOKENS,
    TEAM_STEPS,
    TEAM_TOKENS,
    TEAM_TOOL_CALLS,
    TEAM_TURNS,
    journal,
    write_tools,
)


async def _run(address: str, tools: Path, spec: Path, input: Any) -> tuple[str, dict[str, Any]]:
    async with running_host(address, tools) as host:
        rid = await host.start(spec, input, unique("agents"))
        return rid, await host.result(rid)


def test_a_team_of_two_agents_on_temporal(temporal_address: str, tmp_path: Path) -> None:
    tools, journal_path = write_tools(tmp_path)
    spec = tmp_path / "team.yaml"
    spec.write_text(TEAM_FLOW, encoding="utf-8")
    rid, result = asyncio.run(_run(temporal_address, tools, spec, {"service": "api"}))
    assert result["status"] == "completed", result
    planner, critic = result["output"]["planner"], result["output"]["critic"]
    assert planner == {"plan": "canary then fleet", "stages": 3}
    so_far = json.dumps({"planner": planner}, separators=(",", ":"))
    assert critic == (
        f"prompt=Plan the rollout of api. So far: {so_far}"
        " | instructions=You criticise plans.\n\nThe plan: canary then fleet"
    )
    # The same ledger as on the local host: the agents' requests and tokens included.
    assert result["usage"] == {
        "steps": TEAM_STEPS,
        "costMinorUnits": TEAM_COST,
        "tokens": TEAM_TOKENS,
        "toolCalls": TEAM_TOOL_CALLS,
        "turns": TEAM_TURNS,
        "inputTokens": TEAM_INPUT_TOKENS,
        "outputTokens": TEAM_OUTPUT_TOKENS,
    }
    [tool] = [e for e in journal(journal_path) if e["kind"] == "tool"]
    assert (tool["key"], tool["run"], tool["member"]) == (f"{rid}/team/planner#1", rid, "planner")


def test_a_looping_agent_is_cut_off_on_temporal(temporal_address: str, tmp_path: Path) -> None:
    tools, journal_path = write_tools(tmp_path)
    spec = tmp_path / "loop.yaml"
    spec.write_text(LOOP_FLOW, encoding="utf-8")
    _, result = asyncio.run(_run(temporal_address, tools, spec, None))
    assert result["status"] == "failed"
    assert result["error"]["type"] == "usage-limit-exceeded"
    assert len([e for e in journal(journal_path) if e["kind"] == "loop-request"]) == 4
