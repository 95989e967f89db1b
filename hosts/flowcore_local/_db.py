"""The SQLite database of the local host: opening it, checking it, migrating it.

One file, WAL mode, ``synchronous=FULL`` (an fsync per commit) unless the
caller turns durability down. The schema is versioned with ``user_version``;
migrations are applied in order when the file is opened. A file that is not
empty and not a flowcore database is refused rather than touched.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import closing
from pathlib import Path
from typing import Any, Final, Literal, Protocol
from urllib.parse import urlsplit, urlunsplit

__all__ = [
    "APPLICATION_ID",
    "Connection",
    "Database",
    "DB_ENV",
    "DURABILITY",
    "Durability",
    "FLOW_REFERENCES",
    "Listener",
    "RUN_TABLES",
    "SCHEMA_VERSION",
    "SHARED_TABLES",
    "NotAFlowcoreDatabase",
    "SqliteDatabase",
    "connect",
    "db_label",
    "default_db_path",
    "is_pg_url",
    "open_db",
    "schema_version",
]

APPLICATION_ID = 0x466C4F57  # "FlOW"
DB_ENV = "FLOWCORE_DB"  # the database file when none is named (`--db`, `default_db_path`)

MIGRATIONS: list[list[str]] = [
    # 1: the first schema
    [
        """CREATE TABLE flows (
            spec_hash TEXT PRIMARY KEY,
            flow_id TEXT NOT NULL,
            version INTEGER NOT NULL,
            source TEXT NOT NULL,
            spec TEXT NOT NULL,
            added_ms INTEGER NOT NULL
        )""",
        "CREATE INDEX flows_by_id ON flows (flow_id, added_ms)",
        """CREATE TABLE runs (
            run_id TEXT PRIMARY KEY,
            flow_id TEXT NOT NULL,
            spec_hash TEXT NOT NULL REFERENCES flows (spec_hash),
            parent_run TEXT,
            parent_key TEXT,
            depth INTEGER NOT NULL,
            status TEXT NOT NULL,
            input TEXT NOT NULL,
            budget TEXT,
            output TEXT,
            error TEXT,
            tools TEXT,
            created_ms INTEGER NOT NULL,
            updated_ms INTEGER NOT NULL,
            next_index INTEGER NOT NULL,
            state BLOB
        )""",
        "CREATE INDEX runs_by_status ON runs (status)",
        "CREATE INDEX runs_by_parent ON runs (parent_run)",
        """CREATE TABLE log (
            run_id TEXT NOT NULL,
            idx INTEGER NOT NULL,
            type TEXT NOT NULL,
            at INTEGER NOT NULL,
            data TEXT NOT NULL,
            PRIMARY KEY (run_id, idx)
        ) WITHOUT ROWID""",
        """CREATE TABLE results (
            run_id TEXT NOT NULL,
            name TEXT NOT NULL,
            record BLOB NOT NULL,
            PRIMARY KEY (run_id, name)
        ) WITHOUT ROWID""",
        """CREATE TABLE report (
            run_id TEXT NOT NULL,
            n INTEGER NOT NULL,
            row BLOB NOT NULL,
            PRIMARY KEY (run_id, n)
        ) WITHOUT ROWID""",
        """CREATE TABLE outbox (
            run_id TEXT NOT NULL,
            key TEXT NOT NULL,
            kind TEXT NOT NULL,
            effect BLOB NOT NULL,
            status TEXT NOT NULL,
            due_ms INTEGER,
            exec_class TEXT NOT NULL,
            dispatches INTEGER NOT NULL DEFAULT 0,
            lease_owner TEXT,
            lease_until INTEGER,
            note TEXT,
            PRIMARY KEY (run_id, key)
        )""",
        "CREATE INDEX outbox_by_status ON outbox (status, due_ms)",
        """CREATE TABLE resolved (
            run_id TEXT NOT NULL,
            key TEXT NOT NULL,
            how TEXT NOT NULL,
            PRIMARY KEY (run_id, key)
        ) WITHOUT ROWID""",
        """CREATE TABLE dead_letters (
            run_id TEXT NOT NULL,
            key TEXT NOT NULL,
            kind TEXT NOT NULL,
            dispatches INTEGER NOT NULL,
            note TEXT NOT NULL,
            at_ms INTEGER NOT NULL,
            PRIMARY KEY (run_id, key)
        )""",
        """CREATE TABLE workers (
            worker_id TEXT PRIMARY KEY,
            pid INTEGER NOT NULL,
            hostname TEXT NOT NULL,
            heartbeat_ms INTEGER NOT NULL
        )""",
    ],
    # 2: handler failures with their tracebacks; resumed runs and the log
    # records a resume moved out of the live log
    [
        """CREATE TABLE failures (
            run_id TEXT NOT NULL,
            key TEXT NOT NULL,
            type TEXT NOT NULL,
            message TEXT NOT NULL,
            traceback TEXT,
            at_ms INTEGER NOT NULL,
            PRIMARY KEY (run_id, key)
        )""",
        """CREATE TABLE resumes (
            run_id TEXT NOT NULL,
            n INTEGER NOT NULL,
            at_ms INTEGER NOT NULL,
            from_index INTEGER NOT NULL,
            key TEXT NOT NULL,
            error TEXT,
            tools_before TEXT,
            tools_after TEXT,
            PRIMARY KEY (run_id, n)
        )""",
        """CREATE TABLE log_archive (
            run_id TEXT NOT NULL,
            resume INTEGER NOT NULL,
            idx INTEGER NOT NULL,
            type TEXT NOT NULL,
            at INTEGER NOT NULL,
            data TEXT NOT NULL,
            PRIMARY KEY (run_id, resume, idx)
        ) WITHOUT ROWID""",
    ],
    # 3: schedules (flowcore.schedules), their recent actions and the runs
    # they started that were running when last looked at
    [
        """CREATE TABLE schedules (
            name TEXT PRIMARY KEY,
            flow_id TEXT NOT NULL,
            spec_hash TEXT NOT NULL REFERENCES flows (spec_hash),
            definition TEXT NOT NULL,
            declared INTEGER NOT NULL,
            tools TEXT,
            paused INTEGER NOT NULL,
            note TEXT NOT NULL,
            considered_ms INTEGER NOT NULL,
            buffered_ms INTEGER,
            remaining INTEGER,
            triggers INTEGER NOT NULL DEFAULT 0,
            next_ms INTEGER,
            created_ms INTEGER NOT NULL,
            updated_ms INTEGER NOT NULL
        )""",
        "CREATE INDEX schedules_by_next ON schedules (next_ms)",
        """CREATE TABLE schedule_actions (
            name TEXT NOT NULL,
            n INTEGER NOT NULL,
            at_ms INTEGER NOT NULL,
            action TEXT NOT NULL,
            slot_ms INTEGER,
            through_ms INTEGER,
            run_id TEXT,
            why TEXT,
            PRIMARY KEY (name, n)
        ) WITHOUT ROWID""",
        """CREATE TABLE schedule_runs (
            name TEXT NOT NULL,
            run_id TEXT NOT NULL,
            PRIMARY KEY (name, run_id)
        ) WITHOUT ROWID""",
    ],
    # 4: every run's scheduled calls, a projection of the runs' states kept in
    # the transaction of each event, so that one query lists them across runs
    [
        """CREATE TABLE scheduled_calls (
            run_id TEXT NOT NULL,
            id TEXT NOT NULL,
            tool TEXT NOT NULL,
            input TEXT NOT NULL,
            status TEXT NOT NULL,
            created_ms INTEGER NOT NULL,
            due_ms INTEGER NOT NULL,
            attempts INTEGER NOT NULL,
            finished_ms INTEGER,
            error TEXT,
            outside INTEGER NOT NULL,
            PRIMARY KEY (run_id, id)
        )""",
        "CREATE INDEX scheduled_calls_by_status ON scheduled_calls (status, due_ms)",
        "CREATE INDEX scheduled_calls_by_tool ON scheduled_calls (tool)",
        "CREATE INDEX scheduled_calls_finished ON scheduled_calls (run_id, finished_ms)",
    ],
    # 5: the principal that started each run (``flowcore serve``: NULL for a run
    # started outside it), and the runs newest first for paged listings
    [
        "ALTER TABLE runs ADD COLUMN principal TEXT",
        "CREATE INDEX runs_by_created ON runs (created_ms, run_id)",
    ],
    # 6: the log as the journal. ``saved_index``: the hot state in ``runs.state``
    # and the results, report and resolved rows hold the run as of the log
    # record before this index (a checkpoint); later events are replayed from
    # the log when the run is loaded. Runs of older schemas stored everything at
    # every event, so their checkpoint is their next index. ``version`` counts
    # the writes of the run's row, so a process can tell that its cached state
    # is still the run's (see _store.Store.load). ``workers.only_run``: the run a
    # worker limits itself to (NULL: every run), for the workers' shares.
    [
        "ALTER TABLE runs ADD COLUMN saved_index INTEGER NOT NULL DEFAULT 0",
        "UPDATE runs SET saved_index = next_index",
        "ALTER TABLE runs ADD COLUMN version INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE workers ADD COLUMN only_run TEXT",
        # The outbox keyed by (run, key) without a rowid, ``seq`` its order
        # of emission (the index of the effect's ``effect.emitted``; rows of
        # older schemas keep their order before any new one), and indexed only
        # where workers look for work: dispatched and waiting rows, the hot
        # path, are written to one b-tree.
        """CREATE TABLE outbox_6 (
            run_id TEXT NOT NULL,
            key TEXT NOT NULL,
            kind TEXT NOT NULL,
            effect BLOB NOT NULL,
            status TEXT NOT NULL,
            due_ms INTEGER,
            exec_class TEXT NOT NULL,
            dispatches INTEGER NOT NULL DEFAULT 0,
            lease_owner TEXT,
            lease_until INTEGER,
            note TEXT,
            seq INTEGER NOT NULL,
            PRIMARY KEY (run_id, key)
        ) WITHOUT ROWID""",
        "INSERT INTO outbox_6 SELECT run_id, key, kind, effect, status, due_ms, exec_class,"
        " dispatches, lease_owner, lease_until, note,"
        " rowid - (SELECT COALESCE(MAX(rowid), 0) + 1 FROM outbox) FROM outbox",
        "DROP TABLE outbox",
        "ALTER TABLE outbox_6 RENAME TO outbox",
        "CREATE INDEX outbox_timers ON outbox (due_ms) WHERE status = 'timer'",
        "CREATE INDEX outbox_ready ON outbox (kind) WHERE status = 'ready'",
    ],
    # 7: each run's current metadata, one row per field set (``kind`` its
    # declared type; ``value`` as SQLite stores it: text, integer, real, and
    # 0 or 1 for a boolean), indexed by field and value for ``runs --where``
    [
        """CREATE TABLE run_metadata (
            run_id TEXT NOT NULL,
            name TEXT NOT NULL,
            kind TEXT NOT NULL,
            value NOT NULL,
            PRIMARY KEY (run_id, name)
        ) WITHOUT ROWID""",
        "CREATE INDEX run_metadata_by_value ON run_metadata (name, value)",
    ],
    # 8: the run that started a detached child run (``run_subflow.detached``): a
    # root run of its own (``parent_run`` NULL), so deleting or cancelling the
    # run that started it never reaches it; kept for lineage (``flowcore show``).
    [
        "ALTER TABLE runs ADD COLUMN started_by TEXT",
    ],
    # 9: limits across runs. ``runs.priority`` (1 first, 5 last; a child run
    # has its parent's) and ``runs.dedup_key``, unique among running runs.
    # Ready work rows carry their run's ``priority``, when they became ready
    # (``queued_ms``) and a call's ``tool``: workers claim them in that order
    # (``outbox_queue``) and count a limited tool's dispatched calls
    # (``outbox_tools``); work dispatched at once to the worker that made it,
    # the hot path, has neither and is in neither index. ``tool_starts``: when
    # each call of a rate-limited tool was dispatched, within its window.
    [
        "ALTER TABLE runs ADD COLUMN priority INTEGER NOT NULL DEFAULT 3",
        "ALTER TABLE runs ADD COLUMN dedup_key TEXT",
        "CREATE UNIQUE INDEX runs_dedup ON runs (dedup_key)"
        " WHERE dedup_key IS NOT NULL AND status = 'running'",
        "ALTER TABLE outbox ADD COLUMN priority INTEGER NOT NULL DEFAULT 3",
        "ALTER TABLE outbox ADD COLUMN queued_ms INTEGER",
        "ALTER TABLE outbox ADD COLUMN tool TEXT",
        # (kind and tool in the index: rows of a full tool are passed over in it)
        "CREATE INDEX outbox_queue ON outbox (priority, queued_ms, kind, tool)"
        " WHERE status = 'ready'",
        "CREATE INDEX outbox_tools ON outbox (tool, status) WHERE tool IS NOT NULL",
        """CREATE TABLE tool_starts (
            tool TEXT NOT NULL,
            at_ms INTEGER NOT NULL
        )""",
        "CREATE INDEX tool_starts_by_tool ON tool_starts (tool, at_ms)",
    ],
    # 10: each run's progress stream (``flowcore_handlers.publish``): ``idx``
    # counts from 0 per run and goes on counting when the oldest items are
    # dropped for the run's cap; ``key`` and ``step`` the work that published,
    # ``size`` the bytes of ``data`` (its JSON), ``before`` the bytes of the
    # run's items before it (dropped or not): the byte cap is one indexed
    # delete, never a sum. Never read by the decision.
    [
        """CREATE TABLE progress (
            run_id TEXT NOT NULL,
            idx INTEGER NOT NULL,
            key TEXT NOT NULL,
            step TEXT,
            at INTEGER NOT NULL,
            size INTEGER NOT NULL,
            before INTEGER NOT NULL,
            data TEXT NOT NULL,
            PRIMARY KEY (run_id, idx)
        ) WITHOUT ROWID""",
        "CREATE INDEX progress_by_bytes ON progress (run_id, before)",
    ],
    # 11: a schedule's owner: the principal of whoever added it (NULL: none, the
    # admins'), which every run the schedule starts belongs to (``runs.principal``)
    [
        "ALTER TABLE schedules ADD COLUMN owner TEXT",
    ],
    # 12: a scheduled call's recurrence and replays (``scheduled_calls.recurrence``,
    # JSON: everyMs, cron, timezone, count, untilMs, fires, replays; NULL for a
    # single call never replayed).
    [
        "ALTER TABLE scheduled_calls ADD COLUMN recurrence TEXT",
    ],
]
SCHEMA_VERSION = len(MIGRATIONS)

# Where a run's rows are, besides its ``runs`` row: each table holding rows of
# one run, and the column that names it. Deleting a run (``_prune``) removes
# its rows from every table here, then its ``runs`` row, in one transaction.
# Every table of the schema is here, is ``runs``, or is in SHARED_TABLES:
# tests/local/admin/test_delete_prune.py reads the tables from ``sqlite_master`` and
# fails on one that is in none of them (a new table must say whose rows it holds).
RUN_TABLES: Final[dict[str, str]] = {
    "log": "run_id",
    "results": "run_id",
    "report": "run_id",
    "outbox": "run_id",
    "resolved": "run_id",
    "dead_letters": "run_id",
    "failures": "run_id",
    "resumes": "run_id",
    "log_archive": "run_id",
    "schedule_runs": "run_id",  # a schedule's runs still running when last looked at
    "scheduled_calls": "run_id",  # the run's scheduled calls (the projection of its state)
    "run_metadata": "run_id",  # the run's metadata (the projection of its state)
    "progress": "run_id",  # the run's progress stream (what its handlers published)
}
# Tables whose rows belong to no one run: the stored specs (a spec is removed
# with the last run that refers to it, see FLOW_REFERENCES), the workers, and
# the schedules with their recent actions (which name runs, deleted or not),
# and the recent starts of rate-limited tools.
SHARED_TABLES: Final[tuple[str, ...]] = (
    "flows",
    "workers",
    "schedules",
    "schedule_actions",
    "tool_starts",  # the recent starts of rate-limited tools, over every run
)
# The columns that refer to a stored spec (``flows.spec_hash``): a spec is
# kept while a row here names it, or while a flow named here can start it as
# a subflow.
FLOW_REFERENCES: Final[tuple[tuple[str, str], ...]] = (
    ("runs", "spec_hash"),
    ("schedules", "spec_hash"),
)


class NotAFlowcoreDatabase(Exception):
    """The file exists and holds something other than a flowcore database."""


def default_db_path() -> Path:
    return Path(os.environ.get(DB_ENV) or "flowcore.db")


_PG_SCHEMES = ("postgresql://", "postgres://")


def is_pg_url(db: object) -> bool:
    """Whether ``db`` (a ``--db`` value, ``$FLOWCORE_DB``) names a PostgreSQL database."""
    return isinstance(db, str) and db.lower().startswith(_PG_SCHEMES)


def db_label(db: str | Path) -> str:
    """``db`` as a message shows it: a PostgreSQL URL without its password."""
    if not is_pg_url(db):
        return str(db)
    parts = urlsplit(str(db))
    if parts.password is None:
        return str(db)
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def db_location(db: str | Path | None) -> str | Path:
    """The database a host opens: a PostgreSQL URL as it is, else the SQLite file's
    path; None: ``$FLOWCORE_DB`` (either), else ``flowcore.db``."""
    if db is None:
        db = os.environ.get(DB_ENV) or "flowcore.db"
    return db if is_pg_url(db) else Path(db)


class Cursor(Protocol):
    """What the store reads from a statement it executed."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Connection(Protocol):
    """The store's connection: a ``sqlite3.Connection`` (autocommit: the store
    says BEGIN and COMMIT itself), or ``_pg.PgConnection`` giving the same."""

    def execute(self, sql: str, params: Sequence[Any] = ..., /) -> Cursor: ...

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]], /) -> Cursor: ...

    @property
    def total_changes(self) -> int: ...  # rows this connection wrote

    @property
    def in_transaction(self) -> bool: ...

    def close(self) -> None: ...


