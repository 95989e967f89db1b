"""Tools and agents for specs/examples/research.yaml, offline.

The stock tool is served by the warehouse MCP server of ``mcp_server.py``
(over stdio, ``flowcore_mcp``); the agents are pydantic-ai ``Agent``s whose
models are scripted ``FunctionModel``s that report how many tokens each
request used, so the run's token budget runs out where the flow's comment
says (``flowcore_agents``). Run it with:

    flowcore run specs/examples/research.yaml \\
        --tools specs/examples/research_tools.py --db /tmp/research.db

Needs the ``agents`` and ``mcp`` extras.
"""

from __future__ import annotations

import sys
from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

from flowcore_agents import pydantic_agent
from flowcore_mcp import StdioServer, mcp_tools

WAREHOUSE = StdioServer([sys.executable, str(Path(__file__).with_name("mcp_server.py"))])


def _prompt(messages: list[ModelMessage]) -> str:
    for message in messages:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                    return part.content
    return ""


def scripted(reply: str, input_tokens: int, output_tokens: int) -> FunctionModel:
    """A model that answers ``reply`` (and the question) using that many tokens."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        usage = RequestUsage(input_tokens=input_tokens, output_tokens=output_tokens)
        return ModelResponse(parts=[TextPart(f"{reply} ({_prompt(messages)})")], usage=usage)

    return FunctionModel(respond, model_name="scripted")


TOOLS = mcp_tools(WAREHOUSE, prefix="warehouse.")

AGENTS = {
    # 2,000 tokens an analysis, 1,000 a comparison, 800 a summary: 6,000 for the
    # run less its 1,500 reserve leaves 4,500, which the comparison passes.
    "analyst": pydantic_agent(Agent(scripted("reorder", 1500, 500))),
    "comparer": pydantic_agent(Agent(scripted("widgets first", 800, 200))),
    "writer": pydantic_agent(Agent(scripted("plan: reorder widgets now", 600, 200))),
}
