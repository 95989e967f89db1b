"""The MCP example's tools module: the warehouse server's tools as ``warehouse.*``.

``flowcore run specs/examples/mcp_flow.yaml --tools specs/examples/mcp_tools.py``
starts ``mcp_server.py`` (with this interpreter, which needs the ``mcp``
extra), lists its tools while loading, and calls them over stdio.
"""

from __future__ import annotations

import sys
from pathlib import Path

from flowcore_mcp import StdioServer, mcp_tools

WAREHOUSE = StdioServer([sys.executable, str(Path(__file__).with_name("mcp_server.py"))])

TOOLS = mcp_tools(WAREHOUSE, prefix="warehouse.")
