"""Deploys that never break a run in flight, on a real dev server.

Runs pin their spec by hash; the worker serves every version in its folder of
specs. Deploying version 2 leaves version-1 runs on version 1; one run is
moved to version 2 after its log replays against it, another is refused (it
is past the point where the versions part), through the API and the command;
a worker that lacks the version a run pins fails that run's workflow tasks
with an error naming the spec, and the run goes on once the spec is deployed.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("temporalio", reason="the Temporal host tests need temporalio (.[dev])")

import flowcore
import flowcore_temporal as ft

from .support import TOOLS, eventually, unique, waiting_for

V1 = """
flow: order
version: 1
tools: {echo: {class: idempotent}}
steps:
  - {id: reserve, call_tool: {tool: echo, input: {value: reserved}}}
  - {id: go, await_signal: {signal: go}}
  - {id: charge, call_tool: {tool: echo, input: {value: charged}}}
  - {id: done, await_signal: {signal: done}}
output: "${ {charge: steps.charge.output} }"
"""

# Version 2 notifies before it charges.
V2 = """
flow: order
version: 2
tools: {echo: {class: idempotent}}
steps:
  - {id: reserve, call_tool: {tool: echo, input: {value: reserved}}}
  - {id: go, await_signal: {signal: go}}
  - {id: notify, call_tool: {tool: echo, input: {value: notified}}}
  - {id: charge, call_tool: {tool: echo, input: {value: charged}}}
  - {id: done, await_signal: {signal: done}}
