"""What a property test costs: simulated runs per second of a 50-step flow.

The flow has 50 steps: ten rounds of a retried fetch (its first call fails
retryably: a backoff timer), a parallel step with two branches (a tool call
each, one with a timeout timer), and a sleep. Tools answer at once in
virtual time, so the figure is the cost of the interpreter plus the
simulator, per run:

    python benchmarks/bench_simulator.py            # per event and per run, plain and checked
    python benchmarks/bench_simulator.py --runs 500
    python benchmarks/bench_simulator.py --quick    # fewer runs (for compare_commits.py)

``plain`` is ``Simulator.run``; ``paranoid`` adds a state snapshot around
every ``advance`` (what ``check_rejections`` needs); ``checked`` is paranoid
plus ``check_trajectory`` (every invariant, determinism included): what one
example of a simulator property test costs, before hypothesis generates its
inputs.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import flowcore
from flowcore.testing import Fault, Simulator, check_trajectory

ROUNDS = 10


def spec() -> dict[str, Any]:
    steps: list[dict[str, Any]] = []
    for i in range(ROUNDS):
        steps += [
            {
                "id": f"fetch{i}",
                "call_tool": {"tool": "fetch", "input": {"round": i}},
                "retry": {"max_attempts": 3, "initial_interval_ms": 500},
            },
            {
                "id": f"fan{i}",
                "parallel": {
                    "branches": {
                        "left": [
                            {
                                "id": f"left{i}",
                                "call_tool": {
                                    "tool": "store",
                                    "input": f"${{steps.fetch{i}.output}}",
                                },
                                "timeout_ms": 30_000,
                            }
                        ],
                        "right": [{"id": f"right{i}", "call_tool": {"tool": "store", "input": i}}],
                    }
                },
            },
            {"id": f"rest{i}", "sleep": {"for_ms": 60_000}},
        ]
    count = len(steps) + 2 * ROUNDS  # the branches' steps are steps too
    assert count == 50, count
    return {
        "flow": "bench",
        "tools": {"fetch": {"class": "readonly"}, "store": {"class": "idempotent"}},
        "budget": {"steps": 200, "wall_clock_ms": 86_400_000},
        "steps": steps,
        "output": "${steps.fetch9.output}",
    }


def world(paranoid: bool) -> Simulator:
    return Simulator(
        tools={"fetch": lambda call: {"round": call.input["round"]}, "store": {"ok": True}},
        # The first call of every fetch step fails retryably: a backoff each round.
        faults=[Fault("fail-retryable", "fetch", calls=tuple(range(1, 2 * ROUNDS, 2)))],
        paranoid=paranoid,
    )


def measure(label: str, runs: int, once: Any, events: int) -> float:
    once()  # warm up
    samples = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(max(1, runs // 5)):
            once()
        samples.append((time.perf_counter() - start) / max(1, runs // 5))
    per_run = statistics.median(samples)
    print(
        f"{label:<9} {per_run / events * 1e6:7.2f} us/event {events / per_run:9,.0f} events/s "
        f"{1 / per_run:6.0f} runs/s {per_run * 1000:7.2f} ms/run"
    )
    return per_run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=250)
    parser.add_argument("--quick", action="store_true", help="100 runs (20 checked)")
    args = parser.parse_args()
    if args.quick:
        args.runs = 100
    flow = flowcore.parse_flow(spec())
    plain, paranoid = world(False), world(True)
    t = plain.run(flow)
    assert t.status == "completed", t.describe()
    print(
        f"50-step flow: {len(t.events())} events, {len(t.effects())} effects, "
        f"{len(t.effects('sleep'))} timers, {t.usage.steps} work steps, "
        f"{t.end_ms / 3_600_000:.1f} h of virtual time per run"
    )
    events = len(t.events())
    measure("plain", args.runs, lambda: plain.run(flow), events)
    measure("paranoid", args.runs, lambda: paranoid.run(flow), events)
    measure("checked", args.runs // 5, lambda: check_trajectory(paranoid.run(flow)), events)


if __name__ == "__main__":
    main()
