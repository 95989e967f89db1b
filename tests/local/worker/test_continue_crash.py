"""continue_as_new under SIGKILL: workers killed at random moments (seeded),
including inside the transaction that ends one incarnation and starts the
next; the run ends as a run that was never killed, with a bounded log."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import time
from pathlib import Path

import flowcore

from ..local_helpers import query
from .test_crash import (
    TOOLS,
    environment,
    exported,
    finish,
    flowcore_cmd,
    journal,
    show,
    started_handlers,
    worker,
)

FLOW = """
flow: crash-loop
tools: {read: {class: readonly}, put: {class: idempotent}}
steps:
  - {id: look, call_tool: {tool: read, input: "${input.round}"}}
  - {id: store, call_tool: {tool: put, input: "${steps.look.output.echo}"}}
  - id: next
    switch:
      - if: "input.round < `8`"
        steps:
          - id: again
            continue_as_new: {input: {round: "${sum([input.round, `1`])}"}}
output: "${ {round: input.round, incarnation: run.incarnation} }"
"""
ROUNDS = 9  # incarnations: rounds 0 to 8


def start(db: Path | str, spec: Path, env: dict[str, str]) -> None:
    subprocess.run(
        flowcore_cmd(
            "run",
            str(spec),
            "--input",
            json.dumps({"round": 0}),
            "--tools",
            str(TOOLS),
            "--db",
            str(db),
            "--run-id",
            "loop",
            "--detach",
            env=env,
        ),
        env=env,
        check=True,
        capture_output=True,
        timeout=60,
    )


def test_sigkill_across_incarnations_loses_nothing(tmp_path: Path, local_db: Path | str) -> None:
    """On both stores (``local_db``): ten kills on SQLite, five on PostgreSQL (time)."""
    spec = tmp_path / "loop.yaml"
    spec.write_text(FLOW)
    env = environment(tmp_path, delay="0.01")
    db = local_db
    rng = random.Random(20261203)
    start(db, spec, env)
    kills, recoveries = 0, 12
    kills_wanted = 10 if isinstance(db, Path) else 5
    while kills < kills_wanted:
        before = sum(journal(tmp_path)[0].values())
        proc = worker(db, env, recoveries)
        if not started_handlers(tmp_path, proc, before + rng.randint(1, 3)):
            break  # the run finished before this kill
        time.sleep(rng.uniform(0.0, 0.02))
        if proc.poll() is not None:
            break
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        kills += 1
    assert kills > 0  # each worker is killed once it started a handler of its own
    finish(db, env, recoveries)
    info = show(db, "loop", env)
    assert info["status"] == "completed", info
    assert info["output"] == {"round": 8, "incarnation": ROUNDS}
    assert info["incarnation"] == ROUNDS
    # Every call of every incarnation ran to its end at least once, under the
    # keys of its own incarnation, and no other key ever ran.
    _, ends = journal(tmp_path)
    wanted = set()
    for n in range(1, ROUNDS + 1):
        base = "loop" if n == 1 else f"loop/@{n}"
        wanted |= {f"{base}/look#1", f"{base}/store#1"}
    assert set(ends) == wanted
    # Only the last two incarnations' records are left, and they replay.
    [(count, first)] = query(db, "SELECT COUNT(*), MIN(idx) FROM log WHERE run_id = 'loop'")
    assert first > 0 and count < 30
    records = flowcore.decode_log(exported(db, "loop", env)).records
    assert records[0].type == "run.started" and records[0].data["incarnation"] == ROUNDS - 1
    report = flowcore.replay(records, flowcore.parse_flow(FLOW))
    assert report.status == "completed"
