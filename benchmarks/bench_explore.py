"""What exhaustive exploration costs, and what deduplication and partial-order
reduction save: ``flowcore.testing.explore`` side by side in one run.

For each flow (the example flows, and a ``parallel`` step whose branches each
call a tool that may succeed or fail: 3 and 5 branches, one and two calls per
branch) three explorations of the same world:

* ``tree``: no deduplication, no reduction: every ordering is its own path
  (cut at ``--cap`` states where it would not end);
* ``dedup``: equal states identified by their digest;
* ``dedup+por``: and commuting answers explored in one order (the default).

Each prints distinct states, transitions, what deduplication skipped and
reduction left out, the median time of ``--repeat`` runs, distinct states per
second and the ratios against ``dedup`` measured in the same run. Then the
largest parallel flow (branches of two calls) explored exhaustively in under
``--budget-s`` seconds, with and without the reduction.

    python benchmarks/bench_explore.py                 # about five minutes
    python benchmarks/bench_explore.py --quick         # a smoke run
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

import flowcore
from flowcore.testing import Exploration, Fail, Ok, Signal, World, explore

EXAMPLES = Path(__file__).resolve().parent.parent / "specs" / "examples"
INPUTS = {
    "triage": {"incident_id": "I-1"},
    "incident": {"incident_id": "I-1"},
    "mcp_flow": {"sku": "widget", "quantity": 2},
}
EXAMPLE_WORLD = World(
    default=[Ok({"title": "t", "services": ["a", "b"], "owner": "o"}), Fail("boom")],
    signals=[Signal("fix-deployed", {"sha": "abc"})],
    cancel_at_ms=0,
)
BRANCH_WORLD = World(tools={"t": [Ok(1), Fail("x")]})
MODES = {
    "tree": {"dedup": False, "reduce": False},
    "dedup": {"dedup": True, "reduce": False},
    "dedup+por": {"dedup": True, "reduce": True},
}


def parallel(branches: int, calls: int) -> dict[str, Any]:
    lists = {
        f"b{i}": [{"id": f"s{i}_{j}", "call_tool": {"tool": "t"}} for j in range(calls)]
        for i in range(branches)
    }
    return {
        "flow": f"par{branches}x{calls}",
        "tools": {"t": {"class": "idempotent"}},
        "steps": [{"id": "p", "parallel": {"mode": "all_settled", "branches": lists}}],
    }


def timed(
    flow: flowcore.Flow, inp: Any, world: World, repeat: int, **opts: Any
) -> tuple[Exploration, float]:
    times = []
    x = None
    for _ in range(repeat):
        began = time.perf_counter()
        x = explore(flow, inp, world, **opts)
        times.append(time.perf_counter() - began)
    assert x is not None
    return x, statistics.median(times)


def row(name: str, mode: str, x: Exploration, seconds: float, base: float | None) -> str:
    rate = x.states / seconds if seconds else 0.0
    ratio = f"{seconds / base:6.2f}x" if base else "      "
    done = "complete" if x.complete else f"cut ({x.stop})"
    return (
        f"{name:<16} {mode:<10} {x.states:>9,} {x.transitions:>10,} {x.revisits:>9,} "
        f"{x.reduced:>8,} {seconds * 1000:>7.1f} ms {rate:>9,.0f} {ratio}  {done}"
    )


def header() -> str:
    return (
        f"{'flow':<16} {'mode':<10} {'states':>9} {'transitions':>10} {'dedup':>9} "
        f"{'por':>8} {'median ms':>10} {'states/s':>9} {'vs dedup'}"
    )


def largest(calls: int, seconds: float, reduce: bool) -> tuple[int, Exploration, float]:
    """The most branches whose exploration ends, complete, within ``seconds``.
    Each try is capped at the states the last one's rate would explore in
    twice that time, so a flow far too large stops early."""
    best: tuple[int, Exploration, float] = (0, None, 0.0)  # type: ignore[assignment]
    rate = 5_000.0
    n = 2
    while True:
        flow = flowcore.parse_flow(parallel(n, calls))
        cap = max(1_000, int(rate * seconds * 2))
        began = time.perf_counter()
        x = explore(flow, None, BRANCH_WORLD, reduce=reduce, max_states=cap, max_depth=200)
        took = time.perf_counter() - began
        rate = x.states / took if took else rate
        if not x.complete or took > seconds:
            return best
        best = (n, x, took)
        n += 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cap", type=int, default=100_000, help="states at most for the tree")
    ap.add_argument("--budget-s", type=float, default=60.0)
    ap.add_argument("--quick", action="store_true", help="one run each, small caps")
    ap.add_argument("--only-largest", action="store_true", help="only the largest flows")
    args = ap.parse_args()
    repeat = 1 if args.quick else args.repeat
    cap = 5_000 if args.quick else args.cap
    flows: list[tuple[str, flowcore.Flow, Any, World]] = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        flows.append(
            (
                path.stem,
                flowcore.parse_flow(path.read_bytes()),
                INPUTS.get(path.stem, {}),
                EXAMPLE_WORLD,
            )
        )
    for branches, calls in ((3, 1), (5, 1), (3, 2), (5, 2)):
        flows.append(
            (
                f"parallel {branches}x{calls}",
                flowcore.parse_flow(parallel(branches, calls)),
                None,
                BRANCH_WORLD,
            )
        )
    if args.only_largest:
        flows = []
    else:
        print(header())
    for name, flow, inp, world in flows:
        found: dict[str, tuple[Exploration, float]] = {}
        for mode, opts in MODES.items():
            limit = cap if mode == "tree" else 1_000_000
            found[mode] = timed(flow, inp, world, repeat, max_states=limit, **opts)
        base = found["dedup"][1]
        for mode, (x, seconds) in found.items():
            print(row(name, mode, x, seconds, base))
        tree, dedup, por = (found[m][0] for m in MODES)
        if tree.complete:
            print(
                f"{'':<16} dedup keeps {dedup.states / tree.states:.1%} of the tree's states, "
                f"dedup+por {por.states / tree.states:.1%}"
            )
        else:
            print(
                f"{'':<16} the tree passed {cap:,} states; dedup+por keeps "
                f"{por.states / dedup.states:.1%} of dedup's"
            )
    if args.quick:
        return
    for calls in (1, 2):
        print(
            f"\nthe largest parallel flow (branches of {calls} call{'s' if calls > 1 else ''}, "
            f"each ok or failed) explored completely within {args.budget_s:.0f} s:"
        )
        for reduce in (True, False):
            n, x, took = largest(calls, args.budget_s, reduce)
            what = "dedup+por" if reduce else "dedup    "
            print(
                f"  {what}: {n} branches, {x.states:,} distinct states, "
                f"{x.transitions:,} transitions in {took:.1f} s ({x.states / took:,.0f} states/s)"
            )


if __name__ == "__main__":
    main()
