"""pydantic-ai agents as a declared team on the real local host (asyncio + SQLite).

The tools module is a file in the test's directory, loaded by the host from
its path; the agents run on ``FunctionModel``s, so nothing leaves the machine.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from flowcore_local import LocalHost

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


async def _run(tmp_path: Path, flow: str, input: Any) -> tuple[str, Any, dict[str, Any], list[Any]]:
    tools, _ = write_tools(tmp_path)
    spec = tmp_path / "flow.yaml"
    spec.write_text(flow, encoding="utf-8")
    async with LocalHost(tmp_path / "runs.db", str(tools)) as host:
        rid = await host.start(spec, input)
        await host.work(until_settled=rid)
        row = await host.run(rid)
        shown = await host.show(rid)
        records = await host.records(rid)
    return rid, row, shown, records


def test_a_team_of_two_agents_runs_and_its_usage_lands_in_the_ledger(tmp_path: Path) -> None:
    rid, row, shown, records = asyncio.run(_run(tmp_path, TEAM_FLOW, {"service": "api"}))
    assert row.status == "completed", row.error
    planner, critic = row.output["planner"], row.output["critic"]
    assert planner == {"plan": "canary then fleet", "stages": 3}
    # The critic saw the planner's output: in its prompt (``members``) and its instructions.
    so_far = json.dumps({"planner": planner}, separators=(",", ":"))
    assert critic == (
        f"prompt=Plan the rollout of api. So far: {so_far}"
        " | instructions=You criticise plans.\n\nThe plan: canary then fleet"
    )
    # Three steps: two member effects and the planner's second model request; the cost
    # of both members' tokens at the tools module's prices.
    assert shown["budget"] == {
        "stepsUsed": TEAM_STEPS,
        "stepsLeft": 10 - TEAM_STEPS,
        "costUsed": TEAM_COST,
        "costLeft": 100 - TEAM_COST,
        "tokensUsed": TEAM_TOKENS,
        "tokensLeft": None,
        "inputTokensUsed": TEAM_INPUT_TOKENS,
        "outputTokensUsed": TEAM_OUTPUT_TOKENS,
        "cacheReadTokensUsed": 0,
        "toolCallsUsed": TEAM_TOOL_CALLS,
        "toolCallsLeft": None,
        "turnsUsed": TEAM_TURNS,
        "turnsLeft": None,
    }
    reported = [
        (r.data["idempotencyKey"], r.data.get("usage"))
        for r in records
        if r.type == "event.reported"
    ]
    assert reported == [
        (
            f"{rid}/team/planner#1",
            {
                "steps": 1,
                "costMinorUnits": 4,
                "tokens": 2400,
                "toolCalls": 1,
                "turns": 2,
                "inputTokens": 2000,
                "outputTokens": 400,
            },
        ),
        (  # 0s omitted
            f"{rid}/team/critic#1",
            {
                "costMinorUnits": 1,
                "tokens": 600,
                "turns": 1,
                "inputTokens": 500,
                "outputTokens": 100,
            },
        ),
    ]
    # The planner's tool was given the member's key, run, step and member.
    [tool] = [e for e in journal(tmp_path / "journal.ndjson") if e["kind"] == "tool"]
    assert tool == {
        "kind": "tool",
        "key": f"{rid}/team/planner#1",
        "run": rid,
        "step": "team",
        "member": "planner",
    }


def test_the_step_budget_cuts_a_looping_agent_off(tmp_path: Path) -> None:
    _, row, shown, records = asyncio.run(_run(tmp_path, LOOP_FLOW, None))
    assert row.status == "failed"
    assert row.error["type"] == "usage-limit-exceeded"
    assert "request_limit of 4" in row.error["message"]
    # 4 steps: the effect's own and 3 more requests; the model was asked exactly 4 times.
    requests = [e for e in journal(tmp_path / "journal.ndjson") if e["kind"] == "loop-request"]
    assert len(requests) == 4
    emitted = [r.data for r in records if r.type == "effect.emitted"]
    [settled] = [e for e in emitted if e["kind"] == "settled"]
    assert [(r["target"], r["status"]) for r in settled["report"]] == [("looper", "failed")]
    # The cut-off run still reports what it spent (on effect-failed): all 4 requests are in
    # the ledger, which they fill exactly.
    assert shown["budget"]["stepsUsed"] == 4
    assert shown["budget"]["turnsUsed"] == 4
