"""What one client may take of ``flowcore serve``, and what it may not learn:
integers beyond 64 bits, media types, stalled bodies, open streams, and
other principals' run ids.

In-process: the app on a ``LocalHost`` (no worker: the runs stay where they
are), through httpx's ASGI transport, or behind a real uvicorn on a free
loopback port where the connection itself matters.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import httpx
import msgspec
import pytest
import uvicorn
from litestar import Litestar

import flowcore
from flowcore_cli.main import run
from flowcore_local import LocalHost
from flowcore_serve import Tokens, create_app

from .serving import FLOWS
from .test_api import TOKEN_FILE, TOKENS

Scenario = Callable[[LocalHost, Litestar], Awaitable[None]]


def on_app(tmp_path: Path, scenario: Scenario, **limits: Any) -> None:
    async def main() -> None:
        async with LocalHost(tmp_path / "limits.db") as host:
            tokens = Tokens.parse(TOKEN_FILE, "tokens")
            await scenario(host, create_app(host, tokens, FLOWS, **limits))

    asyncio.run(main())


def asgi(app: Litestar, who: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=cast(Any, app)),
        base_url="http://testserver",
        headers={"Authorization": f"Bearer {TOKENS[who]}"},
    )


@contextlib.asynccontextmanager
async def listening(app: Litestar) -> AsyncIterator[str]:
    """``app`` behind uvicorn on a free loopback port, until the block ends."""
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
            pytest.fail("uvicorn stopped before it listened")
        await asyncio.sleep(0.01)
    host, port = server.servers[0].sockets[0].getsockname()[:2]
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        await task


def problem(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    return body


async def start(c: httpx.AsyncClient, run_id: str) -> None:
    r = await c.post(
        "/api/runs", json={"flow": "approve", "input": {"change": "x"}, "runId": run_id}
    )
    assert r.status_code == 201, r.text


BEYOND_64_BITS = [str(2**63), str(2**64 - 1), str(10**23)]


def test_integers_beyond_64_bits_are_refused_naming_the_parameter(tmp_path: Path) -> None:
    async def scenario(host: LocalHost, app: Litestar) -> None:
        async with asgi(app, "alice") as c:
            await start(c, "r-1")
            for big in BEYOND_64_BITS:
                for form in ("", "/follow", "/stream"):
                    r = await c.get(f"/api/runs/r-1/events{form}", params={"start": big})
                    assert "`$.start`" in problem(r, 422)["detail"], (form, big)
                where = problem(await c.get("/api/runs", params={"where": f"tier>{big}"}), 422)
                assert where["detail"].startswith(f"where: metadata filter 'tier>{big}'")
                assert "beyond 64 bits" in where["detail"]
                # An equality with such a number compares text: nothing matches, nothing fails.
                same = await c.get("/api/runs", params={"where": f"tier={big}"})
                assert same.status_code == 200 and same.json()["runs"] == []
            forged = msgspec.json.encode([2**63, "r-1"])
            cursor = base64.urlsafe_b64encode(forged).decode().rstrip("=")
            refused = problem(await c.get("/api/runs", params={"cursor": cursor}), 422)
            assert refused["type"] == "/problems/invalid-cursor"
            # The largest the database holds is still an index (past the end: no records).
            r = await c.get("/api/runs/r-1/events", params={"start": str(2**63 - 1)})
            assert r.status_code == 200 and r.text == ""

    on_app(tmp_path, scenario)


def test_the_command_line_refuses_a_where_beyond_64_bits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "cli.db")
    for big in BEYOND_64_BITS:
        assert run(["runs", "--db", db, "--where", f"tier>{big}"]) == 2
        err = capsys.readouterr().err
        assert err.startswith(
            f"flowcore: Invalid value for '--where': metadata filter 'tier>{big}'"
        )
        assert "beyond 64 bits" in err and "internal error" not in err
    with pytest.raises(flowcore.MetadataFilterError, match="beyond 64 bits"):
        flowcore.parse_metadata_filter("tier<=-9223372036854775809")
    assert flowcore.parse_metadata_filter("tier>=-9223372036854775808").number == -(2**63)


def test_media_types_are_case_insensitive(tmp_path: Path) -> None:
    async def scenario(host: LocalHost, app: Litestar) -> None:
        async with asgi(app, "alice") as c:
            body = json.dumps({"flow": "approve", "input": {"change": "x"}})
            for media_type in ("APPLICATION/JSON", "Application/Json; charset=UTF-8"):
                r = await c.post("/api/runs", content=body, headers={"Content-Type": media_type})
                assert r.status_code == 201, (media_type, r.text)
            form = await c.post("/api/runs", content=body, headers={"Content-Type": "TEXT/PLAIN"})
            problem(form, 415)

    on_app(tmp_path, scenario)


async def stalled(base: str, request: bytes) -> tuple[bytes, bytes]:
    """Send ``request`` (headers and part of a body) and no more: the status line
    and the rest of what the server sends until it closes the connection."""
    host, port = base.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(request)
        await writer.drain()
        # A guard, not a measure: the server answers long before this.
        async with asyncio.timeout(60):
            status = await reader.readline()
            rest = await reader.read()  # until the server closes the connection
    finally:
        writer.close()
    return status, rest


def test_a_stalled_body_is_408_and_the_connection_closed(tmp_path: Path) -> None:
    partial = b'{"flow": "appr'
    api = (
        b"POST /api/runs HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        b"Authorization: Bearer " + TOKENS["alice"].encode() + b"\r\n"
        b"Content-Length: 100\r\n\r\n" + partial
    )

    async def scenario(host: LocalHost, app: Litestar) -> None:
        async with listening(app) as base:
            status, rest = await stalled(base, api)
            assert status.startswith(b"HTTP/1.1 408 "), status
            head, _, body = rest.partition(b"\r\n\r\n")
            assert b"connection: close" in head.lower()
            detail = json.loads(body)
            assert detail["type"] == "/problems/body-timeout"
            assert "did not arrive within 0.3 s" in detail["detail"]
            # The login form of the web view is bounded the same way.
            login = (
                b"POST /login HTTP/1.1\r\nHost: "
                + base.removeprefix("http://").encode()
                + b"\r\nOrigin: "
                + base.encode()
                + b"\r\n"
                b"Content-Type: application/x-www-form-urlencoded\r\n"
                b"Content-Length: 100\r\n\r\ntoken=abc"
            )
            status, _ = await stalled(base, login)
            assert status.startswith(b"HTTP/1.1 408 "), status
            async with asgi(app, "alice") as c:  # and nothing was started
                assert (await c.get("/api/runs")).json()["runs"] == []

    on_app(tmp_path, scenario, body_timeout=0.3)


def test_a_token_holds_at_most_max_streams_open(tmp_path: Path) -> None:
    async def scenario(host: LocalHost, app: Litestar) -> None:
        async with (
            listening(app) as base,
            httpx.AsyncClient(base_url=base, timeout=30) as http,
        ):
            alice = {"Authorization": f"Bearer {TOKENS['alice']}"}
            reader = {"Authorization": f"Bearer {TOKENS['reader']}"}  # alice's, another token
            assert (await http.post("/api/runs", headers=alice, json=START)).status_code == 201
            async with contextlib.AsyncExitStack() as held:
                for path in ("/events/follow", "/events/stream"):
                    r = await held.enter_async_context(
                        http.stream("GET", "/api/runs/s-1" + path, headers=alice)
                    )
                    assert r.status_code == 200
                for path in ("/events/follow", "/events/stream"):
                    refused = await http.get("/api/runs/s-1" + path, headers=alice)
                    body = problem(refused, 429)
                    assert body["type"] == "/problems/too-many-streams"
                    assert "holds 2 open event streams" in body["detail"]
                # The limit is per token; other requests of the token go on.
                other = await held.enter_async_context(
                    http.stream("GET", "/api/runs/s-1/events/follow", headers=reader)
                )
                assert other.status_code == 200
                assert (await http.get("/api/runs/s-1", headers=alice)).status_code == 200
            # Closed, the streams give their places back (once the server sees them go).
            for _ in range(3000):
                async with http.stream("GET", "/api/runs/s-1/events/follow", headers=alice) as r:
                    if r.status_code == 200:
                        break
                    assert r.status_code == 429
                await asyncio.sleep(0.01)
            else:
                pytest.fail("the closed streams never gave their places back")

    on_app(tmp_path, scenario, max_streams=2)


START = {"flow": "approve", "input": {"change": "x"}, "runId": "s-1"}


def test_the_limits_are_refused_when_they_make_no_sense(tmp_path: Path) -> None:
    async def scenario(host: LocalHost, app: Litestar) -> None:
        tokens = Tokens.parse(TOKEN_FILE, "tokens")
        bads: list[dict[str, Any]] = [{"body_timeout": 0}, {"max_streams": 0}, {"body_limit": 0}]
        for bad in bads:
            with pytest.raises(ValueError, match="must be"):
                create_app(host, tokens, **bad)

    on_app(tmp_path, scenario)


def test_the_openapi_document_lists_the_new_refusals(tmp_path: Path) -> None:
    async def scenario(host: LocalHost, app: Litestar) -> None:
        async with asgi(app, "alice") as c:
            paths = (await c.get("/openapi.json")).json()["paths"]
        run = "/api/runs/{run_id}"
        assert "403" not in paths[run]["get"]["responses"]  # another's run is 404
        assert "404" in paths[run]["get"]["responses"]
        for stream in ("/events/follow", "/events/stream"):
            assert "429" in paths[run + stream]["get"]["responses"]
        assert "408" in paths[run + "/answers"]["post"]["responses"]
        assert "408" in paths["/api/runs"]["post"]["responses"]

    on_app(tmp_path, scenario)


def test_the_event_streams_end_when_the_server_closes(tmp_path: Path) -> None:
    """At shutdown (``closing`` set) a follow and a Server-Sent Events stream of a
    running run end at once; the SSE stream without its ``end`` event, since the
    run has not settled (a client resumes from the last index it got)."""

    async def main() -> None:
        closing = asyncio.Event()
        async with LocalHost(tmp_path / "closing.db") as host:
            tokens = Tokens.parse(TOKEN_FILE, "tokens")
            app = create_app(host, tokens, FLOWS, closing=closing)
            async with asgi(app, "alice") as c:
                await start(c, "c-1")
                closing.set()
                async with asyncio.timeout(60):  # a guard against a hang, never a measure
                    sse = await c.get("/api/runs/c-1/events/stream")
                    follow = await c.get("/api/runs/c-1/events/follow")
                assert sse.status_code == 200 and follow.status_code == 200
                assert "event: end" not in sse.text

    asyncio.run(main())
