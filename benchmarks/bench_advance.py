"""How much one ``advance`` costs, and whether it grows with the run's history.

Sequential: a generated flow of N call_tool steps, each reading the previous
step's output through an expression, driven to completion for N = 1k, 10k,
100k. Prints the median microseconds per event at each size and the growth
ratio 100k/1k (target: <= 10 us, growth <= 1.2x).

Branches: a for_each with max_concurrency equal to its width W (1, 100,
1000), each iteration a sequence of call_tool steps, answered round-robin so
that W branches stay active; prints the median per event and the ratio of
1000 to 1 (target <= 3x).

Toy: a hand-written interpreter of the sequential flow alone (``Toy``: it
keeps the results in a persistent map and builds one effect dict per step),
driven over the same N; prints its cost per event and ``advance``'s ratio to
it (target <= 5x).

Repeat: a repeat that fires N times (1k and 100k), each fire one call_tool;
prints the median per event and the growth 100k/1k (target <= 1.2x).

Run: ``python benchmarks/bench_advance.py`` (``--quick`` for smaller sizes,
``--only sequential|branches|repeat`` for one part).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from collections.abc import Callable
from typing import Any

import flowcore
from flowcore import CallTool, EffectSucceeded, Flow, Sleep, TimerFired


def sequential_flow(n: int) -> Flow:
    steps: list[dict[str, Any]] = [{"id": "s0", "call_tool": {"tool": "t", "input": {"v": 0}}}]
    for i in range(1, n):
        steps.append(
            {
                "id": f"s{i}",
                "call_tool": {"tool": "t", "input": {"prev": f"${{steps.s{i - 1}.output.v}}"}},
            }
        )
    spec = {
        "flow": f"seq-{n}",
        "tools": {"t": {"class": "idempotent"}},
        "budget": {"steps": n + 10},
        "steps": steps,
    }
    return flowcore.parse_flow(spec, source_name=f"seq-{n}")


def drive(flow: Flow, answer: Callable[[CallTool, int], Any]) -> list[int]:
    """Run the flow to the end; return the nanoseconds each advance took."""
    decision = flowcore.start(flow, {}, run_id="r", now_ms=0)
    timings: list[int] = []
    clock = 0
    queue = [e for e in decision.effects if isinstance(e, CallTool)]
    state = decision.state
    perf = time.perf_counter_ns
    while queue:
        effect = queue.pop(0)
        clock += 1
        event = EffectSucceeded(
            idempotency_key=effect.idempotency_key, output=answer(effect, clock), at_ms=clock
        )
        t0 = perf()
        decision = flowcore.advance(state, event)
        timings.append(perf() - t0)
        state = decision.state
        queue.extend(e for e in decision.effects if isinstance(e, CallTool))
    assert state.settled is not None and state.settled.status == "completed", state.settled
    return timings


class Toy:
    """The least an interpreter of ``sequential_flow(n)`` must do per event.

    Hand-written for that one flow: the state is the position and an
    ``immutables.Map`` of the results; ``advance`` checks the event's key,
    keeps its output, evaluates the next step's input from the results and
    builds one effect dict. What ``advance`` does beyond this is the price of
    being general (any flow, every check, a report), which is the figure
    ``advance``'s ratio to it shows.
    """

    def __init__(self, n: int, run_id: str = "r") -> None:
        self.ids = [f"s{i}" for i in range(n)]
        self.keys = [f"{run_id}/{step}#1" for step in self.ids]

    def start(self) -> tuple[tuple[int, Any], list[dict[str, Any]]]:
        import immutables

        effect = {"kind": "call_tool", "tool": "t", "input": {"v": 0}, "key": self.keys[0]}
        return (0, immutables.Map()), [effect]

    def advance(
        self, state: tuple[int, Any], key: str, output: Any
    ) -> tuple[tuple[int, Any], list[dict[str, Any]]]:
        pos, results = state
        if key != self.keys[pos]:
            raise ValueError(f"event for {key!r}, expected {self.keys[pos]!r}")
        results = results.set(self.ids[pos], {"output": output})
        pos += 1
        if pos == len(self.ids):
            return (pos, results), [{"kind": "settled", "status": "completed"}]
        prev = results[self.ids[pos - 1]]["output"]["v"]
        effect = {"kind": "call_tool", "tool": "t", "input": {"prev": prev}, "key": self.keys[pos]}
        return (pos, results), [effect]


def toy_events(n: int) -> list[tuple[str, Any]]:
    """The events ``Toy(n)`` is driven with: the same answers as ``drive``'s."""
    return [(f"r/s{i}#1", {"v": i + 1}) for i in range(n)]


