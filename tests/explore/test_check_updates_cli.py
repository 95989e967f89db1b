"""``flowcore check --updates N``, run for real: update requests are moves of the
world (one per run by default), a handler that waits for ever is found with its
path (the log replays), and the option is refused beside ``--world``."""

from __future__ import annotations

import json
from pathlib import Path

from ..cli.test_cli import bad, fc
from .test_explore_updates import EXPENSE, FOREVER


def test_updates_are_explored_by_default_and_counted_by_the_option(tmp_path: Path) -> None:
    (tmp_path / "expense.yaml").write_text(EXPENSE)
    counts = {}
    for extra in ((), ("--updates", "0"), ("--updates", "2")):
        proc = fc("check", "expense.yaml", "--outcomes", "ok", "--json", *extra, cwd=tmp_path)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        doc = json.loads(proc.stdout)
        assert doc["ok"] and doc["complete"] and "updates" in doc["invariants"]
        counts[extra[1] if extra else "default"] = doc["states"]
    assert counts["0"] < counts["default"] < counts["2"]


def test_a_handler_that_waits_for_ever_fails_the_check(tmp_path: Path) -> None:
    (tmp_path / "forever.yaml").write_text(FOREVER)
    proc = fc(
        "check",
        "forever.yaml",
        "--outcomes",
        "ok",
        "--settles-within",
        "10",
        "--log-out",
        "v.ndjson",
        "--json",
        cwd=tmp_path,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (v,) = json.loads(proc.stdout)["violations"]
    assert v["invariant"] == "dead-end"
    assert {"kind": "update-requested", "updateId": "u1", "name": "hold", "atMs": 0} in v["events"]
    replayed = fc("replay", "v.ndjson", "--spec", "forever.yaml", cwd=tmp_path)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr


def test_updates_beside_a_whole_world_is_bad_input(tmp_path: Path) -> None:
    (tmp_path / "expense.yaml").write_text(EXPENSE)
    (tmp_path / "w.py").write_text("from flowcore.testing import World\nW = World()\n")
    line = bad(
        "check", str(tmp_path / "expense.yaml"), "--world", f"{tmp_path}/w.py:W", "--updates", "1"
    )
    assert "--updates" in line
