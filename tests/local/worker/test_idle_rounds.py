"""An idle worker skips the rounds that would find nothing (specs/local.md §6, "Idle
rounds cost one read"), and still sees at once what another process commits, a
timer falling due and its own room freed.

A real ``LocalHost`` on a real SQLite file, run on the simulation's event loop so
that a minute of polling takes no time and every count is exact.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

from flowcore_handlers import Registry
from flowcore_local import LocalHost
from flowcore_local.sim.loop import SimLoop

WAITS = """
flow: waits
steps:
  - {id: go, await_signal: {signal: go}}
output: "${steps.go.output}"
"""

NAPS = """
flow: naps
tools: {echo: {class: readonly}}
steps:
  - {id: nap, sleep: {for_ms: 30000}}
  - {id: e, call_tool: {tool: echo, input: woke}}
output: "${steps.e.output}"
"""

SLOW = """
flow: slow
tools: {hold: {class: readonly}}
steps:
  - {id: h, call_tool: {tool: hold, input: x}}
output: "${steps.h.output}"
"""


def run_on_sim(coro_fn: Any) -> Any:
    loop = SimLoop(random.Random(0))
    try:
        return loop.run_until_complete(coro_fn(loop))
    finally:
        loop.close()


def counting(host: LocalHost) -> list[float]:
    """The loop times at which ``host``'s worker runs a whole round."""
    rounds: list[float] = []
    claim = host._claim_ready

    async def counted() -> None:
        rounds.append(asyncio.get_running_loop().time())
        await claim()

    host._claim_ready = counted  # type: ignore[method-assign]
    return rounds


def test_an_idle_worker_skips_its_rounds_and_sees_another_process_commit(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.db"
    spec = tmp_path / "waits.yaml"
    spec.write_text(WAITS)

    async def main(loop: SimLoop) -> dict[str, Any]:
        def clock() -> int:
            return int(loop.time() * 1000)

        worker = LocalHost(db, registry=Registry(tools={}), poll_ms=50, clock=clock)
        other = LocalHost(db, registry=Registry(tools={}), clock=clock)  # another connection
        await worker.open()
        await other.open()
        await other.start(spec, None, "w1")
        rounds = counting(worker)
        stop = asyncio.Event()
        working = asyncio.ensure_future(worker.work(stop))
        await asyncio.sleep(60.0)  # a minute waiting for a signal: 1,200 polls
        idle_rounds = len(rounds)
        sent_at = loop.time()
        await other.signal("w1", "go", {"n": 1})
        await asyncio.sleep(0.2)
        row = await other.run("w1")
        stop.set()
        await working
        await worker.close()
        await other.close()
        after = [t - sent_at for t in rounds if t >= sent_at]
        return {"idle": idle_rounds, "after": after, "row": row}

    got = run_on_sim(main)
    # The first rounds see the run start and its wait; then a round only when
    # the share is looked at again (every second with nothing written) changes
    # nothing: none. Without the skip: one round per 50 ms poll, 1,200.
    assert got["idle"] <= 4, got["idle"]
    # The signal, committed by another connection, is seen at the next poll.
    assert got["after"] and got["after"][0] <= 0.05, got["after"]
    assert got["row"].status == "completed" and got["row"].output == {"n": 1}


def test_a_timer_falls_due_in_a_skipped_stretch_and_fires_on_time(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    spec = tmp_path / "naps.yaml"
    spec.write_text(NAPS)

    async def echo(call: Any) -> Any:
        return call.input

    async def main(loop: SimLoop) -> tuple[int, Any, float]:
        def clock() -> int:
            return int(loop.time() * 1000)

        host = LocalHost(db, registry=Registry(tools={"echo": echo}), poll_ms=50, clock=clock)
        await host.open()
        await host.start(spec, None, "n1")
        rounds = counting(host)
        await host.work(until_settled="n1")
        row = await host.run("n1")
        await host.close()
        return len(rounds), row, loop.time()

    rounds, row, ended = run_on_sim(main)
    assert row.status == "completed" and row.output == "woke"
    assert 30.0 <= ended < 30.2  # the 30 s sleep, fired when due
    assert rounds > 0


def test_a_full_worker_claims_the_waiting_work_when_its_own_room_frees(
    tmp_path: Path,
) -> None:
    """Concurrency 1, two runs: the second call waits ``ready`` until the first
    ends, and is claimed in the round that follows (the first call's result
    commit and the room it frees are both among what a round compares), not a
    poll later."""
    db = tmp_path / "runs.db"
    spec = tmp_path / "slow.yaml"
    spec.write_text(SLOW)

    async def hold(call: Any) -> Any:
        await asyncio.sleep(5.0)
        return call.input

    async def main(loop: SimLoop) -> tuple[list[Any], float]:
        def clock() -> int:
            return int(loop.time() * 1000)

        host = LocalHost(
            db, registry=Registry(tools={"hold": hold}), poll_ms=1000, concurrency=1, clock=clock
        )
        await host.open()
        await host.start(spec, None, "s1")
        await host.start(spec, None, "s2")
        stop = asyncio.Event()
        working = asyncio.ensure_future(host.work(stop))
        while True:
            rows = [await host.run(r) for r in ("s1", "s2")]
            if all(r.status != "running" for r in rows):
                break
            await asyncio.sleep(0.5)
        ended = loop.time()
        stop.set()
        await working
        await host.close()
        return rows, ended

    rows, ended = run_on_sim(main)
    assert [r.status for r in rows] == ["completed", "completed"]
    assert 10.0 <= ended < 10.9, ended  # one after the other, the second claimed at once