def drive_toy(toy: Toy, events: list[tuple[str, Any]]) -> None:
    state, _ = toy.start()
    advance = toy.advance
    for key, output in events:
        state, _ = advance(state, key, output)
    assert state[0] == len(toy.ids)


def bench_toy(sizes: list[int], advance_us: dict[int, float]) -> None:
    for n in sizes:
        toy, events = Toy(n), toy_events(n)
        samples = []
        for _ in range(5):
            gc.collect()
            t0 = time.perf_counter_ns()
            drive_toy(toy, events)
            samples.append((time.perf_counter_ns() - t0) / n / 1000)
        us = statistics.median(samples)
        ratio = f"  advance/toy {advance_us[n] / us:5.1f}x" if n in advance_us else ""
        print(f"toy         N={n:>7,}  mean {us:6.2f} us/event{ratio}")


def median_us(timings: list[int]) -> float:
    return statistics.median(timings) / 1000


def bench_sequential(sizes: list[int]) -> dict[int, float]:
    results: dict[int, float] = {}
    for n in sizes:
        flow = sequential_flow(n)
        gc.collect()
        timings = drive(flow, lambda e, i: {"v": i})
        results[n] = median_us(timings)
        mean = statistics.fmean(timings) / 1000
        print(
            f"sequential  N={n:>7,}  events={len(timings):>7,}  "
            f"median {results[n]:6.2f} us/event  (mean {mean:6.2f})"
        )
    first, last = sizes[0], sizes[-1]
    print(f"sequential  growth {last:,}/{first:,}: {results[last] / results[first]:.2f}x")
    return results


def wide_flow(width: int, length: int) -> Flow:
    body = [{"id": "w0", "call_tool": {"tool": "t", "input": {"item": "${it}"}}}]
    for i in range(1, length):
        body.append(
            {"id": f"w{i}", "call_tool": {"tool": "t", "input": f"${{steps.w{i - 1}.output}}"}}
        )
    spec = {
        "flow": f"wide-{width}",
        "tools": {"t": {"class": "idempotent"}},
        "budget": {"steps": width * length + 10},
        "steps": [
            {
                "id": "each",
                "for_each": {
                    "items": "${input.items}",
                    "as": "it",
                    "max_concurrency": width,
                    "steps": body,
                },
            }
        ],
    }
    return flowcore.parse_flow(spec, source_name=f"wide-{width}")


