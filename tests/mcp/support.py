"""What the MCP tests share: the test server, a tools module naming it, its call log."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the MCP tests need the mcp SDK (.[dev] or .[mcp])")

SERVER = Path(__file__).resolve().parent / "server.py"

FLOW = """
flow: mcp-demo
tools:
  files.lookup: {class: readonly}
  files.note: {class: idempotent}
  files.refuse: {}
steps:
  - {id: look, call_tool: {tool: files.lookup, input: {name: "${input.name}"}}}
  - {id: jot, call_tool: {tool: files.note, input: {text: "hello"}}}
  - id: guarded
    try:
      - {id: nope, call_tool: {tool: files.refuse, input: {reason: "not today"}}}
    catch:
      - errors: [tool-error]
        steps:
          - {id: caught, call_tool: {tool: files.note, input: {text: "${error.message}"}}}
output: "${ {look: steps.look.output, jot: steps.jot.output, guarded: steps.guarded.output} }"
"""

EXPECTED = {
    "look": {"name": "ada", "length": 3, "upper": "ADA"},
    "jot": {"result": "noted: hello"},
    "guarded": {"result": "noted: Error executing tool refuse: refused: not today"},
}


def crash_flow(klass: str) -> str:
    """A flow whose one call kills the server mid-call the first time (``input.marker``)."""
    return f"""
flow: mcp-crash
tools:
  files.crash_once: {{class: {klass}}}
steps:
  - {{id: boom, call_tool: {{tool: files.crash_once, input: {{marker: "${{input.marker}}"}}}}}}
output: "${{steps.boom.output}}"
"""


def tools_module(tmp_path: Path, log: Path, server: str | None = None) -> Path:
    """A tools module file in ``tmp_path`` serving the test server's tools as ``files.*``."""
    if server is None:
        server = (
            f"StdioServer([{sys.executable!r}, {str(SERVER)!r}],"
            f" env={{'FLOWCORE_MCP_LOG': {str(log)!r}}})"
        )
    path = tmp_path / "mcp_test_tools.py"
    path.write_text(
        "from flowcore_mcp import HttpServer, StdioServer, mcp_tools\n\n"
        f"SERVER = {server}\n"
        'TOOLS = mcp_tools(SERVER, prefix="files.")\n',
        encoding="utf-8",
    )
    return path


def calls(log: Path) -> list[dict[str, Any]]:
    """What reached the server: one entry per call (tool, arguments, idempotency key)."""
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def http_server(log: Path) -> Iterator[str]:
    """The test server over streamable HTTP on a loopback port; its endpoint URL."""
    port = free_port()
    env = {**os.environ, "FLOWCORE_MCP_LOG": str(log)}
    proc = subprocess.Popen(
        [sys.executable, str(SERVER), "--http", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"the HTTP MCP server exited with {proc.returncode}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise AssertionError("the HTTP MCP server did not listen within 60 s") from None
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
