"""What the tracing tests share: an SDK tracer provider with an in-memory exporter,
the flows and handlers they run, and ways to read the finished spans."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import flowcore
from flowcore import CallTool, RunAgent
from flowcore_handlers import HandlerError, Registry, Result

PARENT = """
flow: traced
tools:
  lookup: {class: readonly}
  flaky: {class: idempotent}
steps:
  - {id: look, call_tool: {tool: lookup, input: "${input.x}"}}
  - {id: triage, run_agent: {agent: triager, prompt: "look at ${steps.look.output}"}}
  - id: guard
    try:
      - {id: flake, call_tool: {tool: flaky}, retry: {max_attempts: 2, initial_interval_ms: 1}}
    catch:
      - steps: [{id: recover, call_tool: {tool: lookup, input: recovered}}]
  - {id: kid, run_subflow: {flow: fix, input: {x: 1}}}
output: "${steps.kid.output}"
"""

CHILD = """
flow: fix
tools: {patch: {}}
steps:
  - {id: patch, call_tool: {tool: patch, input: "${input.x}"}}
output: "${steps.patch.output}"
"""


def lookup(call: CallTool) -> Any:
    return {"found": call.input}


def flaky(call: CallTool) -> Any:
    raise HandlerError("down", "the service is down", retryable=True)


def patch(call: CallTool) -> Any:
    return "patched"


def triager(run: RunAgent) -> Result:
    return Result("triaged", flowcore.Usage(steps=2, cost_minor_units=7))


REGISTRY = Registry(
    tools={"lookup": lookup, "flaky": flaky, "patch": patch}, agents={"triager": triager}
)


def in_memory() -> tuple[TracerProvider, InMemorySpanExporter]:
    """A tracer provider that keeps every finished span, exported at once."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def by_name(spans: Iterable[ReadableSpan]) -> dict[str, list[ReadableSpan]]:
    out: dict[str, list[ReadableSpan]] = {}
    for span in spans:
        out.setdefault(span.name, []).append(span)
    for found in out.values():
        found.sort(key=lambda s: str(attr(s, "flowcore.idempotency_key", "")))
    return out


def attr(span: ReadableSpan, name: str, default: Any = None) -> Any:
    return (span.attributes or {}).get(name, default)


def parent_id(span: ReadableSpan) -> int | None:
    return None if span.parent is None else span.parent.span_id


def span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return int(span.context.span_id)


def trace_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return int(span.context.trace_id)
