"""The simulation's event loop: virtual time that jumps, an order drawn from the seed,
crashed processes that run no more code, and no threads."""

from __future__ import annotations

import asyncio
import contextvars
import random
from collections.abc import Coroutine
from typing import Any

import pytest

from flowcore_local.sim.loop import PROCESS, SimLoop, SimulationError


def run(loop: SimLoop, coro: Coroutine[Any, Any, Any]) -> Any:
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()


def test_time_jumps_to_the_next_timer_without_waiting() -> None:
    loop = SimLoop(random.Random(1))

    async def main() -> list[float]:
        seen = []
        for delay in (3600.0, 0.25, 86_400.0):
            await asyncio.sleep(delay)
            seen.append(loop.time())
        return seen

    assert run(loop, main()) == [3600.0, 3600.25, 90_000.25]


def order(seed: int) -> list[int]:
    loop = SimLoop(random.Random(seed))
    out: list[int] = []

    async def one(i: int) -> None:
        await asyncio.sleep(0)
        out.append(i)

    async def main() -> None:
        await asyncio.gather(*(one(i) for i in range(12)))

    run(loop, main())
    return out


def test_the_order_of_ready_callbacks_comes_from_the_seed() -> None:
    assert order(7) == order(7)
    orders = {tuple(order(seed)) for seed in range(6)}
    assert len(orders) > 1  # another seed, another interleaving
    assert all(sorted(o) == list(range(12)) for o in orders)


def test_a_crashed_process_runs_no_more_code_not_even_its_finally() -> None:
    loop = SimLoop(random.Random(3))
    steps: list[str] = []

    async def process() -> None:
        try:
            steps.append("began")
            await asyncio.sleep(1)
            steps.append("after the crash")
        finally:
            steps.append("finally")

    async def main() -> None:
        context = contextvars.copy_context()
        context.run(PROCESS.set, "p")
        task = context.run(loop.create_task, process())
        await asyncio.sleep(0.5)
        loop.dead.add("p")
        await asyncio.sleep(5)
        assert not task.done()
        task.get_coro().close()
        task._log_destroy_pending = False  # type: ignore[attr-defined]

    run(loop, main())
    assert steps == ["began", "finally"]  # the finally ran only when closed by hand


def test_no_thread_is_started_for_a_handler() -> None:
    loop = SimLoop(random.Random(4))

    async def main() -> None:
        await asyncio.to_thread(print, "never")

    with pytest.raises(SimulationError, match="runs no threads"):
        run(loop, main())


def test_a_loop_with_nothing_left_to_run_says_so() -> None:
    loop = SimLoop(random.Random(5))

    async def main() -> None:
        await asyncio.Event().wait()

    with pytest.raises(SimulationError, match="nothing can run"):
        run(loop, main())
