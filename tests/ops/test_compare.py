"""``compare``: two runs' logs side by side on the local host (a real SQLite
file). Records are the same when their type and data are, once times, each
run's own id and a fork's ``forkedFrom`` are left out; the first index where
they are not is reported with both records and what differs there."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from flowcore_cli.main import run
from flowcore_local import LocalHost
from flowcore_ops import BY_NAME, Comparison, Context, OperationError, Principal

from ..local.local_helpers import work_until

FLOW = """
flow: pick
tools: {echo: {class: readonly}}
steps:
  - id: decide
    ask_human: {question: "Which?", options: ["a", "b"]}
  - id: say
    call_tool: {tool: echo, input: "${steps.decide.answer}"}
  - {id: nap, sleep: {for_ms: 1}}
output: "${steps.say.output}"
"""

TOOLS = """
def echo(call):
    return call.input


TOOLS = {"echo": echo}
"""


async def _answered(host: LocalHost, folder: Path, run_id: str, answer: str) -> None:
    """Start ``run_id``, answer its question ``answer`` and work it to its end."""
    await host.start(folder / "pick.yaml", None, run_id)
    await work_until(host, lambda: _asks(host, run_id))
    await host.answer(run_id, "decide", answer)

    async def settled() -> bool:
        return (await host.run(run_id)).status != "running"

    await work_until(host, settled)


async def _asks(host: LocalHost, run_id: str) -> bool:
    return bool(await host.open_questions(run_id))


def _world(folder: Path) -> None:
    (folder / "pick.yaml").write_text(FLOW)
    (folder / "tools.py").write_text(TOOLS)


async def _compare(ctx: Context, a: str, b: str) -> Comparison:
    found = await BY_NAME["compare"].call(ctx, BY_NAME["compare"].input(a=a, b=b))
    assert isinstance(found, Comparison)
    return found


def test_two_runs_that_did_the_same_are_the_same_whatever_their_ids_and_times(
    tmp_path: Path,
) -> None:
    _world(tmp_path)

    async def main() -> tuple[Comparison, Comparison, list[Any]]:
        async with LocalHost(tmp_path / "runs.db", str(tmp_path / "tools.py")) as host:
            await _answered(host, tmp_path, "one", "a")
            await _answered(host, tmp_path, "two", "a")
            await _answered(host, tmp_path, "three", "b")
            ctx = Context(host, Principal.operator())
            return (
                await _compare(ctx, "one", "two"),
                await _compare(ctx, "one", "three"),
                await host.records("three"),
            )

    same, other, three = asyncio.run(main())
    assert same.first_difference is None and same.differing == 0
    assert same.a_count == same.b_count == same.same > 5
    assert same.a_record is None and same.fields == []
    # The answer is the first thing that differs: the event that carries it.
    at = other.first_difference
    assert at is not None and other.same == at
    assert other.fields == ["answer"]
    assert other.a_record is not None and other.b_record is not None
    assert other.a_record["data"]["answer"] == "a" and other.b_record["data"]["answer"] == "b"
    assert other.b_record == msgspec.to_builtins(three[at])
    assert other.differing >= 2  # the answer, and the tool's call and output after it


def test_a_fork_matches_its_source_up_to_the_fork_point(tmp_path: Path) -> None:
    _world(tmp_path)

    async def main() -> tuple[Comparison, Comparison, Comparison]:
        async with LocalHost(tmp_path / "runs.db", str(tmp_path / "tools.py")) as host:
            await _answered(host, tmp_path, "src", "a")
            ctx = Context(host, Principal.operator())
            fork = BY_NAME["fork"]
            await fork.call(ctx, fork.input(run_id="src", from_step="say", new_run_id="f"))
            before = await _compare(ctx, "src", "f")  # the fork has not run on yet
            await work_until(host, lambda: _settled(host, "f"))
            after = await _compare(ctx, "src", "f")
            back = await _compare(ctx, "f", "src")
            return before, after, back

    before, after, back = asyncio.run(main())
    # run.started differs only by the fork's forkedFrom and run id: the same.
    assert before.same > 1 and before.first_difference == before.same
    assert before.fields == ["missing"] and before.b_record is None
    assert before.b_count < before.a_count
    # Worked to its end with the same handlers and answer, the fork did the same.
    assert after.first_difference is None and after.a_count == after.b_count
    assert back.a == "f" and back.b == "src" and back.first_difference is None


async def _settled(host: LocalHost, run_id: str) -> bool:
    return (await host.run(run_id)).status != "running"


def test_compare_needs_read_access_to_both_runs(tmp_path: Path) -> None:
    _world(tmp_path)

    async def main() -> list[str]:
        async with LocalHost(tmp_path / "runs.db", str(tmp_path / "tools.py")) as host:
            await host.start(tmp_path / "pick.yaml", None, "ops", principal=None)
            await host.start(tmp_path / "pick.yaml", None, "mine", principal="alice")
            alice = Context(host, Principal("alice", "read"))
            seen = [(await _compare(alice, "mine", "mine")).b]
            for a, b in (("mine", "ops"), ("ops", "mine"), ("mine", "nope")):
                with pytest.raises(OperationError) as caught:
                    await _compare(alice, a, b)
                assert caught.value.code == "unknown-run"
                seen.append(caught.value.detail)
            return seen

    assert asyncio.run(main()) == ["mine", "no run 'ops'", "no run 'ops'", "no run 'nope'"]


def test_the_command_prints_the_first_difference(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FLOWCORE_TEMPORAL_ADDRESS", raising=False)
    _world(tmp_path)

    async def main() -> None:
        async with LocalHost(tmp_path / "runs.db", str(tmp_path / "tools.py")) as host:
            await _answered(host, tmp_path, "one", "a")
            await _answered(host, tmp_path, "two", "b")

    asyncio.run(main())
    db = str(tmp_path / "runs.db")
    capfd.readouterr()
    assert run(["compare", "one", "two", "--db", db]) == 0
    text = capfd.readouterr().out
    assert "first difference at index" in text and ": answer" in text
    assert '"answer":"a"' in text and '"answer":"b"' in text
    assert run(["compare", "one", "two", "--db", db, "--json"]) == 0
    document = json.loads(capfd.readouterr().out)
    assert document["fields"] == ["answer"] and document["aRecord"]["runId"] == "one"
    assert run(["compare", "one", "nope", "--db", db]) == 2
    assert "no run 'nope'" in capfd.readouterr().err
