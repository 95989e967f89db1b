"""An MCP server for the MCP example (specs/mcp.md): a small warehouse.

Built with the MCP SDK's ``MCPServer`` (called ``FastMCP`` in mcp 1.x); run
over stdio by ``mcp_tools.py``. ``reserve`` shows how a server honours the
idempotency key flowcore sends in each request's ``_meta``: a request with
a key it has seen gets the first answer again, so a call re-issued after a
lost connection reserves nothing twice. (This server keeps its state in
memory; a real one keeps reservations, keys included, in its database.)
"""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("warehouse", log_level="WARNING")

STOCK = {"widget": 12, "gadget": 0}
RESERVED: dict[str, dict[str, Any]] = {}  # idempotency key -> the answer given


@server.tool()
def stock(sku: str) -> dict[str, Any]:
    """How many of ``sku`` are on hand."""
    if sku not in STOCK:
        raise ToolError(f"unknown sku {sku!r}")
    return {"sku": sku, "on_hand": STOCK[sku]}


@server.tool()
def reserve(sku: str, quantity: int, ctx: Context) -> dict[str, Any]:
    """Reserve ``quantity`` of ``sku``; the same idempotency key reserves once."""
    key = (ctx.request_context.meta or {}).get("flowcore/idempotencyKey")
    if key is not None and key in RESERVED:
        return RESERVED[key]
    if STOCK.get(sku, 0) < quantity:
        raise ToolError(f"only {STOCK.get(sku, 0)} {sku} on hand, {quantity} asked")
    STOCK[sku] -= quantity
    answer = {"sku": sku, "reserved": quantity, "left": STOCK[sku]}
    if key is not None:
        RESERVED[key] = answer
    return answer


if __name__ == "__main__":
    server.run()  # stdio; server.run("streamable-http", port=8000) serves it over HTTP