output: "${ {charge: steps.charge.output, notify: steps.notify.output} }"
"""

V3 = V2.replace("version: 2", "version: 3").replace("notified", "notified again")


def _cli(address: str, queue: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flowcore_temporal", *args, "--address", address],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "FLOWCORE_TEMPORAL_TASK_QUEUE": queue},
    )


def test_a_deploy_leaves_runs_on_their_version_and_moves_one_after_the_check(
    temporal_address: str, tmp_path: Path
) -> None:
    deploy = tmp_path / "deploy"
    (deploy / "v1").mkdir(parents=True)
    (deploy / "v1" / "order.yaml").write_text(V1)
    queue = unique("versions")

    async def main() -> dict[str, Any]:
        client = await ft.connect(temporal_address)
        registry = ft.SpecRegistry(deploy, rescan_s=0.5)
        worker = ft.new_worker(client, task_queue=queue, tools=str(TOOLS), specs=registry)
        async with worker:
            host = ft.TemporalHost(client, queue)
            runs = [unique(f"order-{name}") for name in ("moved", "refused", "stays")]
            for rid in runs:
                await host.start(V1, None, rid, by_hash=True)
                await waiting_for(host, rid, "go")
            moved, refused, _ = runs
            await host.signal(refused, "go")
            await waiting_for(host, refused, "done")
            # Version 2 is deployed beside version 1.
            (deploy / "v2").mkdir()
            (deploy / "v2" / "order.yaml").write_text(V2)
            fresh = await host.start(V2, None, unique("order-fresh"), by_hash=True)
            checked = await host.upgrade(moved, deploy / "v2" / "order.yaml", dry_run=True)
            assert checked.changed and (await host.status(moved))["version"] == 1
            made = await host.upgrade(moved, deploy / "v2" / "order.yaml")
            status = await host.status(moved)
            with pytest.raises(flowcore.UpgradeRefused) as refusal:
                await host.upgrade(refused, V2)
            again = await host.upgrade(moved, V2)  # on version 2 already
            for rid in (*runs, fresh):
                if rid != refused:
                    await host.signal(rid, "go")
                await waiting_for(host, rid, "done")
                await host.signal(rid, "done")
            results = {rid: await host.result(rid) for rid in (*runs, fresh)}
            log = await host.log(moved)
        return {
            "runs": runs,
            "fresh": fresh,
            "made": made,
            "status": status,
            "refusal": refusal.value,
            "again": again,
            "results": results,
            "log": log,
        }

    got = asyncio.run(main())
    moved, refused, stays = got["runs"]
    results = got["results"]
    assert got["made"].changed and got["made"].version == 2
    assert got["status"]["version"] == 2
    assert got["status"]["specHash"] == flowcore.parse_flow(V2).spec_hash
    assert not got["again"].changed
    # Moved: version 2 from the signal on (notify ran, then charge).
    assert results[moved]["output"] == {"charge": "charged", "notify": "notified"}
    # A new run of version 2, and the runs that stayed: version 1 to the end.
    assert results[got["fresh"]]["output"] == {"charge": "charged", "notify": "notified"}
    assert results[stays]["output"] == {"charge": "charged"}
    assert results[refused]["output"] == {"charge": "charged"}
    # Refused: where version 2 parts ways (charge recorded, notify new).
    refusal = got["refusal"]
    assert refusal.reason == "diverged"
    assert refusal.expected["idempotencyKey"].endswith("/charge#1")
    assert refusal.actual["idempotencyKey"].endswith("/notify#1")
    # The moved run's log replays against version 2, not version 1.
    assert flowcore.replay(got["log"], flowcore.parse_flow(V2)).ok
    with pytest.raises(flowcore.ReplayDivergence):
        flowcore.replay(got["log"], flowcore.parse_flow(V1))


def test_the_upgrade_command_moves_a_run_or_prints_why_not(
    temporal_address: str, tmp_path: Path
) -> None:
    v1, v2 = tmp_path / "v1.yaml", tmp_path / "v2.yaml"
    v1.write_text(V1)
    v2.write_text(V2)
    queue = unique("upgrade-cli")

    async def start() -> tuple[str, str]:
        client = await ft.connect(temporal_address)
        host = ft.TemporalHost(client, queue)
        ok, past = unique("order-ok"), unique("order-past")
        for rid in (ok, past):
            await host.start(v1, None, rid)
            await waiting_for(host, rid, "go")
        await host.signal(past, "go")
        await waiting_for(host, past, "done")
        return ok, past

    async def serve(body: Any) -> Any:
        client = await ft.connect(temporal_address)
        async with ft.new_worker(client, task_queue=queue, tools=str(TOOLS)):
            ok, past = await start()
            return ok, past, await asyncio.to_thread(body, ok, past)

    def commands(ok: str, past: str) -> dict[str, Any]:
        return {
            "dry": _cli(temporal_address, queue, "upgrade", ok, "--to", str(v2), "--dry-run"),
            "moved": _cli(temporal_address, queue, "upgrade", ok, "--to", str(v2), "--json"),
            "refused": _cli(temporal_address, queue, "upgrade", past, "--to", str(v2)),
            "bad": _cli(temporal_address, queue, "upgrade", "no-such-run", "--to", str(v2)),
        }

    ok, past, out = asyncio.run(serve(commands))
    assert out["dry"].returncode == 0, out["dry"].stderr
    assert f"run {ok} can move from version 1" in out["dry"].stdout
    assert "(dry run: nothing changed)" in out["dry"].stdout
    assert out["moved"].returncode == 0, out["moved"].stderr
    moved = json.loads(out["moved"].stdout)
    assert moved["moved"] and moved["to"]["version"] == 2 and moved["from"]["version"] == 1
    assert out["refused"].returncode == 1, out["refused"].stderr
    lines = out["refused"].stdout.splitlines()
    assert lines[0].startswith(f"run {past} cannot move to version 2")
    assert lines[1].split() == ["index", lines[1].split()[1]] and lines[1].split()[1].isdigit()
    assert "charge#1" in lines[2] and "notify#1" in lines[3]
    assert out["bad"].returncode == 2
    assert len(out["bad"].stderr.strip().splitlines()) == 1
    assert "no-such-run" in out["bad"].stderr and "Traceback" not in out["bad"].stderr


def test_a_worker_without_the_pinned_spec_fails_the_task_until_it_is_deployed(
    temporal_address: str, tmp_path: Path
) -> None:
    deploy = tmp_path / "deploy"
    deploy.mkdir()
    (deploy / "v1.yaml").write_text(V1)
    pinned = flowcore.parse_flow(V3).spec_hash
    queue = unique("undeployed")

    async def main() -> tuple[str, dict[str, Any]]:
        client = await ft.connect(temporal_address)
        registry = ft.SpecRegistry(deploy, rescan_s=0.5)
        async with ft.new_worker(client, task_queue=queue, tools=str(TOOLS), specs=registry):
            host = ft.TemporalHost(client, queue)
            rid = await host.start(V3, None, unique("order-v3"), by_hash=True)

            async def task_failure() -> str | None:
                history = await host.history(rid)
                for event in history.events:
                    if event.HasField("workflow_task_failed_event_attributes"):
                        return event.workflow_task_failed_event_attributes.failure.message
                return None

            message = await eventually(task_failure, "a failed workflow task", timeout=60)
            (deploy / "v3.yaml").write_text(V3)  # deployed: the retried task finds it

            async def task_completed() -> bool:
                history = await host.history(rid)
                return any(
                    e.HasField("workflow_task_completed_event_attributes") for e in history.events
                )

            # (Temporal retries a failing workflow task about every 10 s.)
            await eventually(task_completed, "the retried workflow task to pass", timeout=180)
            await waiting_for(host, rid, "go")
            await host.signal(rid, "go")
            await waiting_for(host, rid, "done")
            await host.signal(rid, "done")
            return message, await host.result(rid)

    message, result = asyncio.run(main())
    assert pinned[:12] in message and "'order'" in message, message
    assert "not deployed" in message
    assert result["status"] == "completed"
    assert result["output"] == {"charge": "charged", "notify": "notified again"}
