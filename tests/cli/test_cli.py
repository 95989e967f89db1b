"""The ``flowcore`` command's validate, graph and replay, run for real in subprocesses.

Every bad-input path must print exactly one line on stderr (``flowcore: ...``),
exit 2 and never show a traceback.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import flowcore
from flowcore.log.records import decode_log, encode_records

REPO = Path(__file__).resolve().parents[2]
TRIAGE = REPO / "specs" / "examples" / "triage.yaml"
VECTORS = REPO / "specs" / "conformance"
BAD_SPECS = REPO / "tests" / "bad_specs"


def _executable() -> str:
    beside = Path(sys.executable).parent / "flowcore"
    if beside.exists():
        return str(beside)
    found = shutil.which("flowcore")
    assert found is not None, "the flowcore console script is not installed"
    return found


FLOWCORE = _executable()


def fc(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    return subprocess.run(
        [FLOWCORE, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env=env,
        check=False,
    )


def bad(*args: str | Path) -> str:
    """Run a command that must fail on bad input: its one stderr line."""
    proc = fc(*args)
    assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("flowcore: "), lines[0]
    return lines[0]


def test_version_and_help() -> None:
    proc = fc("--version")
    assert proc.returncode == 0
    assert proc.stdout.strip() == "flowcore 0.1.0"
    helped = fc("--help")
    assert helped.returncode == 0
    for command in ("validate", "graph", "replay"):
        assert command in helped.stdout


def test_the_group_lists_every_command_with_its_own_short_help() -> None:
    import importlib

    import click

    from flowcore_cli.main import COMMANDS

    for name, (module, attribute, short) in COMMANDS.items():
        command = getattr(importlib.import_module(f"flowcore_cli.{module}"), attribute)
        assert isinstance(command, click.Command) and command.name == name
        assert short == command.get_short_help_str(limit=120), name
    listed = fc("--help").stdout
    for name, (_, _, short) in COMMANDS.items():
        assert f"  {name}" in listed and short.split()[0] in listed


def test_help_and_version_load_neither_the_interpreter_nor_a_host() -> None:
    code = (
        "import sys; from flowcore_cli.main import run\n"
        "for args in (['--help'], ['--version']):\n"
        "    try: run(args)\n"
        "    except SystemExit: pass\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('flowcore', 'flowcore_local', 'flowcore_temporal', 'rich', 'msgspec'))\n"
        "print('LOADED', loaded)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "LOADED []"


def test_usage_errors_are_one_line_and_exit_2() -> None:
    assert "No such option" in bad("replay", "--bogus")
    assert "No such command" in bad("frobnicate")
    assert "Missing argument" in bad("validate")
    assert "not a valid integer" in bad("replay", "x.ndjson", "--until", "soon")


# --- the command package owns every command ------------------------------------------------

HOSTS = REPO / "hosts"
COMMAND_PACKAGE = "flowcore_cli"


def imported_modules(path: Path) -> set[str]:
    """The top-level names of the modules ``path`` imports (absolute imports only)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def host_modules() -> list[Path]:
    files = sorted(
        path
        for package in HOSTS.iterdir()
        if package.is_dir() and package.name != COMMAND_PACKAGE
        for path in package.rglob("*.py")
    )
    assert {path.relative_to(HOSTS).parts[0] for path in files} >= {
        "flowcore_local",
        "flowcore_temporal",
    }
    return files


@pytest.mark.parametrize("path", host_modules(), ids=lambda p: str(p.relative_to(HOSTS)))
def test_hosts_have_no_commands(path: Path) -> None:
    """Hosts expose Python APIs only: no click, no rich; ``python -m`` may delegate."""
    imports = imported_modules(path)
    assert not imports & {"click", "rich"}, f"{path.relative_to(HOSTS)} imports click or rich"
    if path.name != "__main__.py":
        assert COMMAND_PACKAGE not in imports, f"{path.relative_to(HOSTS)} imports the command"


def test_the_command_scan_sees_click_and_rich() -> None:
    assert {"click", "rich"} <= imported_modules(HOSTS / COMMAND_PACKAGE / "_local.py")


# --- validate ------------------------------------------------------------------------------


def test_validate_a_good_spec() -> None:
    proc = fc("validate", TRIAGE)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"{TRIAGE}: ok (flow incident-triage v1, 7 steps)"


