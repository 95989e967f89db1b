"""The command line derived from the catalogue of operations (``flowcore_cli._derive``).

Every operation with command words is a command whose ``--help`` lists every
field of its input; ``--json`` prints its output, which decodes as the
operation's output type; the host is chosen by options or the environment.
Run in process against the local host on a real SQLite file.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from flowcore_cli._derive import HostChoice, host_choice
from flowcore_cli._views import VIEWS
from flowcore_cli.main import run
from flowcore_ops import CATALOGUE, Operation

SPEC = """\
flow: catalogued
steps:
  - {id: q, ask_human: {question: 'ship it?', options: ['yes', 'no']}}
  - {id: w, await_signal: {signal: go}}
  - {id: k, await_signal: {signal: pay, key: "order-${input.order}"}}
output: "${steps.w.output}"
"""
COMMANDS = [op for op in CATALOGUE if op.command is not None]


def _fields(op: Operation) -> list[msgspec.inspect.Field]:
    info = msgspec.inspect.type_info(op.input)
    assert isinstance(info, msgspec.inspect.StructType)
    return list(info.fields)


Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def cli(capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Run:
    """``flowcore ARGS`` in this process: (exit code, stdout, stderr)."""
    monkeypatch.delenv("FLOWCORE_TEMPORAL_ADDRESS", raising=False)
    monkeypatch.delenv("FLOWCORE_DB", raising=False)

    def call(*args: str) -> tuple[int, str, str]:
        capfd.readouterr()
        code = run(list(args))
        got = capfd.readouterr()
        return code, got.out, got.err

    return call


@pytest.mark.parametrize("op", COMMANDS, ids=[op.name for op in COMMANDS])
def test_every_command_of_the_catalogue_lists_every_input_field(cli: Run, op: Operation) -> None:
    assert op.command is not None
    code, text, err = cli(*op.command, "--help")
    assert code == 0, err
    usage = text.split("\n\n", 1)[0]
    view = VIEWS[op.name]
    for field in _fields(op):
        if field.name in op.arguments and field.name not in view.names:
            metavar = view.metavars.get(field.name, (field.name.upper(),))[0]
            assert re.search(rf"\b{metavar}\b", usage), (op.name, field.name, usage)
        elif field.name not in view.hidden:
            spellings = view.names.get(field.name, ("--" + field.name.replace("_", "-"),))
            # (a flag pair "--wait/--no-wait" is listed as both)
            words = [w for s in spellings for w in s.split("/")]
            assert all(re.search(rf"{w}\b", text) for w in words), (op.name, field.name)
    for option in ("--json", "--db", "--address", "--namespace", "--task-queue", "--temporal"):
        assert option in text, (op.name, option)


def test_flowcore_temporal_has_every_command_of_the_catalogue(cli: Run) -> None:
    for op in COMMANDS:
        assert op.command is not None
        code, text, err = cli("temporal", *op.command, "--help")
        assert code == 0, (op.name, err)
        assert "--address" in text and "--db FILE" not in text, op.name


def _decoded(op_name: str, text: str) -> Any:
    op = next(op for op in CATALOGUE if op.name == op_name)
    return msgspec.json.decode(text.strip().splitlines()[-1], type=op.output)


def test_json_output_decodes_as_each_operations_output_type(cli: Run, tmp_path: Path) -> None:
    spec = tmp_path / "catalogued.yaml"
    spec.write_text(SPEC)
    db = ("--db", str(tmp_path / "cat.db"))

    def ok(*args: str) -> str:
        code, out, err = cli(*args, *db)
        assert code == 0, (args, err)
        return out

    started = _decoded(
        "start", ok("start", str(spec), "--run-id", "r1", "--input", '{"order": 7}', "--json")
    )
    assert (started.run_id, started.status, started.depth) == ("r1", "running", 0)
    ok("start", str(spec), "--run-id", "r2", "--input", '{"order": 8}')
    asked = _decoded("questions", ok("questions", "r1", "--json"))
    assert [q.key for q in asked.questions] == ["r1/q#1"]
    assert "question: r1/q#1: ship it? ['yes', 'no']" in ok("questions", "r1")
    waits = _decoded("waits", ok("waits", "r1", "--json"))
    assert [q["key"] for q in waits["questions"]] == ["r1/q#1"]
    shown = _decoded("show", ok("show", "r1", "--json"))
    assert shown.run.run_id == "r1" and shown.run.status == "running"
    assert json.loads(ok("show", "r1", "--json"))["questions"][0]["key"] == "r1/q#1"
    answered = _decoded("answer", ok("answer", "r1", "q#1", "yes", "--json"))
    assert answered.run_id == "r1"
    signalled = _decoded("signal", ok("signal", "r1", "go", '"now"', "--json"))
    assert signalled.run_id == "r1"
    # A keyed signal to the runs that wait for it: by its own command, or by `signal --key`.
    code, _, err = cli("signal", "pay", "--key", "order-8", *db)  # r2 has not reached it
    assert (code, err) == (
        2,
        "flowcore: no running run waits for signal 'pay' with key 'order-8'\n",
    )
    keyed = _decoded("signal-key", ok("signal-key", "pay", "order-7", "--json"))
    assert keyed.runs in ([], ["r1"])
    records = _decoded(
        "events", json.dumps([json.loads(x) for x in ok("events", "r1", "--json").splitlines()])
    )
    assert records[0].type == "run.started"
    # The log is NDJSON already: --json writes it as it is (not base64 in a string).
    exported = ok("export", "r1", "--json")
    assert exported == ok("export", "r1") and exported.startswith('{"type":"run.started"')
    cancelled = _decoded("cancel", ok("cancel", "r2", "--reason", "enough", "--json"))
    assert cancelled.run_id == "r2"
    # fork keeps its document of before the catalogue: the new run's id and where it forked
    forked = json.loads(ok("fork", "r1", "--from-step", "w", "--run-id", "r3", "--json"))
    assert (forked["runId"], forked["forkedFrom"]["runId"], len(forked)) == ("r3", "r1", 2)
    upgraded = _decoded("upgrade", ok("upgrade", "r3", "--to", str(spec), "--dry-run", "--json"))
    assert (upgraded.run_id, upgraded.changed, upgraded.moved) == ("r3", False, False)
    # scheduled list (and runs) keep their JSON list: the output's calls
    calls = json.loads(ok("scheduled", "list", "r1", "--json"))
    listed = _decoded("scheduled.list", json.dumps({"calls": calls}))
    assert listed.calls == []
    ok("cancel", "r3")
    deleted = _decoded("delete", ok("delete", "r3", "--json"))
    assert deleted.runs == ["r3"] and not deleted.dry_run
    pruned = _decoded("prune", ok("prune", "--settled-before", "0s", "--dry-run", "--json"))
    assert pruned.dry_run
    # --settled-before also takes an instant
    before = json.loads(ok("prune", "--settled-before", "2000-01-01T00:00:00Z", "--json"))
    assert (before["settledBeforeMs"], before["roots"]) == (946_684_800_000, [])


def test_bad_values_are_refused_by_the_input_type_naming_the_option(
    cli: Run, tmp_path: Path
) -> None:
    db = ("--db", str(tmp_path / "none.db"))
    code, _, err = cli("events", "r1", "--start-index", "-1", *db)
    assert code == 2 and err.startswith("flowcore: --start-index: Expected `int` >= 0"), err
    code, _, err = cli("prune", "--settled-before", "soon", *db)
    assert code == 2 and err.startswith("flowcore: --settled-before: "), err
    assert len(err.splitlines()) == 1
    code, _, err = cli("show", "r1", *db)
    assert code == 2 and err.startswith(f"flowcore: no database at {tmp_path / 'none.db'}"), err


def test_an_operation_error_is_one_line_and_its_exit_code(cli: Run, tmp_path: Path) -> None:
    spec = tmp_path / "catalogued.yaml"
    spec.write_text(SPEC)
    db = ("--db", str(tmp_path / "cat.db"))
    assert cli("start", str(spec), "--run-id", "r1", "--input", '{"order": 1}', *db)[0] == 0
    code, _, err = cli("show", "nope", *db)
    assert (code, err) == (2, "flowcore: no run 'nope' in the database\n")
    assert cli("cancel", "r1", *db)[0] == 0
    code, _, err = cli("cancel", "r1", *db)  # nothing to cancel: exit 1, as ever
    assert code == 1 and "already settled" in err and len(err.splitlines()) == 1, err
    code, _, err = cli("start", str(tmp_path / "missing.yaml"), *db)
    assert (code, err) == (2, f"flowcore: {tmp_path / 'missing.yaml'}: no such spec file\n")


def test_the_host_is_chosen_by_options_or_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import click

    from flowcore_cli._derive import command

    def chosen(*args: str, temporal: bool = False) -> HostChoice:
        cmd = command("show", temporal)
        ctx = cmd.make_context("show", ["r1", *args])
        return host_choice(ctx, dict(ctx.params), temporal)

    monkeypatch.delenv("FLOWCORE_TEMPORAL_ADDRESS", raising=False)
    monkeypatch.delenv("FLOWCORE_DB", raising=False)
    assert chosen() == HostChoice(temporal=False, db=Path("flowcore.db"))
    assert chosen("--db", "x.db").db == Path("x.db")
    assert chosen("--temporal") == HostChoice(temporal=True)
    picked = chosen("--address", "h:1", "--namespace", "n")
    assert (picked.temporal, picked.address, picked.namespace) == (True, "h:1", "n")
    assert chosen(temporal=True).temporal
    monkeypatch.setenv("FLOWCORE_DB", str(tmp_path / "env.db"))
    assert chosen().db == tmp_path / "env.db"
    monkeypatch.setenv("FLOWCORE_TEMPORAL_ADDRESS", "t:7233")
    assert chosen() == HostChoice(temporal=True, db=tmp_path / "env.db", address="t:7233")
    assert not chosen("--db", "x.db").temporal  # a --db given names the local host
    with pytest.raises(click.ClickException, match="--db names a local database"):
        chosen("--db", "x.db", "--address", "h:1")


SCHEDULED_SPEC = """\
flow: ticking
steps:
  - {id: nap, sleep: {for_ms: 10}}
