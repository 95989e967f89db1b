"""Limits across runs on Temporal, on the real dev server: a limited tool's calls go
to its own task queue, whose worker applies the limits (concurrency per worker,
a rate the server applies to the queue); a run's priority is its workflow's
priority key, which child workflows inherit; a dedup key is the workflow id,
started with USE_EXISTING while it runs and anew once it has closed."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

import flowcore_temporal as ft
from flowcore import CallTool
from flowcore_handlers import Registry, ToolLimit

from .support import eventually, unique, waiting_for

FAN = """
flow: fan
tools: {charge: {class: idempotent}, note: {class: idempotent}}
steps:
  - id: each
    for_each:
      items: "${input.items}"
      steps: [{id: pay, call_tool: {tool: charge, input: "${item}"}}]
  - {id: after, call_tool: {tool: note, input: done}}
output: "${length(steps.each.output)}"
"""


def test_a_limited_tool_runs_on_its_own_queue_within_its_limits(temporal_address: str) -> None:
    inside = [0, 0]  # now, highest

    async def charge(call: CallTool) -> Any:
        inside[0] += 1
        inside[1] = max(inside[1], inside[0])
        try:
            await asyncio.sleep(0.05)
        finally:
            inside[0] -= 1
        return call.input

    async def note(call: CallTool) -> Any:
        return call.input

    limits = {"charge": ToolLimit(concurrency=1, rate=50, per_ms=1000)}

    async def main() -> None:
        client = await ft.connect(temporal_address)
        queue = unique("q")
        registry = Registry(tools={"charge": charge, "note": note})
        worker = ft.new_worker(client, task_queue=queue, registry=registry)
        limited = ft.tool_workers(client, limits, task_queue=queue, registry=registry)
        assert len(limited) == 1
        config = limited[0].config()
        assert config["task_queue"] == ft.tool_queue(queue, "charge") == f"{queue}/tool/charge"
        assert config["max_concurrent_activities"] == 1
        assert config["max_task_queue_activities_per_second"] == 50.0
        async with contextlib.AsyncExitStack() as stack:
            for each in (worker, *limited):
                await stack.enter_async_context(each)
            host = ft.TemporalHost(client, queue, tool_limits=limits)
            rid = await host.start(FAN, {"items": list(range(5))}, unique("fan"))
            result = await host.result(rid)
            assert result["status"] == "completed" and result["output"] == 5
            queues: dict[str, str] = {}
            async for event in host.handle(rid).fetch_history_events():
                if event.HasField("activity_task_scheduled_event_attributes"):
                    attrs = event.activity_task_scheduled_event_attributes
                    queues[attrs.activity_id] = attrs.task_queue.name
        pays = {k: q for k, q in queues.items() if "/pay#" in k}
        assert len(pays) == 5 and set(pays.values()) == {f"{queue}/tool/charge"}
        assert queues[f"{rid}/after#1"] == queue  # an unlimited tool stays on the run's queue
        assert inside == [0, 1]

    asyncio.run(main())


PARENT = """
flow: parent
steps:
  - {id: child, run_subflow: {flow: kid, input: {}}}
"""
KID = """
flow: kid
steps:
  - {id: go, await_signal: {signal: go}}
"""


async def _started_priority(handle: Any) -> int:
    async for event in handle.fetch_history_events():
        if event.HasField("workflow_execution_started_event_attributes"):
            return int(event.workflow_execution_started_event_attributes.priority.priority_key)
    raise AssertionError("no start event")


def test_priority_and_dedup_keys(temporal_address: str, tmp_path: Any) -> None:
    (tmp_path / "kid.yaml").write_text(KID)

    async def main() -> None:
        client = await ft.connect(temporal_address)
        queue = unique("q")
        async with ft.new_worker(client, task_queue=queue, registry=Registry()):
            host = ft.TemporalHost(client, queue)
            # Priority: the workflow's key; its child workflow inherits it.
            rid = await host.start(PARENT, None, unique("p"), flows=[tmp_path], priority=1)
            child = host.child_run_id(rid, f"{rid}/child#1")

            async def child_waits() -> bool:
                try:
                    return "go" in (await host.status(child)).get("waitingFor", [])
                except ft.TemporalHostError:  # not started yet
                    return False

            await eventually(child_waits, "the child run to wait for its signal")
            assert await _started_priority(host.handle(rid)) == 1
            assert await _started_priority(host.handle(child)) == 1
            await host.cancel(rid)
            plain = await host.start(KID, None, unique("plain"))
            assert await _started_priority(host.handle(plain)) == 0  # unset: the server's 3

            # Dedup: the key is the workflow id; one execution while it runs.
            key = unique("order")
            first = await host.start(KID, None, dedup_key=key)
            assert first == key
            run1 = (await host.handle(key).describe()).run_id
            assert await host.start(KID, None, dedup_key=key) == key
            assert await host.start(KID, None, key, dedup_key=key) == key
            assert (await host.handle(key).describe()).run_id == run1
            await waiting_for(host, key, "go")
            await host.signal(key, "go", {"n": 1})
            assert (await host.result(key))["status"] == "completed"
            # Closed: the key starts a new execution under the same id.
            assert await host.start(KID, None, dedup_key=key) == key

            async def new_run() -> bool:
                description = await host.handle(key).describe()
                return description.run_id != run1

            await eventually(new_run, "a new execution under the dedup key")
            await host.cancel(key)
            await host.cancel(plain)

            with pytest.raises(ft.TemporalHostError, match="the dedup key is the run id"):
                await host.start(KID, None, "other", dedup_key=key)
            with pytest.raises(ft.TemporalHostError, match="priority must be an integer"):
                await host.start(KID, None, priority=6)
            with pytest.raises(ft.TemporalHostError, match="tool_limits"):
                ft.TemporalHost(client, queue, tool_limits={"x": 1})  # type: ignore[dict-item]

    asyncio.run(main())
