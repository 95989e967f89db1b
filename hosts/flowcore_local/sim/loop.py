"""A deterministic asyncio event loop for the simulation: virtual time, seeded order.

``SimLoop`` is an ``asyncio.BaseEventLoop`` that never waits and never polls
the operating system: its clock (``time``) is virtual and jumps to the next
timer when nothing is ready, and which ready callback runs next is drawn from
the world's ``random.Random`` (as trio's ``MockClock`` with autojump and
``looptime`` do for time, and TigerBeetle's VOPR for scheduling). Nothing
else decides an order, so one seed gives one execution.

Each simulated process runs its tasks in a ``contextvars`` context naming it
(``PROCESS``); a crashed process's callbacks are dropped, never run again (no
``finally`` of its tasks runs: a crash runs no more code). The loop runs no
threads and no I/O: ``run_in_executor`` is refused, so a handler or host path
that would leave the loop is seen, not silently made nondeterministic.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import heapq
import random
from collections.abc import Callable
from typing import Any

# The simulated process a callback belongs to ("" outside every process).
PROCESS: contextvars.ContextVar[str] = contextvars.ContextVar("flowcore_sim_process", default="")


class SimulationError(RuntimeError):
    """The simulation cannot go on: a thread was asked for, or nothing can ever run again."""


class SimLoop(asyncio.BaseEventLoop):
    """An event loop whose time and order come from one ``random.Random``."""

    # BaseEventLoop's own state, which this loop runs (typeshed leaves it out).
    _ready: collections.deque[Any]  # asyncio.Handle
    _scheduled: list[Any]  # asyncio.TimerHandle, a heap
    _timer_cancelled_count: int
    _stopping: bool

    def __init__(self, rng: random.Random, start: float = 0.0) -> None:
        super().__init__()
        self._rng = rng
        self._now = start
        self._clock_resolution = 1e-9
        self.steps = 0  # callbacks run so far
        self.dead: set[str] = set()  # crashed processes: their callbacks never run
        # Called before each callback with the step number: where the world
        # injects faults that happen "at any await point".
        self.before_step: Callable[[int], None] | None = None

    def time(self) -> float:
        return self._now

    def _process_events(self, event_list: Any) -> None:
        pass

    def _write_to_self(self) -> None:
        pass

    def run_in_executor(self, executor: Any, func: Any, *args: Any) -> Any:  # type: ignore[override]
        raise SimulationError(
            f"the simulation runs no threads: {getattr(func, '__qualname__', func)!r}"
            " asked for one (a sync handler, or asyncio.to_thread)"
        )

    def _run_once(self) -> None:
        scheduled = self._scheduled
        if self._timer_cancelled_count > 64 and self._timer_cancelled_count * 2 > len(scheduled):
            kept = [handle for handle in scheduled if not handle._cancelled]
            for handle in scheduled:
                if handle._cancelled:
                    handle._scheduled = False
            heapq.heapify(kept)
            self._scheduled = scheduled = kept
            self._timer_cancelled_count = 0
        while scheduled and scheduled[0]._cancelled:
            self._timer_cancelled_count -= 1
            heapq.heappop(scheduled)._scheduled = False
        ready = self._ready
        if not ready:
            if not scheduled:
                if self._stopping:
                    return
                raise SimulationError("nothing is ready and no timer is set: nothing can run")
            self._now = max(self._now, scheduled[0]._when)  # the virtual clock jumps
        while scheduled and scheduled[0]._when <= self._now:
            handle = heapq.heappop(scheduled)
            handle._scheduled = False
            if not handle._cancelled:
                ready.append(handle)
        if not ready:
            return
        index = self._rng.randrange(len(ready)) if len(ready) > 1 else 0
        chosen = ready[index]
        del ready[index]
        if chosen._cancelled:
            return
        context = chosen._context
        if self.dead and context.get(PROCESS, "") in self.dead:
            return
        self.steps += 1
        if self.before_step is not None:
            self.before_step(self.steps)
            if self.dead and context.get(PROCESS, "") in self.dead:
                return  # the process crashed just before this step
        chosen._run()
