"""The wire protocol: strategies, round trips, pinned field names, errors and schemas.

The strategies are module-level functions so other tests can reuse them::

    from tests.decision.test_wire import effects, events
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any, get_args

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from flowcore._errors import WireError
from flowcore.decision.update_wire import UpdateReply, UpdateView
from flowcore.decision.wire import (
    AskHuman,
    AwaitSignal,
    BudgetRemaining,
    CallTool,
    CancelRequested,
    CarriedCall,
    CarriedSignal,
    ContinueAsNew,
    Effect,
    EffectFailed,
    EffectOutcomeUnknown,
    EffectSucceeded,
    ErrorInfo,
    Event,
    ExhaustedLimit,
    HumanAnswered,
    ReportEntry,
    ReportStatus,
    RunAgent,
    RunSubflow,
    RunTeam,
    ScheduledAddRequested,
    ScheduledCancelRequested,
    ScheduledReplayRequested,
    ScheduledRunNowRequested,
    Settled,
    SettledStatus,
    SignalReceived,
    SignalRun,
    Sleep,
    SubflowSettled,
    TimerFired,
    UpdateRequested,
    Usage,
    WorkKind,
    decode_effect,
    decode_event,
    effect_from_wire,
    effect_to_wire,
    encode_effect,
    encode_event,
    event_from_wire,
    event_to_wire,
)
from scripts.gen_schemas import SCHEMA_BASE_URI, all_schemas, render_schema, wire_schemas

REPO = Path(__file__).resolve().parents[2]
SCHEMA_DIR = REPO / "specs" / "schema"
REGENERATE = "run `python scripts/gen_schemas.py` and commit the result"

EFFECT_TYPES: tuple[type[Effect], ...] = get_args(Effect)
EVENT_TYPES: tuple[type[Event], ...] = get_args(Event)

# --- strategies ----------------------------------------------------------------

# MessagePack cannot carry ints outside [-2**63, 2**64 - 1]; stay inside int64.
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def ints() -> st.SearchStrategy[int]:
    return st.integers(min_value=_INT64_MIN, max_value=_INT64_MAX)


def non_neg_ints() -> st.SearchStrategy[int]:
    return st.integers(min_value=0, max_value=_INT64_MAX)


def texts() -> st.SearchStrategy[str]:
    return st.text(max_size=20)


def json_values() -> st.SearchStrategy[Any]:
    """JSON-like values that survive every codec unchanged.

    Only ``dict[str, ...]``, ``list``, ``str``, ``int`` (int64), ``bool``, ``None`` and
    finite floats: tuples would come back as lists, NaN is not equal to itself.
    """
    scalars = (
        st.none()
        | st.booleans()
        | ints()
        | st.floats(allow_nan=False, allow_infinity=False)
        | texts()
    )
    return st.recursive(
        scalars,
        lambda children: (
            st.lists(children, max_size=4)
            | st.dictionaries(st.text(max_size=10), children, max_size=4)
        ),
        max_leaves=12,
    )


def budgets() -> st.SearchStrategy[BudgetRemaining]:
    return st.builds(
        BudgetRemaining,
        steps=ints(),
        cost_minor_units=st.none() | ints(),
        wall_clock_ms=st.none() | ints(),
    )


def usages() -> st.SearchStrategy[Usage]:
    return st.builds(Usage, steps=non_neg_ints(), cost_minor_units=non_neg_ints())


def error_infos() -> st.SearchStrategy[ErrorInfo]:
    """Errors, with details, a cause chain and attempts now and then."""
    plain = st.builds(
        ErrorInfo,
        type=texts(),
        message=texts(),
        retryable=st.booleans(),
        details=st.none() | st.dictionaries(texts(), st.integers(0, 9), max_size=2),
    )
    return st.recursive(
        plain,
        lambda inner: st.builds(
            ErrorInfo,
            type=texts(),
            message=texts(),
            cause=st.none() | inner,
            attempts=st.lists(inner, max_size=2).map(tuple),
        ),
        max_leaves=4,
    )


def report_entries() -> st.SearchStrategy[ReportEntry]:
    return st.builds(
        ReportEntry,
        idempotency_key=texts(),
        effect=st.sampled_from(get_args(WorkKind)),
        target=texts(),
        status=st.sampled_from(get_args(ReportStatus)),
    )


def effect_strategies() -> dict[type[Effect], st.SearchStrategy[Effect]]:
    """One strategy per effect type; ``test_strategies_cover_every_type`` keeps it complete."""
    return dict(_effect_strategies())


def event_strategies() -> dict[type[Event], st.SearchStrategy[Event]]:
    """One strategy per event type; ``test_strategies_cover_every_type`` keeps it complete."""
    return dict(_event_strategies())


# Built once: strategies are immutable, and rebuilding them per draw is slow.
@functools.cache
def _effect_strategies() -> dict[type[Effect], st.SearchStrategy[Effect]]:
    return {
        RunAgent: st.builds(
            RunAgent,
            agent_id=texts(),
            prompt=texts(),
            instructions=st.none() | texts(),
            member=st.none() | texts(),
            idempotency_key=texts(),
            budget_remaining=budgets(),
        ),
        RunTeam: st.builds(RunTeam, team_id=texts(), prompt=texts(), idempotency_key=texts()),
        CallTool: st.builds(CallTool, tool=texts(), input=json_values(), idempotency_key=texts()),
        AskHuman: st.builds(
            AskHuman,
            question=texts(),
            options=st.none() | st.lists(texts(), max_size=4).map(tuple),
            idempotency_key=texts(),
        ),
        Sleep: st.builds(Sleep, until_ms=ints(), idempotency_key=texts()),
        AwaitSignal: st.builds(
            AwaitSignal, signal=texts(), idempotency_key=texts(), key=st.none() | texts()
        ),
        SignalRun: st.builds(
            SignalRun,
            run_id=texts(),
            signal=texts(),
            payload=json_values(),
            key=st.none() | texts(),
            idempotency_key=texts(),
        ),
        RunSubflow: st.builds(
            RunSubflow,
            flow_id=texts(),
            depth=ints(),
            idempotency_key=texts(),
            input=json_values(),
            budget_remaining=budgets(),
        ),
        Settled: st.builds(
            Settled,
            status=st.sampled_from(get_args(SettledStatus)),
            output=json_values(),
            error=st.none() | error_infos(),
            exhausted=st.none() | st.sampled_from(get_args(ExhaustedLimit)),
            report=st.lists(report_entries(), max_size=3).map(tuple),
        ),
        ContinueAsNew: st.builds(
            ContinueAsNew,
            input=json_values(),
            incarnation=st.integers(2, 2**63 - 1),
            idempotency_key=texts(),
            signals=st.lists(
                st.builds(CarriedSignal, signal=texts(), payload=json_values()), max_size=3
            ).map(tuple),
            scheduled=st.lists(
                st.builds(
                    CarriedCall,
                    id=texts(),
                    tool=texts(),
                    input=json_values(),
                    created_ms=non_neg_ints(),
                    due_ms=non_neg_ints(),
                    outlive=st.booleans(),
                    outside=st.booleans(),
                    every_ms=st.none() | non_neg_ints(),
                    cron=st.none() | texts(),
                    count=st.none() | non_neg_ints(),
                    fires=non_neg_ints(),
                ),
                max_size=2,
            ).map(tuple),
            budget_remaining=st.none() | budgets(),
            report=st.lists(report_entries(), max_size=3).map(tuple),
        ),
    }


@functools.cache
def _event_strategies() -> dict[type[Event], st.SearchStrategy[Event]]:
    return {
        EffectSucceeded: st.builds(
            EffectSucceeded,
            idempotency_key=texts(),
            output=json_values(),
            usage=st.none() | usages(),
            at_ms=non_neg_ints(),
        ),
        EffectFailed: st.builds(
            EffectFailed, idempotency_key=texts(), error=error_infos(), at_ms=non_neg_ints()
        ),
        EffectOutcomeUnknown: st.builds(
            EffectOutcomeUnknown, idempotency_key=texts(), at_ms=non_neg_ints()
        ),
        HumanAnswered: st.builds(
            HumanAnswered, idempotency_key=texts(), answer=json_values(), at_ms=non_neg_ints()
        ),
        TimerFired: st.builds(TimerFired, idempotency_key=texts(), at_ms=non_neg_ints()),
        SignalReceived: st.builds(
            SignalReceived,
            signal=texts(),
            payload=json_values(),
            at_ms=non_neg_ints(),
            key=st.none() | texts(),
        ),
        SubflowSettled: st.builds(
            SubflowSettled,
            idempotency_key=texts(),
            status=st.sampled_from(get_args(SettledStatus)),
            output=json_values(),
            usage=st.none() | usages(),
            at_ms=non_neg_ints(),
        ),
        CancelRequested: st.builds(CancelRequested, reason=texts(), at_ms=non_neg_ints()),
        ScheduledCancelRequested: st.builds(
            ScheduledCancelRequested, schedule_id=texts(), at_ms=non_neg_ints()
        ),
        ScheduledRunNowRequested: st.builds(
            ScheduledRunNowRequested, schedule_id=texts(), at_ms=non_neg_ints()
        ),
        ScheduledAddRequested: st.builds(
            ScheduledAddRequested,
            tool=texts(),
            input=json_values(),
            delay_ms=non_neg_ints(),
            at_ms=non_neg_ints(),
            request=st.none() | texts(),
            every_ms=st.none() | non_neg_ints(),
            cron=st.none() | texts(),
            timezone=st.none() | texts(),
            count=st.none() | non_neg_ints(),
            until_ms=st.none() | non_neg_ints(),
        ),
        ScheduledReplayRequested: st.builds(
            ScheduledReplayRequested,
            schedule_id=texts(),
            at_ms=non_neg_ints(),
            request=st.none() | texts(),
        ),
        UpdateRequested: st.builds(
            UpdateRequested,
            update_id=st.text(min_size=1, max_size=20),
            name=texts(),
            input=json_values(),
            principal=st.none() | texts(),
            at_ms=non_neg_ints(),
        ),
    }


def effects() -> st.SearchStrategy[Effect]:
    """Any effect, of every type."""
    return st.one_of(*effect_strategies().values())


def events() -> st.SearchStrategy[Event]:
    """Any event, of every type."""
    return st.one_of(*event_strategies().values())


# --- helpers -------------------------------------------------------------------

_CAMEL = re.compile(r"[a-z][a-z0-9]*(?:[A-Z][a-z0-9]*)*")


def _tag(cls: type[msgspec.Struct]) -> str:
    tag = cls.__struct_config__.tag
    assert isinstance(tag, str), f"{cls.__name__} has no string tag"
    return tag


def _assert_wire_shape(value: msgspec.Struct, wire: Any, where: str = "$") -> None:
    """``wire`` is ``value`` on the wire: tag first, camelCase keys, defaults omitted.

    Recurses into nested structs; keys inside ``Any`` payloads are user data and
    are not checked.
    """
    assert isinstance(wire, dict), f"{where}: expected a dict, got {type(wire).__name__}"
    config = value.__struct_config__
    expected: list[str] = []
    if config.tag_field is not None:
        assert config.tag_field == "kind"
        assert next(iter(wire), None) == "kind", f"{where}: `kind` must come first"
        assert wire["kind"] == _tag(type(value))
        expected.append("kind")
    for field in msgspec.structs.fields(value):
        name = field.encode_name
        item = getattr(value, field.name)
        is_default = field.default is not msgspec.NODEFAULT and item == field.default
        assert (name not in wire) == is_default, (
            f"{where}.{name}: present={name in wire} but equal-to-default={is_default}"
        )
        if name not in wire:
            continue
        expected.append(name)
        if isinstance(item, msgspec.Struct):
            _assert_wire_shape(item, wire[name], f"{where}.{name}")
        elif isinstance(item, tuple):
            assert isinstance(wire[name], list), f"{where}.{name}: tuples go out as lists"
            for i, (sub, sub_wire) in enumerate(zip(item, wire[name], strict=True)):
                if isinstance(sub, msgspec.Struct):
                    _assert_wire_shape(sub, sub_wire, f"{where}.{name}[{i}]")
    assert list(wire) == expected, f"{where}: keys {list(wire)} != {expected}"
    for key in wire:
        assert _CAMEL.fullmatch(key), f"{where}.{key} is not camelCase"


def _json_form(value: Any) -> Any:
    """``value`` as it comes back from JSON: tuples become lists."""
    return msgspec.json.decode(msgspec.json.encode(value))


@functools.cache
def _validator(name: str) -> Any:
    return Draft202012Validator(wire_schemas()[name])


def _pinned_fields(cls: type[msgspec.Struct]) -> tuple[str, ...]:
    """Wire field names in declaration order; optional ones end in ``?``."""
    names = tuple(f.encode_name + ("" if f.required else "?") for f in msgspec.structs.fields(cls))
    return ("kind", *names) if cls.__struct_config__.tag_field else names


# --- the strategies themselves -------------------------------------------------


def test_strategies_cover_every_type() -> None:
    assert set(effect_strategies()) == set(EFFECT_TYPES)
    assert set(event_strategies()) == set(EVENT_TYPES)


@given(effect=effects(), event=events())
def test_union_strategies_draw_union_members(effect: Effect, event: Event) -> None:
    assert type(effect) in EFFECT_TYPES
    assert type(event) in EVENT_TYPES
    assert decode_effect(encode_effect(effect, "msgpack"), "msgpack") == effect
    assert decode_event(encode_event(event, "msgpack"), "msgpack") == event


# --- round trips ---------------------------------------------------------------


@pytest.mark.parametrize("cls", EFFECT_TYPES, ids=lambda c: _tag(c))
@given(data=st.data())
def test_effect_round_trips(cls: type[Effect], data: st.DataObject) -> None:
    effect = data.draw(_effect_strategies()[cls])
    assert type(effect) is cls
    assert decode_effect(encode_effect(effect)) == effect
    assert decode_effect(encode_effect(effect, "json"), "json") == effect
    assert decode_effect(encode_effect(effect, "msgpack"), "msgpack") == effect
    wire = effect_to_wire(effect)
    assert effect_from_wire(wire) == effect
    # The dict form is JSON-ready: it survives a trip through the stdlib too.
    assert effect_from_wire(json.loads(json.dumps(wire))) == effect


@pytest.mark.parametrize("cls", EVENT_TYPES, ids=lambda c: _tag(c))
@given(data=st.data())
def test_event_round_trips(cls: type[Event], data: st.DataObject) -> None:
    event = data.draw(_event_strategies()[cls])
    assert type(event) is cls
    assert decode_event(encode_event(event)) == event
    assert decode_event(encode_event(event, "json"), "json") == event
    assert decode_event(encode_event(event, "msgpack"), "msgpack") == event
    wire = event_to_wire(event)
    assert event_from_wire(wire) == event
    assert event_from_wire(json.loads(json.dumps(wire))) == event


@pytest.mark.parametrize("cls", EFFECT_TYPES, ids=lambda c: _tag(c))
@given(data=st.data())
def test_effect_wire_shape(cls: type[Effect], data: st.DataObject) -> None:
    effect = data.draw(_effect_strategies()[cls])
    assert type(effect) is cls
    # What a host receives; effect_to_wire agrees with it only up to tuple-vs-list
    # (see test_effect_to_wire_uses_json_arrays), so the shape is checked here.
    wire = msgspec.json.decode(encode_effect(effect))
    assert wire["kind"] == _tag(type(effect))
    _assert_wire_shape(effect, wire)
    assert effect_to_wire(effect) == wire


@pytest.mark.parametrize("cls", EVENT_TYPES, ids=lambda c: _tag(c))
@given(data=st.data())
def test_event_wire_shape(cls: type[Event], data: st.DataObject) -> None:
    event = data.draw(_event_strategies()[cls])
    assert type(event) is cls
    wire = event_to_wire(event)
    assert wire["kind"] == _tag(type(event))
    _assert_wire_shape(event, wire)
    # Bytes and dict encodings agree exactly.
    assert msgspec.json.decode(encode_event(event)) == wire


@pytest.mark.parametrize(
    "effect",
    [
        AskHuman(question="q", options=("a", "b"), idempotency_key="k"),
        Settled(
            status="failed",
            report=(
                ReportEntry(idempotency_key="k", effect="run-team", target="t", status="failed"),
            ),
        ),
    ],
    ids=["ask-human-options", "settled-report"],
)
def test_effect_to_wire_uses_json_arrays(effect: Effect) -> None:
    assert effect_to_wire(effect) == msgspec.json.decode(encode_effect(effect))


def test_defaults_are_omitted_on_the_wire() -> None:
    effect = Settled(status="completed")
    assert effect_to_wire(effect) == {"kind": "settled", "status": "completed"}
    event = EffectFailed(idempotency_key="k", error=ErrorInfo(type="Boom"), at_ms=3)
    assert event_to_wire(event) == {
        "kind": "effect-failed",
        "idempotencyKey": "k",
        "error": {"type": "Boom"},
        "atMs": 3,
    }


# --- pinned protocol surface ---------------------------------------------------

EFFECT_FIELDS: dict[str, tuple[str, ...]] = {
    "run-agent": (
        "kind",
        "agentId",
        "prompt",
        "instructions?",
        "member?",
        "idempotencyKey",
        "budgetRemaining",
        "heartbeatTimeoutMs?",  # a step's heartbeat_timeout_ms: an addition
        "heartbeatDetails?",
        "cancellation?",
    ),
    "run-team": (
        "kind",
        "teamId",
        "prompt",
        "idempotencyKey",
        "heartbeatTimeoutMs?",
        "heartbeatDetails?",
        "cancellation?",
        "budgetRemaining?",
    ),
    "call-tool": (
        "kind",
        "tool",
        "input?",
        "idempotencyKey",
        "heartbeatTimeoutMs?",
        "heartbeatDetails?",
        "cancellation?",
    ),
    "ask-human": ("kind", "question", "options?", "idempotencyKey"),
    "sleep": ("kind", "untilMs", "idempotencyKey"),
    "await-signal": ("kind", "signal", "idempotencyKey", "signals?", "key?"),
    "run-subflow": (
        "kind",
        "flowId",
        "depth",
        "idempotencyKey",
        "input?",
        "budgetRemaining",
        "parentClose?",
        "detached?",
    ),
    "settled": ("kind", "status", "output?", "error?", "exhausted?", "report?"),
    "signal-run": ("kind", "runId", "signal", "payload?", "key?", "idempotencyKey"),
    "continue-as-new": (
        "kind",
        "input?",
        "incarnation",
        "idempotencyKey",
        "signals?",
        "scheduled?",
        "budgetRemaining?",
        "report?",
        "metadata?",
        "idleIncarnations?",
    ),
}

EVENT_FIELDS: dict[str, tuple[str, ...]] = {
    "effect-succeeded": ("kind", "idempotencyKey", "output?", "usage?", "atMs"),
    "effect-failed": ("kind", "idempotencyKey", "error", "usage?", "atMs"),  # usage: an addition
    "effect-outcome-unknown": ("kind", "idempotencyKey", "atMs"),
    # principal on human-answered: an addition (who answered, when the host knows)
    "human-answered": ("kind", "idempotencyKey", "answer", "atMs", "principal?"),
    "timer-fired": ("kind", "idempotencyKey", "atMs"),
    "signal-received": ("kind", "signal", "payload?", "atMs", "key?"),
    "subflow-settled": (
        "kind",
        "idempotencyKey",
        "status",
        "output?",
        "usage?",
        "error?",
        "atMs",
    ),
    "cancel-requested": ("kind", "reason?", "atMs"),
    "scheduled-cancel-requested": ("kind", "scheduleId", "atMs"),
    "scheduled-run-now-requested": ("kind", "scheduleId", "atMs"),
    "scheduled-add-requested": (
        "kind",
        "tool",
        "input?",
        "delayMs?",
        "atMs",
        "request?",
        "everyMs?",
        "cron?",
        "timezone?",
        "count?",
        "untilMs?",
    ),
    "scheduled-replay-requested": ("kind", "scheduleId", "atMs", "request?"),
    "update-requested": ("kind", "updateId", "name", "input?", "principal?", "atMs"),
}

VALUE_FIELDS: dict[type[msgspec.Struct], tuple[str, ...]] = {
    UpdateReply: ("updateId", "name", "status", "output?", "error?"),
    UpdateView: (
        "updateId",
        "name",
        "seq",
        "status",
        "output?",
        "error?",
        "principal?",
    ),
    # tokens, toolCalls and turns: additions (specs/protocol.md §2), present when limited
    BudgetRemaining: (
        "steps",
        "costMinorUnits?",
        "wallClockMs?",
        "tokens?",
        "toolCalls?",
        "turns?",
    ),
    Usage: (
        "steps?",
        "costMinorUnits?",
        "tokens?",
        "toolCalls?",
        "turns?",
        "inputTokens?",
        "outputTokens?",
        "cacheReadTokens?",
    ),
    ErrorInfo: ("type", "message?", "retryable?", "details?", "cause?", "attempts?"),
    ReportEntry: ("idempotencyKey", "effect", "target", "status"),
    CarriedSignal: ("signal", "payload?", "key?"),
    CarriedCall: (
        "id",
        "tool",
        "input?",
        "createdMs?",
        "dueMs?",
        "outlive?",
        "outside?",
        "everyMs?",
        "cron?",
        "timezone?",
        "count?",
        "untilMs?",
        "fires?",
    ),
}


def test_effect_kinds_are_exactly() -> None:
    kinds = {_tag(cls) for cls in EFFECT_TYPES}
    assert kinds == {
        "run-agent",
        "run-team",
        "call-tool",
        "ask-human",
        "sleep",
        "await-signal",
        "run-subflow",
        "settled",
        "signal-run",
        "continue-as-new",
    }
    assert len(kinds) == len(EFFECT_TYPES)
    assert set(EFFECT_FIELDS) == kinds


def test_event_kinds_are_exactly() -> None:
    kinds = {_tag(cls) for cls in EVENT_TYPES}
    assert kinds == {
        "effect-succeeded",
        "effect-failed",
        "effect-outcome-unknown",
        "human-answered",
        "timer-fired",
        "signal-received",
        "subflow-settled",
        "cancel-requested",
        "scheduled-cancel-requested",
        "scheduled-run-now-requested",
        "scheduled-add-requested",
        "scheduled-replay-requested",
        "update-requested",
    }
    assert len(kinds) == len(EVENT_TYPES)
    assert set(EVENT_FIELDS) == kinds


@pytest.mark.parametrize("cls", EFFECT_TYPES, ids=lambda c: _tag(c))
def test_effect_wire_fields_are_pinned(cls: type[msgspec.Struct]) -> None:
    assert _pinned_fields(cls) == EFFECT_FIELDS[_tag(cls)]


@pytest.mark.parametrize("cls", EVENT_TYPES, ids=lambda c: _tag(c))
def test_event_wire_fields_are_pinned(cls: type[msgspec.Struct]) -> None:
    assert _pinned_fields(cls) == EVENT_FIELDS[_tag(cls)]


@pytest.mark.parametrize("cls", list(VALUE_FIELDS), ids=lambda c: c.__name__)
def test_value_wire_fields_are_pinned(cls: type[msgspec.Struct]) -> None:
    assert cls.__struct_config__.tag_field is None
    assert _pinned_fields(cls) == VALUE_FIELDS[cls]


def test_literal_values_are_pinned() -> None:
    assert set(get_args(SettledStatus)) == {"completed", "failed", "cancelled", "budget-exhausted"}
    assert set(get_args(ExhaustedLimit)) == {
        "steps",
        "cost",
        "wall-clock",
        "tokens",
        "tool-calls",
        "turns",
    }
    assert set(get_args(ReportStatus)) == {"succeeded", "failed", "uncertain", "not-started"}
    assert set(get_args(WorkKind)) == {
        "run-agent",
        "run-team",
        "call-tool",
        "run-subflow",
        "signal-run",
    }


# --- malformed input -----------------------------------------------------------

_TIMER: dict[str, Any] = {"kind": "timer-fired", "idempotencyKey": "k", "atMs": 5}
_FAILED: dict[str, Any] = {
    "kind": "effect-failed",
    "idempotencyKey": "k",
    "error": {"type": "Boom"},
    "atMs": 5,
}
_SUCCEEDED: dict[str, Any] = {
    "kind": "effect-succeeded",
    "idempotencyKey": "k",
    "usage": {"steps": 1},
    "atMs": 5,
}
_SUBFLOW: dict[str, Any] = {
    "kind": "subflow-settled",
    "idempotencyKey": "k",
    "status": "completed",
    "atMs": 5,
}
_SIGNAL: dict[str, Any] = {"kind": "signal-received", "signal": "go", "atMs": 5}
_ANSWERED: dict[str, Any] = {
    "kind": "human-answered",
    "idempotencyKey": "k",
    "answer": "yes",
    "atMs": 5,
}
_CANCEL: dict[str, Any] = {"kind": "cancel-requested", "atMs": 5}

VALID_EVENT_DICTS = [_TIMER, _FAILED, _SUCCEEDED, _SUBFLOW, _SIGNAL, _ANSWERED, _CANCEL]


def _with(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {**base, **changes}


def _without(base: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in base.items() if k != key}


# (id, data, expected WireError.path); each dict differs from a valid one by one defect.
BAD_EVENTS: list[tuple[str, Any, str]] = [
    ("list-not-dict", [_TIMER], "$"),
    ("str-not-dict", "timer-fired", "$"),
    ("none-not-dict", None, "$"),
    ("unknown-kind", _with(_TIMER, kind="timer-exploded"), "$.kind"),
    ("missing-kind", _without(_TIMER, "kind"), "$.kind"),
    ("kind-not-str", _with(_TIMER, kind=7), "$.kind"),
    ("missing-idempotencyKey", _without(_TIMER, "idempotencyKey"), "$.idempotencyKey"),
    (
        "snake-case-key",
        _with(_without(_TIMER, "idempotencyKey"), idempotency_key="k"),
        "$.idempotencyKey",
    ),
    ("idempotencyKey-not-str", _with(_TIMER, idempotencyKey=5), "$.idempotencyKey"),
    ("atMs-str", _with(_TIMER, atMs="5"), "$.atMs"),
    ("atMs-fraction", _with(_TIMER, atMs=5.5), "$.atMs"),
    ("atMs-bool", _with(_TIMER, atMs=True), "$.atMs"),
    ("atMs-negative", _with(_TIMER, atMs=-1), "$.atMs"),
    ("missing-atMs", _without(_CANCEL, "atMs"), "$.atMs"),
    ("error-type-not-str", _with(_FAILED, error={"type": 3}), "$.error.type"),
    ("error-type-missing", _with(_FAILED, error={"message": "m"}), "$.error.type"),
    ("error-not-object", _with(_FAILED, error="Boom"), "$.error"),
    ("error-missing", _without(_FAILED, "error"), "$.error"),
    (
        "error-retryable-not-bool",
        _with(_FAILED, error={"type": "Boom", "retryable": "yes"}),
        "$.error.retryable",
    ),
    ("usage-steps-negative", _with(_SUCCEEDED, usage={"steps": -1}), "$.usage.steps"),
    (
        "usage-cost-not-int",
        _with(_SUCCEEDED, usage={"costMinorUnits": "1"}),
        "$.usage.costMinorUnits",
    ),
    ("usage-not-object", _with(_SUCCEEDED, usage=[1]), "$.usage"),
    ("status-unknown", _with(_SUBFLOW, status="done"), "$.status"),
    ("missing-signal", _without(_SIGNAL, "signal"), "$.signal"),
    ("missing-answer", _without(_ANSWERED, "answer"), "$.answer"),
    ("reason-not-str", _with(_CANCEL, reason=None), "$.reason"),
]


@pytest.mark.parametrize("data", VALID_EVENT_DICTS, ids=lambda d: d["kind"])
def test_valid_event_dicts_are_accepted(data: dict[str, Any]) -> None:
    """The baselines the malformed cases are derived from really are valid."""
    event = event_from_wire(data)
    assert _tag(type(event)) == data["kind"]
    assert event_to_wire(event) == data
    assert _validator("events").is_valid(data)


@pytest.mark.parametrize(
    ("data", "path"), [c[1:] for c in BAD_EVENTS], ids=[c[0] for c in BAD_EVENTS]
)
def test_event_from_wire_names_the_bad_field(data: Any, path: str) -> None:
    with pytest.raises(WireError) as info:
        event_from_wire(data)
    assert info.value.path == path
    assert path in str(info.value)


@pytest.mark.parametrize("fmt", ["json", "msgpack"])
@pytest.mark.parametrize(
    ("data", "path"), [c[1:] for c in BAD_EVENTS], ids=[c[0] for c in BAD_EVENTS]
)
def test_decode_event_names_the_same_field(data: Any, path: str, fmt: str) -> None:
    raw = msgspec.json.encode(data) if fmt == "json" else msgspec.msgpack.encode(data)
    with pytest.raises(WireError) as info:
        decode_event(raw, "json" if fmt == "json" else "msgpack")
    assert info.value.path == path


@pytest.mark.parametrize("data", [c[1] for c in BAD_EVENTS], ids=[c[0] for c in BAD_EVENTS])
def test_schema_rejects_malformed_events_too(data: Any) -> None:
    assert not _validator("events").is_valid(data)


@pytest.mark.parametrize(
    ("raw", "fmt"),
    [
        (b"not json", "json"),
        (b"", "json"),
        (b'{"kind": "timer-fired"', "json"),
        (b"\xc1", "msgpack"),
        (b"", "msgpack"),
    ],
)
def test_decode_event_rejects_undecodable_bytes(raw: bytes, fmt: str) -> None:
    with pytest.raises(WireError) as info:
        decode_event(raw, "json" if fmt == "json" else "msgpack")
    assert info.value.path == "$"


def test_decode_event_not_json() -> None:
    with pytest.raises(WireError) as info:
        decode_event(b"not json")
    assert info.value.path == "$"
    assert "malformed" in str(info.value)


_RUN_AGENT: dict[str, Any] = {
    "kind": "run-agent",
    "agentId": "a",
    "prompt": "p",
    "idempotencyKey": "k",
    "budgetRemaining": {"steps": 3},
}
_ASK: dict[str, Any] = {
    "kind": "ask-human",
    "question": "q",
    "options": ["a"],
    "idempotencyKey": "k",
}
_SETTLED: dict[str, Any] = {
    "kind": "settled",
    "status": "completed",
    "report": [{"idempotencyKey": "k", "effect": "call-tool", "target": "t", "status": "failed"}],
}


def test_valid_effect_dicts_are_accepted() -> None:
    """The baselines the malformed effect cases are derived from really are valid."""
    assert effect_from_wire(_RUN_AGENT) == RunAgent(
        agent_id="a", prompt="p", idempotency_key="k", budget_remaining=BudgetRemaining(steps=3)
    )
    assert effect_from_wire(_ASK) == AskHuman(question="q", options=("a",), idempotency_key="k")
    settled = effect_from_wire(_SETTLED)
    assert isinstance(settled, Settled)
    assert settled.report == (
        ReportEntry(idempotency_key="k", effect="call-tool", target="t", status="failed"),
    )


@pytest.mark.parametrize(
    ("data", "path"),
    [
        (42, "$"),
        (_with(_RUN_AGENT, kind="run-agents"), "$.kind"),
        (_with(_RUN_AGENT, budgetRemaining={}), "$.budgetRemaining.steps"),
        (_with(_RUN_AGENT, budgetRemaining={"steps": "3"}), "$.budgetRemaining.steps"),
        (
            _with(_SETTLED, report=[{**_SETTLED["report"][0], "status": "meh"}]),
            "$.report[0].status",
        ),
        (_with(_SETTLED, exhausted="patience"), "$.exhausted"),
        (_with(_ASK, options=["a", 1]), "$.options[1]"),
        (_without(_ASK, "question"), "$.question"),
    ],
)
def test_effect_from_wire_names_the_bad_field(data: Any, path: str) -> None:
    with pytest.raises(WireError) as info:
        effect_from_wire(data)
    assert info.value.path == path


# --- JSON Schemas --------------------------------------------------------------


def test_wire_schemas_are_standalone_2020_12_documents() -> None:
    schemas = wire_schemas()
    assert set(schemas) == {"effects", "events", "records", "decide-requests", "decide-replies"}
    for name, schema in schemas.items():
        Draft202012Validator.check_schema(schema)
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        assert schema["$id"] == f"{SCHEMA_BASE_URI}{name}.json"
        assert schema["title"]
        refs = re.findall(r'"\$ref": "([^"]*)"', json.dumps(schema))
        assert refs, f"{name}: expected $refs into $defs"
        for ref in refs:
            assert ref.startswith("#/$defs/"), ref
            assert ref.removeprefix("#/$defs/") in schema["$defs"], f"{name}: dangling {ref}"


def test_schema_discriminators_list_every_kind() -> None:
    schemas = wire_schemas()
    assert set(schemas["effects"]["discriminator"]["mapping"]) == set(EFFECT_FIELDS)
    assert set(schemas["events"]["discriminator"]["mapping"]) == set(EVENT_FIELDS)
    assert schemas["effects"]["discriminator"]["propertyName"] == "kind"
    assert schemas["events"]["discriminator"]["propertyName"] == "kind"


def test_wire_schemas_returns_fresh_documents() -> None:
    first = wire_schemas()
    first["effects"]["$defs"].clear()
    assert wire_schemas()["effects"]["$defs"], "mutating one result must not leak into the next"


@pytest.mark.parametrize(
    "name", ["effects", "events", "records", "decide-requests", "decide-replies", "flow"]
)
def test_committed_schema_is_up_to_date(name: str) -> None:
    path = SCHEMA_DIR / f"{name}.json"
    assert path.is_file(), f"{path.relative_to(REPO)} is missing: {REGENERATE}"
    expected = all_schemas()[name]
    text = path.read_text(encoding="utf-8")
    assert json.loads(text) == expected, f"{path.relative_to(REPO)} is stale: {REGENERATE}"
    assert text == render_schema(expected), (
        f"{path.relative_to(REPO)} is not canonically formatted: {REGENERATE}"
    )


def test_no_orphaned_schema_files() -> None:
    committed = {p.stem for p in SCHEMA_DIR.glob("*.json")}
    assert committed == set(all_schemas()), f"unexpected files in specs/schema: {REGENERATE}"


@pytest.mark.parametrize("cls", EFFECT_TYPES, ids=lambda c: _tag(c))
@given(data=st.data())
def test_every_effect_validates_against_the_schema(cls: type[Effect], data: st.DataObject) -> None:
    effect = data.draw(_effect_strategies()[cls])
    assert type(effect) is cls
    wire = effect_to_wire(effect)
    errors = [e.message for e in _validator("effects").iter_errors(wire)]
    assert errors == []


@pytest.mark.parametrize("cls", EVENT_TYPES, ids=lambda c: _tag(c))
@given(data=st.data())
def test_every_event_validates_against_the_schema(cls: type[Event], data: st.DataObject) -> None:
    event = data.draw(_event_strategies()[cls])
    assert type(event) is cls
    wire = event_to_wire(event)
    errors = [e.message for e in _validator("events").iter_errors(wire)]
    assert errors == []
