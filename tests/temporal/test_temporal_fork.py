"""``TemporalHost.fork`` and ``flowcore temporal fork`` on a real Temporal dev server.

A failed run is forked from its failing step with fixed handlers and
completes; the journal shows the steps before the point ran once, in the
source. The fork's log (from its history) replays, and Temporal's Replayer
replays the fork's history: the prefix applied again is deterministic.
"""

from __future__ import annotations

import asyncio
import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("temporalio", reason="the Temporal host tests need temporalio (.[dev])")

import msgspec
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.worker import Replayer

import flowcore
import flowcore_temporal as ft
from flowcore.log.replay import replay

from .support import HERE, eventually, running_host, unique, waiting_for
from .test_temporal_cli import Cli, worker_process
from .test_temporal_hostile import WAIT_S, client_and_host, task_failures
from .tools import JOURNAL_ENV

PAY = """
flow: pay
tools: {echo: {class: readonly}, charge: {}}
steps:
  - {id: a, call_tool: {tool: echo, input: {value: 1}}}
  - {id: b, call_tool: {tool: charge, input: {value: 2}}}
  - {id: c, call_tool: {tool: echo, input: {value: 3}}}
output: "${ {b: steps.b.output, c: steps.c.output} }"
"""

WAIT = """
flow: wait
tools: {echo: {class: readonly}}
steps:
  - {id: a, call_tool: {tool: echo, input: {value: 1}}}
  - {id: go, await_signal: {signal: go}}
  - {id: c, call_tool: {tool: echo, input: {value: "${steps.go.output}"}}}
output: "${steps.c.output}"
"""


def tools_module(folder: Path, name: str, charge: str) -> Path:
    """A tools module on the test tools, with ``charge`` as ``fail`` or ``echo``."""
    path = folder / f"{name}.py"
    path.write_text(
        textwrap.dedent(
            f"""
            import sys
            sys.path.insert(0, {str(HERE)!r})
            from tools import echo, fail

            TOOLS = {{"echo": echo, "charge": {charge}}}
            """
        )
    )
    return path


def started(journal: Path) -> list[str]:
    if not journal.exists():
        return []
    return sorted(
        line.split()[1] for line in journal.read_text().splitlines() if line[:5] == "start"
    )


