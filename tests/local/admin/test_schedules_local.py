"""Schedules on the local host: a worker fires due slots, under each policy, with an
injected clock that jumps (no test waits for real time to pass)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from flowcore.schedules import iso_ms, run_id_for
from flowcore_local import HostError, LocalHost

MIN = 60_000
HOUR = 60 * MIN
T0 = 1_796_083_200_000  # 2026-12-01T00:00:00Z

FLOW = """\
flow: job
steps:
  - {id: hold, await_signal: {signal: done}}
output: "${input}"
"""


class Clock:
    """The host's clock: the test moves it."""

    def __init__(self, at: int = T0) -> None:
        self.at = at

    def __call__(self) -> int:
        return self.at


async def until(check: Callable[[], Awaitable[bool]], what: str, timeout: float = 60) -> None:
    """Wait for ``check`` (generously: a loaded machine is slow, never wrong)."""
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


class Scene:
    def __init__(self, host: LocalHost, clock: Clock, spec: Path) -> None:
        self.host, self.clock, self.spec = host, clock, spec

    async def actions(self, name: str = "s") -> list[tuple[str, str, str | None]]:
        info = await self.host.schedule(name)
        return [
            (a["action"], iso_ms(a["slotMs"])[11:19], a["why"])
            for a in info["actions"]
            if a["slotMs"] is not None
        ]

    async def jump(self, ms: int, name: str = "s") -> None:
        """Move the clock and wait until the worker has decided every slot due by then."""
        self.clock.at += ms
        target = self.clock.at

        async def decided() -> bool:
            info = await self.host.schedule(name)
            return info["paused"] or info["nextMs"] is None or info["nextMs"] > target

        await until(decided, f"schedule {name!r} to decide the slots due at {iso_ms(target)}")

    async def started(self, slot: str, name: str = "s") -> str:
        run_id = f"{name}@2026-12-01T{slot}Z"

        async def there() -> bool:
            return any(r.run_id == run_id for r in await self.host.runs())

        await until(there, f"run {run_id}")
        return run_id

    async def finish(self, run_id: str) -> None:
        await self.host.signal(run_id, "done")
        assert (await self.host.run(run_id)).status == "completed"


@asynccontextmanager
async def scene(tmp_path: Path, db: Path | str, **definition: Any) -> AsyncIterator[Scene]:
    clock = Clock()
    spec = tmp_path / "job.yaml"
    spec.write_text(FLOW)
    async with LocalHost(db, clock=clock, poll_ms=10) as host:
        if definition:
            await host.add_schedule(spec, "s", definition)
        stop = asyncio.Event()
        worker = asyncio.create_task(host.work(stop))
        try:
            yield Scene(host, clock, spec)
        finally:
            stop.set()
            await asyncio.wait_for(worker, 60)


def test_skip_leaves_out_slots_while_the_previous_run_runs(
    tmp_path: Path, local_db: Path | str
) -> None:
    async def main() -> None:
        async with scene(tmp_path, local_db, every="1m", input={"at": "${schedule.at}"}) as s:
            await s.jump(MIN)
            first = await s.started("00:01:00")
            assert (await s.host.run(first)).input == {"at": "2026-12-01T00:01:00Z"}
            await s.jump(MIN)
            await s.finish(first)
            await s.jump(MIN)
            await s.started("00:03:00")
            assert await s.actions() == [
                ("started", "00:01:00", None),
                ("skipped", "00:02:00", "the previous run is still running"),
                ("started", "00:03:00", None),
            ]
            assert len(await s.host.runs()) == 2

    asyncio.run(main())


def test_buffer_one_starts_one_waiting_slot_when_the_run_ends(
    tmp_path: Path, local_db: Path | str
) -> None:
    async def main() -> None:
        definition = {"every": "1m", "overlap": "buffer_one", "input": "${schedule.at}"}
        async with scene(tmp_path, local_db, **definition) as s:
            await s.jump(MIN)
            first = await s.started("00:01:00")
            await s.jump(MIN)
            await s.jump(MIN)
            assert (await s.host.schedule("s"))["bufferedMs"] == T0 + 2 * MIN
            await s.finish(first)  # no clock move: the buffered slot starts when the run ends
            second = await s.started("00:02:00")
            assert (await s.host.run(second)).input == "2026-12-01T00:02:00Z"
            assert await s.actions() == [
                ("started", "00:01:00", None),
                ("buffered", "00:02:00", None),
                (
                    "skipped",
                    "00:03:00",
                    "the previous run is still running and a slot already waits",
                ),
                ("started", "00:02:00", None),
            ]

    asyncio.run(main())


