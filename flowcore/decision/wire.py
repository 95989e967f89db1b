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
from typing import Annotated, Any, Final, Literal, TypeAlias, get_args

import msgspec

from .._data import (
    MAX_EVENT_BYTES,
    MAX_NAME_CHARS,
    DataError,
    check_data,
    check_text,
    json_size,
    quick_json,
    short,
    text_ok,
)
from .._errors import WireError

__all__ = [
    "AskHuman",
    "AwaitSignal",
    "BudgetRemaining",
    "CallTool",
    "CancelRequested",
    "CarriedCall",
    "CarriedSignal",
    "ContinueAsNew",
    "Effect",
    "EffectFailed",
    "EffectOutcomeUnknown",
    "EffectSucceeded",
    "ErrorInfo",
    "Event",
    "HumanAnswered",
    "KeyEvent",
    "ReportEntry",
    "RunAgent",
    "RunSubflow",
    "RunTeam",
    "ScheduledAddRequested",
    "ScheduledReplayRequested",
    "ScheduledCancelRequested",
    "ScheduledRunNowRequested",
    "Settled",
    "SignalReceived",
    "SignalRun",
    "Sleep",
    "SubflowSettled",
    "TimerFired",
    "Usage",
    "UNENCODABLE_OUTPUT",
    "UpdateRequested",
    "check_event",
    "decode_effect",
    "decode_event",
    "effect_from_wire",
    "effect_to_wire",
    "encode_effect",
    "encode_event",
    "event_from_wire",
    "event_to_wire",
    "result_event",
]

NonNegInt = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]
PositiveInt = Annotated[int, msgspec.Meta(ge=1, le=2**63 - 1)]
SettledStatus: TypeAlias = Literal["completed", "failed", "cancelled", "budget-exhausted"]
ExhaustedLimit: TypeAlias = Literal["steps", "cost", "wall-clock", "tokens", "tool-calls", "turns"]
ReportStatus: TypeAlias = Literal["succeeded", "failed", "uncertain", "not-started"]
WorkKind: TypeAlias = Literal["run-agent", "run-team", "call-tool", "run-subflow", "signal-run"]
ParentClose: TypeAlias = Literal["cancel", "abandon", "wait"]
# What the host does with a call the run stops waiting for (the step's
# ``cancellation``): cancel it (``try-cancel``), cancel it and report how it
# ended, which the step waits for (``wait-cancellation-completed``), or leave
# it to run to its end (``abandon``, listed under ``flowcore.plan``'s detach).
CancellationType: TypeAlias = Literal["try-cancel", "wait-cancellation-completed", "abandon"]


class _Value(
    msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True, gc=False
):
    """Base for plain (untagged) wire values."""


class BudgetRemaining(_Value, frozen=True, kw_only=True):
    """What is left of the root run's budget when an effect is emitted."""

    steps: int
    cost_minor_units: int | None = None
    wall_clock_ms: int | None = None
    tokens: int | None = None
    tool_calls: int | None = None
    turns: int | None = None


class Usage(_Value, frozen=True, kw_only=True):
    """Usage reported by a host for one piece of work: steps and cost beyond the
    step the work itself costs, and what an agent spent inside (tokens, its own
    tool calls, its model turns).

    ``tokens`` is the total the ledger limits (input + output). Where the agent
    reports them, ``input_tokens`` (cache reads included), ``output_tokens``
    and ``cache_read_tokens`` (the part of the input read from the provider's
    prompt cache) split it; they are counted beside the total, never instead
    of it, and 0 when not reported.
    """

    steps: NonNegInt = 0
    cost_minor_units: NonNegInt = 0
    tokens: NonNegInt = 0
    tool_calls: NonNegInt = 0
    turns: NonNegInt = 0
    input_tokens: NonNegInt = 0
    output_tokens: NonNegInt = 0
    cache_read_tokens: NonNegInt = 0


class ErrorInfo(_Value, frozen=True, kw_only=True):
    """A failure: ``type`` is what ``catch`` and ``retry`` match on (``type``, or
    the type of an error in its ``cause`` chain).

    ``details``: data the failing side attached (a ``fail`` step's, say).
    ``cause``: the error this one comes from (a child run's error, under its
    parent's ``subflow-failed``). ``attempts``: for a step retried before it
    failed, every attempt's error in order, this one's last.
    """

    type: str
    message: str = ""
    retryable: bool = False
    details: Any = None
    cause: ErrorInfo | None = None
    attempts: tuple[ErrorInfo, ...] = ()


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
    heartbeat_timeout_ms: PositiveInt | None = None
    heartbeat_details: Any = None
    cancellation: CancellationType = "try-cancel"


