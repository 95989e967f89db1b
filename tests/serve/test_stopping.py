"""How ``flowcore serve`` and ``flowcore worker`` stop: on SIGTERM (as systemd and
docker stop them) after their running handlers finish, and ``serve`` at once,
saying why, when its worker dies."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from flowcore_cli.main import run
from flowcore_local import LocalHost
from flowcore_serve import Tokens, WorkerStopped, serve

from .serving import FLOWCORE, start_serve

TOOLS = Path(__file__).with_name("held_tools.py")
HELD = """\
flow: held
tools: {held.call: {class: idempotent}}
steps:
  - id: hold
    call_tool: {tool: held.call, input: {started: "${input.started}", release: "${input.release}"}}
output: "${steps.hold.output}"
"""
GUARD_S = 60.0  # a guard against a hang, never a measure


def wait_until(check: Any, what: str) -> None:
    deadline = time.monotonic() + GUARD_S
    while not check():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.01)


def shown(db: Path, run_id: str) -> dict[str, Any]:
    done = subprocess.run(
        [FLOWCORE, "show", run_id, "--db", str(db), "--json"],
        capture_output=True,
        text=True,
        timeout=GUARD_S,
    )
    assert done.returncode == 0, done.stderr
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def refused(url: str) -> bool:
    host, port = url.removeprefix("http://").rstrip("/").rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError:
        return True
    return False


def test_sigterm_stops_serve_once_its_running_handler_has_finished(tmp_path: Path) -> None:
    flows = tmp_path / "flows"
    flows.mkdir()
    (flows / "held.yaml").write_text(HELD)
    started, release = tmp_path / "started", tmp_path / "release"
    server = start_serve(tmp_path, "--flows", flows, "--tools", TOOLS)
    try:
        with server.client() as c:
            body = {"started": str(started), "release": str(release)}
            r = c.post("/api/runs", json={"flow": "held", "input": body, "runId": "h-1"})
            assert r.status_code == 201, r.text
        wait_until(started.exists, "the handler started")
        server.proc.send_signal(signal.SIGTERM)
        # The server stops listening, and the process stays while the handler runs.
        wait_until(lambda: refused(server.url), "the server stopped listening")
        assert server.proc.poll() is None, server.output()
        release.touch()
        code = server.proc.wait(timeout=GUARD_S)
    finally:
        server.stop()
    assert code == 0, server.output()
    view = shown(server.db, "h-1")
    assert view["status"] == "completed"
    assert view["output"] == {"finished": True, "released": True}


def test_sigterm_stops_the_worker_once_its_running_handler_has_finished(tmp_path: Path) -> None:
    spec = tmp_path / "held.yaml"
    spec.write_text(HELD)
    db = tmp_path / "worker.db"
    started, release = tmp_path / "started", tmp_path / "release"
    body = json.dumps({"started": str(started), "release": str(release)})
    base = [FLOWCORE, "run", str(spec), "--tools", str(TOOLS), "--db", str(db)]
    done = subprocess.run(
        [*base, "--input", body, "--run-id", "w-1", "--detach"],
        capture_output=True,
        text=True,
        timeout=GUARD_S,
    )
    assert done.returncode == 0, done.stderr
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        worker = subprocess.Popen(
            [FLOWCORE, "worker", "--db", str(db)], stdout=out, stderr=subprocess.STDOUT
        )
    try:
        wait_until(started.exists, "the handler started")
        worker.send_signal(signal.SIGTERM)
        release.touch()
        code = worker.wait(timeout=GUARD_S)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert code == 0, log.read_text()
    assert "worker stopped: 1 run(s) settled (1 completed)" in log.read_text()
    view = shown(db, "w-1")
    assert view["status"] == "completed"
    assert view["output"] == {"finished": True, "released": True}


def break_the_worker(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """From the moment the returned flag is set, the worker's loop fails (as on a
    lost disk): ``LocalHost._seen``, the read every turn of the loop makes (an
    idle one included), raises."""
    broken = [False]
    seen = LocalHost._seen

    def failing(self: LocalHost) -> tuple[int, int, int]:
        if broken[0]:
            raise RuntimeError("the disk went away")
        return seen(self)

    monkeypatch.setattr(LocalHost, "_seen", failing)
    return broken


def test_serve_stops_and_says_why_when_its_worker_dies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = break_the_worker(monkeypatch)
    tokens = Tokens.parse("tokens: [{token: operator-token-0123456, principal: ops}]", "t")
    ready: list[tuple[str, int]] = []

    async def main() -> None:
        task = asyncio.create_task(
            serve(tmp_path / "x.db", tokens, port=0, on_ready=lambda h, p: ready.append((h, p)))
        )
        while not ready:
            assert not task.done(), task
            await asyncio.sleep(0.01)
        base = "http://{}:{}".format(*ready[0])
        headers = {"Authorization": "Bearer operator-token-0123456"}
        async with httpx.AsyncClient(base_url=base, headers=headers, timeout=30) as c:
            assert (await c.get("/api/whoami")).status_code == 200
        broken[0] = True
        with pytest.raises(WorkerStopped) as stopped:
            await asyncio.wait_for(task, GUARD_S)
        assert str(stopped.value).startswith(
            "the worker stopped (RuntimeError: the disk went away); the server stopped too"
        )
        assert isinstance(stopped.value.__cause__, RuntimeError)
        async with httpx.AsyncClient(base_url=base, headers=headers, timeout=30) as c:
            with pytest.raises(httpx.ConnectError):
                await c.get("/api/whoami")

    asyncio.run(main())


def test_the_serve_command_exits_1_with_the_workers_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    break_the_worker(monkeypatch)[0] = True
    monkeypatch.delenv("FLOWCORE_TOKENS", raising=False)
    with pytest.raises(SystemExit) as exited:
        run(["serve", "--db", str(tmp_path / "x.db"), "--port", "0"])
    assert exited.value.code == 1
    err = capsys.readouterr().err
    assert err.startswith(
        "flowcore: the worker stopped (RuntimeError: the disk went away); the server stopped too"
    ), err
    assert err.count("\n") == 1  # one line, no traceback