def test_allow_all_starts_every_slot(tmp_path: Path, local_db: Path | str) -> None:
    async def main() -> None:
        async with scene(
            tmp_path, local_db, every="1m", overlap="allow_all", catchup_window="5m"
        ) as s:
            await s.jump(3 * MIN)
            for slot in ("00:01:00", "00:02:00", "00:03:00"):
                await s.started(slot)
            assert [a[0] for a in await s.actions()] == ["started"] * 3
            info = await s.host.schedule("s")
            assert len(info["running"]) == 3

    asyncio.run(main())


def test_a_settled_run_is_forgotten_by_its_schedule_when_it_settles(
    tmp_path: Path, local_db: Path | str
) -> None:
    """``schedule_runs`` holds a schedule's runs only while they run (specs/local.md §12):
    the row goes in the transaction that settles the run, not at the next decision."""

    def rows(host: LocalHost) -> list[tuple[str, str]]:
        return list(host.store.conn.execute("SELECT name, run_id FROM schedule_runs"))

    async def main() -> None:
        async with scene(tmp_path, local_db, every="1h", overlap="allow_all") as s:
            await s.jump(HOUR)
            run_id = await s.started("01:00:00")
            assert rows(s.host) == [("s", run_id)]
            await s.finish(run_id)
            assert rows(s.host) == []
            await s.host.cancel(await s.host.trigger_schedule("s"))
            assert rows(s.host) == []

    asyncio.run(main())


def test_cancel_other_cancels_the_running_run_then_starts(
    tmp_path: Path, local_db: Path | str
) -> None:
    async def main() -> None:
        async with scene(tmp_path, local_db, every="1m", overlap="cancel_other") as s:
            await s.jump(MIN)
            first = await s.started("00:01:00")
            await s.jump(MIN)
            await s.started("00:02:00")
            assert (await s.host.run(first)).status == "cancelled"
            assert await s.actions() == [
                ("started", "00:01:00", None),
                ("cancelled-other", "00:02:00", None),
                ("buffered", "00:02:00", None),
                ("started", "00:02:00", None),
            ]
            info = await s.host.schedule("s")
            assert info["actions"][1]["runId"] == first

    asyncio.run(main())


def test_after_downtime_only_slots_inside_the_catch_up_window_start(
    tmp_path: Path, local_db: Path | str
) -> None:
    async def main() -> None:
        definition = {"every": "1h", "catchup_window": "90m", "overlap": "allow_all"}
        async with scene(tmp_path, local_db, **definition) as s:
            await s.jump(HOUR)
            await s.started("01:00:00")
        # The host is down for a day and a half hour.
        async with scene(tmp_path, local_db) as s:
            s.clock.at = T0 + 25 * HOUR + 30 * MIN
            await s.jump(0)
            actions = await s.actions()
            assert actions[0] == ("started", "01:00:00", None)
            assert actions[1:-2] == [
                ("skipped", f"{h:02d}:00:00", "outside catch-up window") for h in range(2, 23)
            ]
            assert actions[-2:] == [("started", "00:00:00", None), ("started", "01:00:00", None)]
            runs = sorted(r.run_id for r in await s.host.runs())
            assert runs == [
                "s@2026-12-01T01:00:00Z",
                "s@2026-12-02T00:00:00Z",
                "s@2026-12-02T01:00:00Z",
            ]

    asyncio.run(main())


def test_a_paused_schedule_starts_nothing_and_resumes_from_then(
    tmp_path: Path, local_db: Path | str
) -> None:
    async def main() -> None:
        async with scene(
            tmp_path, local_db, every="1m", overlap="allow_all", catchup_window="1h"
        ) as s:
            await s.host.pause_schedule("s", "maintenance")
            info = await s.host.schedule("s")
            assert info["paused"] and info["note"] == "maintenance" and info["nextSlotsMs"] == []
            s.clock.at += 10 * MIN
            await asyncio.sleep(0.1)  # the worker has looked (it would have started them)
            assert await s.host.runs() == []
            await s.host.resume_schedule("s")
            await s.jump(MIN)
            await s.started("00:11:00")
            assert [r.run_id for r in await s.host.runs()] == ["s@2026-12-01T00:11:00Z"]

    asyncio.run(main())


