"""One run's bad value never harms another run on the local host.

A real tool returns values flowcore cannot store (beyond 64 bits, a lone
surrogate, NaN, not JSON at all, too deep, too large) while a dozen healthy
runs share the worker with it. Each bad result must fail its own effect once,
with ``unencodable-output`` naming where the bad value is, and every healthy
run must complete: nothing of one event may touch another run's commit.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest

import flowcore
from flowcore_local import LocalHost
from flowcore_local._store import Store

from ...hostile_values import BAD, BAD_FLOW, CAUGHT_FLOW, EXECUTIONS, HEALTHY_FLOW, REGISTRY
from ..local_helpers import work_until


def run_host(db: Path | str, body: Any) -> Any:
    async def main() -> Any:
        async with LocalHost(db, registry=REGISTRY, lease_ms=2_000) as host:
            return await body(host)

    return asyncio.run(main())


async def settle_all(host: LocalHost, run_ids: list[str]) -> list[Any]:
    async def all_settled() -> bool:
        for run_id in run_ids:
            if (await host.run(run_id)).status == "running":
                return False
        return True

    await work_until(host, all_settled)
    return [await host.run(r) for r in run_ids]


def test_bad_results_fail_their_own_effect_once_and_healthy_runs_complete(
    tmp_path: Path, local_db: Path | str, caplog: pytest.LogCaptureFixture
) -> None:
    EXECUTIONS.clear()
    caplog.set_level(logging.WARNING)

    async def body(host: LocalHost) -> Any:
        bad_ids = [await host.start(BAD_FLOW, {"case": c}, f"bad-{c}") for c in BAD]
        caught = await host.start(CAUGHT_FLOW, {"case": "bigint"}, "caught")
        healthy = [await host.start(HEALTHY_FLOW, {"n": i}, f"ok-{i}") for i in range(12)]
        rows = await settle_all(host, [*bad_ids, caught, *healthy])
        shows = [await host.show(r) for r in [*bad_ids, caught, *healthy]]
        logs = [await host.export(r) for r in [*bad_ids, caught, *healthy]]
        return rows, shows, logs

    rows, shows, logs = run_host(local_db, body)
    by_id = {row.run_id: row for row in rows}
    for case, (_, where) in BAD.items():
        row = by_id[f"bad-{case}"]
        assert row.status == "failed", (case, row)
        assert row.error["type"] == "unencodable-output", (case, row.error)
        assert f"the {where} of bad-{case}/call#1 " in row.error["message"], row.error
        assert len(row.error["message"]) < 400  # a short prefix, never the value
        assert EXECUTIONS[f"bad-{case}/call#1"] == 1, case
    assert by_id["caught"].status == "completed"
    assert by_id["caught"].output == {"fine": "unencodable-output"}
    for i in range(12):
        row = by_id[f"ok-{i}"]
        assert (row.status, row.output) == ("completed", {"fine": i}), row
        assert EXECUTIONS[f"ok-{i}/call#1"] == 1
    assert all(show["deadLetters"] == [] for show in shows)
    # Every log replays, and nothing was printed as a lost task exception.
    flows = {
        "hostile": flowcore.parse_flow(BAD_FLOW),
        "hostile-caught": flowcore.parse_flow(CAUGHT_FLOW),
        "healthy": flowcore.parse_flow(HEALTHY_FLOW),
    }
    for log in logs:
        read = flowcore.decode_log(log)
        assert read.torn is None
        first = read.records[0].data
        report = flowcore.replay(read.records, flows[first["flowId"]])
        assert report.status == ("completed" if first["flowId"] != "hostile" else "failed")
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


def test_an_unforeseen_error_applying_one_event_fails_that_effect_alone(
    tmp_path: Path,
    local_db: Path | str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Whatever raises while one event is applied, the other runs' events commit."""
    EXECUTIONS.clear()
    real_apply = Store.apply

    def apply(self: Store, run_id: str, event: flowcore.Event, now: int) -> Any:
        if run_id == "victim" and isinstance(event, flowcore.EffectSucceeded):
            raise RuntimeError("disk says no " + "x" * 10_000)
        return real_apply(self, run_id, event, now)

    monkeypatch.setattr(Store, "apply", apply)

    async def body(host: LocalHost) -> Any:
        victim = await host.start(HEALTHY_FLOW, {"n": -1}, "victim")
        healthy = [await host.start(HEALTHY_FLOW, {"n": i}, f"ok-{i}") for i in range(12)]
        return await settle_all(host, [victim, *healthy])

    rows = run_host(local_db, body)
    victim, *healthy = rows
    assert victim.status == "failed"
    assert victim.error["type"] == "host-error"
    assert "RuntimeError: disk says no" in victim.error["message"]
    assert len(victim.error["message"]) < 400
    assert EXECUTIONS["victim/call#1"] == 1  # failed once, not re-run by recovery
    assert [(r.status, r.output) for r in healthy] == [
        ("completed", {"fine": i}) for i in range(12)
    ]
    warnings = [r.getMessage() for r in caplog.records if r.name == "flowcore.local"]
    assert any("cannot apply effect-succeeded to run victim" in w for w in warnings)
