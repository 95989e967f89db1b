"""The local host's store on PostgreSQL: connecting, the schema, the write lock.

The store (``_store``) is one body of SQL for both databases; what differs is
here, behind the same small surface as SQLite's (``_db.SqliteDatabase``):
``PgConnection`` gives the store the ``execute``/``executemany``/fetch/
``total_changes`` surface of a ``sqlite3.Connection`` (``?`` placeholders
become psycopg's), and ``PgDatabase`` says how a write transaction begins, how
a connection sees that others committed, and how a read snapshot opens.

A write transaction takes one transaction-scoped advisory lock keyed by the
database and schema (``PgDatabase.begin``): writers take turns exactly as
SQLite's single writer makes them, which every store method relies on. It is
the one place to change for row locks. Other connections' commits are seen
through ``pg_current_wal_insert_lsn()``, which moves on every commit of the
server (and on other WAL traffic: then the cache checks a run's version once
more than it needed to, never less).

Every write transaction that wrote a row, but a heartbeat, ends with
``pg_notify`` on a channel named for the database and schema
(``channel_name``): delivered at commit, one per transaction. A worker listens on its own connection
(``PgListener``) and an idle worker's sleep ends when one arrives, so the
poll interval is only a fallback.

The schema is versioned in the table ``flowcore_schema`` and migrated when a
connection opens, under a session advisory lock so that processes starting
at once do not race. A schema holding other tables but not flowcore's is
refused, as a foreign SQLite file is. This module imports psycopg; nothing
imports this module unless a ``postgresql://`` URL is opened.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import msgspec
import psycopg
from psycopg import adapt, postgres, sql
from psycopg.pq import TransactionStatus

from ._db import Connection, NotAFlowcoreDatabase

__all__ = [
    "PG_MIGRATIONS",
    "PG_SCHEMA_VERSION",
    "PgConnection",
    "PgDatabase",
    "PgListener",
    "channel_name",
    "connect_pg",
]

# The schema on PostgreSQL, by version: the same tables, columns and indexes
# as SQLite's (``_db.MIGRATIONS``, its version 12 is this one's 1), with
# milliseconds and counters BIGINT and blobs BYTEA. A migration added there is
# added here too (tests/local/store/test_pg_store.py compares the two).
PG_MIGRATIONS: list[list[str]] = [
    # 1: the schema of SQLite's version 12
    [
        """CREATE TABLE flows (
            spec_hash TEXT PRIMARY KEY,
            flow_id TEXT NOT NULL,
            version BIGINT NOT NULL,
            source TEXT NOT NULL,
            spec TEXT NOT NULL,
            added_ms BIGINT NOT NULL
        )""",
        "CREATE INDEX flows_by_id ON flows (flow_id, added_ms)",
        """CREATE TABLE runs (
            run_id TEXT PRIMARY KEY,
            flow_id TEXT NOT NULL,
            spec_hash TEXT NOT NULL REFERENCES flows (spec_hash),
            parent_run TEXT,
            parent_key TEXT,
            depth BIGINT NOT NULL,
            status TEXT NOT NULL,
            input TEXT NOT NULL,
            budget TEXT,
            output TEXT,
            error TEXT,
            tools TEXT,
            created_ms BIGINT NOT NULL,
            updated_ms BIGINT NOT NULL,
            next_index BIGINT NOT NULL,
            state BYTEA,
            principal TEXT,
            saved_index BIGINT NOT NULL DEFAULT 0,
            version BIGINT NOT NULL DEFAULT 0,
            started_by TEXT,
            priority BIGINT NOT NULL DEFAULT 3,
            dedup_key TEXT
        )""",
        "CREATE INDEX runs_by_status ON runs (status)",
        "CREATE INDEX runs_by_parent ON runs (parent_run)",
        "CREATE INDEX runs_by_created ON runs (created_ms, run_id)",
        "CREATE UNIQUE INDEX runs_dedup ON runs (dedup_key)"
        " WHERE dedup_key IS NOT NULL AND status = 'running'",
        """CREATE TABLE log (
            run_id TEXT NOT NULL,
            idx BIGINT NOT NULL,
            type TEXT NOT NULL,
            at BIGINT NOT NULL,
            data TEXT NOT NULL,
            PRIMARY KEY (run_id, idx)
        )""",
        """CREATE TABLE results (
            run_id TEXT NOT NULL,
            name TEXT NOT NULL,
            record BYTEA NOT NULL,
            PRIMARY KEY (run_id, name)
        )""",
        """CREATE TABLE report (
            run_id TEXT NOT NULL,
            n BIGINT NOT NULL,
            row BYTEA NOT NULL,
            PRIMARY KEY (run_id, n)
        )""",
        # ``how`` is MessagePack (SQLite's column says TEXT and holds the bytes as
        # they are; PostgreSQL would store a bytea's text form in a TEXT column).
        """CREATE TABLE resolved (
            run_id TEXT NOT NULL,
            key TEXT NOT NULL,
            how BYTEA NOT NULL,
            PRIMARY KEY (run_id, key)
        )""",
        """CREATE TABLE dead_letters (
            run_id TEXT NOT NULL,
            key TEXT NOT NULL,
            kind TEXT NOT NULL,
            dispatches BIGINT NOT NULL,
            note TEXT NOT NULL,
            at_ms BIGINT NOT NULL,
            PRIMARY KEY (run_id, key)
        )""",
        """CREATE TABLE workers (
            worker_id TEXT PRIMARY KEY,
            pid BIGINT NOT NULL,
            hostname TEXT NOT NULL,
            heartbeat_ms BIGINT NOT NULL,
            only_run TEXT
        )""",
        """CREATE TABLE failures (
            run_id TEXT NOT NULL,
            key TEXT NOT NULL,
            type TEXT NOT NULL,
            message TEXT NOT NULL,
            traceback TEXT,
            at_ms BIGINT NOT NULL,
            PRIMARY KEY (run_id, key)
        )""",
        """CREATE TABLE resumes (
            run_id TEXT NOT NULL,
            n BIGINT NOT NULL,
            at_ms BIGINT NOT NULL,
            from_index BIGINT NOT NULL,
            key TEXT NOT NULL,
            error TEXT,
            tools_before TEXT,
            tools_after TEXT,
            PRIMARY KEY (run_id, n)
        )""",
        """CREATE TABLE log_archive (
            run_id TEXT NOT NULL,
            resume BIGINT NOT NULL,
            idx BIGINT NOT NULL,
            type TEXT NOT NULL,
            at BIGINT NOT NULL,
            data TEXT NOT NULL,
            PRIMARY KEY (run_id, resume, idx)
        )""",
        """CREATE TABLE schedules (
            name TEXT PRIMARY KEY,
            flow_id TEXT NOT NULL,
            spec_hash TEXT NOT NULL REFERENCES flows (spec_hash),
            definition TEXT NOT NULL,
            declared BIGINT NOT NULL,
            tools TEXT,
            paused BIGINT NOT NULL,
            note TEXT NOT NULL,
            considered_ms BIGINT NOT NULL,
            buffered_ms BIGINT,
            remaining BIGINT,
            triggers BIGINT NOT NULL DEFAULT 0,
            next_ms BIGINT,
            created_ms BIGINT NOT NULL,
            updated_ms BIGINT NOT NULL,
            owner TEXT
        )""",
        "CREATE INDEX schedules_by_next ON schedules (next_ms)",
        """CREATE TABLE schedule_actions (
            name TEXT NOT NULL,
            n BIGINT NOT NULL,
            at_ms BIGINT NOT NULL,
            action TEXT NOT NULL,
            slot_ms BIGINT,
            through_ms BIGINT,
            run_id TEXT,
            why TEXT,
            PRIMARY KEY (name, n)
        )""",
        """CREATE TABLE schedule_runs (
            name TEXT NOT NULL,
            run_id TEXT NOT NULL,
            PRIMARY KEY (name, run_id)
        )""",
        """CREATE TABLE scheduled_calls (
            run_id TEXT NOT NULL,
            id TEXT NOT NULL,
            tool TEXT NOT NULL,
            input TEXT NOT NULL,
            status TEXT NOT NULL,
            created_ms BIGINT NOT NULL,
            due_ms BIGINT NOT NULL,
            attempts BIGINT NOT NULL,
            finished_ms BIGINT,
            error TEXT,
            outside BIGINT NOT NULL,
            recurrence TEXT,
            PRIMARY KEY (run_id, id)
        )""",
        "CREATE INDEX scheduled_calls_by_status ON scheduled_calls (status, due_ms)",
        "CREATE INDEX scheduled_calls_by_tool ON scheduled_calls (tool)",
        "CREATE INDEX scheduled_calls_finished ON scheduled_calls (run_id, finished_ms)",
        """CREATE TABLE outbox (
            run_id TEXT NOT NULL,
            key TEXT NOT NULL,
            kind TEXT NOT NULL,
            effect BYTEA NOT NULL,
            status TEXT NOT NULL,
            due_ms BIGINT,
            exec_class TEXT NOT NULL,
            dispatches BIGINT NOT NULL DEFAULT 0,
            lease_owner TEXT,
            lease_until BIGINT,
            note TEXT,
            seq BIGINT NOT NULL,
            priority BIGINT NOT NULL DEFAULT 3,
            queued_ms BIGINT,
            tool TEXT,
            PRIMARY KEY (run_id, key)
        )""",
        "CREATE INDEX outbox_timers ON outbox (due_ms) WHERE status = 'timer'",
        "CREATE INDEX outbox_ready ON outbox (kind) WHERE status = 'ready'",
        "CREATE INDEX outbox_queue ON outbox (priority, queued_ms, kind, tool)"
        " WHERE status = 'ready'",
        "CREATE INDEX outbox_tools ON outbox (tool, status) WHERE tool IS NOT NULL",
        # ``value`` holds the text of the value (a boolean as 0 or 1); ``num``
        # the number a numeric or boolean field compares as (SQLite's ``value``
        # is untyped and compares as either).
        """CREATE TABLE run_metadata (
            run_id TEXT NOT NULL,
            name TEXT NOT NULL,
            kind TEXT NOT NULL,
            value TEXT NOT NULL,
            num DOUBLE PRECISION GENERATED ALWAYS AS (CASE WHEN kind IN
                ('integer', 'number', 'boolean') THEN value::double precision END) STORED,
            PRIMARY KEY (run_id, name)
        )""",
        "CREATE INDEX run_metadata_by_value ON run_metadata (name, value)",
        "CREATE INDEX run_metadata_by_number ON run_metadata (name, num)",
        """CREATE TABLE tool_starts (
            tool TEXT NOT NULL,
            at_ms BIGINT NOT NULL
        )""",
        "CREATE INDEX tool_starts_by_tool ON tool_starts (tool, at_ms)",
        """CREATE TABLE progress (
            run_id TEXT NOT NULL,
            idx BIGINT NOT NULL,
            key TEXT NOT NULL,
            step TEXT,
            at BIGINT NOT NULL,
            size BIGINT NOT NULL,
            before BIGINT NOT NULL,
            data TEXT NOT NULL,
            PRIMARY KEY (run_id, idx)
        )""",
        "CREATE INDEX progress_by_bytes ON progress (run_id, before)",
    ],
]
PG_SCHEMA_VERSION = len(PG_MIGRATIONS)
_VERSION_TABLE = "flowcore_schema"


def lock_key(database: str, schema: str, purpose: str) -> int:
    """A stable signed 64-bit advisory lock key for ``purpose`` in one database and schema."""
    digest = hashlib.blake2b(
        f"flowcore\0{purpose}\0{database}\0{schema}".encode(), digest_size=8
    ).digest()
    return int.from_bytes(digest, "big", signed=True)


def channel_name(database: str, schema: str) -> str:
    """The notification channel of one database and schema: a stable identifier
    of 33 characters (PostgreSQL's limit is 63 bytes, and schema names may be longer)."""
    digest = hashlib.blake2b(
        f"flowcore\0notify\0{database}\0{schema}".encode(), digest_size=12
    ).hexdigest()
    return f"flowcore_{digest}"


class PgListener:
    """A connection of its own that LISTENs on the store's channel and does
    nothing else: its socket turns readable only when a notification arrives."""

    def __init__(self, raw: psycopg.Connection[tuple[Any, ...]], ignore_pid: int) -> None:
        self.raw = raw
        self.ignore_pid = ignore_pid  # the worker's own store connection: it knows its writes

    def fileno(self) -> int:
        return self.raw.fileno()

    @property
    def closed(self) -> bool:
        return self.raw.closed

    def heard(self) -> int:
        """Consume what the socket holds, without blocking: the number of
        notifications from connections other than ``ignore_pid``.

        A connection lost (the server restarted, the backend was terminated)
        is closed and counts as one: the worker runs a round and polls from
        then on; what went unheard, its rounds still see."""
        if self.raw.closed:
            return 0
        pgconn = self.raw.pgconn
        count = 0
        try:
            pgconn.consume_input()
            while (note := pgconn.notifies()) is not None:
                if note.be_pid != self.ignore_pid:
                    count += 1
        except psycopg.Error:
            self.raw.close()
            return 1
        return count

    def close(self) -> None:
        self.raw.close()


class _BoolAsInt(adapt.Dumper):
    """Python booleans as the 0 and 1 the schema's integer columns hold (as on SQLite)."""

    oid = postgres.types["int8"].oid

    def dump(self, obj: Any) -> bytes:
        return b"1" if obj else b"0"


_SQL: dict[str, str] = {}


def _pg_sql(sql: str) -> str:
    """The store's SQL with psycopg's placeholders (``?`` -> ``%s``, ``%`` -> ``%%``)."""
    out = _SQL.get(sql)
    if out is None:
        out = _SQL[sql] = sql.replace("%", "%%").replace("?", "%s")
    return out


class PgConnection:
    """A psycopg connection (autocommit: the store says BEGIN and COMMIT itself) with
    the surface of ``sqlite3.Connection`` that the store uses."""

    def __init__(self, raw: psycopg.Connection[tuple[Any, ...]]) -> None:
        self.raw = raw
        self.total_changes = 0  # rows this connection inserted, updated or deleted

    def _count(self, cur: psycopg.Cursor[tuple[Any, ...]]) -> None:
        status = cur.statusmessage or ""
        if status.startswith(("INSERT", "UPDATE", "DELETE")) and cur.rowcount > 0:
            self.total_changes += cur.rowcount

    def execute(self, sql: str, params: Sequence[Any] = (), /) -> psycopg.Cursor[tuple[Any, ...]]:
        if params:
            cur = self.raw.execute(_pg_sql(sql), list(params))
        else:
            cur = self.raw.execute(sql.encode())  # no placeholders: the text as it is
        self._count(cur)
        return cur

    def executemany(
        self, sql: str, rows: Sequence[Sequence[Any]], /
    ) -> psycopg.Cursor[tuple[Any, ...]]:
        cur = self.raw.cursor()
        if rows:
            cur.executemany(_pg_sql(sql), [list(row) for row in rows])
            self._count(cur)
        return cur

    @property
    def in_transaction(self) -> bool:
        return self.raw.info.transaction_status != TransactionStatus.IDLE

    def close(self) -> None:
        self.raw.close()


class PgDatabase:
    """What the store does differently on PostgreSQL (see ``_db.SqliteDatabase``)."""

    name = "postgresql"
    # The column a metadata filter compares numbers and booleans with.
    metadata_number = "num"
    # A read transaction whose reads all see one state of the database.
    begin_read = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"

    def __init__(
        self,
        database: str,
        schema: str,
        url: str = "",
        conn: psycopg.Connection[tuple[Any, ...]] | None = None,
    ) -> None:
        self.database = database
        self.schema = schema
        self.write_key = lock_key(database, schema, "write")
        self.migrated_from = PG_SCHEMA_VERSION  # the schema's version when it was opened
        self.channel = channel_name(database, schema)
        self.url = url  # where ``listen`` connects (the store's own connection's URL)
        self.conn = conn

    # Transactions that lock the rows they write run side by side.
    row_locks = True
    for_update = " FOR UPDATE"
    # A claim's rows: those another claim holds are passed over, not waited for.
    skip_locked = " FOR UPDATE OF o SKIP LOCKED"
    contention: tuple[type[Exception], ...] = (
        psycopg.errors.UniqueViolation,
        psycopg.errors.DeadlockDetected,
        psycopg.errors.SerializationFailure,
    )

    def begin(self, conn: Connection, shared: bool = False) -> None:
        """Begin a write transaction holding the store's write lock until it ends.

        One advisory lock for the whole schema, in two modes. ``shared``: held
        with any number of other shared transactions, each of which locks the
        rows it writes (a worker's claims and its commits of its runs' events,
        the hot path); exclusive: the only writer, as on SQLite (everything
        else: schedules, recovery, operators' commands), which the store's
        other methods rely on.
        """
        conn.execute("BEGIN")
        lock = "pg_advisory_xact_lock_shared" if shared else "pg_advisory_xact_lock"
        try:
            conn.execute(f"SELECT {lock}(?)", (self.write_key,))
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def lock_tools(self, conn: Connection, tools: list[str]) -> None:
        """Lock each limited tool until the transaction ends, in one order: two
        claims never count the same tool's room at once."""
        for tool in sorted(tools):
            key = lock_key(self.database, self.schema, f"tool\0{tool}")
            conn.execute("SELECT pg_advisory_xact_lock(?)", (key,))

    def data_version(self, conn: Connection) -> int:
        """A number that moves whenever any connection commits (and our own
        commits move it too: only ever more checks, never fewer)."""
        row = conn.execute("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn").fetchone()
        return int(row[0])

    def notify(self, conn: Connection) -> None:
        """Queue a notification on the schema's channel, sent when the
        transaction commits (and never when it rolls back); several in one
        transaction are one."""
        conn.execute("SELECT pg_notify(?, '')", (self.channel,))

    def listen(self) -> PgListener:
        """A new connection listening on the schema's channel (a worker's, for its sleep)."""
        try:
            raw = psycopg.connect(self.url, autocommit=True)
        except psycopg.Error as exc:
            raise NotAFlowcoreDatabase(
                f"cannot connect to PostgreSQL at {_safe_url(self.url)}"
                f" to listen for work: {str(exc).strip()}"
            ) from None
        try:
            raw.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
        except BaseException:
            raw.close()
            raise
        own = self.conn.info.backend_pid if self.conn is not None else 0
        return PgListener(raw, own)

    def indexed_by(self, index: str) -> str:
        """Nothing: PostgreSQL's planner takes no index hints (SQLite's ``INDEXED BY``)."""
        return ""

    def metadata_value(self, kind: str, value: str) -> Any:
        """A ``run_metadata.value`` as the run holds it: the column holds its text
        (a number's JSON, a boolean's 0 or 1)."""
        if kind == "boolean":
            return value == "1"
        return msgspec.json.decode(value) if kind in ("integer", "number") else value


def connect_pg(url: str, durability: str = "power-loss") -> tuple[PgConnection, PgDatabase]:
    """Connect to the database ``url`` names and migrate its flowcore schema.

    ``durability``: ``power-loss`` commits as the server is configured
    (``synchronous_commit`` on by default: each commit flushed to its WAL; a
    server configured with it off has it turned on for this connection);
    ``process-crash`` turns ``synchronous_commit`` off for this connection: a
    killed flowcore process loses nothing, a crash of the server or its machine
    may lose the last commits (never the database's consistency).
    """
    try:
        raw = psycopg.connect(url, autocommit=True)
    except psycopg.Error as exc:
        raise NotAFlowcoreDatabase(
            f"cannot connect to PostgreSQL at {_safe_url(url)}: {str(exc).strip()}"
        ) from None
    raw.adapters.register_dumper(bool, _BoolAsInt)
    try:
        names = raw.execute("SELECT current_database(), current_schema()").fetchone()
        database, schema = names if names is not None else (None, None)
        if schema is None:
            raise NotAFlowcoreDatabase(
                f"{_safe_url(url)}: no schema to create flowcore's tables in"
                " (the search_path names none that exists)"
            )
        if durability == "process-crash":
            raw.execute("SET synchronous_commit = off")
        elif _setting(raw, "synchronous_commit") == "off":  # the server's own: not enough
            raw.execute("SET synchronous_commit = on")
        conn = PgConnection(raw)
        db = PgDatabase(str(database), str(schema), url, raw)
        migrate_pg(conn, db)
    except BaseException:
        raw.close()
        raise
    return conn, db


def _setting(raw: psycopg.Connection[tuple[Any, ...]], name: str) -> str:
    row = raw.execute("SELECT current_setting(%s)", [name]).fetchone()
    return "" if row is None else str(row[0])


def _safe_url(url: str) -> str:
    """The URL without its password, for messages."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.Error:
        return "the database URL"
    where = info.get("host") or "localhost"
    return f"postgresql database {info.get('dbname') or info.get('user') or ''!s} on {where!s}"


def migrate_pg(conn: PgConnection, db: PgDatabase) -> None:
    """Create or bring up to date flowcore's schema, one process at a time
    (``db.migrated_from``: the version it had)."""
    key = lock_key(db.database, db.schema, "migrate")
    conn.execute("SELECT pg_advisory_lock(?)", (key,))
    try:
        conn.execute("BEGIN")
        try:
            _migrate(conn, db)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    finally:
        conn.execute("SELECT pg_advisory_unlock(?)", (key,))


def _migrate(conn: PgConnection, db: PgDatabase) -> None:
    tables = {
        row[0]
        for row in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = ?",
            (db.schema,),
        ).fetchall()
    }
    if _VERSION_TABLE in tables:
        row = conn.execute(f"SELECT version FROM {_VERSION_TABLE}").fetchone()
        version = 0 if row is None else int(row[0])
    elif tables:
        raise NotAFlowcoreDatabase(
            f"schema {db.schema!r} of database {db.database!r} holds tables and is not a"
            " flowcore database (no flowcore_schema table): name an empty schema"
            " (options=-csearch_path=...) or another database"
        )
    else:
        conn.execute(f"CREATE TABLE {_VERSION_TABLE} (version BIGINT NOT NULL)")
        conn.execute(f"INSERT INTO {_VERSION_TABLE} (version) VALUES (0)")
        version = 0
    if version > PG_SCHEMA_VERSION:
        raise NotAFlowcoreDatabase(
            f"database schema {version} is newer than this flowcore ({PG_SCHEMA_VERSION})"
        )
    db.migrated_from = version
    if version == PG_SCHEMA_VERSION:
        return  # nothing written: opening a current database commits nothing
    for number in range(version, PG_SCHEMA_VERSION):
        for statement in PG_MIGRATIONS[number]:
            conn.execute(statement)
    conn.execute(f"UPDATE {_VERSION_TABLE} SET version = ?", (PG_SCHEMA_VERSION,))