class Listener(Protocol):
    """A worker's ear for other connections' commits (``_pg.PgListener``): its
    ``fileno`` turns readable when one arrives, ``heard`` consumes what came."""

    def fileno(self) -> int: ...

    @property
    def closed(self) -> bool: ...  # its connection lost: the worker polls instead

    def heard(self) -> int: ...  # notifications from other connections, consumed

    def close(self) -> None: ...


class Database(Protocol):
    """What the store does its own way on one database (``SqliteDatabase``,
    ``_pg.PgDatabase``)."""

    @property
    def name(self) -> str: ...

    @property
    def metadata_number(self) -> str: ...

    @property
    def begin_read(self) -> str: ...

    # Whether write transactions may run side by side, each locking the rows
    # it writes (``begin(shared=True)``), and the clauses that lock them.
    @property
    def row_locks(self) -> bool: ...

    @property
    def for_update(self) -> str: ...

    @property
    def skip_locked(self) -> str: ...

    # What a shared transaction raises when another one wrote the same rows.
    @property
    def contention(self) -> tuple[type[Exception], ...]: ...

    def begin(self, conn: Connection, shared: bool = False) -> None: ...

    def lock_tools(self, conn: Connection, tools: list[str]) -> None: ...

    def data_version(self, conn: Connection) -> int: ...

    def notify(self, conn: Connection) -> None: ...

    def listen(self) -> Listener | None: ...

    def indexed_by(self, index: str) -> str: ...

    def metadata_value(self, kind: str, value: Any) -> Any: ...


