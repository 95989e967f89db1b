"""The event log: records, their byte formats, and a recorder for hosts.

A log is a sequence of envelopes ``{"type", "index", "runId", "at", "data"}``,
one per line as NDJSON, or as MessagePack with each record prefixed by its
length (a 4-byte unsigned big-endian integer) so that a torn tail can be told
from corruption. ``index`` increases by one within a run, from 0.

Record types:

``run.started``     data: flowId, version, specHash, input, budget, depth
``event.reported``  data: the event, as wire JSON
``event.rejected``  data: {event, reason} - optional; replay checks it is still rejected
``effect.emitted``  data: the effect, as wire JSON
``run.settled``     data: status, output, error, exhausted
``effect.redispatched``  data: idempotencyKey, recovery, worker - work still pending run
                    again with the same key after its worker was lost; changes no state
``scheduled.changed``  data: id, tool, status, attempts, dueMs, error? - a scheduled call
                    the decision changed (created, issued, finished, cancelled); never
                    its input

``effect.redispatched`` stands between decisions, like ``event.rejected``.
Within one decision the order is fixed: ``event.reported`` (or
``run.started``) first, then one ``scheduled.changed`` per scheduled call
the decision changed (in order of first change), then one
``effect.emitted`` per effect in emission order; when the run settles, the
``settled`` effect is followed by ``run.settled``.

Unknown fields are ignored by readers, so that new fields never break old
logs; their bytes are still checked (an NDJSON line as UTF-8, a MessagePack
record that is not exactly as flowcore frames it by a full decode), so that no
damaged byte goes unnoticed. Unknown record types are read like any other
record; replay refuses them unless told to skip them (``UnknownRecordType``,
``specs/log.md`` §6). A torn last record (a crash mid-write: a record cut
short) is reported as a ``TornTail``; an unreadable record before it, a last
record that cannot be a record cut short, or a record nested too deeply to
decode is ``LogCorrupt``: hostile bytes never raise anything but flowcore's
own errors, and error messages quote at most a short prefix of what they
could not read.

``Record`` holds decoded data; ``RawRecord`` leaves ``data`` as bytes for
replay's hot path, read in chunks by ``RawReader``. The typed records
(``RunStartedRecord`` ...) describe the format and generate
``specs/schema/records.json``.

The record types are in ``record_types``, the byte formats in ``formats`` and
``Recorder`` in ``recorder``; this module gathers their names. They turn bytes
into records and back; reading and writing files is the caller's business.
They must never do I/O. ``specs/log.md`` is the reference for other languages.
"""

from __future__ import annotations

from .formats import (
    RawLog,
    RawReader,
    decode_log,
    detect_format,
    encode_record,
    encode_records,
    iter_records,
    read_raw_log,
)
from .record_types import (
    EFFECT_EMITTED,
    EFFECT_REDISPATCHED,
    EVENT_REJECTED,
    EVENT_REPORTED,
    RUN_SETTLED,
    RUN_STARTED,
    SCHEDULED_CHANGED,
    EffectEmittedRecord,
    EffectRedispatchedData,
    EffectRedispatchedRecord,
    EventRejectedData,
    EventRejectedRecord,
    EventReportedRecord,
    LogCorrupt,
    LogFormat,
    LogRead,
    RawRecord,
    Record,
    RunSettledData,
    RunSettledRecord,
    RunStartedData,
    RunStartedRecord,
    ScheduledChangedData,
    ScheduledChangedRecord,
    StartBudget,
    TypedRecord,
    UnknownRecordType,
    scheduled_changed_data,
)
from .recorder import (
    Recorder,
    budget_from_wire,
    budget_to_wire,
    carried_to_wire,
    settled_record_data,
)
from .report import ForkedFrom, TornTail

__all__ = [
    "EFFECT_EMITTED",
    "EFFECT_REDISPATCHED",
    "EVENT_REJECTED",
    "EVENT_REPORTED",
    "RUN_SETTLED",
    "RUN_STARTED",
    "LogCorrupt",
    "LogFormat",
    "LogRead",
    "RawRecord",
    "Record",
    "Recorder",
    "EffectEmittedRecord",
    "EffectRedispatchedData",
    "EffectRedispatchedRecord",
    "EventRejectedData",
    "EventRejectedRecord",
    "EventReportedRecord",
    "ForkedFrom",
    "RunSettledData",
    "RunSettledRecord",
    "RunStartedData",
    "RunStartedRecord",
    "SCHEDULED_CHANGED",
    "ScheduledChangedData",
    "ScheduledChangedRecord",
    "StartBudget",
    "TornTail",
    "TypedRecord",
    "UnknownRecordType",
    "budget_from_wire",
    "budget_to_wire",
    "carried_to_wire",
    "decode_log",
    "detect_format",
    "encode_record",
    "encode_records",
    "RawLog",
    "RawReader",
    "read_raw_log",
    "iter_records",
    "scheduled_changed_data",
    "settled_record_data",
]
