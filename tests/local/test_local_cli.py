"""Every local-host command of ``flowcore``, run for real in subprocesses
against a real database file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import flowcore

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "specs" / "examples"
INCIDENT = EXAMPLES / "incident.yaml"
DEMO_TOOLS = EXAMPLES / "demo_tools.py"


def fc(
    *args: str, stdin: str | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flowcore_cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env=dict(os.environ),
        check=False,
    )


def ok(*args: str, stdin: str | None = None) -> str:
    proc = fc(*args, stdin=stdin)
    assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
    return proc.stdout


def bad(*args: str) -> str:
    proc = fc(*args)
    assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_the_demo_end_to_end_with_every_command(tmp_path: Path) -> None:
    db = str(tmp_path / "demo.db")
    common = ["--tools", str(DEMO_TOOLS), "--db", db, "--run-id", "demo"]
    inp = json.dumps({"incident_id": "INC-7"})
    assert ok("run", str(INCIDENT), "--input", inp, *common, "--detach").strip() == "demo"
    ok("signal", "demo", "fix-deployed", "--data", '{"commit": "a1b2c3"}', "--db", db)
    # Not interactive: the question is answered from standard input.
    out = ok("run", str(INCIDENT), "--input", inp, *common, stdin="page\n")
    assert "settled completed" in out
    assert '"paged": "page"' in out
    info = json.loads(ok("show", "demo", "--db", db, "--json"))
    assert info["status"] == "completed"
    assert info["output"]["fix"] == {"commit": "a1b2c3"}
    assert info["children"] == ["demo/postmortem#1"]
    runs = json.loads(ok("runs", "--db", db, "--json"))
    assert [(r["runId"], r["parent"]) for r in runs] == [
        ("demo", None),
        ("demo/postmortem#1", "demo"),
    ]
    tree = ok("runs", "--db", db, "--tree")
    assert "└ demo/postmortem#1" in tree
    assert json.loads(ok("runs", "--db", db, "--status", "failed", "--json")) == []
    lines = ok("events", "demo", "--db", db, "--json").splitlines()
    first = json.loads(lines[0])
    assert (first["type"], first["index"], first["runId"]) == ("run.started", 0, "demo")
    tail = ok("events", "demo", "--db", db, "--start-index", "5", "--json").splitlines()
    assert [json.loads(x)["index"] for x in tail][:1] == [5]
    assert len(tail) == len(lines) - 5
    log = tmp_path / "demo.ndjson"
    ok("export", "demo", "--db", db, "-o", str(log))
    records = flowcore.decode_log(log.read_bytes()).records
    assert len(records) == len(lines)
    report = flowcore.replay(records, flowcore.parse_flow(INCIDENT.read_text()))
    assert report.status == "completed"


def test_answer_signal_cancel_and_worker(tmp_path: Path) -> None:
    db = str(tmp_path / "w.db")
    spec = tmp_path / "wait.yaml"
    spec.write_text(
        "flow: waiting\nsteps:\n"
        "  - {id: q, ask_human: {question: 'ship it?', options: [yes, no]}}\n"
        "  - {id: w, await_signal: {signal: done}}\n"
        "  - {id: z, await_signal: {signal: never}}\n"
        "output: '${steps.w.output}'\n"
    )
    ok("run", str(spec), "--db", db, "--run-id", "w1", "--detach")
    info: dict[str, Any] = json.loads(ok("show", "w1", "--db", db, "--json"))
    assert info["questions"] == [
        {"key": "w1/q#1", "question": "ship it?", "options": ["yes", "no"]}
    ]
    line = bad("answer", "w1", "w1/q#1", "maybe", "--db", db)
    assert line == "flowcore: answer 'maybe' is not one of ['yes', 'no'] for w1/q#1"
    ok("answer", "w1", "w1/q#1", "yes", "--db", db)
    ok("signal", "w1", "done", "--data", "[1, 2]", "--db", db)
    ok("cancel", "w1", "--reason", "tired", "--db", db)
    ok("worker", "--db", db, "--until-idle")
    info = json.loads(ok("show", "w1", "--db", db, "--json"))
    assert info["status"] == "cancelled"
    assert info["error"]["message"] == "tired"
    text = ok("show", "w1", "--db", db)
    assert "cancelled" in text


def test_bad_input_is_one_clear_line_and_exit_2(tmp_path: Path) -> None:
    db = tmp_path / "e.db"
    spec = tmp_path / "s.yaml"
    spec.write_text("flow: s\nsteps:\n  - {id: a, sleep: {for_ms: 1}}\n")
    ok("run", str(spec), "--db", str(db), "--run-id", "s1", "--detach")
    assert bad("show", "nope", "--db", str(db)) == "flowcore: no run 'nope' in the database"
    assert bad("signal", "s1", "x", "--data", "{oops", "--db", str(db)).startswith(
        "flowcore: --data is not valid JSON"
    )
    assert bad("run", str(spec), "--input", "[", "--db", str(db)).startswith(
        "flowcore: --input is not valid JSON"
    )
    junk = tmp_path / "junk.db"
    junk.write_text("this is not a database at all" * 100)
    assert bad("runs", "--db", str(junk)).startswith(f"flowcore: {junk} is not a flowcore database")
    assert bad("runs", "--db", str(tmp_path / "missing.db")).startswith("flowcore: no database at")
    badspec = tmp_path / "bad.yaml"
    badspec.write_text("flow: b\nsteps: []\n")
    assert "a flow needs at least one step" in bad("run", str(badspec), "--db", str(db))
    assert "cannot import tools module" in bad(
        "run", str(spec), "--tools", "no.such.module", "--db", str(db), "--run-id", "s2"
    )
    assert bad("run", str(spec), "--input", '{"a": 1}', "--db", str(db), "--run-id", "s1") == (
        "flowcore: run 's1' already exists with a different input"
    )


def test_run_json_keeps_stdout_for_the_document_and_show_says_unlimited(tmp_path: Path) -> None:
    db = str(tmp_path / "j.db")
    spec = tmp_path / "nap.yaml"
    spec.write_text("flow: nap\nsteps:\n  - {id: a, sleep: {for_ms: 1}}\noutput: rested\n")
    proc = fc("run", str(spec), "--db", db, "--run-id", "j1", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {
        "runId": "j1",
        "status": "completed",
        "output": "rested",
        "error": None,
    }
    assert "settled completed" in proc.stderr  # the progress lines
    assert "cost 0 used, unlimited left" in ok("show", "j1", "--db", db)
    missing = tmp_path / "no" / "such" / "dir.db"
    assert bad("run", str(spec), "--db", str(missing)) == (
        f"flowcore: cannot create {missing}: no directory {missing.parent}"
    )


def test_values_that_look_like_markup_are_printed_as_they_are(tmp_path: Path) -> None:
    """Run ids, outputs and errors are text: rich markup in them is not applied."""
    db = str(tmp_path / "m.db")
    spec = tmp_path / "m.yaml"
    spec.write_text("flow: m\nsteps:\n  - {id: a, sleep: {for_ms: 1}}\noutput: '[/] [bold]x'\n")
    out = ok("run", str(spec), "--db", db, "--run-id", "[bold]r")
    assert "■ [bold]r settled completed" in out
    assert 'output: "[/] [bold]x"' in out
    shown = ok("show", "[bold]r", "--db", db)
    assert shown.startswith("[bold]r  flow m  completed")
    assert 'output: "[/] [bold]x"' in shown
    assert "[bold]r" in ok("runs", "--db", db)
