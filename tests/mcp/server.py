"""A real MCP server for the tests, built with the SDK's MCPServer (FastMCP in mcp 1.x).

Run over stdio (``python server.py``) or streamable HTTP (``python server.py
--http PORT``). Every call is appended as one JSON line to the file named by
``FLOWCORE_MCP_LOG`` (tool, arguments, the idempotency key from the request's
``_meta``), so a test can see what reached the server and with which key.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent

server = MCPServer("flowcore-test", log_level="WARNING")


def _record(tool: str, arguments: dict[str, Any], ctx: Context) -> None:
    meta = ctx.request_context.meta or {}
    line = {"tool": tool, "arguments": arguments, "key": meta.get("flowcore/idempotencyKey")}
    with open(os.environ["FLOWCORE_MCP_LOG"], "a", encoding="utf-8") as log:
        log.write(json.dumps(line) + "\n")
        log.flush()


@server.tool()
def lookup(name: str, ctx: Context) -> dict[str, Any]:
    """Structured data about a name."""
    _record("lookup", {"name": name}, ctx)
    return {"name": name, "length": len(name), "upper": name.upper()}


@server.tool()
def note(text: str, ctx: Context) -> str:
    """Record a note; answers with plain text."""
    _record("note", {"text": text}, ctx)
    return f"noted: {text}"


@server.tool()
def refuse(reason: str, ctx: Context) -> str:
    """Always fails, as a tool error (isError) carrying the reason."""
    _record("refuse", {"reason": reason}, ctx)
    raise ToolError(f"refused: {reason}")


@server.tool()
def decline(amount: int, ctx: Context) -> CallToolResult:
    """Always fails, as a tool error whose structuredContent says why."""
    _record("decline", {"amount": amount}, ctx)
    return CallToolResult(
        content=[TextContent(type="text", text=f"declined: {amount} is over the limit")],
        structured_content={"status": 402, "limit": 100, "asked": amount},
        is_error=True,
    )


@server.tool()
def crash_once(marker: str, ctx: Context) -> dict[str, Any]:
    """Kills the server mid-call the first time ``marker`` (a file) does not exist."""
    _record("crash_once", {"marker": marker}, ctx)
    path = Path(marker)
    if not path.exists():
        path.write_text("crashed\n", encoding="utf-8")
        os._exit(3)  # no answer: the client loses the connection mid-call
    return {"survived": True, "pid": os.getpid()}


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
