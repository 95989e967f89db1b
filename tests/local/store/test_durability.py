"""The local host's durability modes (specs/local.md §2): what each commit survives.

The promise both make, a killed process loses nothing, is tested with real
SIGKILLs in test_crash.py for each mode; here, that each mode sets what it says.
"""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from flowcore_cli.main import run as run_in_process
from flowcore_local import DURABILITY, HostError, LocalHost, _db
from flowcore_local._db import Durability

SYNCHRONOUS = {"power-loss": 2, "process-crash": 1}  # SQLite's FULL and NORMAL


@pytest.mark.parametrize("durability", DURABILITY)
def test_each_mode_sets_its_synchronous_level(tmp_path: Path, durability: str) -> None:
    async def level() -> int:
        async with LocalHost(tmp_path / "d.db", durability=durability) as host:  # type: ignore[arg-type]
            found: int = host.store.conn.execute("PRAGMA synchronous").fetchone()[0]
            journal = host.store.conn.execute("PRAGMA journal_mode").fetchone()[0]
            assert journal == "wal"
            return found

    assert asyncio.run(level()) == SYNCHRONOUS[durability]


def test_an_unknown_mode_is_refused_naming_the_modes(tmp_path: Path) -> None:
    with pytest.raises(HostError, match="durability must be one of power-loss, process-crash"):
        LocalHost(tmp_path / "d.db", durability="sometimes")  # type: ignore[arg-type]


def test_the_command_refuses_an_unknown_mode_naming_the_modes(tmp_path: Path) -> None:
    flowcore = str(Path(sys.executable).with_name("flowcore"))
    bad = subprocess.run(
        [flowcore, "worker", "--until-idle", "--db", str(tmp_path / "d.db"), "--durability", "x"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert bad.returncode == 2 and "power-loss" in bad.stderr and "process-crash" in bad.stderr


@pytest.mark.parametrize(
    ("env", "option", "expected"),
    [
        ("process-crash", None, "process-crash"),
        ("power-loss", None, "power-loss"),
        (None, None, "power-loss"),
        ("process-crash", "power-loss", "power-loss"),  # the option wins
    ],
)
def test_the_worker_opens_its_database_in_the_mode_it_is_given(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    env: str | None,
    option: str | None,
    expected: str,
) -> None:
    """The synchronous level in effect on the connection the command opens, not just its
    exit code: a command that ignored ``$FLOWCORE_DURABILITY`` would open at FULL."""
    levels: list[int] = []
    real = _db.connect

    def connect(path: str | Path, durability: Durability = "power-loss") -> sqlite3.Connection:
        conn = real(path, durability)
        levels.append(conn.execute("PRAGMA synchronous").fetchone()[0])
        return conn

    monkeypatch.setattr(_db, "connect", connect)
    if env is None:
        monkeypatch.delenv("FLOWCORE_DURABILITY", raising=False)
    else:
        monkeypatch.setenv("FLOWCORE_DURABILITY", env)
    args = ["worker", "--until-idle", "--db", str(tmp_path / "d.db")]
    args += ["--durability", option] if option else []
    assert run_in_process(args) == 0
    assert levels and set(levels) == {SYNCHRONOUS[expected]}
