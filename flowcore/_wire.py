"""The wire protocol: effects (core -> host) and events (host -> core).

Both are closed tagged unions of frozen msgspec Structs. The tag field is
``kind`` and every tag is an explicit string equal to the wire kind, never a
class name: logs outlive refactors. Field names are snake_case in Python and
camelCase on the wire. New fields must always get defaults so that old logs
still decode.

The effect and event values *are* the in-memory model (msgspec Structs are
frozen and slotted like attrs classes), so encoding an effect is one call into
msgspec with no intermediate conversion. Like the state records, they are not
tracked by the garbage collector (``gc=False``): they hold JSON data, which
cannot refer back to the value that holds it.

This module must never do I/O.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, TypeAlias

import msgspec

from ._errors import WireError

__all__ = [
    "AskHuman",
    "AwaitSignal",
    "BudgetRemaining",
    "CallTool",
    "CancelRequested",
    "Effect",
    "EffectFailed",
    "EffectOutcomeUnknown",
    "EffectSucceeded",
    "ErrorInfo",
    "Event",
    "HumanAnswered",
    "ReportEntry",
    "RunAgent",
    "RunSubflow",
    "RunTeam",
    "Settled",
    "SignalReceived",
    "Sleep",
    "SubflowSettled",
    "TimerFired",
    "Usage",
    "decode_effect",
    "decode_event",
    "effect_from_wire",
    "effect_to_wire",
    "encode_effect",
    "encode_event",
    "event_from_wire",
    "event_to_wire",
]

NonNegInt = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]
SettledStatus: TypeAlias = Literal["completed", "failed", "cancelled", "budget-exhausted"]
ExhaustedLimit: TypeAlias = Literal["steps", "cost", "wall-clock"]
ReportStatus: TypeAlias = Literal["succeeded", "failed", "uncertain", "not-started"]
WorkKind: TypeAlias = Literal["run-agent", "run-team", "call-tool", "run-subflow"]


class _Value(
    msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True, gc=False
):
    """Base for plain (untagged) wire values."""


class BudgetRemaining(_Value, frozen=True, kw_only=True):
    """What is left of the root run's budget when an effect is emitted."""

    steps: int
    cost_minor_units: int | None = None
    wall_clock_ms: int | None = None


class Usage(_Value, frozen=True, kw_only=True):
    """Usage reported by a host for one piece of work."""

    steps: NonNegInt = 0
    cost_minor_units: NonNegInt = 0


class ErrorInfo(_Value, frozen=True, kw_only=True):
    """A failure: ``type`` is what ``catch`` and ``retry`` match on."""

    type: str
    message: str = ""
    retryable: bool = False


class ReportEntry(_Value, frozen=True, kw_only=True):
    """One work effect of a run and how it ended, for the ``settled`` report."""

    idempotency_key: str
    effect: WorkKind
    target: str
    status: ReportStatus


# --- effects -----------------------------------------------------------------


class _Effect(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    rename="camel",
    omit_defaults=True,
    tag_field="kind",
    gc=False,
):
    """Base of the effect union."""


class RunAgent(_Effect, tag="run-agent", frozen=True, kw_only=True):
    agent_id: str
    prompt: str
    instructions: str | None = None
    member: str | None = None
    idempotency_key: str
    budget_remaining: BudgetRemaining


class RunTeam(_Effect, tag="run-team", frozen=True, kw_only=True):
    team_id: str
    prompt: str
    idempotency_key: str


class CallTool(_Effect, tag="call-tool", frozen=True, kw_only=True):
    tool: str
    input: Any = None
    idempotency_key: str


class AskHuman(_Effect, tag="ask-human", frozen=True, kw_only=True):
    question: str
    options: tuple[str, ...] | None = None
    idempotency_key: str


class Sleep(_Effect, tag="sleep", frozen=True, kw_only=True):
    until_ms: int
    idempotency_key: str


class AwaitSignal(_Effect, tag="await-signal", frozen=True, kw_only=True):
    signal: str
    idempotency_key: str


class RunSubflow(_Effect, tag="run-subflow", frozen=True, kw_only=True):
    flow_id: str
    depth: int
    idempotency_key: str
    input: Any = None
    budget_remaining: BudgetRemaining


class Settled(_Effect, tag="settled", frozen=True, kw_only=True):
    status: SettledStatus
    output: Any = None
    error: ErrorInfo | None = None
    exhausted: ExhaustedLimit | None = None
    report: tuple[ReportEntry, ...] = ()


Effect: TypeAlias = (
    RunAgent | RunTeam | CallTool | AskHuman | Sleep | AwaitSignal | RunSubflow | Settled
)

# --- events ------------------------------------------------------------------


class _Event(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    rename="camel",
    omit_defaults=True,
    tag_field="kind",
    gc=False,
):
    """Base of the event union. ``at_ms`` is the host's clock when it reported."""


