"""flowcore schedules as real Temporal Schedules, against ``temporal server start-dev``.

The cadence maps onto Temporal's ScheduleSpec so that Temporal's next action
times are flowcore's slots; a scheduled run gets its input from the slot
(``TemporalScheduledStartTime``) and its workflow id from the schedule and
the slot; pause, trigger, backfill and delete act on the Temporal Schedule.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("temporalio", reason="the Temporal host tests need temporalio (.[dev])")

import flowcore
import flowcore_temporal as ft
from flowcore.schedules import iso_ms, slots_after

from .support import eventually, running_host, unique

FLOW = """\
flow: tick
steps:
  - {{id: nap, sleep: {{for_ms: 1}}}}
output: "${{input}}"
schedules:
  {name}:
    every: 2s
    overlap: allow_all
    input: {{at: "${{schedule.at}}", name: "${{schedule.name}}"}}
  {name}-nightly:
    cron: "0 7 * * *"
    timezone: Europe/Paris
  {name}-quarter:
    every: 1h
    offset: 15m
    overlap: buffer_one
    paused: true
    note: not yet
    limit: 5
"""


def test_schedules_run_on_temporal(temporal_address: str, tmp_path: Path) -> None:
    name = unique("tick")
    spec = tmp_path / "tick.yaml"
    spec.write_text(FLOW.format(name=name))
    flow = flowcore.parse_flow(spec.read_text())

    async def main() -> None:
        async with running_host(temporal_address) as host:
            added = await host.add_schedules(spec, owner="alice")
            assert added == [name, f"{name}-nightly", f"{name}-quarter"]
            try:
                await check(host)
            finally:
                for each in added:
                    try:
                        await host.delete_schedule(each)
                    except ft.TemporalHostError:
                        pass

    async def check(host: ft.TemporalHost) -> None:
        # The cadence: Temporal's next action times are flowcore's slots.
        now = int(time.time() * 1000)
        nightly = await host.schedule(f"{name}-nightly")
        expected = slots_after(flow.schedules[f"{name}-nightly"], now, 3)
        assert nightly["nextSlotsMs"][:3] == expected
        assert nightly["definition"]["overlap"] == "skip" and not nightly["paused"]
        assert nightly["owner"] == "alice"
        assert nightly["definition"]["cron"] == "0 7 * * *"
        assert nightly["definition"]["timezone"] == "Europe/Paris"
        quarter = await host.schedule(f"{name}-quarter")
        assert quarter["paused"] and quarter["note"] == "not yet" and quarter["remaining"] == 5
        assert quarter["definition"]["every"] == 3_600_000
        assert quarter["definition"]["offset"] == 900_000
        assert quarter["definition"]["overlap"] == "buffer_one"
        # Temporal lists schedules from its visibility store, which catches up
        # with a create a moment later (eventually consistent).
        wanted = {name, f"{name}-nightly", f"{name}-quarter"}

        async def listed() -> bool:
            return set(await host.schedules()) >= wanted

        assert await eventually(listed, "the new schedules listed", timeout=60, every=0.5)

        # A scheduled run: its id and its input come from the slot.
        async def first_run() -> Any:
            info = await host.schedule(name)
            return info["actions"][0] if info["actions"] else None

        action = await eventually(first_run, "a run of the schedule", timeout=60)
        slot = iso_ms(action["slotMs"])
        assert action["runId"] == f"{name}-{slot}"
        result = await host.result(action["runId"])
        assert result["status"] == "completed"
        assert result["output"] == {"at": slot, "name": name}
        # It is the schedule's owner's run, as every run the schedule starts.
        assert (await host.summary(action["runId"])).principal == "alice"

        # Backfill: the slots of a past range, each with the slot's id.
        start = (action["slotMs"] // 2000) * 2000 - 60_000
        await host.backfill_schedule(name, start, start + 4000)
        for at in (start, start + 2000, start + 4000):
            run_id = f"{name}-{iso_ms(at)}"
            done = await eventually(_result(host, run_id), f"backfilled run {run_id}", 60)
            assert done["output"] == {"at": iso_ms(at), "name": name}
            assert (await host.summary(run_id)).principal == "alice"

        # Pause, resume, trigger (a run now, paused or not), delete.
        await host.pause_schedule(name, "quiet")
        paused = await host.schedule(name)
        assert paused["paused"] and paused["note"] == "quiet"
        await host.trigger_schedule(f"{name}-quarter")  # paused, and hours from a slot

        async def triggered() -> Any:
            return (await host.schedule(f"{name}-quarter"))["actions"]

        [done] = await eventually(triggered, "the triggered run", 60)
        assert done["runId"] == f"{name}-quarter-{iso_ms(done['slotMs'] // 1000 * 1000)}"
        result = await host.result(done["runId"])
        assert result["status"] == "completed"
        assert (await host.summary(done["runId"])).principal == "alice"
        await host.resume_schedule(name)
        assert not (await host.schedule(name))["paused"]
        await host.delete_schedule(name)
        with pytest.raises(ft.TemporalHostError, match="no schedule"):
            await host.schedule(name)

    asyncio.run(main())


def _result(host: ft.TemporalHost, run_id: str) -> Callable[[], Awaitable[Any]]:
    """A check for ``eventually``: the run's result once it exists and has settled."""

    async def check() -> Any:
        try:
            return await host.result(run_id)
        except ft.TemporalHostError:
            return None

    return check


