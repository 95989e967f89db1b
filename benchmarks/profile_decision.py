"""Where a decision's time goes, by kind of work: py-spy samples, classified.

``python benchmarks/profile_decision.py WORKLOAD`` runs the workload under
``py-spy record --format raw`` (py-spy must be installed: ``pip install
py-spy``), then reads every sample's stack and puts it in one kind of work,
and prints a table: kind, samples, share. ``--raw FILE`` classifies a raw
file py-spy wrote before instead. Workloads (the flows of ``decision_cost.py``):
``advance-sequential``, ``advance-loop``, ``advance-parallel``, ``replay``
(sequential flow, MessagePack), ``explore`` (``parallel 5x2``, every check
on) and ``simulator`` (plain).

How a sample is classified: its innermost frame decides. A frame in
``enum.py`` is enum attribute access (none show on Python 3.11: a member
read is no Python call), and so is a core line naming a member
(``How.DONE``): the whole line's time, an upper bound; in ``jmespath`` template evaluation.
Otherwise the innermost frame in flowcore (or the benchmark) counts: first
by the text of its line when the line is a C-level operation of a library
(a ``Map``'s ``set``/``mutate``/``get``: immutables; a ``replace(`` or a
call of a capitalised name: msgspec struct construction; ``encode``/
``decode`` in the explorer: snapshot codec), else by its module (see
``MODULES``). Time spent in C (msgspec, immutables, the garbage collector)
is charged to the line that called it: that is why the line rules exist.
"""

from __future__ import annotations

import argparse
import collections
import linecache
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import flowcore

# Module (path under flowcore/, prefix match, longest first) -> kind of work.
MODULES = {
    "_data.py": "event check/validation (data, wire fields)",
    "decision/wire_fields.py": "event check/validation (data, wire fields)",
    "decision/wire.py": "event check/validation (data, wire fields)",
    "decision/keys.py": "key building and reading",
    "language/expr.py": "template evaluation",
    "language/refs.py": "template evaluation",
    "language/reads.py": "template evaluation",
    "decision/txn": "Txn: transaction records, copy-on-write and freezing",
    "decision/state.py": "state records and results store",
    "decision/results.py": "state records and results store",
    "decision/report_rows.py": "the report",
    "decision/shares.py": "shares/budget",
    "decision/halt.py": "shares/budget",
    "decision/snapshot.py": "snapshot encode/decode",
    "decision/persist.py": "snapshot encode/decode",
    "decision/interp.py": "dispatch (interp, transitions, plan)",
    "decision/transitions.py": "dispatch (interp, transitions, plan)",
    "decision/plan.py": "dispatch (interp, transitions, plan)",
    "decision/outcome.py": "dispatch (interp, transitions, plan)",
    "decision/ending.py": "constructs' own logic",
    "decision/constructs/": "constructs' own logic",
    "decision/compiled.py": "constructs' own logic",  # plain steps begun (a construct's work)
    "decision/updates.py": "constructs' own logic",
    "log/": "replay: log decode, compare, trajectory",
    "explore/": "exploration bookkeeping (search, reduction, invariants)",
    "testkit/": "simulator/testkit bookkeeping (checks, history)",
}
FRAME = re.compile(r"^(?P<func>.*) \((?P<file>.*):(?P<line>\d+)\)$")
ENUMS = r"How|PendingKind|ListKind|SchedStatus|KeyRole|Overlap"
LINE_RULES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(rf"\b({ENUMS})\.[A-Z_]+\b"), "enum attribute access (the whole line)"),
    (re.compile(r"\b(encode_state|decode_state|encode|decode)\("), "snapshot encode/decode"),
    (
        re.compile(r"\bMap\(|\.set\(|\.mutate\(|\.finish\(|\.delete\(|\.get\("),
        "immutables.Map operations",
    ),
    (re.compile(r"\breplace\(|\b[A-Z][A-Za-z]+\("), "msgspec struct construction/replace"),
]
# Frames whose share of the samples (everything under them) is printed too.
UNDER = {
    "advance": f"advance ({Path(flowcore.__file__).parent / 'decision' / 'interp.py'}:",
    "the determinism re-check": "check_determinism (",
    "decode_state": "decode_state (",
    "encode_state": "encode_state (",
    "the canonical snapshot": "canonical_snapshot (",
}
EXCLUDED = "gc.collect between timed runs (not counted)"
CORE = str(Path(flowcore.__file__).resolve().parent) + os.sep
BENCH = str(Path(__file__).resolve().parent) + os.sep


def classify(stack: list[str]) -> str:
    frames = [m for f in stack if (m := FRAME.match(f))]
    if not frames:
        return "other"
    leaf = frames[-1]
    if leaf["file"].endswith(f"{os.sep}enum.py"):
        return "enum attribute access"
    if f"{os.sep}jmespath{os.sep}" in leaf["file"]:
        return "template evaluation"
    for m in reversed(frames):
        path = m["file"]
        if path.startswith(BENCH):
            text = linecache.getline(path, int(m["line"]))
            return EXCLUDED if "gc.collect" in text else "driver: the call, freeing the old state"
        if not path.startswith(CORE):
            continue
        rel = path[len(CORE) :]
        text = linecache.getline(path, int(m["line"])).strip()
        if m is leaf or not frames[-1]["file"].startswith(CORE):
            for rule, kind in LINE_RULES:
                if rule.search(text) and (kind != "snapshot encode/decode" or "explore" in rel):
                    return kind
        for prefix in sorted(MODULES, key=len, reverse=True):
            if rel.startswith(prefix):
                return MODULES[prefix]
        return f"other core ({rel})"
    return f"other ({Path(leaf['file']).name})"


