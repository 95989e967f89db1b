"""What a person sees of a run's history: ``show``'s timeline and work report,
``runs``' columns and pages, ``events`` as a table, ``replay RUN --db``, and
errors of a spec or an input one per line. Real subprocesses, a real database."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from .client.test_local_recovery_resume import PAY
from .test_local_cli import DEMO_TOOLS, INCIDENT, fc, ok

WAIT = (
    "flow: wait\nsteps:\n"
    "  - id: q\n    ask_human: {question: 'ok?', options: [yes, no]}\n"
    "  - id: go\n    await_signal: {signal: fix-deployed}\n"
)
ISO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{3})?Z"


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The demo run, completed, in a database of its own."""
    db = str(tmp_path_factory.mktemp("history") / "demo.db")
    common = ["--tools", str(DEMO_TOOLS), "--db", db, "--run-id", "demo"]
    inp = json.dumps({"incident_id": "INC-7"})
    ok("run", str(INCIDENT), "--input", inp, *common, "--detach")
    ok("signal", "demo", "fix-deployed", "--data", '{"commit": "a1b2c3"}', "--db", db)
    ok("run", str(INCIDENT), "--input", inp, *common, stdin="page\n")
    return db


def test_show_has_the_timeline_and_the_report_of_every_work_effect(demo: str) -> None:
    text = ok("show", "demo", "--db", demo)
    lines = text.splitlines()
    start = lines.index("history")
    timeline = lines[start + 1 : lines.index("work effects")]
    # One line per record that says something, each beginning with its time.
    assert all(re.match(ISO + r"  #\d+", line) for line in timeline), timeline
    said = "\n".join(timeline)
    assert "▶ started flow incident-response v1" in said
    assert "✗ demo/fetch#1 unavailable: pagerduty answered 503" in said
    assert "⏲ timer demo/fetch#1/backoff due" in said
    assert "→ call-tool pagerduty.get_incident demo/fetch#2  (retry: attempt 2)" in said
    assert "! demo/decide#1 answered 'page'" in said
    assert "■ settled completed" in timeline[-1]
    assert said.count("settled completed") == 1  # the settled effect and run.settled: one line
    report = text[text.index("work effects") :]
    for key, status in (("fetch#1", "failed"), ("fetch#2", "succeeded"), ("page#1", "succeeded")):
        assert re.search(rf"│ {re.escape(key)} +│ [^│]+│ {status} ", report), (key, report)
    assert "unavailable: pagerduty answered 503" in report
    # Only the current state, when asked.
    assert "history" not in ok("show", "demo", "--db", demo, "--no-history").splitlines()


def test_show_json_keeps_epoch_ms_and_adds_history_and_report(demo: str) -> None:
    info = json.loads(ok("show", "demo", "--db", demo, "--json"))
    assert [r["index"] for r in info["history"]] == list(range(len(info["history"])))
    assert all(isinstance(r["at"], int) for r in info["history"])
    work = [e for e in info["report"] if e["kind"] == "call-tool"]
    assert {e["key"]: e["status"] for e in work}["demo/fetch#1"] == "failed"


def test_runs_shows_start_duration_waiting_and_outcome_and_pages(demo: str) -> None:
    text = ok("runs", "--db", demo)
    header = text.splitlines()[1]
    for column in ("run", "flow", "status", "started (UTC)", "took", "waiting for"):
        assert column in header
    row = next(line for line in text.splitlines() if line.startswith("│ demo "))
    assert re.search(ISO, row) and "completed" in row and '"owner":"payments-oncall"' in row
    assert re.search(r"│ \d+(\.\d)? (ms|s) ", row), row
    runs = json.loads(ok("runs", "--db", demo, "--json"))
    assert all(isinstance(r["startedMs"], int) for r in runs)
    assert runs[0]["output"]["paged"] == "page" and runs[0]["waitingFor"] == []
    # Pages: one run per page, the second page holds the child.
    second = ok("runs", "--db", demo, "--limit", "1", "--page", "2")
    assert "demo/postmortem#1" in second and "│ demo " not in second
    assert "page 2 of 2 (2 runs" in second
    assert json.loads(ok("runs", "--db", demo, "--limit", "1", "--json"))[0]["runId"] == "demo"


def test_runs_refuses_an_unknown_status(demo: str) -> None:
    proc = fc("runs", "--db", demo, "--status", "done")
    assert proc.returncode == 2
    assert "'done' is not one of 'running', 'completed', 'failed'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_running_run_says_what_it_waits_for(tmp_path: Path) -> None:
    spec = tmp_path / "wait.yaml"
    spec.write_text(WAIT)
    db = str(tmp_path / "w.db")
    ok("run", str(spec), "--db", db, "--run-id", "w1", "--detach")
    row = next(line for line in ok("runs", "--db", db).splitlines() if "│ w1 " in line)
    assert "question q#1" in row and "running" in row and "so far" in row
    assert json.loads(ok("runs", "--db", db, "--json"))[0]["waitingFor"] == ["question q#1"]


