"""The Temporal host through the ``Host`` contract, against the real dev server:
operations through a variable typed ``flowcore_handlers.Host``, and its typed refusals."""

from __future__ import annotations

import asyncio
import time

import pytest

import flowcore_temporal as ft
from flowcore_handlers import Host, HostRefusal, RunQuery

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
                page = await host.find_runs(RunQuery(status="Running", started_from_ms=since))
                return any(r.run_id == rid and r.status == "Running" for r in page.runs)

            await eventually(listed, f"{rid} in the visibility listing")
            first = await host.find_runs(RunQuery(started_from_ms=since, limit=1))
            assert len(first.runs) == 1
            if first.cursor is not None:  # the next page goes on after it
                after = await host.find_runs(RunQuery(started_from_ms=since, cursor=first.cursor))
                assert first.runs[0].run_id not in {r.run_id for r in after.runs}

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

    asyncio.run(main())