def test_validate_reports_every_problem_with_file_line_and_column() -> None:
    specs = sorted(BAD_SPECS.glob("*.yaml"))[:6]
    proc = fc("validate", TRIAGE, *specs)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[0].endswith("ok (flow incident-triage v1, 7 steps)")
    problems = lines[1:-1]
    assert len(problems) >= len(specs)
    for line in problems:
        path, line_no, column, message = line.split(":", 3)
        assert Path(path) in specs and line_no.isdigit() and column.isdigit() and message
    assert lines[-1] == f"{len(problems)} problems in {len(specs)} of {len(specs) + 1} specs"
    first = BAD_SPECS / "01-unknown-top-level-key.yaml"
    assert f"{first}:5:1: unknown key 'timeout'" in proc.stdout


def test_validate_json_for_editors_and_ci(tmp_path: Path) -> None:
    missing = tmp_path / "missing.yaml"
    bad_spec = BAD_SPECS / "13-undeclared-tool-call-tool.yaml"
    proc = fc("validate", "--json", TRIAGE, bad_spec, missing)
    assert proc.returncode == 2
    out = json.loads(proc.stdout)
    assert out["ok"] is False
    good, wrong, absent = out["files"]
    assert good == {
        "file": str(TRIAGE),
        "ok": True,
        "problems": [],
        "flow": "incident-triage",
        "version": 1,
        "specHash": flowcore.parse_flow(TRIAGE.read_bytes()).spec_hash,
        "steps": 7,
        "warnings": [],
    }
    assert wrong["ok"] is False
    (problem,) = wrong["problems"]
    assert set(problem) == {"file", "line", "column", "path", "message"}
    assert problem["file"] == str(bad_spec) and problem["line"] and problem["column"]
    assert absent["ok"] is False and absent["problems"][0]["message"] == "no such spec file"
    assert fc("validate", "--json", TRIAGE).returncode == 0