def test_events_prints_a_table_and_ndjson_with_json(demo: str) -> None:
    lines = ok("events", "demo", "--db", demo).splitlines()
    assert re.match(r" +0  " + ISO + r"  run\.started +▶ started flow incident-response", lines[0])
    assert any("event.reported" in line and "✓ demo/fetch#2" in line for line in lines)
    raw = ok("events", "demo", "--db", demo, "--json").splitlines()
    assert len(raw) == len(lines)
    assert json.loads(raw[0])["type"] == "run.started"


def test_replay_reads_a_run_straight_from_the_database(demo: str, tmp_path: Path) -> None:
    text = ok("replay", "demo", "--db", demo)
    assert "replays: every recorded effect was re-derived identically" in text
    assert "run demo of flow incident-response" in text
    # Against another spec: the one given, not the stored one.
    other = tmp_path / "other.yaml"
    other.write_text(INCIDENT.read_text().replace("flow: incident-response", "flow: other"))
    proc = fc("replay", "demo", "--db", demo, "--spec", str(other))
    assert proc.returncode == 2 and "not 'other'" in proc.stderr
    proc = fc("replay", "nope", "--db", demo)
    assert proc.returncode == 2 and proc.stderr.strip() == "flowcore: no run 'nope' in the database"


def test_a_bad_spec_or_input_prints_one_problem_per_line(tmp_path: Path) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_text(
        "flow: bad\nsteps:\n  - id: a\n    call_tol: {tool: x}\n  - id: b\n    sleep: {ms: 1}\n"
    )
    proc = fc("run", str(spec), "--db", str(tmp_path / "x.db"))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith(f"flowcore: {spec}:4:5: unknown step kind 'call_tol'")
    assert lines[1].startswith(f"flowcore: {spec}:6:13: unknown key 'ms'")
    typed = tmp_path / "typed.yaml"
    typed.write_text(
        "flow: typed\ninput_schema:\n  type: object\n  required: [a, b]\n"
        "steps:\n  - id: s\n    sleep: {for_ms: 1}\n"
    )
    proc = fc("run", str(typed), "--db", str(tmp_path / "y.db"), "--input", "{}")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 2, lines
    assert all(line.startswith("flowcore: input rejected by the input_schema") for line in lines)


def test_every_json_option_says_what_it_does() -> None:
    for command in ("show", "runs", "events", "validate", "replay"):
        help_text = ok(command, "--help")
        line = next(line for line in help_text.splitlines() if line.strip().startswith("--json"))
        assert len(line.split("--json", 1)[1].strip()) > 10, (command, line)


def test_a_missing_default_database_names_the_databases_nearby(tmp_path: Path) -> None:
    (tmp_path / "demo.db").write_bytes(b"")
    proc = fc("show", "demo", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "flowcore: no database at flowcore.db (start a run first, or pass --db); "
        "here: demo.db (pass --db FILE)"
    )


DOWN = """
def echo(call):
    return call.input


def down(call):
    raise RuntimeError("the charge service is down")


TOOLS = {"echo": echo, "charge": down}
"""
UP = """
def echo(call):
    return call.input


TOOLS = {"echo": echo, "charge": echo}
"""


def test_resume_retries_a_failed_run_from_its_failed_step(tmp_path: Path) -> None:
    spec = tmp_path / "pay.yaml"
    spec.write_text(PAY)
    (tmp_path / "down.py").write_text(DOWN)
    (tmp_path / "up.py").write_text(UP)
    db = str(tmp_path / "pay.db")
    proc = fc("run", str(spec), "--db", db, "--run-id", "p1", "--tools", str(tmp_path / "down.py"))
    assert proc.returncode == 1 and "the charge service is down" in proc.stdout
    # show keeps the handler's traceback (not on the wire).
    shown = ok("show", "p1", "--db", db)
    assert "handler failed: p1/b#1" in shown and "RuntimeError" in shown and "down.py" in shown
    proc = fc("resume", "p1", "--db", db, "--tools", str(tmp_path / "up.py"))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("resumed p1 at record "), lines
    assert not any("p1/a#1" in line for line in lines)  # a succeeded: not run again
    assert any(line.startswith("✓ p1/b#1") for line in lines), lines
    assert lines[-1] == 'output: {"b": 2, "c": 3}'
    assert "replays: every recorded effect" in ok("replay", "p1", "--db", db)
    # A run that did not fail cannot be resumed.
    proc = fc("resume", "p1", "--db", db)
    assert proc.returncode == 2 and proc.stderr.startswith("flowcore: ")
    assert "Traceback" not in proc.stderr


