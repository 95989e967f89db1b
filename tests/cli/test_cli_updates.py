"""Updates and queries on the command line, against the local host (a real SQLite
file; the commands run in process): ``update`` prints the reply or how to fetch
it, a refusal prints why and writes nothing, ``update-result``, ``updates``,
``query``, ``update-with-start``, ``signal-with-start``, and ``flows`` naming
what a flow declares (cli.md)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from flowcore_cli.main import run

Call = Callable[..., tuple[int, str, str]]  # argv -> exit code, stdout, stderr

FLOW = """
flow: ok
version: 1
updates:
  approve:
    description: Ask a person
    input_schema: {type: object, properties: {by: {type: string}}, required: [by]}
    validator: "update.input.by != 'mallory'"
    examples: [{by: alice}]
    steps:
      - id: q
        ask_human: {question: "ok?", options: ["yes", "no"]}
    reply: "${ {answer: steps.q.answer, by: update.input.by} }"
  echo:
    reply: "${update.input}"
queries:
  stage:
    description: Where it is
    value: "${ {status: status, args: args} }"
steps:
  - {id: go, await_signal: {signal: go}}
output: "${steps.go.output}"
"""


@pytest.fixture
def cli(tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Call:
    monkeypatch.delenv("FLOWCORE_TEMPORAL_ADDRESS", raising=False)
    monkeypatch.delenv("FLOWCORE_DB", raising=False)
    db = str(tmp_path / "u.db")

    def call(*argv: str) -> tuple[int, str, str]:
        capfd.readouterr()
        code = run([*argv, "--db", db])
        out, err = capfd.readouterr()
        return code, out, err

    return call


def test_update_prints_the_reply_or_how_to_fetch_it_and_refusals_say_why(
    tmp_path: Path, cli: Call
) -> None:
    call = cli
    spec = tmp_path / "ok.yaml"
    spec.write_text(FLOW)
    assert call("start", str(spec), "--run-id", "r")[0] == 0
    code, out, _ = call("update", "r", "echo", "--input", '{"a": 1}', "--id", "e1")
    assert (code, json.loads(out)) == (0, {"a": 1})
    code, out, _ = call(
        "update", "r", "approve", "--input", '{"by": "bob"}', "--id", "u1", "--no-wait"
    )
    assert code == 0
    assert out.strip() == (
        "update u1 of run r is running: `flowcore update-result r u1 --wait` waits for its reply"
    )
    code, events_before, _ = call("events", "r", "--json")
    code, _, err = call("update", "r", "approve", "--input", '{"by": "mallory"}')
    assert code == 1
    assert (
        err
        == "flowcore: update 'approve' refused by its validator \"update.input.by != 'mallory'\"\n"
    )
    code, _, err = call("update", "r", "approve", "--input", '{"who": 1}')
    assert code == 1 and err.startswith("flowcore: ") and err.endswith(" (bad-input)\n")
    code, _, err = call("update", "r", "nope")
    assert code == 2 and "nope" in err
    assert call("events", "r", "--json")[1] == events_before
    assert call("answer", "r", "q", "yes")[0] == 0
    code, out, _ = call("update-result", "r", "u1")
    assert (code, json.loads(out)) == (0, {"answer": "yes", "by": "bob"})
    code, out, _ = call("update-result", "r", "u1", "--json")
    assert json.loads(out)["status"] == "completed"
    code, _, err = call("update-result", "r", "nope")
    assert code == 2 and "no update 'nope'" in err
    code, out, _ = call("updates", "r")
    assert [line.split()[:3] for line in out.splitlines()] == [
        ["e1", "echo", "completed"],
        ["u1", "approve", "completed"],
    ]
    code, out, _ = call("show", "r", "--no-history")
    assert 'update e1 (echo): completed: {"a":1}' in out
    assert 'update u1 (approve): completed: {"answer":"yes","by":"bob"}' in out
    code, out, _ = call("query", "r", "stage", "--args", '{"x": 1}')
    assert (code, json.loads(out)) == (0, {"status": "running", "args": {"x": 1}})
    code, _, err = call("query", "r", "nope")
    assert code == 2 and "nope" in err
    # The log shows each request as a line of its own.
    code, out, _ = call("events", "r")
    assert code == 0
    assert '⇢ update echo e1 requested input {"a":1}' in out
    assert '⇢ update approve u1 requested input {"by":"bob"}' in out


def test_update_and_signal_with_start(tmp_path: Path, cli: Call) -> None:
    call = cli
    spec = tmp_path / "ok.yaml"
    spec.write_text(FLOW)
    argv = ["update-with-start", str(spec), "echo", "--run-id", "w", "--update-input", "5"]
    code, out, err = call(*argv, "--id", "x1")
    assert (code, out.strip()) == (0, "5"), err
    code, _, err = call(*argv, "--on-conflict", "refuse")
    assert code == 2 and "already exists" in err
    code, out, _ = call("signal-with-start", str(spec), "go", "--run-id", "s", "--payload", "7")
    assert (code, out.strip()) == (0, "s")
    code, out, _ = call("show", "s", "--json")
    shown = json.loads(out)  # started and signalled at once: its wait took the signal
    assert (shown["run"]["status"], shown["output"]) == ("completed", 7)
    code, out, _ = call("flows", "--flows", str(spec))
    assert "  update approve: Ask a person" in out
    assert "  query stage: Where it is" in out
    code, out, _ = call("flows", "--flows", str(spec), "--json")
    flow = json.loads(out)["flows"][0]
    assert flow["updates"][0] == {
        "name": "approve",
        "description": "Ask a person",
        "inputSchema": {
            "type": "object",
            "properties": {"by": {"type": "string"}},
            "required": ["by"],
        },
        "examples": [{"by": "alice"}],
    }
    assert [q["name"] for q in flow["queries"]] == ["stage"]
