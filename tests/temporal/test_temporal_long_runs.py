"""Runs of any length on the Temporal host, against a real dev server.

A run whose history grows long goes on in a new Temporal run of the same
workflow id by itself (``continue_after_events``, or Temporal's suggestion):
its state, its log's next index, its pending questions and buffered signals
go over, timers keep their due times, the work out is waited for, signals and
answers sent during the switch are not lost, and the log stitched from every
Temporal run replays to the same effects. Here the threshold is low (a few
hundred events), so a run of about 2,000 work effects switches many times.
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("temporalio", reason="the Temporal host tests need temporalio (.[dev])")

import flowcore
import flowcore_temporal as ft

from .support import TOOLS, eventually, running_host, unique
from .test_temporal_cli import Cli, worker_process
from .tools import JOURNAL_ENV, journal_lines

# About 2,000 work effects: 1,000 items, two calls each, 25 at a time. Beside
# the loop, a branch takes signals one at a time and asks questions, so both
# come while the run switches.
LONG = """
flow: long
budget: {steps: 5000}
tools: {echo: {class: idempotent}}
steps:
  - id: both
    parallel:
      branches:
        work:
            - id: per
              for_each:
                items: "${input.items}"
                max_concurrency: 25
                steps:
                  - {id: a, call_tool: {tool: echo, input: {value: "${item}"}}}
                  - {id: b, call_tool: {tool: echo, input: {value: "${steps.a.output}"}}}
        people:
            - id: notes
              for_each:
                items: "${input.notes}"
                steps:
                  - {id: take, await_signal: {signal: note}}
                  - id: ok
                    ask_human: {question: "note ${steps.take.output}?", options: [yes, no]}
                  - {id: nap, sleep: {for_ms: 200}}
                  - {id: kept, call_tool: {tool: echo, input: {value: "${steps.ok.output}"}}}
output: "${ {count: length(steps.both.output.work), notes: length(steps.both.output.people)} }"
"""


def _items(n: int) -> list[int]:
    return list(range(n))


async def _executions(host: ft.TemporalHost, run_id: str) -> int:
    return len(await host.histories(run_id))


async def _answer_all(host: ft.TemporalHost, run_id: str, notes: int) -> list[str]:
    """Send each note and answer each question as it comes; the keys answered."""
    answered: list[str] = []
    for i in range(notes):
        await host.signal(run_id, "note", f"n{i}")

        async def asked() -> Any:
            questions = await host.questions(run_id)
            return [q for q in questions if q["key"] not in answered]

        question = (await eventually(asked, f"question {i} of {run_id}", timeout=120))[0]
        await host.answer(run_id, question["key"], "yes")
        answered.append(question["key"])
    return answered


def test_a_long_run_switches_many_times_and_loses_nothing(temporal_address: str) -> None:
    async def main() -> Any:
        async with running_host(temporal_address) as host:
            rid = unique("long")
            notes = 8
            await host.start(
                LONG,
                {"items": _items(1000), "notes": list(range(notes))},
                rid,
                continue_after_events=300,
            )
            answered = await _answer_all(host, rid, notes)
            result = await host.result(rid)
            log = await host.log(rid)
            chain = await host.histories(rid)
            status = await host.status(rid)
            return result, answered, log, chain, status

    result, answered, log, chain, status = asyncio.run(main())
    assert result["status"] == "completed", result
    assert result["output"] == {"count": 1000, "notes": 8}, result["output"]
    assert len(answered) == 8
    assert len(chain) > 10, f"expected many Temporal runs, got {len(chain)}"
    assert status["execution"] == len(chain)
    # One log, one index sequence, across every Temporal run.
    assert [r.index for r in log] == list(range(len(log)))
    assert sum(r.type == "run.started" for r in log) == 1
    emitted = [r for r in log if r.type == "effect.emitted" and r.data["kind"] == "call-tool"]
    keys = [r.data["idempotencyKey"] for r in emitted]
    assert len(keys) == len(set(keys)) == 2008
    # The stitched log replays to the same effects.
    flow = flowcore.parse_flow(LONG)
    report = flowcore.replay(log, flow)
    assert report.ok, report


# One call holds the switch open (a gate a file opens); the loop beside it
# fills the history, so the run starts to switch while the gate is out.
GATED = """
flow: gated
tools: {echo: {class: idempotent}, gate: {class: readonly}}
steps:
  - id: both
    parallel:
      branches:
        held:
          - {id: wait, call_tool: {tool: gate, input: {path: "${input.flag}", value: opened}}}
        busy:
          - id: per
            for_each:
              items: "${input.items}"
              steps:
                - {id: a, call_tool: {tool: echo, input: {value: "${item}"}}}
