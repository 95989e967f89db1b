"""The local host's store on PostgreSQL: its schema, its migrations, its write lock,
and what only a file has (specs/local.md, "PostgreSQL").

Every test here runs against the session's real PostgreSQL server
(tests/pg_server.py), each in a schema of its own.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from flowcore_handlers import Registry
from flowcore_local import LocalHost, NotAFlowcoreDatabase, db_label
from flowcore_local._db import SCHEMA_VERSION, connect
from flowcore_local._pg import PG_SCHEMA_VERSION, PgDatabase, connect_pg, lock_key
from tests.pg_server import PgServer

ROOT = Path(__file__).resolve().parents[3]

WAITS = """
flow: waits
tools: {echo: {class: readonly}}
steps:
  - {id: a, call_tool: {tool: echo, input: "${input}"}}
  - {id: go, await_signal: {signal: go}}
output: "${steps.a.output}"
"""

DONE = """
flow: done
tools: {echo: {class: readonly}}
steps:
  - {id: a, call_tool: {tool: echo, input: "${input}"}}
output: "${steps.a.output}"
"""

REGISTRY = Registry(tools={"echo": lambda call: call.input})


# SQLite's declared column types and the PostgreSQL types that hold the same values.
_TYPES = {"TEXT": "text", "INTEGER": "bigint", "BLOB": "bytea"}
# Columns whose SQLite declaration is not what they hold: ``resolved.how`` says
# TEXT and holds MessagePack bytes; ``run_metadata.value`` is untyped.
_HELD = {("resolved", "how"): "bytea", ("run_metadata", "value"): "text"}


def _columns_sqlite(path: Path) -> dict[str, dict[str, str]]:
    conn = connect(path)
    try:
        tables = [
            name
            for (name,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
            )
        ]
        return {
            t: {
                row[1]: _HELD.get((t, row[1])) or _TYPES[row[2]]
                for row in conn.execute(f"PRAGMA table_info({t})")
            }
            for t in tables
        }
    finally:
        conn.close()


def _columns_pg(url: str) -> dict[str, dict[str, str]]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT table_name, column_name, data_type FROM information_schema.columns"
            " WHERE table_schema = current_schema()"
        ).fetchall()
    found: dict[str, dict[str, str]] = {}
    for table, column, type_ in rows:
        found.setdefault(table, {})[column] = type_
    return found


def _indexes_sqlite(path: Path) -> set[str]:
    conn = connect(path)
    try:
        return {
            name
            for (name,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
            )
        }
    finally:
        conn.close()


def _indexes_pg(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        return {
            name
            for (name,) in conn.execute(
                "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()"
                " AND indexname NOT LIKE '%%_pkey'"
            )
        }


def test_the_schema_has_the_tables_columns_and_indexes_of_sqlites(
    tmp_path: Path, pg_url: str
) -> None:
    """A migration added to one database's list and not the other's fails here, and
    so does a column whose PostgreSQL type would not hold what SQLite's holds."""
    connect_pg(pg_url)[0].close()
    sqlite_cols = _columns_sqlite(tmp_path / "f.db")
    pg_cols = _columns_pg(pg_url)
    # Besides: the version table (SQLite keeps it in a pragma), and metadata's
    # number (SQLite's untyped value compares as one).
    assert set(pg_cols) == set(sqlite_cols) | {"flowcore_schema"}
    for table, columns in sqlite_cols.items():
        extra = {"num": "double precision"} if table == "run_metadata" else {}
        assert pg_cols[table] == columns | extra, table
    assert _indexes_pg(pg_url) == _indexes_sqlite(tmp_path / "f.db") | {"run_metadata_by_number"}
    assert (SCHEMA_VERSION, PG_SCHEMA_VERSION) == (12, 1)  # move both lists together


def test_the_schema_is_versioned_and_a_newer_one_is_refused(pg_url: str) -> None:
    conn, _ = connect_pg(pg_url)
    conn.close()
    with psycopg.connect(pg_url, autocommit=True) as raw:
        assert raw.execute("SELECT version FROM flowcore_schema").fetchall() == [
            (PG_SCHEMA_VERSION,)
        ]
    connect_pg(pg_url)[0].close()  # opened again: nothing to migrate
    with psycopg.connect(pg_url, autocommit=True) as raw:
        raw.execute("UPDATE flowcore_schema SET version = 99")
    with pytest.raises(NotAFlowcoreDatabase, match=r"database schema 99 is newer than this"):
        connect_pg(pg_url)