def test_validate_unreadable_inputs(tmp_path: Path) -> None:
    proc = fc("validate", tmp_path / "nope.yaml", tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"{tmp_path / 'nope.yaml'}: no such spec file" in proc.stdout
    assert f"{tmp_path}: is a directory" in proc.stdout
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\xff\xfe\x00junk")
    proc = fc("validate", binary)
    assert proc.returncode == 2 and "not UTF-8" in proc.stdout


# --- graph ---------------------------------------------------------------------------------


def test_graph_mermaid_of_the_example_flow() -> None:
    proc = fc("graph", TRIAGE)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert text.startswith("---\ntitle: incident-triage v1\n---\nflowchart TD\n")
    for node in ("s_fetch", "s_triage", "s_decide", "s_route", "s_page", "s_note", "s_wait_fix"):
        assert f"    {node}" in text
    assert "flow_start --> s_fetch" in text
    assert "s_route -->|\"steps.decide.answer == 'page'\"| s_page" in text
    assert 's_route -->|"else"| s_note' in text
    assert "s_wait_fix --> flow_end" in text
    assert "retry x3" in text and "timeout 1m" in text
    assert "\n    end" not in text  # a lowercase "end" node breaks Mermaid


def test_graph_dot_with_loops_catch_and_compensation() -> None:
    saga = fc("graph", VECTORS / "compensation-on-failure" / "flow.yaml", "--format", "dot")
    assert saga.returncode == 0, saga.stderr
    assert saga.stdout.startswith('digraph "saga v1" {')
    assert 's_pay -> s_undo_pay [label="compensate", style=dotted, arrowhead=odot];' in saga.stdout
    assert saga.stdout.rstrip().endswith("}")
    loop = fc("graph", VECTORS / "for-each" / "flow.yaml", "--format", "dot").stdout
    assert 's_look -> s_per [label="next", style=dashed];' in loop
    assert 's_per -> flow_end [label="done"];' in loop
    guarded = fc("graph", VECTORS / "try-catch" / "flow.yaml").stdout
    assert 's_guard -.->|"catch: quota"| s_degrade' in guarded
    fan = fc("graph", VECTORS / "parallel-all" / "flow.yaml").stdout
    assert 's_fan -->|"left"| s_l' in fan and "s_l --> j_fan" in fan


def test_graph_bad_inputs() -> None:
    line = bad("graph", BAD_SPECS / "05-missing-id.yaml")
    assert line.startswith(f"flowcore: {BAD_SPECS / '05-missing-id.yaml'}:")
    assert "no such spec file" in bad("graph", "nope.yaml")
    assert "is not one of" in bad("graph", TRIAGE, "--format", "png")


# --- replay ----------------------------------------------------------------------------------


def test_replay_prints_the_trajectory_and_exits_0() -> None:
    proc = fc("replay", VECTORS / "triage-example" / "log.ndjson", "--spec", TRIAGE)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "run r-1 of flow incident-triage v1" in out
    for text in ("pagerduty.get_incident", "triager", "Page payments-oncall?", "fix-deployed"):
        assert text in out
    assert "status completed" in out
    assert "replays: every recorded effect was re-derived identically" in out


def test_replay_finds_the_spec_next_to_the_log(tmp_path: Path) -> None:
    assert fc("replay", VECTORS / "sequence-call-tool" / "log.ndjson").returncode == 0
    log = tmp_path / "run.ndjson"
    log.write_bytes((VECTORS / "sequence-call-tool" / "log.ndjson").read_bytes())
    (tmp_path / "other.yaml").write_text("flow: other\nsteps:\n  - {id: s, sleep: {for_ms: 1}}\n")
    assert "no spec for flow 'sequence'" in bad("replay", log)
    (tmp_path / "seq.yaml").write_bytes((VECTORS / "sequence-call-tool" / "flow.yaml").read_bytes())
    assert fc("replay", log).returncode == 0


def test_replay_msgpack_and_json_output(tmp_path: Path) -> None:
    src = VECTORS / "team-sequential"
    packed = tmp_path / "log.msgpack"
    packed.write_bytes(
        encode_records(decode_log((src / "log.ndjson").read_bytes()).records, "msgpack")
    )
    proc = fc("replay", packed, "--spec", src / "flow.yaml", "--json")
    assert proc.returncode == 0, proc.stderr
    out: dict[str, Any] = json.loads(proc.stdout)
    assert out["ok"] is True and out["divergence"] is None
    assert out["status"] == "completed" and out["specMatches"] is True
    assert out["usage"] == {"steps": 2, "costMinorUnits": 30}
    assert out["usageByMember"] == {
        "security": {"steps": 1, "costMinorUnits": 10},
        "style": {"steps": 1, "costMinorUnits": 20},
    }
    kinds = [(e["kind"], e["member"], e["status"]) for e in out["trajectory"]]
    assert kinds == [
        ("run-agent", "security", "succeeded"),
        ("run-agent", "style", "succeeded"),
    ]
    assert set(out) >= {"runId", "flowId", "version", "lastIndex", "ledger", "torn", "unrecorded"}


def test_replay_divergence_exits_1() -> None:
    case = VECTORS / "diverge-effect-edited"
    proc = fc("replay", case / "log.ndjson")
    assert proc.returncode == 1, proc.stderr
    assert "DIVERGED at index 3" in proc.stdout
    assert "expected (the log)" in proc.stdout and "actual (the flow now)" in proc.stdout
    out = json.loads(fc("replay", case / "log.ndjson", "--json").stdout)
    assert out["ok"] is False
    assert out["divergence"]["index"] == 3
    assert out["divergence"]["expected"]["input"] == {"name": "Grace"}
    assert out["divergence"]["actual"]["input"] == {"name": "Ada"}


def test_replay_against_a_newer_version() -> None:
    ok = fc("replay", VECTORS / "version-compatible" / "log.ndjson")
    assert ok.returncode == 0
    assert "differs from the recorded" in ok.stdout
    assert "this run can continue on this version" in ok.stdout
    no = fc("replay", VECTORS / "version-divergent" / "log.ndjson")
    assert no.returncode == 1
    assert "cannot move to this version" in no.stdout


def test_replay_until_and_torn_tail() -> None:
    out = json.loads(
        fc("replay", VECTORS / "triage-example" / "log.ndjson", "--until", "6", "--json").stdout
    )
    assert out["ok"] and out["lastIndex"] == 6 and out["status"] == "running"
    torn = fc("replay", VECTORS / "torn-tail" / "log.ndjson")
    assert torn.returncode == 0
    assert "torn last record at byte 855" in torn.stdout


def test_replay_bad_inputs(tmp_path: Path) -> None:
    assert "no such log file" in bad("replay", tmp_path / "nope.ndjson")
    assert "not a flowcore log" in bad("replay", TRIAGE, "--spec", TRIAGE)
    corrupt = bad("replay", VECTORS / "corrupt-middle" / "log.ndjson")
    assert "line 4 (byte 541)" in corrupt
    wrong = bad("replay", VECTORS / "sequence-call-tool" / "log.ndjson", "--spec", TRIAGE)
    assert "run of flow 'sequence', not 'incident-triage'" in wrong
    assert "no such spec file" in bad(
        "replay", VECTORS / "switch" / "log.ndjson", "--spec", "x.yaml"
    )
    empty = tmp_path / "empty.ndjson"
    empty.write_bytes(b"")
    assert "the log is empty" in bad("replay", empty, "--spec", TRIAGE)
    gap = tmp_path / "gap.ndjson"
    lines = (VECTORS / "switch" / "log.ndjson").read_bytes().splitlines(keepends=True)
    gap.write_bytes(b"".join(lines[:2] + lines[3:]))
    assert "out of order" in bad("replay", gap, "--spec", VECTORS / "switch" / "flow.yaml")


@pytest.mark.parametrize("spec", ["05-missing-id.yaml"])
def test_replay_with_an_invalid_spec(spec: str) -> None:
    line = bad("replay", VECTORS / "switch" / "log.ndjson", "--spec", BAD_SPECS / spec)
    assert str(BAD_SPECS / spec) in line


def test_a_reader_that_goes_away_ends_the_command_quietly(tmp_path: Path) -> None:
    """``flowcore events RUN | head -1``: the rest of the output meets a closed pipe.

    The output is far larger than a pipe holds, so the command is still
    writing when the reader closes its end: it must stop at once, exit 0 and
    say nothing (no ``[Errno 32] Broken pipe``, no traceback)."""
    steps = "".join(f"  - {{id: s{i}, call_tool: {{tool: t, input: {i}}}}}\n" for i in range(400))
    (tmp_path / "long.yaml").write_text("flow: long\ntools: {t: {}}\nsteps:\n" + steps)
    (tmp_path / "tools.py").write_text("def t(e):\n    return e.input\n\nTOOLS = {'t': t}\n")
    db = tmp_path / "long.db"
    made = fc("run", "long.yaml", "--tools", "tools.py", "--db", db, "--run-id", "L", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    log = tmp_path / "long.ndjson"
    log.write_bytes(fc("export", "L", "--db", db).stdout.encode())
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    for args in (["events", "L", "--db", db], ["replay", log, "--spec", tmp_path / "long.yaml"]):
        proc = subprocess.Popen(
            [FLOWCORE, *map(str, args)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        assert proc.stdout is not None and proc.stderr is not None
        first = proc.stdout.readline()
        proc.stdout.close()  # as `head -1` does once it has its line
        stderr = proc.stderr.read().decode()
        assert proc.wait(timeout=60) == 0, (args, stderr)
        assert first.strip() and stderr == "", (args, first, stderr)


def test_an_error_s_cause_chain_and_attempts_are_shown_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "parent.yaml").write_text(
        "flow: parent\nsteps:\n"
        "  - id: sub\n    run_subflow: {flow: child}\n"
        "    retry: {max_attempts: 2, initial_interval_ms: 0, errors: [order-rejected]}\n"
    )
    (tmp_path / "child.yaml").write_text(
        "flow: child\nsteps:\n  - {id: no, fail: {type: order-rejected, message: too late}}\n"
    )
    db = tmp_path / "e.db"
    ran = fc("run", "parent.yaml", "--db", db, "--run-id", "p", cwd=tmp_path)
    assert ran.returncode == 1, (ran.stdout, ran.stderr)
    assert '"cause": {"type": "order-rejected"' in ran.stdout
    events = fc("events", "p", "--db", db)
    assert (
        "settled failed subflow-failed: subflow p/sub#2 settled failed"
        " <- order-rejected: too late (after 2 attempts)" in events.stdout
    ), events.stdout
