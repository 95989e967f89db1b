"""Soak the local host's crash safety: SIGKILL a worker at random moments,
500 times by default, across many runs of the crash-test flow, then check
that every run ended as a clean run does, that no uncertain call ran twice,
that repeated safe calls are accounted for by kills, and that every exported
log replays.

Run: ``python benchmarks/soak_local_host.py [--kills 500] [--seed N]``
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import flowcore

ROOT = Path(__file__).resolve().parent.parent
FLOW = ROOT / "tests" / "local" / "crash_flow.yaml"
TOOLS = ROOT / "tests" / "local" / "crash_tools.py"
INPUT = {"seed": "s", "items": ["i0", "i1", "i2", "i3", "i4", "i5"]}


def cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "flowcore_cli", *args]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kills", type=int, default=500)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    args = parser.parse_args()
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ)
        env["FLOWCORE_TEST_JOURNAL"] = str(Path(tmp) / "journal.txt")
        env["FLOWCORE_TEST_DELAY"] = "0.02"
        db = str(Path(tmp) / "soak.db")
        kills = 0
        runs: list[str] = []
        t0 = time.perf_counter()
        while kills < args.kills:
            run_id = f"run{len(runs)}"
            runs.append(run_id)
            subprocess.run(
                cmd(
                    "run",
                    str(FLOW),
                    "--input",
                    json.dumps(INPUT),
                    "--tools",
                    str(TOOLS),
                    "--db",
                    db,
                    "--run-id",
                    run_id,
                    "--detach",
                ),
                env=env,
                check=True,
                capture_output=True,
            )
            for _ in range(25):
                proc = subprocess.Popen(
                    cmd("worker", "--db", db, "--until-idle"),
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                time.sleep(rng.uniform(0.1, 0.6))
                if proc.poll() is not None:
                    break
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                kills += 1
        subprocess.run(cmd("worker", "--db", db, "--until-idle"), env=env, check=True)
        outputs: list[Any] = []
        for run_id in runs:
            info = json.loads(
                subprocess.run(
                    cmd("show", run_id, "--db", db, "--json"),
                    env=env,
                    check=True,
                    capture_output=True,
                ).stdout
            )
            assert info["status"] == "completed", (run_id, info)
            outputs.append(info["output"])
            log = subprocess.run(
                cmd("export", run_id, "--db", db), env=env, check=True, capture_output=True
            ).stdout
            report = flowcore.replay(
                flowcore.decode_log(log).records, flowcore.parse_flow(FLOW.read_text())
            )
            assert report.status == "completed"
        assert all(o == outputs[0] for o in outputs), "runs ended differently"
        starts: Counter[str] = Counter()
        for line in (Path(tmp) / "journal.txt").read_text().splitlines():
            mark, key, _ = line.split(" ")
            if mark == "S":
                starts[key] += 1
        repeats = {k: n for k, n in starts.items() if n > 1}
        unsafe = {k: n for k, n in repeats.items() if "/tell#" in k or "/ping_call#" in k}
        assert not unsafe, f"uncertain calls ran twice: {unsafe}"
        assert sum(n - 1 for n in repeats.values()) <= kills
        elapsed = time.perf_counter() - t0
        print(
            f"seed {args.seed}: {kills} kills over {len(runs)} runs in {elapsed:.0f} s; "
            f"all settled completed with the same output; {len(repeats)} safe calls re-ran "
            f"({sum(n - 1 for n in repeats.values())} extra runs); logs replay"
        )


if __name__ == "__main__":
    main()
