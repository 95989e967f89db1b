"""Workers on PostgreSQL write side by side (specs/local.md §20): a claim and a
commit of a worker's own runs hold the write lock *shared* and lock the rows
they write, claims pass over the rows another claim holds, a tool's room is
counted under the tool's own lock, and anything else still writes alone.

Each test holds one connection's transaction open and watches what another
connection's does meanwhile: whether it goes through (nothing makes it wait)
or waits until the first ends (``lock_timeout`` turns a wait that should not
happen into an error instead of a hang).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from flowcore import EffectSucceeded
from flowcore_handlers import Registry
from flowcore_handlers._limits import ToolLimit
from flowcore_local import LocalHost
from flowcore_local._store import Conflict, Store
from tests.local.worker.test_pg_wake import CHARGES

FLOW = CHARGES  # two calls of one tool, one run
KEYS = ["each[0]/pay#1", "each[1]/pay#1"]
NOW = 1_800_000_000_000
WAITED_S = 0.3  # long enough for a transaction that does not wait to be done


@contextmanager
def stores(pg_url: str, tmp_path: Path, runs: list[str], **options: Any) -> Iterator[list[Store]]:
    """Two hosts (two connections) on one database holding ``runs`` of FLOW,
    their calls ``ready`` (no worker ran)."""
    spec = tmp_path / "pair.yaml"
    spec.write_text(FLOW)
    loop = asyncio.new_event_loop()
    hosts = [LocalHost(pg_url, registry=Registry(tools={}), **options) for _ in range(2)]
    try:
        for host in hosts:
            loop.run_until_complete(host.open())
        for run_id in runs:
            loop.run_until_complete(hosts[0].start(spec, None, run_id))
        for host in hosts:
            host.store.conn.execute("SET lock_timeout = '20s'")
        yield [host.store for host in hosts]
    finally:
        for host in hosts:
            loop.run_until_complete(host.close())
        loop.close()


def in_thread(work: Any) -> tuple[threading.Thread, list[Any]]:
    """Run ``work`` on a thread; its result (or exception) lands in the list."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(work())
        except Exception as exc:  # seen by the test
            out.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, out


def test_shared_transactions_run_side_by_side_and_an_exclusive_one_alone(
    pg_url: str, tmp_path: Path
) -> None:
    with stores(pg_url, tmp_path, []) as (a, b):
        a.db.begin(a.conn, shared=True)
        b.db.begin(b.conn, shared=True)  # does not wait for a's
        b.conn.execute("COMMIT")
        thread, out = in_thread(lambda: b.db.begin(b.conn))  # exclusive: waits
        thread.join(WAITED_S)
        assert thread.is_alive()
        a.conn.execute("COMMIT")
        thread.join(30)
        assert out == [None]
        thread, out = in_thread(lambda: a.db.begin(a.conn, shared=True))  # waits for it
        thread.join(WAITED_S)
        assert thread.is_alive()
        b.conn.execute("COMMIT")
        thread.join(30)
        assert out == [None]
        a.conn.execute("COMMIT")


def test_two_claims_at_once_take_different_rows(pg_url: str, tmp_path: Path) -> None:
    with stores(pg_url, tmp_path, ["r1"]) as (a, b):
        with b.tx(shared=True):
            first = b.claim_ready_work(NOW, 1)
            with a.tx(shared=True):  # while b's claim is open: its row is passed over
                second = a.claim_ready_work(NOW, 2)
    assert [c.key for c in first] == ["r1/" + KEYS[0]]
    assert [c.key for c in second] == ["r1/" + KEYS[1]]


def test_a_tools_room_is_counted_by_one_claim_at_a_time(pg_url: str, tmp_path: Path) -> None:
    limits = {"charge": ToolLimit(concurrency=1)}
    with stores(pg_url, tmp_path, ["r1"], tool_limits=limits) as (a, b):
        with b.tx(shared=True):
            first = b.claim_ready_work(NOW, 2)

            def claim() -> list[str]:
                with a.tx(shared=True):
                    return [c.key for c in a.claim_ready_work(NOW, 2)]

            thread, out = in_thread(claim)
            thread.join(WAITED_S)
            assert thread.is_alive()  # waits for the tool's lock, not for the row
        thread.join(30)
    assert [c.key for c in first] == ["r1/" + KEYS[0]]
    assert out == [[]]  # the room b took is seen taken: the other call stays ready


def applying(store: Store, run_id: str) -> Any:
    """Plan one call's result of ``run_id`` and commit it (``Store.planned``)."""

    def plan() -> None:
        event = EffectSucceeded(idempotency_key=f"{run_id}/{KEYS[0]}", output=1, at_ms=NOW)
        with store.planned():
            applied = store.apply(run_id, event, NOW)
            assert applied.rejected is None

    return plan


def test_a_commit_of_one_run_does_not_wait_for_another_runs_writer(
    pg_url: str, tmp_path: Path
) -> None:
    with stores(pg_url, tmp_path, ["r1", "r2"]) as (a, b):
        with b.tx(shared=True):
            assert b._lock_run("r2")
            applying(a, "r1")()  # r1's rows are free: it commits now
            thread, out = in_thread(applying(a, "r2"))
            thread.join(WAITED_S)
            assert thread.is_alive()  # r2's row is b's until b ends
        thread.join(30)
        assert out == [None]
        versions = dict(a.conn.execute("SELECT run_id, next_index FROM runs").fetchall())
    assert versions["r1"] == versions["r2"]  # both results committed, one each


def test_a_plan_of_a_run_another_connection_changed_meanwhile_conflicts(
    pg_url: str, tmp_path: Path
) -> None:
    with stores(pg_url, tmp_path, ["r1"]) as (a, b):
        a.load("r1")  # a's cached state, soon stale
        event = EffectSucceeded(idempotency_key=f"r1/{KEYS[1]}", output=2, at_ms=NOW)
        with b.tx():
            b.apply("r1", event, NOW)
        with pytest.raises(Conflict):
            applying(a, "r1")()
        assert a.conn.in_transaction is False