schedules:
  hourly:
    every: 1h
"""


def test_the_schedule_commands_on_the_local_host(cli: Run, tmp_path: Path) -> None:
    spec = tmp_path / "ticking.yaml"
    spec.write_text(SCHEDULED_SPEC)
    db = ("--db", str(tmp_path / "s.db"))
    # --flows names more spec files for Temporal's schedules: refused here, one line.
    code, _, err = cli("schedule", "add", "--spec", str(spec), "--flows", str(spec), *db)
    assert (code, err) == (
        2,
        "flowcore: --flows: only Temporal's schedules take more spec files\n",
    )
    code, out, err = cli("schedule", "add", "--spec", str(spec), "--json", *db)
    assert code == 0, err
    assert [info["name"] for info in json.loads(out)] == ["hourly"]
    code, out, _ = cli("schedule", "list", "--json", *db)
    assert ["actions" in info for info in json.loads(out)] == [False]  # show --json has them
    code, out, _ = cli("schedule", "trigger", "hourly", "--json", *db)
    assert json.loads(out) == {"name": "hourly", "runId": "hourly@trigger-1"}
    code, out, _ = cli("schedule", "delete", "hourly", "--json", *db)
    assert json.loads(out) == {"name": "hourly", "deleted": True}
    code, _, err = cli("schedule", "pause", "hourly", *db)
    assert (code, err) == (2, "flowcore: no schedule 'hourly' in the database\n")
    # `flowcore temporal schedule add` is the same command, Temporal chosen.
    code, text, _ = cli("temporal", "schedule", "add", "--help")
    assert code == 0 and "--spec" in text and "--flows" in text and "--db FILE" not in text
