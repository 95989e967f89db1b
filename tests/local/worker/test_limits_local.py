"""Limits across runs on the local host, on real database files: a tool's
concurrency over two worker processes, a tool's rate over two workers sharing
a database (on a clock the test moves), priority order, dedup keys, and the
command line's options and their errors."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from flowcore import CallTool
from flowcore_handlers import Registry
from flowcore_local import HostError, LocalHost, ToolLimit

from ..local_helpers import tools_file

# Calls of ``charge``, several at once in each run.
FAN = """
flow: fan
tools: {charge: {class: idempotent}}
steps:
  - id: each
    for_each:
      items: "${input.items}"
      steps: [{id: pay, call_tool: {tool: charge, input: "${item}"}}]
output: "${length(steps.each.output)}"
"""

# A handler that counts the calls inside it in a file, under a file lock, and
# keeps the highest count seen: what ran at once, over every process.
COUNTING = """
import fcntl
import time
from pathlib import Path

COUNT = Path({count!r})


def _change(by):
    with COUNT.open("a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        now, high, total = (int(x) for x in (f.read().split() or ["0", "0", "0"]))
        now += by
        high = max(high, now)
        total += by > 0
        f.seek(0)
        f.truncate()
        f.write(f"{{now}} {{high}} {{total}}")


def charge(call):
    _change(1)
    try:
        time.sleep(0.02)
        return call.input
    finally:
        _change(-1)


TOOLS = {{"charge": charge}}
"""


def fc(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flowcore_cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
        check=False,
    )


def bad(*args: str, env: dict[str, str] | None = None) -> str:
    proc = fc(*args, env=env)
    assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_a_tool_concurrency_limit_holds_over_two_worker_processes(
    tmp_path: Path, local_db: Path | str
) -> None:
    db = str(local_db)
    count = tmp_path / "count.txt"
    tools = tools_file(tmp_path, "counting", COUNTING, count=str(count))
    spec = tmp_path / "fan.yaml"
    spec.write_text(FAN)
    for i in range(6):
        items = json.dumps({"items": list(range(5))})
        proc = fc("run", str(spec), "--input", items, "--tools", str(tools), "--db", db,
                  "--run-id", f"r{i}", "--detach")  # fmt: skip
        assert proc.returncode == 0, proc.stderr
    limit = ["--tool-limit", "charge=concurrency:2"]
    workers: list[subprocess.Popen[str]] = [
        subprocess.Popen(
            [sys.executable, "-m", "flowcore_cli", "worker", "--db", db, "--until-idle", *limit],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    for worker in workers:
        _, err = worker.communicate(timeout=300)
        assert worker.returncode == 0, err
    now, high, total = (int(x) for x in count.read_text().split())
    assert total == 30 and now == 0
    assert 1 <= high <= 2, high
    runs = json.loads(fc("runs", "--db", db, "--json").stdout)
    assert {r["status"] for r in runs} == {"completed"}


def test_a_tool_rate_limit_is_shared_by_two_workers_through_the_database(
    tmp_path: Path,
    local_db: Path | str,
) -> None:
    """At most 2 calls per 1000 ms of the host's clock, which moves only when the
    test moves it: each value of the clock sees at most 2 calls begin."""
    db = local_db
    clock = [1_000_000]
    seen: list[int] = []

    async def charge(call: CallTool) -> Any:
        seen.append(clock[0])
        return call.input

    limits = {"charge": ToolLimit(rate=2, per_ms=1000)}

    def host() -> LocalHost:
        registry = Registry(tools={"charge": charge})
        return LocalHost(db, registry=registry, clock=lambda: clock[0], tool_limits=limits)

    async def main() -> None:
        async with host() as a, host() as b:
            rid = await a.start(FAN, {"items": list(range(7))}, "r")
            stop = asyncio.Event()
            workers = [asyncio.create_task(h.work(stop)) for h in (a, b)]
            for window in range(4):
                want = min(7, 2 * (window + 1))
                for _ in range(6000):
                    if len(seen) >= want:
                        break
                    await asyncio.sleep(0.01)
                assert len(seen) >= want, (window, seen)
                clock[0] += 1000
            row = await a.wait(rid, timeout=120)
            stop.set()
            await asyncio.gather(*workers)
            assert row.status == "completed" and row.output == 7

    asyncio.run(main())
    per_window = {t: seen.count(t) for t in seen}
    assert len(seen) == 7 and max(per_window.values()) <= 2, per_window


ONE = """
flow: one
tools: {charge: {class: idempotent}}
steps:
  - {id: pay, call_tool: {tool: charge, input: "${input.n}"}}
  - {id: child, run_subflow: {flow: kid, input: {n: "${input.n}"}}}
"""
KID = """
flow: kid
tools: {charge: {class: idempotent}}
steps:
  - {id: pay, call_tool: {tool: charge, input: "child ${input.n}"}}
"""


def test_waiting_work_is_claimed_by_priority_then_in_order(
    tmp_path: Path, local_db: Path | str
) -> None:
    db = local_db
    (tmp_path / "kid.yaml").write_text(KID)
    clock = [5_000]
    order: list[Any] = []

    async def charge(call: CallTool) -> Any:
        order.append(call.input)
        return None

    registry = Registry(tools={"charge": charge})
    limits = {"charge": ToolLimit(concurrency=1)}
    priorities = [3, 5, 1, None, 1, 2, 5, 3]

    async def main() -> None:
        async with LocalHost(
            db, registry=registry, clock=lambda: clock[0], tool_limits=limits
        ) as host:
            for n, priority in enumerate(priorities):  # no worker yet: every call waits
                clock[0] += 1
                await host.start(
                    ONE, {"n": n}, f"r{n}", priority=priority, flows=[tmp_path / "kid.yaml"]
                )
            stop = asyncio.Event()
            worker = asyncio.create_task(host.work(stop))
            while len(await host.runs("running")):
                await asyncio.sleep(0.02)
            stop.set()
            await worker
            for n, priority in enumerate(priorities):
                row = await host.run(f"r{n}")
                child = await host.run(f"r{n}/child#1")
                assert row.status == child.status == "completed"
                assert row.priority == child.priority == (priority or 3)

    asyncio.run(main())
    # The runs' own calls all waited from the start; the child runs' calls
    # ("child N", at their parents' priority) joined the queue as they came.
    first = [n for n in order if isinstance(n, int)]
    expected = sorted(range(len(priorities)), key=lambda n: (priorities[n] or 3, n))
    assert first == expected
    assert sorted(n for n in order if isinstance(n, str)) == [
        f"child {n}" for n in range(len(priorities))
    ]


WAIT = """
flow: waits
steps:
  - {id: go, await_signal: {signal: go}}
"""


def test_a_dedup_key_returns_the_running_run_and_starts_anew_after_it_settles(
    tmp_path: Path,
    local_db: Path | str,
) -> None:
    db = local_db

    async def main() -> None:
        async with LocalHost(db) as host:
            first = await host.start(WAIT, None, dedup_key="order-7")
            assert await host.start(WAIT, None, dedup_key="order-7") == first
            # A run id of its own does not escape the key while that run runs.
            assert await host.start(WAIT, None, "mine", dedup_key="order-7") == first
            with pytest.raises(HostError, match="no run 'mine'"):
                await host.run("mine")
            other = await host.start(WAIT, None, dedup_key="order-8")
            assert other != first
            assert (await host.run(first)).dedup_key == "order-7"
            await host.cancel(first)
            second = await host.start(WAIT, None, dedup_key="order-7")
            assert second not in (first, other)
            assert await host.start(WAIT, None, dedup_key="order-7") == second
            assert await host.deduplicated("order-7") == second
            with pytest.raises(HostError, match="dedup key must be"):
                await host.start(WAIT, None, dedup_key="")
            with pytest.raises(HostError, match="priority must be an integer from 1"):
                await host.start(WAIT, None, priority=0)
            with pytest.raises(HostError, match="priority must be an integer from 1"):
                await host.start(WAIT, None, priority=True)

    asyncio.run(main())


def test_bad_tool_limits_are_refused_by_the_host() -> None:
    with pytest.raises(HostError, match=r"tool_limits\['x'\] must be a ToolLimit"):
        LocalHost("x.db", tool_limits={"x": 3})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="concurrency must be an integer from 1"):
        ToolLimit(concurrency=0)
    with pytest.raises(ValueError, match="needs a concurrency, a rate, or both"):
        ToolLimit()
    with pytest.raises(ValueError, match="per_ms must be an integer"):
        ToolLimit(rate=1, per_ms=0)


def test_the_cli_dedup_key_prints_the_running_run_and_says_so(
    tmp_path: Path, local_db: Path | str
) -> None:
    db = str(local_db)
    spec = tmp_path / "waits.yaml"
    spec.write_text(WAIT)
    first = fc("run", str(spec), "--db", db, "--dedup-key", "k", "--priority", "1", "--detach")
    assert first.returncode == 0 and first.stderr == "", first.stderr
    rid = first.stdout.strip()
    again = fc("run", str(spec), "--db", db, "--dedup-key", "k", "--detach")
    assert again.returncode == 0 and again.stdout.strip() == rid
    assert again.stderr.strip() == (
        f"flowcore: run '{rid}' started with dedup key 'k' is running: no new run"
    )
    assert fc("cancel", rid, "--db", db).returncode == 0
    third = fc("run", str(spec), "--db", db, "--dedup-key", "k", "--detach")
    assert third.returncode == 0 and third.stdout.strip() not in ("", rid)


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("charge", "expected TOOL=concurrency:N,rate:K/DURATION"),
        ("charge=", "expected TOOL=concurrency:N,rate:K/DURATION"),
        ("charge=rate:10", "rate '10' needs a period: K/DURATION"),
        ("charge=rate:10/0s", "rate period: a duration must be greater than zero"),
        ("charge=rate:10/soon", "rate period:"),
        ("charge=concurrency:0", "concurrency must be an integer from 1"),
        ("charge=concurrency:two", "concurrency must be a whole number, not 'two'"),
        ("charge=burst:3", "'burst:3' is not concurrency:N or rate:K/DURATION"),
        ("charge=concurrency:1,concurrency:2", "(each at most once)"),
    ],
)
def test_bad_tool_limit_options_are_one_line_errors(tmp_path: Path, value: str, says: str) -> None:
    db = str(tmp_path / "x.db")
    line = bad("worker", "--db", db, "--until-idle", "--tool-limit", value)
    assert line.startswith("flowcore: --tool-limit") and says in line, line


def test_tool_limits_from_the_environment_and_other_bad_options(tmp_path: Path) -> None:
    db = str(tmp_path / "x.db")
    env = {"FLOWCORE_TOOL_LIMITS": "charge=concurrency:2,rate:10/1s mail=rate:5/1m"}
    proc = fc("worker", "--db", db, "--until-idle", env=env)
    assert proc.returncode == 0, proc.stderr
    assert "tool charge concurrency:2,rate:10/1000ms; tool mail rate:5/60000ms" in proc.stdout
    twice = bad("worker", "--db", db, "--tool-limit", "a=concurrency:1", "--tool-limit",
                "a=rate:1/1s")  # fmt: skip
    assert twice == "flowcore: --tool-limit: tool 'a' is limited twice"
    spec = tmp_path / "waits.yaml"
    spec.write_text(WAIT)
    assert bad("run", str(spec), "--db", db, "--priority", "9", "--detach") == (
        "flowcore: --priority must be from 1 (first) to 5 (last), not 9"
    )


def test_the_temporal_commands_check_their_limits_before_connecting(tmp_path: Path) -> None:
    spec = tmp_path / "waits.yaml"
    spec.write_text(WAIT)
    nowhere = ["--address", "127.0.0.1:1"]
    line = bad("temporal", "worker", "--tool-limit", "charge=rate:3", *nowhere)
    assert line == "flowcore: --tool-limit charge: rate '3' needs a period: K/DURATION, e.g. 10/1s"
    line = bad("temporal", "run", str(spec), "--priority", "0", *nowhere)
    assert line == "flowcore: --priority must be from 1 (first) to 5 (last), not 0"


FAILS = """
flow: fails
tools: {boom: {class: idempotent}}
steps:
  - {id: b, call_tool: {tool: boom}}
"""


def test_a_failed_run_is_not_resumed_while_another_run_holds_its_dedup_key(
    tmp_path: Path,
    local_db: Path | str,
) -> None:
    def boom(call: CallTool) -> Any:
        raise ValueError("down")

    async def main() -> None:
        registry = Registry(tools={"boom": boom})
        async with LocalHost(local_db, registry=registry) as host:
            first = await host.start(FAILS, None, "first", dedup_key="job")
            await host.work(until_settled=first)
            assert (await host.run(first)).status == "failed"
            second = await host.start(WAIT, None, "second", dedup_key="job")
            assert second == "second"
            with pytest.raises(HostError, match="cannot resume run 'first': run 'second'"):
                await host.resume(first)
            assert (await host.run(first)).status == "failed"  # nothing was written
            await host.cancel(second)
            await host.resume(first)  # the key is free again
            assert (await host.run(first)).status == "running"
            assert await host.deduplicated("job") == "first"

    asyncio.run(main())
