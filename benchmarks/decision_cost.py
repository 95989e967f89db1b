"""Every figure of a faster decision, for a base commit and the working tree, in one sitting.

Like ``ab_core.py``, the base commit's ``flowcore/`` is extracted as the
package ``flowcore_base`` and imported next to the working tree's
``flowcore`` in one process; every figure is measured on both, one right
after the other (the order swapped every round) for ``--rounds`` rounds, and
printed as the median of each with the ratio new/old. The figures:

* ``advance`` per event (the mean over one whole run, from pre-recorded
  events) on the sequential flow of ``bench_advance.py`` at each size, and
  its ratio to the hand-written ``Toy`` interpreter measured beside it (the
  toy is the same code for both trees; it is timed next to each);
* ``advance`` per event on its loop flow (a ``repeat`` firing N times) and
  its parallel flow (a ``for_each`` W wide, answered round-robin);
* ``replay`` per step of ``bench_replay.py``'s two flows (MessagePack and
  NDJSON), its floor (decode every record, one trajectory row per call)
  and the ratio replay/floor;
* ``flowcore check``'s exploration (deduplication and reduction on, every
  check on) of ``bench_explore.py``'s flows, distinct states per second;
* the simulator of ``bench_simulator.py``, events per second (plain, and
  checked: a snapshot around every ``advance`` and ``check_trajectory``);
* growth of the per-event cost from the smallest size to each larger one,
  for ``advance`` and ``replay``.

Ratios rows (``advance/toy``, ``replay/floor``, growth) are computed from
the medians of the same run. Run::

    python benchmarks/decision_cost.py --base fce545d            # 5 rounds: 20-40 minutes
    python benchmarks/decision_cost.py --base HEAD --quick       # a smoke run, seconds

The work uses only APIs both trees have (and, for the floor, the modules
``log.records`` and ``log.replay_state`` that replay itself decodes with).
"""

from __future__ import annotations

import argparse
import gc
import importlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_advance  # type: ignore[import-not-found]
import bench_explore  # type: ignore[import-not-found]
import bench_replay  # type: ignore[import-not-found]
import bench_simulator  # type: ignore[import-not-found]
from compare_commits import extract  # type: ignore[import-not-found]

EXAMPLES = Path(__file__).resolve().parent.parent / "specs" / "examples"


@dataclass(frozen=True)
class Sizes:
    sequential: list[int]
    loop: int
    width: int
    wide_events: int
    replay: list[int]
    replay_loop: list[int]
    explore: list[tuple[int, int]]
    explore_examples: bool
    sim_runs: int


FULL = Sizes(
    sequential=[1_000, 10_000, 100_000],
    loop=10_000,
    width=100,
    wide_events=20_000,
    replay=[1_000, 10_000, 100_000],
    replay_loop=[1_000, 10_000, 100_000],
    explore=[(3, 1), (5, 1), (3, 2), (5, 2)],
    explore_examples=True,
    sim_runs=50,
)
QUICK = Sizes(
    sequential=[20, 60],
    loop=20,
    width=4,
    wide_events=40,
    replay=[20, 60],
    replay_loop=[20, 60],
    explore=[(2, 1)],
    explore_examples=False,
    sim_runs=1,
)

# A measure: run the work once on a core, return the figure.
Measure = Callable[[], float]


def timed(fn: Callable[[], object]) -> float:
    gc.collect()
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def record_events(pkg: ModuleType, flow: Any, inp: Any) -> list[Any]:
    """Drive ``flow`` to its end answering every call and timer at once (FIFO)."""
    decision = pkg.start(flow, inp, run_id="r", now_ms=0)
    state = decision.state
    pending = list(decision.effects)
    events: list[Any] = []
    clock = 0
    while pending:
        effect = pending.pop(0)
        clock = max(clock, state.now_ms) + 1
        if isinstance(effect, pkg.CallTool):
            event = pkg.EffectSucceeded(
                idempotency_key=effect.idempotency_key, output={"v": clock}, at_ms=clock
            )
        elif isinstance(effect, pkg.Sleep):
            clock = max(clock, effect.until_ms)
            event = pkg.TimerFired(idempotency_key=effect.idempotency_key, at_ms=clock)
        else:
            continue
        decision = pkg.advance(state, event)
        events.append(event)
        state = decision.state
        pending.extend(decision.effects)
    assert state.settled is not None and state.settled.status == "completed", state.settled
    return events


