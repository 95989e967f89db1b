"""Schedules in the local host's database: the rows, and applying decisions.

The decisions are ``flowcore.schedules``'s; this module stores what they need
(``schedules``: the definition and the progress; ``schedule_runs``: the runs
a schedule started that were running when last looked at) and applies their
actions. Every function runs inside the caller's transaction (``Store.tx``):
the start of a slot's run, the action recorded for it and the schedule's new
progress are one commit. With the run id derived from the schedule and the
slot, and the transaction holding SQLite's write lock from its first
statement (``BEGIN IMMEDIATE``), no slot starts twice, whatever the number
of workers and wherever one is killed: a worker that dies before the commit
leaves nothing, and the next one decides the slot again; after the commit,
the progress says the slot is decided (and ``runs.run_id`` being the primary
key refuses a second row for the run in any case).

``schedule_actions`` keeps the newest ``KEEP_ACTIONS`` actions of each
schedule (started, skipped, buffered, cancelled-other, and why).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import attrs
import msgspec

import flowcore
from flowcore import CancelRequested, Flow
from flowcore.schedules import (
    Buffer,
    CancelOther,
    Decision,
    Progress,
    Schedule,
    ScheduleError,
    Skip,
    Start,
    backfill,
    backfill_slots,
    decide,
    iso_ms,
    next_due_ms,
    parse_schedule,
    run_id_for,
    slots_after,
    trigger,
    trigger_run_id,
)

from ._store import Applied, HostError, LocalUnknownSchedule, Store

__all__ = ["KEEP_ACTIONS", "ScheduleRow"]

KEEP_ACTIONS = 100
# Decisions one transaction makes for one schedule before leaving the rest
# to the worker's next round (``Decision.more``).
MAX_DECISIONS_PER_TX = 10

_json = msgspec.json.Encoder()
_decode = msgspec.json.decode


@dataclass
class ScheduleRow:
    name: str
    flow_id: str
    spec_hash: str
    schedule: Schedule  # the definition, with the paused state of the row
    declared: bool
    tools: str | None
    paused: bool
    note: str
    progress: Progress
    triggers: int
    next_ms: int | None
    created_ms: int
    updated_ms: int
    owner: str | None = None  # the principal its runs belong to (None: the admins')


_COLUMNS = (
    "name, flow_id, spec_hash, definition, declared, tools, paused, note, considered_ms,"
    " buffered_ms, remaining, triggers, next_ms, created_ms, updated_ms, owner"
)


def _row(values: tuple[Any, ...]) -> ScheduleRow:
    (name, flow_id, spec_hash, definition, declared, tools, paused, note) = values[:8]
    considered, buffered, remaining, triggers, next_ms, created, updated, owner = values[8:]
    try:
        schedule = parse_schedule(name, _decode(definition), flow_id)
    except (ScheduleError, msgspec.DecodeError) as exc:
        raise HostError(f"schedule {name!r} cannot be read from the database: {exc}") from None
    schedule = attrs.evolve(schedule, paused=bool(paused), note=note)
    return ScheduleRow(
        name,
        flow_id,
        spec_hash,
        schedule,
        bool(declared),
        tools,
        bool(paused),
        note,
        Progress(considered, buffered, remaining),
        triggers,
        next_ms,
        created,
        updated,
        owner,
    )


def get(store: Store, name: str) -> ScheduleRow:
    found = store.conn.execute(
        f"SELECT {_COLUMNS} FROM schedules WHERE name = ?", (name,)
    ).fetchone()
    if found is None:
        raise LocalUnknownSchedule(name, f"no schedule {name!r} in the database")
    return _row(found)


def all_rows(store: Store) -> list[ScheduleRow]:
    return [_row(v) for v in store.conn.execute(f"SELECT {_COLUMNS} FROM schedules ORDER BY name")]


def checked(name: str, definition: Mapping[str, Any], flow_id: str) -> Schedule:
    try:
        return parse_schedule(name, definition, flow_id)
    except ScheduleError as exc:
        raise HostError(str(exc)) from None


def put(
    store: Store,
    schedule: Schedule,
    flow: Flow,
    tools: str | None,
    declared: bool,
    now: int,
    owner: str | None = None,
) -> bool:
    """Add the schedule, or replace the definition of the one with its name.

    ``owner``: the principal the runs it starts belong to (None: no one's, the
    admins'); a replaced schedule takes the owner of its new definition.
    A replaced schedule keeps its progress, buffered slot, runs and actions.
    Its ``paused``/``note`` and ``limit`` follow the new definition only where
    the definition changed them (a schedule paused by hand stays paused when
    the same spec is added again). Returns whether it is new.
    """
    definition = _json.encode(schedule.definition()).decode()
    old = store.conn.execute(
        "SELECT definition, paused, note, remaining FROM schedules WHERE name = ?",
        (schedule.name,),
    ).fetchone()
    if old is None:
        progress = Progress(now, None, schedule.limit)
        store.conn.execute(
            f"INSERT INTO schedules ({_COLUMNS})"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?, ?, ?)",
            (
                schedule.name,
                flow.id,
                flow.spec_hash,
                definition,
                int(declared),
                tools,
                int(schedule.paused),
                schedule.note,
                now,
                None,
                schedule.limit,
                next_due_ms(schedule, progress),
                now,
                now,
                owner,
            ),
        )
        return True
    before = checked(schedule.name, _decode(old[0]), flow.id)
    paused, note, remaining = bool(old[1]), old[2], old[3]
    if (before.paused, before.note) != (schedule.paused, schedule.note):
        paused, note = schedule.paused, schedule.note
    if before.limit != schedule.limit:
        remaining = schedule.limit
    store.conn.execute(
        "UPDATE schedules SET flow_id = ?, spec_hash = ?, definition = ?, declared = ?, tools = ?,"
        " paused = ?, note = ?, remaining = ?, updated_ms = ?, owner = ? WHERE name = ?",
        (
            flow.id,
            flow.spec_hash,
            definition,
            int(declared),
            tools,
            int(paused),
            note,
            remaining,
            now,
            owner,
            schedule.name,
        ),
    )
    _reschedule(store, get(store, schedule.name))
    return False


def _reschedule(store: Store, row: ScheduleRow) -> None:
    store.conn.execute(
        "UPDATE schedules SET next_ms = ? WHERE name = ?",
        (next_due_ms(row.schedule, row.progress), row.name),
    )


def set_paused(store: Store, name: str, paused: bool, note: str, now: int) -> None:
    """Pause, or resume from ``now`` (slots while paused are not looked at again)."""
    row = get(store, name)
    considered = row.progress.considered_ms if paused else max(row.progress.considered_ms, now)
    store.conn.execute(
        "UPDATE schedules SET paused = ?, note = ?, considered_ms = ?, updated_ms = ?"
        " WHERE name = ?",
        (int(paused), note, considered, now, name),
    )
    _reschedule(store, get(store, name))


def delete(store: Store, name: str) -> None:
    get(store, name)
    for table in ("schedule_actions", "schedule_runs", "schedules"):
        store.conn.execute(f"DELETE FROM {table} WHERE name = ?", (name,))


def running(store: Store, name: str) -> list[str]:
    """The schedule's runs still running; forgets those that have settled."""
    rows = store.conn.execute(
        "SELECT s.run_id, r.status FROM schedule_runs s LEFT JOIN runs r USING (run_id)"
        " WHERE s.name = ? ORDER BY s.run_id",
        (name,),
    ).fetchall()
    gone = [(name, run_id) for run_id, status in rows if status != "running"]
    if gone:
        store.conn.executemany("DELETE FROM schedule_runs WHERE name = ? AND run_id = ?", gone)
    return [run_id for run_id, status in rows if status == "running"]


def due(store: Store, now: int) -> list[str]:
    """Schedules with a slot due, or a buffered slot whose runs have all settled."""
    return [
        r[0]
        for r in store.conn.execute(
            "SELECT s.name FROM schedules s WHERE s.paused = 0 AND (s.next_ms <= ?"
            " OR (s.buffered_ms IS NOT NULL AND coalesce(s.remaining, 1) > 0 AND NOT EXISTS"
            " (SELECT 1 FROM schedule_runs x JOIN runs r USING (run_id)"
            " WHERE x.name = s.name AND r.status = 'running')))"
            " ORDER BY s.name",
            (now,),
        )
    ]


def next_due(store: Store) -> int | None:
    found = store.conn.execute("SELECT min(next_ms) FROM schedules WHERE paused = 0").fetchone()
    return None if found is None else found[0]


def _record(
    store: Store,
    name: str,
    now: int,
    action: str,
    slot_ms: int | None,
    run_id: str | None = None,
    why: str | None = None,
    through_ms: int | None = None,
) -> None:
    store.conn.execute(
        "INSERT INTO schedule_actions (name, n, at_ms, action, slot_ms, through_ms, run_id, why)"
        " VALUES (?, (SELECT coalesce(max(n), 0) + 1 FROM schedule_actions WHERE name = ?),"
        " ?, ?, ?, ?, ?, ?)",
        (name, name, now, action, slot_ms, through_ms, run_id, why),
    )


def _prune(store: Store, name: str) -> None:
    store.conn.execute(
        "DELETE FROM schedule_actions WHERE name = ? AND n <= (SELECT max(n) FROM"
        " schedule_actions WHERE name = ?) - ?",
        (name, name, KEEP_ACTIONS),
    )


def _start(
    store: Store, row: ScheduleRow, start: Start, now: int, why: str | None, out: list[Applied]
) -> bool:
    """Start the slot's run (in a savepoint: a refused start is recorded, not raised)."""
    try:
        with store.savepoint():
            flow = store.flow_by_hash(row.spec_hash)
            created, applied = store.start_run(
                flow, start.input, start.run_id, now, row.tools, principal=row.owner
            )
            out.append(applied)
            out.extend(store.take_extra())
    except (HostError, flowcore.InputError, flowcore.FlowcoreError, ValueError) as exc:
        store.take_extra()
        _record(store, row.name, now, "skipped", start.slot_ms, start.run_id, f"not started: {exc}")
        return False
    if not created:
        _record(
            store, row.name, now, "skipped", start.slot_ms, start.run_id, "the run exists already"
        )
        return False
    store.conn.execute(
        "INSERT INTO schedule_runs (name, run_id) VALUES (?, ?) ON CONFLICT DO NOTHING",
        (row.name, start.run_id),
    )
    _record(store, row.name, now, "started", start.slot_ms, start.run_id, why)
    return True


def _apply_actions(
    store: Store,
    row: ScheduleRow,
    actions: tuple[Start | Skip | Buffer | CancelOther, ...],
    now: int,
    out: list[Applied],
    why: str | None = None,
) -> None:
    for action in actions:
        match action:
            case Start():
                _start(store, row, action, now, why, out)
            case Skip(slot_ms=slot, why=reason, through_ms=through):
                _record(
                    store,
                    row.name,
                    now,
                    "skipped",
                    slot,
                    run_id_for(row.name, slot),
                    reason,
                    through,
                )
            case Buffer(slot_ms=slot):
                _record(store, row.name, now, "buffered", slot, run_id_for(row.name, slot), why)
            case CancelOther(slot_ms=slot, run_ids=run_ids):
                for run_id in run_ids:
                    reason = (
                        f"schedule {row.name!r}: slot {iso_ms(slot)} cancels the runs before it"
                    )
                    with store.savepoint():
                        applied = store.apply(
                            run_id, CancelRequested(reason=reason, at_ms=now), now
                        )
                    out.append(applied)
                    out.extend(store.take_extra())
                    _record(store, row.name, now, "cancelled-other", slot, run_id, applied.rejected)


RETRY_MS = 60_000  # a schedule that cannot be decided is looked at again this much later


def postpone(store: Store, name: str, now: int) -> None:
    """Look at the schedule again in ``RETRY_MS`` (its row could not be decided)."""
    store.conn.execute("UPDATE schedules SET next_ms = ? WHERE name = ?", (now + RETRY_MS, name))


def fire(store: Store, name: str, now: int) -> list[Applied]:
    """Decide the schedule's due slots and apply them (in the caller's transaction)."""
    out: list[Applied] = []
    row = get(store, name)
    for _ in range(MAX_DECISIONS_PER_TX):
        decision: Decision = decide(row.schedule, row.progress, now, running(store, name))
        _apply_actions(store, row, decision.actions, now, out)
        progress = decision.progress
        store.conn.execute(
            "UPDATE schedules SET considered_ms = ?, buffered_ms = ?, remaining = ?, next_ms = ?"
            " WHERE name = ?",
            (
                progress.considered_ms,
                progress.buffered_ms,
                progress.remaining,
                next_due_ms(row.schedule, progress),
                name,
            ),
        )
        row.progress = progress
        if not decision.more:
            break
    _prune(store, name)
    return out


def trigger_now(store: Store, name: str, now: int) -> tuple[str, list[Applied]]:
    """Start a run of the schedule now, outside its cadence: ``<name>@trigger-<n>``."""
    row = get(store, name)
    number = row.triggers + 1
    # A schedule deleted and added again counts from 1 again: pass the numbers taken.
    while store.existing(trigger_run_id(name, number)) is not None:
        number += 1
    store.conn.execute("UPDATE schedules SET triggers = ? WHERE name = ?", (number, name))
    action = trigger(row.schedule, number, now)
    if isinstance(action, Skip):
        raise HostError(f"cannot trigger schedule {name!r}: {action.why}")
    flow = store.flow_by_hash(row.spec_hash)
    created, applied = store.start_run(
        flow, action.input, action.run_id, now, row.tools, principal=row.owner
    )
    if not created:
        raise HostError(f"cannot trigger schedule {name!r}: run {action.run_id!r} exists already")
    store.conn.execute(
        "INSERT INTO schedule_runs (name, run_id) VALUES (?, ?) ON CONFLICT DO NOTHING",
        (name, action.run_id),
    )
    _record(store, name, now, "started", now, action.run_id, "triggered")
    _prune(store, name)
    return action.run_id, [applied, *store.take_extra()]


def backfill_range(
    store: Store, name: str, start_ms: int, end_ms: int, now: int
) -> tuple[list[dict[str, Any]], list[Applied]]:
    """Start the slots from ``start_ms`` through ``end_ms`` under the overlap policy."""
    row = get(store, name)
    try:
        slots = backfill_slots(row.schedule, start_ms, end_ms)
    except ValueError as exc:
        raise HostError(f"cannot backfill schedule {name!r}: {exc}") from None
    done = [s for s in slots if store.existing(run_id_for(name, s)) is not None]
    first = store.conn.execute(
        "SELECT coalesce(max(n), 0) FROM schedule_actions WHERE name = ?", (name,)
    ).fetchone()[0]
    actions, buffered = backfill(
        row.schedule, slots, running(store, name), row.progress.buffered_ms, done
    )
    out: list[Applied] = []
    _apply_actions(store, row, actions, now, out, "backfill")
    store.conn.execute("UPDATE schedules SET buffered_ms = ? WHERE name = ?", (buffered, name))
    recorded = actions_of(store, name, after=first)
    _prune(store, name)
    return recorded, out


def actions_of(
    store: Store, name: str, after: int = 0, limit: int = KEEP_ACTIONS
) -> list[dict[str, Any]]:
    """The schedule's recorded actions after number ``after``, oldest first."""
    rows = store.conn.execute(
        "SELECT n, at_ms, action, slot_ms, through_ms, run_id, why FROM schedule_actions"
        " WHERE name = ? AND n > ? ORDER BY n DESC LIMIT ?",
        (name, after, limit),
    ).fetchall()
    return [
        {
            "n": n,
            "atMs": at,
            "action": action,
            "slotMs": slot,
            "throughMs": through,
            "runId": run_id,
            "why": why,
        }
        for n, at, action, slot, through, run_id, why in reversed(rows)
    ]


def describe(store: Store, row: ScheduleRow, count: int = 5) -> dict[str, Any]:
    """The schedule as ``show`` prints it: definition, state, recent actions, next slots."""
    nxt: list[int] = []
    if not row.paused and row.progress.remaining != 0:
        # The slots not decided yet: one already due is among them until a worker takes it.
        nxt = slots_after(row.schedule, row.progress.considered_ms, count)
    return {
        "name": row.name,
        "flowId": row.flow_id,
        "specHash": row.spec_hash,
        "declared": row.declared,
        "tools": row.tools,
        "owner": row.owner,
        "definition": row.schedule.definition() | {"paused": row.paused, "note": row.note},
        "paused": row.paused,
        "note": row.note,
        "remaining": row.progress.remaining,
        "consideredMs": row.progress.considered_ms,
        "bufferedMs": row.progress.buffered_ms,
        "triggers": row.triggers,
        "nextMs": row.next_ms,
        "nextSlotsMs": nxt,
        "running": [
            r[0]
            for r in store.conn.execute(
                "SELECT s.run_id FROM schedule_runs s JOIN runs r USING (run_id)"
                " WHERE s.name = ? AND r.status = 'running' ORDER BY s.run_id",
                (row.name,),
            )
        ],
        "createdMs": row.created_ms,
        "updatedMs": row.updated_ms,
    }
