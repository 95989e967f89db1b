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
from flowcore_handlers import (
    RUN_STATUSES,
    Host,
    HostFailure,
    NothingToCancel,
    Registry,
    RunQuery,
    RunSettled,
    UnknownRun,
    UnknownSchedule,
)
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


def test_the_local_host_through_the_host_contract(tmp_path: Path, local_db: Path | str) -> None:
    spec = tmp_path / "contract.yaml"
    spec.write_text(FLOW)

    async def main() -> None:
        registry = Registry(tools={"remind": lambda call: "sent"})
        async with LocalHost(local_db, registry=registry) as local:
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


CHAIN = """
flow: chain
tools: {echo: {class: readonly}}
budget: {steps: 1}
steps:
  - {id: a, call_tool: {tool: echo}}
  - {id: b, call_tool: {tool: echo}}
"""

PARENT = """
flow: parent
steps:
  - {id: kid, run_subflow: {flow: contract}}
"""


def test_one_status_vocabulary_principals_parents_and_summaries(
    tmp_path: Path, local_db: Path | str
) -> None:
    """The contract's status words on the local host (flowcore's own, with
    ``budget-exhausted``), runs by principal and parent, and one run's summary."""
    (tmp_path / "contract.yaml").write_text(FLOW)
    (tmp_path / "parent.yaml").write_text(PARENT)

    async def main() -> None:
        registry = Registry(tools={"echo": lambda call: "ok", "remind": lambda call: "sent"})
        async with LocalHost(local_db, registry=registry) as local:
            host: Host = local
            spent = await host.start(CHAIN, None, "spent", principal="ana")
            top = await host.start(
                tmp_path / "parent.yaml",
                None,
                "top",
                flows=[tmp_path / "contract.yaml"],
                principal="bob",
            )
            kid = "top/kid#1"

            async def settled_and_asking() -> bool:
                spent_row = await local.run(spent)
                return spent_row.status != "running" and bool(await local.children(top))

            await work_until(local, settled_and_asking)
            assert (await local.run(spent)).status == "budget-exhausted"  # the host's own word
            assert await local.children(top) == [kid]

            summary = await host.summary(spent)
            assert (summary.run_id, summary.status, summary.flow_id) == (
                spent,
                "budget-exhausted",
                "chain",
            )
            assert (summary.principal, summary.parent) == ("ana", None)
            assert summary.updated_ms is not None and summary.updated_ms >= summary.started_ms
            child = await host.summary(kid)
            assert (child.status, child.principal, child.parent) == ("running", "bob", top)

            exhausted = await host.find_runs(RunQuery(status="budget-exhausted"))
            assert [r.run_id for r in exhausted.runs] == [spent]
            assert exhausted.runs[0] == summary
            assert (await host.find_runs(RunQuery(status="timed-out"))).runs == []
            assert (await host.find_runs(RunQuery(status="terminated"))).runs == []
            by_bob = await host.find_runs(RunQuery(principal="bob"))
            assert sorted(r.run_id for r in by_bob.runs) == [top, kid]
            children = await host.find_runs(RunQuery(parent=top))
            assert [(r.run_id, r.parent) for r in children.runs] == [(kid, top)]
            for bad in ("exhausted", "Running"):
                with pytest.raises(HostFailure) as unknown:
                    await host.find_runs(RunQuery(status=bad))
                assert isinstance(unknown.value, HostError)
                assert str(unknown.value) == (
                    f"unknown run status {bad!r}: one of running, completed, failed,"
                    " cancelled, budget-exhausted, terminated, timed-out"
                )
            assert set(RUN_STATUSES) >= {r.status for r in (await host.find_runs(RunQuery())).runs}

    asyncio.run(main())


def test_the_typed_failures_of_the_local_host(tmp_path: Path, local_db: Path | str) -> None:
    """Unknown runs and schedules, settled runs and cancels that change nothing are
    each one typed ``HostFailure`` (and a ``HostError``) with the message as before."""
    spec = tmp_path / "contract.yaml"
    spec.write_text(FLOW)

    async def main() -> None:
        registry = Registry(tools={"remind": lambda call: "sent"})
        async with LocalHost(local_db, registry=registry) as local:
            host: Host = local
            for call in (
                host.summary("ghost"),
                host.show("ghost"),
                host.signal("ghost", "go"),
                host.answer("ghost", "k", 1),
                host.cancel("ghost"),
                host.scheduled("ghost"),
            ):
                with pytest.raises(UnknownRun) as unknown:
                    await call
                assert isinstance(unknown.value, HostError)
                assert unknown.value.run_id == "ghost"
                assert str(unknown.value) == "no run 'ghost' in the database"
            for call in (host.schedule("nope"), host.pause_schedule("nope")):
                with pytest.raises(UnknownSchedule) as no_schedule:
                    await call
                assert isinstance(no_schedule.value, HostError)
                assert no_schedule.value.name == "nope"
                assert str(no_schedule.value) == "no schedule 'nope' in the database"

            rid = await host.start(spec, None, "done")
            await host.cancel(rid, "stop")

            async def cancelled() -> bool:
                return (await host.summary(rid)).status == "cancelled"

            await work_until(local, cancelled)
            with pytest.raises(NothingToCancel) as nothing:
                await host.cancel(rid)
            assert isinstance(nothing.value, HostError) and nothing.value.run_id == rid
            assert str(nothing.value) == "run 'done' has settled (cancelled): nothing to cancel"
            with pytest.raises(RunSettled) as settled:
                await host.add_scheduled(rid, "remind")
            assert (settled.value.run_id, settled.value.status) == (rid, "cancelled")
            assert str(settled.value) == (
                "run 'done' has settled (cancelled): no call can be scheduled"
            )
            with pytest.raises(RunSettled) as answered:
                await host.answer(rid, "decide", "yes")
            assert isinstance(answered.value, HostError)
            assert answered.value.status == "cancelled"
            assert "(open questions of run 'done': none)" in str(answered.value)
            with pytest.raises(RunSettled):
                await host.upgrade(rid, spec)
            # A pending-only operation still answers with a bool.
            assert await host.cancel_scheduled(rid, "nothing#1") is False

    asyncio.run(main())