def advance_measure(pkg: ModuleType, spec: dict[str, Any], inp: Any) -> Measure:
    flow = pkg.parse_flow(spec, source_name=spec["flow"])
    events = record_events(pkg, flow, inp)

    def drive() -> None:
        state = pkg.start(flow, inp, run_id="r", now_ms=0).state
        advance = pkg.advance
        for event in events:
            state = advance(state, event).state

    return lambda: timed(drive) / len(events) * 1e6


def toy_measure(n: int) -> Measure:
    toy, events = bench_advance.Toy(n), bench_advance.toy_events(n)
    return lambda: timed(lambda: bench_advance.drive_toy(toy, events)) / n * 1e6


def spec_of(make: Callable[[int], Any], n: int) -> dict[str, Any]:
    """The spec dict a bench module's flow builder hands to ``flowcore.parse_flow``."""
    seen: list[dict[str, Any]] = []
    stub = SimpleNamespace(parse_flow=lambda spec, **_: seen.append(spec))
    modules = (bench_advance, bench_replay)
    real = [m.flowcore for m in modules]
    for m in modules:
        m.flowcore = stub
    try:
        make(n)
    finally:
        for m, core in zip(modules, real, strict=True):
            m.flowcore = core
    return seen[0]


def replay_measures(
    pkg: ModuleType, spec: dict[str, Any], inp: Any, fmt: str
) -> dict[str, Measure]:
    flow = pkg.parse_flow(spec, source_name=spec["flow"])
    recorder = pkg.Recorder("r-bench")
    decision = pkg.start(flow, inp, run_id="r-bench", now_ms=0)
    records = recorder.started(flow, inp, 0, decision)
    state = decision.state
    queue = [e for e in decision.effects if isinstance(e, pkg.CallTool)]
    clock = steps = 0
    while queue:
        effect = queue.pop(0)
        clock += 1
        event = pkg.EffectSucceeded(
            idempotency_key=effect.idempotency_key, output={"v": clock}, at_ms=clock
        )
        decision = pkg.advance(state, event)
        records.extend(recorder.applied(event, decision))
        state = decision.state
        steps += 1
        queue.extend(e for e in decision.effects if isinstance(e, pkg.CallTool))
    data = pkg.encode_records(records, fmt)
    report = pkg.replay(data, flow)
    assert report.ok and report.status == "completed", report
    del report, records
    log = importlib.import_module(f"{pkg.__name__}.log.records")
    codec = importlib.import_module(f"{pkg.__name__}.log.replay_state")._CODECS[fmt]

    def floor() -> None:  # bench_replay.floor, on this core's modules
        rows: list[list[Any]] = []
        where: dict[str, int] = {}
        for chunk in log.RawReader(data, fmt).chunks():
            for rec in chunk:
                if rec.type == log.EFFECT_EMITTED:
                    e = codec.effect(rec.data)
                    if isinstance(e, pkg.CallTool):
                        where[e.idempotency_key] = len(rows)
                        rows.append([e.idempotency_key, e.input, None])
                elif rec.type == log.EVENT_REPORTED:
                    ev = codec.event(rec.data)
                    if isinstance(ev, pkg.EffectSucceeded):
                        rows[where[ev.idempotency_key]][2] = ev.output

    return {
        "replay": lambda: timed(lambda: pkg.replay(data, flow)) / steps * 1e6,
        "floor": lambda: timed(floor) / steps * 1e6,
    }


def explore_measure(pkg: ModuleType, flows: list[tuple[Any, Any, Any]]) -> Measure:
    """Distinct states per second over ``flows`` (each explored completely)."""

    def run() -> float:
        states = 0
        seconds = 0.0
        for flow, inp, world in flows:
            gc.collect()
            t0 = time.perf_counter()
            x = pkg.testing.explore(flow, inp, world, max_states=1_000_000)
            seconds += time.perf_counter() - t0
            assert x.complete, x.stop
            states += x.states
        return states / seconds

    return run


