"""``flowcore replay LOG`` of an exported log finds its spec by the hash the log
records: under ``--specs DIR``, in the database that ran it (``--db``, or
``$FLOWCORE_DB``), and says what to pass when it is nowhere (specs/cli.md).

A real run on the local host, exported; the command runs in this process."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import flowcore
from flowcore_cli.main import run as run_in_process

SPEC = """\
flow: greet
tools: {lookup: {class: readonly}}
steps:
  - id: who
    call_tool: {tool: lookup, input: {id: "${input.user}"}}
output: "${steps.who.output.name}"
"""
# Another version of the same flow: another hash, another effect.
NEWER = SPEC.replace("output:", "version: 2\noutput:").replace("input: {id:", "input: {key:")
TOOLS = """\
def lookup(call):
    return {"name": "Ada"}


TOOLS = {"lookup": lookup}
"""


@pytest.fixture
def exported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """(the run's database, its log exported alone into a folder of its own); the
    working directory holds no ``flowcore.db``."""
    monkeypatch.delenv("FLOWCORE_DB", raising=False)
    monkeypatch.chdir(tmp_path)  # no flowcore.db here
    work = tmp_path / "work"
    work.mkdir()
    (work / "greet.yaml").write_text(SPEC)
    (work / "greet_tools.py").write_text(TOOLS)
    db = tmp_path / "runs.db"
    common = ["--db", str(db)]
    start = ["run", str(work / "greet.yaml"), "--input", '{"user": "u-1"}', "--run-id", "g-1"]
    assert run_in_process([*start, "--tools", str(work / "greet_tools.py"), *common]) == 0
    logs = tmp_path / "logs"
    logs.mkdir()
    log = logs / "g-1.ndjson"
    assert run_in_process(["export", "g-1", "-o", str(log), *common]) == 0
    shutil.rmtree(work)  # the spec file is gone: only the database keeps it
    return db, log


def replayed(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, object]:
    capsys.readouterr()
    assert run_in_process(["replay", *args, "--json"]) == 0, capsys.readouterr().err
    report: dict[str, object] = json.loads(capsys.readouterr().out)
    return report


def test_an_exported_log_replays_against_the_spec_its_database_stores(
    exported: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    db, log = exported
    report = replayed(capsys, str(log), "--db", str(db))
    assert report["ok"] and report["specMatches"] and report["status"] == "completed"
    assert report["specHash"] == flowcore.parse_flow(SPEC).spec_hash


def test_the_database_named_by_the_environment_is_searched_too(
    exported: tuple[Path, Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    db, log = exported
    monkeypatch.setenv("FLOWCORE_DB", str(db))
    assert replayed(capsys, str(log))["specMatches"]
    # A spec of the flow next to the log comes first (the version question).
    (log.parent / "greet.yaml").write_text(NEWER)
    capsys.readouterr()
    assert run_in_process(["replay", str(log), "--json"]) == 1  # v2 acts otherwise
    report = json.loads(capsys.readouterr().out)
    assert report["replayedSpecHash"] == flowcore.parse_flow(NEWER).spec_hash


def test_specs_dir_gives_the_version_with_the_log_s_hash(
    exported: tuple[Path, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    _, log = exported
    specs = tmp_path / "deployed"
    (specs / "v1").mkdir(parents=True)
    (specs / "v2").mkdir()
    (specs / "v1" / "greet.yaml").write_text(SPEC)
    (specs / "v2" / "greet.yaml").write_text(NEWER)  # sorts after v1, but another hash
    (specs / "notes.yaml").write_text("not: [a spec")
    report = replayed(capsys, str(log), "--specs", str(specs))
    assert report["ok"] and report["specMatches"]
    assert report["replayedSpecHash"] == flowcore.parse_flow(SPEC).spec_hash
    # Only v2 there: not the log's spec, and no database to look in. The paths
    # are relative (exported works in tmp_path): an error line is cut past 400
    # characters, and a temporary directory may be long (one per xdist worker).
    shutil.rmtree(specs / "v1")
    assert run_in_process(["replay", "logs/g-1.ndjson", "--specs", "deployed"]) == 2
    err = capsys.readouterr().err
    assert "the spec files under deployed" in err and "next to the log" in err, err


def test_found_nowhere_the_error_says_what_to_pass(
    exported: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _, log = exported
    capsys.readouterr()
    assert run_in_process(["replay", str(log)]) == 2
    err = capsys.readouterr().err.strip()
    digest = flowcore.parse_flow(SPEC).spec_hash[:12]
    assert f"no spec for flow 'greet' (spec hash {digest}) found (searched next to the log)" in err
    assert "pass --spec SPEC" in err and "--specs DIR" in err and "--db DB" in err
    assert len(err.splitlines()) == 1  # one line, no traceback


def test_a_run_id_with_db_still_reads_the_run_from_the_database(
    exported: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    db, _ = exported
    report = replayed(capsys, "g-1", "--db", str(db))
    assert report["runId"] == "g-1" and report["ok"]