# How long a transaction waits for the write lock (the connection's busy_timeout).
BUSY_S = 30.0


class SqliteDatabase:
    """What the store does its own way on SQLite (``_pg.PgDatabase`` is PostgreSQL's):
    how a write transaction begins, what says another connection committed, how a
    read snapshot opens, and the column metadata filters compare numbers with."""

    name = "sqlite"
    metadata_number = "value"  # untyped: it compares as a number with a number
    begin_read = "BEGIN"
    # One writer at a time: no transaction needs to lock rows.
    row_locks = False
    for_update = ""
    skip_locked = ""
    contention: tuple[type[Exception], ...] = ()

    def begin(self, conn: Connection, shared: bool = False) -> None:
        """``BEGIN IMMEDIATE``, waiting for the write lock in steps from 0.1 ms
        (``shared`` or not: SQLite has one writer).

        SQLite's own busy handler sleeps 1 ms, then 2, 5, 10, ... while the
        lock is usually held for less than a millisecond (one group commit of
        another worker): it would make two workers slower than one.
        """
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

    def lock_tools(self, conn: Connection, tools: list[str]) -> None:
        """Nothing: the one writer counts a tool's room alone."""

    def data_version(self, conn: Connection) -> int:
        """``PRAGMA data_version``: it changes exactly when another connection
        commits to the file (our own commits leave it alone)."""
        return int(conn.execute("PRAGMA data_version").fetchone()[0])

    def notify(self, conn: Connection) -> None:
        """Nothing: an idle worker on SQLite finds others' commits by polling."""

    def listen(self) -> Listener | None:
        """None: SQLite has no notifications (its workers poll ``data_version``)."""
        return None

    def indexed_by(self, index: str) -> str:
        """A table's ``INDEXED BY`` clause: the index SQLite's planner is to use."""
        return f" INDEXED BY {index}"

    def metadata_value(self, kind: str, value: Any) -> Any:
        """A ``run_metadata.value`` as the run holds it (a boolean is stored as 0 or 1)."""
        return bool(value) if kind == "boolean" else value


