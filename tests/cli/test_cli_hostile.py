"""Hostile command lines: every one is refused with one short line and exit 2,
and nothing is recorded.

The issue's cases run the real ``flowcore`` command in a subprocess against
one local-host run waiting on two questions and a signal; non-UTF-8 arguments
are passed as bytes, as a shell would. After each refusal, ``flowcore show
--json`` and ``flowcore events`` (run in this process, for speed) must print
exactly what they printed when the run started. Large values go through
``--data @FILE`` and ``--data -`` (an argument cannot carry them). More cases
run the command in this process (``flowcore_cli.main.run``), which is the same
code without the start-up cost. ``flowcore temporal`` shares the parser and
the checks; its cases use an address where no server listens, so a refusal
proves that nothing was sent.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import pytest

from flowcore_cli._common import (
    MAX_JSON_TEXT_BYTES,
    MAX_LINE_CHARS,
    MAX_VALUE_BYTES,
    CliError,
    error_line,
    invoke,
    json_value,
)
from flowcore_cli.main import run as run_in_process

SPEC = """\
flow: hostile
steps:
  - id: p
    parallel:
      branches:
        ask: [{id: q, ask_human: {question: 'ship it?', options: ['yes', 'no']}}]
        free: [{id: note, ask_human: {question: 'any note?'}}]
        wait: [{id: w, await_signal: {signal: go}}]
