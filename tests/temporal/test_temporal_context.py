"""A handler's context on Temporal (``flowcore_handlers.context()``, specs/temporal.md):
every field the local host gives, sent by the workflow with the activity, and
what a handler asks of its run (schedule, cancel, list, signal) through the
Temporal host's own operations on the worker's client. A real dev server and
worker; the ``remind_me`` example of specs/examples runs here as on the local host."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec

import flowcore
from flowcore import CallTool
from flowcore_handlers import HandlerError, OutcomeUnknown, Registry, context

from .support import EXAMPLES, running_host, unique

FIELDS = (
    "run_id",
    "root_run_id",
    "idempotency_key",
    "step",
    "attempt",
    "execution_class",
    "principal",
    "flow_id",
    "flow_version",
    "budget_remaining",
    "deadline_ms",
)

SPEC = """
flow: ctx
budget: {steps: 40}
tools: {fetch: {class: idempotent}}
steps:
  - id: fetch
    call_tool: {tool: fetch}
    retry: {max_attempts: 2, initial_interval_ms: 0}
    timeout_ms: 600000
  - id: child
    run_subflow: {flow: kid}
output: "${ {fetch: steps.fetch.output, child: steps.child.output} }"
"""

KID = """
flow: kid
tools: {where: {class: readonly}}
steps:
  - {id: look, call_tool: {tool: where}}
output: "${steps.look.output}"
"""


def _fields() -> dict[str, Any]:
    ctx = context()
    return {name: msgspec.to_builtins(getattr(ctx, name)) for name in FIELDS}


def test_the_context_has_every_field(temporal_address: str) -> None:
    def fetch(call: CallTool) -> Any:
        if context().attempt == 1:
            raise HandlerError("again", retryable=True)
        return _fields()

    async def main() -> tuple[str, dict[str, Any]]:
        tools = Registry(tools={"fetch": fetch, "where": lambda call: _fields()})
        async with running_host(temporal_address, None, registry=tools) as host:
            rid = await host.start(SPEC, None, unique("ctx"), flows={"kid": KID}, principal="ana")
            return rid, await asyncio.wait_for(host.result(rid), timeout=120)

    rid, result = asyncio.run(main())
    assert result["status"] == "completed", result
    fetched, child = result["output"]["fetch"], result["output"]["child"]
    deadline, budget = fetched.pop("deadline_ms"), fetched.pop("budget_remaining")
    assert fetched == {
        "run_id": rid,
        "root_run_id": rid,
        "idempotency_key": f"{rid}/fetch#2",
        "step": "fetch",
        "attempt": 2,
        "execution_class": "idempotent",
        "principal": "ana",
        "flow_id": "ctx",
        "flow_version": flowcore.parse_flow(SPEC).spec_hash,
    }
    # The step's timeout, on the run's clock; the run's ledger: 40 steps, a few spent.
    assert isinstance(deadline, int) and deadline > 0
    assert 30 < budget["steps"] < 40
    # A child run's work: its own run, the root above it, the principal it inherited.
    kid = f"{rid}/child#1"
    assert {k: child[k] for k in ("run_id", "root_run_id", "principal", "flow_id")} == {
        "run_id": kid,
        "root_run_id": rid,
        "principal": "ana",
        "flow_id": "kid",
    }
    assert (child["step"], child["execution_class"], child["deadline_ms"]) == (
        "look",
        "readonly",
        None,
    )


def test_remind_me_schedules_a_reminder_that_signals_its_own_run(temporal_address: str) -> None:
    spec = (EXAMPLES / "remind_me.yaml").read_text()

    async def main() -> tuple[str, dict[str, Any], list[flowcore.Record]]:
        async with running_host(temporal_address, EXAMPLES / "remind_me_tools.py") as host:
            rid = await host.start(spec, {"text": "stretch", "delay_ms": 50}, unique("remind"))
            result = await asyncio.wait_for(host.result(rid), timeout=120)
            return rid, result, await host.log(rid)

    rid, result, records = asyncio.run(main())
    assert result["status"] == "completed", result
    assert result["output"]["reminder"].startswith(f"{rid}/~scheduled-r")
    assert result["output"]["sent"] == {"text": "stretch"}
    # The log says who asked: the request names the handler's key and its order.
    asked = [r.data for r in records if r.type == "event.reported"]
    adds = [a for a in asked if a["kind"] == "scheduled-add-requested"]
    assert [a.get("request") for a in adds] == [f"{rid}/ask#1#1"]
    signals = [a for a in asked if a["kind"] == "signal-received"]
    assert [s["payload"] for s in signals] == [{"text": "stretch"}]
    report = flowcore.replay(flowcore.encode_records(records), flowcore.parse_flow(spec))
    assert report.divergence is None


RERUN_SPEC = """
flow: rerun
tools:
  plan: {class: idempotent}
  nudge: {class: idempotent, schedulable: true}
steps:
  - id: plan
    call_tool: {tool: plan}
output: "${steps.plan.output}"
"""


def test_a_handler_run_again_with_its_key_schedules_nothing_twice(temporal_address: str) -> None:
    runs: list[str] = []

    async def plan(call: CallTool) -> Any:  # an async handler: the a-prefixed calls
        ctx = context()
        ids = [await ctx.aschedule("nudge", {"n": n}, delay_ms=3_600_000) for n in (1, 2)]
        runs.append(ctx.idempotency_key)
        if len(runs) == 1:
            raise OutcomeUnknown("the connection broke after the work was done")
        gone = await ctx.acancel_scheduled(ids[1])
        again = await ctx.acancel_scheduled(ids[1])
        listed = [(c.id, c.status) for c in await ctx.ascheduled()]
        return {"ids": ids, "gone": gone, "again": again, "listed": listed}

    async def main() -> tuple[str, dict[str, Any], list[flowcore.Record]]:
        tools = Registry(tools={"plan": plan, "nudge": lambda call: None})
        async with running_host(temporal_address, None, registry=tools) as host:
            rid = await host.start(RERUN_SPEC, None, unique("rerun"))
            result = await asyncio.wait_for(host.result(rid), timeout=120)
            return rid, result, await host.log(rid)

    rid, result, records = asyncio.run(main())
    assert result["status"] == "completed", result
    # The same key twice: the handler ran twice and asked for the same two calls.
    assert runs == [f"{rid}/plan#1"] * 2
    out = result["output"]
    ids = out["ids"]
    assert len(set(ids)) == 2
    assert (out["gone"], out["again"]) == (True, False)
    assert sorted(map(tuple, out["listed"])) == sorted([(ids[0], "pending"), (ids[1], "cancelled")])
    asked = [
        r.data["request"]
        for r in records
        if r.type == "event.reported" and r.data["kind"] == "scheduled-add-requested"
    ]
    assert asked == [f"{rid}/plan#1#1", f"{rid}/plan#1#2"] * 2
    added = [
        r.data for r in records if r.type == "scheduled.changed" and r.data["status"] == "pending"
    ]
    assert sorted(a["id"] for a in added) == sorted(ids)
