"""The Temporal host's OpenTelemetry spans (``specs/tracing.md``); used only when tracing is on.

Workflow code must stay deterministic and may be replayed at any time, so no
span is kept open in a workflow. The spans come from three places:

- temporalio's own ``TracingInterceptor`` (``temporalio.contrib.opentelemetry``)
  on the client and the worker: its spans (``StartWorkflow:flowcore``,
  ``StartActivity:flowcore_work``, ``RunActivity:flowcore_work``,
  ``StartChildWorkflow:flowcore``...) carry the trace context through
  Temporal's headers, from the client that starts a run to its activities
  and child workflows, and it emits nothing while a workflow replays;
- ``FlowcoreTracing``'s activity interceptor: a work span (``call-tool
  lookup``) around each ``flowcore_work`` activity, with the same
  ``flowcore.*`` attributes as the local host's, as a child of the current
  ``RunActivity`` span;
- ``FlowcoreTracing``'s workflow interceptor: when a run settles (and the
  workflow is not replaying) a run span ``run <flow>`` from the workflow's
  start time to its settlement, child of the context the run was started
  with, emitted outside the sandbox through an extern function. A child
  run's span thus descends from the parent's ``StartChildWorkflow`` span.

Nothing here changes what a workflow decides: the workflow interceptor only
reads the workflow's info and result, and a span it cannot make is skipped.
"""

from __future__ import annotations

import logging
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry.trace import Status, StatusCode, Tracer, TracerProvider
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.contrib.opentelemetry import TracingInterceptor
from temporalio.converter import PayloadConverter
from temporalio.exceptions import ApplicationError
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    ExecuteWorkflowInput,
    Interceptor,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)

import flowcore
from flowcore import CallTool, RunAgent, RunTeam
from flowcore_handlers._tracing import (
    TRACER_NAME,
    provider_for,
    record_outcome,
    run_of_key,
    work_attributes,
    work_span_name,
)

from ._types import ACTIVITY_NAME

__all__ = ["FlowcoreTracing", "client_interceptors", "worker_interceptors"]

log = logging.getLogger("flowcore.temporal")
RUN_SPAN = "__flowcore_run_span"
HEADER = "_tracer-data"  # where TracingInterceptor carries the trace context
TEMPORAL_SCOPE = "temporalio.contrib.opentelemetry"


def client_interceptors(tracing: bool | TracerProvider | None, where: str) -> list[Any]:
    """The client interceptors ``tracing`` asks for: temporalio's, which carries the context."""
    provider = provider_for(tracing, where)
    if provider is None:
        return []
    return [TracingInterceptor(provider.get_tracer(TEMPORAL_SCOPE))]


def worker_interceptors(
    tracing: bool | TracerProvider | None, client: Client, where: str
) -> list[Interceptor]:
    """flowcore's interceptor, after temporalio's (added unless the client has it)."""
    provider = provider_for(tracing, where)
    if provider is None:
        return []
    out: list[Interceptor] = []
    if not any(isinstance(i, TracingInterceptor) for i in client.config()["interceptors"]):
        out.append(TracingInterceptor(provider.get_tracer(TEMPORAL_SCOPE)))
    out.append(FlowcoreTracing(provider.get_tracer(TRACER_NAME)))
    return out


class FlowcoreTracing(Interceptor):
    """Work spans around ``flowcore_work`` activities; run spans when runs settle."""

    def __init__(self, tracer: Tracer) -> None:
        self.tracer = tracer

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _WorkSpans(next, self.tracer)

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor]:
        input.unsafe_extern_functions[RUN_SPAN] = self._run_span
        return _RunSpans

    def _run_span(self, params: dict[str, Any]) -> None:
        """Emit a settled run's span (outside the sandbox, called from the workflow)."""
        try:
            carrier = params["carrier"]
            parent = (
                TraceContextTextMapPropagator().extract(carrier)
                if carrier
                else otel_context.Context()
            )
            span = self.tracer.start_span(
                params["name"],
                context=parent,
                attributes=params["attributes"],
                start_time=params["start_ns"],
            )
            if params["error"] is not None:
                span.set_status(Status(StatusCode.ERROR, params["error"]))
            span.end(end_time=params["end_ns"])
        except Exception as exc:  # a span must never cost the workflow task
            log.warning("flowcore: tracing could not record a run span: %s", exc)


