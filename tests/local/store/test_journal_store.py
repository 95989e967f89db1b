"""The local store's journal: checkpoints plus the log, planned group commits, shares.

specs/local.md §3: a step commits its log records, its run row and its outbox
rows; the hot state and the growing rows are written at checkpoints, and a
run is restored from its last checkpoint plus the events the log holds after
it. A group commit is planned outside the write lock and written under it,
unless another connection changed one of its runs meanwhile.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import flowcore
from flowcore import CallTool, SignalReceived
from flowcore_handlers import HandlerThreads, Registry
from flowcore_local import LocalHost
from flowcore_local._store import CHECKPOINT_RECORDS, Conflict, Store

from ..local_helpers import LOOP, open_store, query


def echo(call: CallTool) -> Any:
    return call.input


def _saved(db: Path | str, run_id: str) -> tuple[int, int, int]:
    ((saved, next_index, version),) = query(
        db, "SELECT saved_index, next_index, version FROM runs WHERE run_id = ?", (run_id,)
    )
    return saved, next_index, version


async def _work_until_waiting(host: LocalHost, run_id: str) -> None:
    stop = asyncio.Event()
    worker = asyncio.create_task(host.work(stop))
    while not (await host.show(run_id))["waitingFor"]:
        await asyncio.sleep(0.02)
    stop.set()
    await worker


def test_a_run_is_restored_from_its_checkpoint_and_the_events_logged_after_it(
    tmp_path: Path,
    local_db: Path | str,
) -> None:
    """A second connection loads the run while the log holds events past its
    checkpoint; continued with the same event, both give the same effects."""
    db = local_db
    signal = SignalReceived(signal="go", at_ms=10**12)

    async def main() -> Any:
        async with LocalHost(db, registry=Registry(tools={"echo": echo})) as host:
            rid = await host.start(LOOP, {"items": list(range(40))}, "loop")
            await _work_until_waiting(host, rid)
            saved = _saved(db, rid)
            mine = host.store.state(rid)
            other = open_store(db, "other").load(rid).state
            return saved, mine, other

    (saved_index, next_index, _), mine, other = asyncio.run(main())
    assert 0 < next_index - saved_index < CHECKPOINT_RECORDS, "the log holds a tail to replay"
    assert other.report_complete is False  # the report rows were not read
    assert flowcore.waiting_for(other) == flowcore.waiting_for(mine)
    ours = flowcore.persist.advance(mine, signal, lambda: [])
    theirs = flowcore.persist.advance(other, signal, lambda: [])
    assert theirs.effects == ours.effects
    assert [getattr(e, "idempotency_key", None) for e in ours.effects] == ["loop/last#1"]


def test_closing_the_host_checkpoints_its_runs(tmp_path: Path, local_db: Path | str) -> None:
    db = local_db

    async def main() -> tuple[int, int, int]:
        async with LocalHost(db, registry=Registry(tools={"echo": echo})) as host:
            rid = await host.start(LOOP, {"items": [1, 2, 3]}, "c")
            await _work_until_waiting(host, rid)
            before = _saved(db, rid)
        assert before[0] < before[1]
        return _saved(db, rid)

    saved_index, next_index, _ = asyncio.run(main())
    assert saved_index == next_index


WAIT_BOTH = """
flow: both
steps:
  - id: p
    parallel:
      branches:
        a: [{id: a, await_signal: {signal: a}}]
        b: [{id: b, await_signal: {signal: b}}]
output: done
"""


@contextmanager
def _counting(store: Store) -> Iterator[list[BaseException]]:
    """Record what ``store.planned`` raised."""
    raised: list[BaseException] = []
    original = store.planned

    @contextmanager
    def planned() -> Iterator[None]:
        try:
            with original():
                yield
        except BaseException as exc:
            raised.append(exc)
            raise

    store.planned = planned  # type: ignore[method-assign]
    try:
        yield raised
    finally:
        store.planned = original  # type: ignore[method-assign]


def test_a_planned_commit_overtaken_by_another_connection_is_applied_again(
    tmp_path: Path,
    local_db: Path | str,
) -> None:
    """While signal ``a`` is planned, another connection applies ``b`` to the run:
    the plan is refused by the run's version and applied again on the new state."""
    db = local_db

    async def main() -> Any:
        async with LocalHost(db) as host:
            rid = await host.start(WAIT_BOTH, {}, "both")
            store = host.store
            other = open_store(db, "other")
            original = store.take_extra
            done: list[bool] = []

            def take_extra() -> Any:
                # Once, in the first (planned) attempt, after ``a`` was applied
                # to the cached state and before the write lock is taken.
                if not done:
                    done.append(True)
                    with other.tx():
                        other.apply(rid, SignalReceived(signal="b", at_ms=1), 1)
                return original()

            store.take_extra = take_extra  # type: ignore[method-assign]
            loop = asyncio.get_running_loop()
            batch: list[tuple[str, flowcore.Event, asyncio.Future[Any]]] = [
                ("both", SignalReceived(signal="a", at_ms=2), loop.create_future())
            ]
            with _counting(store) as raised:
                results = host._commit(batch, 2)
            return raised, results, await host.run(rid), await host.records(rid)

    raised, results, row, records = asyncio.run(main())
    assert [type(exc) for exc in raised] == [Conflict]
    ((applied, _),) = results
    assert applied.rejected is None
    assert (row.status, row.output) == ("completed", "done")
    signals = [r.data["signal"] for r in records if r.type == "event.reported"]
    assert signals == ["b", "a"]
    assert [r.index for r in records] == list(range(len(records)))
    assert flowcore.replay(records, flowcore.parse_flow(WAIT_BOTH)).status == "completed"


