"""The local host driven only through the ``Host`` contract, on a real SQLite file.

Every operation below goes through a variable typed ``flowcore_handlers.Host``
(the worker loop, which is no part of the contract, is the only ``LocalHost``
call): what runs on the local host this way runs on Temporal too.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import flowcore
from flowcore_handlers import Host, Registry, RunQuery
from flowcore_local import HostError, LocalHost

from ..local_helpers import work_until

FLOW = """
flow: contract
metadata: {customer: string}
tools:
  remind: {class: idempotent, schedulable: true}
steps:
  - id: decide
    ask_human: {question: "Ship it?", options: ["yes", "no"]}
output: "${steps.decide.answer}"
schedules:
  nightly:
    every: 1h
"""


def test_the_local_host_through_the_host_contract(tmp_path: Path) -> None:
    spec = tmp_path / "contract.yaml"
    spec.write_text(FLOW)

    async def main() -> None:
        registry = Registry(tools={"remind": lambda call: "sent"})
        async with LocalHost(tmp_path / "contract.db", registry=registry) as local:
            host: Host = local
            for i, customer in enumerate(["acme", "zeta", "acme"]):
                await host.start(spec, None, f"c-{i}", metadata={"customer": customer})

            async def asking() -> bool:
                return all([await host.open_questions(f"c-{i}") for i in range(3)])

            await work_until(local, asking)

            # Runs by metadata, a page at a time; by flow and status.
            first = await host.find_runs(RunQuery(where=["customer=acme"], limit=1))
            assert [r.run_id for r in first.runs] == ["c-2"]
            assert first.runs[0].metadata == {"customer": "acme"}
            assert first.cursor is not None
            rest = await host.find_runs(RunQuery(where=["customer=acme"], cursor=first.cursor))
            assert ([r.run_id for r in rest.runs], rest.cursor) == (["c-0"], None)
            running = await host.find_runs(RunQuery(flow="contract", status="running"))
            assert {(r.run_id, r.flow_id, r.status) for r in running.runs} == {
                (f"c-{i}", "contract", "running") for i in range(3)
            }
            with pytest.raises(HostError, match="run cursor 'nope' is not one a page handed out"):
                await host.find_runs(RunQuery(cursor="nope"))
            with pytest.raises(HostError, match="at least 1, not 0"):
                await host.find_runs(RunQuery(limit=0))

            # Open questions, what a run waits for, the answer.
            [asked] = await host.open_questions("c-0")
            assert (asked.question, asked.options) == ("Ship it?", ("yes", "no"))
            assert (await host.waits("c-0")).questions == (asked,)
            await host.answer("c-0", asked.key, "yes")

            async def answered() -> bool:
                return bool((await host.show("c-0"))["status"] == "completed")

            await work_until(local, answered)
            assert (await host.show("c-0"))["output"] == "yes"

            # Its events from an index, and the export.
            records = await host.records("c-0")
            assert [r async for r in host.events("c-0")] == records
            assert [r async for r in host.events("c-0", 2)] == records[2:]
            assert await host.export("c-0") == flowcore.encode_records(records)

            # Scheduled calls: add, list (of one run and of all), cancel.
            sid = await host.add_scheduled("c-1", "remind", {"to": "ana"}, delay_ms=3_600_000)
            [call] = await host.scheduled("c-1")
            assert (call.id, call.tool, call.status) == (sid, "remind", "pending")
            assert call.outside
            assert [c.id for c in await host.scheduled(tool="remind")] == [sid]
            assert await host.cancel_scheduled("c-1", sid) is True
            assert await host.scheduled(status="pending") == []

            # Schedules: add, list, show, pause, resume, delete.
            assert await host.add_schedules(spec) == ["nightly"]
            assert await host.schedule_names() == ["nightly"]
            await host.pause_schedule("nightly", "quiet week")
            assert (await host.schedule("nightly"))["paused"] is True
            await host.resume_schedule("nightly")
            await host.delete_schedule("nightly")
            assert await host.schedule_names() == []

            # Cancel, then delete the settled run.
            await host.cancel("c-2", "not needed")

            async def cancelled() -> bool:
                return bool((await host.show("c-2"))["status"] == "cancelled")

            await work_until(local, cancelled)
            deleted = await host.delete("c-2")
            assert deleted.runs == ["c-2"]
            left = await host.find_runs(RunQuery())
            assert sorted(r.run_id for r in left.runs) == ["c-0", "c-1"]

    asyncio.run(main())
