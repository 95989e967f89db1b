"""One rule for a run's usage, and the same figures on every surface.

The ledger charges every usage reported, a failed effect's included (an agent
cut off by its limits spent it); ``flowcore.usage_figures`` computes a run's
figures from its state, and ``flowcore replay`` (text and ``--json``),
``flowcore show`` (text and ``--json``), ``LocalHost.show`` and the HTTP API
the web view reads all report them: steps, cost, tokens (with their split),
tool calls and turns.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import msgspec

import flowcore
from flowcore import CallTool, RunAgent, Usage
from flowcore.testing import Fail, Ok, simulate
from flowcore_cli._replay import figures_text
from flowcore_handlers import HandlerError, Registry, Result
from flowcore_local import LocalHost
from flowcore_serve import Tokens, create_app

from .cli.test_cli import fc

FLOW = """
flow: spend
budget: {steps: 20, cost_minor_units: 1000, tokens: 10000}
tools: {note: {class: readonly}}
steps:
  - id: ask
    run_agent: {agent: analyst, prompt: first}
  - id: again
    try:
      - id: cut
        run_agent: {agent: cutoff, prompt: second}
    catch:
      - errors: [usage-limit-exceeded]
        steps:
          - {id: note, call_tool: {tool: note, input: cut off}}
"""

# The analyst answers after three turns; the second agent is cut off after one,
# having spent 1,000 tokens: what it spent is charged like any other usage.
ANSWERED = Usage(
    steps=2,
    cost_minor_units=30,
    tokens=4800,
    turns=3,
    input_tokens=4000,
    output_tokens=800,
    cache_read_tokens=1000,
)
CUT_OFF = Usage(cost_minor_units=6, tokens=1000, turns=1, input_tokens=900, output_tokens=100)

# Three issues (two agents, one tool call) and two reported steps; the rest is
# what the two agents reported.
FIGURES = {
    "stepsUsed": 5,
    "stepsLeft": 15,
    "costUsed": 36,
    "costLeft": 964,
    "tokensUsed": 5800,
    "tokensLeft": 4200,
    "inputTokensUsed": 4900,
    "outputTokensUsed": 900,
    "cacheReadTokensUsed": 1000,
    "toolCallsUsed": 1,
    "toolCallsLeft": None,
    "turnsUsed": 4,
    "turnsLeft": None,
}
REPORTED = {
    "steps": 2,
    "costMinorUnits": 36,
    "tokens": 5800,
    "turns": 4,
    "inputTokens": 4900,
    "outputTokens": 900,
    "cacheReadTokens": 1000,
}


def analyst(run: RunAgent) -> Result:
    return Result("reorder", ANSWERED)


def cutoff(run: RunAgent) -> Any:
    raise HandlerError("usage-limit-exceeded", "the token limit was reached", usage=CUT_OFF)


def note(call: CallTool) -> Any:
    return "noted"


REGISTRY = Registry(tools={"note": note}, agents={"analyst": analyst, "cutoff": cutoff})


def test_replay_counts_the_usage_of_a_failed_effect_as_the_ledger_does() -> None:
    """In the simulator: the reported usage replay sums and the ledger's figures agree."""
    flow = flowcore.parse_flow(FLOW)
    run = simulate(
        flow,
        agents={
            "analyst": Ok("reorder", steps=2, cost=30, tokens=4800, turns=3),
            "cutoff": Fail(
                "usage-limit-exceeded", usage=Usage(cost_minor_units=6, tokens=1000, turns=1)
            ),
        },
        tools={"note": Ok("noted")},
    )
    assert run.status == "completed"
    figures = flowcore.usage_figures(run.state)
    assert (figures.tokens_used, figures.turns_used, figures.cost_used) == (5800, 4, 36)
    report = flowcore.replay(run.log_of(), flow)
    assert report.state is not None
    assert flowcore.usage_figures(report.state) == figures  # report.state: the replayed state
    assert (report.usage.tokens, report.usage.turns) == (5800, 4)  # not 4800 and 3
    assert report.usage.cost_minor_units == figures.cost_used
    [cut] = [e for e in report.trajectory if e.key.endswith("/cut#1")]
    assert cut.status == "failed" and cut.usage == Usage(cost_minor_units=6, tokens=1000, turns=1)
    assert run.usage.by_agent["cutoff"].cost_minor_units == 6  # the simulator's own lines too


def test_replay_show_and_the_web_view_report_the_same_figures(tmp_path: Path) -> None:
    db = tmp_path / "usage.db"
    tokens = Tokens.session()
    assert tokens.generated is not None

    async def main() -> tuple[dict[str, Any], dict[str, Any]]:
        async with LocalHost(db, registry=REGISTRY) as host:
            rid = await host.start(FLOW, None, "spend")
            await host.work(until_settled=rid)
            shown = await host.show(rid)
            app = create_app(host, tokens)
            async with httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app),
                base_url="http://flowcore.test",
                headers={"Authorization": f"Bearer {tokens.generated}"},
            ) as client:
                reply = await client.get("/api/runs/spend")  # what the web view reads
                assert reply.status_code == 200, reply.text
                view: dict[str, Any] = reply.json()
        return shown, view

    shown, view = asyncio.run(main())
    assert shown["status"] == "completed"
    assert shown["budget"] == FIGURES
    assert view["budget"] == FIGURES

    replayed = fc("replay", "spend", "--db", db, "--json")
    assert replayed.returncode == 0, replayed.stderr
    report = json.loads(replayed.stdout)
    assert report["ledger"] == FIGURES
    assert report["usage"] == REPORTED  # the failed effect's usage included

    show_json = fc("show", "spend", "--db", db, "--json")
    assert show_json.returncode == 0, show_json.stderr
    info = json.loads(show_json.stdout)
    assert info["budget"] == FIGURES
    assert info["usage"]["reported"] == REPORTED
    [cut] = [e for e in info["report"] if e["key"].endswith("cut#1")]
    assert (cut["status"], cut["usage"]["tokens"]) == ("failed", 1000)

    # The text of both commands: one wording of the same figures.
    line = figures_text(FIGURES)
    assert "5800 tokens used (4900 input, 900 output, 1000 cache reads), 4200 left" in line
    assert "4 turns used" in line
    text = fc("replay", "spend", "--db", db)
    assert text.returncode == 0, text.stderr
    assert f"ledger: {line}\n" in text.stdout
    assert "reported usage 2 steps, 36 cost, 5800 tokens (4900 input" in text.stdout
    shown_text = fc("show", "spend", "--db", db, "--no-history")
    assert shown_text.returncode == 0, shown_text.stderr
    assert f"budget: {line}\n" in shown_text.stdout


def test_figures_of_a_state_are_its_ledger_and_encode_in_camel_case() -> None:
    flow = flowcore.parse_flow("flow: f\nsteps:\n  - {id: a, run_agent: {agent: x, prompt: p}}\n")
    d = flowcore.start(flow, None, run_id="r-1", now_ms=0)
    figures = flowcore.usage_figures(d.state)
    assert figures == flowcore.UsageFigures(steps_used=1, steps_left=999)  # one issue; no limits
    assert msgspec.to_builtins(figures) == {
        "stepsUsed": 1,
        "stepsLeft": 999,
        "costUsed": 0,
        "costLeft": None,
        "tokensUsed": 0,
        "tokensLeft": None,
        "inputTokensUsed": 0,
        "outputTokensUsed": 0,
        "cacheReadTokensUsed": 0,
        "toolCallsUsed": 0,
        "toolCallsLeft": None,
        "turnsUsed": 0,
        "turnsLeft": None,
    }
