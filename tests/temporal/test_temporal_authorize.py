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


REFUND = """
flow: refund
tools: {pay_back: {class: idempotent, needs_approval: true}}
steps:
  - {id: pay, call_tool: {tool: pay_back, input: {amount: "${input.amount}"}}}
"""


def test_a_denied_approval_names_the_principal_who_answered(temporal_address: str) -> None:
    def pay_back(call: CallTool) -> str:
        raise AssertionError("a denied call is never made")

    async def settled(host: Any, rid: str) -> dict[str, Any]:
        status = await asyncio.wait_for(host.status(rid), timeout=60)
        while status["status"] == "running":
            await asyncio.sleep(0.05)
            status = await host.status(rid)
        return dict(status)

    async def waiting(host: Any, rid: str) -> None:
        for _ in range(1200):
            if await host.open_questions(rid):
                return
            await asyncio.sleep(0.05)
        raise AssertionError("the approval was never asked")

    async def main() -> tuple[str, dict[str, Any], dict[str, Any], list[flowcore.Record]]:
        async with running_host(
            temporal_address, None, registry=Registry(tools={"pay_back": pay_back})
        ) as host:
            by_alice = await host.start(REFUND, {"amount": 250}, unique("refund"))
            by_no_one = await host.start(REFUND, {"amount": 5}, unique("refund"))
            for rid in (by_alice, by_no_one):
                await waiting(host, rid)
            await host.answer(by_alice, f"{by_alice}/pay#1/approval", "deny", principal="alice")
            await host.answer(by_no_one, f"{by_no_one}/pay#1/approval", "deny")
            return (
                by_alice,
                await settled(host, by_alice),
                await settled(host, by_no_one),
                await host.log(by_alice),
            )

    rid, alice, no_one, records = asyncio.run(main())
    assert alice["status"] == no_one["status"] == "failed"
    assert alice["error"]["type"] == "approval-denied"
    assert alice["error"]["details"] == {
        "tool": "pay_back",
        "input": {"amount": 250},
        "answer": "deny",
        "principal": "alice",
    }
    assert no_one["error"]["details"] == {
        "tool": "pay_back",
        "input": {"amount": 5},
        "answer": "deny",
    }
    (answered,) = [
        r.data for r in records if r.type == "event.reported" and r.data["kind"] == "human-answered"
    ]
    assert (
        answered["principal"] == "alice" and answered["idempotencyKey"] == f"{rid}/pay#1/approval"
    )
