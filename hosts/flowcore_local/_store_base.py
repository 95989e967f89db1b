"""The local store's ground floor: its row types and its transactions.

``StoreBase`` holds the connection, the cache of run states and the rows
buffered for the next write, and opens the transactions every other part of
the store (``_store``) writes in: ``tx`` (holding the write lock),
``planned`` (a group commit planned without it) and ``savepoint``. It also
says which runs a worker works on (``only``). It never
interprets a run: that is ``_store_runs``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import msgspec

import flowcore
from flowcore import (
    CallTool,
    ContinueAsNew,
    Effect,
    Flow,
    Plan,
    RunAgent,
    RunTeam,
    Settled,
    State,
    persist,
)
from flowcore_handlers import HostFailure, RunSettled, ToolLimit, UnknownRun, UnknownSchedule
from flowcore_handlers import NothingToCancel as _NothingToCancel
from flowcore_handlers._limits import DEFAULT_PRIORITY

from ._db import RUN_TABLES, SQLITE, Connection, Database

WORK = ("call-tool", "run-agent", "run-team")
# The run ``?`` and every run below it (its child runs, theirs, ...).
_TREE = (
    "IN (WITH RECURSIVE tree(id) AS (SELECT ? UNION ALL SELECT r.run_id FROM runs r"
    " JOIN tree ON r.parent_run = tree.id) SELECT id FROM tree)"
)

_json = msgspec.json.Encoder()
_json_decode = msgspec.json.decode
_effect_dec: msgspec.json.Decoder[Effect] = msgspec.json.Decoder(Effect)


class HostError(HostFailure):
    """A request the host cannot carry out (unknown run, conflicting start, ...)."""


class NoSignalWait(HostError):
    """A keyed signal sent without a run id that no running run waits for."""


class NothingToCancel(HostError, _NothingToCancel):
    """A cancel that would change nothing (the run has settled, or compensates
    already): refused, and nothing is written."""


class LocalUnknownRun(HostError, UnknownRun):
    """No run has that id in the database."""


class LocalRunSettled(HostError, RunSettled):
    """An operation that needs a running run, asked of one that has settled."""


class LocalUnknownSchedule(HostError, UnknownSchedule):
    """No schedule has that name in the database."""


# The local host's status words that are not the contract's (``RUN_STATUSES``):
# none today; the database stores flowcore's own words, which the contract has.
_CONTRACT_STATUS: dict[str, str] = {}
_LOCAL_STATUS = {word: local for local, word in _CONTRACT_STATUS.items()}


def contract_status(status: str) -> str:
    """A run's status as the ``Host`` contract spells it (``RUN_STATUSES``)."""
    return _CONTRACT_STATUS.get(status, status)


def local_status(status: str) -> str:
    """The status the database stores for a ``RUN_STATUSES`` word."""
    return _LOCAL_STATUS.get(status, status)


# The table a write statement of the store's writes (``_run_local``).
_WRITTEN = re.compile(r"\s*(?:INSERT(?:\s+OR\s+\w+)?\s+INTO|UPDATE|DELETE\s+FROM)\s+(\w+)", re.I)


@functools.cache
def _table_written(sql: str) -> str:
    """The table one of the store's own write statements writes ('' if not one)."""
    match = _WRITTEN.match(sql)
    return "" if match is None else match.group(1).lower()


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


def _dumps(value: Any) -> str:
    return _json.encode(value).decode()