SQLITE: Final = SqliteDatabase()


def schema_version(db: str | Path) -> tuple[int, int]:
    """Open ``db``, migrating it (creating it if need be), and close it: its schema
    version before and after (0: no flowcore schema yet)."""
    if is_pg_url(db):
        from ._pg import PG_SCHEMA_VERSION, connect_pg

        conn, database = connect_pg(str(db))
        conn.close()
        return database.migrated_from, PG_SCHEMA_VERSION
    path = Path(db)
    before = 0
    if path.is_file() and path.stat().st_size:
        try:
            with closing(sqlite3.connect(path)) as probe:
                before = int(probe.execute("PRAGMA user_version").fetchone()[0])
        except sqlite3.DatabaseError:
            before = 0  # connect says what it is
    connect(path).close()
    return before, SCHEMA_VERSION


def open_db(db: str | Path, durability: Durability = "power-loss") -> tuple[Connection, Database]:
    """Open and migrate the store's database: a ``postgresql://`` URL (psycopg,
    imported only then) or a SQLite file. The connection and its database object."""
    if is_pg_url(db):
        try:
            from ._pg import connect_pg
        except ImportError as exc:
            raise NotAFlowcoreDatabase(
                f"a PostgreSQL database needs psycopg (pip install 'flowcore[postgres]'): {exc}"
            ) from None
        return connect_pg(str(db), durability)
    return connect(db, durability), SQLITE


