"""The HTTP API of ``flowcore serve``: a real server process on a loopback port,
driven with a real HTTP client (httpx)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import jsonschema
import pytest
from openapi_spec_validator import validate

from .serving import FLOWS, Served, start_serve

TOKENS = {
    "alice": "alice-token-0123456789",
    "bob": "bob-token-0123456789ab",
    "reader": "reader-token-0123456789",  # alice's runs, read only
    "admin": "admin-token-0123456789a",
}
TOKEN_FILE = f"""
tokens:
  - {{token: {TOKENS["alice"]}, principal: alice}}
  - {{token: {TOKENS["bob"]}, principal: bob, access: write}}
  - {{token: {TOKENS["reader"]}, principal: alice, access: read}}
  - {{token: {TOKENS["admin"]}, principal: ops, access: admin}}
"""


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("serve")
    (tmp / "tokens.yaml").write_text(TOKEN_FILE)
    server = start_serve(
        tmp, "--flows", FLOWS, "--tokens", str(tmp / "tokens.yaml"), "--max-body", "4096"
    )
    yield server
    server.stop()


def client(served: Served, who: str | None) -> httpx.Client:
    headers = {} if who is None else {"Authorization": f"Bearer {TOKENS[who]}"}
    return httpx.Client(base_url=served.url, headers=headers, timeout=30)


def problem(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = response.json()
    assert body["status"] == status and body["type"].startswith("/problems/")
    return body


def start(c: httpx.Client, run_id: str, change: str = "v1") -> dict[str, Any]:
    r = c.post("/api/runs", json={"flow": "approve", "input": {"change": change}, "runId": run_id})
    assert r.status_code == 201, r.text
    assert r.headers["location"] == "/api/runs/" + quote(run_id, safe="")
    body: dict[str, Any] = r.json()
    return body


def wait_for(c: httpx.Client, run_id: str, check: Any, timeout: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        view: dict[str, Any] = c.get("/api/runs/" + quote(run_id, safe="")).json()
        if check(view):
            return view
        assert time.monotonic() < deadline, f"run {run_id} never got there: {view}"
        time.sleep(0.05)


def asking(view: dict[str, Any]) -> bool:
    return bool(view["waits"]["questions"])


def test_no_token_or_a_wrong_one_is_401(served: Served) -> None:
    with client(served, None) as c:
        body = problem(c.get("/api/runs"), 401)
        assert "no token" in body["detail"]
        assert c.get("/api/runs").headers["www-authenticate"].startswith("Bearer")
        wrong = c.get("/api/runs", headers={"Authorization": "Bearer not-a-token-at-all"})
        assert "not one this server accepts" in problem(wrong, 401)["detail"]
        basic = c.get("/api/runs", headers={"Authorization": "Basic YWxpY2U6eA=="})
        assert "Bearer TOKEN" in problem(basic, 401)["detail"]


def test_a_run_belongs_to_the_principal_that_started_it(served: Served) -> None:
    with client(served, "alice") as alice, client(served, "bob") as bob:
        run = start(alice, "owned-1")
        assert run["principal"] == "alice" and run["status"] == "running"
        wait_for(alice, "owned-1", asking)
        # Another principal's run answers as a run that does not exist, on every
        # route that takes a run id: the same 404, the same body.
        for verb, tail, body in RUN_ROUTES:
            kwargs: dict[str, Any] = {} if body is None else {"json": body}
            theirs = bob.request(verb, "/api/runs/owned-1" + tail, **kwargs)
            unknown = bob.request(verb, "/api/runs/owned-2" + tail, **kwargs)
            seen = problem(theirs, 404)
            assert seen == {
                **problem(unknown, 404),
                "detail": "no run 'owned-1'",
                "instance": "/api/runs/owned-1" + tail,
            }, (verb, tail)
        for verb, tail, body in ADMIN_RUN_ROUTES:
            kwargs = {} if body is None else {"json": body}
            assert (
                "needs admin access"
                in problem(bob.request(verb, "/api/runs/owned-1" + tail, **kwargs), 403)["detail"]
            )
        document = bob.get("/openapi.json").json()
        with_id = {
            (
                verb.upper(),
                path.removeprefix("/api/runs/{run_id}")
                .replace("{call_id}", "c-1")
                .replace("{update_id}", "u-1")
                .replace("{name}", "q-1"),
            )
            for path, item in document["paths"].items()
            if "{run_id}" in path
            for verb in item
        }
        routes = RUN_ROUTES + ADMIN_RUN_ROUTES
        assert with_id == {(verb, tail) for verb, tail, _ in routes}
        # Starting a run under another principal's run id does not reach it.
        taken = bob.post(
            "/api/runs", json={"flow": "approve", "input": {"change": "v1"}, "runId": "owned-1"}
        )
        refused = problem(taken, 409)
        assert refused["type"] == "/problems/cannot-start"
        assert refused["detail"] == "run 'owned-1' already exists: choose another id"
        # Nor does asking to use the existing run: the same refusal.
        reuse = bob.post(
            "/api/runs",
            json={"flow": "approve", "input": {"change": "v1"}, "runId": "owned-1"}
            | {"onConflict": "use-existing"},
        )
        assert problem(reuse, 409)["detail"] == refused["detail"]
        assert "owned-1" not in [r["runId"] for r in bob.get("/api/runs").json()["runs"]]
    with client(served, "admin") as admin:
        assert admin.get("/api/runs/owned-1").json()["run"]["principal"] == "alice"


# Every route that takes a run id (method, path after the id, body).
RUN_ROUTES: list[tuple[str, str, Any]] = [
    ("GET", "", None),
    ("POST", "/cancel", {}),
    ("POST", "/answers", {"key": "decide", "answer": "ship"}),
    ("POST", "/signals", {"name": "deployed"}),
    ("GET", "/events", None),
    ("GET", "/events/follow", None),
    ("GET", "/events/stream", None),
    ("GET", "/progress", None),
    ("GET", "/progress/follow", None),
    ("GET", "/progress/stream", None),
    ("GET", "/graph", None),
    ("GET", "/scheduled", None),
    ("POST", "/scheduled/c-1/cancel", None),
    ("POST", "/scheduled/c-1/run-now", None),
    ("POST", "/scheduled/c-1/replay", None),
    ("POST", "/scheduled", {"tool": "notify"}),
    ("POST", "/resume", None),
    ("POST", "/fork", {}),
    ("GET", "/export", None),
    ("GET", "/questions", None),
    ("GET", "/waits", None),
    ("POST", "/updates", {"name": "approve"}),
    ("GET", "/updates", None),
    ("GET", "/updates/u-1", None),
    ("POST", "/queries/q-1", None),
    ("GET", "/queries/q-1", None),
]
# The routes with a run id that need admin access: a write token is refused first.
ADMIN_RUN_ROUTES: list[tuple[str, str, Any]] = [
    ("DELETE", "", None),
    ("POST", "/upgrade", {"flow": "approve"}),
]


def test_a_read_only_token_reads_and_changes_nothing(served: Served) -> None:
    with client(served, "alice") as alice, client(served, "reader") as reader:
        start(alice, "read-1")
        wait_for(alice, "read-1", asking)
        assert reader.get("/api/runs/read-1").status_code == 200
        refused = reader.post("/api/runs/read-1/answers", json={"key": "decide", "answer": "ship"})
        assert "needs write access" in problem(refused, 403)["detail"]
        refused = reader.post("/api/runs", json={"flow": "approve", "input": {"change": "x"}})
        problem(refused, 403)
        assert alice.get("/api/runs/read-1").json()["run"]["status"] == "running"


def test_a_question_an_answer_a_signal_and_settlement(served: Served) -> None:
    with client(served, "alice") as c:
        start(c, "flow-1", "v7")
        view = wait_for(c, "flow-1", asking)
        (question,) = view["waits"]["questions"]
        assert question["question"] == "Ship v7?" and question["options"] == ["ship", "hold"]
        assert question["default"] == "hold" and question["deadlineMs"] > 0
        # Not an option: 422 with the options.
        body = problem(
            c.post("/api/runs/flow-1/answers", json={"key": "decide", "answer": "yes"}), 422
        )
        assert body["options"] == ["ship", "hold"]
        # No such question: 409 with the open ones.
        body = problem(
            c.post("/api/runs/flow-1/answers", json={"key": "nope", "answer": "ship"}), 409
        )
        assert body["openQuestions"] == ["decide#1"]
        # A signal the flow never waits for.
        body = problem(c.post("/api/runs/flow-1/signals", json={"name": "rebooted"}), 422)
        assert "'deployed'" in body["detail"]
        ok = c.post("/api/runs/flow-1/answers", json={"key": "decide#1", "answer": "ship"})
        assert ok.status_code == 200, ok.text
        # With a key: buffered for a wait with that key; the wait without one never takes it.
        keyed = {"name": "deployed", "payload": {"commit": "zz"}, "key": "elsewhere"}
        assert c.post("/api/runs/flow-1/signals", json=keyed).status_code == 202
        sent = c.post(
            "/api/runs/flow-1/signals", json={"name": "deployed", "payload": {"commit": "a1b2"}}
        )
        assert sent.status_code == 202, sent.text
        view = wait_for(c, "flow-1", lambda v: v["run"]["status"] != "running")
        assert view["run"]["status"] == "completed"
        assert view["output"] == {"decision": "ship", "commit": "a1b2"}
        assert view["report"] == [] and view["error"] is None
        # Settled: every change is a conflict.
        for response in (
            c.post("/api/runs/flow-1/answers", json={"key": "decide", "answer": "ship"}),
            c.post("/api/runs/flow-1/signals", json={"name": "deployed"}),
            c.post("/api/runs/flow-1/cancel", json={"reason": "late"}),
        ):
            assert "has settled (completed)" in problem(response, 409)["detail"]


def test_cancel(served: Served) -> None:
    with client(served, "alice") as c:
        start(c, "cancel-1")
        wait_for(c, "cancel-1", asking)
        r = c.post("/api/runs/cancel-1/cancel", json={"reason": "not needed"})
        assert r.status_code == 202, r.text
        view = wait_for(c, "cancel-1", lambda v: v["run"]["status"] != "running")
        assert view["run"]["status"] == "cancelled"


def test_unknown_things_are_404(served: Served) -> None:
    with client(served, "admin") as c:
        assert "no run 'ghost'" in problem(c.get("/api/runs/ghost"), 404)["detail"]
        problem(c.post("/api/runs/ghost/cancel", json={}), 404)
        problem(c.get("/api/nothing-here"), 404)
        problem(c.get("/api/runs/%FF%FE"), 422)
        problem(c.get("/api/schedules/ghost"), 404)
        body = problem(c.post("/api/runs", json={"flow": "ghost", "input": {}}), 422)
        assert "no flow 'ghost'" in body["detail"]


def test_bad_bodies_and_queries(served: Served) -> None:
    with client(served, "alice") as c:
        big = {"flow": "approve", "input": {"change": "x" * 5000}}
        assert "over the limit of 4,096" in problem(c.post("/api/runs", json=big), 413)["detail"]
        garbage = c.post(
            "/api/runs", content=b"{not json", headers={"Content-Type": "application/json"}
        )
        assert "not valid JSON" in problem(garbage, 422)["detail"]
        twice = c.post(
            "/api/runs",
            content=b'{"flow": "approve", "flow": "other"}',
            headers={"Content-Type": "application/json"},
        )
        assert "appears twice" in problem(twice, 422)["detail"]
        unknown = c.post("/api/runs", json={"flow": "approve", "inptu": {}})
        assert "inptu" in problem(unknown, 422)["detail"]
        typed = c.post("/api/runs", json={"flow": "approve", "budget": {"steps": "many"}})
        assert "$.budget.steps" in problem(typed, 422)["detail"]
        schema = c.post("/api/runs", json={"flow": "approve", "input": {"change": 3}})
        assert "change" in problem(schema, 422)["detail"]
        form = c.post("/api/runs", content=b"flow=approve", headers={"Content-Type": "text/plain"})
        problem(form, 415)
        problem(c.get("/api/runs?limit=0"), 422)
        problem(c.get("/api/runs?limit=ten"), 422)
        problem(c.get("/api/runs?status=sleeping"), 422)
        problem(c.get("/api/runs?colour=blue"), 422)
        problem(c.get("/api/runs?cursor=%%%"), 422)
        bad_time = problem(c.get("/api/runs?createdFrom=yesterday"), 422)
        assert "$.createdFrom" in bad_time["detail"]
        # What the OpenAPI document promises of every operation: 405 names what is allowed.
        not_allowed = problem(c.request("TRACE", "/api/whoami"), 405)
        assert not_allowed["type"] == "/problems/method-not-allowed"
        allow = c.request("PUT", "/api/runs").headers["allow"]
        assert sorted(allow.split(", ")) == ["GET", "HEAD", "POST"]


def test_listing_filters_and_pages(served: Served) -> None:
    with client(served, "bob") as c:
        for n in range(5):
            start(c, f"page-{n}")
        seen: list[str] = []
        cursor = None
        pages = 0
        while True:
            params: dict[str, Any] = {"limit": 2, "flow": "approve"}
            if cursor:
                params["cursor"] = cursor
            page = c.get("/api/runs", params=params).json()
            seen += [r["runId"] for r in page["runs"]]
            pages += 1
            cursor = page["nextCursor"]
            if cursor is None:
                break
        assert pages == 3
        # Newest first; bob sees his own runs only.
        assert sorted(seen) == [f"page-{n}" for n in range(5)] and len(set(seen)) == 5
        created = [c.get(f"/api/runs/{r}").json()["run"]["createdAt"] for r in seen]
        assert created == sorted(created, reverse=True)
        assert c.get("/api/runs", params={"status": "completed"}).json()["runs"] == []
        assert c.get("/api/runs", params={"flow": "other"}).json()["runs"] == []
        future = c.get("/api/runs", params={"createdFrom": "2999-01-01T00:00:00Z"}).json()
        assert future["runs"] == []
        past = c.get("/api/runs", params={"createdTo": "2999-01-01T00:00:00Z", "limit": 500}).json()
        assert len(past["runs"]) == 5


def test_the_event_stream_one_shot_replay_and_sse(served: Served) -> None:
    with client(served, "alice") as c:
        start(c, "stream-1")
        wait_for(c, "stream-1", asking)
        lines = c.get("/api/runs/stream-1/events").text.splitlines()
        records = [json.loads(line) for line in lines]
        assert [r["index"] for r in records] == list(range(len(records)))
        assert records[0]["type"] == "run.started" and records[0]["runId"] == "stream-1"
        assert set(records[0]) == {"type", "index", "runId", "at", "data"}
        tail = [json.loads(x) for x in c.get("/api/runs/stream-1/events?start=2").text.splitlines()]
        assert tail == records[2:]

        def sse(headers: dict[str, str]) -> list[tuple[str | None, str, str]]:
            got: list[tuple[str | None, str, str]] = []
            event: dict[str, str] = {}
            with c.stream("GET", "/api/runs/stream-1/events/stream", headers=headers) as r:
                assert r.headers["content-type"].startswith("text/event-stream")
                for line in r.iter_lines():
                    if line.startswith(":"):
                        continue
                    if line:
                        field, _, value = line.partition(":")
                        event[field] = value.lstrip(" ")
                        continue
                    if not event:
                        continue
                    got.append((event.get("id"), event.get("event", "message"), event["data"]))
                    if event.get("event") == "end":
                        return got
                    if len(got) == len(records) and "answered" not in headers.get("x-test", ""):
                        # Live: the run waits; answer it so that it moves on and settles.
                        headers["x-test"] = "answered"
                        c.post(
                            "/api/runs/stream-1/answers", json={"key": "decide", "answer": "hold"}
                        )
                        c.post(
                            "/api/runs/stream-1/signals",
                            json={"name": "deployed", "payload": {"commit": "c"}},
                        )
                    event = {}
            return got

        live = sse({})
        assert live[-1][1] == "end"
        indexes = [int(i) for i, _, _ in live[:-1] if i is not None]
        assert indexes == list(range(len(indexes))) and len(indexes) > len(records)
        assert [json.loads(data) for _, _, data in live[: len(records)]] == records
        assert json.loads(live[-2][2])["type"] == "run.settled"
        # Resumable: after Last-Event-ID comes the rest, nothing twice.
        resumed = sse({"Last-Event-ID": "3", "x-test": "answered"})
        assert [int(i) for i, _, _ in resumed[:-1] if i is not None] == indexes[4:]
        problem(c.get("/api/runs/stream-1/events/stream", headers={"Last-Event-ID": "x"}), 422)


def test_schedules_need_admin_to_change(served: Served) -> None:
    with client(served, "admin") as admin, client(served, "alice") as alice:
        assert admin.get("/api/schedules").json() == {"schedules": []}
        refused = alice.post("/api/schedules/nightly/pause", json={})
        assert "needs admin access" in problem(refused, 403)["detail"]
        problem(admin.post("/api/schedules/nightly/pause", json={}), 404)


def test_openapi_document_is_valid_and_describes_the_replies(served: Served) -> None:
    with client(served, "alice") as c:
        document = c.get("/openapi.json").json()
        validate(document)
        ops = {(m.upper(), p) for p, item in document["paths"].items() for m in item}
        assert ("POST", "/api/runs/{run_id}/answers") in ops
        assert ("GET", "/api/runs/{run_id}/events/stream") in ops
        schemas = document["components"]["schemas"]

        def check(value: Any, name: str) -> None:
            resolver = {"$ref": f"#/components/schemas/{name}", "components": {"schemas": schemas}}
            jsonschema.validate(value, resolver)

        start(c, "doc-1")
        view = wait_for(c, "doc-1", asking)
        check(view, "RunView")
        check(c.get("/api/runs").json(), "RunPage")
        check(c.get("/api/runs/doc-1/graph").json(), "Graph")
        check(problem(c.get("/api/runs/ghost"), 404), "Problem")
        answers = document["paths"]["/api/runs/{run_id}/answers"]["post"]
        assert answers["requestBody"]["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/AnswerBody"
        }
        statuses = {"200", "401", "403", "404", "408", "409", "413", "415", "422"}
        assert set(answers["responses"]) == statuses


def test_the_graph_marks_where_the_run_is(served: Served) -> None:
    with client(served, "alice") as c:
        start(c, "graph-1")
        wait_for(c, "graph-1", asking)
        graph = c.get("/api/runs/graph-1/graph").json()
        assert "flowchart TD" in graph["mermaid"] and "s_decide" in graph["mermaid"]
        assert graph["current"] == ["s_decide"]


def test_serve_makes_a_token_when_none_is_given(tmp_path: Path) -> None:
    server = start_serve(tmp_path)
    try:
        assert server.token is not None and len(server.token) >= 16
        with httpx.Client(base_url=server.url, timeout=30) as c:
            problem(c.get("/api/whoami"), 401)
            who = c.get("/api/whoami", headers={"Authorization": f"Bearer {server.token}"})
            assert who.json() == {"principal": "operator", "access": "admin"}
        assert server.url.startswith("http://127.0.0.1:")
    finally:
        server.stop()


def test_a_bad_token_file_is_refused_with_its_place(tmp_path: Path) -> None:
    bad = tmp_path / "tokens.yaml"
    bad.write_text("tokens:\n  - {token: short, principal: eve}\n")
    import subprocess

    from .serving import FLOWCORE

    done = subprocess.run(
        [FLOWCORE, "serve", "--port", "0", "--db", str(tmp_path / "x.db"), "--tokens", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"flowcore: {bad}: tokens[0].token: a string of at least 16 characters"
    )


def test_a_started_run_may_not_take_a_child_runs_id(served: Served) -> None:
    """Child runs are named by their parent's key (``r/sub#1``; every route takes such
    ids: ``test_child_runs_belong_to_the_parents_principal``). A run started here may not
    take that shape: it could take another principal's child's id before that child starts."""
    with client(served, "bob") as c:
        for run_id in ("X2/child#1", "team a/deploy #7/events", "a#b"):
            body = {"flow": "approve", "input": {"change": "v1"}, "runId": run_id}
            detail = problem(c.post("/api/runs", json=body), 422)["detail"]
            assert repr(run_id) in detail and "'/' and '#' are reserved" in detail
            problem(c.get("/api/runs/" + quote(run_id, safe="")), 404)


def test_on_conflict_refuses_or_uses_the_existing_run(served: Served) -> None:
    with client(served, "alice") as c:
        start(c, "conflict-1", "v1")
        again = {"flow": "approve", "input": {"change": "v2"}, "runId": "conflict-1"}
        assert (
            "already exists with a different input"
            in (problem(c.post("/api/runs", json=again), 409)["detail"])
        )
        r = c.post("/api/runs", json={**again, "onConflict": "use-existing"})
        assert r.status_code == 201, r.text
        assert r.json()["runId"] == "conflict-1" and r.json()["status"] == "running"
        events = c.get("/api/runs/conflict-1/events").text.splitlines()
        assert json.loads(events[0])["data"]["input"] == {"change": "v1"}
        problem(c.post("/api/runs", json={**again, "onConflict": "ignore"}), 422)


SCHEDULED = """\
flow: report
steps:
  - {id: nap, sleep: {for_ms: 10}}
