"""The core against an older commit's core, alternated in one process.

``compare_commits.py`` runs a benchmark script in fresh processes, old and new
in turn; on a busy machine the rounds drift apart by more than the effect
being measured. This script extracts the old commit's ``flowcore/`` (it
imports only relatively) as the package ``flowcore_base`` into a temporary
directory and imports it next to the working tree's ``flowcore``; each round
then times the same work on both, one right after the other (the order
swapped every round), so both see the same load. The work is the two flows
of ``bench_replay.py``: driving a run with ``advance`` event by event, and
``replay`` of its log (NDJSON and MessagePack) from bytes.

Printed per flow and measure: the median and the minimum over the rounds for
each tree, in microseconds per step, and the ratios new/old.

Run::

    python benchmarks/ab_core.py --base 6fc4d87 [--rounds 21] [--n 1000]
"""

from __future__ import annotations

import argparse
import gc
import importlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_replay  # type: ignore[import-not-found]
from compare_commits import extract  # type: ignore[import-not-found]


def setup(pkg: ModuleType, flow_name: str, n: int) -> dict[str, Callable[[], object]]:
    """The timed work for one core: advance over the events, replay of each log format."""
    # bench_replay's flows and driver, pointed at this core.
    bench_replay.flowcore = pkg
    bench_replay.CallTool = pkg.CallTool
    bench_replay.EffectSucceeded = pkg.EffectSucceeded
    bench_replay.Recorder = pkg.Recorder
    flow, inp = bench_replay.FLOWS[flow_name](n)
    records, events = bench_replay.record_run(flow, inp)
    data = {fmt: pkg.encode_records(records, fmt) for fmt in ("json", "msgpack")}

    def drive() -> None:
        state = pkg.start(flow, inp, run_id="r-bench", now_ms=0).state
        advance = pkg.advance
        for event in events:
            state = advance(state, event).state

    return {
        "advance": drive,
        "replay json": lambda: pkg.replay(data["json"], flow),
        "replay msgpack": lambda: pkg.replay(data["msgpack"], flow),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="HEAD", help="The older commit (default HEAD).")
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--n", type=int, default=1000, help="Steps per run.")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "tree"
        tree.mkdir()
        extract(args.base, tree)
        (tree / "flowcore").rename(Path(tmp) / "flowcore_base")
        sys.path.insert(0, tmp)
        old = importlib.import_module("flowcore_base")
        new = importlib.import_module("flowcore")
        print(f"base {args.base} against the working tree, {args.rounds} rounds, N={args.n}")
        for flow_name in bench_replay.FLOWS:
            work = {"old": setup(old, flow_name, args.n), "new": setup(new, flow_name, args.n)}
            times: dict[tuple[str, str], list[float]] = {}
            for r in range(args.rounds):
                order = ("old", "new") if r % 2 == 0 else ("new", "old")
                for measure in work["old"]:
                    for tree_name in order:
                        gc.collect()
                        t0 = time.perf_counter()
                        work[tree_name][measure]()
                        elapsed = time.perf_counter() - t0
                        times.setdefault((measure, tree_name), []).append(elapsed)
            for measure in work["old"]:
                o, w = times[(measure, "old")], times[(measure, "new")]
                per = 1e6 / args.n
                print(
                    f"{flow_name:<10} {measure:<15}"
                    f" old median {statistics.median(o) * per:6.2f} min {min(o) * per:6.2f} us/step"
                    f" | new median {statistics.median(w) * per:6.2f} min {min(w) * per:6.2f}"
                    f" | new/old median {statistics.median(w) / statistics.median(o):.3f}"
                    f" min {min(w) / min(o):.3f}"
                )


if __name__ == "__main__":
    main()
