"""Threads for sync handlers, whose results reach the event loop in batches.

``loop.run_in_executor`` with a ``ThreadPoolExecutor`` costs the loop a
concurrent future, a wrapping asyncio future and a wake-up through its
self-pipe for *each* call: tens of microseconds, more than a no-op handler
and more than its share of a group commit. ``HandlerThreads`` hands calls to
its threads through one queue and gives the results back in batches: a
thread that finishes a call appends it to a list and wakes the loop only
when the list was empty, so calls that finish while the loop is busy cost one
wake-up together.

Its threads are daemon threads, started as calls need them up to ``size``:
a handler that never returns does not keep the process from exiting (its
work is recovered like any other lost work).
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["HandlerThreads"]

T = TypeVar("T")

_Call = tuple["asyncio.Future[Any]", Callable[[], Any]]


class HandlerThreads:
    """Up to ``size`` threads running sync calls for one event loop."""

    def __init__(self, size: int, name: str = "flowcore-handler") -> None:
        if size < 1:
            raise ValueError(f"HandlerThreads needs at least one thread, not {size}")
        self.size = size
        self.name = name
        self._calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._finished: list[tuple[asyncio.Future[Any], Any, BaseException | None]] = []
        self._threads: list[threading.Thread] = []
        self._idle = 0  # threads waiting for a call (under _lock)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    async def run(self, call: Callable[[], T]) -> T:
        """Run ``call()`` in one of the threads and return (or raise) what it did."""
        if self._closed:
            raise RuntimeError("HandlerThreads is shut down")
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
        elif self._loop is not loop:
            raise RuntimeError("HandlerThreads serves the event loop it was first used on")
        future: asyncio.Future[T] = loop.create_future()
        with self._lock:
            start = self._idle == 0 and len(self._threads) < self.size
            if not start:
                self._idle -= 1 if self._idle else 0
        if start:
            thread = threading.Thread(
                target=self._work, name=f"{self.name}-{len(self._threads)}", daemon=True
            )
            self._threads.append(thread)
            thread.start()
        self._calls.put((future, call))
        return await future

    def shutdown(self) -> None:
        """Let the threads end once the calls they are running return."""
        self._closed = True
        for _ in self._threads:
            self._calls.put(None)

    def _work(self) -> None:
        while True:
            item = self._calls.get()
            if item is None:
                return
            future, call = item
            value: Any = None
            error: BaseException | None = None
            try:
                value = call()
            except BaseException as exc:  # handed to the awaiting task
                error = exc
            with self._lock:
                wake = not self._finished
                self._finished.append((future, value, error))
                self._idle += 1
            loop = self._loop
            if wake and loop is not None:
                try:
                    loop.call_soon_threadsafe(self._deliver)
                except RuntimeError:  # the loop is closed: nobody waits any more
                    return

    def _deliver(self) -> None:
        with self._lock:
            finished, self._finished = self._finished, []
        for future, value, error in finished:
            if future.done():  # the awaiting task was cancelled
                continue
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(value)
