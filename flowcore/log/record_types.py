"""The log's record types: the envelope (``Record``, ``RawRecord``), the typed
records and their data, and the errors of a log that cannot be read
(``LogCorrupt``, ``UnknownRecordType``). ``records`` describes the log.

This module must never do I/O.
"""

from __future__ import annotations

from typing import Any, Literal, TypeAlias

import msgspec

from .._errors import FlowcoreError
from ..decision.state import Sched
from ..decision.waiting import STATUS
from ..decision.wire import (
    CarriedCall,
    CarriedSignal,
    Effect,
    ErrorInfo,
    Event,
    ExhaustedLimit,
    NonNegInt,
    SettledStatus,
)
from .report import ForkedFrom, TornTail

LogFormat: TypeAlias = Literal["json", "msgpack"]

RUN_STARTED = "run.started"
EVENT_REPORTED = "event.reported"
EVENT_REJECTED = "event.rejected"
EFFECT_EMITTED = "effect.emitted"
RUN_SETTLED = "run.settled"
EFFECT_REDISPATCHED = "effect.redispatched"
SCHEDULED_CHANGED = "scheduled.changed"


class Record(msgspec.Struct, frozen=True, rename="camel", gc=False):
    """One log envelope. ``at`` is the host's clock (ms) when it was written.

    Decoding checks ``index`` and ``at`` are 64-bit integers >= 0 (what
    every host language holds exactly), so an envelope with a 100-digit
    index is refused where it is read.

    Not tracked by the garbage collector (``gc=False``): a record holds
    strings, numbers and JSON data, never itself, and a simulation or a host
    writes many of them.
    """

    type: str
    index: NonNegInt
    run_id: str
    at: NonNegInt
    data: Any = None


# --- the typed records: what each record type's data holds ----------------------------
# These describe the format (``specs/schema/records.json`` is generated from
# them); readers go through ``Record`` / ``RawRecord`` so that unknown record
# types and fields are skipped rather than rejected.


