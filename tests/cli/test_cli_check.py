"""``flowcore check``, run for real in subprocesses: the worked example of
specs/testing.md §8 (a broken saga found, its log replayed, the fixed saga
holding), the JSON output, liveness, and bad input (exit 2, one line)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ..explore.test_explore import BROKEN_SAGA, FIXED_SAGA
from .test_cli import bad, fc
from .test_cli_interactive import Terminal

CHECKS = '''
from flowcore.testing import Fail, Ok, Unknown, World

SHOP = World(
    tools={
        "payments.charge": [Ok({"id": "ch-1"}), Fail("declined"), Unknown()],
        "inventory.reserve": [Ok(), Fail("out-of-stock")],
        "payments.refund": [Ok()],
    }
)


def money_returned(point):
    """A charge that may have happened is refunded unless the run completed."""
    settled = point.settled
    if settled is None or settled.status == "completed":
        return True
    charged = [r for r in settled.report
               if r.target == "payments.charge" and r.status in ("succeeded", "uncertain")]
    refunded = [r for r in settled.report
                if r.target == "payments.refund" and r.status == "succeeded"]
    if charged and not refunded:
        return f"{charged[0].idempotency_key} is {charged[0].status} but nothing refunded it"
    return True


NOT_CALLABLE = 3
'''


@pytest.fixture
def shop(tmp_path: Path) -> Path:
    (tmp_path / "order.yaml").write_text(BROKEN_SAGA)
    (tmp_path / "fixed.yaml").write_text(FIXED_SAGA)
    (tmp_path / "checks.py").write_text(CHECKS)
    return tmp_path


ARGS = ("--input", '{"order": "o-1"}', "--world", "checks.py:SHOP")


def test_the_broken_saga_fails_the_check_and_its_log_replays(shop: Path) -> None:
    proc = fc(
        "check",
        "order.yaml",
        *ARGS,
        "--invariant",
        "checks.py:money_returned",
        "--log-out",
        "v.ndjson",
        cwd=shop,
    )
    assert proc.returncode == 1, proc.stderr
    out = proc.stdout
    assert "violated: money_returned: r/charge#1 is uncertain but nothing refunded it" in out
    assert "1. t=0 effect-outcome-unknown r/charge#1" in out
    assert "-> settled failed: outcome-unknown" in out
    assert "log written to v.ndjson" in out
    replayed = fc("replay", "v.ndjson", "--spec", "order.yaml", cwd=shop)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "replays: every recorded effect was re-derived identically" in replayed.stdout
    assert "status failed: outcome-unknown" in replayed.stdout


def test_the_fixed_saga_passes(shop: Path) -> None:
    proc = fc(
        "check",
        "fixed.yaml",
        *ARGS,
        "--invariant",
        "checks.py:money_returned",
        "--settles-within",
        "12",
        "--progress",
        cwd=shop,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {
        line.split("│")[1].strip(): line.split("│")[2].strip()
        for line in proc.stdout.splitlines()
        if line.count("│") == 3
    }
    assert rows["complete"] == "yes" and rows["violations"] == "0"
    assert rows["dead ends"] == "0" and "money_returned" in proc.stdout
    assert int(rows["distinct states"].replace(",", "")) > 5


def test_json_output(shop: Path) -> None:
    proc = fc(
        "check",
        "order.yaml",
        *ARGS,
        "--invariant",
        "checks.py:money_returned",
        "--json",
        cwd=shop,
    )
    assert proc.returncode == 1
    doc = json.loads(proc.stdout)
    assert doc["ok"] is False and doc["stop"] == "violation"
    (v,) = doc["violations"]
    assert v["invariant"] == "money_returned"
    assert v["events"] == [
        {"kind": "effect-outcome-unknown", "idempotencyKey": "r/charge#1", "atMs": 0}
    ]
    assert "money_returned" in doc["invariants"] and "determinism" in doc["invariants"]
    fixed = json.loads(fc("check", "fixed.yaml", *ARGS, "--json", cwd=shop).stdout)
    assert fixed["ok"] is True and fixed["complete"] is True
    assert fixed["states"] == fixed["explored"] - fixed["revisits"]


def test_the_default_world_and_liveness(tmp_path: Path) -> None:
    (tmp_path / "wait.yaml").write_text(
        "flow: w\ntools: {t: {}}\nsteps:\n"
        "  - {id: a, call_tool: {tool: t}}\n"
        "  - {id: go, await_signal: {signal: go}}\n"
    )
    stuck = fc("check", "wait.yaml", "--settles-within", "6", "--json", cwd=tmp_path)
    assert stuck.returncode == 1
    (v,) = json.loads(stuck.stdout)["violations"]
    assert v["invariant"] == "dead-end" and "signal 'go'" in v["message"]
    sent = fc(
        "check",
        "wait.yaml",
        "--settles-within",
        "6",
        "--signal",
        'go={"sha": "abc"}',
        "--outcomes",
        "ok,fail,unknown",
        "--cancel",
        "--json",
        cwd=tmp_path,
    )
    assert sent.returncode == 0, sent.stdout
    doc = json.loads(sent.stdout)
    assert set(doc["settled"]) == {"completed", "failed", "cancelled"}


def test_bad_input_is_one_line_and_exit_2(shop: Path) -> None:
    spec = shop / "order.yaml"
    cases = {
        ("--invariant", "nowhere_at_all:x"): "cannot import module 'nowhere_at_all'",
        ("--invariant", "nocolon"): "write MODULE:NAME",
        ("--invariant", f"{shop / 'checks.py'}:missing"): "has no 'missing'",
        ("--invariant", f"{shop / 'checks.py'}:NOT_CALLABLE"): "is not callable",
        ("--world", f"{shop / 'checks.py'}:money_returned"): "not a flowcore.testing.World",
        ("--outcomes", "ok,maybe"): "unknown outcome 'maybe'",
        ("--signal", "=1"): "name the signal",
        ("--signal", "go={bad"): "--signal go",
        ("--world", f"{shop / 'checks.py'}:SHOP", "--cancel"): "--world gives the whole world",
        ("--bound", "-1"): "--bound",
    }
    for extra, text in cases.items():
        line = bad("check", spec, "--input", '{"order": 1}', *extra)
        assert text in line, (extra, line)
    schema = shop / "typed.yaml"
    schema.write_text(
        "flow: typed\ninput_schema: {type: object, required: [n]}\n"
        "steps:\n  - {id: s, sleep: {for_ms: 1}}\n"
    )
    assert "cannot start a run" in bad("check", schema, "--input", "{}")
    assert "input_schema" in bad("check", schema, "--input", "{}")


def test_a_progress_bar_at_a_terminal(tmp_path: Path) -> None:
    """At a terminal the exploration shows a progress bar on stderr (states,
    transitions, depth, frontier); it goes away before the summary."""
    branches = {f"b{i}": [{"id": f"s{i}", "call_tool": {"tool": "t"}}] for i in range(7)}
    spec = {
        "flow": "wide",
        "tools": {"t": {"class": "idempotent"}},
        "steps": [{"id": "p", "parallel": {"mode": "all_settled", "branches": branches}}],
    }
    (tmp_path / "wide.json").write_text(json.dumps(spec))
    # Without the reduction: 3^7 states, enough for the bar to be drawn.
    terminal = Terminal(["check", "wide.json", "--no-reduce"], tmp_path)
    try:
        assert terminal.wait() == 0, terminal.text
        text = terminal.text
    finally:
        terminal.close()
    assert "exploring" in text and "transitions, depth" in text
    assert "distinct states" in text and "2,187" in text
