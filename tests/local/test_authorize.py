"""The local host's authorization hook (specs/local.md, "Authorization"):
``LocalHost(authorize=fn)`` asks ``fn(principal, effect)`` before running a
handler; a refusal fails the effect with ``unauthorized``, the handler never
runs, a ``catch`` takes it, and the log says who was refused what."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

from flowcore import CallTool, RunAgent, RunTeam
from flowcore_handlers import Registry
from flowcore_local import Authorize, LocalHost, Unauthorized

CALLS: Counter[str] = Counter()


def pay(call: CallTool) -> str:
    CALLS[call.idempotency_key] += 1
    return "paid"


def note(call: CallTool) -> Any:
    CALLS[call.idempotency_key] += 1
    return call.input


REGISTRY = Registry(tools={"pay": pay, "note": note})

FLOW = """
flow: guarded
tools: {pay: {class: idempotent}, note: {class: idempotent}}
steps:
  - id: guard
    try:
      - {id: charge, call_tool: {tool: pay, input: {amount: 5}}}
    catch:
      - errors: [unauthorized]
        steps:
          - {id: tell, call_tool: {tool: note, input: "${error.details}"}}
output: "${steps.guard.output}"
"""


def run(db: Path, authorize: Authorize, flow: str = FLOW) -> tuple[Any, list[Any], list[Any]]:
    CALLS.clear()

    async def main() -> tuple[Any, list[Any], list[Any]]:
        async with LocalHost(db, registry=REGISTRY, authorize=authorize) as host:
            rid = await host.start(flow, None, "r1", principal="ana")
            await host.work(until_settled=rid)
            row = await host.run(rid)
            log = [r async for r in host.events(rid)]
            return row, log, (await host.show(rid))["failures"]

    return asyncio.run(main())


def only_notes(principal: str | None, effect: CallTool | RunAgent | RunTeam) -> str | None:
    if isinstance(effect, CallTool) and effect.tool == "pay":
        return f"{principal} may not pay"
    return None


def test_a_refused_call_is_not_run_and_a_catch_takes_unauthorized(tmp_path: Path) -> None:
    row, log, failures = run(tmp_path / "a.db", only_notes)
    assert CALLS == {"r1/tell#1": 1}  # pay never ran
    details = {
        "principal": "ana",
        "effect": "call-tool",
        "target": "pay",
        "reason": "ana may not pay",
    }
    assert row.status == "completed" and row.output == details
    # The log says who was refused what: the reported failure of the call.
    (refused,) = [
        r.data
        for r in log
        if r.type == "event.reported" and r.data.get("idempotencyKey") == "r1/charge#1"
    ]
    assert refused["kind"] == "effect-failed"
    assert refused["error"] == {
        "type": "unauthorized",
        "message": "principal 'ana' may not call-tool 'pay': ana may not pay",
        "details": details,
    }
    assert [(f["key"], f["type"], f["traceback"]) for f in failures] == [
        ("r1/charge#1", "unauthorized", None)
    ]


def test_an_async_hook_raising_unauthorized_refuses(tmp_path: Path) -> None:
    seen: list[tuple[str | None, str]] = []

    async def hook(principal: str | None, effect: CallTool | RunAgent | RunTeam) -> bool:
        seen.append((principal, effect.idempotency_key))
        if isinstance(effect, CallTool) and effect.tool == "pay":
            raise Unauthorized("payments are closed")
        return True

    row, _, _ = run(tmp_path / "b.db", hook)
    assert seen == [("ana", "r1/charge#1"), ("ana", "r1/tell#1")]
    assert CALLS == {"r1/tell#1": 1}
    assert row.output["reason"] == "payments are closed"


def test_allowed_calls_run_as_always(tmp_path: Path) -> None:
    row, _, failures = run(tmp_path / "c.db", lambda principal, effect: None)
    assert CALLS == {"r1/charge#1": 1}
    assert row.status == "completed" and row.output == "paid" and failures == []


def test_a_hook_that_fails_refuses_and_keeps_its_traceback(tmp_path: Path) -> None:
    def broken(principal: str | None, effect: CallTool | RunAgent | RunTeam) -> None:
        raise KeyError("no policy")

    flow = FLOW.replace("errors: [unauthorized]", "errors: [nothing]")
    row, _, failures = run(tmp_path / "d.db", broken, flow)
    assert CALLS == {}  # fails closed
    assert row.status == "failed"
    assert row.error["type"] == "unauthorized"
    assert "the authorize hook raised KeyError" in row.error["message"]
    (failure,) = failures
    assert failure["type"] == "unauthorized" and "KeyError" in failure["traceback"]
