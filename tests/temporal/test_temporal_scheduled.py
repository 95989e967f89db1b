"""The scheduled-call events from outside on Temporal: the ``scheduled`` update."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import pytest
from temporalio.client import WorkflowUpdateFailedError

import flowcore_temporal as ft

from .support import running_host, unique

SPEC = """
flow: managed
tools:
  send_reminder: {class: idempotent, schedulable: true}
  cleanup: {class: readonly}
steps:
  - id: nudge
    schedule: {tool: send_reminder, input: {to: ana}, delay_ms: 3600000}
  - id: wait
    await_signal: {signal: done}
"""


def test_the_scheduled_update_answers_and_refuses(temporal_address: str) -> None:
    async def main() -> None:
        async with running_host(temporal_address) as host:
            rid = await host.start(SPEC, None, unique("sched"))
            handle = host.handle(rid)

            async def send(event: Mapping[str, object]) -> object:
                return await asyncio.wait_for(
                    handle.execute_update(ft.SCHEDULED_UPDATE, args=[event]), 20
                )

            cancel = {"kind": "scheduled-cancel-requested", "scheduleId": f"{rid}/nudge#1"}
            assert await send(cancel) == {"id": f"{rid}/nudge#1", "done": True}
            assert await send(cancel) == {"id": f"{rid}/nudge#1", "done": False}
            add = {"kind": "scheduled-add-requested", "tool": "send_reminder", "delayMs": 3600000}
            assert await send(add) == {"id": f"{rid}/~scheduled-1", "done": True}
            for bad, why in (
                (
                    {"kind": "scheduled-add-requested", "tool": "cleanup"},
                    "not declared schedulable",
                ),
                ({"kind": "signal-received", "signal": "done"}, "refused: expected an object"),
            ):
                with pytest.raises(WorkflowUpdateFailedError) as info:
                    await send(bad)
                assert why in str(info.value.cause)
            await host.signal(rid, "done")
            result = await asyncio.wait_for(host.result(rid), 20)
            assert result["status"] == "completed"
            types = [r["type"] for r in await handle.query(ft.LOG_QUERY)]
            assert types.count("scheduled.changed") == 4  # pending, cancelled, pending, cancelled

    asyncio.run(main())
