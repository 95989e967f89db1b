"""``flowcore temporal ...`` for real: a worker process, and every command in its own.

Also the SIGKILL test: the worker dies mid-run, a new one takes over, the run
completes with the same output and no completed activity runs again.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("temporalio", reason="the Temporal host tests need temporalio (.[dev])")

import flowcore
from flowcore._replay import replay

from .support import DEMO_TOOLS, INCIDENT, TOOLS, die_with_parent, unique
from .tools import JOURNAL_ENV, journal_lines


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "flowcore_temporal", *args]


@dataclass(frozen=True)
class Cli:
    """``flowcore temporal`` against one server and task queue, each command in a process."""

    address: str
    queue: str

    def __call__(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            command(*args, "--address", self.address, "--task-queue", self.queue),
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def ok(self, *args: str, stdin: str | None = None) -> str:
        proc = self(*args, stdin=stdin)
        assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
        return proc.stdout

    def bad(self, *args: str) -> str:
        proc = self(*args)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        assert "Traceback" not in proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1, proc.stderr
        return lines[0]


@contextmanager
def worker_process(
    address: str, queue: str, tools: Path, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        command("worker", "--tools", str(tools), "--address", address, "--task-queue", queue),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env={**os.environ, **(env or {})},
        preexec_fn=die_with_parent,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()  # "worker polling task queue ..." once it polls
        assert "worker polling" in line, line
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def test_every_command_of_the_temporal_cli(temporal_address: str, tmp_path: Path) -> None:
    cli = Cli(temporal_address, unique("cli"))
    run_id = unique("demo")
    inp = json.dumps({"incident_id": "INC-7"})
    start = ["run", str(INCIDENT), "--input", inp, "--run-id"]
    with worker_process(cli.address, cli.queue, DEMO_TOOLS):
        assert cli.ok(*start, run_id, "--detach").strip() == run_id
        cli.ok("signal", run_id, "fix-deployed", "--data", '{"commit": "a1b2c3"}')
        # Starting the same run id again follows the running run; the question
        # is answered from standard input (a wrong answer first).
        out = cli.ok(*start, run_id, stdin="maybe\npage\n")
        assert f"■ {run_id} settled completed" in out
        assert '"paged": "page"' in out
        shown = json.loads(cli.ok("show", run_id, "--json"))
        assert shown["status"] == "completed" and shown["temporal"] == "COMPLETED"
        log = tmp_path / "run.ndjson"
        cli.ok("export", run_id, "-o", str(log))
        flow = flowcore.parse_flow(INCIDENT.read_text())
        assert replay(log.read_bytes(), flow).ok
        live = cli.ok("export", run_id, "--live")
        # The same records (the query's JSON has its keys sorted).
        assert [json.loads(line) for line in live.splitlines()] == [
            json.loads(line) for line in log.read_text().splitlines()
        ]

        # A run waiting for a human: show lists the question; cancel ends it.
        waiting = unique("waiting")
        cli.ok(*start, waiting, "--detach")
        deadline = time.monotonic() + 20
        while "question:" not in (text := cli.ok("show", waiting)):
            assert time.monotonic() < deadline, text
            time.sleep(0.2)
        key = text.split("question: ", 1)[1].split(":", 1)[0]
        assert "is not one of" in cli.bad("answer", waiting, key, "maybe")
        cli.ok("cancel", waiting, "--reason", "drill")
        proc = cli(*start, waiting, "--json")
        assert proc.returncode == 1, proc.stderr
        final = json.loads(proc.stdout.strip().splitlines()[-1])
        assert final["status"] == "cancelled"
        assert final["error"] == {"type": "cancelled", "message": "drill"}

    # Mistakes: one line, exit 2.
    assert "no run 'nope'" in cli.bad("show", "nope")
    assert "already settled" in cli.bad("signal", run_id, "x")
    assert "--input is not valid JSON" in cli.bad("run", str(INCIDENT), "--input", "{")
    assert "input rejected" in cli.bad("run", str(INCIDENT), "--input", "{}")
    broken = tmp_path / "broken.yaml"
    broken.write_text("flow: broken\nsteps: []\n")
    proc = cli("run", str(broken))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "broken.yaml" in proc.stderr
    unreachable = Cli("127.0.0.1:1", cli.queue).bad("show", run_id)
    assert unreachable.startswith("flowcore: cannot reach the Temporal server at 127.0.0.1:1")
    proc = cli("worker", "--tools", "no_such_tools_module")
    assert proc.returncode == 2 and "cannot import tools module" in proc.stderr


KILL_FLOW = """
flow: kill
tools: {echo: {class: readonly}, slow: {class: readonly}}
steps:
  - {id: first, call_tool: {tool: echo, input: {value: one}}}
  - {id: second, call_tool: {tool: slow, input: {seconds: 2, value: two}}}
  - {id: third, call_tool: {tool: echo, input: {value: three}}}
output: "${ [steps.first.output, steps.second.output, steps.third.output] }"
"""


def test_a_sigkilled_worker_is_replaced_and_nothing_completed_runs_again(
    temporal_address: str, tmp_path: Path
) -> None:
    cli = Cli(temporal_address, unique("kill"))
    journal = tmp_path / "journal.txt"
    journal.touch()
    env = {JOURNAL_ENV: str(journal)}
    spec = tmp_path / "kill.yaml"
    spec.write_text(KILL_FLOW)
    run_id = unique("kill")

    def lines() -> list[tuple[str, str, int]]:
        return journal_lines(journal)

    with worker_process(cli.address, cli.queue, TOOLS, env) as first:
        cli.ok("run", str(spec), "--run-id", run_id, "--detach", "--heartbeat-timeout-ms", "1000")
        deadline = time.monotonic() + 20
        while ("start", f"{run_id}/second#1", first.pid) not in lines():
            assert time.monotonic() < deadline, lines()
            time.sleep(0.05)
        first.send_signal(signal.SIGKILL)  # mid-call: second has started, not finished
        first.wait()
    with worker_process(cli.address, cli.queue, TOOLS, env) as second:
        out = cli.ok("run", str(spec), "--run-id", run_id, "--json")
        result = json.loads(out.strip().splitlines()[-1])
    assert result["status"] == "completed"
    assert result["output"] == ["one", "two", "three"]
    done = Counter(key for what, key, _ in lines() if what == "done")
    started = Counter(key for what, key, _ in lines() if what == "start")
    assert all(n == 1 for n in done.values()), done  # no completed call ran again
    assert started[f"{run_id}/first#1"] == 1
    # The interrupted readonly call was re-issued with the same key on the new worker.
    assert started[f"{run_id}/second#1"] == 2
    assert ("done", f"{run_id}/second#1", second.pid) in lines()
    assert set(done) == {f"{run_id}/first#1", f"{run_id}/second#1", f"{run_id}/third#1"}
