"""The Temporal host through the ``Host`` contract, against the real dev server:
operations through a variable typed ``flowcore_handlers.Host``, and its typed refusals."""

from __future__ import annotations

import asyncio
import time

import pytest

import flowcore_temporal as ft
from flowcore_handlers import (
    Host,
    HostFailure,
    HostRefusal,
    RunQuery,
    RunSettled,
    UnknownRun,
    UnknownSchedule,
)

from .support import eventually, running_host, unique

ASK = """
flow: contract
steps:
  - id: decide
    ask_human: {question: "Ship it?", options: ["yes", "no"]}
output: "${steps.decide.answer}"
"""


def test_the_temporal_host_through_the_host_contract(temporal_address: str) -> None:
    async def main() -> None:
        async with running_host(temporal_address) as temporal:
            host: Host = temporal
            since = int(time.time() * 1000) - 60_000
            rid = await host.start(ASK, None, unique("contract"))

            async def listed() -> bool:
                page = await host.find_runs(RunQuery(status="running", started_from_ms=since))
                return any(r.run_id == rid and r.status == "running" for r in page.runs)

            await eventually(listed, f"{rid} in the visibility listing")
            first = await host.find_runs(RunQuery(started_from_ms=since, limit=1))
            assert len(first.runs) == 1
            if first.cursor is not None:  # the next page goes on after it
                after = await host.find_runs(RunQuery(started_from_ms=since, cursor=first.cursor))
                assert first.runs[0].run_id not in {r.run_id for r in after.runs}
            # By id prefix: the run's own id, and one prefix no run has.
            found = await host.find_runs(RunQuery(id_prefix=rid[:-1], started_from_ms=since))
            assert [r.run_id for r in found.runs] == [rid]
            none = await host.find_runs(RunQuery(id_prefix=rid + "-no", started_from_ms=since))
            assert none.runs == []

            async def asking() -> bool:
                return bool(await host.open_questions(rid))

            await eventually(asking, f"a question in {rid}")
            [asked] = await host.open_questions(rid)
            assert (asked.question, asked.options) == ("Ship it?", ("yes", "no"))
            waits = await host.waits(rid)
            assert (waits.run_id, waits.status, waits.questions) == (rid, "running", (asked,))
            await host.answer(rid, asked.key, "no")
            # Following the run's events ends when it settles, with its last record.
            followed = [r async for r in host.events(rid, 1, follow=True)]
            assert followed[0].index == 1
            assert followed == (await temporal.log(rid))[1:]
            assert (await host.show(rid))["output"] == "no"

            # What Temporal does not do is one typed refusal that says why.
            with pytest.raises(HostRefusal, match="Temporal host cannot prune runs: the") as no:
                await host.prune(0, dry_run=True)
            assert isinstance(no.value, ft.TemporalRefusal)
            assert no.value.operation == "prune runs"
            with pytest.raises(ft.TemporalRefusal, match="across runs"):
                await host.scheduled()
            with pytest.raises(ft.TemporalRefusal, match="list runs by flow"):
                await host.find_runs(RunQuery(flow="contract"))
            with pytest.raises(ft.TemporalRefusal, match="count runs by status"):
                await host.count_runs(RunQuery())

    asyncio.run(main())


PARENT = """
flow: parent
steps:
  - {id: kid, run_subflow: {flow: contract}}
"""


