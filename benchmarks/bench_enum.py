"""What reading an enum member costs on this Python, against a plain constant.

The core names its closed sets of strings with ``StrEnum`` classes
(``state.How``, ``state.PendingKind``, ``keys.KeyRole``...). Each line
times one way to get at a member (and to compare with it) per access, in
nanoseconds (the minimum of several ``timeit`` repeats, so the least the
access costs); the differences, times how often a decision does it, say
what the enum costs a decision. ``--count`` counts, with a line tracer,
how many member reads (``How.DONE``: a core line naming an enum member, each
name once per execution of the line) one ``advance`` does on the flows of
``decision_cost.py``, and multiplies by the measured difference::

    python benchmarks/bench_enum.py [--count]
"""

from __future__ import annotations

import argparse
import re
import sys
import timeit
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from types import FrameType
from typing import Any


class How(StrEnum):
    DONE = "done"
    FAILED = "failed"


DONE = How.DONE  # a module constant holding the member
PLAIN = "done"  # a plain string


def reads_per_event(workload: Callable[[], object], events: int) -> float:
    """Member reads (by name, per line executed) in the core per event of ``workload``."""
    import profile_decision  # type: ignore[import-not-found]

    import flowcore

    core = str(Path(flowcore.__file__).resolve().parent)
    member = re.compile(rf"\b({profile_decision.ENUMS})\.[A-Z_]+\b")
    per_line: dict[tuple[str, int], int] = {}
    reads = 0

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal reads
        if not frame.f_code.co_filename.startswith(core):
            return None
        if event == "line":
            where = (frame.f_code.co_filename, frame.f_lineno)
            found = per_line.get(where)
            if found is None:
                import linecache

                found = per_line[where] = len(member.findall(linecache.getline(*where)))
            reads += found
        return tracer

    sys.settrace(tracer)
    try:
        workload()
    finally:
        sys.settrace(None)
    return reads / events


def count() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import decision_cost  # type: ignore[import-not-found]

    import flowcore

    flows = {
        "sequential": (decision_cost.spec_of(decision_cost.bench_advance.sequential_flow, 300), {}),
        "loop (repeat)": (decision_cost.spec_of(decision_cost.bench_advance.repeat_flow, 300), {}),
        "parallel (W=10)": (
            decision_cost.spec_of(lambda w: decision_cost.bench_advance.wide_flow(w, 30), 10),
            {"items": list(range(10))},
        ),
    }
    for name, (spec, inp) in flows.items():
        flow = flowcore.parse_flow(spec, source_name=spec["flow"])
        events = decision_cost.record_events(flowcore, flow, inp)

        def drive(flow: Any = flow, inp: Any = inp, events: list[Any] = events) -> None:
            state = flowcore.start(flow, inp, run_id="r", now_ms=0).state
            for event in events:
                state = flowcore.advance(state, event).state

        print(f"{name:<16} {reads_per_event(drive, len(events)):5.1f} member reads per event")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", action="store_true", help="member reads per advance")
    if parser.parse_args().count:
        count()
        return
    n = 1_000_000
    env = {"How": How, "DONE": DONE, "PLAIN": PLAIN, "x": How.DONE, "s": "done"}
    cases = {
        "member via class    How.DONE": "How.DONE",
        "member via constant DONE": "DONE",
        "plain str constant  PLAIN": "PLAIN",
        "compare x == How.DONE": "x == How.DONE",
        "compare x is How.DONE": "x is How.DONE",
        "compare x == DONE": "x == DONE",
        "compare s == PLAIN (str)": "s == PLAIN",
        "member .value": "x.value",
        "empty statement": "pass",
    }
    print(f"Python {sys.version.split()[0]}: ns per access (min of 7 x {n:,})")
    for label, stmt in cases.items():
        best = min(timeit.repeat(stmt, globals=env, number=n, repeat=7)) / n * 1e9
        print(f"{label:<30} {best:6.1f} ns")


if __name__ == "__main__":
    main()
