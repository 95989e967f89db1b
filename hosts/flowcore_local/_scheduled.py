"""The local host's table of scheduled calls, and how long finished ones stay listed.

``scheduled_calls`` is a projection of the runs' states (``flowcore.scheduled_calls``):
each event's transaction writes the rows of the scheduled calls its decision
changed (the decision's journal names them), so the table is never behind
the runs and one query lists the calls of every run. The run's state and
log remain the truth: the table is what ``flowcore scheduled list`` reads,
and what retention trims.

Retention (``ScheduledRetention``), applied by the worker on its own clock: completed
and cancelled calls stay listed for 30 days, failed (and uncertain) ones for
24 hours, and a run keeps at most its newest 1,000 finished calls. Pending and
running calls are never trimmed.

Everything here runs on the host's database thread, inside the caller's
transaction.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

import flowcore
from flowcore import State

from ._db import Connection

__all__ = [
    "FINISHED",
    "STATUSES",
    "UPSERT",
    "ScheduledRetention",
    "ScheduledRow",
    "changed",
    "list_scheduled",
    "project_all",
    "trim",
]

DAY_MS = 24 * 3600 * 1000
STATUSES = ("pending", "running", "completed", "failed", "cancelled", "uncertain")
FINISHED = ("completed", "failed", "cancelled", "uncertain")
_encode = msgspec.json.Encoder().encode


class ScheduledRetention(msgspec.Struct, frozen=True, kw_only=True):
    """How long finished scheduled calls stay listed (``None``: for ever)."""

    completed_ms: int | None = 30 * DAY_MS  # completed and cancelled
    failed_ms: int | None = DAY_MS  # failed and uncertain
    per_run: int | None = 1000  # the newest finished calls a run keeps listed

    def __post_init__(self) -> None:
        for name in ("completed_ms", "failed_ms", "per_run"):
            value = getattr(self, name)
            if value is not None and (type(value) is not int or value < 0):
                raise ValueError(f"retention {name} must be an integer >= 0 or None, not {value!r}")


class ScheduledRow(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One scheduled call as ``flowcore scheduled list`` shows it."""

    id: str
    run_id: str
    tool: str
    input: Any
    status: str
    created_ms: int
    due_ms: int
    attempts: int
    finished_ms: int | None
    error: flowcore.ErrorInfo | None
    outside: bool
    # A recurring call (``due_ms`` is its next firing while pending) and replays.
    every_ms: int | None = None
    cron: str | None = None
    timezone: str | None = None
    count: int | None = None
    until_ms: int | None = None
    fires: int = 0
    replays: int = 0


class _Recurrence(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    """The ``recurrence`` column: what a recurring or replayed call adds to its row."""

    every_ms: int | None = None
    cron: str | None = None
    timezone: str | None = None
    count: int | None = None
    until_ms: int | None = None
    fires: int = 0
    replays: int = 0


_RECURRENCE = tuple(_Recurrence.__struct_fields__)

UPSERT = (
    "INSERT INTO scheduled_calls (run_id, id, tool, input, status, created_ms,"
    " due_ms, attempts, finished_ms, error, outside, recurrence)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (run_id, id) DO UPDATE SET tool = excluded.tool, input = excluded.input,"
    " status = excluded.status, created_ms = excluded.created_ms, due_ms = excluded.due_ms,"
    " attempts = excluded.attempts, finished_ms = excluded.finished_ms, error = excluded.error,"
    " outside = excluded.outside, recurrence = excluded.recurrence"
)


_decode_recurrence = msgspec.json.Decoder(_Recurrence).decode


def _recurrence(call: flowcore.ScheduledCall) -> str | None:
    fields = {name: getattr(call, name) for name in _RECURRENCE}
    if not any(value for value in fields.values()):
        return None
    return _encode(_Recurrence(**fields)).decode()


def _rows(state: State, ids: Iterable[str] | None) -> list[tuple[Any, ...]]:
    return [
        (
            call.run_id,
            call.id,
            call.tool,
            _encode(call.input).decode(),
            call.status,
            call.created_ms,
            call.due_ms,
            call.attempts,
            call.finished_ms,
            None if call.error is None else _encode(call.error).decode(),
            int(call.outside),
            _recurrence(call),
        )
        for call in flowcore.scheduled_calls(state, ids)
    ]


def changed(state: State) -> list[tuple[Any, ...]]:
    """The rows (for ``UPSERT``) of the scheduled calls the last transition changed."""
    sids = state.journal.scheduled
    return _rows(state, sids) if sids else []


def project_all(conn: Connection, run_id: str, state: State) -> None:
    """Write every scheduled call of the run again (a rewound run)."""
    conn.execute("DELETE FROM scheduled_calls WHERE run_id = ?", (run_id,))
    conn.executemany(UPSERT, _rows(state, None))


def list_scheduled(
    conn: Connection,
    run_id: str | None = None,
    tool: str | None = None,
    status: str | None = None,
) -> list[ScheduledRow]:
    """The listed scheduled calls, oldest due first, filtered by run, tool and status."""
    where: list[str] = []
    args: list[Any] = []
    for column, value in (("run_id", run_id), ("tool", tool), ("status", status)):
        if value is not None:
            where.append(f"{column} = ?")
            args.append(value)
    query = (
        "SELECT run_id, id, tool, input, status, created_ms, due_ms, attempts, finished_ms,"
        " error, outside, recurrence FROM scheduled_calls"
    )
    if where:
        query += " WHERE " + " AND ".join(where)
    query += " ORDER BY due_ms, created_ms, run_id, id"
    out = []
    for (
        run,
        sid,
        name,
        data,
        state,
        created,
        due,
        attempts,
        finished,
        error,
        outside,
        recurrence,
    ) in conn.execute(query, args):
        recur = _Recurrence() if recurrence is None else _decode_recurrence(recurrence)
        out.append(
            ScheduledRow(
                id=sid,
                run_id=run,
                tool=name,
                input=msgspec.json.decode(data),
                status=state,
                created_ms=created,
                due_ms=due,
                attempts=attempts,
                finished_ms=finished,
                error=None
                if error is None
                else msgspec.json.decode(error, type=flowcore.ErrorInfo),
                outside=bool(outside),
                **{name: getattr(recur, name) for name in _RECURRENCE},
            )
        )
    return out


def trim(conn: Connection, now: int, retention: ScheduledRetention) -> int:
    """Drop the finished calls retention no longer keeps listed; how many were dropped."""
    dropped = 0
    for statuses, keep in (
        (("completed", "cancelled"), retention.completed_ms),
        (("failed", "uncertain"), retention.failed_ms),
    ):
        if keep is None:
            continue
        marks = ",".join("?" * len(statuses))
        cur = conn.execute(
            f"DELETE FROM scheduled_calls WHERE status IN ({marks}) AND finished_ms < ?",
            (*statuses, now - keep),
        )
        dropped += cur.rowcount
    if retention.per_run is not None:
        marks = ",".join("?" * len(FINISHED))
        cur = conn.execute(
            "DELETE FROM scheduled_calls WHERE (run_id, id) IN (SELECT run_id, id FROM ("
            " SELECT run_id, id, ROW_NUMBER() OVER (PARTITION BY run_id"
            " ORDER BY finished_ms DESC, id DESC) AS n"
            f" FROM scheduled_calls WHERE status IN ({marks})) AS ranked WHERE n > ?)",
            (*FINISHED, retention.per_run),
        )
        dropped += cur.rowcount
    return dropped
