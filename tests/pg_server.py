"""A throwaway PostgreSQL server for the tests of the local host's PostgreSQL store.

``pg_server`` (one per test session, so one per pytest-xdist worker) runs
``initdb`` and ``pg_ctl`` from the installed binaries in a temporary directory:
Unix socket only (``listen_addresses=''``), ``fsync`` and ``synchronous_commit``
left on, as a durability store needs. ``pg_url`` gives each test a schema of
its own in it (created in a few milliseconds), as the URL a
``LocalHost`` takes. Without the binaries, or when the server cannot start, the
tests that ask for it are skipped saying why; under ``CI`` that skip fails the
run (``CI_SUITES`` in tests/conftest.py names this file).
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest

_USER = "postgres"  # the cluster's superuser, and the system user initdb runs as when root


def _bindir() -> Path | None:
    """Where ``initdb`` and ``pg_ctl`` are: ``pg_config --bindir``, else Debian's layout."""
    found: list[Path] = []
    pg_config = shutil.which("pg_config")
    if pg_config is not None:
        try:
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, check=True, timeout=10
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            out = ""
        if out:
            found.append(Path(out))
    found += sorted(
        (Path(p) for p in glob.glob("/usr/lib/postgresql/*/bin")),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
        reverse=True,
    )
    for path in found:
        if (path / "initdb").is_file() and (path / "pg_ctl").is_file():
            return path
    return None


@dataclass(frozen=True)
class PgServer:
    socket_dir: Path
    port: int

    def url(self, schema: str | None = None, database: str = "postgres") -> str:
        """A libpq URL of the server; with ``schema``, the connections' ``search_path``."""
        url = (
            f"postgresql://{_USER}@/{database}?host={quote(str(self.socket_dir))}&port={self.port}"
        )
        if schema is not None:
            url += "&options=" + quote(f"-csearch_path={schema}")
        return url


def _as_postgres(argv: list[str]) -> list[str]:
    # initdb refuses to run as root: the cluster then belongs to the postgres user.
    if os.geteuid() == 0:
        runuser = shutil.which("runuser")
        if runuser is None:
            pytest.skip("PostgreSQL: running as root and no runuser to run initdb as postgres")
        return [runuser, "-u", _USER, "--", *argv]
    return argv


def _start() -> Iterator[PgServer]:
    bindir = _bindir()
    if bindir is None:
        pytest.skip("PostgreSQL: no initdb/pg_ctl (pg_config --bindir, /usr/lib/postgresql/*/bin)")
    root = Path(tempfile.mkdtemp(prefix="flowcore-pg-"))
    data, sock = root / "data", root / "sock"
    sock.mkdir()
    if os.geteuid() == 0:
        try:
            shutil.chown(root, _USER)
            shutil.chown(sock, _USER)
        except LookupError:
            shutil.rmtree(root, ignore_errors=True)
            pytest.skip(f"PostgreSQL: running as root and no {_USER} user to run initdb as")
    port = 5432 + (os.getpid() % 20000)  # names the socket file only: no TCP
    started = False
    try:
        # --no-sync: initdb's own files are not flushed (the server runs with
        # fsync on; a crash of the machine loses a throwaway cluster)
        initdb = [str(bindir / "initdb"), "-D", str(data), "-U", _USER, "-A", "trust"]
        init = subprocess.run(
            _as_postgres([*initdb, "-E", "UTF8", "--no-sync"]),
            capture_output=True,
            text=True,
            timeout=120,
        )
        if init.returncode != 0:
            pytest.skip(f"PostgreSQL: initdb failed: {init.stderr.strip()[-400:]}")
        options = f"-c listen_addresses='' -k {sock} -p {port} -c max_connections=200"
        ctl = subprocess.run(
            _as_postgres(
                [
                    str(bindir / "pg_ctl"),
                    "-D",
                    str(data),
                    "-o",
                    options,
                    "-l",
                    str(root / "log"),
                    "-w",
                    "start",
                ]
            ),
            capture_output=True,
            text=True,
            timeout=120,
        )
        if ctl.returncode != 0:
            tail = (root / "log").read_text()[-400:] if (root / "log").exists() else ctl.stderr
            pytest.skip(f"PostgreSQL: the server did not start: {tail.strip()}")
        started = True
        yield PgServer(sock, port)
    finally:
        if started:
            subprocess.run(
                # immediate: no shutdown checkpoint of a cluster about to be deleted
                _as_postgres(
                    [str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"]
                ),
                capture_output=True,
                timeout=120,
            )
        # Thousands of files (a schema per test): removed by a process of its own
        # rather than holding up the end of the session for seconds.
        subprocess.Popen(
            ["rm", "-rf", str(root)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )


#: The same server outside pytest (benchmarks/bench_local_host.py ``--store
#: postgres``): a context manager; where it cannot start, pytest's skip
#: exception (``pytest.skip.Exception``) says why.
throwaway_server = contextlib.contextmanager(_start)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip("PostgreSQL: psycopg is not installed (the postgres extra)")
    yield from _start()


_schemas = {"n": 0}


@pytest.fixture
def pg_url(pg_server: PgServer) -> str:
    """A URL of the test server whose connections see a new, empty schema (left
    there: dropping it would cost more than creating it, and the whole cluster is
    deleted at the end of the session)."""
    import psycopg

    _schemas["n"] += 1
    schema = f"t{os.getpid()}_{_schemas['n']}"
    with psycopg.connect(pg_server.url(), autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    return pg_server.url(schema)


@pytest.fixture(params=["sqlite", "postgres"])
def local_db(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    """The database of a test's ``LocalHost``, once on each store: a SQLite file
    in ``tmp_path``, then a new schema of the session's PostgreSQL server."""
    if request.param == "sqlite":
        return tmp_path / "flowcore.db"
    url: str = request.getfixturevalue("pg_url")
    return url
