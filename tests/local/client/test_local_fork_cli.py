"""``flowcore fork``, run for real in subprocesses against a real database file."""

from __future__ import annotations

import json
from pathlib import Path

from ..local_helpers import JOURNALED, journal, tools_file
from ..test_local_cli import bad, fc, ok
from .test_local_recovery_resume import FIXED, PAY

BROKEN = JOURNALED + 'TOOLS = {{"echo": echo, "charge": down}}\n'


def test_fork_a_failed_run_from_its_failing_step_then_work_export_and_replay_it(
    tmp_path: Path,
) -> None:
    spec = tmp_path / "pay.yaml"
    spec.write_text(PAY)
    v1 = tools_file(tmp_path, "v1_tools", BROKEN)
    v2 = tools_file(tmp_path, "v2_tools", FIXED)
    db = str(tmp_path / "f.db")
    failed = fc("run", str(spec), "--tools", str(v1), "--db", db, "--run-id", "pay")
    assert failed.returncode == 1, failed.stderr
    rid = ok("fork", "pay", "--from-step", "b", "--tools", str(v2), "--db", db).strip()
    info = json.loads(ok("show", rid, "--db", db, "--json"))
    assert info["status"] == "running"
    point = info["forkedFrom"]["index"]
    assert (rid, info["forkedFrom"]["runId"]) == (f"pay-fork-{point}", "pay")
    assert f"forked from pay at index {point}" in ok("show", rid, "--db", db)
    ok("worker", "--until-idle", "--db", db)
    info = json.loads(ok("show", rid, "--db", db, "--json"))
    assert (info["status"], info["output"]) == ("completed", {"b": {"echo": 2}, "c": {"echo": 3}})
    assert journal(tmp_path) == {"pay/a#1": 1, "pay/b#1": 1, f"{rid}/b#1": 1, f"{rid}/c#1": 1}
    log = tmp_path / "fork.ndjson"
    ok("export", rid, "--db", db, "-o", str(log))
    replayed = ok("replay", str(log), "--spec", str(spec))
    assert "completed" in replayed
    assert f"forked from run pay at index {point}" in replayed
    document = json.loads(ok("replay", rid, "--db", db, "--json"))
    assert (document["ok"], document["forkedFrom"]) == (True, {"runId": "pay", "index": point})
    assert "forkedFrom" not in json.loads(ok("replay", "pay", "--db", db, "--json"))
    # The source is left as it was.
    assert json.loads(ok("show", "pay", "--db", db, "--json"))["status"] == "failed"


def test_fork_at_an_index_with_follow_json_and_cancel_source(tmp_path: Path) -> None:
    spec = tmp_path / "wait.yaml"
    spec.write_text(
        """
flow: wait
tools: {echo: {class: readonly}}
steps:
  - {id: a, call_tool: {tool: echo, input: 1}}
  - {id: nap, sleep: {for_ms: 1}}
  - {id: c, call_tool: {tool: echo, input: 3}}
output: "${steps.c.output}"
"""
    )
    tools = tools_file(tmp_path, "tools", FIXED)
    db = str(tmp_path / "w.db")
    ok("run", str(spec), "--tools", str(tools), "--db", db, "--run-id", "w", "--detach")
    events = [json.loads(x) for x in ok("events", "w", "--db", db, "--json").splitlines()]
    at = len(events)  # before anything was reported: the end of the log
    args = ["--at", str(at), "--run-id", "w2", "--db", db]
    out = ok("fork", "w", *args, "--cancel-source", "--json")
    want = {"runId": "w2", "forkedFrom": {"runId": "w", "index": at}}
    assert json.loads(out.splitlines()[0]) == want
    assert json.loads(ok("show", "w", "--db", db, "--json"))["status"] == "cancelled"
    followed = ok("fork", "w", *args, "--follow")
    assert followed.splitlines()[0] == "w2"  # the same fork again, worked to the end
    assert '"echo": 3' in followed
    assert journal(tmp_path) == {"w2/a#1": 1, "w2/c#1": 1}


def test_bad_fork_arguments_are_one_line_errors(tmp_path: Path) -> None:
    spec = tmp_path / "pay.yaml"
    spec.write_text(PAY)
    v1 = tools_file(tmp_path, "v1_tools", BROKEN)
    db = str(tmp_path / "b.db")
    fc("run", str(spec), "--tools", str(v1), "--db", db, "--run-id", "pay")
    assert "exactly one of --at INDEX and --from-step" in bad("fork", "pay", "--db", db)
    both = bad("fork", "pay", "--at", "2", "--from-step", "b", "--db", db)
    assert "exactly one of" in both
    assert "index 1 (effect.emitted) is inside the decision of record 0" in bad(
        "fork", "pay", "--at", "1", "--db", db
    )
    assert "has no step 'zz'" in bad("fork", "pay", "--from-step", "zz", "--db", db)
    assert "no run 'nope'" in bad("fork", "nope", "--at", "2", "--db", db)
    assert "already exists" in bad("fork", "pay", "--from-step", "b", "--run-id", "pay", "--db", db)
