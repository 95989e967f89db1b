"""What the state's own records cost per event, without any interpretation.

``advance`` on ``bench_advance.sequential_flow(n)`` does, per event, what the
hand-written ``Toy`` does (keep the output, evaluate the next input, build one
effect) and what the run's records need besides: the event checked, the
pending map (one key out, one in), the frames map (the finished step's frame
out, the next one's in), the result store, a report row, the ledger, the
counters, the journal and a new ``State``. ``records_only`` below makes
exactly those writes for an event of that flow, knowing the flow's shape
(no dispatch, no tables, no checks beyond the event's): the floor of the
records as they are. Every state it makes is checked to encode to the bytes
``advance`` gives, so it does the whole of the work and nothing else.

Printed side by side in one run: the toy, the records' floor and ``advance``
(medians of alternating rounds, us per event), and the ratios
floor/toy, advance/toy and advance/floor: how much of ``advance``'s ratio to
the toy the records themselves account for, and how much the interpretation
adds. Run::

    python benchmarks/bench_record_floor.py            # N=10,000, 7 rounds
    python benchmarks/bench_record_floor.py --n 2000 --rounds 3
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_advance  # type: ignore[import-not-found]

import flowcore
from flowcore.decision.report_rows import add_report_row
from flowcore.decision.state import (
    Decision,
    Journal,
    Pending,
    PendingKind,
    ReportRow,
    State,
    StepFrame,
)
from flowcore.decision.txn_records import Resolver
from flowcore.decision.wire import CallTool, EffectSucceeded, check_event

_replace = msgspec.structs.replace


class _Reading:
    """What a template reads (``Resolver``'s ``t``), over a state."""

    __slots__ = ("envs", "flow", "results", "run", "run_id", "tree")

    def __init__(self, s: State, results: Any) -> None:
        self.run = s.run
        self.run_id = s.run.run_id
        self.flow = s.flow
        self.tree = s.tree
        self.envs = s.tree.envs
        self.results = results

    def lookup(self, env: str, step_id: str) -> Any:
        return self.results.get(step_id)


def records_only(s: State, ev: EffectSucceeded, steps: tuple[Any, ...]) -> Decision:
    """The next state and effect of a sequential flow's step result, written directly."""
    check_event(ev)
    key = ev.idempotency_key
    w = s.waiting
    entry = w.pending[key]
    tree = s.tree
    frame = tree.frames[entry.frame]
    assert isinstance(frame, StepFrame)
    step = steps[int(frame.step[1:])]
    nxt = steps[step.index + 1]
    pending = w.pending.delete(key)
    report = add_report_row(
        s.report, ReportRow(key, entry.seq, entry.effect, entry.target, "succeeded")
    )
    frames = tree.frames.delete(frame.id)
    results = s.results.put(step.id, {"status": "succeeded", "output": ev.output})
    value = nxt.body.input.evaluate(Resolver(_Reading(s, results), "", 1, None))  # type: ignore[arg-type]
    nkey = f"{s.run.run_id}/{nxt.id}#1"
    effect = CallTool(tool=nxt.body.tool, input=value, idempotency_key=nkey)
    frames = frames.set(
        nxt.id, StepFrame(id=nxt.id, parent="", env="", prefix="", step=nxt.id, key=nkey)
    )
    led = s.ledger
    ledger = _replace(led, used_steps=led.used_steps + 1, used_tool_calls=led.used_tool_calls + 1)
    seq = w.seq + 1
    pending = pending.set(
        nkey, Pending(PendingKind.WORK, nxt.id, effect, "call-tool", "", seq, nxt.body.tool)
    )
    state = State(
        flow=s.flow,
        run=s.run,
        now_ms=max(s.now_ms, ev.at_ms),
        ledger=ledger,
        tree=_replace(tree, frames=frames),
        waiting=_replace(w, pending=pending, seq=seq),
        results=results,
        report=report,
        schedules=s.schedules,
        settled=None,
        journal=Journal((step.id,), 1),
        report_complete=s.report_complete,
        scheduled_added=s.scheduled_added,
        metadata=s.metadata,
    )
    return Decision(state, (effect,))


def recorded(n: int) -> tuple[list[tuple[State, EffectSucceeded]], list[tuple[str, Any]]]:
    """The (state, event) pairs of a sequential run but its last, and the toy's events."""
    flow = bench_advance.sequential_flow(n)
    d = flowcore.start(flow, {}, run_id="r")
    pairs: list[tuple[State, EffectSucceeded]] = []
    state = d.state
    effects = d.effects
    for i in range(n - 1):
        call = effects[0]
        assert isinstance(call, CallTool)
        ev = EffectSucceeded(idempotency_key=call.idempotency_key, output={"v": i}, at_ms=i)
        pairs.append((state, ev))
        d = flowcore.advance(state, ev)
        state, effects = d.state, d.effects
    return pairs, bench_advance.toy_events(n)[: n - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    n = args.n
    pairs, toy_events = recorded(n)
    flow = pairs[0][0].flow
    steps = flow.steps
    for s, ev in pairs:  # the same work: the same bytes as advance
        mine, theirs = records_only(s, ev, steps), flowcore.advance(s, ev)
        assert flowcore.encode_state(mine.state) == flowcore.encode_state(theirs.state)
        assert mine.effects == theirs.effects
    toy = bench_advance.Toy(n)
    toy_state, _ = toy.start()

    def run_toy() -> None:
        state = toy_state
        for key, output in toy_events:
            state, _ = toy.advance(state, key, output)

    def run_floor() -> None:
        for s, ev in pairs:
            records_only(s, ev, steps)

    def run_advance() -> None:
        advance = flowcore.advance
        for s, ev in pairs:
            advance(s, ev)

    figures: dict[str, list[float]] = {"toy": [], "records floor": [], "advance": []}
    work = {"toy": run_toy, "records floor": run_floor, "advance": run_advance}
    for r in range(args.rounds):
        order = list(work) if r % 2 == 0 else list(reversed(work))
        for name in order:
            gc.collect()
            gc.disable()
            t0 = time.perf_counter()
            work[name]()
            figures[name].append((time.perf_counter() - t0) / len(pairs) * 1e6)
            gc.enable()
    med = {name: statistics.median(values) for name, values in figures.items()}
    print(f"sequential N={n:,}: medians of {args.rounds} alternating rounds, us/event")
    for name, value in med.items():
        print(f"{name:<16} {value:7.2f}")
    print(f"records floor/toy {med['records floor'] / med['toy']:6.2f}x")
    print(f"advance/toy       {med['advance'] / med['toy']:6.2f}x")
    print(f"advance/floor     {med['advance'] / med['records floor']:6.2f}x")


if __name__ == "__main__":
    main()
