"""continue_as_new on the Temporal host, against a real dev server: each
incarnation is a Temporal run of the same workflow id (Temporal's own
continue-as-new), buffered signals and signals sent during the switch are
carried, and the latest run's log replays."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("temporalio", reason="the Temporal host tests need temporalio (.[dev])")

import flowcore
import flowcore_temporal as ft

from .support import eventually, running_host, unique

# One signal per incarnation; the rest wait in the buffer and are carried.
NOTES = """
flow: notes
tools: {echo: {class: idempotent}}
steps:
  - {id: take, await_signal: {signal: note}}
  - {id: keep, call_tool: {tool: echo, input: "${steps.take.output}"}}
  - id: next
    switch:
      - if: "length(input.seen) < `5`"
        steps:
          - id: again
            continue_as_new:
              input: {seen: "${[input.seen, [steps.take.output]][]}"}
output: "${ {seen: [input.seen, [steps.take.output]][], incarnation: run.incarnation} }"
"""

REMINDER = """
flow: reminder
tools: {echo: {class: idempotent}}
steps:
  - id: tick
    repeat:
      every_ms: 1000
      max_fires: 2
      steps:
        - {id: ping, call_tool: {tool: echo, input: "${input.round}"}}
  - id: next
    switch:
      - if: "input.round < `4`"
        steps:
          - id: again
            continue_as_new: {input: {round: "${sum([input.round, `1`])}"}}
output: "${ {round: input.round, incarnation: run.incarnation} }"
"""


async def _incarnations(host: ft.TemporalHost, run_id: str) -> list[str]:
    """The Temporal run ids of the workflow's executions, oldest first."""
    runs = [
        execution.run_id
        async for execution in host.client.list_workflows(f"WorkflowId = '{run_id}'")
    ]
    return list(reversed(runs))


def test_signals_buffered_and_sent_during_the_switch_all_arrive(temporal_address: str) -> None:
    async def main() -> Any:
        async with running_host(temporal_address) as host:
            rid = unique("notes")
            await host.start(NOTES, {"seen": []}, rid)
            for i in range(3):  # buffered before the run takes the first
                await host.signal(rid, "note", f"n{i}")
            for i in range(3, 6):  # while incarnations switch
                await host.signal(rid, "note", f"n{i}")
                await asyncio.sleep(0.05)
            result = await host.result(rid)
            records = await host.export(rid)
            runs = await eventually(
                lambda: _runs_if(host, rid, 6), "six Temporal runs to be listed", timeout=30
            )
            return result, records, runs

    result, exported, runs = asyncio.run(main())
    assert result["status"] == "completed"
    assert result["output"] == {"seen": [f"n{i}" for i in range(6)], "incarnation": 6}
    assert len(set(runs)) == 6  # one Temporal run per incarnation, one workflow id
    records = flowcore.decode_log(exported).records
    # The export stitches every Temporal run's log: all six incarnations, one
    # index sequence.
    assert [r.index for r in records] == list(range(len(records)))
    started = [r for r in records if r.type == "run.started"]
    assert [r.data.get("incarnation", 1) for r in started] == [1, 2, 3, 4, 5, 6]
    report = flowcore.replay(records, flowcore.parse_flow(NOTES))
    assert report.status == "completed"


async def _runs_if(host: ft.TemporalHost, rid: str, n: int) -> list[str] | None:
    runs = await _incarnations(host, rid)
    return runs if len(runs) >= n else None


def test_a_reminder_loop_continues_with_fresh_keys(temporal_address: str) -> None:
    async def main() -> Any:
        async with running_host(temporal_address) as host:
            rid = unique("remind")
            await host.start(REMINDER, {"round": 0}, rid, clock_origin_ms=0, clock_scale=50.0)
            result = await host.result(rid)
            return rid, result, await host.export(rid)

    rid, result, exported = asyncio.run(main())
    assert result["status"] == "completed"
    assert result["output"] == {"round": 4, "incarnation": 5}
    keys = [entry["idempotencyKey"] for entry in result["report"]]
    assert keys == [f"{rid}/@5/tick[1]/ping#1", f"{rid}/@5/tick[2]/ping#1"]
    records = flowcore.decode_log(exported).records
    started = [r.data.get("incarnation", 1) for r in records if r.type == "run.started"]
    assert started == [1, 2, 3, 4, 5]
    report = flowcore.replay(records, flowcore.parse_flow(REMINDER))
    assert report.status == "completed"