def test_a_limit_stops_the_cadence_but_not_a_trigger(tmp_path: Path, local_db: Path | str) -> None:
    async def main() -> None:
        definition = {"every": "1m", "overlap": "allow_all", "limit": 2, "input": "${schedule.at}"}
        async with scene(tmp_path, local_db, **definition) as s:
            await s.jump(MIN)
            await s.jump(MIN)
            await s.jump(MIN)
            await s.started("00:02:00")
            info = await s.host.schedule("s")
            assert info["remaining"] == 0 and info["nextMs"] is None
            assert len(await s.host.runs()) == 2
            run_id = await s.host.trigger_schedule("s")
            assert run_id == "s@trigger-1"
            assert (await s.host.run(run_id)).input == iso_ms(s.clock.at)
            assert await s.host.trigger_schedule("s") == "s@trigger-2"
            assert (await s.host.schedule("s"))["actions"][-1]["why"] == "triggered"
            await s.host.delete_schedule("s")  # added again: the numbers taken are passed
            await s.host.add_schedule(s.spec, "s", {"every": "1m"})
            assert await s.host.trigger_schedule("s") == "s@trigger-3"

    asyncio.run(main())


def test_backfill_starts_each_slot_once_under_the_overlap_policy(
    tmp_path: Path, local_db: Path | str
) -> None:
    async def main() -> None:
        async with scene(tmp_path, local_db, every="1h", overlap="allow_all") as s:
            done = await s.host.backfill_schedule("s", T0 - 3 * HOUR, T0 - HOUR)
            assert [(a["action"], a["runId"]) for a in done] == [
                ("started", "s@2026-11-30T21:00:00Z"),
                ("started", "s@2026-11-30T22:00:00Z"),
                ("started", "s@2026-11-30T23:00:00Z"),
            ]
            again = await s.host.backfill_schedule("s", T0 - 3 * HOUR, T0 - HOUR)
            assert {a["action"] for a in again} == {"skipped"}
            assert len(await s.host.runs()) == 3
            await s.host.add_schedule(s.spec, "t", {"every": "1h"})
            skipping = await s.host.backfill_schedule("t", T0 - 3 * HOUR, T0 - HOUR)
            assert [a["action"] for a in skipping] == ["started", "skipped", "skipped"]
            with pytest.raises(HostError, match="before it starts"):
                await s.host.backfill_schedule("t", T0, T0 - HOUR)

    asyncio.run(main())


SPEC = (
    FLOW
    + """\
schedules:
  s:
    every: 1m
    input: {at: "${schedule.at}"}
"""
)


def test_a_newer_spec_replaces_the_definition_and_keeps_the_history(
    tmp_path: Path, local_db: Path | str
) -> None:
    async def main() -> None:
        async with scene(tmp_path, local_db) as s:
            s.spec.write_text(SPEC)
            assert await s.host.add_schedules(s.spec) == ["s"]
            await s.jump(MIN)
            await s.started("00:01:00")
            await s.host.pause_schedule("s", "by hand")
            assert await s.host.add_schedules(s.spec) == ["s"]  # the same spec: still paused
            assert (await s.host.schedule("s"))["paused"]
            s.spec.write_text(SPEC.replace("every: 1m", "every: 2m"))
            await s.host.add_schedules(s.spec)
            info = await s.host.schedule("s")
            assert info["paused"] and info["definition"]["every"] == 2 * MIN  # still paused
            assert [a["action"] for a in info["actions"]] == ["started"]  # history kept
            assert info["declared"] and info["consideredMs"] == T0 + MIN
            await s.host.resume_schedule("s")
            s.spec.write_text(SPEC.replace("every: 1m", "every: 2m\n    paused: true\n    note: x"))
            await s.host.add_schedules(s.spec)  # the spec pauses it: that change applies
            info = await s.host.schedule("s")
            assert info["paused"] and info["note"] == "x"

    asyncio.run(main())


def test_bad_requests_are_refused_with_the_reason(tmp_path: Path, local_db: Path | str) -> None:
    async def main() -> None:
        async with scene(tmp_path, local_db, every="1m") as s:
            with pytest.raises(HostError, match="no schedule 'nope'"):
                await s.host.schedule("nope")
            with pytest.raises(HostError, match="no schedule 'nope'"):
                await s.host.trigger_schedule("nope")
            with pytest.raises(HostError, match="declares no schedules"):
                await s.host.add_schedules(s.spec)
            with pytest.raises(HostError, match=r"s\.overlap: overlap 'skp'.*did you mean 'skip'"):
                await s.host.add_schedule(s.spec, "s", {"every": "1m", "overlap": "skp"})
            await s.host.delete_schedule("s")
            assert await s.host.schedules() == []
            with pytest.raises(HostError, match="no schedule 's'"):
                await s.host.delete_schedule("s")

    asyncio.run(main())


