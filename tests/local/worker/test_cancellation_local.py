"""Cancellation types on the local host (language.md §9.2, specs/local.md §4), with real
handlers on a real SQLite file: a losing branch's call is cancelled (``try_cancel``: the
handler gets ``CancelledError``), cancelled and waited for (``wait_cancellation_completed``:
the step ends only once the handler has stopped), or left to run to its end untold
(``abandon``: its late result is recorded and ignored)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import flowcore_handlers
from flowcore import CallTool, Record
from flowcore_handlers import Registry
from flowcore_local import LocalHost

from ..local_helpers import query


def race(mode: str) -> str:
    return f"""
flow: race
tools: {{fast: {{class: idempotent}}, slow: {{class: idempotent}}, after: {{class: idempotent}}}}
steps:
  - id: pick
    parallel:
      mode: race
      branches:
        quick: [{{id: q, call_tool: {{tool: fast}}}}]
        slow: [{{id: s, call_tool: {{tool: slow}}, cancellation: {mode}}}]
  - id: next
    call_tool: {{tool: after}}
output: "${{ {{pick: steps.pick.output, slow: steps.s.status}} }}"
"""


class World:
    """Real handlers and what they saw, in order."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.started = asyncio.Event()
        self.release = asyncio.Event()  # lets an abandoned slow handler finish
        self.host: LocalHost | None = None
        self.db: Path | str | None = None
        self.outbox: list[str] = []  # the run's outbox rows while the cancelled one cleans up

    async def slow(self, call: CallTool) -> Any:
        self.started.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.seen.append("cancelled")
            assert self.db is not None
            # what a worker's recovery would find now
            rows = query(self.db, "SELECT key FROM outbox WHERE run_id = 'r' ORDER BY key")
            self.outbox = [key for (key,) in rows]
            for _ in range(5):  # some cleanup before it stops
                await asyncio.sleep(0.02)
            self.seen.append("stopped")
            raise
        self.seen.append(f"finished, told to stop: {flowcore_handlers.cancelled()}")
        return "late"

    async def fast(self, call: CallTool) -> Any:
        await self.started.wait()  # the slow one runs before the race is decided
        return "won"

    async def after(self, call: CallTool) -> Any:
        self.seen.append("next")
        if self.release.is_set() or "cancelled" in self.seen:
            return "done"
        # abandon: let the slow handler finish and wait until the run has its late result
        self.release.set()
        assert self.host is not None
        while not any(_of(r, "r/s#1") for r in await self.host.records("r")):
            await asyncio.sleep(0.01)
        return "done"

    def registry(self) -> Registry:
        return Registry(tools={"fast": self.fast, "slow": self.slow, "after": self.after})


def _of(record: Record, key: str) -> bool:
    data = record.data if isinstance(record.data, dict) else {}
    return record.type == "event.reported" and data.get("idempotencyKey") == key


async def _play(db: Path | str, mode: str) -> tuple[World, Any, list[Record]]:
    world = World()
    async with LocalHost(db, registry=world.registry()) as host:
        world.host, world.db = host, db
        rid = await host.start(race(mode), None, "r")
        await asyncio.wait_for(host.work(until_settled=rid), timeout=60)
        return world, await host.run(rid), await host.records(rid)


def _order(records: list[Record]) -> list[str]:
    """The log's records for the slow call's end and the next step's call, in order."""
    out = []
    for r in records:
        data = r.data if isinstance(r.data, dict) else {}
        if _of(r, "r/s#1"):
            out.append(f"{data['kind']} {data.get('error', {}).get('type', data.get('output'))}")
        elif r.type == "effect.emitted" and data.get("idempotencyKey") == "r/next#1":
            out.append("next emitted")
    return out


def test_try_cancel_cancels_the_handler_and_forgets_it(
    tmp_path: Path, local_db: Path | str
) -> None:
    world, row, records = asyncio.run(_play(local_db, "try_cancel"))
    assert (row.status, row.output) == (
        "completed",
        {"pick": {"quick": "won"}, "slow": "cancelled"},
    )
    assert world.seen[0] == "cancelled"  # CancelledError in the handler
    assert _order(records) == ["next emitted"]  # its end is never reported
    assert "r/s#1" not in world.outbox  # forgotten: its row went with the cancelling commit
    effect = next(r.data for r in records if r.type == "effect.emitted" and "slow" in str(r.data))
    assert "cancellation" not in effect  # the default: the effect as it always was


def test_wait_ends_the_step_only_once_the_handler_has_stopped(
    tmp_path: Path, local_db: Path | str
) -> None:
    world, row, records = asyncio.run(_play(local_db, "wait_cancellation_completed"))
    assert (row.status, row.output) == (
        "completed",
        {"pick": {"quick": "won"}, "slow": "cancelled"},
    )
    assert world.seen == ["cancelled", "stopped", "next"]
    # Its row stays until its end is reported: a worker that died meanwhile would
    # leave it to recovery, whose answer ends the wait.
    assert world.outbox == ["r/s#1"]
    assert _order(records) == ["effect-failed cancelled", "next emitted"]
    ended = next(r.data for r in records if _of(r, "r/s#1"))
    assert ended["error"] == {
        "type": "cancelled",
        "message": "call-tool r/s#1 stopped when cancelled",
    }


def test_abandon_lets_the_handler_run_to_its_end_and_ignores_its_result(
    tmp_path: Path, local_db: Path | str
) -> None:
    world, row, records = asyncio.run(_play(local_db, "abandon"))
    assert (row.status, row.output) == (
        "completed",
        {"pick": {"quick": "won"}, "slow": "cancelled"},
    )
    # Told nothing, never cancelled: it ran to its end.
    assert world.seen == ["next", "finished, told to stop: False"]
    # Its late result is recorded (after the step went on) and changed nothing.
    assert _order(records) == ["next emitted", "effect-succeeded late"]
    report = {
        e["idempotencyKey"]: e["status"]
        for r in records
        if r.type == "effect.emitted" and r.data.get("kind") == "settled"
        for e in r.data["report"]
    }
    assert report["r/s#1"] == "succeeded"
