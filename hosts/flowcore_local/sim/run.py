"""One seed -> a trace and a verdict.

``simulate`` builds a ``World`` for the seed in a fresh temporary directory,
runs it on its ``SimLoop`` until the callers are done and the world has been
quiet long enough for every run to settle or wait, checks the invariants, and
returns what happened: the trace (one line per thing that happened, with the
loop's step and the virtual time: the same bytes for the same seed on the same
code) and the broken invariants, each with the command that replays it.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import shlex
import sys
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from .. import _schedules
from .._host import LocalHost
from . import invariants
from .world import Broken, Config, World


@dataclass
class Result:
    """What one seed did."""

    seed: int
    trace: list[str]
    broken: list[Broken]
    steps: int = 0
    checks: int = 0
    crashes: int = 0
    runs: int = 0
    plant: str | None = None
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.broken

    def command(self) -> str:
        """The command that replays this seed."""
        words = [sys.executable, "-m", "flowcore_local.sim", "run", str(self.seed), "--trace"]
        if self.plant:
            words += ["--plant", self.plant]
        words += [f"--{name}={value}" for name, value in sorted(self.extra.items())]
        return shlex.join(words)

    def verdict(self) -> str:
        if self.ok:
            return f"seed {self.seed}: ok ({self.steps} steps, {self.checks} checks)"
        lines = [f"seed {self.seed}: FAILED"]
        lines += [f"  {b.name} (step {b.step}, {b.at_ms} ms): {b.detail}" for b in self.broken]
        lines.append(f"  replay: {self.command()}")
        return "\n".join(lines)

    def trace_bytes(self) -> bytes:
        return ("\n".join(self.trace) + "\n").encode("utf-8")


def _scratch() -> str | None:
    """A memory-backed directory when there is one: the database's writes cost less."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None


async def _main(world: World) -> None:
    client = LocalHost(
        world.db,
        registry=world.registry,
        durability="process-crash",
        clock=world.now_ms,
        ids=world.hex,
    )
    await client.open()
    world.client = client
    await client.add_schedules(world.child_spec)
    world.start_worker("w1")
    watching = world.spawn("world", invariants.monitor(world, client))
    await world.outside(client)
    world.faults = False
    world.note("faults end")
    if not world.live("w1"):
        world.start_worker("w1")
    await _quiesce(world, client)
    for process in list(world.processes.values()):
        if process.alive:
            process.stop.set()
    for process in list(world.processes.values()):
        if process.alive and process.task is not None:
            await process.task
            await process.host.close()
    watching.cancel()
    await invariants.final(world, client)
    await client.close()


async def _quiesce(world: World, client: LocalHost) -> None:
    """Let the workers finish what can be finished: until nothing can go on for a
    minute without someone outside (twice in a row), or ``quiesce_ms`` at most."""
    end = world.now_ms() + world.config.quiesce_ms
    quiet = 0
    while world.now_ms() < end and quiet < 2:
        await asyncio.sleep(1.0)
        horizon = world.now_ms() + 60_000
        scheduled = _schedules.next_due(client.store)
        calm = await client.idle(60_000) and (scheduled is None or scheduled > horizon)
        quiet = quiet + 1 if calm and world.live("w1") else 0
    world.note("quiet" if quiet >= 2 else "still busy at the end of the quiet time")


@contextmanager
def _quiet() -> Iterator[None]:
    """The host's warnings (a handler's failure, a crash's lost commit) are the
    simulation's everyday: not logged while it runs, and as before after it."""
    loggers = [logging.getLogger(name) for name in ("flowcore.local", "asyncio")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def _bury(loop: asyncio.AbstractEventLoop) -> None:
    """End the tasks the simulation left pending (the crashed processes'): their
    coroutines are closed here, quietly, not at some later garbage collection."""
    hook = sys.unraisablehook
    sys.unraisablehook = lambda _: None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for task in asyncio.all_tasks(loop):
                try:
                    task.get_coro().close()
                except BaseException:  # a dead process's finally, with its database closed
                    pass
                task._log_destroy_pending = False  # type: ignore[attr-defined]
            gc.collect()
    finally:
        sys.unraisablehook = hook


def simulate(seed: int, config: Config | None = None, plant: str | None = None) -> Result:
    """Run one seed; never raises for what the host does (a crash of the simulation
    itself is reported as the broken invariant ``simulation-runs``)."""
    with _quiet(), tempfile.TemporaryDirectory(prefix="flowcore-sim-", dir=_scratch()) as tmp:
        world = World(seed, Path(tmp), config or Config())
        loop = world.loop
        loop.set_exception_handler(lambda loop, context: None)  # dead tasks' complaints
        try:
            loop.run_until_complete(world.spawn("world", _main(world)))
        except Exception as exc:
            world.breaks("simulation-runs", f"{type(exc).__name__}: {exc}")
        finally:
            for process in world.processes.values():
                store = process.host._store
                if store is not None:
                    try:
                        store.conn.close()
                    except Exception:
                        pass
            client = getattr(world, "client", None)
            if client is not None and client._store is not None:
                client._store.conn.close()
            _bury(loop)
            world.graveyard.clear()
            loop.close()
    return Result(
        seed=seed,
        trace=world.trace,
        broken=world.broken,
        steps=loop.steps,
        checks=world.checks,
        crashes=world.crashes,
        runs=len(world.runs),
        plant=plant,
    )