class RunTeam(_Effect, tag="run-team", frozen=True, kw_only=True):
    team_id: str
    prompt: str
    idempotency_key: str
    heartbeat_timeout_ms: PositiveInt | None = None
    heartbeat_details: Any = None
    cancellation: CancellationType = "try-cancel"
    budget_remaining: BudgetRemaining | None = None  # always set when emitted; older logs lack it


class CallTool(_Effect, tag="call-tool", frozen=True, kw_only=True):
    tool: str
    input: Any = None
    idempotency_key: str
    # With a step's heartbeat_timeout_ms: the host stops an attempt that does not
    # heartbeat within it; ``heartbeat_details``: the last details an earlier
    # attempt reported, for this one to resume from.
    heartbeat_timeout_ms: PositiveInt | None = None
    heartbeat_details: Any = None
    cancellation: CancellationType = "try-cancel"


class AskHuman(_Effect, tag="ask-human", frozen=True, kw_only=True):
    question: str
    options: tuple[str, ...] | None = None
    idempotency_key: str


class Sleep(_Effect, tag="sleep", frozen=True, kw_only=True):
    until_ms: int
    idempotency_key: str


class AwaitSignal(_Effect, tag="await-signal", frozen=True, kw_only=True):
    """A signal wait (informational: signals reach a run by name). ``signal``: the
    name, the first of ``signals`` when the wait takes any of several."""

    signal: str
    idempotency_key: str
    signals: tuple[str, ...] = ()
    key: str | None = None  # the wait takes only signals sent with this key


class RunSubflow(_Effect, tag="run-subflow", frozen=True, kw_only=True):
    """Start a child run. ``parent_close``: what the host does with the child when
    the run stops waiting for it (``flowcore.plan`` lists it to cancel or to
    detach). ``detached``: a root run of its own (its own budget, depth 0); the
    host answers ``effect-succeeded`` with ``{"run_id": <its run id>}`` once it
    has started, and never reports its settlement."""

    flow_id: str
    depth: int
    idempotency_key: str
    input: Any = None
    budget_remaining: BudgetRemaining
    parent_close: ParentClose = "cancel"
    detached: bool = False


class SignalRun(_Effect, tag="signal-run", frozen=True, kw_only=True):
    """Send the signal ``signal`` (with ``payload`` and, when set, ``key``) to the
    run ``run_id``: delivered once per idempotency key."""

    run_id: str
    signal: str
    payload: Any = None
    key: str | None = None
    idempotency_key: str


class Settled(_Effect, tag="settled", frozen=True, kw_only=True):
    status: SettledStatus
    output: Any = None
    error: ErrorInfo | None = None
    exhausted: ExhaustedLimit | None = None
    report: tuple[ReportEntry, ...] = ()


class CarriedSignal(_Value, frozen=True, kw_only=True):
    """A buffered signal a run takes into its next incarnation (``continue-as-new``)."""

    signal: str
    payload: Any = None
    key: str | None = None  # a signal sent with a key (await_signal.key)


class CarriedCall(_Value, frozen=True, kw_only=True):
    """A scheduled call not yet due that a run takes into its next incarnation.

    It keeps its id (its delay and call keys follow from it), its tool and
    input, when it was scheduled and when it is due, whether it outlives the
    run, and whether it was added from outside.
    """

    id: str
    tool: str
    input: Any = None
    created_ms: NonNegInt = 0
    due_ms: NonNegInt = 0
    outlive: bool = False
    outside: bool = False
    # A recurring call: its recurrence and the firings so far.
    every_ms: NonNegInt | None = None
    cron: str | None = None
    timezone: str | None = None
    count: NonNegInt | None = None
    until_ms: NonNegInt | None = None
    fires: NonNegInt = 0


