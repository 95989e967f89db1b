"""``pydantic_agent``: what an effect becomes for the agent, and what comes back.

Every agent here is a real pydantic-ai ``Agent`` on ``FunctionModel`` or
``TestModel``: the prompt, instructions, limits and deps the model sees are
pydantic-ai's own, and the handler runs through ``flowcore_handlers``'
``run_handler`` as a host runs it.
"""

from __future__ import annotations

import asyncio
import datetime
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel
from pydantic_ai import Agent, RunContext
from pydantic_ai.exceptions import (
    ModelAPIError,
    ModelHTTPError,
    ModelQuotaExceededError,
    ModelRateLimitError,
    UnexpectedModelBehavior,
    UsageLimitExceeded,
)
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.usage import RequestUsage, RunUsage, UsageLimits

import flowcore
from flowcore import (
    BudgetRemaining,
    EffectFailed,
    EffectOutcomeUnknown,
    EffectSucceeded,
    RunAgent,
    Usage,
)
from flowcore_agents import (
    FlowcoreDeps,
    Price,
    PriceError,
    Prices,
    agent_error,
    limits_for,
    pydantic_agent,
    token_allowance,
    usage_of,
)
from flowcore_handlers import HandlerError, Registry, Result, run_handler

BIG = BudgetRemaining(steps=100)


def effect(
    prompt: str = "hello",
    *,
    instructions: str | None = None,
    member: str | None = None,
    key: str = "r-1/ask#1",
    budget: BudgetRemaining = BIG,
    agent_id: str = "bot",
) -> RunAgent:
    return RunAgent(
        agent_id=agent_id,
        prompt=prompt,
        instructions=instructions,
        member=member,
        idempotency_key=key,
        budget_remaining=budget,
    )


async def served(handler: Any, eff: RunAgent) -> EffectSucceeded | EffectFailed:
    """The event a host reports for ``eff`` served by ``handler`` (and its exception)."""
    registry = Registry(agents={eff.agent_id: handler})
    event, _ = await run_handler(registry, eff, lambda: 5)
    assert not isinstance(event, EffectOutcomeUnknown)  # an agent's outcome is always known
    return event


def serve(handler: Any, eff: RunAgent) -> EffectSucceeded | EffectFailed:
    return asyncio.run(served(handler, eff))


def failed(handler: Any, eff: RunAgent) -> flowcore.ErrorInfo:
    event = serve(handler, eff)
    assert isinstance(event, EffectFailed), event
    return event.error


def user_prompt(messages: list[ModelMessage]) -> str:
    for message in messages:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                    return part.content
    raise AssertionError("no user prompt")


def text_model(
    answer: str = "done", *, input_tokens: int = 10, output_tokens: int = 2, name: str = "m"
) -> FunctionModel:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        usage = RequestUsage(input_tokens=input_tokens, output_tokens=output_tokens)
        return ModelResponse(parts=[TextPart(answer)], usage=usage)

    return FunctionModel(respond, model_name=name)


# --- prices and the usage mapping ------------------------------------------------------------


def test_cost_is_exact_and_rounded_up_to_a_whole_minor_unit() -> None:
    price = Price(input=300, output=1500)
    # 1000 * 300 + 100 * 1500 = 450,000 millionths: half a minor unit is charged as one.
    usage = RunUsage(requests=1, input_tokens=1000, output_tokens=100)
    assert usage_of(usage, "m", Prices({"m": price})) == Usage(
        steps=0, cost_minor_units=1, tokens=1100, turns=1, input_tokens=1000, output_tokens=100
    )
    # Exactly two minor units stay two: 1000 * 1000 + 500 * 2000 = 2,000,000 millionths.
    exact = Prices({"m": Price(input=1000, output=2000, cache_read=1)})
    usage = RunUsage(requests=1, input_tokens=1000, output_tokens=500)
    assert usage_of(usage, "m", exact).cost_minor_units == 2
    # One millionth more (a cached token at 1) is a third.
    usage = RunUsage(requests=1, input_tokens=1001, cache_read_tokens=1, output_tokens=500)
    assert usage_of(usage, "m", exact).cost_minor_units == 3


