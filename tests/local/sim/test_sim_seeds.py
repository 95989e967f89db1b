"""The deterministic simulation of the local host, on fixed seeds (specs/testing.md,
"Deterministic simulation of the local host").

A fixed quick set of seeds runs clean, with crashes, restarts and a second
worker among them; every seed that once found a bug stays here; a seed
replays byte for byte in another process; each planted bug (a one-line change
to the host) is found on its recorded seed, printed with the command that
replays it; ``shrink`` finds a smaller failing schedule and ``sweep`` reports
its figures.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from flowcore_local.sim.plant import BUGS, PlantError, plant
from flowcore_local.sim.run import simulate

ROOT = Path(__file__).resolve().parents[3]

# Seeds that found a bug in the host, each with what it found (recorded again
# whenever the simulated world changes: a seed is a schedule of one version).
FOUND = {
    # Runs settled elsewhere, or waiting, kept filling a worker's share of the
    # runs: with two workers, a child run's work stayed ready for ever
    # (``Store.forget_idle``). The code before the fix is ``idle-runs-kept``.
    4: "runs-settle-or-wait",
    6: "runs-settle-or-wait",
    8: "runs-settle-or-wait",
    # Not the host's: a run triggered by hand at the very time of a cadence
    # slot is recorded at that time, and the invariant counted it as a second
    # start of the slot (it counts the cadence's starts only now).
    3809: "schedule-slot-started-once",
}

# Each planted bug, the seed that finds it, and the invariant it breaks.
PLANTED = {
    "lease-not-renewed": (2, "two-workers-one-lease"),
    "live-worker-taken-for-dead": (4, "two-workers-one-lease"),
    "uncertain-call-requeued": (2, "uncertain-call-ran-twice"),
    "idle-runs-kept": (4, "runs-settle-or-wait"),
}


def sim(*args: str, hash_seed: str | None = None) -> subprocess.CompletedProcess[bytes]:
    env = dict(os.environ)
    if hash_seed is not None:
        env["PYTHONHASHSEED"] = hash_seed  # str hashes, so set orders, differ by process
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), str(ROOT / "hosts"), *filter(None, [env.get("PYTHONPATH")])]
    )
    return subprocess.run(
        [sys.executable, "-m", "flowcore_local.sim", *args],
        capture_output=True,
        env=env,
        timeout=300,
        check=False,
    )


@pytest.mark.parametrize("seed", sorted(set(range(1, 31)) | set(FOUND)))
def test_the_fixed_seeds_run_clean(seed: int) -> None:
    result = simulate(seed)
    assert result.ok, result.verdict()
    assert result.runs > 0 and result.checks > 0


def test_the_fixed_seeds_crash_restart_and_race_a_second_worker() -> None:
    results = [simulate(seed) for seed in (2, 4)]
    assert all(r.crashes > 0 for r in results)
    for result in results:
        text = "\n".join(result.trace)
        assert re.search(r"w1\.\d+ crashes", text) or re.search(r"w2\.\d+ crashes", text)
        assert re.search(r"w\d\.2 starts", text)  # a restart, recovering on the same file
        assert "w2.1 starts" in text  # the second worker


def test_a_seed_gives_the_same_trace_byte_for_byte_in_two_processes() -> None:
    first = sim("run", "2", "--trace", hash_seed="1")
    second = sim("run", "2", "--trace", hash_seed="2")
    assert first.returncode == 0, first.stderr.decode()
    assert first.stdout == second.stdout
    assert b"crashes" in first.stdout and b"runs sim-" in first.stdout
    assert sim("run", "3", "--trace").stdout != first.stdout


@pytest.mark.parametrize("bug", sorted(PLANTED))
def test_each_planted_bug_is_found_on_its_seed(bug: str) -> None:
    seed, invariant = PLANTED[bug]
    found = sim("run", str(seed), "--plant", bug)
    out = found.stdout.decode()
    assert found.returncode == 1, out + found.stderr.decode()
    assert f"seed {seed}: FAILED" in out
    assert f"  {invariant} (step " in out
    assert f"-m flowcore_local.sim run {seed} --trace --plant {bug}" in out
    if bug == "uncertain-call-requeued":  # the example of specs/testing.md §10, as it runs
        doc = (ROOT / "specs" / "testing.md").read_text(encoding="utf-8")
        assert "\n".join(out.splitlines()[:2]) in doc


@pytest.mark.parametrize("seed", [6, 8])  # seed 4: with the planted bugs
def test_the_seeds_that_found_a_bug_fail_on_the_code_before_its_fix(seed: int) -> None:
    # idle-runs-kept is the code as it was before Store.forget_idle.
    found = sim("run", str(seed), "--plant", "idle-runs-kept")
    assert found.returncode == 1
    assert FOUND[seed] in found.stdout.decode()


def test_every_planted_bug_applies_to_the_code_as_it_is() -> None:
    assert set(PLANTED) == set(BUGS)
    for bug in BUGS.values():
        source = Path(ROOT / "hosts" / (bug.module.replace(".", "/") + ".py")).read_text()
        assert source.split("\n").count(bug.old) == 1, bug.old


def test_an_unknown_bug_is_refused_by_name() -> None:
    with pytest.raises(PlantError, match="no planted bug 'nope'"):
        plant("nope")
    refused = sim("run", "1", "--plant", "nope")
    assert refused.returncode == 2
    assert b"Traceback" not in refused.stderr


def test_shrink_finds_a_smaller_schedule_that_still_fails() -> None:
    shrunk = sim("shrink", "2", "--plant", "uncertain-call-requeued")
    out = shrunk.stdout.decode()
    assert shrunk.returncode == 1, out + shrunk.stderr.decode()
    assert "uncertain-call-ran-twice" in out
    actions = re.search(r"--actions=(\d+)", out)
    assert actions is not None and int(actions.group(1)) < 40, out
    replay = out.split("replay: ", 1)[1].split("\n", 1)[0]
    again = sim(*replay.split(" -m flowcore_local.sim ", 1)[1].split())
    assert again.returncode == 1 and b"uncertain-call-ran-twice" in again.stdout


def test_sweep_runs_seeds_over_processes_and_reports_its_figures() -> None:
    swept = sim("sweep", "--seeds", "4..6", "--jobs", "2")
    out = swept.stdout.decode()
    assert swept.returncode == 0, out + swept.stderr.decode()
    assert re.search(
        r"3 seeds \(4\.\.6\) in [\d.]+ s on 2 jobs: \d+ seeds/minute, \d+ steps,"
        r" \d+ invariants checked, 0 failed",
        out,
    ), out
    assert swept.stderr == b""


def test_the_sweep_script_runs_the_seeds_it_is_given() -> None:
    env = dict(os.environ, PYTHON=sys.executable)
    swept = subprocess.run(
        [str(ROOT / "scripts" / "sim-sweep"), "5..5", "1"],
        capture_output=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert swept.returncode == 0, swept.stdout.decode() + swept.stderr.decode()
    assert b"1 seeds (5..5) in " in swept.stdout and b" 0 failed" in swept.stdout


def test_a_simulation_leaves_the_hosts_logging_as_it_found_it() -> None:
    loggers = [logging.getLogger(name) for name in ("flowcore.local", "asyncio")]
    before = [logger.level for logger in loggers]
    simulate(4)
    assert [logger.level for logger in loggers] == before
