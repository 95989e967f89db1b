"""Heartbeats on Temporal (language.md §6 heartbeat_timeout_ms, specs/temporal.md): a
step's heartbeat timeout is its activity's; a handler that heartbeats and goes
quiet is timed out by the server, reported as ``heartbeat-timeout`` with the
last details, and the retry's handler reads them. Side-effecting work ends
``outcome-unknown``. A real dev server and worker; handlers stall on events."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import flowcore_handlers
from flowcore import CallTool
from flowcore_handlers import Registry

from .support import running_host, unique

SCAN = """
flow: scan
tools: {scan: {class: idempotent}, post: {}}
steps:
  - id: pages
    call_tool: {tool: scan, input: {book: moby}}
    heartbeat_timeout_ms: 1s
    retry: {max_attempts: 2, initial_interval_ms: 0}
  - id: guard
    try:
      - id: send
        call_tool: {tool: post, input: "${steps.pages.output}"}
        heartbeat_timeout_ms: 1s
    catch:
      - errors: [outcome-unknown]
        steps:
          - id: why
            fail: {type: unsure, message: "${error.cause.type}", details: "${error.cause.details}"}
output: "${steps.pages.output}"
"""


def test_a_quiet_handler_times_out_and_its_retry_resumes_from_its_details(
    temporal_address: str,
) -> None:
    release = threading.Event()  # ends the stalled handlers when the test is done
    seen: list[Any] = []

    def scan(call: CallTool) -> Any:
        if flowcore_handlers.heartbeat_details() is None:
            flowcore_handlers.heartbeat({"page": 1})
            flowcore_handlers.heartbeat({"page": 2})
            release.wait(120)
            return "unused"
        seen.append(("resumed", flowcore_handlers.heartbeat_details()))
        return {"from": flowcore_handlers.heartbeat_details()}

    async def post(call: CallTool) -> Any:
        flowcore_handlers.heartbeat({"sent": 3})
        await asyncio.Event().wait()  # quiet until the activity is stopped
        return "never"

    async def main() -> dict[str, Any]:
        registry = Registry(tools={"scan": scan, "post": post})
        async with running_host(temporal_address, None, registry=registry) as host:
            rid = await host.start(SCAN, None, unique("beat"))
            try:
                return await asyncio.wait_for(host.result(rid), timeout=120)
            finally:
                release.set()

    result = asyncio.run(main())
    assert seen == [("resumed", {"page": 2})]
    assert result["status"] == "failed"
    error = result["error"]
    assert (error["type"], error["message"], error["details"]) == (
        "unsure",
        "heartbeat-timeout",
        {"sent": 3},
    )