def test_an_input_the_flow_refuses_is_recorded_as_a_skip(
    tmp_path: Path, local_db: Path | str
) -> None:
    async def main() -> None:
        schema = FLOW + "input_schema: {type: object, required: [day]}\n"
        async with scene(tmp_path, local_db) as s:
            s.spec.write_text(schema)
            await s.host.add_schedule(s.spec, "s", {"every": "1m", "input": {"x": 1}})
            await s.jump(MIN)
            [(action, slot, why)] = await s.actions()
            assert (action, slot) == ("skipped", "00:01:00")
            assert why is not None and why.startswith("not started: ") and "day" in why
            assert await s.host.runs() == []

    asyncio.run(main())


def test_a_worker_limited_to_one_run_starts_no_scheduled_runs(
    tmp_path: Path, local_db: Path | str
) -> None:
    async def main() -> None:
        clock = Clock()
        spec = tmp_path / "job.yaml"
        spec.write_text(FLOW)
        async with LocalHost(local_db, clock=clock, poll_ms=10) as host:
            await host.add_schedule(spec, "s", {"every": "1m"})
            run_id = await host.start(spec, None, "mine")
            clock.at += 5 * MIN
            stop = asyncio.Event()
            worker = asyncio.create_task(host.work(stop, only=run_id))
            await asyncio.sleep(0.2)
            await host.signal(run_id, "done")
            stop.set()
            await worker
            assert [r.run_id for r in await host.runs()] == ["mine"]
            assert run_id_for("s", T0 + MIN) not in {r.run_id for r in await host.runs()}

    asyncio.run(main())


def test_a_schedule_that_cannot_be_decided_stops_neither_the_worker_nor_the_others(
    tmp_path: Path, local_db: Path | str, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        async with scene(tmp_path, local_db, every="1m", overlap="allow_all") as s:
            await s.host.add_schedule(s.spec, "broken", {"every": "1m"})
            s.host.store.conn.execute(
                "UPDATE schedules SET definition = '{\"every\": \"soon\"}' WHERE name = 'broken'"
            )
            await s.jump(MIN)
            await s.started("00:01:00")
            await s.jump(MIN)
            await s.started("00:02:00")
            broken = s.host.store.conn.execute(
                "SELECT next_ms FROM schedules WHERE name = 'broken'"
            ).fetchone()[0]
            assert broken > s.clock.at  # looked at again later, not in a loop
            with pytest.raises(HostError, match="'broken' cannot be read from the database"):
                await s.host.schedule("broken")

    asyncio.run(main())
    assert "schedule broken cannot be decided (HostError" in caplog.text


# SQLite only: it reads or doctors the SQLite file itself.
def test_a_schedule_has_an_owner_whose_runs_it_starts_and_old_ones_have_none(
    tmp_path: Path,
) -> None:
    from flowcore_local._db import connect

    spec = tmp_path / "job.yaml"
    spec.write_text(FLOW)
    db = tmp_path / "s.db"

    async def add() -> None:
        async with LocalHost(db, clock=Clock()) as host:
            await host.add_schedule(spec, "mine", {"every": "1h"}, owner="alice")
            await host.add_schedule(spec, "old", {"every": "1h"}, owner="alice")
            assert (await host.schedule("mine"))["owner"] == "alice"
            run_id = await host.trigger_schedule("mine")
            assert (await host.run(run_id)).principal == "alice"

    asyncio.run(add())
    # A database of schema 10 had no owners: its schedules become no one's.
    conn = connect(db)
    conn.execute("ALTER TABLE schedules DROP COLUMN owner")
    conn.execute("ALTER TABLE scheduled_calls DROP COLUMN recurrence")  # schema 12's
    conn.execute("PRAGMA user_version = 10")
    conn.close()

    async def reopened() -> None:
        async with LocalHost(db, clock=Clock()) as host:
            assert (await host.schedule("old"))["owner"] is None
            run_id = await host.trigger_schedule("old")
            assert (await host.run(run_id)).principal is None

    asyncio.run(reopened())