def test_a_schema_holding_other_tables_is_refused_and_left_as_it_was(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as raw:
        raw.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY)")
    with pytest.raises(NotAFlowcoreDatabase, match=r"holds tables and is not a flowcore database"):
        connect_pg(pg_url)
    with psycopg.connect(pg_url, autocommit=True) as raw:
        tables = raw.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
        ).fetchall()
    assert tables == [("invoices",)]


def test_processes_opening_a_new_database_at_once_migrate_it_once(pg_url: str) -> None:
    """Eight connections open an empty schema together: the migration lock lets
    one create it and the others find it made (without the lock they collide on
    CREATE TABLE)."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(8)

    def opening() -> None:
        try:
            barrier.wait()
            connect_pg(pg_url)[0].close()
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=opening) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


def test_the_write_lock_key_is_stable_and_names_the_database_and_schema() -> None:
    # blake2b of the names: the same in every process (never Python's salted hash()).
    assert lock_key("flowcore", "public", "write") == lock_key("flowcore", "public", "write")
    assert lock_key("flowcore", "public", "write") == 4757815695715151088
    keys = {
        lock_key("flowcore", "public", "write"),
        lock_key("flowcore", "tenant", "write"),
        lock_key("other", "public", "write"),
        lock_key("flowcore", "public", "migrate"),
    }
    assert len(keys) == 4
    assert PgDatabase("flowcore", "public").write_key == lock_key("flowcore", "public", "write")


def test_a_write_transaction_waits_for_another_connections(pg_url: str) -> None:
    """The single writer: while one connection's write transaction is open, another's
    waits for it to end (``PgDatabase.begin``), as SQLite's ``BEGIN IMMEDIATE`` does."""
    first, db = connect_pg(pg_url)
    second, _ = connect_pg(pg_url)
    db.begin(first)
    began = threading.Event()

    def other() -> None:
        db.begin(second)
        began.set()
        second.execute("COMMIT")

    thread = threading.Thread(target=other)
    thread.start()
    assert not began.wait(0.3)  # held by the first: the second waits
    first.execute("COMMIT")
    assert began.wait(30)
    thread.join()
    first.close()
    second.close()


def test_changes_moves_when_another_connection_commits(pg_url: str) -> None:
    """The worker skips rounds while ``changes()`` stays the same: it must move on
    another connection's commit, whatever that commit wrote."""

    async def main() -> None:
        async with LocalHost(pg_url, registry=REGISTRY) as host:
            store = host.store
            before = store.changes()
            assert store.changes() == before  # nobody wrote
            with psycopg.connect(pg_url, autocommit=True) as other:
                other.execute(
                    "INSERT INTO workers (worker_id, pid, hostname, heartbeat_ms)"
                    " VALUES ('w', 1, 'h', 0)"
                )
            assert store.changes() != before

    asyncio.run(main())