output: "${steps.p.output}"
"""
SHORT = 300  # an error line quotes a short prefix of the input, never all of it
NOWHERE = "127.0.0.1:1"  # no Temporal server listens here
Arg = str | bytes


@dataclass(frozen=True)
class Result:
    code: int
    stdout: str
    stderr: str


def flowcore(*args: Arg, cwd: Path, stdin: bytes | None = None) -> Result:
    proc = subprocess.run(
        [sys.executable, "-m", "flowcore_cli", *args],
        input=stdin,
        capture_output=True,
        timeout=120,
        cwd=cwd,
        env=dict(os.environ),
        check=False,
    )
    # Strict decoding: an error line that is not UTF-8 fails the test here.
    return Result(proc.returncode, proc.stdout.decode(), proc.stderr.decode())


def refused(result: Result) -> str:
    """The one short error line of a refused command."""
    assert result.code == 2, result
    assert "Traceback" not in result.stderr + result.stdout
    assert "internal error" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr[:2000]
    line = lines[0]
    assert line.startswith("flowcore: "), line
    assert len(line) < SHORT, line
    return line


@dataclass(frozen=True)
class Db:
    """A database file with runs, and the ``flowcore`` command pointed at it."""

    path: Path

    def __call__(self, *args: Arg, stdin: bytes | None = None) -> Result:
        return flowcore(*args, "--db", str(self.path), cwd=self.path.parent, stdin=stdin)

    def ok(self, *args: Arg, stdin: bytes | None = None) -> str:
        result = self(*args, stdin=stdin)
        assert result.code == 0, result
        return result.stdout

    def start(self, run_id: str) -> None:
        spec = self.path.parent / "hostile.yaml"
        assert self.ok("run", str(spec), "--run-id", run_id, "--detach").strip() == run_id

    def state(self, run_id: str) -> bytes:
        """What ``show --json`` and ``events`` print: changes if anything was recorded."""
        out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
        with contextlib.redirect_stdout(out):
            for command in ("show", "--json"), ("events", "--json"):
                assert (
                    run_in_process([command[0], run_id, *command[1:], "--db", str(self.path)]) == 0
                )
        out.flush()
        return out.buffer.getvalue()

    def records(self, run_id: str) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.ok("events", run_id, "--json").splitlines()]


@dataclass(frozen=True)
class Waiting:
    """Run w1 of ``db``, waiting on q (yes/no), note (any answer) and signal go."""

    db: Db
    state: bytes


@pytest.fixture(scope="module")
def waiting(tmp_path_factory: pytest.TempPathFactory) -> Waiting:
    folder = tmp_path_factory.mktemp("hostile")
    (folder / "hostile.yaml").write_text(SPEC)
    db = Db(folder / "hostile.db")
    db.start("w1")
    info = json.loads(db.ok("show", "w1", "--json"))
    assert [q["key"] for q in info["questions"]] == ["w1/q#1", "w1/note#1"]
    assert info["waitingFor"] == ["go"]
    return Waiting(db, db.state("w1"))


@pytest.fixture
def db(waiting: Waiting) -> Db:
    return waiting.db


@pytest.fixture
def unchanged(waiting: Waiting) -> Iterator[Db]:
    """The database, and a check after the test that run w1 recorded nothing."""
    yield waiting.db
    assert waiting.db.state("w1") == waiting.state, "a refused command changed run w1"


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("values")
    allowed = {"blob": "x" * (MAX_VALUE_BYTES - 100)}  # just under the limit
    over = {"blob": "x" * MAX_VALUE_BYTES}  # just over it
    paths = {
        "allowed": json.dumps(allowed),
        # Indentation makes the text larger than the value: still accepted.
        "pretty": json.dumps({"items": ["x"] * 100_000}, indent=8),
        "over": json.dumps(over),
        "huge": json.dumps("y" * (10 << 20)),  # a 10 MiB answer
        "nan": '{"a": [1, NaN]}',
    }
    out = {}
    for name, text in paths.items():
        out[name] = folder / f"{name}.json"
        out[name].write_text(text)
    return out


# --- the issue's cases -------------------------------------------------------------------

NESTED = "[" * 50_000 + "]" * 50_000
ISSUE_CASES: list[tuple[list[Arg], str]] = [
    # The whole answer was echoed; now a short prefix (and its length).
    (["answer", "w1", "w1/q#1", "y" * 100_000], "(100,000 characters) is not one of"),
    # Not UTF-8: refused at the door, naming the argument, before any lookup.
    (["show", b"w1\xff"], r"argument 2 'w1\xff' is not valid UTF-8"),
    (["signal", "w1", b"g\xff"], r"argument 3 'g\xff' is not valid UTF-8"),
    (["answer", "w1", "w1/q#1", b"y\xffs"], r"argument 4 'y\xffs' is not valid UTF-8"),
    (["signal", "w1", "go", "--data", '"\\ud800"'], "--data at $: string '\\ud800' holds a lone"),
    (["signal", "w1", "go", "--data", NESTED], "--data is nested too deeply"),
    (["signal", "w1", "go", "--data", "NaN"], "--data at $: nan is not a JSON number"),
    (["signal", "w1", "go", "--data", "[1e999]"], "--data at $[0]: inf is not a JSON number"),
]


@pytest.mark.parametrize(
    ("args", "expected"),
    ISSUE_CASES,
    ids=["long-answer", "run-id", "signal-name", "answer", "surrogate", "nested", "nan", "1e999"],
)
def test_the_issues_cases_are_one_short_line_and_record_nothing(
    unchanged: Db, args: list[Arg], expected: str
) -> None:
    line = refused(unchanged(*args))
    assert expected in line, line


MORE_CASES: list[tuple[list[Arg], str]] = [
    # msgspec keeps the last of two values for one key: a silent rewrite.
    (["signal", "w1", "go", "--data", '{"a": 1, "a": 2}'], "key 'a' appears twice"),
    (["signal", "w1", "go", "--data", str(2**64)], "outside the 64-bit range"),
    (["signal", "w1", "go", "--data", "{oops"], "--data is not valid JSON"),
    (["signal", "w1", "go", "--data", ""], "--data is empty"),
    (["signal", "w1", "x" * 5000], "NAME: 'xxxx"),
    (["answer", "w1", "k" * 5000, "yes"], "KEY: 'kkkk"),
    (["show", "r" * 100_000], "RUN_ID: 'rrrr"),
    (["answer", "w1", "w1/q#1"], "give the answer as ANSWER (text) or as --data JSON"),
    (["answer", "w1", "w1/q#1", "yes", "--data", '"yes"'], "not both"),
    # An option's value, and the --opt=value form, are named too.
    (["events", "w1", "--start-index", b"1\xff"], r"'1\xff' (after --start-index)"),
    ([b"--no-such=\xfe", "show", "w1"], r"argument 1 '--no-such=\xfe' is not valid UTF-8"),
    # Control characters in an echoed argument are escaped: the line stays inert.
    (["no-such\x1b[2J"], r"No such command 'no-such\x1b[2J'"),
]


def test_more_bad_values_and_names_in_process(
    unchanged: Db, files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    from_files: list[tuple[list[Arg], str]] = [
        (["answer", "w1", "w1/note#1", "--data", f"@{files['huge']}"], "more than 4,194,304"),
        (["signal", "w1", "go", "--data", f"@{files['huge']}.no"], "json.no: no such file"),
        (["signal", "w1", "go", "--data", f"@{files['huge'].parent}"], "is a directory"),
    ]
    for args, expected in MORE_CASES + from_files:
        # As Python hands a command line over: undecodable bytes as surrogates.
        argv = [os.fsdecode(a) for a in args] + ["--db", str(unchanged.path)]
        code = run_in_process(argv)
        captured = capsys.readouterr()
        line = refused(Result(code, captured.out, captured.err))
        assert expected in line, (args, line)


# --- values from files and standard input ------------------------------------------------


def test_a_large_allowed_payload_from_a_file_and_from_standard_input(
    db: Db, files: dict[str, Path]
) -> None:
    db.start("big")
    db.ok("signal", "big", "go", "--data", f"@{files['allowed']}")
    db.ok("answer", "big", "big/note#1", "--data", "-", stdin=files["pretty"].read_bytes())
    reported = [r["data"] for r in db.records("big") if r["type"] == "event.reported"]
    assert reported[0]["payload"] == json.loads(files["allowed"].read_text())
    assert reported[1]["answer"] == json.loads(files["pretty"].read_text())


def test_a_large_run_input_from_a_file(db: Db, files: dict[str, Path]) -> None:
    spec = db.path.parent / "hostile.yaml"
    db.ok("run", str(spec), "--run-id", "in", "--detach", "--input", f"@{files['allowed']}")
    started = db.records("in")[0]
    assert started["data"]["input"] == json.loads(files["allowed"].read_text())


@pytest.mark.parametrize(
    ("args", "source", "expected"),
    [
        (["signal", "w1", "go", "--data"], "@over", "the value is 983,0"),
        (["signal", "w1", "go", "--data"], "-over", "the value is 983,0"),
        (["answer", "w1", "w1/note#1", "--data"], "-huge", "more than 4,194,304 bytes"),
        (["signal", "w1", "go", "--data"], "@nan", "nan.json at $.a[1]: nan is not a JSON"),
    ],
)
def test_values_over_the_limit_or_bad_in_a_file_or_on_standard_input(
    unchanged: Db, files: dict[str, Path], args: list[str], source: str, expected: str
) -> None:
    name = source[1:]
    path = files.get(name, files["nan"].parent / f"{name}.json")
    if source.startswith("@"):
        result = unchanged(*args, f"@{path}")
    else:
        result = unchanged(*args, "-", stdin=path.read_bytes())
    line = refused(result)
    assert expected in line, line


def test_a_run_with_a_bad_input_is_not_started(db: Db, files: dict[str, Path]) -> None:
    spec = db.path.parent / "hostile.yaml"
    runs = db.ok("runs", "--json")
    line = refused(db("run", str(spec), "--run-id", "no", "--input", "-", stdin=b"[1e999]"))
    assert "--input - (standard input) at $[0]: inf" in line
    line = refused(db("run", str(spec), "--run-id", "no", "--input", f"@{files['over']}"))
    assert "over the limit of 983,040" in line
    assert db.ok("runs", "--json") == runs


# --- flowcore temporal: the same parser and checks, before anything is sent --------------


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["signal", "w1", b"g\xff"], r"argument 4 'g\xff' is not valid UTF-8"),
        (["signal", "w1", "go", "--data", "NaN"], "--data at $: nan is not a JSON number"),
        (["signal", "w1", "go", "--data", NESTED], "--data is nested too deeply"),
        (["answer", "w1", "w1/note#1", "--data", "[1e999]"], "--data at $[0]: inf"),
        (["run", "SPEC", "--input", '"\\udc00"'], "--input at $: string '\\udc00'"),
        (["show", b"w1\xff"], r"argument 3 'w1\xff' is not valid UTF-8"),
    ],
)
def test_temporal_commands_refuse_before_connecting(
    tmp_path: Path, args: list[Arg], expected: str
) -> None:
    spec = tmp_path / "hostile.yaml"
    spec.write_text(SPEC)
    args = [str(spec) if a == "SPEC" else a for a in args]
    line = refused(flowcore("temporal", *args, "--address", NOWHERE, cwd=tmp_path))
    # Had the command got as far as connecting, it would say it cannot reach a server.
    assert expected in line, line


def test_temporal_reads_data_from_a_file_before_connecting(
    tmp_path: Path, files: dict[str, Path]
) -> None:
    pytest.importorskip("temporalio", reason="connecting needs temporalio (.[dev])")
    signal = ["temporal", "signal", "w1", "go", "--address", NOWHERE, "--data"]
    line = refused(flowcore(*signal, f"@{files['over']}", cwd=tmp_path))
    assert "over the limit of 983,040" in line
    # An allowed value is read and checked; only then does the server matter.
    line = refused(flowcore(*signal, f"@{files['allowed']}", cwd=tmp_path))
    assert line.startswith(f"flowcore: cannot reach the Temporal server at {NOWHERE}"), line


# --- the shared parser and error lines, in process ---------------------------------------


def test_json_value_accepts_data_exactly_as_written(tmp_path: Path) -> None:
    assert json_value(None, "--data") is None
    assert json_value("null", "--data") is None
    text = '{"n": 9223372036854775807, "f": 1.5, "s": "\\ud83d\\ude00", "l": [true, {}]}'
    assert json_value(text, "--data") == {
        "n": 2**63 - 1,
        "f": 1.5,
        "s": "\U0001f600",
        "l": [True, {}],
    }
    path = tmp_path / "v.json"
    path.write_text(' [1, "two"]\n')
    assert json_value(f"@{path}", "--input") == [1, "two"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("-9223372036854775809", "outside the 64-bit range"),
        ("[Infinity]", "at $[0]: inf is not a JSON number"),
        ('{"a": {"b": [1, 2, {"c": -1e999}]}}', "at $.a.b[2].c: -inf"),
        ("[" * 65 + "]" * 65, "nested deeper than 64 levels"),
        ('{"k": "\\udfff"}', "at $.k: string '\\udfff' holds a lone surrogate"),
        ('[{"a": 1}, {"b": 1, "b": 1}]', "key 'b' appears twice"),
        ("1 2", "--data is not valid JSON: JSON is malformed: trailing characters"),
        ("\ud800", "--data is not valid UTF-8"),
        ("@", "name the file after the @"),
        (json.dumps("z" * MAX_VALUE_BYTES), "over the limit of 983,040"),
        (" " * (MAX_JSON_TEXT_BYTES + 1), "more than 4,194,304 bytes of JSON text"),
    ],
)
def test_json_value_refuses_what_is_not_flowcore_data(text: str, expected: str) -> None:
    with pytest.raises(CliError) as caught:
        json_value(text, "--data")
    message = caught.value.message
    assert expected in message, message
    assert len(error_line(message)) < SHORT


def test_every_error_line_is_bounded_and_printable(capsys: pytest.CaptureFixture[str]) -> None:
    line = error_line("no run '" + "r" * 100_000 + "\udcff\n' in the database")
    assert len(line) <= MAX_LINE_CHARS + 10
    assert line.startswith("flowcore: no run 'rrr") and line.endswith("\\udcff\\n' in the database")
    line.encode("utf-8")  # printable anywhere

    @click.command()
    def boom() -> None:
        raise RuntimeError("\udcff" + "x" * 10_000_000)

    assert invoke(boom, [], "flowcore") == 2
    err = capsys.readouterr().err
    assert err.startswith("flowcore: internal error: RuntimeError: \\udcffxxx")
    assert err.count("\n") == 1 and len(err) < SHORT
