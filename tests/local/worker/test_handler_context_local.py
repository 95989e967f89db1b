"""A handler's context on the local host (``flowcore_handlers.context()``).

Every run here is a real ``LocalHost`` on a real SQLite file, its handlers
from a tools module on disk: the context's fields are checked against what the
run's own row and log say (run id, key, step, attempt 2 after a retry,
principal, flow, budget, deadline), a tool schedules a reminder that later
signals its own run (the ``remind_me`` example of specs/examples), and a
handler run again with the same key (an idempotent tool whose outcome was
unknown) schedules nothing twice.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

import flowcore
from flowcore_handlers import ContextError, HandlerContext, NoHandlerContext, context
from flowcore_local import LocalHost

from ..local_helpers import journal, settle, tools_file

EXAMPLES = Path(__file__).resolve().parents[3] / "specs" / "examples"

FIELDS = """
import asyncio
import msgspec
from flowcore_handlers import HandlerError, context


def fields(ctx):
    return {{
        name: msgspec.to_builtins(getattr(ctx, name))
        for name in ("run_id", "root_run_id", "idempotency_key", "step", "attempt",
                     "execution_class", "principal", "flow_id", "flow_version",
                     "budget_remaining", "deadline_ms")
    }}


def flaky(call):
    ctx = context()
    with open({journal!r}, "a") as out:
        out.write(ctx.idempotency_key + "\\n")
    if ctx.attempt == 1:
        raise HandlerError("try-again", "first attempt", retryable=True)
    assert ctx is context()  # one context per attempt
    return fields(ctx)


async def on_loop(call):
    ctx = context()
    try:
        ctx.scheduled()
    except Exception as exc:
        sync_error = type(exc).__name__
    await asyncio.sleep(0)
    return {{"fields": fields(context()), "scheduled": len(await ctx.ascheduled()),
             "sync_error": sync_error}}


TOOLS = {{"flaky": flaky, "on_loop": on_loop}}
"""

FIELDS_SPEC = """
flow: ctx_fields
budget: {steps: 40, cost_minor_units: 500}
tools:
  flaky: {class: idempotent}
  on_loop: {class: readonly}
steps:
  - id: fetch
    call_tool: {tool: flaky}
    retry: {max_attempts: 3, initial_interval_ms: 1}
    timeout_ms: 3600000
  - id: look
    call_tool: {tool: on_loop}
output: "${ {fetch: steps.fetch.output, look: steps.look.output} }"
"""


def test_context_outside_a_handler_is_a_typed_error() -> None:
    with pytest.raises(NoHandlerContext, match="only available inside a running handler"):
        context()
    bare = HandlerContext(run_id=None, idempotency_key="k")
    with pytest.raises(ContextError, match="does not offer it"):
        bare.schedule("t")


def test_fields_are_the_runs_own_after_a_retry_and_on_the_loop(
    tmp_path: Path, local_db: Path | str
) -> None:
    asyncio.run(_fields_are_the_runs_own_after_a_retry_and_on_the_loop(tmp_path, local_db))


async def _fields_are_the_runs_own_after_a_retry_and_on_the_loop(
    tmp_path: Path, db: Path | str
) -> None:
    tools = tools_file(tmp_path, "ctx_tools", FIELDS)
    async with LocalHost(db, str(tools)) as host:
        run_id = await host.start(FIELDS_SPEC, {}, "ctx-1", principal="ana")
        row = await settle(host, run_id)
        assert row.status == "completed", row.error
        records = await host.records(run_id)
    fetch = row.output["fetch"]
    deadline = fetch.pop("deadline_ms")
    budget = fetch.pop("budget_remaining")
    assert fetch == {
        "run_id": "ctx-1",
        "root_run_id": "ctx-1",
        "idempotency_key": "ctx-1/fetch#2",
        "step": "fetch",
        "attempt": 2,
        "execution_class": "idempotent",
        "principal": "ana",
        "flow_id": "ctx_fields",
        "flow_version": row.spec_hash,
    }
    assert journal(tmp_path) == {"ctx-1/fetch#1": 1, "ctx-1/fetch#2": 1}
    # The step's timeout: an hour from when the step began, as the run's timer says.
    timers = [r.data for r in records if r.type == "effect.emitted"]
    assert deadline == next(
        e["untilMs"] for e in timers if e.get("idempotencyKey") == "ctx-1/fetch/timeout"
    )
    # Every limit: one step spent by the first attempt's issue, one by the second's.
    assert budget["costMinorUnits"] == 500 and budget["steps"] == 38
    look = row.output["look"]
    assert look["sync_error"] == "ContextError" and look["scheduled"] == 0
    assert look["fields"]["idempotency_key"] == "ctx-1/look#1"
    assert look["fields"]["execution_class"] == "readonly"
    assert look["fields"]["deadline_ms"] is None and look["fields"]["attempt"] == 1


def test_remind_me_schedules_a_reminder_that_signals_its_own_run(
    tmp_path: Path, local_db: Path | str
) -> None:
    asyncio.run(_remind_me_schedules_a_reminder_that_signals_its_own_run(tmp_path, local_db))


async def _remind_me_schedules_a_reminder_that_signals_its_own_run(
    tmp_path: Path, db: Path | str
) -> None:
    db = db
    spec = EXAMPLES / "remind_me.yaml"
    async with LocalHost(db, str(EXAMPLES / "remind_me_tools.py")) as host:
        run_id = await host.start(spec, {"text": "stretch", "delay_ms": 50}, "remind-1")
        row = await settle(host, run_id)
        assert row.status == "completed", row.error
        calls = await host.scheduled(run_id)
        records = await host.records(run_id)
    sid = row.output["reminder"]
    assert sid.startswith("remind-1/~scheduled-r")
    assert row.output["sent"] == {"text": "stretch"}
    # The signal ended the run's wait while the call that sent it was still out:
    # the run settled without waiting for its end, so the call is listed uncertain.
    assert [(c.id, c.tool, c.status, c.outside) for c in calls] == [
        (sid, "send_reminder", "uncertain", True)
    ]
    # The log says who asked: the request names the handler's key and its order.
    asked = [r.data for r in records if r.type == "event.reported"]
    assert [a.get("request") for a in asked if a["kind"] == "scheduled-add-requested"] == [
        "remind-1/ask#1#1"
    ]
    signals = [a for a in asked if a["kind"] == "signal-received"]
    assert [s["payload"] for s in signals] == [{"text": "stretch"}]
    report = flowcore.replay(
        flowcore.encode_records(records), flowcore.parse_flow(spec.read_text())
    )
    assert report.divergence is None


RERUN = """
from flowcore_handlers import OutcomeUnknown, context


