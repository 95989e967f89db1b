"""Who did what, over HTTP on the local host (the app ``flowcore serve`` serves, in
process, on a real SQLite file): the principal who answered an approval, and the
owner of a schedule, whose runs it starts."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import msgspec

import flowcore
from flowcore_local import LocalHost
from flowcore_serve import Tokens, create_app

TOKENS = """
tokens:
  - {token: alice-token-0123456789, principal: alice, access: write}
  - {token: bob-token-0123456789ab, principal: bob, access: write}
  - {token: ops-token-01234567890a, principal: ops, access: admin}
"""
TOKEN = {
    "alice": "alice-token-0123456789",
    "bob": "bob-token-0123456789ab",
    "ops": "ops-token-01234567890a",
}

REFUND = """\
flow: refund
tools:
  pay_back: {class: idempotent, needs_approval: true}
steps:
  - id: pay
    call_tool: {tool: pay_back, input: {amount: "${input.amount}"}}
"""
TOOLS = """\
def pay_back(call):
    raise AssertionError("a denied call is never made")


TOOLS = {"pay_back": pay_back}
"""


T0 = 1_796_083_200_000  # 2026-12-01T00:00:00Z
HOUR = 3_600_000

HOURLY = """\
flow: hourly
steps:
  - {id: hold, await_signal: {signal: done}}
output: "${input}"
schedules:
  tick: {every: 1h, overlap: allow_all, input: "${schedule.at}"}
"""


class Clock:
    """The host's clock: the test moves it (no test waits for real time)."""

    def __init__(self) -> None:
        self.at = T0

    def __call__(self) -> int:
        return self.at


@asynccontextmanager
async def served(
    folder: Path, clock: Clock | None = None
) -> AsyncIterator[tuple[LocalHost, dict[str, httpx.AsyncClient]]]:
    (folder / "refund.yaml").write_text(REFUND)
    (folder / "hourly.yaml").write_text(HOURLY)
    (folder / "refund_tools.py").write_text(TOOLS)
    tools = str(folder / "refund_tools.py")
    async with LocalHost(folder / "app.db", tools, clock=clock, poll_ms=10) as host:
        app = create_app(host, Tokens.parse(TOKENS, "tokens"), folder)
        transport = httpx.ASGITransport(app=app)
        clients = {
            who: httpx.AsyncClient(
                transport=transport,
                base_url="http://flowcore",
                headers={"Authorization": f"Bearer {token}"},
            )
            for who, token in TOKEN.items()
        }
        try:
            yield host, clients
        finally:
            for client in clients.values():
                await client.aclose()


def test_a_denied_approval_names_the_principal_who_answered(tmp_path: Path) -> None:
    async def main() -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
        async with served(tmp_path) as (host, http):
            alice = http["alice"]
            body = {"flow": "refund", "input": {"amount": 250}, "runId": "rf-1"}
            started = await alice.post("/api/runs", json=body)
            assert started.status_code == 201, started.text
            (question,) = (await alice.get("/api/runs/rf-1")).json()["waits"]["questions"]
            assert question["key"] == "rf-1/pay#1/approval"
            answered = await alice.post(
                "/api/runs/rf-1/answers", json={"key": question["key"], "answer": "deny"}
            )
            assert answered.status_code == 200, answered.text
            view = (await alice.get("/api/runs/rf-1")).json()
            records = [msgspec.to_builtins(r) for r in await host.records("rf-1")]
            # The operator at the command line (no principal): nothing is named.
            await host.start(tmp_path / "refund.yaml", {"amount": 5}, "rf-2")
            await host.answer("rf-2", "pay", "deny")
            return view, records, (await host.show("rf-2"))["error"]

    view, records, by_operator = asyncio.run(main())
    assert view["run"]["status"] == "failed"
    assert view["error"]["type"] == "approval-denied"
    assert view["error"]["details"] == {
        "tool": "pay_back",
        "input": {"amount": 250},
        "answer": "deny",
        "principal": "alice",
    }
    (reported,) = [
        r["data"]
        for r in records
        if r["type"] == "event.reported" and r["data"]["kind"] == "human-answered"
    ]
    assert reported["principal"] == "alice"
    # The log replays: the principal is part of the event the decision read.
    assert by_operator["details"] == {"tool": "pay_back", "input": {"amount": 5}, "answer": "deny"}
    assert flowcore.event_from_wire(reported).principal == "alice"  # type: ignore[union-attr]


def test_the_runs_a_schedule_starts_belong_to_its_owner(tmp_path: Path) -> None:
    clock = Clock()

    async def main() -> dict[str, Any]:
        async with served(tmp_path, clock) as (host, http):
            ops, alice, bob = http["ops"], http["alice"], http["bob"]
            # An admin adds the schedule for alice; a write token may not add one.
            refused = await alice.post("/api/schedules", json={"flow": "hourly"})
            assert refused.status_code == 403, refused.text
            added = await ops.post("/api/schedules", json={"flow": "hourly", "owner": "alice"})
            assert added.status_code == 201, added.text
            assert (await ops.get("/api/schedules/tick")).json()["owner"] == "alice"
            # A slot the worker fires, a trigger and a backfill: each run is alice's.
            stop = asyncio.Event()
            worker = asyncio.create_task(host.work(stop))
            clock.at += HOUR
            deadline = asyncio.get_running_loop().time() + 60
            while not await host.runs():
                assert asyncio.get_running_loop().time() < deadline, "the slot never started"
                await asyncio.sleep(0.01)
            stop.set()
            await asyncio.wait_for(worker, 60)
            triggered = await ops.post("/api/schedules/tick/trigger")
            assert triggered.status_code == 201, triggered.text
            filled = await ops.post(
                "/api/schedules/tick/backfill",
                json={"start": "2026-11-30T22:00:00Z", "end": "2026-11-30T23:00:00Z"},
            )
            assert filled.status_code == 200, filled.text
            listed: dict[str, Any] = {}
            for who, client in http.items():
                runs = (await client.get("/api/runs", params={"flow": "hourly"})).json()["runs"]
                listed[who] = sorted((r["runId"], r["principal"]) for r in runs)
            listed["bob sees"] = (await bob.get("/api/runs/tick@2026-12-01T01:00:00Z")).status_code
            # Added again without an owner, by the operator: its next runs are no one's.
            await host.add_schedules(tmp_path / "hourly.yaml")
            listed["after"] = (await host.schedule("tick"))["owner"]
            return listed

    listed = asyncio.run(main())
    started = [
        ("tick@2026-11-30T22:00:00Z", "alice"),
        ("tick@2026-11-30T23:00:00Z", "alice"),
        ("tick@2026-12-01T01:00:00Z", "alice"),
        ("tick@trigger-1", "alice"),
    ]
    assert listed["alice"] == started
    assert listed["ops"] == started  # an admin sees every run
    assert listed["bob"] == []
    assert listed["bob sees"] == 404
    assert listed["after"] is None
