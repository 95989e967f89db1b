"""run_subflow's parent_close and detached children on the local host (a real SQLite file).

Each child waits for a signal, so the test says when it ends: the runs'
rows, logs and ``show`` say what the host did with it meanwhile.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import flowcore
from flowcore_handlers import Registry
from flowcore_local import LocalHost

from ..local_helpers import settle, work_until

KID = """
flow: kid
tools: {echo: {class: readonly}}
steps:
  - {id: w, await_signal: {signal: finish}}
  - {id: e, call_tool: {tool: echo, input: "${steps.w.output}"}}
output: "${steps.e.output}"
"""


def race(policy: str) -> str:
    close = "detached: true" if policy == "detached" else f"parent_close: {policy}"
    return f"""
flow: parent
tools: {{echo: {{class: readonly}}}}
steps:
  - id: first
    parallel:
      mode: race
      branches:
        slow: [{{id: child, run_subflow: {{flow: kid, {close}}}}}]
        fast: [{{id: quick, call_tool: {{tool: echo, input: fast}}}}]
output: "${{steps.first.output}}"
"""


REGISTRY = Registry(tools={"echo": lambda call: {"echo": call.input}})


def run_host(tmp_path: Path, db: Path | str, body: Any) -> Any:
    kid = tmp_path / "kid.yaml"
    kid.write_text(KID)

    async def main() -> Any:
        async with LocalHost(db, registry=REGISTRY) as host:
            return await body(host, [kid])

    return asyncio.run(main())


async def status(host: LocalHost, run_id: str) -> str:
    return (await host.run(run_id)).status


def test_an_abandoned_child_runs_on_after_its_parent_settled(
    tmp_path: Path, local_db: Path | str
) -> None:
    async def body(host: LocalHost, flows: list[Path]) -> Any:
        rid = await host.start(race("abandon"), None, "p", flows=flows)
        parent = await settle(host, rid)
        child_then = await host.run("p/child#1")
        await host.signal("p/child#1", "finish", "late")
        child = await settle(host, "p/child#1")
        return parent, child_then, child, await host.export(rid), await host.show(rid)

    parent, child_then, child, log, info = run_host(tmp_path, local_db, body)
    assert (parent.status, parent.output) == ("completed", {"fast": {"echo": "fast"}})
    assert child_then.status == "running"  # not cancelled when the race was lost
    assert (child.status, child.output, child.parent_run) == ("completed", {"echo": "late"}, "p")
    assert info["children"] == ["p/child#1"]  # still its child, for lineage
    records = flowcore.decode_log(log).records
    # The parent's log holds nothing of the child's end: it had settled.
    assert [r.data["kind"] for r in records if r.type == "event.reported"] == ["effect-succeeded"]
    assert flowcore.replay(records, flowcore.parse_flow(race("abandon"))).status == "completed"


def test_a_waited_child_keeps_its_parent_from_settling_until_it_has(
    tmp_path: Path, local_db: Path | str
) -> None:
    async def body(host: LocalHost, flows: list[Path]) -> Any:
        rid = await host.start(race("wait"), None, "p", flows=flows)

        async def race_decided() -> bool:
            reported = [r for r in await host.records(rid) if r.type == "event.reported"]
            return bool(reported)  # the quick call's result: the race is over

        await work_until(host, race_decided)
        waiting = (await host.run(rid)).status, await host.show(rid)
        await host.signal("p/child#1", "finish", "done")
        parent = await settle(host, rid)
        return waiting, parent, await host.run("p/child#1"), await host.export(rid)

    (then, info), parent, child, log = run_host(tmp_path, local_db, body)
    assert then == "running"
    assert [p["key"] for p in info["pending"]] == ["p/child#1"]
    assert (parent.status, parent.output) == ("completed", {"fast": {"echo": "fast"}})
    assert child.status == "completed"
    records = flowcore.decode_log(log).records
    settled = [r for r in records if r.type == "effect.emitted" and r.data["kind"] == "settled"]
    (final,) = settled
    report = {row["idempotencyKey"]: row["status"] for row in final.data["report"]}
    assert report["p/child#1"] == "succeeded"
    assert flowcore.replay(records, flowcore.parse_flow(race("wait"))).status == "completed"


DETACHED = """
flow: parent
budget: {steps: 3}
steps:
  - {id: kick, run_subflow: {flow: kid, input: {n: 1}, detached: true}}
  - {id: hold, await_signal: {signal: never}}
