"""Instructions per step of ``advance``, the core against an older commit's, under callgrind.

``ab_core.py`` times the two cores side by side; on a shared machine its
medians move by about 2% between identical trees, more than a small change
costs. This script counts instead: the older commit and the working tree are
put side by side in a temporary directory, and valgrind's callgrind counts the
instructions of a process that drives a run of ``bench_replay.py``'s flow with
``advance`` event by event, and of one that only sets the run up; the
difference, divided by the steps, is the cost of a step. The garbage collector
is off while the run is driven (when it runs depends on everything else the
process holds). String hashes are salted per process and move dict probe
lengths (about 1% here), so each count is taken under several fixed
``PYTHONHASHSEED`` values, the same for both trees.

Printed per seed: instructions per step for each tree and the ratio new/old,
then the median ratio.

Run (valgrind must be installed)::

    python benchmarks/icount_core.py --base ccf448d [--flow sequential] [--n 1000] [--seeds 0 1 2]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_commits import extract  # type: ignore[import-not-found]

ROOT = Path(__file__).resolve().parent.parent

# Run in the child: drive the flow (``drive`` = 1) or only set it up (0).
CHILD = """
import sys
tree, flow_name, n, drive = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
sys.path[:0] = [tree, tree + "/benchmarks"]
import gc
import bench_replay
import flowcore
flow, inp = bench_replay.FLOWS[flow_name](n)
records, events = bench_replay.record_run(flow, inp)
gc.collect()
gc.disable()  # when a collection runs depends on what else the process holds
if drive:
    state = flowcore.start(flow, inp, run_id="r-bench", now_ms=0).state
    for event in events:
        state = flowcore.advance(state, event).state
"""


def instructions(tree: Path, flow: str, n: int, drive: bool, seed: int) -> int:
    """Instructions callgrind counts for one child process."""
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={tmp}/cg.out",
                sys.executable,
                "-c",
                CHILD,
                str(tree),
                flow,
                str(n),
                "1" if drive else "0",
            ],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": str(seed)},
        )
    found = re.search(r"Collected : (\d+)", out.stderr)
    if found is None:
        raise SystemExit(f"callgrind printed no count:\n{out.stderr}")
    return int(found.group(1))


def copy_working_tree(into: Path) -> None:
    """The working tree's ``flowcore/`` and ``benchmarks/`` (uncommitted changes
    included), where the old tree is: both run from the same kind of place."""
    files = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-co", "--exclude-standard", "flowcore", "benchmarks"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    for name in files:
        target = into / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes((ROOT / name).read_bytes())


def per_step(tree: Path, flow: str, n: int, seed: int) -> float:
    instructions(tree, flow, 10, True, seed)  # compile the tree's bytecode first
    return (instructions(tree, flow, n, True, seed) - instructions(tree, flow, n, False, seed)) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="The older commit.")
    parser.add_argument("--flow", default="sequential", help="A flow of bench_replay.py.")
    parser.add_argument("--n", type=int, default=1000, help="Steps per run.")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        old, new = Path(tmp) / "old", Path(tmp) / "new"
        extract(args.base, old)
        copy_working_tree(new)
        print(f"{args.flow}, N={args.n}: instructions per step of advance, {args.base} -> here")
        ratios = []
        for seed in args.seeds:
            o = per_step(old, args.flow, args.n, seed)
            w = per_step(new, args.flow, args.n, seed)
            ratios.append(w / o)
            print(f"PYTHONHASHSEED={seed}: old {o:,.0f}  new {w:,.0f}  new/old {w / o:.4f}")
        print(f"median new/old {statistics.median(ratios):.4f}")


if __name__ == "__main__":
    main()
