"""The simulation's command: ``python -m flowcore_local.sim run|sweep|shrink``.

``run SEED``: one seed; prints its verdict (with ``--trace``, its trace first);
exit 1 when an invariant broke. ``sweep --seeds A..B --jobs N``: every seed
from A to B over N processes; prints each failure with the command that
replays it, then seeds per minute, invariants checked and failures. ``shrink
SEED``: looks for a smaller schedule (fewer outside operations, fewer
crashes) on which the seed still breaks the same invariant, and prints its
command. ``--plant BUG`` runs the host with one of the planted bugs (``plant``).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import replace

from .plant import BUGS, PlantError, plant
from .run import Result
from .sweep import one, shrink, sweep
from .world import Config


def _seeds(text: str) -> range:
    start, sep, end = text.partition("..")
    try:
        first = int(start)
        last = int(end) if sep else first
    except ValueError:
        raise argparse.ArgumentTypeError(f"seeds {text!r}: give A..B or one seed") from None
    if last < first:
        raise argparse.ArgumentTypeError(f"seeds {text!r}: {last} is before {first}")
    return range(first, last + 1)


def _config(args: argparse.Namespace) -> Config:
    config = Config()
    if args.actions is not None:
        config = replace(config, actions=args.actions)
    if args.crash_rate is not None:
        config = replace(config, crash_per_step=args.crash_rate)
    return config


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m flowcore_local.sim",
        description="Deterministic simulation of the local host (specs/testing.md).",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run_p = sub.add_parser("run", help="run one seed")
    run_p.add_argument("seed", type=int)
    run_p.add_argument("--trace", action="store_true", help="print the trace first")
    sweep_p = sub.add_parser("sweep", help="run many seeds over several processes")
    sweep_p.add_argument("--seeds", type=_seeds, required=True, metavar="A..B")
    sweep_p.add_argument("--jobs", type=int, default=2)
    shrink_p = sub.add_parser("shrink", help="a smaller schedule on which SEED still fails")
    shrink_p.add_argument("seed", type=int)
    for p in (run_p, sweep_p, shrink_p):
        p.add_argument("--plant", choices=sorted(BUGS), help="run with a planted bug")
        p.add_argument("--actions", type=int, help="outside operations (default 40)")
        p.add_argument("--crash-rate", type=float, help="chance of a crash per callback")
    args = parser.parse_args(argv)
    config = _config(args)
    try:
        if args.command == "run":
            if args.plant is not None:
                plant(args.plant)
            result = one(args.seed, config, args.plant)
            if args.trace:
                sys.stdout.buffer.write(result.trace_bytes())
            print(result.verdict())
            return 0 if result.ok else 1
        if args.command == "shrink":
            if args.plant is not None:
                plant(args.plant)
            found = shrink(args.seed, config, args.plant)
            if found is None:
                print(f"seed {args.seed}: ok, nothing to shrink")
                return 0
            print(found.verdict())
            return 1
        if args.plant is not None:
            plant(args.plant)  # here too: a bug that does not apply is said before any seed
        return _sweep(args.seeds, args.jobs, config, args.plant)
    except PlantError as exc:
        print(f"flowcore_local.sim: {exc}", file=sys.stderr)
        return 2


def _sweep(seeds: range, jobs: int, config: Config, bug: str | None) -> int:
    began = time.monotonic()
    done = checks = steps = 0
    failed: list[Result] = []
    for result in sweep(seeds, jobs, config, bug):
        done += 1
        checks += result.checks
        steps += result.steps
        if not result.ok:
            failed.append(result)
            print(result.verdict(), flush=True)
    minutes = max(time.monotonic() - began, 1e-9) / 60
    print(
        f"{done} seeds ({seeds.start}..{seeds.stop - 1}) in {minutes * 60:.1f} s on {jobs} jobs:"
        f" {done / minutes:.0f} seeds/minute, {steps} steps, {checks} invariants checked,"
        f" {len(failed)} failed"
        + (f" ({', '.join(str(r.seed) for r in failed)})" if failed else "")
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