def test_status_words_principals_parents_and_summaries_on_temporal(
    temporal_address: str,
) -> None:
    """The contract's status words (Temporal's mapped), a run's principal kept in its
    start arguments and inherited by its child runs, runs by parent, one run's summary."""

    async def main() -> None:
        async with running_host(temporal_address) as temporal:
            host: Host = temporal
            since = int(time.time() * 1000) - 60_000
            top = await host.start(
                PARENT, None, unique("top"), flows={"contract": ASK}, principal="ana"
            )
            kid = ft.TemporalHost.child_run_id(top, "kid#1")

            async def asking() -> bool:
                try:
                    return bool(await host.open_questions(kid))
                except HostFailure:
                    return False

            await eventually(asking, f"the question of {kid}")
            summary = await host.summary(top)
            assert (summary.run_id, summary.status, summary.flow_id) == (top, "running", "parent")
            assert (summary.principal, summary.parent, summary.updated_ms) == ("ana", None, None)
            child = await host.summary(kid)
            assert (child.status, child.flow_id, child.principal, child.parent) == (
                "running",
                "contract",
                "ana",
                top,
            )

            async def listed() -> bool:
                page = await host.find_runs(RunQuery(parent=top, started_from_ms=since))
                return [(r.run_id, r.parent, r.status) for r in page.runs] == [
                    (kid, top, "running")
                ]

            await eventually(listed, f"{kid} listed as a child of {top}")
            await host.cancel(top, "done")

            async def settled() -> bool:
                return (await host.summary(top)).status != "running"

            await eventually(settled, f"{top} settled")
            closed = await host.summary(top)
            # Its workflow completes (as a listing says); the summary reads how it settled.
            assert closed.status == "cancelled"
            assert closed.updated_ms is not None and closed.updated_ms >= closed.started_ms

            async def completed() -> bool:
                page = await host.find_runs(RunQuery(status="completed", started_from_ms=since))
                return top in {r.run_id for r in page.runs}

            await eventually(completed, f"{top} listed as completed")
            for bad in ("Running", "exhausted"):
                with pytest.raises(ft.TemporalHostError) as unknown:
                    await host.find_runs(RunQuery(status=bad))
                assert str(unknown.value) == (
                    f"unknown run status {bad!r}: one of running, completed, failed,"
                    " cancelled, budget-exhausted, terminated, timed-out"
                )
            with pytest.raises(ft.TemporalRefusal, match="list runs by status budget-exhausted"):
                await host.find_runs(RunQuery(status="budget-exhausted"))
            with pytest.raises(ft.TemporalRefusal, match="list runs by principal"):
                await host.find_runs(RunQuery(principal="ana"))

    asyncio.run(main())


def test_the_typed_failures_of_the_temporal_host(temporal_address: str) -> None:
    """Unknown runs and schedules, settled runs and cancels that change nothing are each
    one typed ``HostFailure`` (and a ``TemporalHostError``), with the messages as before."""

    async def main() -> None:
        async with running_host(temporal_address) as temporal:
            host: Host = temporal
            ghost = unique("ghost")
            for call in (
                host.summary(ghost),
                host.show(ghost),
                host.signal(ghost, "go"),
                host.answer(ghost, "k", 1),
                host.cancel(ghost),
            ):
                with pytest.raises(UnknownRun) as unknown:
                    await call
                assert isinstance(unknown.value, ft.TemporalHostError)
                assert unknown.value.run_id == ghost
                assert str(unknown.value) == f"no run {ghost!r} on Temporal"
            nope = unique("nope")
            for call in (host.schedule(nope), host.pause_schedule(nope)):
                with pytest.raises(UnknownSchedule) as no_schedule:
                    await call
                assert isinstance(no_schedule.value, ft.TemporalHostError)
                assert no_schedule.value.name == nope
                assert str(no_schedule.value) == f"no schedule {nope!r} on Temporal"

            rid = await host.start(ASK, None, unique("done"))

            async def asking() -> bool:
                return bool(await host.open_questions(rid))

            await eventually(asking, f"a question in {rid}")
            [asked] = await host.open_questions(rid)
            await host.answer(rid, asked.key, "no")
            assert (await temporal.result(rid))["output"] == "no"
            await host.cancel(rid)  # Temporal takes it, and it changes nothing
            assert (await host.summary(rid)).status == "completed"
            for call in (host.signal(rid, "go"), host.answer(rid, asked.key, "yes")):
                with pytest.raises(RunSettled) as settled:
                    await call
                assert isinstance(settled.value, ft.TemporalHostError)
                assert settled.value.run_id == rid
                assert str(settled.value) == (
                    f"run {rid!r} has already settled (its workflow is closed)"
                )
            with pytest.raises(RunSettled, match="has already settled: nothing to move") as moved:
                await host.upgrade(rid, ASK)
            assert moved.value.status == "completed"

    asyncio.run(main())
