"""Moving a running run to a new version of its flow on the local host, on a real SQLite file."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import flowcore
from flowcore_local import HostError, LocalHost

from ..local_helpers import JOURNALED, journal, settle, tools_file, work_until
from ..test_local_cli import bad, fc, ok

V1 = """
flow: order
version: 1
tools: {gate: {class: idempotent}, echo: {class: readonly}}
steps:
  - {id: charge, call_tool: {tool: gate, input: 1}}
  - {id: approve, await_signal: {signal: approved}}
  - {id: ship, call_tool: {tool: echo, input: ship}}
output: "${steps.ship.output}"
"""
# A step after the wait: compatible with a run that waits there (or before).
V2 = V1.replace("version: 1", "version: 2").replace(
    'output: "${steps.ship.output}"',
    '  - {id: notify, call_tool: {tool: echo, input: notify}}\noutput: "${steps.notify.output}"',
)
# Charges another amount: a run that charged already diverges.
V2_BAD = V1.replace("version: 1", "version: 2").replace("input: 1}", "input: 2}")

# ``gate`` returns once the file GATE exists (a handler in flight, held open).
TOOLS = (
    JOURNALED
    + """
import time

GATE = JOURNAL.parent / "gate"


def gate(call):
    note(call)
    deadline = time.monotonic() + 120
    while not GATE.exists():
        if time.monotonic() > deadline:
            raise RuntimeError("the gate never opened")
        time.sleep(0.01)
    return "charged"


TOOLS = {{"gate": gate, "echo": echo}}
"""
)


def setup(
    tmp_path: Path, db: Path | str, gate_open: bool = True
) -> tuple[Path, Path | str, Path, Path, Path]:
    """The tools module, the database and the three specs' files."""
    tools = tools_file(tmp_path, "order_tools", TOOLS)
    if gate_open:
        (tmp_path / "gate").touch()
    specs = []
    for name, text in (("v1", V1), ("v2", V2), ("bad", V2_BAD)):
        (tmp_path / name).mkdir()
        path = tmp_path / name / "order.yaml"
        path.write_text(text)
        specs.append(path)
    return tools, db, specs[0], specs[1], specs[2]


async def waiting_for_approval(host: LocalHost, run_id: str) -> bool:
    return any(w.signal == "approved" for w in (await host.waits(run_id)).signals)


async def poll(check: object, timeout: float = 60) -> None:
    """Wait until ``check()`` (awaitable) holds, polling; generous bound, not a timing."""
    deadline = time.monotonic() + timeout
    while not await check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "the condition never held"
        await asyncio.sleep(0.02)


def test_upgrade_while_a_worker_runs_the_run_then_it_runs_the_new_step(
    tmp_path: Path, local_db: Path | str
) -> None:
    tools, db, v1, v2, _ = setup(tmp_path, local_db, gate_open=False)
    v1_flow, v2_flow = flowcore.parse_flow(V1), flowcore.parse_flow(V2)

    async def main() -> None:
        # Two hosts on one file: a worker, and an operator on its own connection.
        async with LocalHost(db, str(tools)) as worker, LocalHost(db, str(tools)) as operator:
            await worker.start(v1, {}, run_id="o-1")  # the worker caches its v1 state
            stop = asyncio.Event()
            working = asyncio.create_task(worker.work(stop))
            # The worker runs the charge and holds it open: work in flight.
            await poll(lambda: _journaled(tmp_path, "o-1/charge#1"))
            made = await operator.upgrade("o-1", v2)
            assert made.changed and (made.from_spec_hash, made.spec_hash) == (
                v1_flow.spec_hash,
                v2_flow.spec_hash,
            )
            assert [e.idempotency_key for e in made.pending] == ["o-1/charge#1"]
            assert (await operator.run("o-1")).spec_hash == v2_flow.spec_hash
            assert (await operator.flow("o-1")).version == 2
            (tmp_path / "gate").touch()  # the charge returns, to the moved run
            await poll(lambda: waiting_for_approval(operator, "o-1"))
            await operator.signal("o-1", "approved")
            await poll(lambda: _settled(operator, "o-1"))
            stop.set()
            await working
            row = await operator.run("o-1")
            assert (row.status, row.output) == ("completed", {"echo": "notify"})
            # Every step ran once, v2's new step included.
            assert journal(tmp_path) == {"o-1/charge#1": 1, "o-1/ship#1": 1, "o-1/notify#1": 1}
            records = await operator.records("o-1")
            # The whole log replays against the version the run moved to (log.md §9).
            report = flowcore.replay(records, v2_flow)
            assert report.ok and report.status == "completed" and not report.spec_matches
            with pytest.raises(flowcore.ReplayDivergence):
                flowcore.replay(records, v1_flow)

    asyncio.run(main())