def where(stack: list[str]) -> str:
    """The innermost core (or benchmark) frame: ``module:function``."""
    for f in reversed(stack):
        m = FRAME.match(f)
        if m and (m["file"].startswith(CORE) or m["file"].startswith(BENCH)):
            return f"{Path(m['file']).stem}:{m['func']}"
    return "?"


def table(raw: Path, detail: int = 0) -> str:
    counts: collections.Counter[str] = collections.Counter()
    places: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    under: collections.Counter[str] = collections.Counter()
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if "sampled_loop" in stack:  # the timed work only, not the setup
            frames = stack.split(";")
            kind = classify(frames)
            if kind != EXCLUDED:
                counts[kind] += int(count)
                places[kind][where(frames)] += int(count)
        if "sampled_loop" in stack and classify(stack.split(";")) != EXCLUDED:
            for name, frame in UNDER.items():
                if frame in stack:
                    under[name] += int(count)
    total = sum(counts.values())
    rows = ["| kind of work | samples | share |", "|---|---:|---:|"]
    for kind, n in counts.most_common():
        rows.append(f"| {kind} | {n:,} | {n / total:.1%} |")
    rows.append(f"| total | {total:,} | 100% |")
    if under:
        shares = ", ".join(f"{name} {n / total:.1%}" for name, n in under.most_common())
        rows.append(f"\nSamples under: {shares}")
    for kind, _ in counts.most_common():
        if detail:
            top = ", ".join(f"{p} {c / total:.1%}" for p, c in places[kind].most_common(detail))
            rows.append(f"\n- {kind}: {top}")
    return "\n".join(rows)


def workloads() -> dict[str, Callable[[], object]]:
    import decision_cost  # type: ignore[import-not-found]

    seq = decision_cost.spec_of(decision_cost.bench_advance.sequential_flow, 10_000)
    loop = decision_cost.spec_of(decision_cost.bench_advance.repeat_flow, 10_000)
    wide = decision_cost.spec_of(lambda w: decision_cost.bench_advance.wide_flow(w, 100), 100)
    rseq = decision_cost.spec_of(decision_cost.bench_replay.sequential_flow, 10_000)
    out: dict[str, Callable[[], object]] = {}
    out["advance-sequential"] = lambda: decision_cost.advance_measure(flowcore, seq, {})
    out["advance-loop"] = lambda: decision_cost.advance_measure(flowcore, loop, {})
    out["advance-parallel"] = lambda: decision_cost.advance_measure(
        flowcore, wide, {"items": list(range(100))}
    )
    out["replay"] = lambda: decision_cost.replay_measures(flowcore, rseq, {}, "msgpack")["replay"]
    sizes = decision_cost.QUICK.__class__(**{**decision_cost.FULL.__dict__, "explore": [(5, 2)]})
    out["explore"] = lambda: decision_cost.explore_measure(
        flowcore, decision_cost.explore_flows(flowcore, sizes)["parallel 5x2"]
    )
    out["simulator"] = lambda: decision_cost.simulator_measures(flowcore, 20)["plain"]
    return out


def sampled_loop(measure: object, seconds: float) -> None:
    """Repeat the timed work for ``seconds``: only samples under this frame count."""
    assert callable(measure)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        measure()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", nargs="?")
    parser.add_argument("--seconds", type=float, default=20.0, help="sampling time")
    parser.add_argument("--rate", type=int, default=250, help="samples per second")
    parser.add_argument("--raw", type=Path, help="classify this py-spy raw file")
    parser.add_argument("--detail", type=int, default=0, help="top N functions of each kind")
    parser.add_argument("--keep", type=Path, help="write py-spy's raw samples to this file too")
    parser.add_argument("--run", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.raw:
        print(table(args.raw, args.detail))
        return
    work = workloads()
    if args.workload not in work:
        parser.error(f"workload must be one of {', '.join(work)}, not {args.workload!r}")
    if args.run:  # the child py-spy samples: set up, then repeat the timed work
        sampled_loop(work[args.workload](), args.seconds)
        return
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "raw.txt"
        child = [sys.executable, __file__, args.workload, "--run", "--seconds", str(args.seconds)]
        subprocess.run(
            [
                str(Path(sys.executable).parent / "py-spy"),
                "record",
                "--full-filenames",
                "--format",
                "raw",
                "-r",
                str(args.rate),
                "-o",
                str(raw),
                "--",
                *child,
            ],
            check=True,
            capture_output=True,
        )
        if args.keep:
            args.keep.write_bytes(raw.read_bytes())
        print(table(raw, args.detail))


if __name__ == "__main__":
    main()
