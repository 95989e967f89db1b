"""Heartbeats on the local host (language.md §6 heartbeat_timeout_ms, specs/local.md):
a handler that heartbeats and then goes quiet is stopped and reported as
``heartbeat-timeout`` with its last details; a retry of safe work resumes from
them (``flowcore_handlers.heartbeat_details``); side-effecting work ends
``outcome-unknown``. A real SQLite file, real handlers; the handlers stall on
events, never on sleeps measured against the clock."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

import flowcore_handlers
from flowcore import CallTool, RunAgent
from flowcore_handlers import HeartbeatError, Registry
from flowcore_local import LocalHost

# 1 s: an attempt that answers at once never comes near it, however busy the machine.
SCAN = """
flow: scan
tools: {scan: {class: idempotent}}
steps:
  - id: pages
    call_tool: {tool: scan, input: {book: moby}}
    heartbeat_timeout_ms: 1s
    retry: {max_attempts: 2, initial_interval_ms: 0}
output: "${steps.pages.output}"
"""


async def _run(db: Path | str, spec: str, registry: Registry) -> Any:
    async with LocalHost(db, registry=registry) as host:
        rid = await host.start(spec, None, "r")
        await asyncio.wait_for(host.work(until_settled=rid), timeout=120)
        return await host.run(rid)


def test_a_quiet_sync_handler_is_stopped_and_its_retry_resumes_from_its_details(
    tmp_path: Path,
    local_db: Path | str,
) -> None:
    seen: list[Any] = []

    def scan(call: CallTool) -> Any:
        if flowcore_handlers.heartbeat_details() is None:  # the first attempt
            flowcore_handlers.heartbeat({"page": 1})
            flowcore_handlers.heartbeat({"page": 2})
            flowcore_handlers.heartbeat()  # alive; the details stay
            # Stalls until the host stops it (bounded so a broken host fails the test).
            told = flowcore_handlers.cancellation().wait(60)
            seen.append(("stopped", told, call.idempotency_key))
            return "unused"
        seen.append(("resumed", flowcore_handlers.heartbeat_details(), call.heartbeat_details))
        return {"from": flowcore_handlers.heartbeat_details()}

    row = asyncio.run(_run(local_db, SCAN, Registry(tools={"scan": scan})))
    assert (row.status, row.output) == ("completed", {"from": {"page": 2}})
    assert seen == [("stopped", True, "r/pages#1"), ("resumed", {"page": 2}, {"page": 2})]


def test_an_async_handler_that_goes_quiet_is_cancelled(
    tmp_path: Path, local_db: Path | str
) -> None:
    seen: list[str] = []

    async def scan(call: CallTool) -> Any:
        if flowcore_handlers.heartbeat_details() is not None:
            return "second"
        flowcore_handlers.heartbeat({"page": 7})
        try:
            await asyncio.Event().wait()  # never set: only the host ends this
        except asyncio.CancelledError:
            seen.append(f"cancelled, asked: {flowcore_handlers.cancelled()}")
            raise
        return "never"

    row = asyncio.run(_run(local_db, SCAN, Registry(tools={"scan": scan})))
    assert (row.status, row.output) == ("completed", "second")
    assert seen == ["cancelled, asked: True"]


AGENT = """
flow: write
steps:
  - id: draft
    run_agent: {agent: writer, prompt: "write"}
    heartbeat_timeout_ms: 1s
    retry: {max_attempts: 3, errors: ["*"]}
"""


def test_side_effecting_work_that_goes_quiet_ends_outcome_unknown(
    tmp_path: Path, local_db: Path | str
) -> None:
    release = threading.Event()
    calls: list[str] = []

    def writer(call: RunAgent) -> Any:
        calls.append(call.idempotency_key)
        flowcore_handlers.heartbeat({"words": 120})
        flowcore_handlers.cancellation().wait(60)
        release.set()
        return "late"

    row = asyncio.run(_run(local_db, AGENT, Registry(agents={"writer": writer})))
    assert row.status == "failed"
    error = row.error
    assert error["type"] == "outcome-unknown"
    assert error["cause"]["type"] == "heartbeat-timeout"
    assert error["cause"]["details"] == {"words": 120}
    assert calls == ["r/draft#1"]  # never run again, whatever retry says
    assert release.wait(60)


def test_bad_details_raise_in_the_handler_and_the_run_goes_on(
    tmp_path: Path, local_db: Path | str
) -> None:
    def scan(call: CallTool) -> Any:
        problems = []
        for bad in ({"n": 2**70}, {"x": object()}, "x" * 70_000):
            try:
                flowcore_handlers.heartbeat(bad)
            except HeartbeatError as exc:
                problems.append(str(exc).split(":")[0].split(" are ")[0])
        return problems

    row = asyncio.run(_run(local_db, SCAN, Registry(tools={"scan": scan})))
    assert row.status == "completed"
    assert row.output == [
        "heartbeat details cannot be stored",
        "heartbeat details cannot be stored",
        "heartbeat details",
    ]


def test_outside_a_handler_a_heartbeat_only_checks_its_details() -> None:
    flowcore_handlers.heartbeat({"ok": 1})
    assert flowcore_handlers.heartbeat_details() is None
    with pytest.raises(HeartbeatError):
        flowcore_handlers.heartbeat({1.5: "not a JSON key"})