async def _journaled(folder: Path, key: str) -> bool:
    return journal(folder)[key] >= 1


async def _settled(host: LocalHost, run_id: str) -> bool:
    return (await host.run(run_id)).status != "running"


def test_a_refused_upgrade_leaves_the_run_as_it_was(tmp_path: Path, local_db: Path | str) -> None:
    tools, db, v1, v2, v2_bad = setup(tmp_path, local_db)

    async def main() -> None:
        async with LocalHost(db, str(tools)) as host:
            await host.start(v1, {}, run_id="o-1")
            await work_until(host, lambda: waiting_for_approval(host, "o-1"))
            before = await host.run("o-1")
            records = await host.records("o-1")
            with pytest.raises(flowcore.UpgradeRefused) as refused:
                await host.upgrade("o-1", v2_bad)
            exc = refused.value
            charge = next(r for r in records if r.type == "effect.emitted")
            assert (exc.reason, exc.index) == ("diverged", charge.index)
            assert (exc.expected["input"], exc.actual["input"]) == (1, 2)
            # Nothing changed: not the pin, not the log, not the stored specs.
            after = await host.run("o-1")
            assert (after.spec_hash, after.next_index) == (before.spec_hash, before.next_index)
            assert await host.records("o-1") == records
            # A dry run and the spec it is on change nothing either.
            dry = await host.upgrade("o-1", v2, dry_run=True)
            assert dry.changed and (await host.run("o-1")).spec_hash == before.spec_hash
            same = await host.upgrade("o-1", v1)
            assert not same.changed
            # A new version that calls a tool the run's tools module lacks: refused too.
            needs = V2.replace("tool: echo, input: notify", "tool: notify, input: notify")
            needs = needs.replace(
                "echo: {class: readonly}}", "echo: {class: readonly}, notify: {}}"
            )
            for dry_run in (True, False):
                with pytest.raises(HostError, match=r"has no handler for .*notify"):
                    await host.upgrade("o-1", needs, dry_run=dry_run)
            assert (await host.run("o-1")).spec_hash == before.spec_hash
            other = V1.replace("flow: order", "flow: refund")
            with pytest.raises(flowcore.UpgradeRefused, match="not 'refund'"):
                await host.upgrade("o-1", other)
            await host.signal("o-1", "approved")
            row = await settle(host, "o-1")
            assert (row.status, row.output) == ("completed", {"echo": "ship"})
            assert "o-1/notify#1" not in journal(tmp_path)
            with pytest.raises(HostError, match="it is completed, and only a running run"):
                await host.upgrade("o-1", v2)
            with pytest.raises(HostError, match="no run 'nope'"):
                await host.upgrade("nope", v2)

    asyncio.run(main())


