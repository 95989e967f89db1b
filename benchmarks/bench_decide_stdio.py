"""What ``advance`` costs over ``flowcore decide --stdio`` against calling it in process.

One flow of N call_tool steps in sequence (each reading the previous step's
output through an expression), driven to the end twice, side by side on the
same events: in process (``flowcore.advance`` on the state) and over the
wire (one ``advance`` request line written to a ``flowcore decide --stdio``
process and its reply line read back: JSON both ways, the state string
decoded and encoded again). Prints the median microseconds per event of
each, their ratio, and the size of the last state string (it holds the
run's snapshot, which grows with the history, so longer runs cost more per
request over the wire).

Run: ``python benchmarks/bench_decide_stdio.py`` (``--steps N``, default 300).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import flowcore

FLOWCORE = Path(sys.executable).parent / "flowcore"


def spec(n: int) -> dict[str, Any]:
    steps: list[dict[str, Any]] = [{"id": "s0", "call_tool": {"tool": "t", "input": {"v": 0}}}]
    for i in range(1, n):
        previous = f"${{steps.s{i - 1}.output.v}}"
        steps.append({"id": f"s{i}", "call_tool": {"tool": "t", "input": {"prev": previous}}})
    return {"flow": "bench", "tools": {"t": {"class": "readonly"}}, "steps": steps}


def events(n: int) -> list[dict[str, Any]]:
    return [
        {"kind": "effect-succeeded", "idempotencyKey": f"r-1/s{i}#1", "output": {"v": i}, "atMs": i}
        for i in range(n)
    ]


def in_process(n: int) -> list[float]:
    flow = flowcore.parse_flow(spec(n))
    state = flowcore.start(flow, None, run_id="r-1", now_ms=0).state
    times = []
    for wire in events(n):
        event = flowcore.event_from_wire(wire)
        began = time.perf_counter_ns()
        state = flowcore.advance(state, event).state
        times.append((time.perf_counter_ns() - began) / 1000)
    assert state.settled is not None and state.settled.status == "completed"
    return times


def over_stdio(n: int) -> tuple[list[float], int]:
    proc = subprocess.Popen(
        [str(FLOWCORE), "decide", "--stdio"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert proc.stdin is not None and proc.stdout is not None

    def ask(request: dict[str, Any]) -> dict[str, Any]:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(request).encode() + b"\n")
        proc.stdin.flush()
        reply: dict[str, Any] = json.loads(proc.stdout.readline())
        assert reply["ok"] is True, reply
        return reply

    start = {"id": 0, "op": "start", "spec": spec(n), "runId": "r-1", "nowMs": 0}
    state = ask(start)["state"]
    times = []
    reply: dict[str, Any] = {}
    for i, event in enumerate(events(n), 1):
        line = {"id": i, "op": "advance", "state": state, "event": event}
        began = time.perf_counter_ns()
        reply = ask(line)
        times.append((time.perf_counter_ns() - began) / 1000)
        state = reply["state"]
    assert reply["status"] == "completed"
    proc.stdin.close()
    assert proc.wait() == 0
    return times, len(state)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300, help="call_tool steps (events)")
    args = parser.parse_args()
    local = statistics.median(in_process(args.steps))
    wire_times, state_chars = over_stdio(args.steps)
    wire = statistics.median(wire_times)
    print(f"advance, {args.steps} events in sequence (median per event)")
    print(f"  in process:         {local:10.1f} us")
    print(f"  decide --stdio:     {wire:10.1f} us  (request line written, reply line read)")
    print(f"  ratio stdio/local:  {wire / local:10.1f}x")
    print(f"  last state string:  {state_chars:10,} characters")
    return 0


if __name__ == "__main__":
    sys.exit(main())