def explore_flows(pkg: ModuleType, sizes: Sizes) -> dict[str, list[tuple[Any, Any, Any]]]:
    t = pkg.testing
    branch_world = t.World(tools={"t": [t.Ok(1), t.Fail("x")]})
    groups: dict[str, list[tuple[Any, Any, Any]]] = {}
    if sizes.explore_examples:
        example_world = t.World(
            default=[t.Ok({"title": "t", "services": ["a", "b"], "owner": "o"}), t.Fail("boom")],
            signals=[t.Signal("fix-deployed", {"sha": "abc"})],
            cancel_at_ms=0,
        )
        groups["examples"] = [
            (pkg.parse_flow(p.read_bytes()), bench_explore.INPUTS.get(p.stem, {}), example_world)
            for p in sorted(EXAMPLES.glob("*.yaml"))
        ]
    for branches, calls in sizes.explore:
        flow = pkg.parse_flow(bench_explore.parallel(branches, calls))
        groups[f"parallel {branches}x{calls}"] = [(flow, None, branch_world)]
    return groups


def simulator_measures(pkg: ModuleType, runs: int) -> dict[str, Measure]:
    t = pkg.testing
    flow = pkg.parse_flow(bench_simulator.spec())
    rounds = bench_simulator.ROUNDS

    def world(paranoid: bool) -> Any:
        return t.Simulator(
            tools={"fetch": lambda call: {"round": call.input["round"]}, "store": {"ok": True}},
            faults=[t.Fault("fail-retryable", "fetch", calls=tuple(range(1, 2 * rounds, 2)))],
            paranoid=paranoid,
        )

    plain, paranoid = world(False), world(True)
    trajectory = plain.run(flow)
    assert trajectory.status == "completed"
    events = len(trajectory.events())

    def rate(once: Callable[[], object]) -> float:
        def many() -> None:
            for _ in range(runs):
                once()

        return events * runs / timed(many)

    return {
        "plain": lambda: rate(lambda: plain.run(flow)),
        "checked": lambda: rate(lambda: t.check_trajectory(paranoid.run(flow))),
    }


@dataclass
class Figure:
    label: str
    unit: str
    measures: dict[str, Measure]  # per tree: "old", "new"
    values: dict[str, list[float]]


