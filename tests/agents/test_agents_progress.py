"""A pydantic-ai agent on the real local host publishes to its run's progress stream:
the model's text as it streams and each tool call and result, in order, while
the run's result and usage stay what they are without it.

The model is pydantic-ai's ``TestModel`` (it calls the agent's tool, then
answers, streamed or not, with the same usage), so nothing leaves the machine."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable
from pathlib import Path
from typing import Any

import msgspec
from pydantic_ai import Agent, RunContext
from pydantic_ai.agent import WrapperAgent
from pydantic_ai.messages import AgentStreamEvent, ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

from flowcore import BudgetRemaining, EffectSucceeded, RunAgent
from flowcore_agents import pydantic_agent
from flowcore_agents._stream import MAX_SHOWN_CHARS
from flowcore_handlers import Registry, publishing, run_handler
from flowcore_local import LocalHost

FLOW = """\
flow: weather
steps:
  - {id: ask, run_agent: {agent: forecaster, prompt: "Weather in ${input.city}?"}}
output: "${steps.ask.output}"
"""

TOOLS = """\
from pydantic_ai import Agent
from pydantic_ai.models.test import TestModel

from flowcore_agents import pydantic_agent

forecaster = Agent(TestModel(custom_output_text="It is sunny in Paris.", model_name="scripted"))


@forecaster.tool_plain
def lookup(city: str) -> dict:
    return {"city": city, "sky": "sunny"}


AGENTS = {"forecaster": pydantic_agent(forecaster, progress={progress})}
"""


async def run_flow(folder: Path, progress: bool) -> tuple[Any, list[Any], list[Any]]:
    """The run, its progress items and its reported events, with the agent's
    ``progress`` as given."""
    folder.mkdir()
    (folder / "weather.yaml").write_text(FLOW)
    tools = folder / "weather_tools.py"
    tools.write_text(TOOLS.replace("{progress}", str(progress)))
    async with LocalHost(folder / "runs.db", str(tools)) as host:
        run_id = await host.start(folder / "weather.yaml", {"city": "Paris"}, "w-1")
        await host.work(until_settled=run_id)
        row = await host.run(run_id)
        items = [msgspec.to_builtins(r) for r in await host.progress_records(run_id)]
        reported = [r.data for r in await host.records(run_id) if r.type == "event.reported"]
    return row, items, reported


def test_an_agent_publishes_its_text_and_tool_calls_and_its_result_is_unchanged(
    tmp_path: Path,
) -> None:
    row, published, reported = asyncio.run(run_flow(tmp_path / "on", True))
    assert row.status == "completed", row.error
    assert row.output == "It is sunny in Paris."
    assert {(p["type"], p["data"]["key"], p["data"]["step"]) for p in published} == {
        ("progress", "w-1/ask#1", "ask")
    }
    items = [p["data"]["data"] for p in published]
    call_id = items[0]["callId"]
    assert isinstance(call_id, str) and call_id
    assert items == [
        {"kind": "tool-call", "tool": "lookup", "args": {"city": "a"}, "callId": call_id},
        {
            "kind": "tool-result",
            "tool": "lookup",
            "callId": call_id,
            "outcome": "success",
            "output": {"city": "a", "sky": "sunny"},
        },
        "It ",
        "is ",
        "sunny ",
        "in ",
        "Paris.",
    ]
    assert [p["index"] for p in published] == list(range(7))
    # Without progress: nothing published, and the same output and usage reported.
    plain, none, plain_reported = asyncio.run(run_flow(tmp_path / "off", False))
    assert none == []
    assert plain.output == row.output
    for event in (*reported, *plain_reported):
        event.pop("atMs")
    assert plain_reported == reported


def effect(prompt: str = "go") -> RunAgent:
    budget = BudgetRemaining(steps=10)
    return RunAgent(
        agent_id="a", prompt=prompt, idempotency_key="r-1/ask#1", budget_remaining=budget
    )


def served_with_progress(handler: Any) -> tuple[Any, list[Any]]:
    """The event ``handler`` reports for one effect, and what it published (as
    a host with progress streams runs it)."""
    items: list[Any] = []

    async def main() -> Any:
        with publishing(lambda data: items.append(msgspec.json.decode(data))):
            event, _ = await run_handler(Registry(agents={"a": handler}), effect(), lambda: 5)
        return event

    return asyncio.run(main()), items


def test_the_agents_own_event_handler_still_sees_every_event_and_big_outputs_are_cut() -> None:
    seen: list[str] = []

    async def own(ctx: RunContext[Any], events: AsyncIterable[AgentStreamEvent]) -> None:
        async for event in events:
            seen.append(event.event_kind)

    class Observed(WrapperAgent[Any, Any]):
        """An agent with an event handler of its own (as durable agents have)."""

        @property
        def event_stream_handler(self) -> Any:
            return own

    inner = Agent(TestModel(custom_output_text="done"))

    @inner.tool_plain
    def dump() -> str:
        return "x" * (MAX_SHOWN_CHARS + 10)

    event, items = served_with_progress(pydantic_agent(Observed(inner)))
    assert isinstance(event, EffectSucceeded) and event.output == "done"
    assert "function_tool_call" in seen and "function_tool_result" in seen
    assert "part_delta" in seen
    result = items[1]
    assert result["kind"] == "tool-result" and result["tool"] == "dump"
    assert isinstance(result["output"], str)
    assert result["output"].startswith('"xxx') and len(result["output"]) < MAX_SHOWN_CHARS + 100
    assert "".join(items[2:]) == "done"


def test_a_model_that_cannot_stream_runs_as_before_and_publishes_nothing() -> None:
    # A FunctionModel without a stream_function cannot stream: the run is not
    # streamed (it would fail), and nothing is published.
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart("plain")])

    event, items = served_with_progress(pydantic_agent(Agent(FunctionModel(respond))))
    assert isinstance(event, EffectSucceeded) and event.output == "plain"
    assert items == []
    # Outside a host with progress streams (no sink), a streaming model is not streamed either.
    handler = pydantic_agent(Agent(TestModel(custom_output_text="quiet")))
    quiet, _ = asyncio.run(run_handler(Registry(agents={"a": handler}), effect(), lambda: 5))
    assert isinstance(quiet, EffectSucceeded) and quiet.output == "quiet"