def test_run_checks_handlers_first_and_refuses_other_options_on_a_rerun(tmp_path: Path) -> None:
    spec = tmp_path / "pay.yaml"
    spec.write_text(PAY)
    (tmp_path / "up.py").write_text(UP)
    db = str(tmp_path / "pay.db")
    proc = fc("run", str(spec), "--db", db, "--run-id", "p1")  # no --tools
    assert proc.returncode == 2
    assert "no tools module was given" in proc.stderr and "Traceback" not in proc.stderr
    # Nothing was recorded: the same run id starts with the tools.
    out = ok("run", str(spec), "--db", db, "--run-id", "p1", "--tools", str(tmp_path / "up.py"))
    assert out.splitlines()[-1] == 'output: {"b": 2, "c": 3}'
    proc = fc("run", str(spec), "--db", db, "--run-id", "p1", "--input", '{"x": 1}')
    assert proc.returncode == 2 and "different input" in proc.stderr


def test_run_takes_a_budget(tmp_path: Path) -> None:
    spec = tmp_path / "pay.yaml"
    spec.write_text(PAY)
    (tmp_path / "up.py").write_text(UP)
    db = str(tmp_path / "pay.db")
    tools = ["--tools", str(tmp_path / "up.py")]
    proc = fc("run", str(spec), "--db", db, "--run-id", "b1", *tools, "--budget", '{"steps": 2}')
    assert proc.returncode == 1
    info = json.loads(ok("show", "b1", "--db", db, "--json"))
    assert info["status"] == "budget-exhausted"
    assert info["budget"]["stepsUsed"] == 2 and info["budget"]["stepsLeft"] == 0
    proc = fc("run", str(spec), "--db", db, *tools, "--budget", '{"stepz": 2}')
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "flowcore: --budget: unknown limit 'stepz'"
        " (one of steps, costMinorUnits, wallClockMs, tokens, toolCalls, turns)"
    )


def test_an_attached_run_works_only_its_own_run(tmp_path: Path) -> None:
    spec = tmp_path / "pay.yaml"
    spec.write_text(PAY)
    (tmp_path / "up.py").write_text(UP)
    db = str(tmp_path / "pay.db")
    tools = ["--tools", str(tmp_path / "up.py")]
    ok("run", str(spec), "--db", db, "--run-id", "other", *tools, "--detach")
    ok("run", str(spec), "--db", db, "--run-id", "mine", *tools)
    statuses = {r["runId"]: r["status"] for r in json.loads(ok("runs", "--db", db, "--json"))}
    assert statuses == {"other": "running", "mine": "completed"}


def test_the_worker_says_what_it_works_on_and_sums_up(tmp_path: Path) -> None:
    spec = tmp_path / "pay.yaml"
    spec.write_text(PAY)
    (tmp_path / "up.py").write_text(UP)
    (tmp_path / "down.py").write_text(DOWN)
    db = str(tmp_path / "pay.db")
    ok(
        "run",
        str(spec),
        "--db",
        db,
        "--run-id",
        "good",
        "--tools",
        str(tmp_path / "up.py"),
        "--detach",
    )
    ok(
        "run",
        str(spec),
        "--db",
        db,
        "--run-id",
        "bad",
        "--tools",
        str(tmp_path / "down.py"),
        "--detach",
    )
    lines = ok("worker", "--db", db, "--until-idle").splitlines()
    assert lines[0].startswith(f"worker on {db}: 2 run(s) running"), lines
    assert "✓ good/b#1" in lines and "■ good settled completed" in lines
    assert "■ bad settled failed" in lines
    failed = lines.index("■ bad settled failed")
    assert "the charge service is down" in lines[failed + 1]
    assert lines[-1] == "worker stopped: 2 run(s) settled (1 completed, 1 failed); 0 still running"


def test_answer_takes_a_relative_key_and_signal_refuses_an_undeclared_name(
    tmp_path: Path,
) -> None:
    spec = tmp_path / "wait.yaml"
    spec.write_text(WAIT)
    db = str(tmp_path / "w.db")
    ok("run", str(spec), "--db", db, "--run-id", "w1", "--detach")
    proc = fc("signal", "w1", "fix-deploy", "--db", db)
    assert proc.returncode == 2
    assert "fix-deploy" in proc.stderr and "fix-deployed" in proc.stderr
    proc = fc("answer", "w1", "nope#1", "yes", "--db", db)
    assert proc.returncode == 2 and "q#1" in proc.stderr  # the open questions are listed
    ok("signal", "w1", "fix-deployed", "--db", db)  # before the run waits for it: buffered
    info = json.loads(ok("show", "w1", "--db", db, "--json"))
    assert info["buffered"] == [{"signal": "fix-deployed", "payload": None}]
    assert "buffered signal: fix-deployed null" in ok("show", "w1", "--db", db)
    ok("answer", "w1", "q#1", "yes", "--db", db)  # relative to the run
    info = json.loads(ok("show", "w1", "--db", db, "--json"))
    assert info["questions"] == [] and info["status"] == "completed"
