"""Persistence of runs in the local host's SQLite database.

Everything here is synchronous and runs on the host's single database thread.
The unit of work is a transaction (``Store.tx``); inside one, ``start_run``
and ``apply`` do the whole job for one run and one event: append the log
records, store the hot snapshot and the new result and report rows, insert the
outbox rows of the new effects, close the rows of what the event answered and
of what ``flowcore.plan`` stops (cancelling the child runs among them) and,
when a child run settles, report that to its parent. A crash before the
commit leaves nothing behind; after it, everything.

A run's state is cached in memory between events (keyed by the index of its
next log record, so a write by another process is noticed and the state
reloaded).

Besides events, two things write a run's rows here: a claim of work that was
recovered from a lost worker appends an ``effect.redispatched`` record in the
claiming transaction (``claim_ready_work``), and a resume rewinds a failed run
to just before the event that failed it (``rewind``; ``_resume`` decides
whether and where).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import msgspec

import flowcore
from flowcore import (
    AskHuman,
    AwaitSignal,
    CallTool,
    CancelRequested,
    ContinueAsNew,
    Effect,
    Event,
    EventRejected,
    Flow,
    Plan,
    RunAgent,
    RunSubflow,
    RunTeam,
    Settled,
    SignalReceived,
    SignalRun,
    Sleep,
    State,
    SubflowSettled,
    persist,
)
from flowcore_handlers import ToolLimit, tools_module_name
from flowcore_handlers._limits import DEFAULT_PRIORITY

from . import _scheduled as scheduled

__all__ = ["Applied", "Claimed", "Conflict", "HostError", "RunRow", "Store"]

WORK = ("call-tool", "run-agent", "run-team")
# The run ``?`` and every run below it (its child runs, theirs, ...).
_TREE = (
    "IN (WITH RECURSIVE tree(id) AS (SELECT ? UNION ALL SELECT r.run_id FROM runs r"
    " JOIN tree ON r.parent_run = tree.id) SELECT id FROM tree)"
)

_json = msgspec.json.Encoder()
_json_decode = msgspec.json.decode
_effect_dec: msgspec.json.Decoder[Effect] = msgspec.json.Decoder(Effect)


class HostError(Exception):
    """A request the host cannot carry out (unknown run, conflicting start, ...)."""


class NoSignalWait(HostError):
    """A keyed signal sent without a run id that no running run waits for."""


class NothingToCancel(HostError):
    """A cancel that would change nothing (the run has settled, or compensates
    already): refused, and nothing is written."""


class Conflict(Exception):
    """A group commit that cannot be written as it was planned (``Store.planned``):
    another connection changed a run the plan read, or the plan had to read rows
    it had itself buffered. Nothing was written; apply the events again in ``tx``."""


@dataclass
class RunRow:
    run_id: str
    flow_id: str
    spec_hash: str
    parent_run: str | None
    parent_key: str | None
    depth: int
    status: str
    input: Any
    output: Any
    error: Any
    tools: str | None
    created_ms: int
    updated_ms: int
    next_index: int
    principal: str | None = None  # who started it through ``flowcore serve`` (children inherit)
    started_by: str | None = None  # the run whose detached run_subflow started this root run
    priority: int = DEFAULT_PRIORITY  # 1 first, 5 last (children inherit)
    dedup_key: str | None = None  # the key it was started with (``LocalHost.start``)


# A run's checkpoint (its hot state and growing rows, ``runs.saved_index``) is
# written once the log holds this many records after the last one: the events
# in between are replayed from the log when the run is loaded (``Store.load``).
CHECKPOINT_RECORDS = 64
# How long a transaction waits for the write lock (the connection's busy_timeout).
BUSY_S = 30.0


@dataclass
class _Unsaved:
    """What the transitions since a run's checkpoint wrote to the growing parts."""

    results: dict[str, Any] = field(default_factory=dict)  # record, or None: deleted
    report: list[persist.ReportRow] = field(default_factory=list)
    resolved: dict[str, persist.Resolution] = field(default_factory=dict)

    def take(self, state: State) -> None:
        changes = persist.state_changes(state)
        self.results.update(changes.results)
        self.report.extend(changes.report)
        self.resolved.update(changes.resolved)


@dataclass
class _Cached:
    next_index: int
    state: State
    tools: str | None
    report_rows: int  # report rows in the table (the checkpoint's)
    version: int  # runs.version this state was stored with
    saved_index: int  # runs.saved_index: the checkpoint's next index
    unsaved: _Unsaved = field(default_factory=_Unsaved)


@dataclass
class Claimed:
    """A work effect this worker recorded as dispatched and must now run."""

    run_id: str
    key: str
    effect: CallTool | RunAgent | RunTeam
    tools: str | None


@dataclass
class Applied:
    """What one start or event did: its plan, and the new work this worker now owns."""

    run_id: str
    plan: Plan = field(default_factory=Plan)
    claimed: list[Claimed] = field(default_factory=list)
    rejected: str | None = None
    scheduled: flowcore.ScheduledAnswer | None = None  # a scheduled-call event's answer
    records: list[flowcore.Record] = field(default_factory=list)  # the log records written

    @property
    def settled(self) -> Settled | None:
        return self.plan.settled


def _answered(event: Event, before: State, after: State) -> tuple[str, ...]:
    """The keys ``event`` answered itself (``flowcore.plan`` lists only the others)."""
    key = getattr(event, "idempotency_key", None)
    if key is not None:
        return (key,)
    if not isinstance(event, SignalReceived):
        return ()
    # A signal is taken by a wait for it, which is then no longer open.
    still = {wait.key for wait in flowcore.waiting_for(after).signals}
    return tuple(wait.key for wait in flowcore.waiting_for(before).signals if wait.key not in still)


def _dumps(value: Any) -> str:
    return _json.encode(value).decode()


_NUMERIC = "kind IN ('integer', 'number')"


def _metadata_condition(f: flowcore.MetadataFilter) -> tuple[str, list[Any]]:
    """SQL (on ``runs``) for one metadata filter, and its arguments.

    The rows of one field are found through ``run_metadata_by_value``; the
    type each run's flow declares decides how the filter's text compares.
    """
    number, boolean = f.number, f.boolean
    if f.op in ("=", "!="):
        op = f.op
        parts = ["(kind = 'string' AND value " + op + " ?)"]
        args: list[Any] = [f.text]
        if number is not None:
            parts.append(f"({_NUMERIC} AND value {op} ?)")
            args.append(number)
        elif op == "!=":
            parts.append(f"({_NUMERIC})")  # no number equals the text
        if boolean is not None:
            parts.append(f"(kind = 'boolean' AND value {op} ?)")
            args.append(int(boolean))
        elif op == "!=":
            parts.append("(kind = 'boolean')")
        cond = " OR ".join(parts)
    else:
        cond = f"{_NUMERIC} AND value {f.op} ?"
        args = [number]
    sql = f"run_id IN (SELECT run_id FROM run_metadata WHERE name = ? AND ({cond}))"
    return sql, [f.field, *args]


def _rebuild(
    flow: Flow, run_id: str, records: list[flowcore.Record], cut: int
) -> tuple[State, dict[str, Any], list[persist.ReportRow], dict[str, persist.Resolution]]:
    """The state after the records before index ``cut``, and every row it stores.

    ``start`` with what ``run.started`` recorded, then ``advance`` with each
    reported event, collecting what each transition wrote
    (``persist.state_changes``), as the run's own transactions did.
    """
    first = records[0]
    data = first.data
    budget = data.get("budget")
    continued = None
    if data.get("incarnation", 1) != 1:  # the log begins at a later incarnation
        continued = msgspec.convert(
            {
                "kind": "continue-as-new",
                "input": data.get("input"),
                "incarnation": data["incarnation"],
                "idempotencyKey": "",
                "signals": data.get("signals", []),
                "scheduled": data.get("scheduled", []),
                "idleIncarnations": data.get("idleIncarnations", 0),
            },
            ContinueAsNew,
        )
    decision = flowcore.start(
        flow,
        data.get("input"),
        run_id=run_id,
        now_ms=first.at,
        budget=flowcore.budget_from_wire(budget),
        depth=data.get("depth", 0),
        semantics=data.get("semantics", 1),
        metadata=data.get("metadata"),
        continued=continued,
    )
    rows = _Unsaved()
    state = decision.state
    rows.take(state)
    for record in records[1:]:
        if record.index >= cut:
            break
        if record.type == "event.reported":
            state = flowcore.advance(state, flowcore.event_from_wire(record.data)).state
            rows.take(state)
        elif record.type == "run.started" and state.tree.continued is not None:
            # The next incarnation: its rows are all the run stores.
            effect, depth = state.tree.continued, state.run.depth
            state = flowcore.continue_run(flow, effect, run_id, record.at, depth=depth).state
            rows = _Unsaved()
            rows.take(state)
    return state, rows.results, rows.report, rows.resolved