class StartBudget(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    """The budget a host passed to ``start`` (a child's share); unset limits are omitted."""

    steps: NonNegInt | None = None
    cost_minor_units: NonNegInt | None = None
    wall_clock_ms: NonNegInt | None = None
    tokens: NonNegInt | None = None
    tool_calls: NonNegInt | None = None
    turns: NonNegInt | None = None


class RunStartedData(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """``run.started``: what ``start`` was called with; ``at`` is its ``now_ms``.

    ``forkedFrom``: only in a fork's log (``flowcore.fork``).
    """

    flow_id: str
    version: int
    spec_hash: str
    input: Any = None
    budget: StartBudget | None = None
    depth: NonNegInt = 0
    semantics: int = 1  # absent: runs started before the interpreter had levels
    metadata: dict[str, Any] | None = None  # absent: none given at start
    # A later incarnation (``continue_as_new``): its number and what it carried
    # over. ``budget`` is then a child run's remainder, or absent.
    incarnation: int = 1
    signals: tuple[CarriedSignal, ...] = ()
    scheduled: tuple[CarriedCall, ...] = ()
    forked_from: ForkedFrom | None = None
    idle_incarnations: NonNegInt = 0  # the effect's, absent when 0


class EventRejectedData(msgspec.Struct, frozen=True, kw_only=True):
    """``event.rejected``: an event the interpreter refused, and why."""

    event: Event
    reason: str = ""


class RunSettledData(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """``run.settled``: the settled effect's outcome (its report stays in the effect)."""

    status: SettledStatus
    output: Any = None
    error: ErrorInfo | None = None
    exhausted: ExhaustedLimit | None = None


class EffectRedispatchedData(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """``effect.redispatched``: pending work run again under its key after a recovery.

    ``recovery`` counts the recoveries of this key (1 for the first); ``worker``
    is the worker that was lost, when the host knows it. It changes no state:
    the work was pending before and stays pending.
    """

    idempotency_key: str
    recovery: NonNegInt
    worker: str | None = None


ScheduledStatus: TypeAlias = Literal[
    "pending", "running", "completed", "failed", "cancelled", "uncertain"
]


class ScheduledChangedData(
    msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True
):
    """``scheduled.changed``: a scheduled call as the decision left it.

    Written for every change (created, issued, issued again, finished,
    cancelled), derived from the decision (``Journal.scheduled``), so every
    host writes the same records. It carries the status, never the call's
    input: a stream of them shows what happens without what it is about.
    """

    id: str
    tool: str
    status: ScheduledStatus
    attempts: NonNegInt = 0
    due_ms: NonNegInt = 0
    error: ErrorInfo | None = None
    fires: NonNegInt = 0  # a recurring call's firings so far
    replays: NonNegInt = 0  # replays of a finished call so far


def scheduled_changed_data(sid: str, sched: Sched) -> dict[str, Any]:
    """The data of the ``scheduled.changed`` record for ``sid`` (camelCase, JSON-ready)."""
    data: dict[str, Any] = {
        "id": sid,
        "tool": sched.tool,
        "status": STATUS[sched.status],
        "attempts": sched.attempts,
        "dueMs": sched.due_ms,
    }
    if sched.error is not None:
        error: dict[str, Any] = {"type": sched.error.type}
        if sched.error.message:
            error["message"] = sched.error.message
        if sched.error.retryable:
            error["retryable"] = True
        data["error"] = error
    if sched.fires:
        data["fires"] = sched.fires
    if sched.replays:
        data["replays"] = sched.replays
    return data


class _Envelope(msgspec.Struct, frozen=True, kw_only=True, rename="camel", tag_field="type"):
    index: NonNegInt
    run_id: str
    at: NonNegInt


class RunStartedRecord(_Envelope, frozen=True, kw_only=True, tag=RUN_STARTED):
    data: RunStartedData


class EventReportedRecord(_Envelope, frozen=True, kw_only=True, tag=EVENT_REPORTED):
    data: Event


class EventRejectedRecord(_Envelope, frozen=True, kw_only=True, tag=EVENT_REJECTED):
    data: EventRejectedData


class EffectEmittedRecord(_Envelope, frozen=True, kw_only=True, tag=EFFECT_EMITTED):
    data: Effect


class RunSettledRecord(_Envelope, frozen=True, kw_only=True, tag=RUN_SETTLED):
    data: RunSettledData


class EffectRedispatchedRecord(_Envelope, frozen=True, kw_only=True, tag=EFFECT_REDISPATCHED):
    data: EffectRedispatchedData


class ScheduledChangedRecord(_Envelope, frozen=True, kw_only=True, tag=SCHEDULED_CHANGED):
    data: ScheduledChangedData


TypedRecord: TypeAlias = (
    RunStartedRecord
    | EventReportedRecord
    | EventRejectedRecord
    | EffectEmittedRecord
    | RunSettledRecord
    | EffectRedispatchedRecord
    | ScheduledChangedRecord
)


class RawRecord(msgspec.Struct, frozen=True, rename="camel", gc=False):
    """A log envelope whose ``data`` is left as undecoded bytes (JSON or MessagePack).

    Replay reads logs this way: an event is decoded straight into its typed
    Struct, and a recorded effect is compared byte for byte with the encoding
    of the re-derived one before anything is decoded at all.
    """

    type: str
    index: NonNegInt
    run_id: str
    at: NonNegInt
    data: msgspec.Raw = msgspec.Raw(b"null")


class LogRead(msgspec.Struct, frozen=True):
    """The complete records of a log, and the torn tail if there was one."""

    records: tuple[Record, ...]
    torn: TornTail | None = None


class LogCorrupt(FlowcoreError, ValueError):
    """A log that cannot be read or is not consistent: never skipped.

    ``offset`` is the byte offset of the bad record and ``line`` its line
    (NDJSON), when the log was read from bytes; ``index`` is the record index,
    when the envelope itself could be read.
    """

    def __init__(
        self,
        message: str,
        offset: int | None = None,
        line: int | None = None,
        index: int | None = None,
    ) -> None:
        self.offset = offset
        self.line = line
        self.index = index
        super().__init__(message)


class UnknownRecordType(LogCorrupt):
    """A record of a type this reader does not know (``record_type``).

    Replay refuses it by default: a damaged ``type`` looks exactly like a
    newer one, and skipping it silently could drop a ``run.settled`` or an
    effect. ``replay(..., allow_unknown_types=True)`` skips such records for
    logs known to come from a newer writer.
    """

    def __init__(
        self,
        message: str,
        record_type: str,
        offset: int | None = None,
        index: int | None = None,
    ) -> None:
        self.record_type = record_type
        super().__init__(message, offset, index=index)


def why(exc: BaseException, limit: int = 200) -> str:
    """An exception's text for an error message, cut to ``limit`` characters.

    msgspec quotes the bad value in some messages (an unknown tag, say), and a
    hostile log can make that value megabytes long.
    """
    text = str(exc)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters)"