output: "${ {gate: steps.both.output.held, count: length(steps.both.output.busy)} }"
"""


def test_a_worker_killed_during_a_switch_loses_nothing(
    temporal_address: str, tmp_path: Path
) -> None:
    queue = unique("switch-kill")
    journal = tmp_path / "journal.txt"
    journal.touch()
    flag = tmp_path / "open"
    env = {JOURNAL_ENV: str(journal)}
    rid = unique("gated")

    def lines() -> list[tuple[str, str, int]]:
        return journal_lines(journal)

    async def start_and_wait_for_the_switch(first_pid: int) -> dict[str, Any]:
        client = await ft.connect(temporal_address)
        host = ft.TemporalHost(client, queue)
        await host.start(
            GATED,
            {"flag": str(flag), "items": list(range(100))},
            rid,
            heartbeat_timeout_ms=1000,
            continue_after_events=150,
        )

        async def switching() -> Any:
            status = await host.status(rid)
            return status if status.get("continuing") else None

        status: dict[str, Any] = await eventually(switching, "the run to start switching", 60)
        assert ("start", f"{rid}/wait#1", first_pid) in lines()
        return status

    async def finish() -> tuple[dict[str, Any], list[flowcore.Record], int]:
        client = await ft.connect(temporal_address)
        host = ft.TemporalHost(client, queue)
        result = await host.result(rid)
        return result, await host.log(rid), len(await host.histories(rid))

    with worker_process(temporal_address, queue, TOOLS, env) as first:
        asyncio.run(start_and_wait_for_the_switch(first.pid))
        first.send_signal(signal.SIGKILL)  # while the run waits for the gate to switch
        first.wait()
    flag.touch()
    with worker_process(temporal_address, queue, TOOLS, env):
        result, log, executions = asyncio.run(finish())
    assert result["status"] == "completed", result
    assert result["output"] == {"gate": "opened", "count": 100}
    assert executions >= 2
    done = Counter(key for what, key, _ in lines() if what == "done")
    started = Counter(key for what, key, _ in lines() if what == "start")
    # A call that ran again is one whose result the dead worker never sent:
    # its outcome was unknown, and flowcore re-issued the idempotent call.
    unknown = {
        r.data["idempotencyKey"]
        for r in log
        if r.type == "event.reported" and r.data["kind"] == "effect-outcome-unknown"
    }
    assert f"{rid}/wait#1" in unknown
    assert all(n == 1 or key in unknown for key, n in done.items()), (done, unknown)
    assert len(done) == 101
    # The gate the dead worker held was re-issued under its key.
    assert started[f"{rid}/wait#1"] == 2
    assert [r.index for r in log] == list(range(len(log)))
    assert flowcore.replay(log, flowcore.parse_flow(GATED)).ok
    # The commands see the one run: its log across the Temporal runs, and
    # which Temporal run it ended in.
    cli = Cli(temporal_address, queue)
    events = [json.loads(line) for line in cli.ok("events", rid, "--json").splitlines()]
    assert [e["index"] for e in events] == [r.index for r in log]
    assert [e["type"] for e in events] == [r.type for r in log]
    table = cli.ok("events", rid, "--start-index", str(len(log) - 2))
    assert len(table.strip().splitlines()) == 2 and "settled" in table
    exported = cli.ok("export", rid)
    assert exported.encode() == flowcore.encode_records(log)
    shown = json.loads(cli.ok("show", rid, "--json"))
    assert shown["execution"] == executions and shown["status"] == "completed"
    assert f"Temporal run {executions} of the run" in cli.ok("show", rid)
