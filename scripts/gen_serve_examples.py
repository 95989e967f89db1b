"""Write the request/response examples of ``specs/serve.md`` from a real server.

Usage: ``python scripts/gen_serve_examples.py`` (rewrites the part of
specs/serve.md between the ``examples`` markers), or ``--check`` (exit 1 when
the committed examples differ from what the server answers now).

It starts ``flowcore serve`` on a fresh database with the flows of
``tests/serve/flows`` and two tokens, makes each request with httpx, and
writes it with the reply. What changes from run to run (times, durations,
the port) is written as a fixed placeholder, so the examples stay comparable.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.serve.serving import FLOWS, start_serve  # noqa: E402

DOC = ROOT / "specs" / "serve.md"
START, END = "<!-- examples:start -->", "<!-- examples:end -->"
TOKENS = """tokens:
  - {token: alice-token-0123456789, principal: alice}
  - {token: bob-token-0123456789ab, principal: bob}
"""
_TIMES = re.compile(r'"(createdAt|updatedAt)":"[^"]+"')
_MS = re.compile(r'"(durationMs|nowMs|deadlineMs|dueMs|untilMs|at|atMs|wallClockMs)":\d+')


def _stable(text: str) -> str:
    text = _TIMES.sub(lambda m: f'"{m.group(1)}":"2026-01-01T00:00:00.000Z"', text)
    return _MS.sub(lambda m: f'"{m.group(1)}":0', text)


def _pretty(body: bytes, media: str) -> str:
    if media.startswith("application/x-ndjson"):
        lines = body.decode().splitlines()
        return "\n".join(_stable(line) for line in lines[:3]) + ("\n…" if len(lines) > 3 else "")
    value: Any = json.loads(_stable(body.decode()))
    return json.dumps(value, indent=2, ensure_ascii=False)


def _exchange(c: httpx.Client, title: str, method: str, path: str, body: Any = None) -> str:
    response = c.request(method, path, json=body) if body is not None else c.request(method, path)
    media = response.headers.get("content-type", "")
    request = f"{method} {path}"
    if body is not None:
        request += "\nContent-Type: application/json\n\n" + json.dumps(body)
    reply = f"HTTP/1.1 {response.status_code} {response.reason_phrase}\nContent-Type: {media}"
    if "location" in response.headers:
        reply += f"\nLocation: {response.headers['location']}"
    if response.content:
        reply += "\n\n" + _pretty(response.content, media)
    return f"#### {title}\n\n```http\n{request}\n```\n\n```http\n{reply}\n```\n"


def _wait(c: httpx.Client, run_id: str, check: Any) -> None:
    deadline = time.monotonic() + 30
    while not check(c.get(f"/api/runs/{run_id}").json()):
        if time.monotonic() > deadline:
            raise SystemExit(f"run {run_id} did not get there")
        time.sleep(0.05)


def examples() -> str:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "tokens.yaml").write_text(TOKENS)
        served = start_serve(folder, "--flows", FLOWS, "--tokens", str(folder / "tokens.yaml"))
        try:
            alice = httpx.Client(
                base_url=served.url,
                headers={"Authorization": "Bearer alice-token-0123456789"},
                timeout=30,
            )
            bob = httpx.Client(
                base_url=served.url,
                headers={"Authorization": "Bearer bob-token-0123456789ab"},
                timeout=30,
            )
            parts = []
            start = {"flow": "approve", "input": {"change": "v42"}, "runId": "ship-v42"}
            parts.append(_exchange(alice, "Start a run", "POST", "/api/runs", start))
            _wait(alice, "ship-v42", lambda v: v["waits"]["questions"])
            parts.append(_exchange(alice, "What it waits for", "GET", "/api/runs/ship-v42"))
            bad = {"key": "decide", "answer": "maybe"}
            parts.append(
                _exchange(
                    alice,
                    "An answer that is not an option",
                    "POST",
                    "/api/runs/ship-v42/answers",
                    bad,
                )
            )
            parts.append(_exchange(bob, "Another principal's run", "GET", "/api/runs/ship-v42"))
            good = {"key": "decide", "answer": "ship"}
            parts.append(
                _exchange(alice, "Answer the question", "POST", "/api/runs/ship-v42/answers", good)
            )
            signal = {"name": "deployed", "payload": {"commit": "a1b2c3"}}
            parts.append(
                _exchange(alice, "Send a signal", "POST", "/api/runs/ship-v42/signals", signal)
            )
            _wait(alice, "ship-v42", lambda v: v["run"]["status"] != "running")
            parts.append(_exchange(alice, "The settled run", "GET", "/api/runs/ship-v42"))
            parts.append(
                _exchange(
                    alice,
                    "The event stream, from index 5",
                    "GET",
                    "/api/runs/ship-v42/events?start=5",
                )
            )
            parts.append(_exchange(alice, "List runs", "GET", "/api/runs?flow=approve&limit=10"))
            # A fork of the settled run from its question, answered otherwise.
            fork = {"fromStep": "decide", "newRunId": "ship-v42-again"}
            alice.post("/api/runs/ship-v42/fork", json=fork).raise_for_status()
            _wait(alice, "ship-v42-again", lambda v: v["waits"]["questions"])
            hold = {"key": "decide", "answer": "hold"}
            alice.post("/api/runs/ship-v42-again/answers", json=hold).raise_for_status()
            _wait(alice, "ship-v42-again", lambda v: v["waits"]["signals"])
            parts.append(
                _exchange(
                    alice,
                    "Compare a run and its fork",
                    "GET",
                    "/api/compare?a=ship-v42&b=ship-v42-again",
                )
            )
            parts.append(
                _exchange(
                    alice,
                    "A settled run refuses changes",
                    "POST",
                    "/api/runs/ship-v42/cancel",
                    {"reason": "too late"},
                )
            )
            alice.close()
            bob.close()
        finally:
            served.stop()
    return "\n".join(parts)


def main() -> int:
    text = DOC.read_text()
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    new = f"{head}{START}\n\n{examples()}\n{END}{tail}"
    if "--check" in sys.argv:
        if new != text:
            print(
                "specs/serve.md: the examples differ from what the server answers;"
                " run python scripts/gen_serve_examples.py"
            )
            return 1
        return 0
    DOC.write_text(new)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
