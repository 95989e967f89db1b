"""MCP tools on the real local host: a real MCP server (server.py) as a stdio subprocess."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest

from flowcore_handlers import RegistryError
from flowcore_local import HostError, LocalHost

from .support import EXPECTED, FLOW, calls, crash_flow, http_server, tools_module


def run_local(
    tmp_path: Path, tools: Path, spec: str, input: Any, run_id: str, **options: Any
) -> Any:
    async def main() -> Any:
        async with LocalHost(tmp_path / "runs.db", str(tools), **options) as host:
            rid = await host.start(spec, input, run_id)
            await asyncio.wait_for(host.work(until_settled=rid), 120)
            return await host.run(rid)

    return asyncio.run(main())


def test_a_flow_calls_mcp_tools_with_their_keys_and_catches_a_tool_error(tmp_path: Path) -> None:
    log = tmp_path / "calls.jsonl"
    row = run_local(tmp_path, tools_module(tmp_path, log), FLOW, {"name": "ada"}, "m-1")
    assert (row.status, row.output) == ("completed", EXPECTED)
    assert [(c["tool"], c["key"]) for c in calls(log)] == [
        ("lookup", "m-1/look#1"),
        ("note", "m-1/jot#1"),
        ("refuse", "m-1/nope#1"),
        ("note", "m-1/caught#1"),
    ]


def test_an_uncaught_tool_error_fails_the_run_with_its_type_and_text(tmp_path: Path) -> None:
    spec = (
        "flow: refuse\ntools: {files.refuse: {}}\nsteps:\n"
        "  - {id: r, call_tool: {tool: files.refuse, input: {reason: nope}}}\n"
    )
    row = run_local(tmp_path, tools_module(tmp_path, tmp_path / "c.jsonl"), spec, {}, "m-2")
    assert row.status == "failed"
    assert row.error["type"] == "tool-error"
    assert row.error["message"] == "Error executing tool refuse: refused: nope"
    assert not row.error.get("retryable")


def test_a_tool_error_with_structured_content_gives_the_flow_its_details(tmp_path: Path) -> None:
    spec = """
flow: decline
tools: {files.decline: {}, files.note: {class: idempotent}}
steps:
  - id: pay
    try:
      - {id: charge, call_tool: {tool: files.decline, input: {amount: 250}}}
    catch:
      - errors: [tool-error]
        steps:
          - id: tell
            call_tool:
              tool: files.note
              input: {text: "${error.details.status} over ${error.details.limit}"}
output: "${ {note: steps.tell.output, error: steps.charge.error} }"
"""
    log = tmp_path / "calls.jsonl"
    row = run_local(tmp_path, tools_module(tmp_path, log), spec, {}, "m-6")
    assert row.status == "completed", row.error
    assert row.output["note"] == {"result": "noted: 402 over 100"}
    assert row.output["error"] == {
        "type": "tool-error",
        "message": "declined: 250 is over the limit",
        "retryable": False,
        "details": {"status": 402, "limit": 100, "asked": 250},
    }
    assert [c["tool"] for c in calls(log)] == ["decline", "note"]


def test_a_crash_mid_call_of_an_idempotent_tool_is_reissued_with_its_key(tmp_path: Path) -> None:
    log = tmp_path / "calls.jsonl"
    marker = tmp_path / "crashed"
    row = run_local(
        tmp_path,
        tools_module(tmp_path, log),
        crash_flow("idempotent"),
        {"marker": str(marker)},
        "m-3",
        # Issued again at once, in the commit that reports the outcome unknown,
        # not left for recovery after its lease (which would outlast the wait).
        lease_ms=3_600_000,
    )
    assert marker.exists()  # the first call did kill the server
    assert row.status == "completed"
    assert row.output["survived"] is True
    seen = calls(log)
    assert [(c["tool"], c["key"]) for c in seen] == [
        ("crash_once", "m-3/boom#1"),
        ("crash_once", "m-3/boom#1"),  # same key, on a server started again
    ]


def test_a_crash_mid_call_of_an_uncertain_tool_fails_with_outcome_unknown(tmp_path: Path) -> None:
    log = tmp_path / "calls.jsonl"
    marker = tmp_path / "crashed"
    row = run_local(
        tmp_path,
        tools_module(tmp_path, log),
        crash_flow("uncertain"),
        {"marker": str(marker)},
        "m-4",
    )
    assert row.status == "failed"
    assert row.error["type"] == "outcome-unknown"
    assert [c["key"] for c in calls(log)] == ["m-4/boom#1"]  # never issued again


def test_a_flow_calling_a_tool_the_server_lacks_is_refused_at_start(tmp_path: Path) -> None:
    log = tmp_path / "calls.jsonl"
    spec = (
        "flow: lacks\ntools: {files.lookup: {}, files.absent: {}}\nsteps:\n"
        "  - {id: a, call_tool: {tool: files.lookup, input: {name: x}}}\n"
        "  - {id: b, call_tool: {tool: files.absent}}\n"
    )

    async def main() -> None:
        async with LocalHost(tmp_path / "runs.db", str(tools_module(tmp_path, log))) as host:
            with pytest.raises(HostError, match=r"files\.absent") as caught:
                await host.start(spec, {}, "m-5")
            assert "files.lookup" not in str(caught.value)
            assert await host.runs() == []

    asyncio.run(main())
    assert calls(log) == []


def test_a_bad_input_fails_with_invalid_input_without_reaching_the_server(tmp_path: Path) -> None:
    log = tmp_path / "calls.jsonl"
    spec = (
        "flow: bad\ntools: {files.lookup: {}}\nsteps:\n"
        "  - {id: a, call_tool: {tool: files.lookup, input: {name: 7}}}\n"
    )
    row = run_local(tmp_path, tools_module(tmp_path, log), spec, {}, "m-6")
    assert row.status == "failed"
    assert row.error["type"] == "invalid-input"
    assert "$.name" in row.error["message"] and "files.lookup" in row.error["message"]
    assert calls(log) == []


def test_a_server_that_cannot_start_fails_the_tools_module_clearly(tmp_path: Path) -> None:
    dead = f"StdioServer([{sys.executable!r}, '-c', 'import sys; sys.exit(2)'])"
    tools = tools_module(tmp_path, tmp_path / "c.jsonl", server=dead)

    async def main() -> None:
        async with LocalHost(tmp_path / "runs.db", str(tools)):
            pass

    with pytest.raises(RegistryError, match=r"MCP server .* did not start") as caught:
        asyncio.run(main())
    assert "mcp_test_tools" in str(caught.value)  # and which tools module said so


def test_a_missing_command_fails_the_tools_module_clearly(tmp_path: Path) -> None:
    gone = "StdioServer(['/nonexistent/flowcore-mcp-server'])"
    tools = tools_module(tmp_path, tmp_path / "c.jsonl", server=gone)

    async def main() -> None:
        async with LocalHost(tmp_path / "runs.db", str(tools)):
            pass

    with pytest.raises(RegistryError, match="/nonexistent/flowcore-mcp-server"):
        asyncio.run(main())


def test_the_same_tools_over_streamable_http(tmp_path: Path) -> None:
    log = tmp_path / "calls.jsonl"
    with http_server(log) as url:
        tools = tools_module(tmp_path, log, server=f"HttpServer({url!r})")
        row = run_local(tmp_path, tools, FLOW, {"name": "ada"}, "h-1")
    assert (row.status, row.output) == ("completed", EXPECTED)
    assert [c["key"] for c in calls(log)] == [
        "h-1/look#1",
        "h-1/jot#1",
        "h-1/nope#1",
        "h-1/caught#1",
    ]