class ContinueAsNew(_Effect, tag="continue-as-new", frozen=True, kw_only=True):
    """The run ends this incarnation and starts again from its first step.

    ``incarnation``: the number of the new incarnation (the first is 1).
    ``input``: its input. ``signals``: buffered signals not yet taken, oldest
    first by name; ``scheduled``: scheduled calls not yet due; both carry
    over. ``budgetRemaining``: set for a child run only, whose new
    incarnation spends from what is left. ``report``: every work effect of
    the ending incarnation and how it ended, as in ``settled``. A host ends
    the incarnation as it would settle it (stops what it still waits for)
    and starts the next with ``flowcore.continue_run``. ``metadata``: the
    run's metadata fields, which the next incarnation keeps.
    ``idleIncarnations``: how many incarnations in a row, this one included,
    ended this way without waiting for anything or taking a signal (absent
    when this one waited); ``limits.max_idle_incarnations`` bounds it.
    """

    input: Any = None
    incarnation: int
    idempotency_key: str
    signals: tuple[CarriedSignal, ...] = ()
    scheduled: tuple[CarriedCall, ...] = ()
    budget_remaining: BudgetRemaining | None = None
    report: tuple[ReportEntry, ...] = ()
    metadata: dict[str, Any] | None = None  # the run's metadata, kept
    idle_incarnations: NonNegInt = 0


Effect: TypeAlias = (
    RunAgent
    | RunTeam
    | CallTool
    | AskHuman
    | Sleep
    | AwaitSignal
    | RunSubflow
    | Settled
    | SignalRun
    | ContinueAsNew
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
    usage: Usage | None = None  # what failed work still spent (an agent cut off by its limits)
    at_ms: NonNegInt


class EffectOutcomeUnknown(_Event, tag="effect-outcome-unknown", frozen=True, kw_only=True):
    idempotency_key: str
    at_ms: NonNegInt


class HumanAnswered(_Event, tag="human-answered", frozen=True, kw_only=True):
    idempotency_key: str
    answer: Any
    at_ms: NonNegInt
    principal: str | None = None  # who answered, if the host knows (a denial's details say)


class TimerFired(_Event, tag="timer-fired", frozen=True, kw_only=True):
    idempotency_key: str
    at_ms: NonNegInt


class SignalReceived(_Event, tag="signal-received", frozen=True, kw_only=True):
    signal: str
    payload: Any = None
    at_ms: NonNegInt
    key: str | None = None  # taken only by a wait with this key


class SubflowSettled(_Event, tag="subflow-settled", frozen=True, kw_only=True):
    """A child run settled. ``error``: the child's own error when it did not complete
    (its parent's step fails with ``subflow-<status>`` caused by it)."""

    idempotency_key: str
    status: SettledStatus
    output: Any = None
    usage: Usage | None = None
    error: ErrorInfo | None = None
    at_ms: NonNegInt


class CancelRequested(_Event, tag="cancel-requested", frozen=True, kw_only=True):
    reason: str = ""
    at_ms: NonNegInt


class ScheduledCancelRequested(_Event, tag="scheduled-cancel-requested", frozen=True, kw_only=True):
    """Cancel one scheduled call from outside the run, by its schedule id.

    Never rejected for the id: the decision answers whether the call was
    still pending (``Decision.scheduled``), false for an unknown or finished id.
    """

    schedule_id: str
    at_ms: NonNegInt


class ScheduledRunNowRequested(
    _Event, tag="scheduled-run-now-requested", frozen=True, kw_only=True
):
    """Issue one pending scheduled call now: its delay timer is dropped."""

    schedule_id: str
    at_ms: NonNegInt


class ScheduledAddRequested(_Event, tag="scheduled-add-requested", frozen=True, kw_only=True):
    """Schedule a call from outside the run: only to a tool declared ``schedulable``.
    ``request`` (who asked, e.g. a handler's ``<key>#1``): the id derives from it;
    the same request again adds nothing and answers that id.

    A recurring call gives ``every_ms`` or ``cron`` (with ``timezone``, an
    IANA name, UTC when absent), and may end after ``count`` firings or once
    its next firing would come after ``until_ms`` (epoch ms)."""

    tool: str
    input: Any = None
    delay_ms: NonNegInt = 0
    at_ms: NonNegInt
    request: str | None = None
    every_ms: NonNegInt | None = None
    cron: str | None = None
    timezone: str | None = None
    count: NonNegInt | None = None
    until_ms: NonNegInt | None = None


class ScheduledReplayRequested(_Event, tag="scheduled-replay-requested", frozen=True, kw_only=True):
    """Issue a finished scheduled call again (same tool, same input) as a new
    attempt under its own key (``<id>/replay-<n>``). Rejected for an unknown id
    or a call still pending or out. ``request``: the same request again
    replays nothing and answers as the first did."""

    schedule_id: str
    at_ms: NonNegInt
    request: str | None = None


MAX_UPDATE_ID: Final = 200
"""The longest update id, in characters."""


class UpdateRequested(_Event, tag="update-requested", frozen=True, kw_only=True):
    """A caller asks the run to run its update ``name`` (language.md §16).

    ``update_id``: the caller's id for this request, unique in the run's
    incarnation (a repeated one is rejected: hosts look it up first with
    ``flowcore.update_of``); ``principal``: who asks, if the host knows."""

    update_id: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_UPDATE_ID)]
    name: str
    input: Any = None
    principal: str | None = None
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
    | ScheduledCancelRequested
    | ScheduledRunNowRequested
    | ScheduledAddRequested
    | ScheduledReplayRequested
    | UpdateRequested
)

