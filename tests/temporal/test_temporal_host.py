"""The Temporal host against a real ``temporal server start-dev``.

The demo flow gives the local host's output; signals (one sent before the
flow waits), answers through the update (a wrong one rejected), a subflow,
timers, a cancel with compensation, budget exhaustion; Temporal's Replayer
replays a recorded history; flowcore runs re-imported inside the sandbox.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("temporalio", reason="the Temporal host tests need temporalio (.[dev])")

from temporalio import workflow
from temporalio.client import WorkflowExecutionStatus, WorkflowHistory
from temporalio.worker import Replayer
from temporalio.workflow import NondeterminismError

import flowcore
import flowcore_temporal as ft
from flowcore import Decision
from flowcore.log.replay import replay
from flowcore_local import LocalHost

from .support import (
    DEMO_INPUT,
    DEMO_TOOLS,
    EXAMPLES,
    INCIDENT,
    normalise_keys,
    question,
    running_host,
    unique,
    waiting_for,
)
from .tools import JOURNAL_ENV

FIX = {"commit": "a1b2c3"}


# --- the demo flow, on both hosts ----------------------------------------------------------


async def _local_demo(db: Path) -> dict[str, Any]:
    async with LocalHost(db, str(DEMO_TOOLS)) as host:
        rid = await host.start(INCIDENT, DEMO_INPUT, "local-demo", flows=[EXAMPLES])
        await host.signal(rid, "fix-deployed", FIX)
        worker = asyncio.create_task(host.work(until_settled=rid))
        while not (info := await host.show(rid))["questions"]:
            await asyncio.sleep(0.02)
        await host.answer(rid, info["questions"][0]["key"], "page")
        await worker
        row = await host.run(rid)
        report = [
            {"idempotencyKey": r["idempotencyKey"], "status": r["status"]}
            for r in (await host.records(rid))[-2].data["report"]
        ]
        return {"runId": rid, "status": row.status, "output": row.output, "report": report}


class DemoRun:
    """The demo flow run once on Temporal; several tests look at it."""

    def __init__(
        self,
        run_id: str,
        result: dict[str, Any],
        records: list[flowcore.Record],
        from_history: list[flowcore.Record],
        history: WorkflowHistory,
        rejection: str,
        child_history: WorkflowHistory,
    ) -> None:
        self.run_id = run_id
        self.result = result
        self.records = records
        self.from_history = from_history
        self.history = history
        self.rejection = rejection
        self.child_history = child_history


async def _temporal_demo(address: str) -> DemoRun:
    async with running_host(address, DEMO_TOOLS) as host:
        rid = await host.start(INCIDENT, DEMO_INPUT, unique("demo"))
        # The fix is deployed before the flow waits for it: the run buffers it.
        await host.signal(rid, "fix-deployed", FIX)
        asked = await question(host, rid)
        assert asked["options"] == ["page", "ignore"]
        try:
            await host.answer(rid, asked["key"], "maybe")
        except ft.TemporalHostError as exc:
            rejection = str(exc)
        else:
            raise AssertionError("a wrong answer was accepted")
        await host.answer(rid, asked["key"], "page")
        result = await host.result(rid)
        records = await host.records(rid)
        history = await host.history(rid)
        from_history = await ft.history_to_log(history)
        child_history = await host.history(f"{rid}/postmortem#1")
        return DemoRun(rid, result, records, from_history, history, rejection, child_history)


@pytest.fixture(scope="module")
def demo_run(temporal_address: str) -> Iterator[DemoRun]:
    yield asyncio.run(_temporal_demo(temporal_address))


def test_the_demo_flow_gives_the_local_hosts_output(demo_run: DemoRun, tmp_path: Path) -> None:
    local = asyncio.run(_local_demo(tmp_path / "local.db"))
    result = demo_run.result
    assert result["status"] == local["status"] == "completed"
    assert result["output"] == local["output"]
    assert result["output"] == {
        "owner": "payments-oncall",
        "paged": "page",
        "fix": FIX,
        "postmortem": "Postmortem: Postmortem for INC-7, fixed by a1b2c3",
    }
    # The same work, under the same keys, with the same outcomes.
    temporal_report = [
        {"idempotencyKey": r["idempotencyKey"], "status": r["status"]} for r in result["report"]
    ]
    assert normalise_keys(temporal_report, demo_run.run_id) == normalise_keys(
        local["report"], local["runId"]
    )
    assert result["usage"] == {
        "steps": 15,
        "costMinorUnits": 280,
        "tokens": 0,
        "toolCalls": 6,  # the flow's call-tool effects
        "turns": 0,
    }


def test_an_early_signal_is_buffered_and_a_wrong_answer_is_rejected(demo_run: DemoRun) -> None:
    assert "'maybe' is not one of ['page', 'ignore']" in demo_run.rejection
    reported = [r.data for r in demo_run.records if r.type == "event.reported"]
    kinds = [d["kind"] for d in reported]
    signal_at = kinds.index("signal-received")
    answer_at = kinds.index("human-answered")
    assert signal_at < answer_at  # it came before the flow reached wait_fix ...
    emitted = [r.data["kind"] for r in demo_run.records if r.type == "effect.emitted"]
    assert "await-signal" not in emitted  # ... so the flow never had to wait for it
    # The wrong answer never reached the run: neither applied nor logged.
    answers = [d["answer"] for d in reported if d["kind"] == "human-answered"]
    assert answers == ["page"]
    assert not [r for r in demo_run.records if r.type == "event.rejected"]


def test_the_log_replays_and_the_history_converter_agrees(demo_run: DemoRun) -> None:
    assert demo_run.records == demo_run.from_history
    flow = flowcore.parse_flow(INCIDENT.read_text(), source_name=str(INCIDENT))
    report = replay(demo_run.records, flow)
    assert report.ok and report.status == "completed"
    assert demo_run.records[0].type == "run.started"
    assert demo_run.records[-1].type == "run.settled"
    assert [r.index for r in demo_run.records] == list(range(len(demo_run.records)))


def test_the_subflow_is_a_child_workflow_with_the_parents_budget(demo_run: DemoRun) -> None:
    child = asyncio.run(ft.history_to_log(demo_run.child_history))
    started = child[0]
    assert started.run_id == f"{demo_run.run_id}/postmortem#1"
    assert started.data["flowId"] == "postmortem"
    assert started.data["depth"] == 1
    # run-subflow carried the parent's remainder, not a fresh budget.
    parent_effect = next(
        r.data
        for r in demo_run.records
        if r.type == "effect.emitted" and r.data["kind"] == "run-subflow"
    )
    assert started.data["budget"] == parent_effect["budgetRemaining"]
    postmortem = flowcore.parse_flow((EXAMPLES / "postmortem.yaml").read_text())
    assert replay(child, postmortem).ok


# --- Temporal's Replayer ---------------------------------------------------------------------


@workflow.defn(name=ft.WORKFLOW_NAME, sandboxed=False)
class _Reordered(ft.FlowcoreWorkflow):
    """The workflow with one change: effects emitted together start in reverse order."""

    @workflow.init
    def __init__(self, args: ft.RunArgs) -> None:
        super().__init__(args)

    @workflow.run
    async def run(self, args: ft.RunArgs) -> dict[str, Any]:
        return await super().run(args)

    def _follow(self, decision: Decision) -> None:
        super()._follow(Decision(decision.state, tuple(reversed(decision.effects))))


def test_temporals_replayer_replays_a_recorded_history(demo_run: DemoRun) -> None:
    async def check() -> None:
        for history in (demo_run.history, demo_run.child_history):
            replayer = Replayer(
                workflows=[ft.FlowcoreWorkflow], workflow_runner=ft.workflow_runner()
            )
            await replayer.replay_workflow(history)  # raises on nondeterminism
            # The same history through JSON, as `temporal workflow show -o json` writes it.
            again = WorkflowHistory.from_json(history.workflow_id, history.to_json())
            await replayer.replay_workflow(again)
        # Starting the parallel branches in another order is caught.
        changed = Replayer(workflows=[_Reordered])
        with pytest.raises(NondeterminismError):
            await changed.replay_workflow(demo_run.history)

    asyncio.run(check())


# --- signals, timers, budgets, cancel ----------------------------------------------------------

SIGNALS = """
flow: signals
tools: {slow: {class: readonly}}
steps:
  - id: busy
    call_tool: {tool: slow, input: {seconds: 0.5}}
  - id: first
    await_signal: {signal: go}
  - id: second
    await_signal: {signal: go, timeout_ms: 30000}