def bench_branches(widths: list[int], events: int) -> dict[int, float]:
    results: dict[int, float] = {}
    for width in widths:
        length = max(2, events // width)
        flow = wide_flow(width, length)
        decision = flowcore.start(flow, {"items": list(range(width))}, run_id="r")
        state = decision.state
        queue = [e for e in decision.effects if isinstance(e, CallTool)]
        assert len(queue) == width
        timings: list[int] = []
        clock = 0
        perf = time.perf_counter_ns
        gc.collect()
        while queue:
            effect = queue.pop(0)
            clock += 1
            event = EffectSucceeded(
                idempotency_key=effect.idempotency_key, output=clock, at_ms=clock
            )
            active = len(queue) + 1
            t0 = perf()
            decision = flowcore.advance(state, event)
            elapsed = perf() - t0
            if active == width:
                timings.append(elapsed)  # only events with every branch active
            state = decision.state
            queue.extend(e for e in decision.effects if isinstance(e, CallTool))
        assert state.settled is not None and state.settled.status == "completed"
        results[width] = median_us(timings)
        print(
            f"branches    W={width:>5,}  events={len(timings):>7,}  "
            f"median {results[width]:6.2f} us/event"
        )
    ratio = results[widths[-1]] / results[widths[0]]
    print(f"branches    ratio {widths[-1]:,}/{widths[0]:,}: {ratio:.2f}x")
    return results


def repeat_flow(fires: int) -> Flow:
    spec = {
        "flow": f"repeat-{fires}",
        "tools": {"t": {"class": "idempotent"}},
        "budget": {"steps": fires + 10},
        "steps": [
            {
                "id": "rec",
                "repeat": {
                    "every_ms": 1000,
                    "max_fires": fires,
                    "steps": [{"id": "ping", "call_tool": {"tool": "t", "input": "${fire_count}"}}],
                },
            }
        ],
    }
    return flowcore.parse_flow(spec, source_name=f"repeat-{fires}")


def bench_repeat(sizes: list[int]) -> dict[int, float]:
    results: dict[int, float] = {}
    for fires in sizes:
        flow = repeat_flow(fires)
        decision = flowcore.start(flow, {}, run_id="r")
        state = decision.state
        pending = list(decision.effects)
        timings: list[int] = []
        perf = time.perf_counter_ns
        gc.collect()
        while pending:
            effect = pending.pop(0)
            event: TimerFired | EffectSucceeded
            if isinstance(effect, Sleep):
                event = TimerFired(idempotency_key=effect.idempotency_key, at_ms=effect.until_ms)
            elif isinstance(effect, CallTool):
                event = EffectSucceeded(
                    idempotency_key=effect.idempotency_key, output="pong", at_ms=state.now_ms
                )
            else:
                continue
            t0 = perf()
            decision = flowcore.advance(state, event)
            timings.append(perf() - t0)
            state = decision.state
            pending.extend(decision.effects)
        assert state.settled is not None and state.settled.status == "completed"
        results[fires] = median_us(timings)
        mean = statistics.fmean(timings) / 1000
        print(
            f"repeat      fires={fires:>7,}  events={len(timings):>7,}  "
            f"median {results[fires]:6.2f} us/event  (mean {mean:6.2f})"
        )
    first, last = sizes[0], sizes[-1]
    print(f"repeat      growth {last:,}/{first:,}: {results[last] / results[first]:.2f}x")
    return results


def bench_model() -> None:
    """attrs vs msgspec for the state's records: build one, derive a changed copy."""
    import timeit

    import attrs
    import msgspec

    @attrs.frozen
    class AttrsFrame:
        id: str
        parent: str
        env: str
        prefix: str
        step: str
        attempt: int = 1
        key: str | None = None

    class StructFrame(msgspec.Struct, frozen=True):
        id: str
        parent: str
        env: str
        prefix: str
        step: str
        attempt: int = 1
        key: str | None = None

    n = 200_000
    a = AttrsFrame("a", "", "", "", "a")
    m = StructFrame("a", "", "", "", "a")
    timings: dict[str, tuple[Callable[[], object], Callable[[], object]]] = {
        "attrs  ": (
            lambda: AttrsFrame("a", "", "", "", "a"),
            lambda: attrs.evolve(a, key="k"),
        ),
        "msgspec": (
            lambda: StructFrame("a", "", "", "", "a"),
            lambda: msgspec.structs.replace(m, key="k"),
        ),
    }
    for label, (build_fn, change_fn) in timings.items():
        build = min(timeit.repeat(build_fn, number=n, repeat=5)) / n * 1e6
        change = min(timeit.repeat(change_fn, number=n, repeat=5)) / n * 1e6
        print(f"model {label}  build {build:5.2f} us  replace {change:5.2f} us")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    parser.add_argument("--model", action="store_true", help="attrs vs msgspec records only")
    parser.add_argument("--only", choices=["sequential", "branches", "repeat"])
    args = parser.parse_args()
    if args.model:
        bench_model()
        return
    if args.only in (None, "sequential"):
        sizes = [1_000, 10_000] if args.quick else [1_000, 10_000, 100_000]
        bench_toy(sizes, bench_sequential(sizes))
    if args.only in (None, "branches"):
        bench_branches([1, 100, 1000], 5_000 if args.quick else 20_000)
    if args.only in (None, "repeat"):
        bench_repeat([1_000, 10_000] if args.quick else [1_000, 100_000])


if __name__ == "__main__":
    main()