Durability = Literal["power-loss", "process-crash"]
DURABILITY: Final[tuple[Durability, ...]] = ("power-loss", "process-crash")
"""What a commit survives: ``power-loss`` (every commit fsync'd, ``synchronous=FULL``;
the default) or ``process-crash`` (WAL with ``synchronous=NORMAL``: a killed
process loses nothing, an OS crash or a power loss may lose the last commits)."""


def connect(path: str | Path, durability: Durability = "power-loss") -> sqlite3.Connection:
    """Open (creating if needed) and migrate a flowcore database."""
    path = Path(path)
    if path.exists() and path.is_dir():
        raise NotAFlowcoreDatabase(f"{path} is a directory, not a flowcore database")
    if not path.parent.is_dir():
        raise NotAFlowcoreDatabase(f"cannot create {path}: no directory {path.parent}")
    try:
        conn = sqlite3.connect(path, isolation_level=None, timeout=30.0, check_same_thread=False)
        conn.execute("PRAGMA busy_timeout = 30000")
        app = conn.execute("PRAGMA application_id").fetchone()[0]
        tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
    except sqlite3.DatabaseError as exc:
        raise NotAFlowcoreDatabase(f"{path} is not a flowcore database ({exc})") from None
    if app != APPLICATION_ID and tables:
        conn.close()
        raise NotAFlowcoreDatabase(f"{path} is not a flowcore database")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {'FULL' if durability == 'power-loss' else 'NORMAL'}")
    # The WAL is checkpointed at SQLite's default 1,000 pages, then written
    # again from its start: a commit that grows the file costs its fsync
    # more than one that overwrites it (a four-page commit 0.36-0.45 ms
    # against 0.21-0.27 ms here), far more than the checkpoints cost.
    conn.execute("PRAGMA foreign_keys = ON")
    try:
        migrate(conn)
    except BaseException:
        conn.close()
        raise
    return conn


def migrate(conn: sqlite3.Connection) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise NotAFlowcoreDatabase(
                f"database schema {version} is newer than this flowcore ({SCHEMA_VERSION})"
            )
        for number in range(version, SCHEMA_VERSION):
            for statement in MIGRATIONS[number]:
                conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
