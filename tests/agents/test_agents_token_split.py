"""The split of an agent's tokens (input, output, cache reads) beside their total,
from pydantic-ai's ``RunUsage`` to the event a host reports, and to the run's ledger.

Real pydantic-ai ``Agent``s on ``FunctionModel``s, served through
``flowcore_handlers``' ``run_handler`` as a host serves them: no network.
"""

from __future__ import annotations

from typing import Any

import msgspec
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage, RunUsage

import flowcore
from flowcore import BudgetRemaining, EffectFailed, EffectSucceeded, Usage
from flowcore_agents import pydantic_agent, usage_of

from .test_agents_handler import effect, serve


def cached_model() -> FunctionModel:
    """A model whose every response reads 400 of its 1,200 input tokens from the
    provider's cache and writes 150 output tokens."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        usage = RequestUsage(input_tokens=1_200, output_tokens=150, cache_read_tokens=400)
        return ModelResponse(parts=[TextPart("done")], usage=usage)

    return FunctionModel(respond, model_name="m")


def test_usage_of_keeps_the_split_beside_the_total() -> None:
    run = RunUsage(requests=2, input_tokens=2_400, output_tokens=300, cache_read_tokens=800)
    assert usage_of(run, "m", None) == Usage(
        steps=1,
        tokens=2_700,
        turns=2,
        input_tokens=2_400,
        output_tokens=300,
        cache_read_tokens=800,
    )


def test_a_successful_run_reports_its_split_on_the_wire() -> None:
    event = serve(pydantic_agent(Agent(cached_model())), effect())
    assert isinstance(event, EffectSucceeded)
    assert event.usage == Usage(
        tokens=1_350, turns=1, input_tokens=1_200, output_tokens=150, cache_read_tokens=400
    )
    wire = flowcore.event_to_wire(event)["usage"]
    assert wire == {
        "tokens": 1_350,
        "turns": 1,
        "inputTokens": 1_200,
        "outputTokens": 150,
        "cacheReadTokens": 400,
    }
    assert flowcore.event_from_wire(flowcore.event_to_wire(event)) == event


def test_a_run_cut_off_by_its_token_limit_reports_the_split_it_spent() -> None:
    # 1,000 tokens left: the first response (1,350 tokens) crosses the limit and is charged.
    budget = BudgetRemaining(steps=10, tokens=1_000)
    event = serve(pydantic_agent(Agent(cached_model())), effect(budget=budget))
    assert isinstance(event, EffectFailed)
    assert event.error.type == "usage-limit-exceeded"
    assert event.usage == Usage(
        tokens=1_350, turns=1, input_tokens=1_200, output_tokens=150, cache_read_tokens=400
    )


def test_the_split_reaches_the_ledger_and_its_figures() -> None:
    flow = flowcore.parse_flow(
        "flow: split\nbudget: {tokens: 10000}\nsteps:\n"
        "  - {id: a, run_agent: {agent: bot, prompt: go}}\n"
        "  - {id: b, run_agent: {agent: bot, prompt: again}}\n"
    )
    handler = pydantic_agent(Agent(cached_model()))
    d = flowcore.start(flow, None, run_id="r-1", now_ms=0)
    events: list[Any] = []
    for _ in range(2):
        [work] = [e for e in d.effects if isinstance(e, flowcore.RunAgent)]
        event = serve(handler, work)
        events.append(event)
        d = flowcore.advance(d.state, msgspec.structs.replace(event, at_ms=1))
    assert d.state.status == "completed"
    figures = flowcore.usage_figures(d.state)
    assert (figures.tokens_used, figures.tokens_left) == (2_700, 7_300)
    assert (
        figures.input_tokens_used,
        figures.output_tokens_used,
        figures.cache_read_tokens_used,
    ) == (2_400, 300, 800)
    assert msgspec.to_builtins(figures)["cacheReadTokensUsed"] == 800
