"""pydantic-ai agents for specs/examples/agent_team.yaml, offline.

Each agent is an ordinary pydantic-ai ``Agent`` with a typed output; here
its model is a ``FunctionModel`` that answers from the prompt, so the
example runs with no provider and no network. With a real model only the
``Agent(...)`` line changes (``Agent("openai:gpt-4o", ...)``) and the price
table gains that model's price. Run it with:

    flowcore run specs/examples/agent_team.yaml \\
        --tools specs/examples/agents_tools.py --db /tmp/agents.db

``pydantic_agent`` turns each agent into a ``run-agent`` handler: the
remaining budget bounds the run, the usage is charged to the run's ledger
at the prices below, and the agent's tools get the idempotency key.
"""

from __future__ import annotations

from pydantic import BaseModel
from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

from flowcore_agents import FlowcoreDeps, Price, Prices, pydantic_agent


class Review(BaseModel):
    """What a reviewer hands back: becomes the member's output as JSON."""

    verdict: str
    notes: list[str]


# Minor units (cents) per million tokens, per model name.
PRICES = Prices({"scripted-reviewer": Price(input=300, output=1500, cache_read=30)})

# What the security reviewer's tool did, by idempotency key: a real tool
# would write to its own store keyed the same way, so that a re-run of the
# same effect finds the work done instead of doing it twice.
ADVISORIES_FILED: dict[str, str] = {}


def _prompt(messages: list[ModelMessage]) -> str:
    for message in messages:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                    return part.content
    return ""


def _answered(messages: list[ModelMessage], tool: str) -> str | None:
    for message in messages:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, ToolReturnPart) and part.tool_name == tool:
                    return str(part.content)
    return None


def _security_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    # First turn: file an advisory through the agent's tool; second: the review.
    usage = RequestUsage(input_tokens=1200, output_tokens=150)
    advisory = _answered(messages, "file_advisory")
    if advisory is None:
        call = ToolCallPart("file_advisory", {"summary": "cookie attributes changed"})
        return ModelResponse(parts=[call], usage=usage)
    review = {"verdict": "approve", "notes": [f"advisory {advisory} filed", _prompt(messages)]}
    return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, review)], usage=usage)


def _editor_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    # The member's instructions carry the security review (the team's `members`).
    earlier = info.instructions or ""
    review = {
        "verdict": "approve with edits",
        "notes": ["say which browsers are affected", f"I was told: {earlier}"],
    }
    usage = RequestUsage(input_tokens=900, output_tokens=120)
    return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, review)], usage=usage)


security_bot = Agent(
    FunctionModel(_security_model, model_name="scripted-reviewer"),
    output_type=Review,
    deps_type=FlowcoreDeps,
    instructions="You review changes for security impact.",
)


@security_bot.tool
def file_advisory(ctx: RunContext[FlowcoreDeps], summary: str) -> str:
    """File a security advisory (once per effect, however often it is re-run)."""
    key = f"{ctx.deps.idempotency_key}/advisory"
    return ADVISORIES_FILED.setdefault(key, f"ADV-{len(ADVISORIES_FILED) + 1}: {summary}")


editor_bot = Agent(
    FunctionModel(_editor_model, model_name="scripted-reviewer"),
    output_type=Review,
    instructions="You edit release notes for clarity.",
)

AGENTS = {
    "sec-bot": pydantic_agent(security_bot, prices=PRICES),
    "editor-bot": pydantic_agent(editor_bot, prices=PRICES),
}