output: "${steps.kick.output}"
"""


def test_a_detached_child_outlives_its_cancelled_parent_and_its_deletion(
    tmp_path: Path, local_db: Path | str
) -> None:
    async def body(host: LocalHost, flows: list[Path]) -> Any:
        rid = await host.start(DETACHED, None, "p", flows=flows)

        async def holding() -> bool:
            waiting: list[str] = (await host.show(rid))["waitingFor"]
            return waiting == ["never"]

        await work_until(host, holding)
        await host.cancel(rid, "no longer needed")
        parent = await host.run(rid)
        child_then = await host.run("p/kick#1")
        await host.signal("p/kick#1", "finish", "on its own")
        child = await settle(host, "p/kick#1")
        shown = await host.show(rid), await host.show("p/kick#1")
        deleted = await host.delete(rid)
        left = await host.run("p/kick#1")
        return parent, child_then, child, shown, deleted, left, await host.runs()

    parent, child_then, child, (info, kid_info), deleted, left, runs = run_host(
        tmp_path, local_db, body
    )
    assert parent.status == "cancelled"
    assert child_then.status == "running"  # the parent's cancel never reached it
    assert (child.status, child.output) == ("completed", {"echo": "on its own"})
    # A root run of its own: no parent, depth 0, its own flow's budget (not the 3 steps).
    assert (child.parent_run, child.depth, child.started_by) == (None, 0, "p")
    assert info["children"] == [] and info["detached"] == ["p/kick#1"]
    # The default budget of 1000 steps, one spent on its call.
    assert kid_info["startedBy"] == "p" and kid_info["budget"]["stepsLeft"] == 999
    assert deleted.runs == ["p"]
    assert left.status == "completed"
    assert [r.run_id for r in runs] == ["p/kick#1"]


# SQLite only, for the suite's time: many command processes, each opening the
# database (up to 3x slower on PostgreSQL on two busy cores); others run on both.
def test_the_cli_shows_where_a_detached_run_came_from_and_delete_leaves_it(
    tmp_path: Path,
) -> None:
    (tmp_path / "kid.yaml").write_text(KID)
    parent = tmp_path / "parent.yaml"
    parent.write_text(DETACHED.replace("  - {id: hold, await_signal: {signal: never}}\n", ""))
    tools = tmp_path / "tools.py"
    tools.write_text('TOOLS = {"echo": lambda call: call.input}\n')
    db = str(tmp_path / "cli.db")

    def fc(*args: str) -> str:
        proc = subprocess.run(
            [sys.executable, "-m", "flowcore_cli", *args, "--db", db],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
        return proc.stdout

    fc("run", str(parent), "--run-id", "p", "--tools", str(tools), "--json")
    assert "detached run: p/kick#1" in fc("show", "p", "--no-history")
    assert "started by: p (detached)" in fc("show", "p/kick#1", "--no-history")
    kid = json.loads(fc("show", "p/kick#1", "--json"))
    assert (kid["status"], kid["parent"], kid["startedBy"]) == ("running", None, "p")
    fc("delete", "p")
    assert [r["runId"] for r in json.loads(fc("runs", "--json"))] == ["p/kick#1"]


WAIT_ONLY = "flow: parent\nsteps:\n  - {id: child, run_subflow: {flow: kid, parent_close: wait}}\n"


def test_a_cancelled_parent_waits_for_its_child_and_a_second_cancel_stops_both(
    tmp_path: Path,
    local_db: Path | str,
) -> None:
    async def body(host: LocalHost, flows: list[Path]) -> Any:
        rid = await host.start(WAIT_ONLY, None, "p", flows=flows)

        async def child_waits() -> bool:
            if not await host.children(rid):
                return False
            waiting: list[str] = (await host.show("p/child#1"))["waitingFor"]
            return waiting == ["finish"]

        await work_until(host, child_waits)
        await host.cancel(rid, "first")
        after_first = await host.run(rid), await host.run("p/child#1")
        await host.cancel(rid, "second")
        parent = await host.run(rid)
        child = await settle(host, "p/child#1")
        return after_first, parent, child

    (parent_then, child_then), parent, child = run_host(tmp_path, local_db, body)
    assert (parent_then.status, child_then.status) == ("running", "running")
    assert parent.status == "cancelled" and parent.error["message"] == "second"
    assert (child.status, child.error["message"]) == (
        "cancelled",
        "the parent no longer waits for it",
    )
