"""Every catalogue operation called directly on the local host (a real SQLite
file): each gives its declared output, a stranger's run is unknown to another
principal, and a failure comes with its declared code."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import msgspec
import pytest

from flowcore_ops import BY_NAME, CATALOGUE, Context, OperationError, Principal

from .local_world import local_world
from .parity import ORDER, SCENARIOS


def test_the_scenarios_cover_the_catalogue() -> None:
    assert sorted(SCENARIOS) == sorted(op.name for op in CATALOGUE)
    assert sorted(ORDER) == sorted(SCENARIOS)


async def call(ctx: Context, name: str, given: dict[str, Any]) -> Any:
    op = BY_NAME[name]
    out = await op.call(ctx, msgspec.convert(given, op.input))
    if name in ("follow", "progress-follow"):  # (a settled run's: it ends)
        return [record async for record in out]
    return out


def test_every_operation_on_the_local_host(tmp_path: Path) -> None:
    async def main() -> dict[str, Any]:
        async with local_world(tmp_path) as (host, facts):
            ctx = Context(host, Principal.operator(), flows=Path, flow_folders=(tmp_path,))
            got: dict[str, Any] = {}
            for name in ORDER:
                scenario = SCENARIOS[name]
                out = await call(ctx, name, scenario.input(facts))
                assert scenario.expect(out), (name, out)
                facts.update(scenario.remember(out))
                output = BY_NAME[name].output
                if output is not None and name not in (
                    "events",
                    "follow",
                    "export",
                    "progress",
                    "progress-follow",
                ):
                    msgspec.convert(msgspec.to_builtins(out), output)
                got[name] = out
            return got

    got = asyncio.run(main())
    assert got["runs"].runs[0].status in ("running", "completed", "failed")
    assert got["fork"].parent is None and got["schedule.delete"] is None


def test_a_principal_sees_only_its_own_runs(tmp_path: Path) -> None:
    async def main() -> None:
        async with local_world(tmp_path) as (host, facts):
            alice = Context(host, Principal("alice", "write"), flows=Path)
            mine = await BY_NAME["start"].call(
                alice,
                BY_NAME["start"].input(flow=facts["flow"], input={"key": "a"}, run_id="a-1"),
            )
            assert mine.principal == "alice"
            page = await BY_NAME["runs"].call(alice, BY_NAME["runs"].input())
            assert [r.run_id for r in page.runs] == ["a-1"]
            for name, given in [
                ("show", {"runId": "p-main"}),
                ("cancel", {"runId": "p-main"}),
                ("answer", {"runId": "p-main", "key": "decide", "answer": "yes"}),
            ]:
                with pytest.raises(OperationError) as refused:
                    await call(alice, name, given)
                assert refused.value.code == "unknown-run"
                assert refused.value.detail == "no run 'p-main'"
            # Its id is taken all the same, and nothing says whose run holds it.
            with pytest.raises(OperationError) as taken:
                await call(alice, "start", {"flow": facts["flow"], "runId": "p-main"})
            assert (taken.value.code, taken.value.failure.status) == ("run-exists", 409)

    asyncio.run(main())


def test_failures_come_with_their_declared_codes(tmp_path: Path) -> None:
    async def main() -> None:
        async with local_world(tmp_path) as (host, _facts):
            ctx = Context(host, flows=Path)
            cases: list[tuple[str, dict[str, Any], str]] = [
                ("show", {"runId": "ghost"}, "unknown-run"),
                ("answer", {"runId": "p-main", "key": "nope", "answer": "yes"}, "no-open-question"),
                (
                    "answer",
                    {"runId": "p-main", "key": "decide", "answer": "maybe"},
                    "not-an-option",
                ),
                ("scheduled.cancel", {"runId": "p-main", "callId": "nope"}, "not-pending"),
                ("schedule.show", {"name": "nope"}, "unknown-schedule"),
                ("runs", {"where": ["amount>"]}, "invalid-request"),
                ("runs", {"cursor": "!!"}, "invalid-cursor"),
                ("signal", {"runId": "p-fail", "name": "go"}, "settled"),
                ("cancel", {"runId": "p-fail"}, "settled"),
            ]
            for name, given, code in cases:
                with pytest.raises(OperationError) as refused:
                    await call(ctx, name, given)
                assert refused.value.code == code, (name, refused.value)
                assert code in BY_NAME[name].failures, (name, code)

    asyncio.run(main())
