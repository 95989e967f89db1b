"""How long ``flowcore`` takes to start: ``--help``, ``--version``, ``show`` and ``answer``.

Every command is run as a person runs it (``.venv/bin/flowcore ...``, a fresh
process each time) against a real database holding one run that waits for a
question; ``answer`` gets a wrong key, so that the run stays as it is and every
repeat does the same work. Printed per command: the median and the minimum wall
time over the repeats, and beside it ``python -c pass`` (the interpreter's own
start, the floor) and ``python -c "import flowcore"``. Target: under 0.3 s for
the four commands.

Run: ``python benchmarks/bench_startup.py [--repeats 15]``
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FLOW = """
flow: wait
steps:
  - id: q
    ask_human: {question: "ok?", options: [yes, no]}
"""


def timed(args: list[str], repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run(args, capture_output=True, check=False)
        times.append(time.perf_counter() - t0)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    command = shutil.which("flowcore") or str(Path(sys.executable).with_name("flowcore"))
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "wait.yaml"
        spec.write_text(FLOW)
        db = str(Path(tmp) / "b.db")
        subprocess.run(
            [command, "run", str(spec), "--db", db, "--run-id", "w1", "--detach"],
            check=True,
            capture_output=True,
        )
        cases = {
            "python -c pass (floor)": [sys.executable, "-c", "pass"],
            "python -c 'import flowcore'": [sys.executable, "-c", "import flowcore"],
            "flowcore --help": [command, "--help"],
            "flowcore --version": [command, "--version"],
            "flowcore show w1": [command, "show", "w1", "--db", db],
            "flowcore answer (refused)": [command, "answer", "w1", "nope#1", "yes", "--db", db],
        }
        for label, argv in cases.items():
            times = timed(argv, args.repeats)
            print(
                f"{label:<30} median {statistics.median(times):.3f} s"
                f"  min {min(times):.3f} s  ({args.repeats} runs)"
            )


if __name__ == "__main__":
    main()
