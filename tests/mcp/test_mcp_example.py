"""The worked example of specs/mcp.md, run as the document says, offline."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from .support import SERVER  # noqa: F401  (skips these tests without the mcp SDK)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "specs" / "examples"
FLOWCORE = str(Path(sys.executable).with_name("flowcore"))


def flowcore_run(
    tmp_path: Path, tools: Path, input: dict[str, object]
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            FLOWCORE,
            "run",
            str(EXAMPLES / "mcp_flow.yaml"),
            "--tools",
            str(tools),
            "--input",
            json.dumps(input),
            "--db",
            str(tmp_path / "runs.db"),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
    )


def test_the_mcp_example_completes_and_falls_back_on_the_servers_refusal(tmp_path: Path) -> None:
    proc = flowcore_run(tmp_path, EXAMPLES / "mcp_tools.py", {"sku": "widget", "quantity": 20})
    assert proc.returncode == 0, proc.stderr
    run = json.loads(proc.stdout)
    assert run["status"] == "completed"
    assert run["output"] == {"on_hand": 12, "booking": {"sku": "widget", "reserved": 12, "left": 0}}


def test_a_server_that_will_not_start_is_one_clear_line(tmp_path: Path) -> None:
    tools = tmp_path / "gone_tools.py"
    tools.write_text(
        "from flowcore_mcp import StdioServer, mcp_tools\n"
        "TOOLS = mcp_tools(StdioServer(['/nonexistent/mcp-server']))\n",
        encoding="utf-8",
    )
    proc = flowcore_run(tmp_path, tools, {"sku": "widget", "quantity": 1})
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr + proc.stdout
    assert "MCP server ['/nonexistent/mcp-server'] did not start" in proc.stderr
    assert proc.stdout.strip() == ""  # no run was started
