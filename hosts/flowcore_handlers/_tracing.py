"""What every host's OpenTelemetry spans say about flowcore work (``specs/tracing.md``).

The hosts' tracing modules (``flowcore_local._tracing``,
``flowcore_temporal._tracing``) decide when spans start and end; this module
gives them the tracer (``tracer_for``) and the attributes, so a work effect's
span reads the same on every host: ``work_attributes`` before the handler
runs, ``record_outcome`` once its event is known.

``opentelemetry-api`` is an optional extra (``flowcore[tracing]``): it is
imported only when tracing is turned on, so a host without it, or with
tracing off, never loads it. This module must never be imported by the core.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import flowcore
from flowcore import (
    CallTool,
    EffectFailed,
    EffectOutcomeUnknown,
    EffectSucceeded,
    Event,
    RunAgent,
    RunSubflow,
    RunTeam,
)

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer, TracerProvider

__all__ = [
    "TRACER_NAME",
    "TracingError",
    "provider_for",
    "record_outcome",
    "run_of_key",
    "tracer_for",
    "work_attributes",
    "work_span_name",
]

TRACER_NAME = "flowcore"
"""The instrumentation scope of every span a flowcore host emits."""

OUTCOMES = {
    EffectSucceeded: "succeeded",
    EffectFailed: "failed",
    EffectOutcomeUnknown: "outcome-unknown",
}


class TracingError(ValueError):
    """Tracing was asked for and cannot be given (a bad option, or no opentelemetry-api)."""


def provider_for(
    tracing: bool | TracerProvider | None, where: str = "tracing"
) -> TracerProvider | None:
    """The tracer provider a host emits with, or None when tracing is off.

    ``tracing`` is False or None (off: nothing is imported), True (the
    global tracer provider, as ``opentelemetry.trace.set_tracer_provider``
    or ``opentelemetry-instrument`` configured it) or a ``TracerProvider``.
    """
    if tracing is None or tracing is False:
        return None
    try:
        from opentelemetry import trace
    except ImportError:
        raise TracingError(
            f"{where}: tracing needs opentelemetry-api, which is not installed"
            " (pip install 'flowcore[tracing]')"
        ) from None
    if tracing is True:
        return trace.get_tracer_provider()
    if not callable(getattr(tracing, "get_tracer", None)):
        raise TracingError(
            f"{where} must be True, False or an OpenTelemetry TracerProvider,"
            f" not {type(tracing).__name__}"
        )
    return tracing


def tracer_for(tracing: bool | TracerProvider | None, where: str = "tracing") -> Tracer | None:
    """The ``flowcore`` tracer of ``provider_for(tracing)``, or None when tracing is off."""
    provider = provider_for(tracing, where)
    if provider is None:
        return None
    return provider.get_tracer(TRACER_NAME, _version())


def _version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("flowcore")
    except PackageNotFoundError:
        return None


def run_of_key(key: str, hint: str | None = None) -> str:
    """The run an idempotency key belongs to: ``hint`` when the key is under it,
    else the longest prefix that reads as a run of it (a child run's id holds ``/``)."""
    if hint is not None and key.startswith(hint + "/"):
        return hint
    cut = len(key)
    while (cut := key.rfind("/", 0, cut)) > 0:
        try:
            flowcore.parse_key(key, key[:cut])
        except ValueError:
            continue
        return key[:cut]
    return key.partition("/")[0]


def work_span_name(effect: CallTool | RunAgent | RunTeam | RunSubflow) -> str:
    """``call-tool lookup``, ``run-agent triager``, ``run-subflow fix``: low-cardinality names."""
    return f"{effect.__struct_config__.tag} {_target(effect)}"


def _target(effect: CallTool | RunAgent | RunTeam | RunSubflow) -> str:
    match effect:
        case CallTool():
            return effect.tool
        case RunAgent():
            return effect.agent_id
        case RunTeam():
            return effect.team_id
        case RunSubflow():
            return effect.flow_id


def work_attributes(
    effect: CallTool | RunAgent | RunTeam | RunSubflow,
    run_id: str,
    execution_class: str | None = None,
) -> dict[str, str | int]:
    """A work effect's span attributes, known before it runs."""
    key = effect.idempotency_key
    out: dict[str, str | int] = {
        "flowcore.run_id": run_id,
        "flowcore.idempotency_key": key,
        "flowcore.effect": str(effect.__struct_config__.tag),
    }
    try:
        info = flowcore.parse_key(key, run_id)
    except ValueError:
        pass  # a key the core did not spell: the key alone says it
    else:
        out["flowcore.step"] = info.path
        if info.attempt is not None:
            out["flowcore.attempt"] = info.attempt
        if info.member is not None:
            out["flowcore.member"] = info.member
    match effect:
        case CallTool():
            out["flowcore.tool"] = effect.tool
        case RunAgent():
            out["flowcore.agent"] = effect.agent_id
        case RunTeam():
            out["flowcore.team"] = effect.team_id
        case RunSubflow():
            out["flowcore.flow"] = effect.flow_id
            out["flowcore.depth"] = effect.depth
    if execution_class is not None:
        out["flowcore.execution_class"] = execution_class
    return out


def record_outcome(span: Span, event: Event, traceback: str | None = None) -> None:
    """Put a work effect's outcome on its span: ``flowcore.outcome``, the error, the usage.

    A failure sets the span's status to ERROR ("type: message"); a handler's
    ``traceback``, when the host kept one, becomes the span's ``exception``
    event (OpenTelemetry's semantic conventions for exceptions).
    """
    from opentelemetry.trace import Status, StatusCode

    outcome = OUTCOMES.get(type(event))
    if outcome is None:
        return
    span.set_attribute("flowcore.outcome", outcome)
    if isinstance(event, EffectSucceeded):
        if event.usage is not None:
            span.set_attribute("flowcore.usage.steps", event.usage.steps)
            span.set_attribute("flowcore.usage.cost_minor_units", event.usage.cost_minor_units)
    elif isinstance(event, EffectFailed):
        error = event.error
        span.set_attribute("flowcore.error.type", error.type)
        span.set_attribute("flowcore.error.retryable", error.retryable)
        span.set_attribute("error.type", error.type)
        span.set_status(Status(StatusCode.ERROR, f"{error.type}: {error.message}"[:1000]))
        if traceback is not None:
            span.add_event("exception", _exception(error.type, error.message, traceback))
    else:
        span.set_attribute("error.type", "outcome-unknown")
        span.set_status(Status(StatusCode.ERROR, "outcome-unknown"))


def _exception(kind: str, message: str, traceback: str) -> Mapping[str, str]:
    return {
        "exception.type": kind,
        "exception.message": message,
        "exception.stacktrace": traceback,
    }
