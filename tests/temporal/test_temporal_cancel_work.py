"""Work the run stops waiting for is cancelled on Temporal (decision level 2): the
losing branch's activity gets a cancel request, learns it at a heartbeat, and
its handler is cancelled (``CancelledError``, ``flowcore_handlers.cancelled()``).
A real dev server and worker."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import flowcore_handlers
from flowcore import CallTool
from flowcore_handlers import Registry

from .support import eventually, running_host, unique

RACE = """
flow: race
tools: {fast: {class: idempotent}, slow: {class: idempotent}}
steps:
  - id: pick
    parallel:
      mode: race
      branches:
        quick: [{id: q, call_tool: {tool: fast}}]
        slow: [{id: s, call_tool: {tool: slow}}]
  - id: after
    call_tool: {tool: fast, input: "${steps.s.status}"}
  - id: hold
    await_signal: {signal: done}
output: "${steps.after.output}"
"""


def test_a_losing_branch_s_activity_is_cancelled_and_its_handler_told(
    temporal_address: str,
) -> None:
    events: list[str] = []
    started = threading.Event()

    async def slow(call: CallTool) -> Any:
        started.set()
        try:
            await asyncio.sleep(120)
        except asyncio.CancelledError:
            events.append(f"cancelled, asked: {flowcore_handlers.cancelled()}")
            raise
        return "never"

    async def quick(call: CallTool) -> Any:
        while not started.is_set():
            await asyncio.sleep(0.01)
        return call.input if call.input is not None else "won"

    async def main() -> dict[str, Any]:
        registry = Registry(tools={"fast": quick, "slow": slow})
        async with running_host(temporal_address, None, registry=registry) as host:
            rid = await host.start(RACE, None, unique("race"), heartbeat_timeout_ms=1000)

            async def told() -> bool:
                return bool(events)

            # While the run still runs (it waits for ``done``): not its end
            # closing the activity, the cancel request of the lost race.
            await eventually(told, "the losing handler to be cancelled", timeout=30)
            await host.signal(rid, "done")
            return await host.result(rid)

    result = asyncio.run(main())
    assert (result["status"], result["output"]) == ("completed", "cancelled")
    assert events == ["cancelled, asked: True"]


CANCELLATION_RACE = """
flow: race3
tools: {fast: {class: idempotent}, slow: {class: idempotent}, after: {class: idempotent}}
steps:
  - id: pick
    parallel:
      mode: race
      branches:
        win: [{id: w, call_tool: {tool: fast}}]
        cut: [{id: x, call_tool: {tool: slow, input: x}, cancellation: try_cancel}]
        left: [{id: y, call_tool: {tool: slow, input: y}, cancellation: abandon}]
        held:
          - {id: z, call_tool: {tool: slow, input: z}, cancellation: wait_cancellation_completed}
  - id: next
    call_tool: {tool: after}
  - id: hold
    await_signal: {signal: done}
output: "${steps.pick.output}"
"""


def test_each_cancellation_type_of_a_race_s_losers(temporal_address: str) -> None:
    """try_cancel: cancelled; wait_cancellation_completed: cancelled, and the race ends only
    once the handler has stopped; abandon: never told, runs to its end, its late result
    is recorded and ignored (language.md §9.2)."""
    seen: list[str] = []
    started: set[str] = set()
    release = threading.Event()  # lets the abandoned one finish

    async def slow(call: CallTool) -> Any:
        which = call.input
        started.add(which)
        try:
            while not release.is_set():
                await asyncio.sleep(0.02)
        except asyncio.CancelledError:
            seen.append(f"{which} cancelled")
            if which == "z":  # some cleanup before it stops
                await asyncio.sleep(0.3)
                seen.append("z stopped")
            raise
        seen.append(f"{which} finished, told: {flowcore_handlers.cancelled()}")
        return "late"

    async def quick(call: CallTool) -> Any:
        while len(started) < 3:
            await asyncio.sleep(0.01)
        return "won"

    async def after(call: CallTool) -> Any:
        seen.append("next")
        release.set()
        return "ok"

    async def main() -> tuple[dict[str, Any], list[Any]]:
        registry = Registry(tools={"fast": quick, "slow": slow, "after": after})
        async with running_host(temporal_address, None, registry=registry) as host:
            rid = await host.start(
                CANCELLATION_RACE, None, unique("race3"), heartbeat_timeout_ms=1000
            )

            async def late() -> bool:
                records = await host.records(rid)
                return any(
                    r.type == "event.reported" and r.data.get("idempotencyKey") == f"{rid}/y#1"
                    for r in records
                )

            await eventually(late, "the abandoned call's late result", timeout=30)
            await host.signal(rid, "done")
            return await host.result(rid), await host.records(rid)

    result, records = asyncio.run(main())
    assert (result["status"], result["output"]) == ("completed", {"win": "won"})
    assert seen.index("x cancelled") < seen.index("next")
    assert seen.index("z cancelled") < seen.index("z stopped") < seen.index("next")
    assert "y finished, told: False" in seen and "y cancelled" not in seen
    kinds = [
        (r.data.get("kind"), r.data.get("idempotencyKey", "").rsplit("/", 1)[-1])
        for r in records
        if r.type in ("event.reported", "effect.emitted")
    ]
    ack = kinds.index(("effect-failed", "z#1"))
    assert ack < kinds.index(("call-tool", "next#1")) < kinds.index(("effect-succeeded", "y#1"))
    assert ("effect-succeeded", "x#1") not in kinds and ("effect-failed", "x#1") not in kinds
