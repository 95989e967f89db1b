"""The local host's OpenTelemetry spans (``specs/tracing.md``); used only when tracing is on.

A run on this host outlives the process that works it, and a span cannot:
an OpenTelemetry span lives in the memory of the process that started it
and is exported when it ends there. So a *run span* here is the part of a
run one host session saw: it starts when the session first touches the run
(its work, a child it starts, its settlement), back-dated to the run's
creation when the run began during this session, and ends when the run
settles or when the session closes (``flowcore.run.status`` is then
``running``: a later session goes on with it under a run span of its own).
``flowcore.run_id`` is what ties the sessions of one run together.

Inside a session the spans nest: a run's work effects are children of its
run span; a child run's span is a child of the parent's ``run-subflow``
span, which is a child of the parent's run span. A root run's span starts a
trace of its own (whatever span is current where the host happens to be).

The host calls four hooks: ``work`` wraps a claimed effect's task (the span
is current while the handler runs, so a handler's own spans nest under
it), ``submitted`` sees the event that reports it, ``settled`` a run's
settlement, ``close`` the end of the session. Nothing here writes to the
database or changes what the host does: a span that cannot be made is not
made.
"""

from __future__ import annotations

import contextvars
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode, Tracer

import flowcore
from flowcore import CallTool, Event, RunSubflow, Settled
from flowcore_handlers._tracing import record_outcome, work_attributes, work_span_name

if TYPE_CHECKING:
    from ._store import Claimed, RunRow, Store

__all__ = ["LocalTracing"]

log = logging.getLogger("flowcore.local")


class TracedHost(Protocol):
    """What the spans read of their host (a ``LocalHost``): its clock and its store."""

    now: Callable[[], int]

    @property
    def store(self) -> Store: ...


@dataclass
class _Work:
    run_id: str
    key: str
    span: Span


