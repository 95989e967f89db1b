"""What the HTTP API costs over calling the local host in the same process.

Usage: ``python benchmarks/bench_serve.py [--n 300]``

Side by side, in one run, on one database:

- *show*: the run view (``GET /api/runs/{id}``) from a real ``flowcore serve``
  on a loopback port through httpx (keep-alive), against the same reads made
  in-process on a ``LocalHost`` (``run``, ``show``, ``waits``);
- *events*: ``GET /api/runs/{id}/events`` (NDJSON) against ``host.records``;
- *live*: from a signal's ``POST`` answered to its ``event.reported`` record
  arriving on the run's Server-Sent Events stream (a stream wakes at each
  commit of the server's own host; it polls every ``poll_ms``, 50 ms, for
  what other processes commit).

Prints medians and the ratios HTTP / in-process. The machine is shared:
compare ratios measured in one run, not absolute times across runs.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from flowcore_local import LocalHost  # noqa: E402
from tests.serve.serving import FLOWS, start_serve  # noqa: E402

SIGNALLING = """\
flow: waiter
steps:
  - id: wait
    for_each:
      items: "${input.rounds}"
      as: n
      max_concurrency: 1
      steps:
        - {id: got, await_signal: {signal: ping}}
"""


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def in_process(db: Path, run_id: str, n: int) -> tuple[list[float], list[float]]:
    async def main() -> tuple[list[float], list[float]]:
        show: list[float] = []
        events: list[float] = []
        async with LocalHost(db) as host:
            for _ in range(n):
                t = time.perf_counter()
                await host.run(run_id)
                await host.show(run_id)
                await host.waits(run_id)
                show.append(time.perf_counter() - t)
                t = time.perf_counter()
                await host.records(run_id)
                events.append(time.perf_counter() - t)
        return show, events

    return asyncio.run(main())


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        flows = folder / "flows"
        flows.mkdir()
        (flows / "waiter.yaml").write_text(SIGNALLING)
        (flows / "approve.yaml").write_text((FLOWS / "approve.yaml").read_text())
        served = start_serve(folder, "--flows", str(flows))
        try:
            headers = {"Authorization": f"Bearer {served.token}"}
            c = httpx.Client(base_url=served.url, headers=headers, timeout=30)
            c.post("/api/runs", json={"flow": "approve", "input": {"change": "x"}, "runId": "b"})
            rounds = min(args.n, 60)
            waiter = {"flow": "waiter", "runId": "w", "input": {"rounds": list(range(rounds))}}
            c.post("/api/runs", json=waiter).raise_for_status()
            while not c.get("/api/runs/b").json()["waits"]["questions"]:
                time.sleep(0.05)
            http_show: list[float] = []
            http_events: list[float] = []
            for _ in range(args.n):
                t = time.perf_counter()
                c.get("/api/runs/b").raise_for_status()
                http_show.append(time.perf_counter() - t)
                t = time.perf_counter()
                c.get("/api/runs/b/events").raise_for_status()
                http_events.append(time.perf_counter() - t)
            local_show, local_events = in_process(folder / "serve.db", "b", args.n)

            # Live: POST a signal, time until its record arrives on the stream.
            live: list[float] = []
            arrived = threading.Event()
            stop = threading.Event()

            def follow() -> None:
                with httpx.Client(base_url=served.url, headers=headers, timeout=None) as s:
                    with s.stream("GET", "/api/runs/w/events/stream?start=0") as r:
                        for line in r.iter_lines():
                            if stop.is_set():
                                return
                            if line.startswith("event: event.reported"):
                                arrived.set()

            reader = threading.Thread(target=follow, daemon=True)
            reader.start()
            time.sleep(0.5)
            for _ in range(rounds):
                arrived.clear()
                t = time.perf_counter()
                c.post("/api/runs/w/signals", json={"name": "ping"}).raise_for_status()
                if not arrived.wait(10):
                    raise SystemExit("a signal never arrived on the stream")
                live.append(time.perf_counter() - t)
            stop.set()
            c.close()
        finally:
            served.stop()

    print(f"flowcore serve vs in-process LocalHost, n={args.n} (medians, one run)")
    for name, http, local in (
        ("show (run view)", http_show, local_show),
        ("events (NDJSON)", http_events, local_events),
    ):
        h, lo = median_ms(http), median_ms(local)
        print(f"  {name:18} HTTP {h:7.3f} ms   in-process {lo:7.3f} ms   ratio {h / lo:5.1f}x")
    print(
        f"  live (signal POST -> its record on the SSE stream, {len(live)} rounds):"
        f" median {median_ms(live):.1f} ms, max {max(live) * 1000:.1f} ms"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
