"""How long ``flowcore`` takes to start: ``--help``, ``--version``, ``show`` and ``answer``.

Every command is run as a person runs it (``.venv/bin/flowcore ...``, a fresh
process each time) against a real database holding one run that waits for a
question; ``answer`` gets a wrong key, so that the run stays as it is and every
repeat does the same work. Printed per command, over the repeats: the median
wall time, the median CPU time (user + system of the process, from ``wait4``:
what the command costs, whatever else holds the cores; on a busy machine the
wall time adds the wait for a core), and the CPU time as a multiple of the
floor, ``python -c pass`` (the interpreter's own start), measured in the same
run. Beside them: ``import flowcore`` and the libraries the commands stand on
imported alone (click, rich, asyncio, sqlite3, msgspec, attrs, cattrs, yaml,
jmespath, immutables), so what is flowcore's own shows. Target: under 0.3 s
for the four commands.

Python caches compiled modules (``__pycache__``) unless
``PYTHONDONTWRITEBYTECODE`` is set; a machine that sets it compiles every
module of the project at every start. The commands are timed as on a machine
that caches (the variable removed, after one untimed run). ``--no-cache``
times the worst case: nothing cached is read (``PYTHONPYCACHEPREFIX`` names an
empty directory) and nothing is written, so every module, the libraries' too,
is compiled at every start.

Run: ``python benchmarks/bench_startup.py [--repeats 15] [--no-cache]``
"""

from __future__ import annotations

import argparse
import os
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


LIBRARIES = (
    "import click, rich.console, rich.table, asyncio, sqlite3,"
    " msgspec, attrs, cattrs, yaml, jmespath, immutables"
)


def timed(
    args: list[str], repeats: int, env: dict[str, str], code: int
) -> tuple[list[float], list[float]]:
    """Wall and CPU seconds (user + system, of the process and its children) per
    run; a run that ends with another exit code than ``code`` stops the benchmark
    (it would time something else)."""
    walls, cpus = [], []
    subprocess.run(args, capture_output=True, check=False, env=env)  # fills the cache
    for _ in range(repeats):
        t0 = time.perf_counter()
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        walls.append(time.perf_counter() - t0)
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        if proc.returncode != code:
            raise SystemExit(f"{' '.join(args)} exited {proc.returncode}, not {code}")
        cpus.append(usage.ru_utime + usage.ru_stime)
    return walls, cpus


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument(
        "--no-cache", action="store_true", help="time with PYTHONDONTWRITEBYTECODE=1"
    )
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    if args.no_cache:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    print(f"bytecode cache: {'off' if args.no_cache else 'on'}; {args.repeats} runs each")
    command = shutil.which("flowcore") or str(Path(sys.executable).with_name("flowcore"))
    with tempfile.TemporaryDirectory() as tmp:
        if args.no_cache:
            env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "no-cache")  # empty: nothing cached
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
            "the libraries alone": [sys.executable, "-c", LIBRARIES],
            "python -c 'import flowcore'": [sys.executable, "-c", "import flowcore"],
            "flowcore --help": [command, "--help"],
            "flowcore --version": [command, "--version"],
            "flowcore show w1": [command, "show", "w1", "--db", db],
            "flowcore answer (refused)": [command, "answer", "w1", "nope#1", "yes", "--db", db],
        }
        floor = None
        print(f"{'':<30} {'wall':>8} {'CPU':>8} {'CPU/floor':>10}")
        for label, argv in cases.items():
            code = 2 if label.startswith("flowcore answer") else 0  # refused on purpose
            walls, cpus = timed(argv, args.repeats, env, code)
            cpu = statistics.median(cpus)
            floor = floor or cpu
            print(
                f"{label:<30} {statistics.median(walls):>6.3f} s {cpu:>6.3f} s {cpu / floor:>9.1f}x"
            )


if __name__ == "__main__":
    main()