def plan(call):
    ctx = context()
    ids = [ctx.schedule("nudge", {{"n": n}}, delay_ms=3_600_000) for n in (1, 2)]
    with open({journal!r}, "a") as out:
        out.write(ctx.idempotency_key + "\\n")
    if len(open({journal!r}).read().split()) == 1:
        raise OutcomeUnknown("the connection broke after the work was done")
    gone = ctx.cancel_scheduled(ids[1])
    refused = []
    for tool, when in (("plan", {{}}), ("nudge", {{"delay_ms": -1}}),
                       ("nudge", {{"delay_ms": 1, "at_ms": 2}})):
        try:
            ctx.schedule(tool, **when)
        except Exception as exc:
            refused.append(type(exc).__name__ + ": " + str(exc))
    return {{"ids": ids, "gone": gone, "again": ctx.cancel_scheduled(ids[1]),
             "listed": [(c.id, c.status) for c in ctx.scheduled()], "refused": refused}}


def nudge(call):
    return None


TOOLS = {{"plan": plan, "nudge": nudge}}
"""

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


def test_a_handler_run_again_with_its_key_schedules_nothing_twice(
    tmp_path: Path, local_db: Path | str
) -> None:
    asyncio.run(_a_handler_run_again_with_its_key_schedules_nothing_twice(tmp_path, local_db))


async def _a_handler_run_again_with_its_key_schedules_nothing_twice(
    tmp_path: Path, db: Path | str
) -> None:
    tools = tools_file(tmp_path, "rerun_tools", RERUN)
    async with LocalHost(db, str(tools)) as host:
        run_id = await host.start(RERUN_SPEC, {}, "re-1")
        row = await settle(host, run_id)
        assert row.status == "completed", row.error
        calls = await host.scheduled(run_id)
        records = await host.records(run_id)
    # The same key twice: the handler ran twice and asked for the same two calls.
    assert journal(tmp_path) == {"re-1/plan#1": 2}
    ids = row.output["ids"]
    assert len(set(ids)) == 2
    assert (row.output["gone"], row.output["again"]) == (True, False)
    # Bad requests are typed errors in the handler, naming what is wrong.
    assert row.output["refused"] == [
        "HostError: tool 'plan' is not declared schedulable in flow 'rerun':"
        " the schedulable tools are 'nudge'",
        "ContextError: schedule: delay_ms must be an integer >= 0, not -1",
        "ContextError: schedule: give delay_ms or at_ms, not both",
    ]
    assert sorted(row.output["listed"]) == sorted([[ids[0], "pending"], [ids[1], "cancelled"]])
    # A settled run cancels its pending calls; there were only ever two.
    assert sorted(c.id for c in calls) == sorted(ids)
    asked = [
        r.data["request"]
        for r in records
        if r.type == "event.reported" and r.data["kind"] == "scheduled-add-requested"
    ]
    assert asked == ["re-1/plan#1#1", "re-1/plan#1#2"] * 2
    added = [
        r.data for r in records if r.type == "scheduled.changed" and r.data["status"] == "pending"
    ]
    assert sorted(a["id"] for a in added) == sorted(ids)
    assert json.loads(json.dumps(row.output))  # plain JSON data


CHILD_TOOLS = """
from flowcore_handlers import context


def where(call):
    ctx = context()
    return {{"run": ctx.run_id, "root": ctx.root_run_id, "principal": ctx.principal,
             "flow": ctx.flow_id}}


TOOLS = {{"where": where}}
"""

PARENT = """
flow: parent
steps:
  - id: sub
    run_subflow: {flow: child}
output: "${steps.sub.output}"
"""

CHILD = """
flow: child
tools: {where: {class: readonly}}
steps:
  - id: w
    call_tool: {tool: where}
output: "${steps.w.output}"
"""


def test_a_child_runs_handler_knows_its_root_and_inherited_principal(tmp_path: Path) -> None:
    asyncio.run(_child_runs_handler(tmp_path))


async def _child_runs_handler(tmp_path: Path) -> None:
    tools = tools_file(tmp_path, "child_tools", CHILD_TOOLS)
    child = tmp_path / "child.yaml"
    child.write_text(CHILD)
    async with LocalHost(tmp_path / "child.db", str(tools)) as host:
        run_id = await host.start(PARENT, {}, "top", flows=[str(child)], principal="bo")
        row = await settle(host, run_id)
    assert row.status == "completed", row.error
    out = row.output
    assert out["run"] != "top" and out["run"].startswith("top/")
    assert (out["root"], out["principal"], out["flow"]) == ("top", "bo", "child")