class LocalTracing:
    """The spans of one ``LocalHost`` session (open to close)."""

    def __init__(self, tracer: Tracer, host: TracedHost) -> None:
        self.tracer = tracer
        self.host = host
        self.started_ms = host.now()  # runs created since are back-dated to their creation
        self._runs: dict[str, Span] = {}
        self._flows: dict[str, flowcore.Flow] = {}  # run id -> its flow (tools' classes)
        self._subflows: dict[str, Span] = {}  # child run id (the parent's key) -> run-subflow span
        self._current: contextvars.ContextVar[_Work | None] = contextvars.ContextVar(
            "flowcore_work_span", default=None
        )

    # --- times -----------------------------------------------------------------------

    def _since(self, host_ms: int) -> int:
        """Epoch nanoseconds of the host-clock moment ``host_ms``, now minus its age."""
        age_ms = max(0, self.host.now() - host_ms)
        return time.time_ns() - age_ms * 1_000_000

    # --- the spans ---------------------------------------------------------------------

    def _row(self, run_id: str) -> RunRow | None:
        try:
            return self.host.store.run_row(run_id)
        except Exception:  # deleted, or the store is closing: no span
            return None

    def run_span(self, run_id: str) -> Span | None:
        """The run's span in this session, started on first use."""
        span = self._runs.get(run_id)
        if span is not None:
            return span
        row = self._row(run_id)
        if row is None:
            return None
        attributes: dict[str, str | int] = {
            "flowcore.run_id": row.run_id,
            "flowcore.flow": row.flow_id,
            "flowcore.depth": row.depth,
        }
        start = None
        if row.created_ms >= self.started_ms:
            start = self._since(row.created_ms)
        else:  # begun before this session: its span here starts now
            attributes["flowcore.run.continued"] = True
        parent: otel_context.Context = otel_context.Context()  # a root run starts a trace
        if row.parent_run is not None and row.parent_key is not None:
            attributes["flowcore.parent_run_id"] = row.parent_run
            sub = self._subflow_span(row, start)
            if sub is not None:
                parent = trace.set_span_in_context(sub, parent)
        span = self.tracer.start_span(
            f"run {row.flow_id}", context=parent, attributes=attributes, start_time=start
        )
        self._runs[run_id] = span
        return span

    def _subflow_span(self, child: RunRow, start: int | None) -> Span | None:
        """The parent's ``run-subflow`` span for ``child``, started with the child."""
        span = self._subflows.get(child.run_id)
        if span is not None:
            return span
        assert child.parent_run is not None and child.parent_key is not None
        parent = self.run_span(child.parent_run)
        if parent is None:
            return None
        effect = RunSubflow(
            flow_id=child.flow_id,
            depth=child.depth,
            idempotency_key=child.parent_key,
            budget_remaining=flowcore.BudgetRemaining(steps=0),  # not on the span
        )
        span = self.tracer.start_span(
            work_span_name(effect),
            context=trace.set_span_in_context(parent, otel_context.Context()),
            attributes=work_attributes(effect, child.parent_run),
            start_time=start,
        )
        self._subflows[child.run_id] = span
        return span

    def _execution_class(self, claimed: Claimed) -> str | None:
        effect = claimed.effect
        if not isinstance(effect, CallTool):
            return None
        flow = self._flows.get(claimed.run_id)
        if flow is None:
            row = self._row(claimed.run_id)
            if row is None:
                return None
            try:
                flow = self._flows[claimed.run_id] = self.host.store.flow_by_hash(row.spec_hash)
            except Exception:
                return None
        decl = flow.tools.get(effect.tool)
        return None if decl is None else str(decl.exec_class)

    # --- the hooks ---------------------------------------------------------------------

    async def work(self, claimed: Claimed, running: Coroutine[Any, Any, None]) -> None:
        """Run ``running`` (the host's task for ``claimed``) inside the effect's span."""
        try:
            span = self._work_span(claimed)
        except Exception as exc:  # a span must never cost the work
            self._failed("a work span", exc)
            await running
            return
        token = self._current.set(_Work(claimed.run_id, claimed.key, span))
        try:
            with trace.use_span(span, end_on_exit=True, record_exception=False):
                await running
        finally:
            self._current.reset(token)

    def _work_span(self, claimed: Claimed) -> Span:
        run = self.run_span(claimed.run_id)
        parent = otel_context.Context()
        if run is not None:
            parent = trace.set_span_in_context(run, parent)
        span = self.tracer.start_span(
            work_span_name(claimed.effect),
            context=parent,
            attributes=work_attributes(
                claimed.effect, claimed.run_id, self._execution_class(claimed)
            ),
        )
        return span

    def submitted(self, run_id: str, event: Event, traceback: str | None) -> None:
        """The event reporting the work whose span is current (if it is that work's)."""
        work = self._current.get()
        if work is None or work.run_id != run_id:
            return
        if getattr(event, "idempotency_key", None) == work.key:
            try:
                record_outcome(work.span, event, traceback)
            except Exception as exc:
                self._failed("a work span's outcome", exc)

    def settled(self, run_id: str, settled: Settled) -> None:
        """End the run's span (and, for a child, the parent's run-subflow span)."""
        try:
            self._settled(run_id, settled)
        except Exception as exc:
            self._failed("a run span", exc)

    def _failed(self, what: str, exc: Exception) -> None:
        log.warning("flowcore: tracing could not record %s: %s: %s", what, type(exc).__name__, exc)

    def _settled(self, run_id: str, settled: Settled) -> None:
        span = self.run_span(run_id)
        if span is None:
            return
        del self._runs[run_id]
        self._flows.pop(run_id, None)
        span.set_attribute("flowcore.run.status", settled.status)
        usage = self._usage(run_id)
        for name, value in usage.items():
            span.set_attribute(name, value)
        if settled.error is not None:
            span.set_attribute("flowcore.error.type", settled.error.type)
            span.set_attribute("error.type", settled.error.type)
        if settled.status != "completed":
            why = settled.error.type if settled.error is not None else settled.status
            span.set_status(Status(StatusCode.ERROR, f"run {settled.status}: {why}"))
        span.end()
        sub = self._subflows.pop(run_id, None)
        if sub is not None:
            sub.set_attribute("flowcore.subflow.status", settled.status)
            for name, value in usage.items():
                sub.set_attribute(name, value)
            if settled.status == "completed":
                sub.set_attribute("flowcore.outcome", "succeeded")
            else:
                sub.set_attribute("flowcore.outcome", "failed")
                sub.set_status(Status(StatusCode.ERROR, f"subflow {settled.status}"))
            sub.end()

    def _usage(self, run_id: str) -> dict[str, int]:
        try:
            view = flowcore.waiting_for(self.host.store.state(run_id))
        except Exception:
            return {}
        return {
            "flowcore.usage.steps": view.used_steps,
            "flowcore.usage.cost_minor_units": view.used_cost_minor_units,
        }

    def close(self) -> None:
        """The session ends: the spans of runs still running end, saying so."""
        for spans, status in (
            (self._runs, "flowcore.run.status"),
            (self._subflows, "flowcore.subflow.status"),
        ):
            for span in spans.values():
                span.set_attribute(status, "running")
                span.end()
            spans.clear()
        self._flows.clear()
