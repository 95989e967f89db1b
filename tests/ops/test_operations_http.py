"""Every catalogue operation over HTTP on the local host (a real SQLite file, the
app ``flowcore serve`` serves, in process): each gives its declared output; a
read token is refused a write operation, a write token an admin one, before
anything is read or written."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from flowcore_ops import ACCESS, BY_NAME, CATALOGUE, allows

from .local_world import local_world
from .parity import ORDER, SCENARIOS
from .surfaces import Refused, http_client, over_http


def test_every_operation_over_http_on_the_local_host(tmp_path: Path) -> None:
    async def main() -> dict[str, Any]:
        async with local_world(tmp_path) as (host, facts):
            facts["flow"] = facts["flow_v2"] = "parity"  # a flow id of the registry folder
            async with http_client(host, tmp_path) as client:
                got: dict[str, Any] = {}
                for name in ORDER:
                    op = BY_NAME[name]
                    scenario = SCENARIOS[name]
                    given = scenario.input(facts)
                    # Too little access is refused first, whatever the input.
                    for held in ACCESS:
                        if not allows(held, op.access):
                            with pytest.raises(Refused) as refused:
                                await over_http(client, name, given, held)
                            assert (refused.value.status, refused.value.type) == (
                                403,
                                "forbidden",
                            ), (name, held)
                    out = await over_http(client, name, given, "admin")
                    assert scenario.expect(out), (name, out)
                    facts.update(scenario.remember(out))
                    got[name] = out
                return got

    got = asyncio.run(main())
    assert sorted(got) == sorted(op.name for op in CATALOGUE)
    assert got["whoami"].access == "admin"


def test_a_failure_over_http_has_its_declared_status(tmp_path: Path) -> None:
    async def main() -> None:
        async with local_world(tmp_path) as (host, _facts):
            async with http_client(host, tmp_path) as client:
                cases = [
                    ("show", {"runId": "ghost"}, 404, "unknown-run"),
                    ("cancel", {"runId": "p-fail"}, 409, "settled"),
                    ("scheduled.cancel", {"runId": "p-main", "callId": "x"}, 409, "not-pending"),
                    ("schedule.show", {"name": "nope"}, 404, "unknown-schedule"),
                    ("start", {"flow": "nope"}, 422, "unknown-flow"),
                ]
                for name, given, status, code in cases:
                    with pytest.raises(Refused) as refused:
                        await over_http(client, name, given)
                    assert (refused.value.status, refused.value.type) == (status, code), name

    asyncio.run(main())


def test_recurring_add_and_replay_over_http(tmp_path: Path) -> None:
    """A recurring add shows its recurrence; a replay is refused for a pending call
    (with the reason) and a bad recurrence names its field; a retried replay (the
    same request) replays once."""

    async def main() -> None:
        async with local_world(tmp_path) as (host, facts):
            async with http_client(host, tmp_path) as client:
                added = await over_http(
                    client,
                    "scheduled.add",
                    {"runId": "p-main", "tool": "remind", "cron": "0 9 * * 1", "timezone": "UTC"},
                )
                assert (added.cron, added.timezone, added.every_ms) == ("0 9 * * 1", "UTC", None)
                bad = {"runId": "p-main", "tool": "remind", "timezone": "Mars/Olympus"}
                with pytest.raises(Refused) as refused:
                    await over_http(client, "scheduled.add", {**bad, "cron": "0 9 * * *"})
                assert refused.value.status == 422 and "timezone" in str(refused.value)
                pending = {"runId": "p-main", "callId": facts["call_id"]}
                with pytest.raises(Refused) as refused:
                    await over_http(client, "scheduled.replay", pending)
                assert (refused.value.status, refused.value.type) == (422, "rejected")
                assert "is still pending" in str(refused.value)
                done = {"runId": "p-main", "callId": facts["call_id_done"], "request": "q"}
                for _ in range(2):  # the second is a retry
                    out = await over_http(client, "scheduled.replay", done)
                    assert out.replays == 1
            records = await host.records("p-main")
        replays = [
            r.data["idempotencyKey"]
            for r in records
            if r.type == "effect.emitted" and r.data.get("idempotencyKey", "").endswith("replay-1")
        ]
        assert replays == [f"{facts['call_id_done']}/replay-1"]

    asyncio.run(main())