KeyEvent: TypeAlias = (
    EffectSucceeded
    | EffectFailed
    | EffectOutcomeUnknown
    | HumanAnswered
    | TimerFired
    | SubflowSettled
)
"""The events that answer an idempotency key: narrow with ``isinstance(event, KeyEvent)``
to read it. The others name a signal, a schedule id, a tool, or nothing."""

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
    """Validate a wire dict into an event; raises ``WireError`` naming the bad field.

    The dict is checked as data first (``_data``): msgspec would otherwise
    raise foreign errors for a lone surrogate, and a value it cannot store
    must not get as far as a state.
    """
    if not isinstance(data, dict):
        raise WireError(f"invalid event at $: expected an object, got {type(data).__name__}")
    check_data(data, what="invalid event")
    try:
        event: Event = msgspec.convert(data, Event, strict=True)
    except msgspec.ValidationError as exc:
        raise _wire_error("event", exc) from None
    _check_size(event)
    return event


EVENT_TYPES: Final[tuple[type[Event], ...]] = get_args(Event)  # every event class
_STATUSES = frozenset(("completed", "failed", "cancelled", "budget-exhausted"))


def _check_size(event: Event) -> None:
    size = json_size(event)
    if size > MAX_EVENT_BYTES:
        raise DataError(
            "$",
            f"the event is {size:,} bytes as JSON, over the limit of {MAX_EVENT_BYTES:,}",
            "invalid event",
        )