def test_cached_tokens_are_priced_apart_from_the_other_input_tokens() -> None:
    price = Price(input=1000, output=0, cache_read=100, cache_write=2000)
    # 10,000 input tokens, of which 4,000 read from the cache and 1,000 written to it.
    usage = RunUsage(
        requests=1, input_tokens=10_000, cache_read_tokens=4_000, cache_write_tokens=1_000
    )
    micro = 5_000 * 1000 + 4_000 * 100 + 1_000 * 2000
    assert price.cost_micro(usage) == micro
    assert usage_of(usage, "m", Prices(default=price)).cost_minor_units == -(-micro // 10**6)


def test_steps_are_the_model_requests_beyond_the_first() -> None:
    assert usage_of(RunUsage(requests=1), None, None) == Usage(steps=0, turns=1)
    assert usage_of(RunUsage(requests=4, tool_calls=2), None, None) == Usage(
        steps=3, tool_calls=2, turns=4
    )
    assert usage_of(RunUsage(requests=0), None, None) == Usage()


def test_an_unpriced_model_is_never_charged_nothing_by_mistake() -> None:
    prices = Prices({"gpt-4o": Price(input=250, output=1000)})
    with pytest.raises(PriceError, match="no price for model 'other'"):
        usage_of(RunUsage(requests=1, input_tokens=5), "other", prices)
    assert Prices(default=Price(input=1, output=1)).of("anything") == Price(input=1, output=1)


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: Price(input=-1, output=0), "Price.input must be an integer"),
        (lambda: Price(input=1, output=1.5), "Price.output must be an"),  # type: ignore[arg-type]
        (lambda: Price(input=True, output=1), "Price.input must be an integer"),
        (lambda: Price(input=1, output=1, cache_read=10**13), "Price.cache_read"),
        (lambda: Prices({"m": (1, 2)}), r"models\[.m.\] must be a Price"),  # type: ignore[dict-item]
        (lambda: Prices({"": Price(input=1, output=1)}), "non-empty string"),
        (lambda: Prices(default=5), "Prices.default must be a Price"),  # type: ignore[arg-type]
    ],
)
def test_a_bad_price_table_is_refused_naming_the_field(build: Any, message: str) -> None:
    with pytest.raises(PriceError, match=message):
        build()


@given(
    cost=st.integers(0, 10**6),
    prices=st.tuples(*[st.integers(0, 10**6)] * 4),
    data=st.data(),
)
def test_the_token_allowance_never_buys_more_than_the_cost_allows(
    cost: int, prices: tuple[int, int, int, int], data: st.DataObject
) -> None:
    price = Price(input=prices[0], output=prices[1], cache_read=prices[2], cache_write=prices[3])
    allowance = token_allowance(cost, price)
    if allowance is None:
        assert price.highest == 0
        return
    # Spend exactly the whole allowance, in any mix of token kinds.
    read = data.draw(st.integers(0, allowance))
    write = data.draw(st.integers(0, allowance - read))
    output = data.draw(st.integers(0, allowance - read - write))
    plain = allowance - read - write - output
    usage = RunUsage(
        requests=1,
        input_tokens=plain + read + write,
        cache_read_tokens=read,
        cache_write_tokens=write,
        output_tokens=output,
    )
    assert usage.total_tokens == allowance
    assert usage_of(usage, "m", Prices({"m": price})).cost_minor_units <= cost
    # And it is the most: one token more at the dearest price would cost more.
    assert (allowance + 1) * price.highest > cost * 10**6


# --- limits from the budget ------------------------------------------------------------------


def test_the_step_budget_bounds_the_model_requests() -> None:
    limits = limits_for(BudgetRemaining(steps=3), None)
    assert limits.request_limit == 4  # the effect's own step pays for the first request
    assert limits.total_tokens_limit is None
    # A limit of the user's own that is tighter wins; other fields are kept.
    mine = UsageLimits(request_limit=2, tool_calls_limit=5, total_tokens_limit=10)
    limits = limits_for(BudgetRemaining(steps=3), 50, mine)
    assert (limits.request_limit, limits.tool_calls_limit, limits.total_tokens_limit) == (2, 5, 10)
    limits = limits_for(BudgetRemaining(steps=300, cost_minor_units=7), 6, UsageLimits())
    assert (limits.request_limit, limits.total_tokens_limit) == (50, 6)


