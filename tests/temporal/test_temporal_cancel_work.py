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