output: "${ [steps.first.output, steps.second.output] }"
"""

NAP = """
flow: nap
tools: {echo: {class: readonly}}
steps:
  - id: nap
    sleep: {for_ms: 400}
  - id: after
    call_tool: {tool: echo, input: {value: awake}}
output: "${steps.after.output}"
"""

STEPS = """
flow: steps
tools: {echo: {class: readonly}}
budget: {steps: 2}
steps:
  - {id: a, call_tool: {tool: echo, input: {value: 1}}}
  - {id: b, call_tool: {tool: echo, input: {value: 2}}}
  - {id: c, call_tool: {tool: echo, input: {value: 3}}}
"""

WALL = """
flow: wall
budget: {wall_clock_ms: 400}
steps:
  - id: forever
    sleep: {for_ms: 3600000}
"""

SAGA = """
flow: saga
tools: {book: {class: idempotent}, unbook: {class: idempotent}}
steps:
  - id: book
    call_tool: {tool: book, input: {value: booked}}
    compensate:
      - {id: unbook, call_tool: {tool: unbook, input: {value: unbooked}}}
  - id: wait
    await_signal: {signal: never}
"""

FAN = """
flow: fan
limits: {max_concurrency: 2}
tools: {slow: {class: readonly}}
steps:
  - id: all
    parallel:
      branches:
        a: [{id: a, call_tool: {tool: slow, input: {seconds: 0.4, value: a}}}]
        b: [{id: b, call_tool: {tool: slow, input: {seconds: 0.4, value: b}}}]
        c: [{id: c, call_tool: {tool: slow, input: {seconds: 0.4, value: c}}}]