def test_a_failed_run_forked_from_its_failing_step_completes(
    temporal_address: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = tmp_path / "journal.txt"
    monkeypatch.setenv(JOURNAL_ENV, str(journal))
    broken = tools_module(tmp_path, "broken_tools", "fail")
    fixed = tools_module(tmp_path, "fixed_tools", "echo")

    async def body() -> dict[str, Any]:
        async with running_host(temporal_address, broken) as host:
            rid = await host.start(PAY, {}, unique("pay"), tools=str(broken))
            failed = await host.result(rid)
            with pytest.raises(flowcore.ForkError, match="has no step 'zz'"):
                await host.fork(rid, from_step="zz")
            with pytest.raises(flowcore.ForkError, match=r"index 1 \(effect.emitted\) is inside"):
                await host.fork(rid, at=1)
            fid = await host.fork(rid, from_step="b", tools=str(fixed))
            again = await host.fork(rid, from_step="b", tools=str(fixed))
            done = await host.result(fid)
            history = await host.history(fid)
            return {
                "rid": rid,
                "failed": failed,
                "fid": fid,
                "again": again,
                "done": done,
                "log": await ft.history_to_log(history),
                "source": await ft.history_to_log(await host.history(rid)),
                "forked": await host.forked_from(fid),
                "history": history,
            }

    run = asyncio.run(body())
    rid, fid = run["rid"], run["fid"]
    assert run["failed"]["status"] == "failed"
    assert run["again"] == fid
    log = run["log"]
    point = log[0].data["forkedFrom"]["index"]
    assert fid == f"{rid}-fork-{point}"
    assert run["forked"] == {"runId": rid, "index": point}
    assert run["source"][point - 1].data["idempotencyKey"] == f"{rid}/b#1"
    assert (run["done"]["status"], run["done"]["output"]) == ("completed", {"b": 2, "c": 3})
    # a ran once, in the source; b failed there and ran again in the fork; c only there.
    assert started(journal) == sorted([f"{rid}/a#1", f"{rid}/b#1", f"{fid}/b#1", f"{fid}/c#1"])
    assert replay(log, flowcore.parse_flow(PAY)).status == "completed"

    async def replayed() -> None:
        replayer = Replayer(workflows=[ft.FlowcoreWorkflow], workflow_runner=ft.workflow_runner())
        await replayer.replay_workflow(run["history"])

    asyncio.run(replayed())


def test_a_reset_forks_a_waiting_run_and_cancels_it(temporal_address: str) -> None:
    async def body() -> dict[str, Any]:
        async with running_host(temporal_address) as host:
            rid = await host.start(WAIT, {}, unique("wait"))
            await waiting_for(host, rid, "go")
            source_log = await host.records(rid)
            fid = await host.fork(rid, at=len(source_log), cancel_source=True)
            await waiting_for(host, fid, "go")
            await host.signal(fid, "go", "x")
            done = await host.result(fid)

            async def cancelled() -> bool:
                return (await host.status(rid)).get("status") == "cancelled"

            await eventually(cancelled, f"{rid} to settle cancelled")
            return {"fid": fid, "done": done, "log": await host.records(fid), "n": len(source_log)}

    run = asyncio.run(body())
    assert (run["done"]["status"], run["done"]["output"]) == ("completed", "x")
    log = run["log"]
    assert log[0].data["forkedFrom"]["index"] == run["n"]
    # The carried prefix: a's result is reused, not run again.
    carried = [r for r in log[: run["n"]] if r.type == "event.reported"]
    assert [r.data["idempotencyKey"] for r in carried] == [f"{run['fid']}/a#1"]
    assert replay(log, flowcore.parse_flow(WAIT)).status == "completed"


def test_flowcore_temporal_fork_in_processes(
    temporal_address: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = tmp_path / "journal.txt"
    monkeypatch.setenv(JOURNAL_ENV, str(journal))
    broken = tools_module(tmp_path, "broken_tools", "fail")
    fixed = tools_module(tmp_path, "fixed_tools", "echo")
    spec = tmp_path / "pay.yaml"
    spec.write_text(PAY)
    cli = Cli(temporal_address, unique("q"))
    rid = unique("pay")
    with worker_process(temporal_address, cli.queue, broken, {JOURNAL_ENV: str(journal)}):
        ran = cli("run", str(spec), "--run-id", rid, "--tools", str(broken))
        assert ran.returncode == 1, (ran.stdout, ran.stderr)
        assert "has no step 'zz'" in cli.bad("fork", rid, "--from-step", "zz")
        assert "exactly one of" in cli.bad("fork", rid)
        out = cli.ok("fork", rid, "--from-step", "b", "--tools", str(fixed), "--json")
        info = json.loads(out)
        fid = info["runId"]
        assert info["forkedFrom"]["runId"] == rid
        shown = json.loads(cli.ok("show", fid, "--json"))
        text = cli.ok("show", fid)

        async def settled() -> Any:
            found = json.loads(cli.ok("show", fid, "--json"))
            return found if found.get("status") == "completed" else None

        final = asyncio.run(eventually(settled, f"{fid} to complete", timeout=60))
    assert shown["runId"] == fid
    assert shown["forkedFrom"] == final["forkedFrom"] == info["forkedFrom"]
    assert f"forked from {rid} at index {info['forkedFrom']['index']}" in text
    assert final["output"] == {"b": 2, "c": 3}
    assert started(journal) == sorted([f"{rid}/a#1", f"{rid}/b#1", f"{fid}/b#1", f"{fid}/c#1"])


NAP = """
flow: nap
steps:
  - {id: nap, sleep: {for_ms: 1}}
"""


def test_hostile_fork_arguments_fail_the_workflow_at_once(temporal_address: str) -> None:
    """Any client can send ``RunArgs.fork``: what is not a fork fails the start, non-retryably."""
    flow = flowcore.parse_flow(NAP)
    decision = flowcore.start(flow, None, run_id="src", now_ms=5)
    good = [
        msgspec.to_builtins(r) for r in flowcore.Recorder("src").started(flow, None, 5, decision)
    ]
    other = flowcore.parse_flow("flow: other\nsteps: [{id: x, sleep: {for_ms: 1}}]\n")
    foreign = [
        msgspec.to_builtins(r)
        for r in flowcore.Recorder("src").started(
            other, None, 5, flowcore.start(other, None, run_id="src", now_ms=5)
        )
    ]
    fork = {"runId": "src", "index": len(good), "records": good}
    cases: list[tuple[Any, str, str]] = [
        (5, "RunArgsError", "fork: expected an object of runId, index and records"),
        ({**fork, "index": 0}, "RunArgsError", "fork.index: expected an integer"),
        ({**fork, "records": "x"}, "RunArgsError", "fork.records: expected a list"),
        ({**fork, "records": [{"x": 1}]}, "ValueError", "the fork's records are not log records"),
        ({**fork, "runId": "else"}, "ValueError", "are not those of run 'else'"),
        ({**fork, "index": 1}, "ForkError", "index 1 (effect.emitted) is inside the decision"),
        ({**fork, "records": foreign}, "ValueError", "the fork's records do not replay"),
    ]

    async def main() -> tuple[list[tuple[str, str, list[str]]], Any]:
        async with client_and_host(temporal_address) as (client, host):

            async def one(value: Any) -> tuple[str, str, list[str]]:
                handle = await client.start_workflow(
                    ft.WORKFLOW_NAME,
                    {"spec": NAP, "fork": value},
                    id=unique("fork"),
                    task_queue=host.task_queue,
                )
                with pytest.raises(WorkflowFailureError) as caught:
                    await asyncio.wait_for(handle.result(), WAIT_S)
                cause = caught.value.cause
                assert isinstance(cause, ApplicationError) and cause.non_retryable
                return cause.type or "", cause.message, await task_failures(handle)

            out = await asyncio.gather(*(one(value) for value, _, _ in cases))
            # The well-formed fork runs: its log begins with the source's records.
            rid = unique("fork")
            await client.start_workflow(
                ft.WORKFLOW_NAME,
                {"spec": NAP, "run_id": rid, "fork": fork},
                id=rid,
                task_queue=host.task_queue,
            )
            return out, (await host.result(rid), await host.records(rid))

    results, (result, log) = asyncio.run(main())
    for (kind, message, failures), (_, want, part) in zip(results, cases, strict=True):
        assert (kind, failures) == (want, []), (part, kind, message[:300], failures)
        assert part in message, (part, message[:300])
    assert result["status"] == "completed"
    assert log[0].data["forkedFrom"] == {"runId": "src", "index": len(good)}
    assert replay(log, flow).status == "completed"
