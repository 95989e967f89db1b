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


@asynccontextmanager
async def served(folder: Path) -> AsyncIterator[tuple[LocalHost, dict[str, httpx.AsyncClient]]]:
    (folder / "refund.yaml").write_text(REFUND)
    (folder / "refund_tools.py").write_text(TOOLS)
    async with LocalHost(folder / "app.db", str(folder / "refund_tools.py")) as host:
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
