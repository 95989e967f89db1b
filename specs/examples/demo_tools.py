"""Deterministic tools and agents for the demo flows: no network, no model.

Handlers receive the effect (input or prompt, idempotency key, remaining
budget) and return an output, or a Result with usage.
"""

from __future__ import annotations

from typing import Any

from flowcore import CallTool, RunAgent, Usage
from flowcore_handlers import HandlerError, Result

_FLAKY: set[str] = set()


def get_incident(call: CallTool) -> dict[str, Any]:
    # Fails once per run with a retryable error, to show the retry policy.
    run = call.idempotency_key.split("/")[0]
    if run not in _FLAKY:
        _FLAKY.add(run)
        raise HandlerError("unavailable", "pagerduty answered 503", retryable=True)
    return {"id": call.input["id"], "title": "checkout latency p99 > 2s", "service": "checkout"}


def search_logs(call: CallTool) -> dict[str, Any]:
    return {"service": call.input["service"], "errors": 42, "top": "db pool exhausted"}


def query_metrics(call: CallTool) -> dict[str, Any]:
    return {"service": call.input["service"], "p99_ms": 2300}


def page(call: CallTool) -> dict[str, Any]:
    return {"paged": call.input["owner"]}


def post(call: CallTool) -> dict[str, Any]:
    return {"posted": True}


def triager(run: RunAgent) -> Result:
    return Result(
        {"owner": "payments-oncall", "severity": "high", "plan": "raise the db pool size"},
        Usage(steps=1, cost_minor_units=120),
    )


def reviewer(run: RunAgent) -> Result:
    return Result(f"{run.member}: approved", Usage(steps=1, cost_minor_units=40))


def writer(run: RunAgent) -> Result:
    return Result(f"Postmortem: {run.prompt}", Usage(steps=1, cost_minor_units=80))


TOOLS = {
    "pagerduty.get_incident": get_incident,
    "logs.search": search_logs,
    "metrics.query": query_metrics,
    "pagerduty.page": page,
    "slack.post": post,
}
AGENTS = {
    "triager": triager,
    "security-reviewer": reviewer,
    "sre-reviewer": reviewer,
    "writer": writer,
}