output: "${steps.all.output}"
"""

LOST = """
flow: lost
steps:
  - id: child
    run_subflow: {flow: nowhere}
"""


def test_signals_timers_budgets_cancel_and_compensation(
    temporal_address: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = tmp_path / "journal.txt"
    monkeypatch.setenv(JOURNAL_ENV, str(journal))

    async def fan(host: ft.TemporalHost) -> None:
        rid = await host.start(FAN, None, unique("fan"))
        result = await host.result(rid)
        assert result["output"] == {"a": "a", "b": "b", "c": "c"}
        # Emitted together, run at once as asyncio tasks, two at a time at most.
        running = peak = 0
        for line in journal.read_text().splitlines():
            what, key, _ = line.split()
            if key.startswith(rid + "/"):
                running += 1 if what == "start" else -1
                peak = max(peak, running)
        assert peak == 2

    async def signals(host: ft.TemporalHost) -> None:
        rid = await host.start(SIGNALS, None, unique("signals"))
        await host.signal(rid, "go", 1)  # while busy: buffered
        await waiting_for(host, rid, "go")  # second: the run waits now
        await host.signal(rid, "go", {"n": 2})
        result = await host.result(rid)
        assert result["status"] == "completed"
        assert result["output"] == [1, {"n": 2}]

    async def nap(host: ft.TemporalHost) -> None:
        began = time.monotonic()
        rid = await host.start(NAP, None, unique("nap"))
        result = await host.result(rid)
        assert result["output"] == "awake"
        assert time.monotonic() - began >= 0.4
        fired = [r for r in await host.records(rid) if r.type == "event.reported"]
        assert fired[0].data["kind"] == "timer-fired"

    async def steps(host: ft.TemporalHost) -> None:
        result = await host.result(await host.start(STEPS, None, unique("steps")))
        assert (result["status"], result["exhausted"]) == ("budget-exhausted", "steps")
        assert [r["status"] for r in result["report"]] == ["succeeded", "succeeded"]

    async def wall(host: ft.TemporalHost) -> None:
        began = time.monotonic()
        result = await host.result(await host.start(WALL, None, unique("wall")))
        assert (result["status"], result["exhausted"]) == ("budget-exhausted", "wall-clock")
        assert time.monotonic() - began < 20

    async def saga(host: ft.TemporalHost) -> None:
        rid = await host.start(SAGA, None, unique("saga"))
        await waiting_for(host, rid, "never")
        await host.cancel(rid, "operator stop")
        result = await host.result(rid)
        assert result["status"] == "cancelled"
        assert result["error"] == {"type": "cancelled", "message": "operator stop"}
        assert [(r["idempotencyKey"], r["status"]) for r in result["report"]] == [
            (f"{rid}/book#1", "succeeded"),
            (f"{rid}/unbook#1", "succeeded"),
        ]
        desc = await host.handle(rid).describe()
        assert desc.status == WorkflowExecutionStatus.COMPLETED  # settled is the result

    async def lost(host: ft.TemporalHost) -> None:
        result = await host.result(await host.start(LOST, None, unique("lost")))
        assert result["status"] == "failed"
        assert result["error"]["type"] == "unknown-flow"

    async def main() -> None:
        async with running_host(temporal_address) as host:
            await asyncio.gather(
                signals(host), nap(host), steps(host), wall(host), saga(host), lost(host), fan(host)
            )

    asyncio.run(main())


def test_answers_to_unknown_questions_and_settled_runs_are_rejected(
    temporal_address: str,
) -> None:
    ask = """
