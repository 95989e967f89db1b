"""The simulation's invariants, each with the name a broken one is printed by.

Checked as it happens (``World._started``, when a handler starts):

- ``two-workers-one-lease``: no two live processes run the same effect at once;
- ``uncertain-call-ran-twice``: an uncertain call (not a scheduled call's,
  which its run re-issues by design) starts at most once;
- ``safe-call-rerun-without-crash``: a readonly or idempotent call starts
  again only when the process that ran it last crashed (or it reported its
  outcome unknown);
- ``operations-fail-with-typed-errors``: an outside operation succeeds or is
  refused with the host's own error (``World._operate``).

Checked every simulated half second (``monitor``) and at the end (``final``):

- ``schedule-slot-started-once``: no slot of a schedule's cadence started two runs;

and at the end, once the faults have stopped and a worker has had time to
finish what can be finished:

- ``runs-settle-or-wait``: every run has settled, or waits only for what can
  still come (a signal, an answer, an update, a timer not yet due), not for
  work or a timer nobody will ever handle;
- ``log-replays``: every run's log replays against its flow with
  ``flowcore.replay``, as ``flowcore replay`` does;
- ``keys-answered-once``: no key is answered more often than it was emitted;
- ``signal-run-delivered-once``: a run's ``signal_run`` reached its target once;
- ``budgets-not-negative``: no effect was emitted with a negative budget;
- ``acknowledged-not-lost``: every start, signal, answer, update, cancel and
  scheduled call a caller was told succeeded is in the database.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import flowcore

from .._host import LocalHost
from .world import World

ANSWERS = frozenset(
    {
        "effect-succeeded",
        "effect-failed",
        "effect-outcome-unknown",
        "timer-fired",
        "subflow-settled",
        "human-answered",
    }
)


def schedule_slots(world: World, client: LocalHost) -> None:
    """No slot of a schedule's cadence started two runs. A run started by hand
    (``trigger_schedule``, outside the cadence) is recorded at its own time,
    which may be a slot's: it is no start of that slot."""
    world.checks += 1
    for name, slot, count in client.store.conn.execute(
        "SELECT name, slot_ms, count(*) FROM schedule_actions WHERE action = 'started'"
        " AND slot_ms IS NOT NULL AND coalesce(why, '') != 'triggered'"
        " GROUP BY name, slot_ms HAVING count(*) > 1"
    ):
        world.breaks("schedule-slot-started-once", f"schedule {name} slot {slot} started {count}")


async def monitor(world: World, client: LocalHost) -> None:
    while True:
        await asyncio.sleep(0.5)
        schedule_slots(world, client)


async def final(world: World, client: LocalHost) -> None:
    """Every end-of-run invariant, over every run in the database."""
    schedule_slots(world, client)
    runs = await client.runs()
    known = {row.run_id for row in runs}
    now = world.now_ms()
    for row in sorted(runs, key=lambda row: row.run_id):
        await _settles_or_waits(world, client, row.run_id, row.status, now)
        records = await client.records(row.run_id)
        _answered_once(world, row.run_id, records)
        _delivered_once(world, row.run_id, records, known)
        _budgets(world, row.run_id, records)
        await _replays(world, client, row.run_id)
    _acknowledged(world, client, known)
    counts = Counter(row.status for row in runs)
    world.note("end: " + ", ".join(f"{n} {status}" for status, n in sorted(counts.items())))


async def _settles_or_waits(
    world: World, client: LocalHost, run_id: str, status: str, now: int
) -> None:
    world.checks += 1
    if status != "running":
        return
    waits = await client.waits(run_id)
    stuck: list[str] = []
    for work in waits.work:
        if work.effect.get("kind") == "run-subflow":
            continue  # its child run is checked in its own right
        stuck.append(f"work {work.key}")
    stuck += [
        f"timer {timer.key} due {timer.due_ms}" for timer in waits.timers if timer.due_ms < now
    ]
    if not (waits.work or waits.timers or waits.signals or waits.questions or waits.scheduled):
        if not await client.updates(run_id):
            stuck.append("nothing at all")
    if stuck:
        rows = [
            f"{row['key']} {row['status']} x{row['dispatches']}"
            + (f" ({row['note']})" if row["note"] else "")
            for row in client.store.outbox_rows(run_id)
            if row["kind"] not in ("ask-human", "await-signal")
        ]
        world.breaks(
            "runs-settle-or-wait",
            f"{run_id} waits for {', '.join(stuck)}; its outbox: {'; '.join(rows) or 'empty'}",
        )


