"""The field-by-field checks of ``wire.check_event``: what is wrong in an event
built in Python, and where (``$.scheduleId``), when the quick check fails.

Imported by ``wire`` after its types; never imported on its own.
"""

from __future__ import annotations

from typing import assert_never

from .._data import MAX_NAME_CHARS, DataError, check_data, check_text, short
from .wire import (
    _STATUSES,
    MAX_UPDATE_ID,
    CancelRequested,
    EffectFailed,
    EffectOutcomeUnknown,
    EffectSucceeded,
    Event,
    HumanAnswered,
    KeyEvent,
    ScheduledAddRequested,
    ScheduledCancelRequested,
    ScheduledReplayRequested,
    ScheduledRunNowRequested,
    SignalReceived,
    SubflowSettled,
    TimerFired,
    UpdateRequested,
    _check_count,
    _check_error,
    _check_size,
    _check_usage,
)


def _short_names(event: Event) -> bool:
    if isinstance(event, KeyEvent) and len(event.idempotency_key) > MAX_NAME_CHARS:
        return False
    if isinstance(event, SignalReceived):
        return len(event.signal) <= MAX_NAME_CHARS and len(event.key or "") <= MAX_NAME_CHARS
    if isinstance(event, ScheduledReplayRequested):
        return len(event.schedule_id) <= MAX_NAME_CHARS and len(event.request or "") <= (
            MAX_NAME_CHARS
        )
    if isinstance(event, (ScheduledCancelRequested, ScheduledRunNowRequested)):
        return len(event.schedule_id) <= MAX_NAME_CHARS
    if isinstance(event, ScheduledAddRequested):
        return len(event.tool) <= MAX_NAME_CHARS
    if isinstance(event, EffectFailed):
        return len(event.error.type) <= MAX_NAME_CHARS
    if isinstance(event, UpdateRequested):
        return len(event.update_id) <= MAX_UPDATE_ID and len(event.name) <= MAX_NAME_CHARS
    return True


def _check_fields(event: object) -> Event:
    """``check_event`` field by field: what is wrong, and where (or the event, if nothing)."""
    if not isinstance(event, Event):
        hint = (
            "; to apply a wire dict, pass flowcore.event_from_wire(d)"
            if isinstance(event, dict)
            else ""
        )
        raise DataError(
            "$",
            f"expected a flowcore event (EffectSucceeded, HumanAnswered, ...),"
            f" got {type(event).__name__}{hint}",
            "invalid event",
        )
    what = "invalid event"
    _check_count(event.at_ms, "$.atMs")
    match event:
        case EffectSucceeded():
            check_text(event.idempotency_key, "$.idempotencyKey", what, MAX_NAME_CHARS)
            check_data(event.output, "$.output", what)
            _check_usage(event.usage)
        case EffectFailed():
            check_text(event.idempotency_key, "$.idempotencyKey", what, MAX_NAME_CHARS)
            _check_error(event.error, "$.error")
            _check_usage(event.usage)
        case EffectOutcomeUnknown() | TimerFired():
            check_text(event.idempotency_key, "$.idempotencyKey", what, MAX_NAME_CHARS)
        case HumanAnswered():
            check_text(event.idempotency_key, "$.idempotencyKey", what, MAX_NAME_CHARS)
            check_data(event.answer, "$.answer", what)
        case SignalReceived():
            check_text(event.signal, "$.signal", what, MAX_NAME_CHARS)
            if event.key is not None:
                check_text(event.key, "$.key", what, MAX_NAME_CHARS)
            check_data(event.payload, "$.payload", what)
        case SubflowSettled():
            check_text(event.idempotency_key, "$.idempotencyKey", what, MAX_NAME_CHARS)
            if event.status not in _STATUSES:
                raise DataError(
                    "$.status", f"{short(event.status)} is not one of {sorted(_STATUSES)}", what
                )
            check_data(event.output, "$.output", what)
            _check_usage(event.usage)
            if event.error is not None:
                _check_error(event.error, "$.error")
        case CancelRequested():
            check_text(event.reason, "$.reason", what)
        case ScheduledCancelRequested() | ScheduledRunNowRequested():
            check_text(event.schedule_id, "$.scheduleId", what, MAX_NAME_CHARS)
        case ScheduledAddRequested():
            check_text(event.tool, "$.tool", what, MAX_NAME_CHARS)
            check_data(event.input, "$.input", what)
            _check_count(event.delay_ms, "$.delayMs")
            for value, where in (
                (event.every_ms, "$.everyMs"),
                (event.count, "$.count"),
                (event.until_ms, "$.untilMs"),
            ):
                if value is not None:
                    _check_count(value, where)
            for text, where in ((event.cron, "$.cron"), (event.timezone, "$.timezone")):
                if text is not None:
                    check_text(text, where, what, MAX_NAME_CHARS)
        case ScheduledReplayRequested():
            check_text(event.schedule_id, "$.scheduleId", what, MAX_NAME_CHARS)
            if event.request is not None:
                check_text(event.request, "$.request", what, MAX_NAME_CHARS)
        case UpdateRequested():
            check_text(event.update_id, "$.updateId", what, MAX_UPDATE_ID)
            if not event.update_id or not event.update_id.isprintable():
                raise DataError("$.updateId", "expected non-empty printable text", what)
            check_text(event.name, "$.name", what, MAX_NAME_CHARS)
            check_data(event.input, "$.input", what)
            if event.principal is not None:
                check_text(event.principal, "$.principal", what, MAX_NAME_CHARS)
        case _:
            assert_never(event)
    _check_size(event)
    return event
