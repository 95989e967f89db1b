"""The authorization hook on Temporal (``new_worker(..., authorize=fn)``,
specs/temporal.md): the worker asks it with the run's principal (sent by the
workflow with the work) before a handler runs; a refusal fails the effect with
``unauthorized``, the handler never runs, and the run's log says who was
refused what. The activity alone (Temporal's ``ActivityEnvironment``, no
server), then a run on a real dev server."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("temporalio")

from temporalio.testing import ActivityEnvironment

import flowcore
from flowcore import CallTool, RunAgent, RunTeam
from flowcore_handlers import Registry, Unauthorized, context
from flowcore_temporal._activities import FlowcoreActivities

from .support import running_host, unique

Effect = CallTool | RunAgent | RunTeam


def _hook(asked: list[tuple[str | None, str]]) -> Any:
    def authorize(principal: str | None, effect: Effect) -> bool | str | None:
        asked.append((principal, effect.idempotency_key))
        if isinstance(effect, CallTool) and effect.tool == "secret":
            if principal != "root":
                raise Unauthorized("only root reads the secret")
        return None

    return authorize


def test_the_activity_asks_the_hook_before_the_handler() -> None:
    asked: list[tuple[str | None, str]] = []
    ran: list[Any] = []

    def secret(call: CallTool) -> str:
        ran.append(call.idempotency_key)
        return "42"

    def peek(call: CallTool) -> Any:
        ctx = context()
        return {"step": ctx.step, "attempt": ctx.attempt, "principal": ctx.principal}

    activities = FlowcoreActivities(
        registry=Registry(tools={"secret": secret, "peek": peek}), authorize=_hook(asked)
    )
    env = ActivityEnvironment()

    async def work(tool: str, *context: Any) -> dict[str, Any]:
        wire = flowcore.effect_to_wire(CallTool(idempotency_key=f"test/{tool}#1", tool=tool))
        result: dict[str, Any] = await env.run(activities.work, wire, None, *context)
        return result

    refused = asyncio.run(work("secret", {"principal": "bob", "step": "secret"}))
    allowed = asyncio.run(work("secret", {"principal": "root"}))
    # From a workflow that sends no context (one started before it did): the
    # hook hears no principal, the handler's step and attempt come from its key.
    old = asyncio.run(work("peek"))
    assert ran == ["test/secret#1"]  # the refused call never reached its handler
    assert asked == [("bob", "test/secret#1"), ("root", "test/secret#1"), (None, "test/peek#1")]
    assert refused["kind"] == "effect-failed"
    assert refused["error"]["type"] == "unauthorized"
    assert refused["error"]["message"] == (
        "principal 'bob' may not call-tool 'secret': only root reads the secret"
    )
    assert refused["error"]["details"] == {
        "principal": "bob",
        "effect": "call-tool",
        "target": "secret",
        "reason": "only root reads the secret",
    }
    assert (allowed["kind"], allowed["output"]) == ("effect-succeeded", "42")
    assert old["output"] == {"step": "peek", "attempt": 1, "principal": None}


SPEC = """
flow: guarded
tools: {peek: {class: readonly}, secret: {class: readonly}}
steps:
  - {id: peek, call_tool: {tool: peek}}
  - {id: read, call_tool: {tool: secret}}
output: "${steps.read.output}"
"""


def test_a_refused_effect_fails_and_the_log_says_who_was_refused_what(
    temporal_address: str,
) -> None:
    asked: list[tuple[str | None, str]] = []
    ran: list[str] = []

    def tool(call: CallTool) -> str:
        ran.append(call.tool)
        return "ok"

    async def main() -> tuple[str, dict[str, Any], list[flowcore.Record]]:
        tools = Registry(tools={"peek": tool, "secret": tool})
        async with running_host(
            temporal_address, None, registry=tools, authorize=_hook(asked)
        ) as host:
            rid = await host.start(SPEC, None, unique("guarded"), principal="bob")
            status = await asyncio.wait_for(host.status(rid), timeout=60)
            while status["status"] == "running":
                await asyncio.sleep(0.05)
                status = await host.status(rid)
            return rid, status, await host.log(rid)

    rid, status, records = asyncio.run(main())
    assert status["status"] == "failed", status
    assert ran == ["peek"]  # the secret's handler never ran
    assert asked == [("bob", f"{rid}/peek#1"), ("bob", f"{rid}/read#1")]
    failed = [
        r.data for r in records if r.type == "event.reported" and r.data["kind"] == "effect-failed"
    ]
    assert [(f["idempotencyKey"], f["error"]["type"], f["error"]["details"]) for f in failed] == [
        (
            f"{rid}/read#1",
            "unauthorized",
            {
                "principal": "bob",
                "effect": "call-tool",
                "target": "secret",
                "reason": "only root reads the secret",
            },
        )
    ]
