"""The worked example of specs/agents.md: ``flowcore run`` of a pydantic-ai team, offline.

Run in a subprocess as a user types it, with no provider API key in the
environment: the example's agents answer from ``FunctionModel``s.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "specs" / "examples"


def flowcore_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    return subprocess.run(
        [sys.executable, "-m", "flowcore_cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )


def test_the_agent_team_example_runs_to_completion(tmp_path: Path) -> None:
    db = str(tmp_path / "agents.db")
    tools = str(EXAMPLES / "agents_tools.py")
    run = flowcore_cli(
        "run", str(EXAMPLES / "agent_team.yaml"), "--tools", tools, "--db", db, "--run-id", "team"
    )
    assert run.returncode == 0, (run.stdout, run.stderr)
    assert "settled completed" in run.stdout
    shown = flowcore_cli("show", "team", "--db", db, "--json")
    assert shown.returncode == 0, shown.stderr
    info = json.loads(shown.stdout)
    assert info["status"] == "completed"
    # What each member's agent spent, from the run's log (the replay trajectory).
    assert set(info["usage"]["byMember"]) == {"security", "editor"}
    assert info["usage"]["byMember"]["security"]["turns"] == 2
    text = flowcore_cli("show", "team", "--db", db)
    assert "usage by member: security 1 steps" in text.stdout
    assert info["output"]["security"] == "approve"
    assert info["output"]["editor"] == "approve with edits"
    # The editor's instructions carried the security review (the team's ``members``).
    assert (
        "Security said: approve (advisory ADV-1: cookie attributes changed filed)"
        in (info["output"]["notes"][1])
    )
    # Two member effects, one more model request by the security reviewer; 2 + 1 cents
    # of tokens at the example's prices.
    assert info["budget"] == {
        "stepsUsed": 3,
        "stepsLeft": 9,
        "costUsed": 3,
        "costLeft": 47,
        "tokensUsed": info["budget"]["tokensUsed"],
        "tokensLeft": None,
        # The scripted models report no cache reads: 2 * 1,200 + 900 in, 2 * 150 + 120 out.
        "inputTokensUsed": 3300,
        "outputTokensUsed": 420,
        "cacheReadTokensUsed": 0,
        "toolCallsUsed": 1,
        "toolCallsLeft": None,
        "turnsUsed": 3,
        "turnsLeft": None,
    }
    assert info["budget"]["tokensUsed"] > 0


def test_neither_the_core_nor_a_host_imports_the_agents_extra() -> None:
    # The agents extra is optional: only a tools module that uses it imports it.
    code = (
        "import sys, flowcore, flowcore_handlers, flowcore_local, flowcore_cli.main\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in"
        " ('pydantic_ai', 'flowcore_agents')))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_the_research_example_spends_its_reserve_on_a_summary(tmp_path: Path) -> None:
    """specs/examples/research.yaml: pydantic-ai agents, an MCP tool, a token budget
    with a reserve. The comparison is cut off at the tokens left; what it spent
    reaches the ledger, the limit is reached, and the writer's summary runs within
    the reserve."""
    db = str(tmp_path / "research.db")
    tools = str(EXAMPLES / "research_tools.py")
    spec = str(EXAMPLES / "research.yaml")
    run = flowcore_cli("run", spec, "--tools", tools, "--db", db, "--run-id", "r")
    assert run.returncode == 1, (run.stdout, run.stderr)  # the run did not complete
    assert "settled budget-exhausted" in run.stdout
    shown = flowcore_cli("show", "r", "--db", db, "--json")
    info = json.loads(shown.stdout)
    assert info["status"] == "budget-exhausted"
    assert info["output"]["complete"] is False
    assert info["output"]["answer"].startswith("plan: reorder widgets now (Out of tokens.")
    # 2,000 + 2,000 for the analyses, 1,000 for the cut-off comparison, 800 for the summary.
    assert info["budget"]["tokensUsed"] == 5800 and info["budget"]["tokensLeft"] == 200
    assert info["budget"]["toolCallsUsed"] == 2  # the MCP server's stock tool, twice