def test_a_run_on_postgres_url_forms_and_the_environment(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``postgresql://``, ``postgres://`` and ``$FLOWCORE_DB`` holding either open the
    same PostgreSQL store; the row types are those of the SQLite store."""

    async def start(db: str | None, run_id: str) -> Any:
        async with LocalHost(db, registry=REGISTRY) as host:
            assert host.store.db.name == "postgresql"
            await host.start(DONE, {"n": 1, "ok": True, "x": 1.5}, run_id)
            await host.work(until_settled=run_id)
            return await host.run(run_id)

    done = asyncio.run(start(pg_url, "a"))
    assert (done.status, done.output) == ("completed", {"n": 1, "ok": True, "x": 1.5})
    asyncio.run(start(pg_url.replace("postgresql://", "postgres://", 1), "b"))
    monkeypatch.setenv("FLOWCORE_DB", pg_url)
    asyncio.run(start(None, "c"))

    async def listed() -> list[str]:
        async with LocalHost(pg_url, registry=REGISTRY) as host:
            return [row.run_id for row in await host.runs()]

    assert asyncio.run(listed()) == ["a", "b", "c"]


def test_a_server_that_cannot_be_reached_is_a_clear_error(tmp_path: Path) -> None:
    url = f"postgresql://postgres@/flowcore?host={tmp_path}&port=1"

    async def main() -> None:
        async with LocalHost(url):
            pass

    with pytest.raises(NotAFlowcoreDatabase, match=r"cannot connect to PostgreSQL") as raised:
        asyncio.run(main())
    assert "password" not in str(raised.value)


def test_messages_show_a_url_without_its_password() -> None:
    assert db_label("postgresql://app:s3cret@db.internal:5432/flows?sslmode=require") == (
        "postgresql://app:***@db.internal:5432/flows?sslmode=require"
    )
    assert db_label("postgres://app@db/flows") == "postgres://app@db/flows"
    assert db_label(Path("runs.db")) == "runs.db"


def test_vacuum_rewrites_the_tables_and_durability_sets_synchronous_commit(pg_url: str) -> None:
    async def main() -> tuple[tuple[int, int], str, str, str]:
        async with LocalHost(pg_url, registry=REGISTRY) as host:
            for n in range(20):
                await host.start(WAITS, n, f"r{n}")
            sizes = await host.vacuum()
            strict = host.store.conn.execute("SHOW synchronous_commit").fetchone()[0]
        async with LocalHost(pg_url, durability="process-crash") as host:
            relaxed = host.store.conn.execute("SHOW synchronous_commit").fetchone()[0]
        # A server (here, the connection's options) that does not flush commits.
        async with LocalHost(pg_url + "%20-csynchronous_commit%3Doff") as host:
            mended = host.store.conn.execute("SHOW synchronous_commit").fetchone()[0]
        return sizes, strict, relaxed, mended

    (before, after), strict, relaxed, mended = asyncio.run(main())
    assert before > 0 and after > 0
    assert (strict, relaxed, mended) == ("on", "off", "on")


def test_the_sqlite_path_never_imports_psycopg(tmp_path: Path) -> None:
    code = (
        "import asyncio, sys\n"
        "from flowcore_local import LocalHost\n"
        "async def main():\n"
        f"    async with LocalHost({str(tmp_path / 'f.db')!r}) as host:\n"
        "        await host.runs()\n"
        "asyncio.run(main())\n"
        "assert 'psycopg' not in sys.modules, 'psycopg was imported'\n"
        "print('ok')\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "hosts")])}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.stdout.strip() == "ok", done.stderr
    assert sqlite3.connect(tmp_path / "f.db").execute("SELECT count(*) FROM runs").fetchone() == (
        0,
    )


def test_without_psycopg_a_postgres_url_says_which_extra_it_needs() -> None:
    code = (
        "import asyncio, sys\n"
        "sys.modules['psycopg'] = None  # as if it were not installed\n"
        "from flowcore_local import LocalHost, NotAFlowcoreDatabase\n"
        "async def main():\n"
        "    async with LocalHost('postgresql://app@db.internal/flows'):\n"
        "        pass\n"
        "try:\n"
        "    asyncio.run(main())\n"
        "except NotAFlowcoreDatabase as exc:\n"
        "    print(exc)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "hosts")])}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.stdout.startswith(
        "a PostgreSQL database needs psycopg (pip install 'flowcore[postgres]')"
    ), done.stdout + done.stderr


def test_the_command_line_takes_a_postgres_url(pg_url: str) -> None:
    from flowcore_cli.main import cli

    async def main() -> None:
        async with LocalHost(pg_url, registry=REGISTRY) as host:
            await host.start(WAITS, 1, "from-api")

    asyncio.run(main())
    done = CliRunner().invoke(cli, ["runs", "--db", pg_url, "--json"])
    assert done.exit_code == 0, done.output
    assert "from-api" in done.output


def test_db_migrate_creates_or_updates_the_schema_and_says_which(local_db: Path | str) -> None:
    """``flowcore db migrate``, on either store: a deployment migrates before its workers start."""
    from flowcore_cli.main import cli

    runner = CliRunner()
    first = runner.invoke(cli, ["db", "migrate", "--db", str(local_db)])
    again = runner.invoke(cli, ["db", "migrate", "--db", str(local_db)])
    version = PG_SCHEMA_VERSION if isinstance(local_db, str) else SCHEMA_VERSION
    assert (first.exit_code, again.exit_code) == (0, 0), first.output + again.output
    assert first.output.endswith(f": flowcore schema {version} (migrated from 0)\n")
    assert again.output.endswith(f": flowcore schema {version} (up to date)\n")


def test_db_migrate_refuses_what_is_not_a_flowcore_database(
    tmp_path: Path, pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from flowcore_cli.main import run

    with psycopg.connect(pg_url, autocommit=True) as raw:
        raw.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY)")
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE mine (x)").connection.commit()
    for db in (pg_url, str(other)):
        assert run(["db", "migrate", "--db", db]) == 2
        said = capsys.readouterr().err.splitlines()
        assert len(said) == 1 and "not a flowcore database" in said[0], said


def test_the_server_fixture_is_unix_socket_only_and_durable(pg_server: PgServer) -> None:
    with psycopg.connect(pg_server.url(), autocommit=True) as conn:
        settings: dict[str, str] = dict(
            conn.execute(
                "SELECT name, setting FROM pg_settings WHERE name IN"
                " ('listen_addresses', 'fsync', 'synchronous_commit')"
            ).fetchall()
        )
    assert settings == {"listen_addresses": "", "fsync": "on", "synchronous_commit": "on"}