def test_a_plan_on_a_state_another_connection_changed_before_it_is_applied_again(
    tmp_path: Path,
    local_db: Path | str,
) -> None:
    """Signal ``b`` is committed by another connection before the batch of ``a`` is
    planned: the cached state is used unverified, and the check under the lock
    refuses the plan even though nobody committed while it was made."""
    db = local_db

    async def main() -> Any:
        async with LocalHost(db) as host:
            rid = await host.start(WAIT_BOTH, {}, "both")
            other = open_store(db, "other")
            with other.tx():
                other.apply(rid, SignalReceived(signal="b", at_ms=1), 1)
            loop = asyncio.get_running_loop()
            batch: list[tuple[str, flowcore.Event, asyncio.Future[Any]]] = [
                ("both", SignalReceived(signal="a", at_ms=2), loop.create_future())
            ]
            with _counting(host.store) as raised:
                host._commit(batch, 2)
            return raised, await host.run(rid), await host.records(rid)

    raised, row, records = asyncio.run(main())
    assert [type(exc) for exc in raised] == [Conflict]
    assert row.status == "completed"
    signals = [r.data["signal"] for r in records if r.type == "event.reported"]
    assert signals == ["b", "a"]


def test_without_another_writer_the_plan_is_written_as_planned(
    tmp_path: Path, local_db: Path | str
) -> None:
    db = local_db

    async def main() -> Any:
        async with LocalHost(db) as host:
            await host.start(WAIT_BOTH, {}, "both")
            loop = asyncio.get_running_loop()
            batch: list[tuple[str, flowcore.Event, asyncio.Future[Any]]] = [
                ("both", SignalReceived(signal="a", at_ms=2), loop.create_future()),
                ("both", SignalReceived(signal="b", at_ms=2), loop.create_future()),
            ]
            with _counting(host.store) as raised:
                host._commit(batch, 2)
            return raised, await host.run("both")

    raised, row = asyncio.run(main())
    assert raised == []
    assert row.status == "completed"


SEQUENCE = """
flow: seq
tools: {who: {class: idempotent}}
steps:
"""


def test_two_workers_on_one_database_share_the_running_runs(
    tmp_path: Path, local_db: Path | str
) -> None:
    """Runs started before either works end up worked by both: the first takes
    them all, then lets runs go to its share once the second one is seen."""
    db = local_db
    spec = SEQUENCE + "".join(
        f"  - {{id: s{i}, call_tool: {{tool: who, input: {i}}}}}\n" for i in range(40)
    )

    def registry(name: str) -> Registry:
        async def who(call: CallTool) -> str:
            await asyncio.sleep(0.01)
            return name

        return Registry(tools={"who": who})

    async def main() -> Counter[str]:
        async with (
            LocalHost(db, registry=registry("a")) as a,
            LocalHost(db, registry=registry("b")) as b,
        ):
            ids = [await a.start(spec, {}, f"r{i}") for i in range(8)]
            stop = asyncio.Event()
            workers = [asyncio.create_task(host.work(stop)) for host in (a, b)]
            while await a.runs("running"):
                await asyncio.sleep(0.05)
            stop.set()
            await asyncio.gather(*workers)
            ran: Counter[str] = Counter()
            for rid in ids:
                for record in await a.records(rid):
                    data: dict[str, Any] = record.data
                    if record.type == "event.reported" and "output" in data:
                        ran[data["output"]] += 1
            return ran

    ran = asyncio.run(main())
    assert sum(ran.values()) == 8 * 40
    assert ran["a"] >= 40 and ran["b"] >= 40, ran


# --- HandlerThreads ----------------------------------------------------------------

VAR: contextvars.ContextVar[str] = contextvars.ContextVar("VAR", default="unset")


def test_handler_threads_return_raise_and_keep_the_context() -> None:
    threads = HandlerThreads(2)

    async def main() -> Any:
        VAR.set("set")
        ctx = contextvars.copy_context()
        value = await threads.run(lambda: 41 + 1)
        seen = await threads.run(lambda: ctx.run(VAR.get))
        empty: dict[str, int] = {}
        with pytest.raises(KeyError, match="nope"):
            await threads.run(lambda: empty["nope"])
        where = await threads.run(lambda: threading.current_thread().name)
        return value, seen, where

    value, seen, where = asyncio.run(main())
    threads.shutdown()
    assert (value, seen) == (42, "set")
    assert where.startswith("flowcore-handler-")


def test_handler_threads_run_at_most_their_size_at_once_and_survive_a_cancel() -> None:
    threads = HandlerThreads(2)
    release = threading.Event()
    running = Counter[str]()
    lock = threading.Lock()
    peak = [0]

    def block() -> str:
        with lock:
            running["now"] += 1
            peak[0] = max(peak[0], running["now"])
        release.wait(10)
        with lock:
            running["now"] -= 1
        return "done"

    async def main() -> list[Any]:
        calls = [asyncio.create_task(threads.run(block)) for _ in range(5)]
        await asyncio.sleep(0.1)
        calls[0].cancel()  # its thread still ends its call; the others are not lost
        release.set()
        return await asyncio.gather(*calls, return_exceptions=True)

    results = asyncio.run(main())
    threads.shutdown()
    assert isinstance(results[0], asyncio.CancelledError)
    assert results[1:] == ["done"] * 4
    assert peak[0] == 2
    assert len(threads._threads) == 2