def test_a_run_cannot_report_more_steps_than_are_left() -> None:
    # The model would call its tool for ever; 2 steps left allow 3 requests, then it stops.
    requests: list[int] = []

    def loop(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        requests.append(1)
        return ModelResponse(parts=[ToolCallPart("again", {})])

    agent = Agent(FunctionModel(loop))

    @agent.tool_plain
    def again() -> str:
        return "more"

    error = failed(pydantic_agent(agent), effect(budget=BudgetRemaining(steps=2)))
    assert error.type == "usage-limit-exceeded"
    assert error.retryable is False
    assert "request_limit of 3" in error.message
    assert len(requests) == 3


def test_the_cost_budget_bounds_the_tokens_through_the_price() -> None:
    # 1000 tokens a request at 10,000 minor units per million: 10 a request.
    # 25 minor units left buy 2,500 tokens: the third request crosses the line.
    calls: list[int] = []

    def loop(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls.append(1)
        usage = RequestUsage(input_tokens=900, output_tokens=100)
        return ModelResponse(parts=[ToolCallPart("again", {})], usage=usage)

    agent = Agent(FunctionModel(loop, model_name="dear"))

    @agent.tool_plain
    def again() -> str:
        return "more"

    prices = Prices({"dear": Price(input=10_000, output=10_000)})
    budget = BudgetRemaining(steps=100, cost_minor_units=25)
    error = failed(pydantic_agent(agent, prices=prices), effect(budget=budget))
    assert error.type == "usage-limit-exceeded"
    assert "total_tokens_limit of 2500" in error.message
    assert len(calls) == 3


def test_a_cost_budget_needs_a_price() -> None:
    agent = Agent(text_model(name="m"))
    budget = BudgetRemaining(steps=10, cost_minor_units=100)
    error = failed(pydantic_agent(agent), effect(budget=budget))
    assert error.type == "no-price"
    assert "has a cost budget but agent 'bot' has no price table" in error.message
    # A price table without the model is refused even without a cost budget.
    error = failed(pydantic_agent(agent, prices=Prices({"other": Price(1, 1)})), effect())
    assert (error.type, error.message) == ("no-price", "the price table has no price for model 'm'")
    # ``model_name`` names the model for the table.
    handler = pydantic_agent(agent, prices=Prices({"other": Price(1, 1)}), model_name="other")
    assert isinstance(serve(handler, effect(budget=budget)), EffectSucceeded)


def test_the_remaining_wall_clock_is_the_runs_timeout() -> None:
    async def slow(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        await asyncio.sleep(60)
        return ModelResponse(parts=[TextPart("late")])

    agent = Agent(FunctionModel(slow))
    error = failed(pydantic_agent(agent), effect(budget=BudgetRemaining(steps=5, wall_clock_ms=1)))
    assert error.type == "timeout"  # cut off: a model that finished would have succeeded


# --- what the agent sees --------------------------------------------------------------------


def test_the_prompt_and_instructions_reach_the_model() -> None:
    seen: dict[str, Any] = {}

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen["prompt"] = user_prompt(messages)
        seen["instructions"] = info.instructions
        return ModelResponse(parts=[TextPart("ok")])

    agent = Agent(FunctionModel(respond), instructions="You are careful.")
    event = serve(pydantic_agent(agent), effect("Review #12", instructions="Focus on auth"))
    assert isinstance(event, EffectSucceeded)
    assert event.output == "ok"
    assert seen["prompt"] == "Review #12"
    # The effect's instructions come after the agent's own.
    assert seen["instructions"] == "You are careful.\n\nFocus on auth"


def test_tools_get_the_key_run_step_and_member_as_deps() -> None:
    got: list[FlowcoreDeps] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("note", {})])
        return ModelResponse(parts=[TextPart("noted")])

    agent = Agent(FunctionModel(respond), deps_type=FlowcoreDeps)

    @agent.tool
    def note(ctx: RunContext[FlowcoreDeps]) -> str:
        got.append(ctx.deps)
        return ctx.deps.idempotency_key

    eff = effect(member="security", key="r-7/per[2]/review/security#3", agent_id="sec-bot")
    assert isinstance(serve(pydantic_agent(agent), eff), EffectSucceeded)
    [deps] = got
    assert deps.idempotency_key == "r-7/per[2]/review/security#3"
    assert (deps.run_id, deps.step, deps.path, deps.attempt) == (
        "r-7",
        "review",
        "per[2]/review",
        3,
    )
    assert (deps.member, deps.agent_id, deps.budget_remaining) == ("security", "sec-bot", BIG)
    assert deps.effect == eff
    # A key flowcore does not spell leaves what it would say unknown.
    assert FlowcoreDeps.of(effect(key="nokey")).run_id is None


@dataclass
class MyDeps:
    flowcore: FlowcoreDeps
    ledger: list[str]


def test_a_deps_factory_combines_flowcore_deps_with_the_users() -> None:
    ledger: list[str] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("refund", {"amount": 5})])
        return ModelResponse(parts=[TextPart("refunded")])

    agent = Agent(FunctionModel(respond), deps_type=MyDeps)

    @agent.tool
    def refund(ctx: RunContext[MyDeps], amount: int) -> str:
        key = f"{ctx.deps.flowcore.idempotency_key}/refund"
        if key not in ctx.deps.ledger:  # a re-run of the same effect refunds nothing twice
            ctx.deps.ledger.append(key)
        return key

    handler = pydantic_agent(agent, deps=lambda fc: MyDeps(fc, ledger))
    for _ in range(2):
        assert isinstance(serve(handler, effect(key="r-1/pay#1")), EffectSucceeded)
    assert ledger == ["r-1/pay#1/refund"]


