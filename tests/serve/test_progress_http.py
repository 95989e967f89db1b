"""A run's progress stream over HTTP from a real ``flowcore serve`` (its worker
runs the handler): followed as NDJSON, the connection dropped mid-stream while
the handler still publishes, resumed from the last index seen; every item seen
once, in order. Server-Sent Events resume after ``Last-Event-ID``."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .serving import start_serve

FLOW = """
flow: chunky
tools: {chunks: {class: idempotent}}
steps:
  - {id: write, call_tool: {tool: chunks, input: "${input}"}}
output: "${steps.write.output}"
"""

# Publishes 3 chunks, then waits (at most a minute) for the file ``release``,
# then publishes 3 more and a summary.
TOOLS = """
import time
from pathlib import Path

from flowcore_handlers import publish


def chunks(call):
    for i in range(3):
        publish(f"chunk {i}")
    release = Path(call.input["release"])
    deadline = time.monotonic() + 60
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    for i in range(3, 6):
        publish(f"chunk {i}")
    publish({"chunks": 6})
    return "written"


TOOLS = {"chunks": chunks}
"""

GUARD_S = 60.0


def wait_until(ok: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + GUARD_S
    while not ok():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {GUARD_S} s: {what}")
        time.sleep(0.02)


def sse_events(lines: Any) -> list[dict[str, str]]:
    """The Server-Sent Events of a reply's lines (comments skipped), to ``end``."""
    got: list[dict[str, str]] = []
    event: dict[str, str] = {}
    for line in lines:
        if line.startswith(":"):
            continue
        if line:
            field, _, value = line.partition(":")
            event[field] = value.lstrip(" ")
            continue
        if event:
            got.append(event)
            if event.get("event") == "end":
                break
            event = {}
    return got


def test_a_progress_stream_followed_dropped_and_resumed_over_http(tmp_path: Path) -> None:
    flows = tmp_path / "flows"
    flows.mkdir()
    (flows / "chunky.yaml").write_text(FLOW)
    tools = tmp_path / "chunky_tools.py"
    tools.write_text(TOOLS)
    release = tmp_path / "release"
    with start_serve(tmp_path, "--flows", flows, "--tools", tools) as server, server.client() as c:
        body = {"flow": "chunky", "input": {"release": str(release)}, "runId": "c-1"}
        r = c.post("/api/runs", json=body)
        assert r.status_code == 201, r.text
        first: list[dict[str, Any]] = []
        # Follow; drop the connection after two items, while the handler waits.
        with c.stream("GET", "/api/runs/c-1/progress/follow") as reply:
            assert reply.status_code == 200
            assert reply.headers["content-type"].startswith("application/x-ndjson")
            for line in reply.iter_lines():
                if line.strip():
                    first.append(json.loads(line))
                if len(first) == 2:
                    break
        release.touch()
        # Resume from the last index seen + 1: the rest, live until the run settles.
        resumed: list[dict[str, Any]] = []
        after = first[-1]["index"] + 1
        with c.stream("GET", f"/api/runs/c-1/progress/follow?start={after}") as reply:
            assert reply.status_code == 200
            resumed = [json.loads(line) for line in reply.iter_lines() if line.strip()]
        seen = first + resumed
        assert [e["index"] for e in seen] == list(range(7))
        assert [e["data"]["data"] for e in seen] == [
            *(f"chunk {i}" for i in range(6)),
            {"chunks": 6},
        ]
        assert {(e["type"], e["runId"], e["data"]["step"]) for e in seen} == {
            ("progress", "c-1", "write")
        }
        assert c.get("/api/runs/c-1").json()["run"]["status"] == "completed"
        # One read of a settled run's stream, from an index.
        r = c.get("/api/runs/c-1/progress", params={"start": 5})
        assert [json.loads(x)["index"] for x in r.text.splitlines()] == [5, 6]
        # Server-Sent Events: ``id`` each item's index; resumed after Last-Event-ID.
        with c.stream(
            "GET", "/api/runs/c-1/progress/stream", headers={"Last-Event-ID": "3"}
        ) as reply:
            assert reply.headers["content-type"].startswith("text/event-stream")
            events = sse_events(reply.iter_lines())
        assert [(e.get("id"), e["event"]) for e in events] == [
            ("4", "progress"),
            ("5", "progress"),
            ("6", "progress"),
            (None, "end"),
        ]
        assert json.loads(events[0]["data"])["data"]["data"] == "chunk 4"
        # The document names the three routes; the SSE one takes Last-Event-ID.
        paths = c.get("/openapi.json").json()["paths"]
        stream = paths["/api/runs/{run_id}/progress/stream"]["get"]
        assert "Last-Event-ID" in [p["name"] for p in stream["parameters"]]
        assert {"/api/runs/{run_id}/progress", "/api/runs/{run_id}/progress/follow"} <= set(paths)
        # Unknown runs and bad indexes are refused with a problem, not a stream.
        assert c.get("/api/runs/ghost/progress/follow").status_code == 404
        assert c.get("/api/runs/c-1/progress?start=-1").status_code == 422