class _WorkSpans(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, tracer: Tracer) -> None:
        super().__init__(next)
        self.tracer = tracer

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        info = activity.info()
        effect = None
        if info.activity_type == ACTIVITY_NAME and input.args:
            try:
                effect = flowcore.effect_from_wire(input.args[0])
            except Exception:  # the activity itself refuses it, saying why
                effect = None
        if not isinstance(effect, (CallTool, RunAgent, RunTeam)):
            return await super().execute_activity(input)
        run_id = run_of_key(effect.idempotency_key, info.workflow_id)
        attributes: dict[str, Any] = work_attributes(effect, run_id)
        attributes["flowcore.temporal.workflow_id"] = info.workflow_id
        attributes["flowcore.temporal.activity_id"] = info.activity_id
        with self.tracer.start_as_current_span(
            work_span_name(effect),
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                result = await super().execute_activity(input)
            except BaseException as exc:
                # The workflow reads an application error as the effect's
                # failure, anything else (a cancel) as an unknown outcome.
                if isinstance(exc, ApplicationError):
                    kind = exc.type or "activity-error"
                    span.set_attribute("flowcore.outcome", "failed")
                    span.set_attribute("flowcore.error.type", kind)
                else:
                    kind = "outcome-unknown"
                    span.set_attribute("flowcore.outcome", kind)
                span.set_attribute("error.type", kind)
                span.set_status(Status(StatusCode.ERROR, f"{kind}: {exc}"[:1000]))
                raise
            try:
                record_outcome(span, flowcore.event_from_wire(result))
            except Exception as exc:  # a result the workflow will refuse in its turn
                log.warning(
                    "flowcore: tracing could not read %s's result: %s", info.activity_id, exc
                )
            return result


class _RunSpans(WorkflowInboundInterceptor):
    """Runs in the workflow sandbox: reads the settled result, hands it out to ``_run_span``."""

    async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
        result = await super().execute_workflow(input)
        if not workflow.unsafe.is_replaying() and isinstance(result, dict):
            try:
                params = _run_params(result)
            except Exception:  # not a flowcore result: no span
                params = None
            if params is not None:
                workflow.extern_functions()[RUN_SPAN](params)
        return result


def _run_params(result: dict[str, Any]) -> dict[str, Any]:
    info = workflow.info()
    header = info.headers.get(HEADER)
    carrier = PayloadConverter.default.from_payloads([header])[0] if header else None
    run_id = str(result["runId"])
    status = str(result["status"])
    usage = result.get("usage") or {}
    attributes: dict[str, Any] = {
        "flowcore.run_id": run_id,
        "flowcore.flow": str(result["flowId"]),
        "flowcore.run.status": status,
        "flowcore.usage.steps": int(usage.get("steps", 0)),
        "flowcore.usage.cost_minor_units": int(usage.get("costMinorUnits", 0)),
        "flowcore.temporal.workflow_id": info.workflow_id,
    }
    if info.parent is not None:
        attributes["flowcore.parent_run_id"] = run_of_key(run_id)
    error = None
    if status != "completed":
        kind = (result.get("error") or {}).get("type") or status
        attributes["flowcore.error.type"] = attributes["error.type"] = str(kind)
        error = f"run {status}: {kind}"
    return {
        "carrier": carrier,
        "name": f"run {result['flowId']}",
        "attributes": attributes,
        "start_ns": int(info.workflow_start_time.timestamp() * 1_000_000_000),
        "end_ns": workflow.time_ns(),
        "error": error,
    }