flow: ask
steps:
  - id: q
    ask_human: {question: "Ship it?", options: [yes, no]}
output: "${steps.q.answer}"
"""

    async def main() -> None:
        async with running_host(temporal_address) as host:
            rid = await host.start(ask, None, unique("ask"))
            asked = await question(host, rid)
            with pytest.raises(ft.TemporalHostError, match="no pending question 'nope'"):
                await host.answer(rid, "nope", "yes")
            await host.answer(rid, asked["key"], "no")
            assert (await host.result(rid))["output"] == "no"
            with pytest.raises(ft.TemporalHostError, match="already settled"):
                await host.answer(rid, asked["key"], "yes")
            with pytest.raises(ft.TemporalHostError, match="no run 'missing-run'"):
                await host.signal("missing-run", "go")

    asyncio.run(main())


@pytest.mark.filterwarnings("ignore:Module flowcore")
def test_flowcore_runs_re_imported_inside_the_sandbox(temporal_address: str) -> None:
    """flowcore not passed through: the sandbox imports and watches it; the demo still runs."""
    assert "flowcore" not in ft.sandbox_restrictions(flowcore=False).passthrough_modules

    async def main() -> dict[str, Any]:
        async with running_host(temporal_address, DEMO_TOOLS, sandbox="reimport") as host:
            rid = await host.start(INCIDENT, DEMO_INPUT, unique("sandboxed"))
            await host.signal(rid, "fix-deployed", FIX)
            await host.answer(rid, (await question(host, rid))["key"], "ignore")
            return await host.result(rid)

    result = asyncio.run(main())
    assert result["status"] == "completed"
    assert result["output"]["paged"] == "ignore"


def test_the_cli_group_does_not_import_temporalio() -> None:
    """``flowcore`` registers the group; its other commands must not pay for temporalio."""
    code = (
        "import sys, flowcore_cli._temporal as c; "
        "assert c.GROUP.name == 'temporal'; "
        "assert not [m for m in sys.modules if m.startswith('temporalio')], 'imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