def _check_count(value: Any, path: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 2**63 - 1:
        raise DataError(
            path, f"expected a non-negative 64-bit integer, got {short(value)}", "invalid event"
        )


def _check_usage(usage: Any) -> None:
    if usage is None:
        return
    if not isinstance(usage, Usage):
        raise DataError(
            "$.usage",
            f"expected flowcore.Usage or None, got {type(usage).__name__}"
            " (build the event with flowcore.event_from_wire to pass a wire dict)",
            "invalid event",
        )
    for field, name in _USAGE_FIELDS:
        _check_count(getattr(usage, field), f"$.usage.{name}")


_USAGE_FIELDS: Final = tuple(
    (f, n) for f, n in zip(Usage.__struct_fields__, Usage.__struct_encode_fields__, strict=True)
)


def _check_error(error: object, path: str) -> None:
    """An error built in Python: its fields, and those of its causes and attempts."""
    what = "invalid event"
    if not isinstance(error, ErrorInfo):
        raise DataError(
            path,
            f"expected flowcore.ErrorInfo, got {type(error).__name__}"
            " (write ErrorInfo(type=..., message=...))",
            what,
        )
    check_text(error.type, f"{path}.type", what, MAX_NAME_CHARS)
    check_text(error.message, f"{path}.message", what)
    if not isinstance(error.retryable, bool):
        raise DataError(f"{path}.retryable", "expected a boolean", what)
    check_data(error.details, f"{path}.details", what)
    if error.cause is not None:
        _check_error(error.cause, f"{path}.cause")
    if not isinstance(error.attempts, tuple):
        raise DataError(f"{path}.attempts", "expected a tuple of flowcore.ErrorInfo", what)
    for i, attempt in enumerate(error.attempts):
        _check_error(attempt, f"{path}.attempts[{i}]")


def check_event(event: object) -> Event:
    """Check an event built in Python (``advance`` does, before anything else).

    A Struct built by hand skips msgspec's validation: its fields may hold
    anything. Raises ``DataError`` naming the field; returns the event.
    """
    kind = type(event)
    if kind is EffectSucceeded:
        # The commonest event, field by field: its names and counts are
        # checked by type, its output alone goes through msgspec.
        assert isinstance(event, EffectSucceeded)
        if _plain(event.idempotency_key, event.at_ms) and _plain_usage(event.usage):
            data = quick_json(event.output)
            if data is not None and len(data) <= _OUTPUT_ROOM:
                return event
    elif kind is TimerFired:
        assert isinstance(event, TimerFired)
        if _plain(event.idempotency_key, event.at_ms):
            return event
    if isinstance(event, Event):
        # The quick check (``_data``): the event encodes, decodes through the
        # validating decoder to an equal event, fits, and names are short.
        data = quick_json(event, _event_json)
        if (
            data is not None
            and len(data) <= MAX_EVENT_BYTES
            and (len(data) <= MAX_NAME_CHARS or _short_names(event))  # no name is longer
        ):
            return event
    return _check_fields(event)


_MAX_COUNT = 2**63 - 1
# An EffectSucceeded whose key and usage pass ``_plain`` holds at most this
# much beside its output when encoded: kind, key (ASCII), atMs and usage.
_OUTPUT_ROOM = MAX_EVENT_BYTES - MAX_NAME_CHARS - 256


def _plain(key: object, at: object) -> bool:
    """A short ASCII key and a count: surely fine, without encoding anything."""
    return (
        type(key) is str
        and len(key) <= MAX_NAME_CHARS
        and key.isascii()
        and type(at) is int
        and 0 <= at <= _MAX_COUNT
    )


def _plain_usage(usage: object) -> bool:
    if usage is None:
        return True
    if type(usage) is not Usage:
        return False
    for field in Usage.__struct_fields__:
        value = getattr(usage, field)
        if type(value) is not int or not 0 <= value <= _MAX_COUNT:
            return False
    return True


def effect_from_wire(data: Any) -> Effect:
    """Validate a wire dict into an effect; raises ``WireError`` naming the bad field."""
    if not isinstance(data, dict):
        raise WireError(f"invalid effect at $: expected an object, got {type(data).__name__}")
    check_data(data, what="invalid effect")
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
    except RecursionError:
        raise WireError("invalid effect at $: nested too deeply to decode") from None
    return effect


def decode_event(data: bytes, format: Format = "json") -> Event:
    """Decode one event; raises ``WireError`` naming the bad field.

    Like ``event_from_wire`` it checks the structure; whether the values are
    flowcore data is checked by ``advance`` (``check_event``), as for an
    event built in Python.
    """
    try:
        event: Event = (_event_json if format == "json" else _event_mp).decode(data)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise _wire_error("event", exc) from None
    except RecursionError:
        raise WireError("invalid event at $: nested too deeply to decode") from None
    return event


UNENCODABLE_OUTPUT = "unencodable-output"
"""The error type of work whose result is not flowcore data."""


def result_event(
    idempotency_key: str, output: Any, usage: Usage | None = None, *, at_ms: int
) -> EffectSucceeded | EffectFailed:
    """The event a host reports for a work effect's result.

    ``effect-succeeded``, unless the output (or the usage) cannot be stored:
    then ``effect-failed`` with type ``unencodable-output`` and a message
    naming the path of the bad value (``the output.n of r-1/a#1 cannot be
    stored: integer ... is outside the 64-bit range``). Failing the effect
    once, rather than refusing the report, keeps the run moving: the work
    ran, and running it again would return the same value.
    """
    event = EffectSucceeded(
        idempotency_key=idempotency_key, output=output, usage=usage, at_ms=at_ms
    )
    try:
        check_event(event)
    except DataError as exc:
        path = exc.path
        if path.startswith("$.output"):
            where = "output" + path[len("$.output") :]
        elif path.startswith("$.usage"):
            where = "usage" + path[len("$.usage") :]
        else:
            where = "result"
        key = idempotency_key
        if not isinstance(key, str) or len(key) > 200 or not text_ok(key):
            key = short(key, 200)
        message = f"the {where} of {key} cannot be stored: {exc.problem}"
        error = ErrorInfo(type=UNENCODABLE_OUTPUT, message=message)
        return EffectFailed(idempotency_key=idempotency_key, error=error, at_ms=at_ms)
    return event


# The field-by-field checks live beside this module (it would be too long);
# imported last, as they read the types above.
from .wire_fields import _check_fields, _short_names  # noqa: E402
