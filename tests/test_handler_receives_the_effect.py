"""A handler written as if it received its input (``def tool(input)``) fails with a
message that says what a handler receives: the effect (README, specs/local.md §4)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from flowcore import BudgetRemaining, CallTool, EffectFailed, EffectSucceeded, RunAgent
from flowcore_handlers import Registry, run_handler

CALL = CallTool(tool="lookup", input={"id": "u-1"}, idempotency_key="r-1/who#1")
AGENT = RunAgent(
    agent_id="writer",
    prompt="Say hi",
    idempotency_key="r-1/hello#1",
    budget_remaining=BudgetRemaining(steps=10),
)


def outcome(effect: CallTool | RunAgent, handler: Any) -> EffectFailed | EffectSucceeded:
    registry = Registry(tools={"lookup": handler}, agents={"writer": handler})
    event, _ = asyncio.run(run_handler(registry, effect, lambda: 7))
    assert isinstance(event, (EffectFailed, EffectSucceeded))
    return event


@pytest.mark.parametrize(
    ("effect", "handler", "said"),
    [
        # indexed as if it were the input
        (CALL, lambda input: {"name": input["id"]}, "'CallTool' object is not subscriptable"),
        # returned (inside the output) as if it were data
        (CALL, lambda input: {"asked": input}, "a CallTool is not JSON data"),
        (AGENT, lambda prompt: prompt.upper(), "'RunAgent' object has no attribute 'upper'"),
    ],
)
def test_a_handler_that_takes_the_effect_for_its_input_is_told_what_it_receives(
    effect: CallTool | RunAgent, handler: Any, said: str
) -> None:
    event = outcome(effect, handler)
    assert isinstance(event, EffectFailed)
    name = type(effect).__name__
    read = "its input is call.input" if isinstance(effect, CallTool) else "its prompt is run.prompt"
    assert said in event.error.message
    assert event.error.message.endswith(
        f"(a handler receives the {name} effect itself, not its input: {read})"
    )


def test_other_failures_and_results_are_left_as_they_are() -> None:
    def other(call: CallTool) -> Any:
        return {"x": {1, 2}}  # not JSON data either, but not the effect

    failed = outcome(CALL, other)
    assert isinstance(failed, EffectFailed) and "receives" not in failed.error.message
    ok = outcome(CALL, lambda call: {"name": call.input["id"]})
    assert isinstance(ok, EffectSucceeded) and ok.output == {"name": "u-1"}
