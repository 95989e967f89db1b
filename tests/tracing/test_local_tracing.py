"""The local host's OpenTelemetry spans, on a real host and database (specs/tracing.md)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import StatusCode

from flowcore_local import HostError, LocalHost

from ..local.local_helpers import work_until
from .spans import (
    CHILD,
    PARENT,
    REGISTRY,
    attr,
    by_name,
    in_memory,
    parent_id,
    span_id,
    trace_id,
)

ROOT = Path(__file__).resolve().parents[2]


async def _run_traced(tmp_path: Path, tracing: Any) -> str:
    tmp_path.mkdir(parents=True, exist_ok=True)
    child = tmp_path / "fix.yaml"
    child.write_text(CHILD)
    async with LocalHost(tmp_path / "t.db", registry=REGISTRY, tracing=tracing) as host:
        rid = await host.start(PARENT, {"x": 5}, "r-1", flows=[child])
        await asyncio.wait_for(host.work(until_settled=rid), timeout=30)
        row = await host.run(rid)
    assert row.status == "completed", row.error
    return rid


def test_a_run_with_tools_an_agent_a_failure_and_a_subflow(tmp_path: Path) -> None:
    provider, exporter = in_memory()
    asyncio.run(_run_traced(tmp_path, provider))
    spans = by_name(exporter.get_finished_spans())
    assert sorted(spans) == [
        "call-tool flaky",
        "call-tool lookup",
        "call-tool patch",
        "run fix",
        "run traced",
        "run-agent triager",
        "run-subflow fix",
    ]
    [run] = spans["run traced"]
    assert run.parent is None  # a root run starts its trace
    assert run.instrumentation_scope is not None and run.instrumentation_scope.name == "flowcore"
    assert attr(run, "flowcore.run_id") == "r-1"
    assert attr(run, "flowcore.flow") == "traced"
    assert attr(run, "flowcore.run.status") == "completed"
    assert attr(run, "flowcore.usage.steps") >= 2
    assert attr(run, "flowcore.usage.cost_minor_units") == 7
    every = [s for found in spans.values() for s in found]
    assert {trace_id(s) for s in every} == {trace_id(run)}  # one trace, subflow included

    look, recover = spans["call-tool lookup"]
    assert dict(look.attributes or {}) == {
        "flowcore.run_id": "r-1",
        "flowcore.idempotency_key": "r-1/look#1",
        "flowcore.effect": "call-tool",
        "flowcore.step": "look",
        "flowcore.attempt": 1,
        "flowcore.tool": "lookup",
        "flowcore.execution_class": "readonly",
        "flowcore.outcome": "succeeded",
    }
    assert attr(recover, "flowcore.step") == "recover"
    assert attr(recover, "flowcore.idempotency_key") == "r-1/recover#1"
    assert parent_id(look) == parent_id(recover) == span_id(run)

    [agent] = spans["run-agent triager"]
    assert attr(agent, "flowcore.agent") == "triager"
    assert attr(agent, "flowcore.outcome") == "succeeded"
    assert attr(agent, "flowcore.usage.steps") == 2
    assert attr(agent, "flowcore.usage.cost_minor_units") == 7
    assert "flowcore.execution_class" not in (agent.attributes or {})
    assert parent_id(agent) == span_id(run)

    flakes = spans["call-tool flaky"]
    assert [attr(s, "flowcore.attempt") for s in flakes] == [1, 2]
    for flake in flakes:
        assert attr(flake, "flowcore.outcome") == "failed"
        assert attr(flake, "flowcore.error.type") == "down"
        assert attr(flake, "flowcore.execution_class") == "idempotent"
        assert flake.status.status_code is StatusCode.ERROR
        assert flake.status.description == "down: the service is down"
        [event] = flake.events
        assert event.name == "exception"
        assert "HandlerError" in str((event.attributes or {})["exception.stacktrace"])

    [sub] = spans["run-subflow fix"]
    [child] = spans["run fix"]
    [kid_patch] = spans["call-tool patch"]
    assert parent_id(sub) == span_id(run)
    assert attr(sub, "flowcore.run_id") == "r-1"
    assert attr(sub, "flowcore.flow") == "fix"
    assert attr(sub, "flowcore.outcome") == "succeeded"
    child_id = attr(sub, "flowcore.idempotency_key")
    assert parent_id(child) == span_id(sub)
    assert attr(child, "flowcore.run_id") == child_id
    assert attr(child, "flowcore.parent_run_id") == "r-1"
    assert parent_id(kid_patch) == span_id(child)
    assert attr(kid_patch, "flowcore.run_id") == child_id
    assert attr(kid_patch, "flowcore.execution_class") == "uncertain"
    # Nested in time as in the tree: the subflow span holds the child run.
    assert sub.start_time is not None and child.start_time is not None
    assert sub.start_time <= child.start_time
    assert run.end_time is not None and sub.end_time is not None and child.end_time is not None
    assert child.end_time <= sub.end_time <= run.end_time


def test_tracing_off_emits_nothing_and_true_uses_the_global_provider(tmp_path: Path) -> None:
    provider, exporter = in_memory()
    trace.set_tracer_provider(provider)
    if trace.get_tracer_provider() is not provider:
        pytest.skip("another test of this process set the global tracer provider first")
    asyncio.run(_run_traced(tmp_path / "off", False))
    assert exporter.get_finished_spans() == ()
    asyncio.run(_run_traced(tmp_path / "on", True))
    assert len(exporter.get_finished_spans()) == 9


def test_without_tracing_opentelemetry_is_never_imported(tmp_path: Path) -> None:
    """Off is free: a run without tracing works where opentelemetry cannot be imported."""
    script = textwrap.dedent(
        f"""
        import asyncio, sys
        sys.modules["opentelemetry"] = None  # as if the extra were not installed
        from flowcore_handlers import Registry
        from flowcore_local import LocalHost

        FLOW = "flow: f\\ntools: {{t: {{}}}}\\nsteps:\\n  - {{id: a, call_tool: {{tool: t}}}}\\n"

        async def main():
            registry = Registry(tools={{"t": lambda call: 1}})
            async with LocalHost({str(tmp_path / "t.db")!r}, registry=registry) as host:
                rid = await host.start(FLOW, None, "r")
                await host.work(until_settled=rid)
                print((await host.run(rid)).status)

        asyncio.run(main())
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "completed"


