"""run_subflow's parent_close and detached children on a real Temporal dev server.

Each child is a child workflow that waits for a signal, so the test says when
it ends; Temporal's own view of the workflows (running or closed) says what
the host did with it meanwhile.
"""

from __future__ import annotations

import asyncio

import flowcore_temporal as ft

from .support import eventually, running_host, unique, waiting_for

KID = """
flow: kid
tools: {echo: {class: readonly}}
steps:
  - {id: w, await_signal: {signal: finish}}
  - {id: e, call_tool: {tool: echo, input: "${steps.w.output}"}}
output: "${steps.e.output}"
"""
FLOWS = {"kid": KID}


def race(policy: str) -> str:
    return f"""
flow: parent
tools: {{echo: {{class: readonly}}}}
steps:
  - id: first
    parallel:
      mode: race
      branches:
        slow: [{{id: child, run_subflow: {{flow: kid, parent_close: {policy}}}}}]
        fast: [{{id: quick, call_tool: {{tool: echo, input: {{value: fast}}}}}}]
output: "${{steps.first.output}}"
"""


DETACHED = """
flow: parent
budget: {steps: 3}
steps:
  - {id: kick, run_subflow: {flow: kid, detached: true}}
  - {id: hold, await_signal: {signal: never}}
output: "${steps.kick.output}"
"""


async def waiting_for_child(host: ft.TemporalHost, kid: str) -> None:
    """Until the child workflow exists and waits for its signal ``finish``."""

    async def check() -> bool:
        try:
            return "finish" in (await host.status(kid)).get("waitingFor", [])
        except ft.TemporalHostError:  # not started yet
            return False

    await eventually(check, f"{kid} to wait for finish")


async def temporal_status(host: ft.TemporalHost, workflow_id: str) -> str:
    return str((await host.status(workflow_id))["temporal"])


def test_abandon_wait_and_detached_children(temporal_address: str) -> None:
    async def abandon(host: ft.TemporalHost) -> None:
        rid = await host.start(race("abandon"), None, unique("abandon"), flows=FLOWS)
        kid = f"{rid}/child#1"
        result = await host.result(rid)
        assert (result["status"], result["output"]) == ("completed", {"fast": "fast"})
        # ParentClosePolicy.ABANDON: the child outlives its closed parent.
        assert await temporal_status(host, kid) == "RUNNING"
        await waiting_for(host, kid, "finish")
        await host.signal(kid, "finish", "late")
        child = await host.result(kid)
        assert (child["status"], child["output"]) == ("completed", "late")

    async def wait(host: ft.TemporalHost) -> None:
        rid = await host.start(race("wait"), None, unique("wait"), flows=FLOWS)
        kid = f"{rid}/child#1"

        async def race_over() -> bool:
            records = await host.records(rid)
            return any(r.type == "event.reported" for r in records)

        await eventually(race_over, f"{rid} to hear from its quick call")
        status = await host.status(rid)
        assert status["temporal"] == "RUNNING" and status["status"] == "running"
        assert [p["key"] for p in status["pending"]] == [kid]
        await waiting_for(host, kid, "finish")
        await host.signal(kid, "finish", "done")
        result = await host.result(rid)
        assert (result["status"], result["output"]) == ("completed", {"fast": "fast"})
        report = {row["idempotencyKey"]: row["status"] for row in result["report"]}
        assert report[kid] == "succeeded"

    async def detached(host: ft.TemporalHost) -> None:
        rid = await host.start(DETACHED, None, unique("detached"), flows=FLOWS)
        kid = f"{rid}/kick#1"
        await waiting_for(host, rid, "never")
        await host.cancel(rid, "no longer needed")
        result = await host.result(rid)
        assert result["status"] == "cancelled"
        assert await temporal_status(host, kid) == "RUNNING"  # the cancel never reached it
        await waiting_for(host, kid, "finish")
        await host.signal(kid, "finish", "on its own")
        child = await host.result(kid)
        assert (child["status"], child["output"]) == ("completed", "on its own")
        started = (await host.records(kid))[0]
        # A root run of its own: depth 0 and its own flow's budget, not the parent's 3 steps.
        assert (started.data["depth"], started.data["budget"]) == (0, None)
        parent = [r.data for r in await host.records(rid) if r.type == "event.reported"]
        assert parent[0]["kind"] == "effect-succeeded"
        assert parent[0]["output"] == {"run_id": kid}

    async def cancelled_waits(host: ft.TemporalHost) -> None:
        spec = "flow: p\nsteps:\n  - {id: child, run_subflow: {flow: kid, parent_close: wait}}\n"
        rid = await host.start(spec, None, unique("cancelled"), flows=FLOWS)
        kid = f"{rid}/child#1"

        async def child_started() -> bool:
            status = await host.status(rid)
            return [p["key"] for p in status.get("pending", [])] == [kid]

        await eventually(child_started, f"{rid} to start its child")
        await waiting_for_child(host, kid)
        await host.cancel(rid, "stop")

        async def cancel_applied() -> bool:
            records = await host.records(rid)
            return any(r.data.get("kind") == "cancel-requested" for r in records)

        await eventually(cancel_applied, f"{rid} to apply its cancel")
        assert (await host.status(rid))["temporal"] == "RUNNING"  # it waits for its child
        await host.signal(kid, "finish", "done")
        result = await host.result(rid)
        assert (result["status"], result["error"]["message"]) == ("cancelled", "stop")
        assert (await host.result(kid))["status"] == "completed"

    async def main() -> None:
        async with running_host(temporal_address) as host:
            await asyncio.gather(abandon(host), wait(host), detached(host), cancelled_waits(host))

    asyncio.run(main())