def _answered_once(world: World, run_id: str, records: list[flowcore.Record]) -> None:
    world.checks += 1
    emitted: Counter[str] = Counter()
    answered: Counter[str] = Counter()
    for record in records:
        data: Any = record.data
        if record.type == "effect.emitted":
            key = data.get("idempotencyKey")
            if key:
                emitted[key] += 1
        elif record.type == "event.reported" and data.get("kind") in ANSWERS:
            key = data.get("idempotencyKey")
            if key:
                answered[key] += 1
    for key, count in sorted(answered.items()):
        if count > emitted[key]:
            world.breaks(
                "keys-answered-once", f"{key} answered {count} times, emitted {emitted[key]}"
            )


def _delivered_once(
    world: World, run_id: str, records: list[flowcore.Record], runs: set[str]
) -> None:
    """A child's ``signal_run`` (its payload: the child's run id) reached the run once."""
    world.checks += 1
    senders: Counter[str] = Counter()
    for record in records:
        data: Any = record.data
        if record.type == "event.reported" and data.get("kind") == "signal-received":
            payload = data.get("payload")
            if isinstance(payload, str) and payload in runs:
                senders[payload] += 1
    for sender, count in sorted(senders.items()):
        if count > 1:
            world.breaks("signal-run-delivered-once", f"{sender} signalled {run_id} {count} times")


def _budgets(world: World, run_id: str, records: list[flowcore.Record]) -> None:
    world.checks += 1
    for record in records:
        data: Any = record.data
        if record.type != "effect.emitted":
            continue
        budget = data.get("budgetRemaining") or {}
        low = {
            name: value for name, value in budget.items() if isinstance(value, int) and value < 0
        }
        if low:
            world.breaks("budgets-not-negative", f"{data.get('idempotencyKey')} emitted with {low}")


async def _replays(world: World, client: LocalHost, run_id: str) -> None:
    world.checks += 1
    data = await client.export(run_id)
    flow = await client.flow(run_id)
    try:
        report = flowcore.replay(data, flow, raise_on_divergence=False)
    except flowcore.FlowcoreError as exc:
        world.breaks("log-replays", f"{run_id}: {type(exc).__name__}: {exc}")
        return
    if not report.ok:
        world.breaks("log-replays", f"{run_id}: {report.divergence}")


def _acknowledged(world: World, client: LocalHost, known: set[str]) -> None:
    conn = client.store.conn
    for ack in world.acks:
        world.checks += 1
        if ack.run_id not in known:
            world.breaks("acknowledged-not-lost", f"{ack.what} of {ack.run_id}: no such run")
            continue
        if ack.what in ("start", "cancel", "scheduled"):
            lost = (
                ack.what == "scheduled"
                and not conn.execute(
                    "SELECT 1 FROM scheduled_calls WHERE run_id = ? AND id = ?",
                    (ack.run_id, ack.detail),
                ).fetchone()
            )
        else:
            kinds = {
                "signal": "signal-received",
                "answer": "human-answered",
                "update": "update-requested",
            }
            lost = not _logged(client, ack.run_id, kinds[ack.what], ack)
        if lost:
            world.breaks("acknowledged-not-lost", f"{ack.what} {ack.detail} of {ack.run_id}")


def _logged(client: LocalHost, run_id: str, kind: str, ack: Any) -> bool:
    for (data,) in client.store.conn.execute(
        "SELECT data FROM log WHERE run_id = ? AND type = 'event.reported'", (run_id,)
    ):
        event: dict[str, Any] = flowcore_json(data)
        if event.get("kind") != kind:
            continue
        if kind == "signal-received" and event.get("payload") == {"serial": int(ack.detail)}:
            return True
        if kind == "human-answered" and event.get("idempotencyKey") == ack.detail:
            return True
        if kind == "update-requested" and event.get("updateId") == ack.detail:
            return True
    return False


def flowcore_json(data: Any) -> dict[str, Any]:
    import json

    value = json.loads(data)
    return value if isinstance(value, dict) else {}
