"""Each of the simulation's end-of-run invariants breaks, by its name, on evidence
that breaks it, and holds on the same evidence made right: none is a check that
cannot fail. (The ones checked as a run goes, and ``runs-settle-or-wait``, are
shown breaking by the planted bugs in ``test_sim_seeds.py``.)"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import flowcore
from flowcore_handlers import Registry
from flowcore_local import LocalHost
from flowcore_local.sim import invariants
from flowcore_local.sim.world import Ack


class Seen:
    """What the invariants tell a world: the checks made and what broke."""

    def __init__(self, acks: list[Ack] | None = None) -> None:
        self.checks = 0
        self.broken: list[tuple[str, str]] = []
        self.acks = acks or []

    def breaks(self, name: str, detail: str) -> None:
        self.broken.append((name, detail))


def record(kind: str, data: dict[str, Any], index: int = 0) -> flowcore.Record:
    return flowcore.Record(type=kind, run_id="r", index=index, at=0, data=data)


def emitted(key: str, budget: dict[str, int] | None = None) -> flowcore.Record:
    data: dict[str, Any] = {"kind": "call-tool", "tool": "t", "idempotencyKey": key}
    if budget is not None:
        data["budgetRemaining"] = budget
    return record("effect.emitted", data)


def reported(kind: str, **data: Any) -> flowcore.Record:
    return record("event.reported", {"kind": kind, "atMs": 0, **data})


def names(seen: Seen) -> list[str]:
    return [name for name, _ in seen.broken]


def test_a_key_answered_more_often_than_emitted_breaks_keys_answered_once() -> None:
    once = [emitted("r/a#1"), reported("effect-succeeded", idempotencyKey="r/a#1")]
    seen = Seen()
    invariants._answered_once(seen, "r", once)  # type: ignore[arg-type]
    assert names(seen) == []
    seen = Seen()
    invariants._answered_once(seen, "r", [*once, once[1]])  # type: ignore[arg-type]
    assert names(seen) == ["keys-answered-once"]
    assert "r/a#1 answered 2 times, emitted 1" in seen.broken[0][1]


def test_a_child_signalling_twice_breaks_signal_run_delivered_once() -> None:
    signal = reported("signal-received", signal="done", payload="child-1")
    seen = Seen()
    invariants._delivered_once(seen, "r", [signal], {"r", "child-1"})  # type: ignore[arg-type]
    assert names(seen) == []
    seen = Seen()
    invariants._delivered_once(seen, "r", [signal, signal], {"r", "child-1"})  # type: ignore[arg-type]
    assert names(seen) == ["signal-run-delivered-once"]


def test_an_effect_emitted_with_a_negative_budget_breaks_budgets_not_negative() -> None:
    seen = Seen()
    invariants._budgets(seen, "r", [emitted("r/a#1", {"steps": 0})])  # type: ignore[arg-type]
    assert names(seen) == []
    seen = Seen()
    invariants._budgets(seen, "r", [emitted("r/a#1", {"steps": -1})])  # type: ignore[arg-type]
    assert names(seen) == ["budgets-not-negative"]


FLOW = """
flow: waits
steps:
  - {id: go, await_signal: {signal: go}}
"""


def test_the_database_invariants_break_on_a_database_that_breaks_them(tmp_path: Path) -> None:
    """``acknowledged-not-lost``, ``log-replays`` and ``schedule-slot-started-once``,
    read from a real local host's database: as it is, then doctored."""

    async def main() -> None:
        async with LocalHost(tmp_path / "d.db", registry=Registry()) as host:
            run_id = await host.start(FLOW, {}, run_id="w-1")
            await host.signal(run_id, "go", {"serial": 1})  # as the world sends
            sent = [Ack("start", run_id), Ack("signal", run_id, "1")]

            seen = Seen(sent)
            invariants._acknowledged(seen, host, {run_id})  # type: ignore[arg-type]
            await invariants._replays(seen, host, run_id)  # type: ignore[arg-type]
            invariants.schedule_slots(seen, host)  # type: ignore[arg-type]
            assert names(seen) == [] and seen.checks == 4

            # An acknowledged signal and run the database does not hold.
            lost = [*sent, Ack("signal", run_id, "2"), Ack("start", "w-2")]
            seen = Seen(lost)
            invariants._acknowledged(seen, host, {run_id})  # type: ignore[arg-type]
            assert names(seen) == ["acknowledged-not-lost"] * 2

            # A log whose run.started names another flow does not replay.
            conn = host.store.conn
            conn.execute(
                "UPDATE log SET data = replace(data, '\"waits\"', '\"other\"')"
                " WHERE run_id = ? AND type = 'run.started'",
                (run_id,),
            )
            seen = Seen()
            await invariants._replays(seen, host, run_id)  # type: ignore[arg-type]
            assert names(seen) == ["log-replays"]

            # Two runs started for one schedule slot.
            for n in (1, 2):
                conn.execute(
                    "INSERT INTO schedule_actions (name, n, slot_ms, action, run_id, at_ms)"
                    " VALUES ('nightly', ?, 1000, 'started', ?, 0)",
                    (n, f"s-{n}"),
                )
            seen = Seen()
            invariants.schedule_slots(seen, host)  # type: ignore[arg-type]
            assert names(seen) == ["schedule-slot-started-once"]

            # A run triggered by hand at a slot's time is no second start of it.
            conn.execute("UPDATE schedule_actions SET why = 'triggered' WHERE n = 2")
            seen = Seen()
            invariants.schedule_slots(seen, host)  # type: ignore[arg-type]
            assert names(seen) == []

    asyncio.run(main())
