"""Updates and queries over the HTTP API on the local host (a real SQLite file, the
app ``flowcore serve`` serves, in process): 200 once an update ended, 202 while it
runs, a refusal's problem with its code, an unknown update id, a query's args
as the POST body or as ``?args=JSON``, signal-with-start, what ``show`` and
``flows`` say a flow declares, the OpenAPI document, and a waiting update
answered when the server shuts down (serve.md)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx

from flowcore_local import LocalHost
from flowcore_serve import Tokens, create_app

from ..ops.surfaces import TOKEN, TOKENS, http_client

FLOW = """
flow: desk
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
    reply: "${steps.q.answer}"
queries:
  seen:
    description: The args, and the status
    args_schema: {type: [object, "null"]}
    value: "${ {args: args, status: status} }"
steps:
  - {id: go, await_signal: {signal: go}}
"""
AS = {"Authorization": f"Bearer {TOKEN['write']}"}
READ = {"Authorization": f"Bearer {TOKEN['read']}"}


def test_updates_and_queries_over_http(tmp_path: Path) -> None:
    flows = tmp_path / "flows"
    flows.mkdir()
    (flows / "desk.yaml").write_text(FLOW)

    async def main() -> dict[str, Any]:
        async with LocalHost(tmp_path / "h.db") as host, http_client(host, flows) as c:
            got: dict[str, Any] = {}
            r = await c.post("/api/runs", json={"flow": "desk", "runId": "d"}, headers=AS)
            assert r.status_code == 201, r.text
            body = {"name": "approve", "input": {"by": "bob"}, "updateId": "u1", "wait": False}
            r = await c.post("/api/runs/d/updates", json=body, headers=AS)
            assert (r.status_code, r.json()["status"]) == (202, "running"), r.text
            timed = dict(body, wait=True, timeoutS=0.05)
            r = await c.post("/api/runs/d/updates", json=timed, headers=AS)
            assert (r.status_code, r.json()["status"]) == (202, "running"), r.text
            r = await c.get("/api/runs/d/updates/u1", headers=READ)
            assert r.status_code == 202
            before = len(await host.records("d"))
            bad = dict(body, input={"by": "mallory"}, updateId="u2")
            r = await c.post("/api/runs/d/updates", json=bad, headers=AS)
            got["refused"] = r.status_code, r.json()
            r = await c.post("/api/runs/d/updates", json={"name": "nope"}, headers=AS)
            got["unknown"] = r.status_code, r.json()["type"]
            assert len(await host.records("d")) == before
            r = await c.post("/api/runs/d/updates", json=body, headers=READ)
            assert r.status_code == 403
            r = await c.post("/api/runs/d/answers", json={"key": "q", "answer": "no"}, headers=AS)
            assert r.status_code == 200, r.text
            r = await c.get("/api/runs/d/updates/u1", params={"wait": "true"}, headers=READ)
            got["result"] = r.status_code, r.json()
            r = await c.get("/api/runs/d/updates/zzz", headers=READ)
            got["no-id"] = r.status_code, r.json()["type"]
            r = await c.get("/api/runs/d/updates", headers=READ)
            got["list"] = r.json()
            r = await c.post("/api/runs/d/queries/seen", json={"x": 1}, headers=READ)
            got["query-post"] = r.status_code, r.json()
            r = await c.post("/api/runs/d/queries/seen", headers=READ)
            got["query-none"] = r.json()
            r = await c.get("/api/runs/d/queries/seen", params={"args": '{"y": 2}'}, headers=READ)
            got["query-get"] = r.json()
            r = await c.get("/api/runs/d/queries/seen", params={"args": "{nope"}, headers=READ)
            got["query-bad-json"] = r.status_code
            r = await c.post("/api/runs/d/queries/seen", json=[1], headers=READ)
            got["query-bad-args"] = r.status_code, r.json()
            r = await c.post("/api/runs/d/queries/nope", headers=READ)
            got["query-unknown"] = r.status_code, r.json()["type"]
            started = {"flow": "desk", "runId": "s", "name": "go", "payload": 1}
            r = await c.post("/api/runs/signal-with-start", json=started, headers=AS)
            got["sws"] = r.status_code, r.json()["runId"]
            got["show"] = (await c.get("/api/runs/d", headers=READ)).json()
            got["flows"] = (await c.get("/api/flows", headers=READ)).json()
            got["openapi"] = (await c.get("/openapi.json")).json()
            return got

    got = asyncio.run(main())
    status, problem = got["refused"]
    assert (status, problem["type"], problem["code"]) == (
        422,
        "/problems/update-refused",
        "validator",
    )
    assert got["unknown"] == (422, "/problems/unknown-update")
    status, result = got["result"]
    assert status == 200
    assert result == {
        "runId": "d",
        "updateId": "u1",
        "name": "approve",
        "status": "completed",
        "output": "no",
        "error": None,
    }
    assert got["no-id"] == (404, "/problems/unknown-update-id")
    assert [u["updateId"] for u in got["list"]] == ["u1"]
    assert got["query-post"] == (200, {"value": {"args": {"x": 1}, "status": "running"}})
    assert got["query-none"] == {"value": {"args": None, "status": "running"}}
    assert got["query-get"] == {"value": {"args": {"y": 2}, "status": "running"}}
    assert got["query-bad-json"] == 422
    status, problem = got["query-bad-args"]
    assert (status, problem["type"], problem["code"]) == (422, "/problems/query-failed", "bad-args")
    assert got["query-unknown"] == (422, "/problems/unknown-query")
    assert got["sws"] == (202, "s")
    declared = {
        "name": "approve",
        "description": "Ask a person",
        "inputSchema": {
            "type": "object",
            "properties": {"by": {"type": "string"}},
            "required": ["by"],
        },
        "examples": [{"by": "alice"}],
    }
    assert got["show"]["updates"] == [declared]
    assert got["show"]["queries"] == [
        {
            "name": "seen",
            "description": "The args, and the status",
            "argsSchema": {"type": ["object", "null"]},
        }
    ]
    assert got["flows"]["flows"][0]["updates"] == [declared]
    paths = got["openapi"]["paths"]
    assert set(paths["/api/runs/{run_id}/updates"]["post"]["responses"]) >= {"200", "202", "422"}
    query_body = paths["/api/runs/{run_id}/queries/{name}"]["post"]["requestBody"]
    assert query_body == {"required": False, "content": {"application/json": {"schema": {}}}}
    assert "/api/runs/update-with-start" in paths


def test_a_waiting_update_is_answered_202_when_the_server_shuts_down(tmp_path: Path) -> None:
    flows = tmp_path / "flows"
    flows.mkdir()
    (flows / "desk.yaml").write_text(FLOW)

    async def main() -> tuple[int, dict[str, Any], int]:
        closing = asyncio.Event()
        async with LocalHost(tmp_path / "h.db") as host:
            app = create_app(host, Tokens.parse(TOKENS, "tokens"), flows, closing=closing)
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://flowcore") as c:
                r = await c.post("/api/runs", json={"flow": "desk", "runId": "d"}, headers=AS)
                assert r.status_code == 201, r.text
                body = {"name": "approve", "input": {"by": "bob"}}  # no id: the server names it
                sent = asyncio.create_task(c.post("/api/runs/d/updates", json=body, headers=AS))
                while not await host.open_questions("d"):
                    await asyncio.sleep(0.01)
                assert not sent.done()
                closing.set()
                reply = await asyncio.wait_for(sent, 10)
                made = reply.json()["updateId"]
                later = await c.get(f"/api/runs/d/updates/{made}", headers=READ)
                return reply.status_code, reply.json(), later.status_code

    status, outcome, later = asyncio.run(main())
    assert (status, outcome["status"], outcome["name"]) == (202, "running", "approve")
    assert len(outcome["updateId"]) == 32
    assert later == 202  # the update goes on: it is still there to fetch
