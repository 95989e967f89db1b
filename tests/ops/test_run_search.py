"""Searching runs through the catalogue on the local host (a real SQLite file): by
id prefix (exact: case, ``%`` and ``_`` are themselves), counted by status (a
principal counts only its own runs), and paged by cursor with no run twice or
missed when runs start between pages; and the command line's ``runs --counts``
and ``--id-prefix``."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from flowcore_cli.main import run
from flowcore_handlers import Registry
from flowcore_local import LocalHost
from flowcore_ops import BY_NAME, Context, OperationError, Principal

from ..local.local_helpers import settle

FLOW = """
flow: search
metadata: {customer: string}
tools:
  check: {class: readonly}
steps:
  - {id: check, call_tool: {tool: check, input: "${input}"}, retry: {max_attempts: 1}}
"""


def _check(call: Any) -> str:
    if call.input == "fail":
        from flowcore_handlers import HandlerError

        raise HandlerError("refused", "refused", retryable=False)
    return "ok"


async def _seed(tmp_path: Path) -> tuple[LocalHost, Path]:
    spec = tmp_path / "search.yaml"
    spec.write_text(FLOW)
    host = LocalHost(tmp_path / "search.db", registry=Registry(tools={"check": _check}))
    await host.open()
    for run_id, given, who in [
        ("Ab-1", "ok", None),
        ("ab-2", "fail", None),
        ("ab%3", "ok", "alice"),
        ("a_b4", "ok", None),
        ("ab-5", "hold", None),
    ]:
        await host.start(spec, given, run_id, principal=who, metadata={"customer": "acme"})
        if given != "hold":
            await settle(host, run_id)
    return host, spec


async def _call(ctx: Context, name: str, **given: Any) -> Any:
    op = BY_NAME[name]
    return await op.call(ctx, op.input(**given))


def test_id_prefix_counts_and_a_principals_counts(tmp_path: Path) -> None:
    async def main() -> None:
        host, _ = await _seed(tmp_path)
        try:
            ops = Context(host, Principal.operator())
            page = await _call(ops, "runs", id_prefix="ab")
            assert sorted(r.run_id for r in page.runs) == ["ab%3", "ab-2", "ab-5"]
            page = await _call(ops, "runs", id_prefix="ab%")
            assert [r.run_id for r in page.runs] == ["ab%3"]
            page = await _call(ops, "runs", id_prefix="a_")
            assert [r.run_id for r in page.runs] == ["a_b4"]
            counted = await _call(ops, "run-counts")
            assert (counted.counts, counted.total) == (
                {"completed": 3, "failed": 1, "running": 1},
                5,
            )
            counted = await _call(ops, "run-counts", id_prefix="ab-", where=["customer=acme"])
            assert (counted.counts, counted.total) == ({"failed": 1, "running": 1}, 2)
            counted = await _call(ops, "run-counts", where=["customer=zeta"])
            assert (counted.counts, counted.total) == ({}, 0)
            alice = Context(host, Principal("alice", "read"))
            counted = await _call(alice, "run-counts")
            assert (counted.counts, counted.total) == ({"completed": 1}, 1)
            with pytest.raises(OperationError) as bad:
                await _call(ops, "run-counts", where=["customer~acme"])
            assert bad.value.code == "invalid-request" and "where" in bad.value.detail
        finally:
            await host.close()

    asyncio.run(main())


def test_paging_is_stable_while_runs_start(tmp_path: Path) -> None:
    async def main() -> None:
        host, spec = await _seed(tmp_path)
        try:
            ops = Context(host, Principal.operator())
            seen: list[str] = []
            page = await _call(ops, "runs", limit=2)
            seen += [r.run_id for r in page.runs]
            n = 0
            while page.next_cursor is not None:
                # A newer run starts between pages: it is on no later page.
                await host.start(spec, "hold", f"new-{n}")
                n += 1
                page = await _call(ops, "runs", limit=2, cursor=page.next_cursor)
                seen += [r.run_id for r in page.runs]
            assert sorted(seen) == sorted(["Ab-1", "ab-2", "ab%3", "a_b4", "ab-5"])
        finally:
            await host.close()

    asyncio.run(main())


def test_the_command_counts_runs_and_searches_by_id_prefix(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FLOWCORE_TEMPORAL_ADDRESS", raising=False)
    monkeypatch.delenv("FLOWCORE_DB", raising=False)

    async def seed() -> None:
        host, _ = await _seed(tmp_path)
        await host.close()

    asyncio.run(seed())
    db = str(tmp_path / "search.db")
    capfd.readouterr()
    assert run(["runs", "--db", db, "--counts", "--json"]) == 0
    counted = json.loads(capfd.readouterr().out)
    assert counted == {"counts": {"completed": 3, "failed": 1, "running": 1}, "total": 5}
    assert run(["runs", "--db", db, "--counts", "--id-prefix", "ab-"]) == 0
    lines = capfd.readouterr().out.split("\n")
    assert [line.split() for line in lines if line] == [
        ["failed", "1"],
        ["running", "1"],
        ["total", "2"],
    ]
    assert run(["runs", "--db", db, "--id-prefix", "ab-", "--json"]) == 0
    assert [r["runId"] for r in json.loads(capfd.readouterr().out)] == ["ab-2", "ab-5"]
    assert run(["runs", "--db", db, "--counts", "--status", "failed"]) == 2
    assert "--status: --counts counts the runs of every status" in capfd.readouterr().err
