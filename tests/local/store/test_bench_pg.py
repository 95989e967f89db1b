"""The PostgreSQL measurements of benchmarks/bench_local_host.py, run small on
the test server: never timed, only that each figure is there and is what it
says (``--store postgres`` prints them)."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.pg_server import PgServer

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks"))
import bench_local_host  # type: ignore[import-not-found]  # noqa: E402


def test_worker_processes_on_postgres_give_their_rates_and_every_process_cpu(
    pg_url: str, tmp_path: Path
) -> None:
    figures = bench_local_host.bench_workers(pg_url, 2, runs=4, steps=5, where=tmp_path)
    wall, events, elapsed, server, *cpu = figures
    assert wall > 0 and events > 0 and elapsed > 0
    assert server >= 0
    # Each worker is a Python process that imported flowcore: CPU seconds, not zero.
    assert len(cpu) == 2 and all(c > 0 for c in cpu), cpu


def test_the_server_cpu_counts_its_live_backends(pg_server: PgServer) -> None:
    import psycopg

    url = pg_server.url()
    before = bench_local_host.server_cpu(url)
    with psycopg.connect(url) as conn:
        conn.execute("SELECT count(*) FROM generate_series(1, 3000000)").fetchone()
        during = bench_local_host.server_cpu(url)
    assert during > before


def test_the_floor_is_single_row_commits_on_the_server(pg_url: str) -> None:
    import psycopg

    assert bench_local_host.pg_floor(pg_url, 5) > 0
    with psycopg.connect(pg_url) as conn:
        row = conn.execute("SELECT count(*) FROM floor").fetchone()
    assert row == (5,)