class Triage(BaseModel):
    owner: str
    severity: int
    due: datetime.date


@dataclass
class Verdict:
    ok: bool
    notes: tuple[str, ...]


def test_structured_output_becomes_json_data() -> None:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        args = {"owner": "ana", "severity": 2, "due": "2030-01-31"}
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, args)])

    event = serve(pydantic_agent(Agent(FunctionModel(respond), output_type=Triage)), effect())
    assert isinstance(event, EffectSucceeded)
    assert event.output == {"owner": "ana", "severity": 2, "due": "2030-01-31"}
    agent = Agent(
        TestModel(custom_output_args={"ok": True, "notes": ["a", "b"]}), output_type=Verdict
    )
    event = serve(pydantic_agent(agent), effect())
    assert isinstance(event, EffectSucceeded)
    assert event.output == {"ok": True, "notes": ["a", "b"]}


def test_the_usage_comes_back_with_the_output() -> None:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        usage = RequestUsage(input_tokens=2_000, output_tokens=500)
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("look", {})], usage=usage)
        return ModelResponse(parts=[TextPart("seen")], usage=usage)

    agent = Agent(FunctionModel(respond, model_name="m"))

    @agent.tool_plain
    def look() -> str:
        return "x"

    prices = Prices({"m": Price(input=1_000, output=4_000)})
    handler = pydantic_agent(agent, prices=prices)
    outcome = asyncio.run(handler(effect()))
    # Two requests: one step beyond the effect's own; 4,000 * 1,000 + 1,000 * 4,000 = 8 minor units;
    # 5,000 tokens, one tool call, two turns.
    used = Usage(
        steps=1,
        cost_minor_units=8,
        tokens=5_000,
        tool_calls=1,
        turns=2,
        input_tokens=4_000,
        output_tokens=1_000,
    )
    assert outcome == Result("seen", used)
    event = serve(handler, effect())
    assert isinstance(event, EffectSucceeded)
    assert event.usage == used


# --- failures -------------------------------------------------------------------------------


def raising(exc: Exception) -> Agent[None, str]:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise exc

    return Agent(FunctionModel(respond))