output: "${input}"
schedules:
  nightly:
    cron: "0 7 * * *"
    timezone: Europe/Paris
    overlap: allow_all
    input: {day: "${schedule.at}"}
"""


def test_schedule_operations(tmp_path: Path) -> None:
    import subprocess

    from .serving import FLOWCORE

    spec = tmp_path / "report.yaml"
    spec.write_text(SCHEDULED)
    added = subprocess.run(
        [FLOWCORE, "schedule", "add", "--spec", str(spec), "--db", str(tmp_path / "serve.db")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert added.returncode == 0, added.stderr
    server = start_serve(tmp_path)
    try:
        headers = {"Authorization": f"Bearer {server.token}"}
        with httpx.Client(base_url=server.url, headers=headers, timeout=30) as c:
            (listed,) = c.get("/api/schedules").json()["schedules"]
            assert listed["name"] == "nightly"
            shown = c.get("/api/schedules/nightly").json()
            assert shown["name"] == "nightly" and len(shown["nextSlotsMs"]) == 5
            paused = c.post("/api/schedules/nightly/pause", json={"note": "maintenance"})
            assert paused.status_code == 200 and paused.json()["paused"] is True
            resumed = c.post("/api/schedules/nightly/resume", json={})
            assert resumed.json()["paused"] is False
            triggered = c.post("/api/schedules/nightly/trigger")
            assert triggered.status_code == 201, triggered.text
            run = triggered.json()
            assert run["flowId"] == "report" and run["principal"] is None
            view = wait_for(c, run["runId"], lambda v: v["run"]["status"] != "running")
            assert view["run"]["status"] == "completed"
            bad = c.post("/api/schedules/nightly/backfill", json={"start": "soon", "end": "later"})
            assert "Invalid RFC3339 encoded datetime - at `$.start`" in problem(bad, 422)["detail"]
            filled = c.post(
                "/api/schedules/nightly/backfill",
                json={"start": "2026-01-01T00:00:00Z", "end": "2026-01-03T00:00:00Z"},
            )
            assert filled.status_code == 200, filled.text
            two = c.get("/api/runs", params={"flow": "report", "limit": 10}).json()["runs"]
            assert len(two) == 3  # the triggered run and two nightly slots
            assert c.delete("/api/schedules/nightly").status_code == 204
            problem(c.get("/api/schedules/nightly"), 404)
    finally:
        server.stop()


def test_child_runs_belong_to_the_parents_principal(served: Served) -> None:
    with client(served, "alice") as alice, client(served, "bob") as bob:
        r = alice.post(
            "/api/runs", json={"flow": "handoff", "input": {"change": "v9"}, "runId": "rel"}
        )
        assert r.status_code == 201, r.text
        parent = wait_for(alice, "rel", lambda v: bool(v["children"]))
        (child_id,) = parent["children"]
        assert child_id == "rel/approval#1"
        child = wait_for(alice, child_id, asking)
        assert child["run"]["principal"] == "alice" and child["run"]["parent"] == "rel"
        path = "/api/runs/" + quote(child_id, safe="")
        assert problem(bob.get(path), 404)["detail"] == f"no run {child_id!r}"
        listed = alice.get("/api/runs", params={"parent": "rel"}).json()["runs"]
        assert [r["runId"] for r in listed] == [child_id]
        assert (
            alice.post(path + "/answers", json={"key": "decide", "answer": "ship"}).status_code
            == 200
        )
        sent = alice.post(path + "/signals", json={"name": "deployed", "payload": {"commit": "f"}})
        assert sent.status_code == 202
        done = wait_for(alice, "rel", lambda v: v["run"]["status"] != "running")
        assert done["run"]["status"] == "completed"
        assert done["output"] == {"decision": "ship", "commit": "f"}
        assert [row["status"] for row in done["report"]] == ["succeeded"]
