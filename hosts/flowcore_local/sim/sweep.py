"""Running many seeds: a sweep over several processes, and shrinking a failing one.

``sweep`` runs seeds over a pool of fresh processes (``spawn``: a planted
bug is applied in those processes alone); ``shrink`` looks for a smaller
schedule on which a failing seed still breaks the same invariant.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator, Sequence
from dataclasses import replace

from .plant import plant
from .run import Result, simulate
from .world import Config


def _extra(config: Config) -> dict[str, str]:
    """The options that make ``config`` from the default, as ``Result.command`` prints them."""
    default, out = Config(), {}
    if config.actions != default.actions:
        out["actions"] = str(config.actions)
    if config.crash_per_step != default.crash_per_step:
        out["crash-rate"] = repr(config.crash_per_step)
    return out


def one(seed: int, config: Config, bug: str | None) -> Result:
    result = simulate(seed, config, bug)
    result.extra = _extra(config)
    return result


_WORKER: tuple[Config, str | None] = (Config(), None)


def _start_worker(config: Config, bug: str | None) -> None:
    global _WORKER
    if bug is not None:
        plant(bug)
    _WORKER = (config, bug)


def _sweep_one(seed: int) -> Result:
    config, bug = _WORKER
    result = one(seed, config, bug)
    result.trace = []  # the command replays it; the trace is not sent back
    return result


def sweep(seeds: Sequence[int], jobs: int, config: Config, bug: str | None) -> Iterator[Result]:
    """Every seed's result, over ``jobs`` processes (in the order they finish)."""
    if jobs <= 1:
        _start_worker(config, bug)
        for seed in seeds:
            yield _sweep_one(seed)
        return
    context = multiprocessing.get_context("spawn")  # a clean process: the bug planted there only
    with context.Pool(jobs, _start_worker, (config, bug), maxtasksperchild=200) as pool:
        yield from pool.imap_unordered(_sweep_one, seeds, chunksize=4)


def shrink(seed: int, config: Config, bug: str | None) -> Result | None:
    """A failing result of ``seed`` on a smaller schedule than ``config``'s, breaking the
    same invariant: fewer outside operations, then fewer crashes. None: it passes."""
    first = one(seed, config, bug)
    if first.ok:
        return None
    name = first.broken[0].name
    best = first

    def fails(candidate: Config) -> Result | None:
        result = one(seed, candidate, bug)
        return result if any(b.name == name for b in result.broken) else None

    actions = config.actions
    while actions > 1:
        found = None
        for fewer in sorted({actions // 2, actions * 3 // 4, actions - 1}):
            if 0 < fewer < actions:
                found = fails(replace(config, actions=fewer))
                if found is not None:
                    config, best, actions = replace(config, actions=fewer), found, fewer
                    break
        if found is None:
            break
    for rate in (0.0, config.crash_per_step / 4, config.crash_per_step / 2):
        if rate < config.crash_per_step:
            found = fails(replace(config, crash_per_step=rate))
            if found is not None:
                best = found
                break
    return best