class Store:
    def __init__(
        self,
        conn: sqlite3.Connection,
        worker_id: str,
        lease_ms: int = 10_000,
    ) -> None:
        self.conn = conn
        self.worker_id = worker_id
        self.lease_ms = lease_ms
        self._flows: dict[str, Flow] = {}
        self._parsed: dict[str, Flow] = {}  # spec text -> flow, for this process
        self._data_version = -1
        self._cache: dict[str, _Cached] = {}
        # Cached runs checked against their ``runs.version`` since another
        # connection last committed (see _drop_stale and load).
        self._verified: set[str] = set()
        self._touched: set[str] = set()
        self._pending_applied: list[Applied] = []
        # Incarnations to start in this transaction, while _continue_all runs
        # (None when it does not): see _persist.
        self._continues: list[tuple[str, _Cached, ContinueAsNew, int]] | None = None
        # Rows written by the events of one transaction, sent to SQLite in one
        # statement per table when it commits (see _flush): a group commit of
        # many events then costs a few statements, not a few per event.
        self._log_rows: list[tuple[str, int, str, int, str]] = []
        self._result_rows: dict[tuple[str, str], bytes | None] = {}  # None: delete
        self._report_rows: list[tuple[str, int, bytes]] = []
        self._resolved_rows: dict[tuple[str, str], bytes] = {}
        # A running run's new row: (updated_ms, next_index, version, hot state
        # or None when it is not a checkpoint, saved_index).
        self._run_rows: dict[str, tuple[int, int, int, bytes | None, int]] = {}
        # Other writes of a planned group commit, in order, with their
        # parameters: consecutive ones of one statement run as one executemany.
        self._statements: list[tuple[str, list[tuple[Any, ...]]]] = []
        # While planning (``planned``): the runs.version of each run the plan
        # read (None: no such run), checked under the write lock.
        self._planning = False
        self._read: dict[str, int | None] = {}
        self._doubted: set[str] = set()  # read from the cache without being verified
        # True while this process runs a worker: new work is then recorded as
        # dispatched to it in the transaction that creates it, and run at once.
        self.dispatching = False
        # The run a worker limits itself to (with its child runs), or None.
        self._only: str | None = None
        # With several workers on the database: how many running runs this
        # one keeps dispatching to itself (None: all of them), and those it
        # keeps (see keeps).
        self.share: int | None = None
        self._owned: set[str] = set()
        self._in_scope: set[str] = set()
        # Limits across runs (``LocalHost(tool_limits=...)``): calls of these
        # tools are left ``ready`` and claimed within the limits (claim_ready_work).
        self.tool_limits: dict[str, ToolLimit] = {}

    # --- which runs a worker works on --------------------------------------------------

    @property
    def only(self) -> str | None:
        return self._only

    @only.setter
    def only(self, run_id: str | None) -> None:
        self._only = run_id
        self._in_scope = set()

    def _scope(self, column: str = "run_id") -> tuple[str, tuple[Any, ...]]:
        """An ``AND ...`` clause keeping the worker's runs, and its parameters."""
        if self._only is None:
            return "", ()
        return f" AND {column} {_TREE}", (self._only,)

    def in_scope(self, run_id: str) -> bool:
        """Whether the worker works on ``run_id``: always, unless ``only`` is set."""
        only = self._only
        if only is None or run_id == only or run_id in self._in_scope:
            return True
        chain: list[str] = []
        current: str | None = run_id
        while current is not None and len(chain) < 10_000:
            if current == only or current in self._in_scope:
                self._in_scope.update(chain)
                return True
            chain.append(current)
            row = self.conn.execute(
                "SELECT parent_run FROM runs WHERE run_id = ?", (current,)
            ).fetchone()
            current = None if row is None else row[0]
        return False

    # --- transactions ----------------------------------------------------------------

    def _drop_stale(self) -> None:
        """Doubt every cached state if another connection committed since we looked.

        ``PRAGMA data_version`` changes exactly when another connection commits
        to the file (our own commits leave it alone). It says nothing about
        *which* run was written: each cached run is checked against its
        ``runs.version`` when it is next loaded.
        """
        version = self.conn.execute("PRAGMA data_version").fetchone()[0]
        if version != self._data_version:
            self._verified = set()
            self._data_version = version

    def _begin(self) -> None:
        """``BEGIN IMMEDIATE``, waiting for the write lock in steps from 0.1 ms.

        SQLite's own busy handler sleeps 1 ms, then 2, 5, 10, ... while the
        lock is usually held for less than a millisecond (one group commit of
        another worker): it would make two workers slower than one.
        """
        conn = self.conn
        conn.execute("PRAGMA busy_timeout = 0")
        try:
            delay, waited = 0.0001, 0.0
            while True:
                try:
                    conn.execute("BEGIN IMMEDIATE")
                    return
                except sqlite3.OperationalError as exc:
                    if exc.sqlite_errorcode != sqlite3.SQLITE_BUSY or waited > BUSY_S:
                        raise
                time.sleep(delay)
                waited += delay
                delay = min(delay * 2, 0.002)
        finally:
            conn.execute(f"PRAGMA busy_timeout = {BUSY_S * 1000:.0f}")

    @contextmanager
    def tx(self) -> Iterator[None]:
        """One write transaction. On failure, cached states it touched are dropped."""
        self._begin()
        # Holding the write lock, nobody else can commit until we do: one
        # look at data_version serves every load in this transaction.
        self._drop_stale()
        self._touched = set()
        try:
            yield
            self._flush()
            self.conn.execute("COMMIT")
        except BaseException:
            self._discard()
            self.conn.execute("ROLLBACK")
            for run_id in self._touched:
                self._cache.pop(run_id, None)
            raise

    @contextmanager
    def planned(self) -> Iterator[None]:
        """One group commit, planned outside the write lock and written under it.

        The events are applied (states advanced, rows computed and buffered)
        without the lock, while other processes may commit. Then, holding the
        write lock, every run the plan read must still have the
        ``runs.version`` it read (or still not exist) — unless every one was
        known current when the plan began and no other connection committed
        since (``PRAGMA data_version``) — and the buffered rows are written
        and committed. Otherwise
        ``Conflict`` is raised with nothing written: apply the events again in
        ``tx``. Two workers thus hold the lock only to write, not to apply.
        """
        conn = self.conn
        self._drop_stale()
        began = self._data_version
        self._touched = set()
        self._read = {}
        self._doubted = set()
        self._planning = True
        try:
            yield
            self._planning = False
            self._begin()
            changed = conn.execute("PRAGMA data_version").fetchone()[0] != began
            if changed or self._doubted:
                self._validate()
            self._flush()
            conn.execute("COMMIT")
        except BaseException:
            self._planning = False
            self._discard()
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            for run_id in self._touched:
                self._cache.pop(run_id, None)
            raise

    def _validate(self) -> None:
        """Raise ``Conflict`` unless every run the plan read has the version it read."""
        read = list(self._read.items())
        for start in range(0, len(read), 500):
            chunk = read[start : start + 500]
            marks = ",".join("?" * len(chunk))
            now = dict(
                self.conn.execute(
                    f"SELECT run_id, version FROM runs WHERE run_id IN ({marks})",
                    [run_id for run_id, _ in chunk],
                ).fetchall()
            )
            for run_id, version in chunk:
                if now.get(run_id) != version:
                    raise Conflict(f"run {run_id!r} changed while its events were applied")

    def _write(self, sql: str, params: tuple[Any, ...]) -> None:
        """Execute a write now, or buffer it in order while planning."""
        self._write_many(sql, [params])

    def _write_many(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        if not rows:
            return
        if not self._planning:
            self.conn.executemany(sql, rows)
        elif self._statements and self._statements[-1][0] == sql:
            self._statements[-1][1].extend(rows)
        else:
            self._statements.append((sql, rows))

    def _before_read(self, run_id: str) -> None:
        """Make the buffered rows visible before reading ``run_id``'s rows.

        While planning nothing may be written, so a run whose rows the plan
        buffered cannot be read back: the plan gives way to ``tx``.
        """
        if not self._planning:
            self._flush()
        elif run_id in self._touched:
            raise Conflict(f"run {run_id!r} must be read back in the transaction that wrote it")

    def _flush(self) -> None:
        """Write the buffered rows (in the open transaction)."""
        conn = self.conn
        for sql, rows in self._statements:
            conn.executemany(sql, rows)
        if self._log_rows:
            conn.executemany(
                "INSERT INTO log (run_id, idx, type, at, data) VALUES (?, ?, ?, ?, ?)",
                self._log_rows,
            )
        if self._result_rows:
            items = self._result_rows.items()
            conn.executemany(
                "INSERT OR REPLACE INTO results (run_id, name, record) VALUES (?, ?, ?)",
                [(run_id, name, rec) for (run_id, name), rec in items if rec is not None],
            )
            conn.executemany(
                "DELETE FROM results WHERE run_id = ? AND name = ?",
                [ident for ident, rec in items if rec is None],
            )
        if self._report_rows:
            conn.executemany(
                "INSERT INTO report (run_id, n, row) VALUES (?, ?, ?)", self._report_rows
            )
        if self._resolved_rows:
            conn.executemany(
                "INSERT OR REPLACE INTO resolved (run_id, key, how) VALUES (?, ?, ?)",
                [(*ident, how) for ident, how in self._resolved_rows.items()],
            )
        if self._run_rows:
            conn.executemany(
                "UPDATE runs SET updated_ms = ?, next_index = ?, version = ?,"
                " state = COALESCE(?, state), saved_index = ? WHERE run_id = ?",
                [(*row, run_id) for run_id, row in self._run_rows.items()],
            )
        self._discard()

    def _discard(self) -> None:
        self._statements = []
        self._log_rows = []
        self._result_rows = {}
        self._report_rows = []
        self._resolved_rows = {}
        self._run_rows = {}

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        touched = set(self._touched)
        self._touched = set()
        self._flush()  # what came before the savepoint survives a rollback to it
        self.conn.execute("SAVEPOINT item")
        try:
            yield
            self._flush()
            self.conn.execute("RELEASE item")
        except BaseException:
            self._discard()
            self.conn.execute("ROLLBACK TO item")
            self.conn.execute("RELEASE item")
            for run_id in self._touched:
                self._cache.pop(run_id, None)
            raise
        finally:
            self._touched |= touched

    # --- flows ------------------------------------------------------------------------

    def register_flow(self, spec: str, source: str, now: int) -> Flow:
        flow = self._parsed.get(spec)
        if flow is None:
            flow = flowcore.parse_flow(spec, source_name=source)
            self._parsed[spec] = flow
        self.conn.execute(
            "INSERT OR IGNORE INTO flows (spec_hash, flow_id, version, source, spec, added_ms)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (flow.spec_hash, flow.id, flow.version, source, spec, now),
        )
        self._flows[flow.spec_hash] = flow
        return flow

    def flow_by_hash(self, spec_hash: str) -> Flow:
        flow = self._flows.get(spec_hash)
        if flow is None:
            row = self.conn.execute(
                "SELECT spec, source FROM flows WHERE spec_hash = ?", (spec_hash,)
            ).fetchone()
            if row is None:
                raise HostError(f"no flow spec with hash {spec_hash[:12]} in the database")
            flow = flowcore.parse_flow(row[0], source_name=row[1])
            self._flows[spec_hash] = flow
        return flow

    def flow_by_id(self, flow_id: str) -> Flow | None:
        row = self.conn.execute(
            "SELECT spec_hash FROM flows WHERE flow_id = ? ORDER BY added_ms DESC, version DESC"
            " LIMIT 1",
            (flow_id,),
        ).fetchone()
        return None if row is None else self.flow_by_hash(row[0])

    # --- runs -------------------------------------------------------------------------

    def run_row(self, run_id: str) -> RunRow:
        row = self.conn.execute(
            "SELECT run_id, flow_id, spec_hash, parent_run, parent_key, depth, status, input,"
            " output, error, tools, created_ms, updated_ms, next_index, principal, started_by,"
            " priority, dedup_key FROM runs WHERE run_id = ?",
            (run_id,),
        ).fetchone()
        if row is None:
            raise HostError(f"no run {run_id!r} in the database")
        values = list(row)
        for i in (7, 8, 9):
            values[i] = None if values[i] is None else _json_decode(values[i])
        return RunRow(*values)

    def runs(
        self, status: str | None = None, where: list[flowcore.MetadataFilter] | None = None
    ) -> list[RunRow]:
        """Runs oldest first; ``status`` and every metadata filter of ``where`` must hold."""
        query = "SELECT run_id FROM runs"
        conds: list[str] = []
        args: list[Any] = []
        if status:
            conds.append("status = ?")
            args.append(status)
        for f in where or ():
            sql, values = _metadata_condition(f)
            conds.append(sql)
            args.extend(values)
        if conds:
            query += " WHERE " + " AND ".join(conds)
        ids = [r[0] for r in self.conn.execute(query + " ORDER BY created_ms, run_id", args)]
        return [self.run_row(i) for i in ids]

    def page_runs(
        self,
        *,
        flow: str | None = None,
        status: str | None = None,
        parent: str | None = None,
        created_from: int | None = None,
        created_to: int | None = None,
        principal: str | None = None,
        before: tuple[int, str] | None = None,
        limit: int = 50,
        metadata: list[flowcore.MetadataFilter] | None = None,
    ) -> list[RunRow]:
        """Runs newest first, filtered; ``before`` is the (created_ms, run_id) of
        the last run of the previous page. ``principal`` keeps that principal's runs;
        ``metadata``: filters every one of which must hold."""
        where: list[str] = []
        args: list[Any] = []
        for f in metadata or ():
            sql, values = _metadata_condition(f)
            where.append(sql)
            args.extend(values)
        for column, value in (("flow_id", flow), ("status", status), ("parent_run", parent)):
            if value is not None:
                where.append(f"{column} = ?")
                args.append(value)
        if created_from is not None:
            where.append("created_ms >= ?")
            args.append(created_from)
        if created_to is not None:
            where.append("created_ms < ?")
            args.append(created_to)
        if principal is not None:
            where.append("principal = ?")
            args.append(principal)
        if before is not None:
            where.append("(created_ms < ? OR (created_ms = ? AND run_id < ?))")
            args.extend((before[0], before[0], before[1]))
        query = "SELECT run_id FROM runs"
        if where:
            query += " WHERE " + " AND ".join(where)
        query += " ORDER BY created_ms DESC, run_id DESC LIMIT ?"
        ids = [r[0] for r in self.conn.execute(query, (*args, limit))]
        return [self.run_row(i) for i in ids]

    def start_run(
        self,
        flow: Flow,
        input: Any,
        run_id: str,
        now: int,
        tools: str | None,
        parent_run: str | None = None,
        parent_key: str | None = None,
        budget: flowcore.Budget | flowcore.BudgetRemaining | None = None,
        depth: int = 0,
        principal: str | None = None,
        metadata: dict[str, Any] | None = None,
        started_by: str | None = None,
        priority: int = DEFAULT_PRIORITY,
        dedup_key: str | None = None,
    ) -> tuple[bool, Applied]:
        """Start a run; an existing run started with the same options is returned as is.

        The options compared are the input, the flow spec, and the tools module
        and budget when they are given (None: whatever the run has). ``metadata``
        is not compared: the run's metadata may have changed since its start. The
        priority and the dedup key are those of the first start.
        """
        existing = self.existing(run_id)
        if existing is not None:
            differs = self.differences(existing, flow, input, tools, budget)
            if differs:
                raise HostError(f"run {run_id!r} already exists with a different {differs}")
            return False, Applied(run_id)
        decision = flowcore.start(
            flow, input, run_id=run_id, now_ms=now, budget=budget, depth=depth, metadata=metadata
        )
        recorder = flowcore.Recorder(run_id)
        records = recorder.started(
            flow, input, now, decision, budget=budget, depth=depth, metadata=metadata
        )
        self.conn.execute(
            "INSERT INTO runs (run_id, flow_id, spec_hash, parent_run, parent_key, depth, status,"
            " input, budget, tools, created_ms, updated_ms, next_index, principal, started_by,"
            " priority, dedup_key)"
            " VALUES (?, ?, ?, ?, ?, ?, 'running', ?, ?, ?, ?, ?, 0, ?, ?, ?, ?)",
            (
                run_id,
                flow.id,
                flow.spec_hash,
                parent_run,
                parent_key,
                depth,
                _dumps(input),
                None if budget is None else _dumps(flowcore.budget_to_wire(budget)),
                tools,
                now,
                now,
                principal,
                started_by,
                priority,
                dedup_key,
            ),
        )
        if decision.state.metadata:
            self._put_metadata(run_id, decision.state)
        cached = _Cached(0, decision.state, tools, 0, 0, 0)
        applied = self._persist(run_id, cached, decision, records, now, tools, (), checkpoint=True)
        return True, applied

    def _put_metadata(self, run_id: str, state: State) -> None:
        """Replace the run's metadata rows with its state's (buffered like the other writes)."""
        self._write("DELETE FROM run_metadata WHERE run_id = ?", (run_id,))
        kinds = state.flow.metadata
        self._write_many(
            "INSERT INTO run_metadata (run_id, name, kind, value) VALUES (?, ?, ?, ?)",
            [(run_id, name, kinds[name], value) for name, value in (state.metadata or {}).items()],
        )

    def metadata(self, run_ids: list[str]) -> dict[str, dict[str, Any]]:
        """The current metadata of each run (runs without any are left out)."""
        out: dict[str, dict[str, Any]] = {}
        for start in range(0, len(run_ids), 500):
            chunk = run_ids[start : start + 500]
            marks = ",".join("?" * len(chunk))
            for run_id, name, kind, value in self.conn.execute(
                f"SELECT run_id, name, kind, value FROM run_metadata WHERE run_id IN ({marks})"
                " ORDER BY run_id, name",
                chunk,
            ):
                out.setdefault(run_id, {})[name] = bool(value) if kind == "boolean" else value
        return out

    def deduplicated(self, dedup_key: str) -> str | None:
        """The running run started with ``dedup_key``, if there is one."""
        row = self.conn.execute(
            "SELECT run_id FROM runs WHERE dedup_key = ? AND status = 'running'", (dedup_key,)
        ).fetchone()
        return None if row is None else str(row[0])

    def existing(self, run_id: str) -> tuple[Any, str, str | None, Any] | None:
        """An existing run's start options: (input, spec hash, tools, budget JSON)."""
        row = self.conn.execute(
            "SELECT input, spec_hash, tools, budget FROM runs WHERE run_id = ?", (run_id,)
        ).fetchone()
        if row is None:
            return None
        return (
            _json_decode(row[0]),
            row[1],
            row[2],
            None if row[3] is None else _json_decode(row[3]),
        )

    @staticmethod
    def differences(
        existing: tuple[Any, str, str | None, Any],
        flow: Flow,
        input: Any,
        tools: str | None,
        budget: flowcore.Budget | flowcore.BudgetRemaining | None,
    ) -> str:
        """Which start options differ from the stored run's, as words ('' when none do)."""
        stored_input, spec_hash, stored_tools, stored_budget = existing
        differs = []
        if stored_input != input:
            differs.append("input")
        if spec_hash != flow.spec_hash:
            differs.append("flow spec")
        # (A run stored before paths were made absolute may hold a relative one.)
        if tools is not None and tools not in (stored_tools, tools_module_name(stored_tools)):
            differs.append(f"tools module (it has {stored_tools!r}, not {tools!r})")
        wanted = flowcore.budget_to_wire(budget)
        if wanted is not None and stored_budget != wanted:
            differs.append(f"budget (it has {_dumps(stored_budget)}, not {_dumps(wanted)})")
        return " and ".join(differs)

    # --- state ------------------------------------------------------------------------

    def load(self, run_id: str, report: bool = False) -> _Cached:
        """A run's state, from the cache or restored from its checkpoint and log.

        A cached state is used while the run's ``runs.version`` is the one it
        was stored with (checked once another connection has committed).
        Restoring reads the checkpoint (hot state, results, resolved keys and
        the *number* of report rows) and replays the events the log holds
        after it, at most ``CHECKPOINT_RECORDS`` records: it costs what the
        run holds now, not its history. The report rows themselves are read
        only when ``report`` is set; the rare transition that needs them
        reads them then (``flowcore.persist.advance``, see ``apply``).
        """
        if not (self.conn.in_transaction or self._planning):  # else tx/planned looked
            self._drop_stale()
        cached = self._cache.get(run_id)
        # While planning, a cached state is used as it is (not verified): the
        # plan's check under the write lock finds a run another connection
        # changed, before the plan or during it.
        if cached is not None and run_id not in self._verified and not self._planning:
            row = self.conn.execute(
                "SELECT version FROM runs WHERE run_id = ?", (run_id,)
            ).fetchone()
            if row is not None and row[0] == cached.version:
                self._verified.add(run_id)
            else:
                cached = None
        if cached is not None and (cached.state.report_complete or not report):
            if self._planning and run_id not in self._read:
                self._read[run_id] = cached.version
                if run_id not in self._verified:
                    self._doubted.add(run_id)
            return cached
        self._before_read(run_id)  # the rows read below may be buffered still
        with self._snapshot():
            cached = self._restore(run_id, report)
        self._cache[run_id] = cached
        self._verified.add(run_id)
        return cached

    @contextmanager
    def _snapshot(self) -> Iterator[None]:
        """A read transaction around several reads (nothing when one is open):
        a run is restored from one state of the file."""
        if self.conn.in_transaction:
            yield
            return
        self.conn.execute("BEGIN")
        try:
            yield
        finally:
            self.conn.execute("COMMIT")

    def _restore(self, run_id: str, report: bool) -> _Cached:
        """A run restored from its checkpoint and the events the log holds after it."""
        row = self.conn.execute(
            "SELECT next_index, spec_hash, tools, state, saved_index, version FROM runs"
            " WHERE run_id = ?",
            (run_id,),
        ).fetchone()
        if self._planning:
            self._read.setdefault(run_id, None if row is None else row[5])
        if row is None:
            raise HostError(f"no run {run_id!r} in the database")
        next_index, spec_hash, tools, hot, saved_index, version = row
        flow = self.flow_by_hash(spec_hash)
        results = (
            (name, _json_decode(record))
            for name, record in self.conn.execute(
                "SELECT name, record FROM results WHERE run_id = ?", (run_id,)
            )
        )
        (count,) = self.conn.execute(
            "SELECT COALESCE(MAX(n) + 1, 0) FROM report WHERE run_id = ?", (run_id,)
        ).fetchone()
        resolved = (  # read after the snapshot's format is checked
            (key, persist.decode_resolution(how))
            for key, how in self.conn.execute(
                "SELECT key, how FROM resolved WHERE run_id = ?", (run_id,)
            )
        )
        rows = self._saved_report(run_id) if report else None
        state = persist.restore_state(hot, results, flow, resolved, rows)
        cached = _Cached(next_index, state, tools, count, version, saved_index)
        unsaved = cached.unsaved
        for (data,) in self.conn.execute(
            "SELECT data FROM log WHERE run_id = ? AND idx >= ? AND type = 'event.reported'"
            " ORDER BY idx",
            (run_id, saved_index),
        ).fetchall():
            event = flowcore.event_from_wire(_json_decode(data))
            cached.state = persist.advance(
                cached.state, event, lambda: self._report(run_id, cached)
            ).state
            unsaved.take(cached.state)
        return cached

    def _saved_report(self, run_id: str) -> list[persist.ReportRow]:
        """The report rows of a run's checkpoint, oldest first."""
        self._before_read(run_id)
        return [
            persist.decode_row(blob)
            for (blob,) in self.conn.execute(
                "SELECT row FROM report WHERE run_id = ? ORDER BY n", (run_id,)
            )
        ]

    def _report(self, run_id: str, cached: _Cached) -> list[persist.ReportRow]:
        """Every report row of a run, oldest first: the checkpoint's, then the later ones."""
        return [*self._saved_report(run_id), *cached.unsaved.report]

    def state(self, run_id: str) -> State:
        return self.load(run_id).state

    def forget(self, run_ids: list[str]) -> None:
        """Drop the cached states of runs that were deleted (``_prune``)."""
        for run_id in run_ids:
            self._cache.pop(run_id, None)
        self._in_scope.difference_update(run_ids)

    # --- applying events -------------------------------------------------------------

    def apply(self, run_id: str, event: Event, now: int) -> Applied:
        """Apply one event inside the current transaction; rejected ones change nothing."""
        cached = self.load(run_id)
        try:
            decision = persist.advance(cached.state, event, lambda: self._report(run_id, cached))
        except EventRejected as exc:
            return Applied(run_id, rejected=exc.reason)
        recorder = flowcore.Recorder(run_id)
        recorder.index = cached.next_index
        records = recorder.applied(event, decision)
        answered = _answered(event, cached.state, decision.state)
        return self._persist(run_id, cached, decision, records, now, cached.tools, answered)

    def _persist(
        self,
        run_id: str,
        cached: _Cached,
        decision: flowcore.Decision,
        records: list[flowcore.Record],
        now: int,
        tools: str | None,
        answered: tuple[str, ...],
        *,
        checkpoint: bool = False,
    ) -> Applied:
        """Write what one transition did (in the open transaction, buffered).

        Every transition appends its log records, updates the run's row
        (``next_index``, ``version``) and its outbox rows. What it wrote to the
        growing parts (results, report, resolved keys) and the hot state are
        kept in memory and written at the run's next checkpoint: when the log
        holds ``CHECKPOINT_RECORDS`` records after the last one, when the run
        settles, or when ``checkpoint`` is set (a start). Until then the log's
        events are what restores them (``load``).
        """
        self._touched.add(run_id)
        state = decision.state
        plan = flowcore.plan(decision)
        applied = Applied(run_id, plan, scheduled=decision.scheduled, records=records)
        self._log_rows.extend((run_id, r.index, r.type, r.at, _dumps(r.data)) for r in records)
        self._write_many(scheduled.UPSERT, scheduled.changed(state))
        if state.metadata is not cached.state.metadata:  # replaced only when it changed
            self._put_metadata(run_id, state)
        cached.unsaved.take(state)
        emitted = set()
        seqs = [r.index for r in records if r.type == "effect.emitted"]
        for effect, seq in zip(decision.effects, seqs, strict=True):  # in emission order
            if not isinstance(effect, Settled | ContinueAsNew):
                emitted.add(effect.idempotency_key)
                self._outbox(run_id, state.flow, effect, now, applied, tools, seq)
        # Close what the run no longer waits for (and was not issued again):
        # what the event answered, and what the plan stops (everything, when the
        # run settles). Done rows are deleted: the log keeps the history, and
        # the outbox stays as small as what is in flight.
        gone = (*answered, *plan.drop, *plan.cancel, *plan.withdraw, *plan.detach)
        # Work cancelled whose end the run still waits for (cancellation:
        # wait_cancellation_completed) keeps its row until that end is reported,
        # so that recovery reports it after a crash.
        still = state.waiting.pending
        self._write_many(
            "DELETE FROM outbox WHERE run_id = ? AND key = ?",
            [(run_id, key) for key in gone if key not in emitted and key not in still],
        )
        settled = plan.settled
        entry = _Cached(
            cached.next_index + len(records),
            state,
            cached.tools,
            cached.report_rows,
            cached.version + 1,
            cached.saved_index,
            cached.unsaved,
        )
        hot = None
        if (
            checkpoint
            or settled is not None
            or (entry.next_index - entry.saved_index >= CHECKPOINT_RECORDS)
        ):
            hot = self._checkpoint(run_id, entry)
        if settled is not None:
            self._owned.discard(run_id)
            self._run_rows.pop(run_id, None)
            self._write(
                "UPDATE runs SET status = ?, output = ?, error = ?, updated_ms = ?, next_index = ?,"
                " version = ?, state = ?, saved_index = ? WHERE run_id = ?",
                (
                    settled.status,
                    _dumps(settled.output),
                    None if settled.error is None else _dumps(settled.error),
                    now,
                    entry.next_index,
                    entry.version,
                    hot,
                    entry.saved_index,
                    run_id,
                ),
            )
            # A schedule's overlap policy asks only about its runs still running:
            # a settled one is forgotten in the transaction that settles it.
            self._write("DELETE FROM schedule_runs WHERE run_id = ?", (run_id,))
        else:
            self._buffer_run_row(run_id, entry, now, hot)
        self._cache[run_id] = entry
        self._verified.add(run_id)
        # A child run the run no longer waits for is cancelled once this run's
        # own writes are complete: cancelling it may tell this run, re-entering apply.
        for key in plan.cancel:
            self._cancel_child(run_id, key, now)
        if settled is not None:
            self._notify_parent(run_id, state, settled, now)
        if plan.continued is not None:
            self._continue_all((run_id, entry, plan.continued, now))
        return applied

    def _continue_all(self, first: tuple[str, _Cached, ContinueAsNew, int]) -> None:
        """Start the next incarnation, and each that one continues into at once.

        A loop, not a recursion through ``_persist``: a run may continue at
        once up to its ``limits.max_idle_incarnations`` times in a row.
        """
        if self._continues is not None:  # in the loop below: it starts this one next
            self._continues.append(first)
            return
        self._continues = [first]
        try:
            while self._continues:
                self._pending_applied.append(self._continue(*self._continues.pop(0)))
        finally:
            self._continues = None

    def _continue(self, run_id: str, entry: _Cached, effect: ContinueAsNew, now: int) -> Applied:
        """Start the run's next incarnation in the transaction that ended the last.

        The log keeps the incarnation that ended (so that whoever follows it
        sees how it ended) and the new one; the records of earlier ones go,
        with every state row of the ended one. The new incarnation is
        checkpointed at once, so that loading the run never reads further back.
        """
        flow = entry.state.flow
        depth = entry.state.run.depth
        decision = flowcore.continue_run(flow, effect, run_id, now, depth=depth)
        recorder = flowcore.Recorder(run_id, entry.next_index)
        records = recorder.started(flow, effect.input, now, decision, depth=depth, continued=effect)
        first = entry.next_index
        # Where the ending incarnation's log begins: its run.started, still
        # buffered (it began in this transaction) or already written.
        buffered = [r[1] for r in self._log_rows if r[0] == run_id and r[2] == "run.started"]
        if buffered:
            kept = max(buffered)
        else:
            row = self.conn.execute(
                "SELECT MAX(idx) FROM log WHERE run_id = ? AND type = 'run.started'", (run_id,)
            ).fetchone()
            kept = row[0] if row is not None and row[0] is not None else 0
        self._log_rows = [r for r in self._log_rows if r[0] != run_id or r[1] >= kept]
        # The ending incarnation's state rows are not needed any more.
        self._result_rows = {k: v for k, v in self._result_rows.items() if k[0] != run_id}
        self._report_rows = [r for r in self._report_rows if r[0] != run_id]
        self._resolved_rows = {k: v for k, v in self._resolved_rows.items() if k[0] != run_id}
        self._write("DELETE FROM log WHERE run_id = ? AND idx < ?", (run_id, kept))
        for table in ("results", "report", "resolved", "scheduled_calls"):
            self._write(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))
        fresh = _Cached(first, decision.state, entry.tools, 0, entry.version, first)
        return self._persist(
            run_id, fresh, decision, records, now, entry.tools, (), checkpoint=True
        )

    def keeps(self, run_id: str) -> bool:
        """Whether this worker runs the new work of ``run_id`` itself (else it is left
        ``ready`` for any worker to claim).

        A worker keeps the runs whose work it runs, up to its ``share`` of the
        running runs when other workers share the database: past its share it
        lets runs go, one at a time as their next work is created, and claims
        no others, so that work started by one worker spreads over all of them.
        """
        share, owned = self.share, self._owned
        if share is None:
            return True
        if run_id in owned:
            if len(owned) <= share:
                return True
            owned.discard(run_id)
            return False
        if len(owned) < share:
            owned.add(run_id)
            return True
        return False

    def _checkpoint(self, run_id: str, entry: _Cached) -> bytes:
        """Buffer the rows of a checkpoint of ``entry`` and return its hot state."""
        unsaved = entry.unsaved
        for name, rec in unsaved.results.items():  # None: a finished loop scope's, deleted
            self._result_rows[(run_id, name)] = None if rec is None else _json.encode(rec)
        start = entry.report_rows
        self._report_rows.extend(
            (run_id, start + i, persist.encode_row(r)) for i, r in enumerate(unsaved.report)
        )
        for key, how in unsaved.resolved.items():
            self._resolved_rows[(run_id, key)] = persist.encode_resolution(how)
        entry.report_rows += len(unsaved.report)
        entry.unsaved = _Unsaved()
        entry.saved_index = entry.next_index
        return persist.encode_hot(entry.state)

    def checkpoint_all(self) -> None:
        """Checkpoint every cached run with events after its checkpoint (in the open
        transaction): a host that closes leaves nothing to replay."""
        for run_id, entry in list(self._cache.items()):
            if entry.saved_index == entry.next_index:
                continue
            try:
                entry = self.load(run_id)  # checked against runs.version
            except HostError:  # deleted meanwhile
                continue
            if entry.saved_index == entry.next_index:
                continue
            self._touched.add(run_id)
            entry.version += 1
            hot = self._checkpoint(run_id, entry)
            self.conn.execute(
                "UPDATE runs SET version = ?, state = ?, saved_index = ? WHERE run_id = ?",
                (entry.version, hot, entry.saved_index, run_id),
            )

    def _buffer_run_row(self, run_id: str, entry: _Cached, now: int, hot: bytes | None) -> None:
        """Buffer the update of a running run's row; a checkpoint's hot state stays with it."""
        if hot is None and (earlier := self._run_rows.get(run_id)) is not None:
            hot = earlier[3]
        self._run_rows[run_id] = (now, entry.next_index, entry.version, hot, entry.saved_index)

    def _outbox(
        self,
        run_id: str,
        flow: Flow,
        effect: RunAgent
        | RunTeam
        | CallTool
        | AskHuman
        | Sleep
        | AwaitSignal
        | RunSubflow
        | SignalRun,
        now: int,
        applied: Applied,
        tools: str | None,
        seq: int,
    ) -> None:
        """The outbox row of a new effect; ``seq``: its ``effect.emitted`` record's index."""
        key = effect.idempotency_key
        kind = str(effect.__struct_config__.tag)
        exec_class = "uncertain"
        status = "waiting"  # ask-human, await-signal
        due: int | None = None
        lease_owner: str | None = None
        lease_until: int | None = None
        dispatches = 0
        if isinstance(effect, CallTool):
            decl = flow.tools.get(effect.tool)
            exec_class = decl.exec_class if decl is not None else "uncertain"
        if isinstance(effect, (CallTool, RunAgent, RunTeam)):
            limits = self.tool_limits
            limited = limits and isinstance(effect, CallTool) and effect.tool in limits
            if self.dispatching and not limited and self.in_scope(run_id) and self.keeps(run_id):
                # Recorded as dispatched to this worker in the same transaction
                # that created it: the worker runs it right after the commit.
                status, lease_owner, lease_until = "dispatched", self.worker_id, now + self.lease_ms
                dispatches = 1
                applied.claimed.append(Claimed(run_id, key, effect, tools))
            else:
                status = "ready"
        elif isinstance(effect, (RunSubflow, SignalRun)):
            status, exec_class = "ready", "idempotent"
        elif isinstance(effect, Sleep):
            status, due = "timer", effect.until_ms
        if status == "ready":
            # Waiting work carries what orders its claim (its run's priority,
            # when it became ready) and a call's tool, for the tool limits.
            tool = effect.tool if isinstance(effect, CallTool) else None
            self._write(
                "INSERT OR REPLACE INTO outbox (run_id, key, kind, effect, status, exec_class,"
                " dispatches, seq, priority, queued_ms, tool) VALUES (?, ?, ?, ?, 'ready', ?,"
                " COALESCE((SELECT dispatches FROM outbox WHERE run_id = ? AND key = ?), 0), ?,"
                " (SELECT priority FROM runs WHERE run_id = ?), ?, ?)",
                (
                    run_id,
                    key,
                    kind,
                    _json.encode(effect),
                    exec_class,
                    run_id,
                    key,
                    seq,
                    run_id,
                    now,
                    tool,
                ),
            )
            return
        # Work re-issued under its key keeps counting the dispatches of its row.
        self._write(
            "INSERT OR REPLACE INTO outbox (run_id, key, kind, effect, status, due_ms, exec_class,"
            " dispatches, lease_owner, lease_until, seq) VALUES (?, ?, ?, ?, ?, ?, ?, ? + COALESCE("
            "(SELECT dispatches FROM outbox WHERE run_id = ? AND key = ?), 0), ?, ?, ?)",
            (
                run_id,
                key,
                kind,
                _json.encode(effect),
                status,
                due,
                exec_class,
                dispatches,
                run_id,
                key,
                lease_owner,
                lease_until,
                seq,
            ),
        )

    def _notify_parent(self, run_id: str, state: State, settled: Settled, now: int) -> None:
        row = self.conn.execute(
            "SELECT parent_run, parent_key FROM runs WHERE run_id = ?", (run_id,)
        ).fetchone()
        if row is None or row[0] is None:
            return
        parent_run, parent_key = row
        try:
            parent = self.load(parent_run)
        except HostError:  # deleted
            return
        used = flowcore.waiting_for(state)
        usage = used.usage()
        event = SubflowSettled(
            idempotency_key=parent_key,
            status=settled.status,
            output=settled.output,
            usage=usage,
            error=settled.error,
            at_ms=now,
        )
        if parent.state.status == "running":
            self._pending_applied.append(self.apply(parent_run, event, now))

    def _cancel_child(self, run_id: str, key: str, now: int) -> None:
        """Cancel the child run of ``key`` (work that is not a subflow has none)."""
        row = self.conn.execute(
            "SELECT status, version FROM runs WHERE run_id = ? AND parent_run = ?", (key, run_id)
        ).fetchone()
        if self._planning:  # a child started meanwhile must be cancelled too
            self._read.setdefault(key, None if row is None else row[1])
        if row is not None and row[0] == "running":
            event = CancelRequested(reason="the parent no longer waits for it", at_ms=now)
            self._pending_applied.append(self.apply(key, event, now))

    def take_extra(self) -> list[Applied]:
        """Applies made on the side (parents told, children cancelled) since last asked."""
        extra, self._pending_applied = self._pending_applied, []
        return extra

    # --- resuming a failed run ---------------------------------------------------------

    def rewind(
        self,
        run_id: str,
        flow: Flow,
        records: list[flowcore.Record],
        cut: int,
        pending: list[Effect],
        now: int,
        tools: str | None,
        failed_key: str,
        child_resumed: bool,
    ) -> Applied:
        """Rewind a failed run to just before its record ``cut`` (in the open transaction).

        The state there is re-derived event by event from the records before
        ``cut``, exactly as the run's own transactions stored it (each
        transition's ``persist.state_changes``); the records from ``cut`` on
        move to ``log_archive`` under this resume's number; ``pending`` (the
        effects open at that point) get their outbox rows again; the run is
        ``running``. ``child_resumed``: the failed key is a child run that is
        resumed too, so its row is ``dispatched`` (the child exists).
        """
        conn = self.conn
        (key,) = conn.execute("SELECT dedup_key FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        other = None if key is None else self.deduplicated(key)
        if other is not None and other != run_id:  # one running run per dedup key
            raise HostError(
                f"cannot resume run {run_id!r}: run {other!r}, started with its dedup key"
                f" {key!r}, is running"
            )
        self._flush()
        state, results, report_rows, resolved = _rebuild(flow, run_id, records, cut)
        (n,) = conn.execute(
            "SELECT COALESCE(MAX(n), 0) + 1 FROM resumes WHERE run_id = ?", (run_id,)
        ).fetchone()
        before = conn.execute(
            "SELECT tools, error, version FROM runs WHERE run_id = ?", (run_id,)
        ).fetchone()
        conn.execute(
            "INSERT INTO log_archive (run_id, resume, idx, type, at, data)"
            " SELECT run_id, ?, idx, type, at, data FROM log WHERE run_id = ? AND idx >= ?",
            (n, run_id, cut),
        )
        conn.execute("DELETE FROM log WHERE run_id = ? AND idx >= ?", (run_id, cut))
        conn.execute(
            "INSERT INTO resumes (run_id, n, at_ms, from_index, key, error, tools_before,"
            " tools_after) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (run_id, n, now, cut, failed_key, before[1], before[0], tools),
        )
        for table in ("results", "report", "resolved", "outbox"):
            conn.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))
        self._put_rebuilt(run_id, state, results, report_rows, resolved)
        conn.execute("DELETE FROM dead_letters WHERE run_id = ? AND key = ?", (run_id, failed_key))
        conn.execute(
            "UPDATE runs SET status = 'running', output = NULL, error = NULL, tools = ?,"
            " updated_ms = ?, next_index = ?, state = ?, saved_index = ?, version = ?"
            " WHERE run_id = ?",
            (tools, now, cut, persist.encode_hot(state), cut, before[2] + 1, run_id),
        )
        self._touched.add(run_id)
        self._cache[run_id] = _Cached(cut, state, tools, len(report_rows), before[2] + 1, cut)
        self._verified.add(run_id)
        applied = Applied(run_id)
        emitted = {  # each open effect's last emission before the cut
            r.data.get("idempotencyKey"): r.index
            for r in records
            if r.type == "effect.emitted" and r.index < cut and isinstance(r.data, dict)
        }
        for effect in pending:
            if not isinstance(effect, Settled | ContinueAsNew):
                seq = emitted.get(effect.idempotency_key, cut)
                self._outbox(run_id, flow, effect, now, applied, tools, seq)
        if child_resumed:
            self.mark(run_id, failed_key, "dispatched")
        return applied

    # --- forking a run -----------------------------------------------------------------

    def fork_run(
        self,
        source: RunRow,
        fork: flowcore.Fork,
        now: int,
        tools: str | None,
        budget: Any,
    ) -> Applied:
        """Write the run ``fork`` describes (in the open transaction).

        The run's row (the source's flow, input, budget and principal; a root
        run), its log (``fork.records``), the rows its state stores (re-derived
        event by event as its own transactions would have written them) and
        its checkpoint; ``fork.pending`` get their outbox rows, as a new
        decision's effects do, so a worker dispatches the open work.
        """
        conn = self.conn
        self._flush()
        run_id = fork.run_id
        flow = self.flow_by_hash(source.spec_hash)
        records = list(fork.records)
        end = len(records)
        state, results, report_rows, resolved = _rebuild(flow, run_id, records, end)
        conn.execute(
            "INSERT INTO runs (run_id, flow_id, spec_hash, parent_run, parent_key, depth, status,"
            " input, budget, tools, created_ms, updated_ms, next_index, principal, state,"
            " saved_index) VALUES (?, ?, ?, NULL, NULL, 0, 'running', ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                run_id,
                source.flow_id,
                source.spec_hash,
                _dumps(source.input),
                None if budget is None else _dumps(budget),
                tools,
                now,
                now,
                end,
                source.principal,
                persist.encode_hot(state),
                end,
            ),
        )
        conn.executemany(
            "INSERT INTO log (run_id, idx, type, at, data) VALUES (?, ?, ?, ?, ?)",
            [(run_id, r.index, r.type, r.at, _dumps(r.data)) for r in records],
        )
        self._put_rebuilt(run_id, state, results, report_rows, resolved)
        (version,) = conn.execute("SELECT version FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        self._touched.add(run_id)
        self._cache[run_id] = _Cached(end, state, tools, len(report_rows), version, end)
        self._verified.add(run_id)
        applied = Applied(run_id, records=records)
        emitted = {
            r.data.get("idempotencyKey"): r.index
            for r in records
            if r.type == "effect.emitted" and isinstance(r.data, dict)
        }
        for effect in fork.pending:
            seq = emitted.get(effect.idempotency_key, end)
            self._outbox(run_id, flow, effect, now, applied, tools, seq)
        return applied

    # --- moving a run to another version of its flow -----------------------------------

    def move_run(self, run_id: str, flow: Flow, records: list[flowcore.Record], now: int) -> State:
        """Pin running run ``run_id`` to ``flow`` (in the open transaction); its new state.

        The caller checked with ``flowcore.upgrade`` that ``records`` (the
        run's whole live log) replays against ``flow``. The state and every
        row it stores are re-derived event by event under ``flow``, as
        ``rewind`` does, and written with a checkpoint at the log's end; the
        run's row takes the new ``spec_hash`` and a new ``version``, so a
        worker that cached the old state reloads it (``load``), and a group
        commit that read it is redone (``Conflict``). The log and the outbox
        stay: the new version waits for the same effects under the same keys
        (in-flight work, timers, questions, signal waits go on as they are);
        open calls take the execution class the new spec declares for their
        tool.
        """
        conn = self.conn
        self._flush()
        row = conn.execute(
            "SELECT next_index, version, tools FROM runs WHERE run_id = ?", (run_id,)
        ).fetchone()
        if row is None:
            raise HostError(f"no run {run_id!r} in the database")
        end, version, tools = row
        if not records or records[-1].index + 1 != end:  # (read in this transaction)
            raise HostError(f"run {run_id!r}: its log does not end at index {end - 1}")
        state, results, report_rows, resolved = _rebuild(flow, run_id, records, end)
        for table in ("results", "report", "resolved"):
            conn.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))
        self._put_rebuilt(run_id, state, results, report_rows, resolved)
        conn.execute(
            "UPDATE runs SET spec_hash = ?, updated_ms = ?, state = ?, saved_index = ?,"
            " version = ? WHERE run_id = ?",
            (flow.spec_hash, now, persist.encode_hot(state), end, version + 1, run_id),
        )
        classes = []
        for key, blob in conn.execute(
            "SELECT key, effect FROM outbox WHERE run_id = ? AND kind = 'call-tool'", (run_id,)
        ).fetchall():
            effect = _effect_dec.decode(blob)
            if isinstance(effect, CallTool):
                decl = flow.tools.get(effect.tool)
                classes.append((decl.exec_class if decl is not None else "uncertain", run_id, key))
        conn.executemany("UPDATE outbox SET exec_class = ? WHERE run_id = ? AND key = ?", classes)
        self._touched.add(run_id)
        self._cache[run_id] = _Cached(end, state, tools, len(report_rows), version + 1, end)
        self._verified.add(run_id)
        return state

    def _put_rebuilt(
        self,
        run_id: str,
        state: State,
        results: dict[str, Any],
        report_rows: list[Any],
        resolved: dict[str, Any],
    ) -> None:
        """The rows a state rebuilt by ``_rebuild`` stores (its run has none yet)."""
        conn = self.conn
        scheduled.project_all(conn, run_id, state)
        self._put_metadata(run_id, state)
        conn.executemany(
            "INSERT INTO results (run_id, name, record) VALUES (?, ?, ?)",
            [(run_id, name, _json.encode(rec)) for name, rec in results.items() if rec is not None],
        )
        conn.executemany(
            "INSERT INTO report (run_id, n, row) VALUES (?, ?, ?)",
            [(run_id, i, persist.encode_row(row)) for i, row in enumerate(report_rows)],
        )
        conn.executemany(
            "INSERT INTO resolved (run_id, key, how) VALUES (?, ?, ?)",
            [(run_id, key, persist.encode_resolution(how)) for key, how in resolved.items()],
        )

    def forked_from(self, run_id: str) -> Any:
        """``{runId, index}`` when ``run_id`` is a fork (its ``run.started`` says so), else None."""
        row = self.conn.execute(
            "SELECT data FROM log WHERE run_id = ? AND idx = 0", (run_id,)
        ).fetchone()
        data = None if row is None else _json_decode(row[0])
        return data.get("forkedFrom") if isinstance(data, dict) else None

    def archived(self, run_id: str) -> list[tuple[int, flowcore.Record]]:
        """The records resumes moved out of the live log: (resume number, record)."""
        return [
            (n, flowcore.Record(type_, idx, run_id, at, _json_decode(data)))
            for n, idx, type_, at, data in self.conn.execute(
                "SELECT resume, idx, type, at, data FROM log_archive WHERE run_id = ?"
                " ORDER BY resume, idx",
                (run_id,),
            )
        ]

    def resumes(self, run_id: str) -> list[dict[str, Any]]:
        return [
            {
                "n": n,
                "atMs": at,
                "fromIndex": index,
                "key": key,
                "error": None if error is None else _json_decode(error),
                "toolsBefore": before,
                "toolsAfter": after,
            }
            for n, at, index, key, error, before, after in self.conn.execute(
                "SELECT n, at_ms, from_index, key, error, tools_before, tools_after FROM resumes"
                " WHERE run_id = ? ORDER BY n",
                (run_id,),
            )
        ]

    # --- the worker's queries ----------------------------------------------------------

    def due_timers(self, now: int, limit: int = 256) -> list[tuple[str, str, int]]:
        scope, args = self._scope()
        return list(
            self.conn.execute(
                "SELECT run_id, key, due_ms FROM outbox WHERE status = 'timer' AND due_ms <= ?"
                f"{scope} ORDER BY due_ms LIMIT ?",
                (now, *args, limit),
            )
        )

    def busy(self, horizon_ms: int) -> bool:
        """Whether a running run can go on before ``horizon_ms`` without an answer or
        a signal: work ready or out (a child run's own rows speak for it, not its
        parent's ``run-subflow``), a child or signal-run to start, a timer due by then."""
        row = self.conn.execute(
            "SELECT 1 FROM outbox o JOIN runs r USING (run_id) WHERE r.status = 'running'"
            " AND (o.status = 'ready' OR (o.status = 'dispatched' AND o.kind != 'run-subflow')"
            " OR (o.status = 'timer' AND o.due_ms <= ?)) LIMIT 1",
            (horizon_ms,),
        ).fetchone()
        return row is not None

    def next_timer(self) -> int | None:
        scope, args = self._scope()
        row = self.conn.execute(
            f"SELECT min(due_ms) FROM outbox WHERE status = 'timer'{scope}", args
        ).fetchone()
        return None if row is None else row[0]

    def ready_subflows(self, limit: int = 64) -> list[tuple[str, str, RunSubflow]]:
        out = []
        scope, args = self._scope()
        for run_id, key, blob in self.conn.execute(
            "SELECT run_id, key, effect FROM outbox WHERE status = 'ready' AND kind = 'run-subflow'"
            f"{scope} LIMIT ?",
            (*args, limit),
        ):
            effect = _effect_dec.decode(blob)
            assert isinstance(effect, RunSubflow)
            out.append((run_id, key, effect))
        return out

    def ready_signal_runs(self, limit: int = 64) -> list[tuple[str, str, SignalRun]]:
        """The ``signal-run`` effects not delivered yet (read again inside the
        transaction that delivers them: a row there is not delivered)."""
        out = []
        scope, args = self._scope()
        for run_id, key, blob in self.conn.execute(
            "SELECT run_id, key, effect FROM outbox WHERE status = 'ready' AND kind = 'signal-run'"
            f"{scope} LIMIT ?",
            (*args, limit),
        ):
            effect = _effect_dec.decode(blob)
            assert isinstance(effect, SignalRun)
            out.append((run_id, key, effect))
        return out

    def signal_waits(self, name: str, key: str) -> list[str]:
        """The running runs with an open wait for signal ``name`` sent with ``key``."""
        found: list[str] = []
        for run_id, blob in self.conn.execute(
            "SELECT o.run_id, o.effect FROM outbox o JOIN runs r USING (run_id)"
            " WHERE o.kind = 'await-signal' AND o.status = 'waiting' AND r.status = 'running'"
            " ORDER BY o.run_id"
        ):
            effect = _effect_dec.decode(blob)
            assert isinstance(effect, AwaitSignal)
            names = effect.signals or (effect.signal,)
            if effect.key == key and name in names and run_id not in found:
                found.append(run_id)
        return found

    def mark(self, run_id: str, key: str, status: str) -> None:
        self.conn.execute(
            "UPDATE outbox SET status = ?, lease_owner = NULL WHERE run_id = ? AND key = ?",
            (status, run_id, key),
        )

    def close(self, run_id: str, key: str) -> None:
        self._write("DELETE FROM outbox WHERE run_id = ? AND key = ?", (run_id, key))

    def dead_letter(
        self, run_id: str, key: str, kind: str, dispatches: int, note: str, now: int
    ) -> None:
        self.conn.execute(
            "INSERT OR REPLACE INTO dead_letters (run_id, key, kind, dispatches, note, at_ms)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (run_id, key, kind, dispatches, note, now),
        )

    def dead_letters(self, run_id: str) -> list[dict[str, Any]]:
        return [
            {"key": key, "kind": kind, "dispatches": n, "note": note, "atMs": at}
            for key, kind, n, note, at in self.conn.execute(
                "SELECT key, kind, dispatches, note, at_ms FROM dead_letters WHERE run_id = ?"
                " ORDER BY at_ms, key",
                (run_id,),
            )
        ]

    def record_failure(
        self,
        run_id: str,
        key: str,
        error: flowcore.ErrorInfo,
        traceback: str | None,
        now: int,
    ) -> None:
        """Keep a handler failure of ``key`` with its traceback (the last one per key)."""
        self._write(
            "INSERT OR REPLACE INTO failures (run_id, key, type, message, traceback, at_ms)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (run_id, key, error.type, error.message, traceback, now),
        )

    def failures(self, run_id: str) -> list[dict[str, Any]]:
        return [
            {"key": key, "type": type_, "message": message, "traceback": tb, "atMs": at}
            for key, type_, message, tb, at in self.conn.execute(
                "SELECT key, type, message, traceback, at_ms FROM failures WHERE run_id = ?"
                " ORDER BY at_ms, key",
                (run_id,),
            )
        ]

    def has_ready_work(self) -> bool:
        scope, args = self._scope()
        row = self.conn.execute(
            f"SELECT 1 FROM outbox WHERE status = 'ready' AND kind IN (?, ?, ?){scope} LIMIT 1",
            (*WORK, *args),
        ).fetchone()
        return row is not None

    def claim_ready_work(self, now: int, limit: int) -> list[Claimed]:
        """Work left ``ready`` (by a process not working, by recovery, or held back by
        a tool limit): dispatch up to ``limit`` of it to us.

        Rows are taken by their run's priority (1 first), then in the order they
        became ready. A call of a tool in ``tool_limits`` is taken only while
        the tool has room: fewer than ``concurrency`` of its calls dispatched
        and unfinished (over every worker of the database), and fewer than
        ``rate`` of them dispatched within the last ``per_ms`` (``tool_starts``).
        Both are counted in this transaction, which holds the write lock, so
        two workers never take the same room.

        Work that recovery took back from a lost worker (``requeue`` left the
        lost worker in ``lease_owner``) runs again under the same key: the
        claim appends an ``effect.redispatched`` record to its run's log in
        this same transaction.
        """
        scope, args = self._scope("o.run_id")
        room = self._tool_room(now) if self.tool_limits else {}
        out: list[Claimed] = []
        passed: set[tuple[str, str]] = set()  # rows left ready this time
        while len(out) < limit:
            full = sorted(tool for tool, left in room.items() if left <= 0)
            skip = f" AND (o.tool IS NULL OR o.tool NOT IN ({','.join('?' * len(full))}))"
            want = limit - len(out) + len(passed)
            rows = list(
                self.conn.execute(
                    "SELECT o.run_id, o.key, o.effect, r.tools, o.dispatches, o.lease_owner"
                    " FROM outbox o INDEXED BY outbox_queue JOIN runs r USING (run_id)"
                    f" WHERE o.status = 'ready' AND o.kind IN (?, ?, ?){skip if full else ''}"
                    f"{scope} ORDER BY o.priority, o.queued_ms LIMIT ?",
                    (*WORK, *full, *args, want),
                )
            )
            progressed = False
            for run_id, key, blob, tools, dispatches, lost in rows:
                if (run_id, key) in passed or len(out) >= limit:
                    continue
                effect = _effect_dec.decode(blob)
                assert isinstance(effect, (CallTool, RunAgent, RunTeam))
                tool = effect.tool if isinstance(effect, CallTool) else None
                # A limited tool's calls go to whichever worker has room when
                # they are claimed, whatever its share of the runs (``keeps``).
                if room[tool] <= 0 if tool in room else not self.keeps(run_id):
                    passed.add((run_id, key))
                    progressed = True
                    continue
                progressed = True
                limit_ = self.tool_limits.get(tool) if tool is not None else None
                note = None if lost is None else f"re-dispatched after recovery ({dispatches})"
                self.conn.execute(
                    "UPDATE outbox SET status = 'dispatched', dispatches = dispatches + 1,"
                    " lease_owner = ?, lease_until = ?, note = COALESCE(?, note),"
                    " tool = COALESCE(?, tool) WHERE run_id = ? AND key = ? AND status = 'ready'",
                    (
                        self.worker_id,
                        now + self.lease_ms,
                        note,
                        None if limit_ is None else tool,
                        run_id,
                        key,
                    ),
                )
                if limit_ is not None:
                    assert tool is not None
                    room[tool] -= 1
                    if limit_.rate is not None:
                        self.conn.execute(
                            "INSERT INTO tool_starts (tool, at_ms) VALUES (?, ?)", (tool, now)
                        )
                if lost is not None:
                    self.append_redispatched(run_id, key, dispatches, lost or None, now)
                out.append(Claimed(run_id, key, effect, tools))
            if len(rows) < want or not progressed:
                break
        return out

    def _tool_room(self, now: int) -> dict[str, int]:
        """How many more calls of each limited tool may be dispatched now."""
        room = {}
        for tool, limit in self.tool_limits.items():
            left = limit.concurrency if limit.concurrency is not None else limit.rate
            assert left is not None
            if limit.concurrency is not None:
                (running,) = self.conn.execute(
                    "SELECT count(*) FROM outbox WHERE tool = ? AND status = 'dispatched'", (tool,)
                ).fetchone()
                left = limit.concurrency - running
            if limit.rate is not None:
                since = now - limit.per_ms
                self.conn.execute(
                    "DELETE FROM tool_starts WHERE tool = ? AND at_ms <= ?", (tool, since)
                )
                (started,) = self.conn.execute(
                    "SELECT count(*) FROM tool_starts WHERE tool = ? AND at_ms > ?", (tool, since)
                ).fetchone()
                left = min(left, limit.rate - started)
            room[tool] = left
        return room

    def append_redispatched(
        self, run_id: str, key: str, recovery: int, worker: str | None, now: int
    ) -> None:
        """Append ``effect.redispatched`` to a run's log (in the open transaction)."""
        cached = self.load(run_id)
        recorder = flowcore.Recorder(run_id, cached.next_index)
        records = recorder.redispatched(key, recovery, worker, now)
        self._touched.add(run_id)
        self._log_rows.extend((run_id, r.index, r.type, r.at, _dumps(r.data)) for r in records)
        cached.next_index = recorder.index
        cached.version += 1
        buffered = self._run_rows.get(run_id)
        if buffered is not None:
            self._buffer_run_row(run_id, cached, buffered[0], None)
        else:
            self.conn.execute(
                "UPDATE runs SET next_index = ?, version = ? WHERE run_id = ?",
                (recorder.index, cached.version, run_id),
            )

    def expired(
        self, now: int, dead_owners: list[str]
    ) -> list[tuple[str, str, str, int, str, str | None]]:
        """Dispatched work whose worker is gone: (run, key, class, dispatches, kind, owner)."""
        marks = ",".join("?" * len(dead_owners)) or "''"
        scope, args = self._scope()
        return list(
            self.conn.execute(
                "SELECT run_id, key, exec_class, dispatches, kind, lease_owner FROM outbox"
                f" WHERE status = 'dispatched' AND kind IN (?, ?, ?) AND (lease_until < ?"
                f" OR lease_owner IN ({marks})){scope}",
                (*WORK, now, *dead_owners, *args),
            )
        )

    def requeue(self, run_id: str, key: str, lost: str | None = None) -> None:
        """Recovered work back to ``ready``, remembering the worker it was lost with.

        ``lease_owner`` of a ready row is otherwise NULL: a row that holds one
        was recovered, and its next claim is a re-dispatch (``''``: the lost
        worker is not known).
        """
        note = f"recovered from worker {lost}" if lost else "recovered from a lost worker"
        self.conn.execute(
            "UPDATE outbox SET status = 'ready', lease_owner = ?, lease_until = NULL, note = ?,"
            " priority = (SELECT priority FROM runs WHERE run_id = ?) WHERE run_id = ? AND key = ?",
            (lost or "", note, run_id, run_id, key),
        )

    def extend_leases(self, keys: list[tuple[str, str]], now: int) -> None:
        self.conn.executemany(
            "UPDATE outbox SET lease_until = ? WHERE run_id = ? AND key = ? AND lease_owner = ?",
            [(now + self.lease_ms, run_id, key, self.worker_id) for run_id, key in keys],
        )

    # --- reading for the CLI -----------------------------------------------------------

    def log_records(self, run_id: str, start: int = 0) -> list[flowcore.Record]:
        return [
            flowcore.Record(type_, idx, run_id, at, _json_decode(data))
            for idx, type_, at, data in self.conn.execute(
                "SELECT idx, type, at, data FROM log WHERE run_id = ? AND idx >= ? ORDER BY idx",
                (run_id, start),
            )
        ]

    def outbox_rows(self, run_id: str) -> list[dict[str, Any]]:
        out = []
        for key, kind, status, due, dispatches, note, blob in self.conn.execute(
            "SELECT key, kind, status, due_ms, dispatches, note, effect FROM outbox"
            " WHERE run_id = ? ORDER BY seq, key",
            (run_id,),
        ):  # only what is still open: done rows are deleted
            out.append(
                {
                    "key": key,
                    "kind": kind,
                    "status": status,
                    "dueMs": due,
                    "dispatches": dispatches,
                    "note": note,
                    "effect": _json_decode(blob),
                }
            )
        return out

    def children(self, run_id: str) -> list[str]:
        return [
            r[0]
            for r in self.conn.execute(
                "SELECT run_id FROM runs WHERE parent_run = ? ORDER BY created_ms, run_id",
                (run_id,),
            )
        ]

    def detached(self, run_id: str) -> list[str]:
        """The root runs ``run_id`` started with a detached ``run_subflow``."""
        return [
            r[0]
            for r in self.conn.execute(
                "SELECT run_id FROM runs WHERE started_by = ? ORDER BY created_ms, run_id",
                (run_id,),
            )
        ]