# SQLite only, for the suite's time: many command processes, each opening the
# database (up to 3x slower on PostgreSQL on two busy cores); others run on both.
def test_the_upgrade_command(tmp_path: Path) -> None:
    tools, db, v1, v2, v2_bad = setup(tmp_path, tmp_path / "cli.db")
    d = ["--db", str(db)]
    ok("run", str(v1), "--tools", str(tools), "--run-id", "o-1", "--detach", *d)
    ok("run", str(v1), "--tools", str(tools), "--run-id", "o-2", "--detach", *d)
    worker = subprocess.Popen(
        [sys.executable, "-m", "flowcore_cli", "worker", *d],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for rid in ("o-1", "o-2"):
            _wait_shown(db, rid, lambda info: bool(info["waitingFor"]))
        # Refused: the divergence in one block, exit 1, the run untouched.
        proc = fc("upgrade", "o-1", "--to", str(v2_bad), *d)
        assert proc.returncode == 1, proc.stderr
        lines = proc.stdout.splitlines()
        assert lines[0].startswith("run o-1 cannot move to version 2 (spec ")
        assert "the recorded effect differs from the re-derived one" in lines[0]
        assert lines[1].split() == ["index", "1"]
        assert lines[2].split()[0] == "recorded" and '"input":1' in lines[2]
        assert lines[3].split()[:2] == ["new", "spec"] and '"input":2' in lines[3]
        refused = json.loads(fc("upgrade", "o-1", "--to", str(v2_bad), "--json", *d).stdout)
        assert (refused["refused"], refused["index"], refused["reason"]) == (True, 1, "diverged")
        # A dry run says it can, and changes nothing.
        dry = ok("upgrade", "o-2", "--to", str(v2), "--dry-run", *d)
        assert "can move from version 1" in dry and "dry run: nothing changed" in dry
        # Moved: o-2 goes on under v2 and runs v2's new step; o-1 finishes on v1.
        moved = json.loads(ok("upgrade", "o-2", "--to", str(v2), "--json", *d))
        assert (moved["moved"], moved["from"]["version"], moved["to"]["version"]) == (True, 1, 2)
        assert [p["kind"] for p in moved["pending"]] == ["await-signal"]
        again = ok("upgrade", "o-2", "--to", str(v2), *d)
        assert "is on version 2" in again and "nothing to do" in again
        for rid in ("o-1", "o-2"):
            ok("signal", rid, "approved", *d)
        for rid in ("o-1", "o-2"):
            _wait_shown(db, rid, lambda info: info["status"] != "running")
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.communicate(timeout=60)
    shown = {rid: json.loads(ok("show", rid, "--json", *d)) for rid in ("o-1", "o-2")}
    assert shown["o-1"]["output"] == {"echo": "ship"}
    assert shown["o-2"]["output"] == {"echo": "notify"}
    assert journal(tmp_path)["o-2/notify#1"] == 1 and "o-1/notify#1" not in journal(tmp_path)
    # Replayed from the database: against the spec the run is pinned to now.
    report = json.loads(ok("replay", "o-2", "--json", *d))
    assert report["ok"] and report["replayedSpecHash"] == flowcore.parse_flow(V2).spec_hash
    # Exported, its log replays against the new version, and diverges from the old.
    log = tmp_path / "o-2.ndjson"
    ok("export", "o-2", "-o", str(log), *d)
    assert "completed" in ok("replay", str(log), "--spec", str(v2))
    assert fc("replay", str(log), "--spec", str(v1)).returncode == 1
    # Bad input: one line, exit 2.
    assert "it is completed" in bad("upgrade", "o-1", "--to", str(v2), *d)
    assert "no run 'nope'" in bad("upgrade", "nope", "--to", str(v2), *d)
    assert "no such spec file" in bad("upgrade", "o-1", "--to", str(tmp_path / "x.yaml"), *d)
    broken = tmp_path / "broken.yaml"
    broken.write_text("flow: order\nsteps: [{id: a, nope: 1}]\n")
    assert "broken.yaml" in bad("upgrade", "o-1", "--to", str(broken), *d)


def _wait_shown(db: Path | str, run_id: str, done: object, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while True:
        info = json.loads(ok("show", run_id, "--json", "--db", str(db)))
        if done(info):  # type: ignore[operator]
            return
        assert time.monotonic() < deadline, info
        time.sleep(0.1)
