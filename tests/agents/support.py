"""A team flow and its tools module, written to a test's directory as a user's would be.

The tools module serves two declared team members and a looping agent with
``pydantic_agent`` over ``FunctionModel``s; what the planner's tool is given
goes to a journal file beside it, so a test can see the deps a tool got.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

TEAM_FLOW = """
flow: agent-pair
budget: {steps: 10, cost_minor_units: 100}
teams:
  pair:
    mode: sequential
    members:
      - {member: planner, agent: planner-bot}
      - {member: critic, agent: critic-bot, instructions: "The plan: ${members.planner.plan}"}
steps:
  - id: team
    run_team: {team: pair, prompt: "Plan the rollout of ${input.service}. So far: ${members}"}
output: "${steps.team.output}"
"""

LOOP_FLOW = """
flow: agent-loop
budget: {steps: 4}
steps:
  - id: spin
    run_agent: {agent: looper, prompt: "go"}
output: "${steps.spin.output}"
"""

TOOLS = """
import json
from pathlib import Path

from pydantic import BaseModel
from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, ToolCallPart, UserPromptPart
from pydantic_ai.models.function import FunctionModel
from pydantic_ai.usage import RequestUsage

from flowcore_agents import FlowcoreDeps, Price, Prices, pydantic_agent

JOURNAL = Path({journal!r})
PRICES = Prices({{"scripted": Price(input=1000, output=5000)}})


def note(**entry):
    with JOURNAL.open("a") as f:
        f.write(json.dumps(entry) + "\\n")


class Plan(BaseModel):
    plan: str
    stages: int


def planner_model(messages, info):
    usage = RequestUsage(input_tokens=1000, output_tokens=200)
    if len(messages) == 1:
        return ModelResponse(parts=[ToolCallPart("reserve_window", {{"hours": 2}})], usage=usage)
    plan = {{"plan": "canary then fleet", "stages": 3}}
    return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, plan)], usage=usage)


def critic_model(messages, info):
    prompt = next(
        p.content for m in messages if isinstance(m, ModelRequest)
        for p in m.parts if isinstance(p, UserPromptPart)
    )
    text = f"prompt={{prompt}} | instructions={{info.instructions}}"
    usage = RequestUsage(input_tokens=500, output_tokens=100)
    return ModelResponse(parts=[TextPart(text)], usage=usage)


def loop_model(messages, info):
    note(kind="loop-request")
    return ModelResponse(parts=[ToolCallPart("again", {{}})])


planner = Agent(
    FunctionModel(planner_model, model_name="scripted"), output_type=Plan, deps_type=FlowcoreDeps
)


@planner.tool
def reserve_window(ctx: RunContext[FlowcoreDeps], hours: int) -> str:
    deps = ctx.deps
    note(kind="tool", key=deps.idempotency_key, run=deps.run_id, step=deps.step, member=deps.member)
    return f"window {{deps.idempotency_key}}/window reserved for {{hours}}h"


critic = Agent(
    FunctionModel(critic_model, model_name="scripted"), instructions="You criticise plans."
)
looper = Agent(FunctionModel(loop_model))


@looper.tool_plain
def again() -> str:
    return "more"


AGENTS = {{
    "planner-bot": pydantic_agent(planner, prices=PRICES),
    "critic-bot": pydantic_agent(critic, prices=PRICES),
    "looper": pydantic_agent(looper),
}}
"""


def write_tools(directory: Path) -> tuple[Path, Path]:
    """The tools module and its journal, in ``directory``."""
    journal = directory / "journal.ndjson"
    tools = directory / "agent_tools.py"
    tools.write_text(TOOLS.format(journal=str(journal)), encoding="utf-8")
    return tools, journal


def journal(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


# The planner: 2 requests of 1000 in + 200 out at 1000/5000 per million = 2 * 2 = 4 minor
# units, one step beyond its effect's; the critic: 1 request of 500 + 100 = 1 minor unit.
TEAM_STEPS = 3
TEAM_COST = 5
# The planner: two requests of 1,000 + 200 tokens and one tool call; the critic:
# one request of 500 + 100 tokens.
TEAM_TOKENS = 3000
TEAM_INPUT_TOKENS = 2500  # of which input (none read from a cache) ...
TEAM_OUTPUT_TOKENS = 500  # ... and output
TEAM_TOOL_CALLS = 1
TEAM_TURNS = 3