def test_tracing_with_a_bad_value_is_refused_saying_what_it_takes(tmp_path: Path) -> None:
    with pytest.raises(HostError, match=r"tracing=\.\.\.\) must be True, False or an Open"):
        LocalHost(tmp_path / "t.db", tracing="yes")  # type: ignore[arg-type]


WAITS = """
flow: waits
tools: {lookup: {class: readonly}}
steps:
  - {id: before, call_tool: {tool: lookup, input: 1}}
  - {id: go, await_signal: {signal: go}}
  - {id: after, call_tool: {tool: lookup, input: "${steps.go.output}"}}
"""


def test_a_run_that_outlives_a_worker_session_has_a_run_span_per_session(tmp_path: Path) -> None:
    provider, exporter = in_memory()
    db = tmp_path / "t.db"

    async def first() -> None:
        async with LocalHost(db, registry=REGISTRY, tracing=provider) as host:
            await host.start(WAITS, {}, "w-1")

            async def waits() -> bool:
                return bool((await host.waits("w-1")).signals)

            await work_until(host, waits)

    async def second() -> None:
        async with LocalHost(db, registry=REGISTRY, tracing=provider) as host:
            await host.signal("w-1", "go", "now")
            await asyncio.wait_for(host.work(until_settled="w-1"), timeout=30)

    asyncio.run(first())
    asyncio.run(second())
    spans = by_name(exporter.get_finished_spans())
    runs = sorted(spans["run waits"], key=lambda s: s.start_time or 0)
    assert [attr(s, "flowcore.run_id") for s in runs] == ["w-1", "w-1"]
    assert [attr(s, "flowcore.run.status") for s in runs] == ["running", "completed"]
    assert trace_id(runs[0]) != trace_id(runs[1])  # flowcore.run_id ties them together
    after, before = spans["call-tool lookup"]  # sorted by key
    assert (attr(before, "flowcore.step"), attr(after, "flowcore.step")) == ("before", "after")
    assert parent_id(before) == span_id(runs[0])
    assert parent_id(after) == span_id(runs[1])
    assert "flowcore.run.continued" not in (runs[0].attributes or {})
    assert attr(runs[1], "flowcore.run.continued") is True


def test_an_explicit_provider_is_used_not_the_global_one(tmp_path: Path) -> None:
    provider, exporter = in_memory()
    assert isinstance(provider, TracerProvider)
    asyncio.run(_run_traced(tmp_path, provider))
    assert len(exporter.get_finished_spans()) == 9
