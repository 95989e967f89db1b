"""Work the run stops waiting for is cancelled on the local host (language.md §9.2,
specs/local.md §4): a losing branch's handler, a timed-out step's, a cancelled
run's. An ``async`` handler gets ``CancelledError``; every handler can ask
``flowcore_handlers.cancelled()``. A real SQLite file, real handlers."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import flowcore_handlers
from flowcore import CallTool
from flowcore_handlers import Registry
from flowcore_local import LocalHost

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
output: "${steps.after.output}"
"""


class Seen:
    """What the slow handler saw, from whichever thread it ran in."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.started = threading.Event()


def fast(call: CallTool) -> Any:
    return call.input


async def _run(db: Path | str, spec: str, registry: Registry, **start: Any) -> Any:
    async with LocalHost(db, registry=registry) as host:
        rid = await host.start(spec, None, "r", **start)
        await asyncio.wait_for(host.work(until_settled=rid), timeout=60)
        return await host.run(rid)


def test_an_async_handler_of_a_losing_branch_is_cancelled(
    tmp_path: Path, local_db: Path | str
) -> None:
    seen = Seen()

    async def slow(call: CallTool) -> Any:
        seen.started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            seen.events.append(f"cancelled, asked: {flowcore_handlers.cancelled()}")
            raise
        return "never"

    async def quick(call: CallTool) -> Any:
        while not seen.started.is_set():  # the slow one runs before the race is decided
            await asyncio.sleep(0.01)
        return call.input if call.input is not None else "won"

    row = asyncio.run(_run(local_db, RACE, Registry(tools={"fast": quick, "slow": slow})))
    assert (row.status, row.output) == ("completed", "cancelled")
    assert seen.events == ["cancelled, asked: True"]


def test_a_sync_handler_sees_cancelled_and_its_result_is_not_used(
    tmp_path: Path, local_db: Path | str
) -> None:
    seen = Seen()

    def slow(call: CallTool) -> Any:
        seen.started.set()
        deadline = time.monotonic() + 60
        while not flowcore_handlers.cancelled() and time.monotonic() < deadline:
            time.sleep(0.01)
        seen.events.append(f"stopped, asked: {flowcore_handlers.cancelled()}")
        return "unused"

    def quick(call: CallTool) -> Any:
        seen.started.wait(60)
        return call.input if call.input is not None else "won"

    row = asyncio.run(_run(local_db, RACE, Registry(tools={"fast": quick, "slow": slow})))
    assert (row.status, row.output) == ("completed", "cancelled")
    for _ in range(600):  # the thread notices on its next look
        if seen.events:
            break
        time.sleep(0.01)
    assert seen.events == ["stopped, asked: True"]


def test_cancelling_a_run_cancels_its_running_work(tmp_path: Path, local_db: Path | str) -> None:
    seen = Seen()

    async def slow(call: CallTool) -> Any:
        seen.started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            seen.events.append("cancelled")
            raise
        return "never"

    spec = "flow: c\ntools: {slow: {}}\nsteps:\n  - {id: s, call_tool: {tool: slow}}\n"

    async def main() -> Any:
        async with LocalHost(local_db, registry=Registry(tools={"slow": slow})) as host:
            rid = await host.start(spec, None, "c")
            worker = asyncio.create_task(host.work(until_settled=rid))
            while not seen.started.is_set():
                await asyncio.sleep(0.01)
            await host.cancel(rid, "no longer needed")
            await asyncio.wait_for(worker, timeout=60)
            return await host.run(rid)

    row = asyncio.run(main())
    assert row.status == "cancelled"
    assert seen.events == ["cancelled"]


def test_outside_a_handler_nothing_is_cancelled() -> None:
    assert flowcore_handlers.cancelled() is False
    assert not flowcore_handlers.cancellation().is_set()
