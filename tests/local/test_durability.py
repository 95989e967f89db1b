"""The local host's durability modes (specs/local.md §2): what each commit survives.

The promise both make, a killed process loses nothing, is tested with real
SIGKILLs in test_crash.py for each mode; here, that each mode sets what it says.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from flowcore_local import DURABILITY, HostError, LocalHost

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


def test_the_command_takes_the_mode_from_its_option_or_the_environment(tmp_path: Path) -> None:
    flowcore = str(Path(sys.executable).with_name("flowcore"))
    bad = subprocess.run(
        [flowcore, "worker", "--until-idle", "--db", str(tmp_path / "d.db"), "--durability", "x"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert bad.returncode == 2 and "power-loss" in bad.stderr and "process-crash" in bad.stderr
    ok = subprocess.run(
        [flowcore, "worker", "--until-idle", "--db", str(tmp_path / "d.db")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"FLOWCORE_DURABILITY": "process-crash", "PATH": "/usr/bin:/bin"},
    )
    assert ok.returncode == 0, ok.stderr
