"""What tracing costs the local host: throughput with tracing off and on, side by side.

Each round starts R runs of a flow of S tool calls (async handlers that
return at once) on a fresh, non-durable database and works them to the end;
it is timed from the first start to the last settlement. Rounds alternate
between tracing off and tracing on (an SDK ``TracerProvider`` with a
``SimpleSpanProcessor`` into an in-memory exporter: every span is recorded,
nothing leaves the process), so both see the same machine load. Prints the
median runs/s and effects/s of each, and on/off as a ratio.

Run: ``python benchmarks/bench_tracing.py`` (``--runs``, ``--steps``,
``--rounds``). Needs the dev extra (opentelemetry-sdk).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from flowcore import CallTool
from flowcore_handlers import Registry
from flowcore_local import LocalHost


def flow(steps: int) -> str:
    lines = ["flow: bench", "tools: {t: {class: readonly}}", "steps:"]
    lines += [f"  - {{id: s{i}, call_tool: {{tool: t, input: {i}}}}}" for i in range(steps)]
    return "\n".join(lines) + "\n"


async def tool(call: CallTool) -> Any:
    return call.input


REGISTRY = Registry(tools={"t": tool})


async def one_round(db: Path, runs: int, spec: str, tracing: Any) -> float:
    """Seconds from the first start to the last settlement of ``runs`` runs."""
    async with LocalHost(
        db, registry=REGISTRY, durability="process-crash", tracing=tracing
    ) as host:
        began = time.perf_counter()
        ids = [await host.start(spec, None, f"r{i}") for i in range(runs)]
        stop = asyncio.Event()
        worker = asyncio.create_task(host.work(stop))
        for rid in ids:
            await host.wait(rid, timeout=600)
        elapsed = time.perf_counter() - began
        stop.set()
        await worker
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    spec = flow(args.steps)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    times: dict[str, list[float]] = {"off": [], "on": []}
    spans = 0
    with tempfile.TemporaryDirectory() as folder:
        for n in range(args.rounds):
            for label, tracing in (("off", False), ("on", provider)):
                db = Path(folder) / f"{label}-{n}.db"
                times[label].append(asyncio.run(one_round(db, args.runs, spec, tracing)))
            spans = len(exporter.get_finished_spans())
            exporter.clear()
    effects = args.runs * args.steps
    print(
        f"local host, {args.runs} runs x {args.steps} tool calls, {args.rounds} rounds"
        f" (median); {spans} spans per traced round"
    )
    print(f"{'tracing':<9}{'runs/s':>10}{'effects/s':>12}")
    rate = {}
    for label in ("off", "on"):
        median = statistics.median(times[label])
        rate[label] = args.runs / median
        print(f"{label:<9}{rate[label]:>10.0f}{effects / median:>12.0f}")
    print(f"on/off throughput ratio: {rate['on'] / rate['off']:.2f}")


if __name__ == "__main__":
    main()