def test_a_spec_without_schedules_is_refused(temporal_address: str, tmp_path: Path) -> None:
    spec = tmp_path / "plain.yaml"
    spec.write_text(FLOW.format(name="x").split("schedules:")[0])

    async def main() -> None:
        async with running_host(temporal_address) as host:
            with pytest.raises(ft.TemporalHostError, match="declares no schedules"):
                await host.add_schedules(spec)

    asyncio.run(main())


def test_the_temporal_schedule_commands(temporal_address: str, tmp_path: Path) -> None:
    from .test_temporal_cli import Cli

    cli = Cli(temporal_address, unique("cli"))
    name = unique("cmd")
    spec = tmp_path / "tick.yaml"
    spec.write_text(FLOW.format(name=name).replace("every: 2s", "every: 1h"))
    out = cli.ok("schedule", "add", "--spec", str(spec))
    assert f"schedule {name}: every 1h; active; next " in out
    assert f"schedule {name}-quarter: every 1h +15m; paused: not yet; next " in out
    try:
        shown = json.loads(cli.ok("schedule", "show", f"{name}-nightly", "--json"))
        assert shown["definition"]["overlap"] == "skip" and len(shown["nextSlotsMs"]) == 5
        assert cli.ok("schedule", "pause", name, "--note", "quiet").strip() == (
            f"schedule {name} paused"
        )
        text = cli.ok("schedule", "show", name)
        assert f"schedule {name}: paused: quiet" in text and "overlap allow_all" in text
        # A newer spec updates the schedule; Temporal keeps its state (still paused).
        spec.write_text(
            spec.read_text().replace(
                "every: 1h\n    overlap: allow_all", "every: 2h\n    overlap: allow_all"
            )
        )
        cli.ok("schedule", "add", "--spec", str(spec))
        again = json.loads(cli.ok("schedule", "show", name, "--json"))
        assert again["paused"] and again["definition"]["every"] == 7_200_000
        assert "cadence     cron 0 7 * * * (Europe/Paris)" in cli.ok(
            "schedule", "show", f"{name}-nightly"
        )
        # Listed from Temporal's visibility store, which catches up a moment later.
        deadline = time.monotonic() + 60
        while True:
            listed = json.loads(cli.ok("schedule", "list", "--json"))
            if {name, f"{name}-quarter"} <= {item["name"] for item in listed}:
                break
            assert time.monotonic() < deadline, f"not listed within 60 s: {listed}"
            time.sleep(0.5)
        assert "schedule" in cli.ok("schedule", "list")
        cli.ok("schedule", "resume", name)
        cli.ok("schedule", "trigger", f"{name}-quarter")
        day = ["--start", "2026-01-01T00:00:00Z", "--end", "2026-01-01T02:00:00Z"]
        cli.ok("schedule", "backfill", name, *day)
        reversed_day = ["--start", day[3], "--end", day[1]]
        assert "before it starts" in cli.bad("schedule", "backfill", name, *reversed_day)
    finally:
        for each in (name, f"{name}-nightly", f"{name}-quarter"):
            cli("schedule", "delete", each)
    assert cli.bad("schedule", "show", name) == f"flowcore: no schedule {name!r} on Temporal"
