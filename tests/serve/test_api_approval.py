"""The approval API of examples/approval on the local host: a real SQLite file,
a real worker, and the HTTP API ``flowcore serve`` serves (in process).

A client sends ``approve`` with its own update id by update-with-start to a run
id that does not exist yet; the request waits; a person answers the question
through the API; the client gets the reply. The same request again returns
the same reply and runs nothing again: the log holds one ``update-requested``
and one question."""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path
from typing import Any

import httpx

from flowcore_local import LocalHost

from ..ops.surfaces import TOKEN, http_client
from .serving import start_serve

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "approval" / "approval.yaml"
ADMIN = {"Authorization": f"Bearer {TOKEN['admin']}"}
REQUEST = {
    "flow": "expense",
    "runId": "exp-1",
    "input": {"amount": 120, "requester": "bob"},
    "name": "approve",
    "updateInput": {"by": "alice"},
    "updateId": "req-1",
}


def kinds(records: list[Any], record_type: str) -> list[str]:
    return [r.data["kind"] for r in records if r.type == record_type]


async def question_of(client: httpx.AsyncClient, run_id: str) -> list[dict[str, Any]]:
    """The run's open questions once it has one (the run may not exist yet)."""
    for _ in range(1000):
        got = await client.get(f"/api/runs/{run_id}/questions", headers=ADMIN)
        if got.status_code == 200 and got.json()["questions"]:
            questions: list[dict[str, Any]] = got.json()["questions"]
            return questions
        await asyncio.sleep(0.01)
    raise AssertionError("no question was asked")


def test_an_approval_request_waits_for_a_person_and_a_repeat_runs_nothing(
    tmp_path: Path,
) -> None:
    flows = tmp_path / "flows"
    flows.mkdir()
    shutil.copy(EXAMPLE, flows / "approval.yaml")

    async def main() -> dict[str, Any]:
        async with LocalHost(tmp_path / "approval.db") as host:
            stop = asyncio.Event()
            worker = asyncio.create_task(host.work(stop))
            try:
                async with http_client(host, flows) as client:
                    return await conversation(host, client)
            finally:
                stop.set()
                await asyncio.wait_for(worker, 30)

    async def conversation(host: LocalHost, client: httpx.AsyncClient) -> dict[str, Any]:
        # Nobody approves their own expense: refused, and no run is started.
        own = dict(REQUEST, updateInput={"by": "bob"}, updateId="req-0")
        refused = await client.post("/api/runs/update-with-start", json=own, headers=ADMIN)
        assert refused.status_code == 422, refused.text
        assert (refused.json()["type"], refused.json()["code"]) == (
            "/problems/update-refused",
            "validator",
        )
        assert (await client.get("/api/runs/exp-1", headers=ADMIN)).status_code == 404

        sent = asyncio.create_task(
            client.post("/api/runs/update-with-start", json=REQUEST, headers=ADMIN)
        )
        questions = await question_of(client, "exp-1")
        assert not sent.done()  # the request waits for the person
        assert questions[0]["question"] == "Approve 120 for bob? (asked by alice)"
        answered = await client.post(
            "/api/runs/exp-1/answers",
            json={"key": questions[0]["key"], "answer": "yes"},
            headers=ADMIN,
        )
        assert answered.status_code == 200, answered.text
        reply = await asyncio.wait_for(sent, 30)
        assert reply.status_code == 200, reply.text
        first = reply.json()
        assert first["status"] == "completed"
        assert first["output"] == {"decision": "yes", "by": "alice"}

        again = await client.post("/api/runs/update-with-start", json=REQUEST, headers=ADMIN)
        assert again.status_code == 200 and again.json() == first
        fetched = await client.get("/api/runs/exp-1/updates/req-1", headers=ADMIN)
        assert fetched.json() == first

        settled = await host.wait("exp-1", timeout=30)
        assert settled.status == "completed"
        assert settled.output == {"decision": "yes", "by": "alice"}
        asked = await client.post("/api/runs/exp-1/queries/decision", headers=ADMIN)
        assert asked.status_code == 200, asked.text
        return {"query": asked.json()["value"], "records": await host.records("exp-1")}

    got = asyncio.run(main())
    assert got["query"]["decision"] == "yes" and got["query"]["by"] == "alice"
    assert got["query"]["status"] == "completed"
    records = got["records"]
    assert kinds(records, "event.reported").count("update-requested") == 1
    assert kinds(records, "effect.emitted").count("ask-human") == 1
    assert kinds(records, "effect.emitted").count("signal-run") == 1


def test_the_approval_api_on_a_real_flowcore_serve(tmp_path: Path) -> None:
    """The same exchange with ``flowcore serve`` in its own process (its worker
    runs the handler): accepted without waiting (202), answered, fetched by its id,
    and the same request again answers the same reply."""
    flows = tmp_path / "flows"
    flows.mkdir()
    shutil.copy(EXAMPLE, flows / "approval.yaml")
    with start_serve(tmp_path, "--flows", flows) as server, server.client() as c:
        accepted = c.post("/api/runs/update-with-start", json=dict(REQUEST, wait=False))
        assert (accepted.status_code, accepted.json()["status"]) == (202, "running")
        for _ in range(1000):
            questions = c.get("/api/runs/exp-1/questions").json()["questions"]
            if questions:
                break
            time.sleep(0.01)
        answer = {"key": questions[0]["key"], "answer": "no"}
        assert c.post("/api/runs/exp-1/answers", json=answer).status_code == 200
        got = c.get("/api/runs/exp-1/updates/req-1", params={"wait": "true", "timeoutS": 30})
        assert got.status_code == 200, got.text
        assert got.json()["output"] == {"decision": "no", "by": "alice"}
        again = c.post("/api/runs/update-with-start", json=REQUEST)
        assert (again.status_code, again.json()) == (200, got.json())
        listed = c.get("/api/runs/exp-1/updates").json()
        assert [u["updateId"] for u in listed] == ["req-1"]
