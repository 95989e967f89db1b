"""Side-by-side: one benchmark against an older commit and the working tree.

The machine is shared and noisy, so absolute figures from two runs at two
times say little. This script extracts ``--base`` (default ``HEAD``) with
``git archive`` into a temporary directory and runs the *same* benchmark
script (the working tree's copy) alternately against the old code and the
working tree's code, ``--rounds`` times each, in fresh processes. Every line
a benchmark prints with ``<number> us/<unit>`` or ``<number> ms`` (``median``
before it, if the benchmark says so; the first on the line) is one figure; the script
prints the median of each figure over the rounds, for both trees, and the
ratio new/old.

Run::

    python benchmarks/compare_commits.py --base 72d5ba5 -- benchmarks/bench_advance.py --quick
    python benchmarks/compare_commits.py -- benchmarks/bench_replay.py --quick

The old tree is imported through ``PYTHONPATH`` (it comes before the
editable install on ``sys.path``); the benchmark must only use APIs both
trees have.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# A figure: a line's first "<number> us/<what>" (after "median", if the line
# says it). The label is the text before it, without the run's own readings
# (throughput, sizes), so that the same figure has the same label every run.
FIGURE = re.compile(
    r"^(?P<label>.*?)\s+(?:median\s+)?(?P<value>[\d,.]+)\s*(?P<unit>us/\w+|ms(?:/\w+)?\b)"
)
READINGS = re.compile(r"\s[\d,.]+\s*(?:steps/s|MB)\b")


def extract(rev: str, into: Path) -> None:
    data = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", rev],
        check=True,
        capture_output=True,
    ).stdout
    with tarfile.open(fileobj=BytesIO(data)) as tar:
        tar.extractall(into, filter="data")


def run_once(tree: Path, script: list[str]) -> dict[str, tuple[float, str]]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tree), str(tree / "hosts")])
    out = subprocess.run(
        [sys.executable, *script], cwd=ROOT, env=env, check=True, capture_output=True, text=True
    ).stdout
    figures: dict[str, tuple[float, str]] = {}
    for line in out.splitlines():
        m = FIGURE.match(line.strip())
        if m:
            label = " ".join(READINGS.sub("", m.group("label")).split())
            figures[label] = (float(m.group("value").replace(",", "")), m.group("unit"))
    return figures


def check_tree(tree: Path) -> None:
    """Make sure the subprocess really imports ``tree``'s flowcore."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tree), str(tree / "hosts")])
    where = subprocess.run(
        [sys.executable, "-c", "import flowcore; print(flowcore.__file__)"],
        cwd=tree,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    if not where.startswith(str(tree)):
        raise SystemExit(f"PYTHONPATH={tree} imports flowcore from {where}, not from the tree")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="HEAD", help="the older commit (default HEAD)")
    parser.add_argument("--rounds", type=int, default=5, help="runs of each tree (default 5)")
    parser.add_argument("script", nargs=argparse.REMAINDER, help="-- benchmark script and args")
    args = parser.parse_args()
    script = [a for a in args.script if a != "--"] or ["benchmarks/bench_advance.py", "--quick"]
    with tempfile.TemporaryDirectory(prefix="flowcore-base-") as tmp:
        old = Path(tmp)
        extract(args.base, old)
        check_tree(old)
        check_tree(ROOT)
        runs: dict[str, list[dict[str, tuple[float, str]]]] = {"old": [], "new": []}
        for i in range(args.rounds):
            # Alternate which tree goes first, so that drift in the machine's
            # load falls on both columns alike.
            order = [("old", old), ("new", ROOT)] if i % 2 == 0 else [("new", ROOT), ("old", old)]
            for name, tree in order:
                runs[name].append(run_once(tree, script))
            print(f"round {i + 1}/{args.rounds} done", file=sys.stderr)
    labels = [label for label in runs["new"][0] if label in runs["old"][0]]
    width = max((len(label) for label in labels), default=10)
    print(f"{' '.join(script)}: medians over {args.rounds} alternating rounds")
    print(f"{'figure':<{width}}  {args.base[:12]:>12}  {'working tree':>12}  new/old")
    for label in labels:
        old_v = statistics.median(r[label][0] for r in runs["old"] if label in r)
        new_v = statistics.median(r[label][0] for r in runs["new"] if label in r)
        unit = runs["new"][0][label][1]
        ratio = new_v / old_v if old_v else float("nan")
        print(f"{label:<{width}}  {old_v:>9.2f} {unit:<2}  {new_v:>9.2f} {unit:<2}  {ratio:6.3f}x")


if __name__ == "__main__":
    main()