def figures_for(cores: dict[str, ModuleType], sizes: Sizes) -> list[Figure]:
    """Every figure, set up (flows parsed, events and logs recorded) on both cores."""
    out: list[Figure] = []

    def add(label: str, unit: str, make: Callable[[ModuleType], Measure]) -> None:
        measures = {name: make(pkg) for name, pkg in cores.items()}
        out.append(Figure(label, unit, measures, {name: [] for name in cores}))

    for n in sizes.sequential:
        seq = spec_of(bench_advance.sequential_flow, n)
        add(f"advance sequential N={n}", "us/event", partial(advance_measure, spec=seq, inp={}))
        add(f"toy sequential N={n}", "us/event", lambda _, n=n: toy_measure(n))  # type: ignore[misc]
    loop = spec_of(bench_advance.repeat_flow, sizes.loop)
    add(f"advance loop (repeat) N={sizes.loop}", "us/event", lambda p: advance_measure(p, loop, {}))
    length = max(2, sizes.wide_events // sizes.width)
    wide = spec_of(lambda w: bench_advance.wide_flow(w, length), sizes.width)
    items = {"items": list(range(sizes.width))}
    add(
        f"advance parallel (for_each W={sizes.width}) N={sizes.width * length}",
        "us/event",
        lambda p: advance_measure(p, wide, items),
    )
    for kind, ns in (("sequential", sizes.replay), ("loop", sizes.replay_loop)):
        for n in ns:
            spec = spec_of(
                bench_replay.sequential_flow if kind == "sequential" else bench_replay.loop_flow, n
            )
            inp = {} if kind == "sequential" else {"items": list(range(n))}
            for fmt in ("msgpack", "json"):
                both = {name: replay_measures(pkg, spec, inp, fmt) for name, pkg in cores.items()}
                for what in ("replay", "floor"):
                    out.append(
                        Figure(
                            f"{what} {kind} {fmt} N={n}",
                            "us/step",
                            {name: m[what] for name, m in both.items()},
                            {name: [] for name in cores},
                        )
                    )
    groups = {name: explore_flows(pkg, sizes) for name, pkg in cores.items()}
    for group in groups["new"]:
        out.append(
            Figure(
                f"check {group} (dedup+por)",
                "states/s",
                {name: explore_measure(cores[name], groups[name][group]) for name in cores},
                {name: [] for name in cores},
            )
        )
    sims = {name: simulator_measures(pkg, sizes.sim_runs) for name, pkg in cores.items()}
    for what in ("plain", "checked"):
        out.append(
            Figure(
                f"simulator {what}",
                "events/s",
                {name: sims[name][what] for name in cores},
                {name: [] for name in cores},
            )
        )
    return out


def derived(med: dict[str, dict[str, float]], sizes: Sizes) -> list[tuple[str, dict[str, float]]]:
    """The ratio rows: advance/toy, replay/floor, growth; from one run's medians."""
    rows: list[tuple[str, dict[str, float]]] = []

    def ratio(label: str, a: str, b: str) -> None:
        if a in med and b in med:
            rows.append((label, {t: med[a][t] / med[b][t] for t in med[a]}))

    for n in sizes.sequential:
        ratio(f"advance/toy sequential N={n}", f"advance sequential N={n}", f"toy sequential N={n}")
    for kind, ns in (("sequential", sizes.replay), ("loop", sizes.replay_loop)):
        for n in ns:
            for fmt in ("msgpack", "json"):
                ratio(
                    f"replay/floor {kind} {fmt} N={n}",
                    f"replay {kind} {fmt} N={n}",
                    f"floor {kind} {fmt} N={n}",
                )
    first = sizes.sequential[0]
    for n in sizes.sequential[1:]:
        ratio(
            f"growth advance sequential {n}/{first}",
            f"advance sequential N={n}",
            f"advance sequential N={first}",
        )
    for kind, ns in (("sequential", sizes.replay), ("loop", sizes.replay_loop)):
        for n in ns[1:]:
            for fmt in ("msgpack", "json"):
                ratio(
                    f"growth replay {kind} {fmt} {n}/{ns[0]}",
                    f"replay {kind} {fmt} N={n}",
                    f"replay {kind} {fmt} N={ns[0]}",
                )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="HEAD", help="the older commit (default HEAD)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds (default 5)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    args = parser.parse_args()
    sizes = QUICK if args.quick else FULL
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "tree"
        tree.mkdir()
        extract(args.base, tree)
        (tree / "flowcore").rename(Path(tmp) / "flowcore_base")
        sys.path.insert(0, tmp)
        cores = {
            "old": importlib.import_module("flowcore_base"),
            "new": importlib.import_module("flowcore"),
        }
        importlib.import_module("flowcore_base.testing")
        importlib.import_module("flowcore.testing")
        print(f"setting up on {args.base} and the working tree", file=sys.stderr, flush=True)
        figures = figures_for(cores, sizes)
        for r in range(args.rounds):
            order = ("old", "new") if r % 2 == 0 else ("new", "old")
            for figure in figures:
                for name in order:
                    figure.values[name].append(figure.measures[name]())
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    med = {f.label: {t: statistics.median(v) for t, v in f.values.items()} for f in figures}
    width = max(len(f.label) for f in figures) + 2
    print(
        f"base {args.base} (old) against the working tree (new): medians of {args.rounds} "
        f"alternating rounds in one process{' (quick sizes)' if args.quick else ''}"
    )
    print(f"{'figure':<{width}} {'old':>12} {'new':>12}  {'unit':<9} new/old")
    for f in figures:
        old, new = med[f.label]["old"], med[f.label]["new"]
        print(f"{f.label:<{width}} {old:>12,.2f} {new:>12,.2f}  {f.unit:<9} {new / old:6.3f}x")
    for label, v in derived(med, sizes):
        old, new = v["old"], v["new"]
        print(f"{label:<{width}} {old:>11.2f}x {new:>11.2f}x  {'ratio':<9} {new / old:6.3f}x")


if __name__ == "__main__":
    main()
