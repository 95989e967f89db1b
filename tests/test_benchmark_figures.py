"""benchmarks/decision_cost.py prints every figure of the decision's cost; its toy is honest.

Never timed: the smoke run uses tiny sizes against HEAD and checks that each
figure's row is printed with three numbers (old, new, new/old).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import flowcore
from flowcore import CallTool, EffectSucceeded

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import bench_advance  # type: ignore[import-not-found]  # noqa: E402

LABELS = [
    "advance sequential N=",
    "toy sequential N=",
    "advance loop (repeat) N=",
    "advance parallel (for_each W=",
    "replay sequential msgpack N=",
    "floor sequential msgpack N=",
    "replay sequential json N=",
    "floor sequential json N=",
    "replay loop msgpack N=",
    "floor loop msgpack N=",
    "check parallel",
    "simulator plain",
    "simulator checked",
    "advance/toy sequential N=",
    "replay/floor sequential msgpack N=",
    "replay/floor loop msgpack N=",
    "growth advance sequential",
    "growth replay sequential msgpack",
    "growth replay loop msgpack",
]


@pytest.fixture(scope="module")
def printed() -> str:
    if subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True
    ).returncode:
        pytest.skip("not a git checkout: the script extracts its base with git archive")
    return bench("decision_cost.py", "--quick", "--base", "HEAD", "--rounds", "1")


def bench(script: str, *args: str) -> str:
    """What ``benchmarks/SCRIPT ARGS`` prints (it must succeed)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "hosts")])
    done = subprocess.run(
        [sys.executable, f"benchmarks/{script}", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("label", LABELS)
def test_every_figure_is_printed_for_both_trees_with_its_ratio(printed: str, label: str) -> None:
    number = r"[\d,]+\.\d+x?"
    row = re.compile(rf"^{re.escape(label)}.*\s{number}\s+{number}\s+\S+\s+\d+\.\d+x$", re.M)
    assert row.search(printed), f"no row for {label!r} in:\n{printed}"


def test_the_toy_computes_what_advance_computes() -> None:
    # The toy is the floor advance is measured against: it must do the same
    # work per event (same keys answered, same inputs built), not less.
    n = 30
    flow = bench_advance.sequential_flow(n)
    decision = flowcore.start(flow, {}, run_id="r", now_ms=0)
    toy = bench_advance.Toy(n)
    toy_state, toy_effects = toy.start()
    for i, (key, output) in enumerate(bench_advance.toy_events(n)):
        (call,) = [e for e in decision.effects if isinstance(e, CallTool)]
        (effect,) = toy_effects
        assert effect["input"] == call.input
        assert effect["key"] == key == call.idempotency_key
        event = EffectSucceeded(idempotency_key=call.idempotency_key, output=output, at_ms=i + 1)
        decision = flowcore.advance(decision.state, event)
        toy_state, toy_effects = toy.advance(toy_state, key, output)
    assert decision.state.settled is not None and decision.state.settled.status == "completed"
    assert toy_effects == [{"kind": "settled", "status": "completed"}]


def test_the_toy_rejects_an_event_it_does_not_expect() -> None:
    toy = bench_advance.Toy(2)
    state, _ = toy.start()
    with pytest.raises(ValueError, match="r/s1#1"):
        toy.advance(state, "r/s1#1", {"v": 1})


def test_the_profile_sorts_samples_by_kind_of_work(tmp_path: Path) -> None:
    import profile_decision  # type: ignore[import-not-found]

    core = Path(flowcore.__file__).resolve().parent
    txn, keys = core / "decision" / "txn_records.py", core / "decision" / "keys.py"
    bench = ROOT / "benchmarks" / "profile_decision.py"
    loop = f"sampled_loop ({bench}:1)"

    def line_of(path: Path, pattern: str) -> int:
        lines = path.read_text().splitlines()
        return next(i for i, text in enumerate(lines, 1) if re.search(pattern, text))

    mapset = line_of(txn, r"\.set\(")
    raw = tmp_path / "raw.txt"
    raw.write_text(
        f"<module> ({bench}:1);{loop};f ({keys}:{line_of(keys, r'^def ')}) 3\n"
        f"<module> ({bench}:1);{loop};g ({txn}:{mapset}) 1\n"
        f"<module> ({bench}:1);setup ({keys}:1) 50\n"  # outside the timed loop: not counted
    )
    printed = profile_decision.table(raw)
    assert "| key building and reading | 3 | 75.0% |" in printed
    assert "| immutables.Map operations | 1 | 25.0% |" in printed
    assert "| total | 4 | 100% |" in printed


def test_the_records_floor_does_what_advance_does_and_prints_its_ratios() -> None:
    """bench_record_floor.py writes the records of each event directly, checks
    every state it makes encodes to the bytes ``advance`` gives (it stops
    otherwise), and prints the three figures and three ratios."""
    out = bench("bench_record_floor.py", "--n", "60", "--rounds", "1")
    for label in ("toy", "records floor", "advance"):
        assert re.search(rf"^{label}\s+\d+\.\d\d$", out, re.M), out
    for label in ("records floor/toy", "advance/toy", "advance/floor"):
        assert re.search(rf"^{re.escape(label)}\s+\d+\.\d\dx$", out, re.M), out