class EffectSucceeded(_Event, tag="effect-succeeded", frozen=True, kw_only=True):
    idempotency_key: str
    output: Any = None
    usage: Usage | None = None
    at_ms: NonNegInt


class EffectFailed(_Event, tag="effect-failed", frozen=True, kw_only=True):
    idempotency_key: str
    error: ErrorInfo
    at_ms: NonNegInt


class EffectOutcomeUnknown(_Event, tag="effect-outcome-unknown", frozen=True, kw_only=True):
    idempotency_key: str
    at_ms: NonNegInt


class HumanAnswered(_Event, tag="human-answered", frozen=True, kw_only=True):
    idempotency_key: str
    answer: Any
    at_ms: NonNegInt


class TimerFired(_Event, tag="timer-fired", frozen=True, kw_only=True):
    idempotency_key: str
    at_ms: NonNegInt


class SignalReceived(_Event, tag="signal-received", frozen=True, kw_only=True):
    signal: str
    payload: Any = None
    at_ms: NonNegInt


class SubflowSettled(_Event, tag="subflow-settled", frozen=True, kw_only=True):
    idempotency_key: str
    status: SettledStatus
    output: Any = None
    usage: Usage | None = None
    at_ms: NonNegInt


class CancelRequested(_Event, tag="cancel-requested", frozen=True, kw_only=True):
    reason: str = ""
    at_ms: NonNegInt


Event: TypeAlias = (
    EffectSucceeded
    | EffectFailed
    | EffectOutcomeUnknown
    | HumanAnswered
    | TimerFired
    | SignalReceived
    | SubflowSettled
    | CancelRequested
)

# --- codecs ------------------------------------------------------------------

Format: TypeAlias = Literal["json", "msgpack"]

_json_enc = msgspec.json.Encoder()
_mp_enc = msgspec.msgpack.Encoder()
_effect_json = msgspec.json.Decoder(Effect)
_effect_mp = msgspec.msgpack.Decoder(Effect)
_event_json = msgspec.json.Decoder(Event)
_event_mp = msgspec.msgpack.Decoder(Event)

_AT = re.compile(r" - at `(?P<path>[^`]*)`$")
_MISSING = re.compile(r"^Object missing required field `(?P<field>[^`]*)`")


def _wire_error(what: str, exc: Exception) -> WireError:
    # msgspec says where ("- at `$.error.type`"); for a missing field it names
    # the field in the text instead, so fold that into the path too.
    text = str(exc)
    m = _AT.search(text)
    path = m.group("path") if m else "$"
    if m:
        text = text[: m.start()]
    missing = _MISSING.match(text)
    if missing:
        path = f"{path}.{missing.group('field')}"
    return WireError(f"invalid {what} at {path}: {text}", path)


def effect_to_wire(effect: Effect) -> dict[str, Any]:
    """The effect as a camelCase, JSON-ready dict (``kind`` first).

    Goes through JSON bytes so that the dict holds exactly what a JSON host
    sees (lists, never tuples).
    """
    out: dict[str, Any] = msgspec.json.decode(_json_enc.encode(effect))
    return out


def event_to_wire(event: Event) -> dict[str, Any]:
    """The event as a camelCase, JSON-ready dict (``kind`` first)."""
    out: dict[str, Any] = msgspec.json.decode(_json_enc.encode(event))
    return out


def event_from_wire(data: Any) -> Event:
    """Validate a wire dict into an event; raises ``WireError`` naming the bad field."""
    if not isinstance(data, dict):
        raise WireError(f"invalid event at $: expected an object, got {type(data).__name__}")
    try:
        event: Event = msgspec.convert(data, Event, strict=True)
    except msgspec.ValidationError as exc:
        raise _wire_error("event", exc) from None
    return event


def effect_from_wire(data: Any) -> Effect:
    """Validate a wire dict into an effect; raises ``WireError`` naming the bad field."""
    if not isinstance(data, dict):
        raise WireError(f"invalid effect at $: expected an object, got {type(data).__name__}")
    try:
        effect: Effect = msgspec.convert(data, Effect, strict=True)
    except msgspec.ValidationError as exc:
        raise _wire_error("effect", exc) from None
    return effect


def encode_effect(effect: Effect, format: Format = "json") -> bytes:
    return _json_enc.encode(effect) if format == "json" else _mp_enc.encode(effect)


def encode_event(event: Event, format: Format = "json") -> bytes:
    return _json_enc.encode(event) if format == "json" else _mp_enc.encode(event)


def decode_effect(data: bytes, format: Format = "json") -> Effect:
    try:
        effect: Effect = (_effect_json if format == "json" else _effect_mp).decode(data)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise _wire_error("effect", exc) from None
    return effect


def decode_event(data: bytes, format: Format = "json") -> Event:
    try:
        event: Event = (_event_json if format == "json" else _event_mp).decode(data)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise _wire_error("event", exc) from None
    return event