class StoreBase:
    """The connection, the cache, the buffered rows and the transactions (see ``Store``)."""

    def __init__(
        self,
        conn: Connection,
        worker_id: str,
        lease_ms: int = 10_000,
        db: Database = SQLITE,
    ) -> None:
        self.conn = conn
        # What differs between SQLite and PostgreSQL: the write lock, the
        # sign of other connections' commits, the read snapshot (``_db``, ``_pg``).
        self.db = db
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
        to the file (our own commits leave it alone; on PostgreSQL the WAL
        position, ``_pg``). It says nothing about *which* run was written: each
        cached run is checked against its ``runs.version`` when it is next loaded.
        """
        version = self.db.data_version(self.conn)
        if version != self._data_version:
            self._verified = set()
            self._data_version = version

    def changes(self) -> tuple[int, int]:
        """Where the database stands as this connection sees it: ``PRAGMA
        data_version`` (it moves when another connection commits; on PostgreSQL
        the WAL position, which every commit moves) and the rows
        this connection has written. The same pair twice means nobody wrote
        between the two looks."""
        return self.db.data_version(self.conn), self.conn.total_changes

    def _begin(self, shared: bool = False) -> None:
        """Begin a write transaction holding the database's write lock (``_db``, ``_pg``):
        alone, or ``shared`` with the other transactions that lock the rows
        they write (on SQLite the one writer either way)."""
        self.db.begin(self.conn, shared)

    @contextmanager
    def tx(self, notify: bool = True, shared: bool = False) -> Iterator[None]:
        """One write transaction. On failure, cached states it touched are dropped.

        ``shared``: the transaction locks every row it writes itself (a claim,
        ``claim_ready_work``), so other such transactions may commit beside it
        (on PostgreSQL; SQLite has one writer). Any other transaction is the
        only writer while it runs, which the rest of the store relies on.

        ``notify``: tell the database's idle workers that it committed
        (``Database.notify``) if it wrote anything. A heartbeat, which gives
        nobody work, does not; nor does a transaction that wrote nothing (a
        claim that found no room): notified, the idle workers would each run
        a round, each such round notify the others again, and the workers wake
        one another for ever."""
        self._begin(shared)
        before = self.conn.total_changes
        # Holding the write lock alone, nobody else can commit until we do:
        # one look at data_version serves every load in this transaction (a
        # shared one locks a run's row before it loads it, ``lock_run``).
        self._drop_stale()
        self._touched = set()
        try:
            yield
            self._flush()
            if notify and self.conn.total_changes != before:
                self.db.notify(self.conn)
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
            shared = self.db.row_locks and self._run_local()
            self._begin(shared)
            if shared:
                try:
                    self._validate(lock=True)
                    self._flush()
                except self.db.contention as exc:  # another transaction wrote the same rows
                    raise Conflict(f"written beside another transaction: {exc}") from None
            else:
                changed = self.db.data_version(conn) != began
                if changed or self._doubted:
                    self._validate()
                self._flush()
            self.db.notify(conn)
            conn.execute("COMMIT")
        except BaseException:
            self._planning = False
            self._discard()
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            for run_id in self._touched:
                self._cache.pop(run_id, None)
            raise

    def _run_local(self) -> bool:
        """Whether the plan writes only rows of the runs it read (``RUN_TABLES``):
        then, its runs' rows locked, it may commit beside other such plans.
        A plan that writes anything shared (a schedule's, a worker's) or a run
        it did not read takes the write lock alone, as on SQLite."""
        return self._touched <= self._read.keys() and all(
            (table := _table_written(sql)) == "runs" or table in RUN_TABLES
            for sql, _ in self._statements
        )

    def _validate(self, lock: bool = False) -> None:
        """Raise ``Conflict`` unless every run the plan read has the version it read.

        ``lock``: lock the runs' rows until the transaction ends (``FOR UPDATE``,
        in one order, so that two plans never wait for each other in a cycle),
        so that no other transaction changes them before the plan commits.
        """
        read = sorted(self._read.items()) if lock else list(self._read.items())
        suffix = f" ORDER BY run_id{self.db.for_update}" if lock else ""
        for start in range(0, len(read), 500):
            chunk = read[start : start + 500]
            marks = ",".join("?" * len(chunk))
            now = dict(
                self.conn.execute(
                    f"SELECT run_id, version FROM runs WHERE run_id IN ({marks}){suffix}",
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
                "INSERT INTO results (run_id, name, record) VALUES (?, ?, ?)"
                " ON CONFLICT (run_id, name) DO UPDATE SET record = excluded.record",
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
                "INSERT INTO resolved (run_id, key, how) VALUES (?, ?, ?)"
                " ON CONFLICT (run_id, key) DO UPDATE SET how = excluded.how",
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

    def take_extra(self) -> list[Applied]:
        """Applies made on the side (parents told, children cancelled) since last asked."""
        extra, self._pending_applied = self._pending_applied, []
        return extra