@pytest.mark.parametrize(
    "exc, type_, retryable",
    [
        (ModelHTTPError(429, "m", {"error": "slow down"}), "model-error", True),
        (ModelHTTPError(503, "m"), "model-error", True),
        (ModelHTTPError(500, "m"), "model-error", True),
        (ModelHTTPError(400, "m", {"error": "bad request"}), "model-error", False),
        (ModelHTTPError(401, "m"), "model-error", False),
        (ModelRateLimitError("m", "rate limited"), "model-error", True),
        (ModelQuotaExceededError("m", "no credit left"), "model-error", False),
        (ModelAPIError("m", "connection reset"), "model-error", False),
        (UnexpectedModelBehavior("gibberish"), "model-behavior", False),
        (UsageLimitExceeded("too much"), "usage-limit-exceeded", False),
    ],
)
def test_model_failures_become_typed_handler_errors(
    exc: Exception, type_: str, retryable: bool
) -> None:
    error = failed(pydantic_agent(raising(exc)), effect())
    assert (error.type, error.retryable) == (type_, retryable)
    mapped = agent_error(exc)
    assert mapped is not None and mapped.type == type_


def test_a_model_error_carries_what_the_provider_said_as_details() -> None:
    error = failed(pydantic_agent(raising(ModelHTTPError(429, "m", {"error": "slow"}))), effect())
    assert (error.type, error.details) == ("model-error", {"model": "m", "status": 429})
    error = failed(pydantic_agent(raising(ModelAPIError("m", "connection reset"))), effect())
    assert error.details == {"model": "m"}


def test_output_that_never_validates_is_model_behavior() -> None:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {"owner": 7})])

    agent = Agent(FunctionModel(respond), output_type=Triage, retries=1)
    error = failed(pydantic_agent(agent), effect())
    assert error.type == "model-behavior"
    assert error.message.startswith("Exceeded maximum output retries (1): 3 validation errors")
    assert "owner" in error.message


def test_messages_are_bounded() -> None:
    error = failed(pydantic_agent(raising(ModelHTTPError(500, "m", "x" * 100_000))), effect())
    assert len(error.message) < 5_000


def test_a_tools_own_errors_pass_through() -> None:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[ToolCallPart("charge", {})])

    agent = Agent(FunctionModel(respond))

    @agent.tool_plain
    def charge() -> str:
        raise HandlerError("card-declined", "the card was declined", details={"status": 402})

    error = failed(pydantic_agent(agent), effect())
    assert (error.type, error.message) == ("card-declined", "the card was declined")
    assert error.details == {"status": 402}
    assert agent_error(ValueError("x")) is None


def test_an_agent_without_a_model_is_a_configuration_error() -> None:
    error = failed(pydantic_agent(Agent()), effect())
    assert error.type == "agent-config"


def test_bad_arguments_are_refused_at_once() -> None:
    with pytest.raises(TypeError, match="prices must be a Prices, not dict"):
        pydantic_agent(Agent(TestModel()), prices={"m": Price(1, 1)})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="usage_limits must be a UsageLimits"):
        pydantic_agent(Agent(TestModel()), usage_limits={"request_limit": 1})  # type: ignore[arg-type]


def test_a_model_is_priced_by_its_model_name() -> None:
    # Agent("test") infers a TestModel, whose model_name is "test".
    handler = pydantic_agent(Agent("test"), prices=Prices({"test": Price(input=1, output=1)}))
    event = serve(handler, effect(budget=BudgetRemaining(steps=5, cost_minor_units=1)))
    assert isinstance(event, EffectSucceeded), event
    assert event.usage is not None and event.usage.cost_minor_units == 1
    assert (event.usage.steps, event.usage.turns) == (0, 1)


def test_the_token_turn_and_tool_call_limits_left_bound_the_agent() -> None:
    left = BudgetRemaining(steps=9, tokens=500, tool_calls=1, turns=2)
    limits = limits_for(left, price_tokens=800)
    assert (limits.request_limit, limits.total_tokens_limit, limits.tool_calls_limit) == (2, 500, 1)
    # Fewer steps than turns left: the steps decide; no token limit left: the price does.
    limits = limits_for(BudgetRemaining(steps=0, turns=5), price_tokens=800)
    assert (limits.request_limit, limits.total_tokens_limit, limits.tool_calls_limit) == (
        1,
        800,
        None,
    )
