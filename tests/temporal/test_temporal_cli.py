"""``flowcore temporal ...`` for real: a worker process, and every command in its own.

Also the SIGKILL tests: the worker dies mid-run, a new one takes over, the run
completes with the same output and no completed activity runs again; and two
workers share 20 runs, one dies under load, and the other finishes them all.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("temporalio", reason="the Temporal host tests need temporalio (.[dev])")

import flowcore
import flowcore_temporal as ft
from flowcore import Record
from flowcore.log.replay import replay

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


SHARED_STEPS = 10
SHARED_FLOW = "\n".join(
    [
        "flow: shared",
        "tools: {slow: {class: readonly}}",
        "steps:",
        *(
            f"  - {{id: s{i}, call_tool: {{tool: slow, input: {{seconds: 0.15, value: {i}}}}}}}"
            for i in range(SHARED_STEPS)
        ),
        f'output: "${{steps.s{SHARED_STEPS - 1}.output}}"',
    ]
)


def test_two_workers_share_the_runs_and_killing_one_loses_nothing(
    temporal_address: str, tmp_path: Path
) -> None:
    """Two worker processes on one task queue run 20 runs at once; one is
    SIGKILLed with calls in flight. Every run completes on the other; a call
    ran again only when flowcore re-issued it after its outcome became unknown,
    each issue ran at most once, and no call whose outcome was known ran twice."""
    queue = unique("shared")
    journal = tmp_path / "journal.txt"
    journal.touch()
    env = {JOURNAL_ENV: str(journal)}
    runs = [unique("shared") for _ in range(20)]

    def lines() -> list[tuple[str, str, int]]:
        out = []
        for line in journal.read_text().splitlines():
            what, key, pid = line.split()
            out.append((what, key, int(pid)))
        return out

    def running_on(pid: int, seen: list[tuple[str, str, int]]) -> set[str]:
        """Keys whose call started in process ``pid`` and has not finished there."""
        started = {key for what, key, p in seen if what == "start" and p == pid}
        return started - {key for what, key, p in seen if what == "done" and p == pid}

    async def start(host: ft.TemporalHost) -> None:
        for run_id in runs:
            # A dead worker's calls time out after 5 s without a heartbeat.
            await host.start(SHARED_FLOW, None, run_id, heartbeat_timeout_ms=5000)

    async def finish(host: ft.TemporalHost) -> dict[str, tuple[dict[str, Any], list[Record]]]:
        out = {}
        for run_id in runs:
            result = await host.result(run_id)
            out[run_id] = (result, await ft.history_to_log(await host.history(run_id)))
        return out

    def on_host(body: Callable[[ft.TemporalHost], Awaitable[Any]]) -> Any:
        async def main() -> Any:
            return await body(ft.TemporalHost(await ft.connect(temporal_address), queue))

        return asyncio.run(main())

    with (
        worker_process(temporal_address, queue, TOOLS, env) as first,
        worker_process(temporal_address, queue, TOOLS, env) as second,
    ):
        on_host(start)
        # Kill the first worker once both have finished calls and it is running one.
        deadline = time.monotonic() + 60
        while True:
            seen = lines()
            done_by = Counter(pid for what, _, pid in seen if what == "done")
            if min(done_by[first.pid], done_by[second.pid]) >= 3 and running_on(first.pid, seen):
                break
            assert time.monotonic() < deadline, seen
            time.sleep(0.02)
        first.send_signal(signal.SIGKILL)
        first.wait()
        before = lines()
        finished = on_host(finish)
    after = lines()

    # Both workers ran calls before the kill; the dead one none after it.
    done_before = Counter(pid for what, _, pid in before if what == "done")
    assert min(done_before[first.pid], done_before[second.pid]) >= 3, done_before
    assert {pid for _, _, pid in after[len(before) :]} <= {second.pid}
    interrupted = running_on(first.pid, before)  # its handler never finished
    assert interrupted
    started = Counter(key for what, key, _ in after if what == "start")
    done = Counter(key for what, key, _ in after if what == "done")
    finished_by_second = {key for what, key, pid in after if what == "done" and pid == second.pid}
    for run_id, (result, records) in finished.items():
        assert result["status"] == "completed", result
        assert result["output"] == SHARED_STEPS - 1
        emitted: Counter[str] = Counter()
        reported: dict[str, Counter[str]] = {}
        for record in records:
            if record.type == "effect.emitted" and record.data["kind"] == "call-tool":
                emitted[record.data["idempotencyKey"]] += 1
            elif record.type == "event.reported" and "idempotencyKey" in record.data:
                kinds = reported.setdefault(record.data["idempotencyKey"], Counter())
                kinds[record.data["kind"]] += 1
        keys = {f"{run_id}/s{i}#1" for i in range(SHARED_STEPS)}
        assert set(emitted) == keys
        for key in keys:
            kinds = reported[key]
            # One success per call; a re-issue only after its outcome became unknown.
            assert kinds["effect-succeeded"] == 1, (key, kinds)
            assert set(kinds) <= {"effect-succeeded", "effect-outcome-unknown"}, (key, kinds)
            assert emitted[key] == 1 + kinds["effect-outcome-unknown"], (key, emitted[key])
            # Each issue ran at most once (Temporal never retried it), the last one to the end.
            assert 1 <= done[key] <= started[key] <= emitted[key], (key, started[key], done[key])
            if emitted[key] == 1:  # its outcome was known: it ran exactly once
                assert started[key] == done[key] == 1, key
            if key in interrupted:  # cut off by the kill: re-issued, and done by the other
                assert emitted[key] >= 2 and key in finished_by_second, key
