"""The local host's reads: runs by status, flow, metadata and time, a page at a
time; one run shown whole; its log from an index (followed until it settles);
its open questions and what it waits for. Reads write nothing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import msgspec

import flowcore
from flowcore_handlers import RunPage, RunQuery, RunSummary, status_problem

from ._base import HostBase
from ._store import HostError, RunRow, contract_status, local_status
from ._store_progress import progress_records


class LocalReads(HostBase):
    """The reads of the local host's client (see ``LocalClient``)."""

    async def deduplicated(self, dedup_key: str) -> str | None:
        """The running run started with ``dedup_key`` (``start``), or None."""
        return await self._db(self.store.deduplicated, dedup_key)

    async def questions(self, run_id: str) -> list[str]:
        """The keys of the run's open questions, as its state has them now."""

        def reading() -> list[str]:
            return [q.key for q in flowcore.waiting_for(self.store.state(run_id)).questions]

        return await self._db(reading)

    async def open_questions(self, run_id: str) -> list[flowcore.Question]:
        """The run's open questions (``waits(run_id).questions``)."""
        return list((await self.waits(run_id)).questions)

    async def run(self, run_id: str) -> RunRow:
        return await self._db(self.store.run_row, run_id)

    async def runs(self, status: str | None = None, where: Any = None) -> list[RunRow]:
        """Runs oldest first, of one ``status`` if given, whose metadata matches ``where``:
        filter texts (``["customer=acme", "amount>100"]``) or a mapping of field to the
        value it equals (``flowcore.metadata_filters``; ``MetadataFilterError`` if bad)."""
        filters = flowcore.metadata_filters(where)
        return await self._db(self.store.runs, status, filters)

    async def metadata(self, run_id: str) -> dict[str, Any]:
        """The run's current metadata (field -> value), as the database indexes it."""
        await self.run(run_id)
        found = await self._db(self.store.metadata, [run_id])
        return found.get(run_id, {})

    async def metadata_of(self, run_ids: list[str]) -> dict[str, dict[str, Any]]:
        """The current metadata of each of ``run_ids`` (runs without any are left out)."""
        return await self._db(self.store.metadata, run_ids)

    async def waits(self, run_id: str) -> flowcore.Waits:
        """What the run waits for now (``flowcore.waiting_for`` of its state)."""
        return await self._db(lambda: flowcore.waiting_for(self.store.state(run_id)))

    async def page_runs(self, **filters: Any) -> list[RunRow]:
        """Runs newest first, filtered and paged (``Store.page_runs``)."""
        return await self._db(lambda: self.store.page_runs(**filters))

    async def find_runs(self, query: RunQuery) -> RunPage:
        """Runs newest first (by start), filtered, one page of ``query.limit`` at a time:
        the ``Host`` contract's listing (``page_runs``). The cursor is the start time
        and run id of the page's last run."""
        problem = status_problem(query.status)
        if problem is not None:
            raise HostError(problem)
        before = None
        if query.cursor is not None:
            ms, sep, last = query.cursor.partition(":")
            if not sep or not ms.isdigit() or len(ms) > 18:  # (an INTEGER holds 18 digits)
                raise HostError(f"run cursor {query.cursor!r} is not one a page handed out")
            before = (int(ms), last)
        if query.limit < 1:
            raise HostError(f"a page of runs holds at least 1, not {query.limit}")
        filters = flowcore.metadata_filters(query.where)

        def paging() -> tuple[list[RunRow], dict[str, dict[str, Any]]]:
            rows = self.store.page_runs(
                flow=query.flow,
                status=None if query.status is None else local_status(query.status),
                parent=query.parent,
                principal=query.principal,
                created_from=query.started_from_ms,
                created_to=query.started_to_ms,
                before=before,
                limit=query.limit + 1,  # one more: is there a next page?
                metadata=filters,
                id_prefix=query.id_prefix,
            )
            return rows, self.store.metadata([r.run_id for r in rows[: query.limit]])

        rows, metadata = await self._db(paging)
        page = [_summary(r, metadata.get(r.run_id, {})) for r in rows[: query.limit]]
        last_row = rows[query.limit - 1] if len(rows) > query.limit else None
        cursor = None if last_row is None else f"{last_row.created_ms}:{last_row.run_id}"
        return RunPage(runs=page, cursor=cursor)

    async def count_runs(self, query: RunQuery) -> dict[str, int]:
        """How many runs ``query``'s filters find, by status (``Host.count_runs``)."""
        filters = flowcore.metadata_filters(query.where)
        counted = await self._db(
            lambda: self.store.count_runs(
                flow=query.flow,
                parent=query.parent,
                principal=query.principal,
                created_from=query.started_from_ms,
                created_to=query.started_to_ms,
                metadata=filters,
                id_prefix=query.id_prefix,
            )
        )
        counts: dict[str, int] = {}
        for status, n in counted.items():
            word = contract_status(status)
            counts[word] = counts.get(word, 0) + n
        return counts

    async def summary(self, run_id: str) -> RunSummary:
        """One run as ``find_runs`` lists it (``LocalUnknownRun`` if there is none)."""

        def reading() -> RunSummary:
            row = self.store.run_row(run_id)
            return _summary(row, self.store.metadata([run_id]).get(run_id, {}))

        return await self._db(reading)

    async def children(self, run_id: str) -> list[str]:
        return await self._db(self.store.children, run_id)

    async def flow(self, run_id: str) -> flowcore.Flow:
        """The flow the run was started with, as the database stores its spec."""
        row = await self.run(run_id)
        return await self._db(self.store.flow_by_hash, row.spec_hash)

    async def flow_by_hash(self, spec_hash: str) -> flowcore.Flow | None:
        """The stored spec whose ``Flow.spec_hash`` is ``spec_hash`` (a log's
        ``run.started`` records it), or None if the database holds none."""

        def find() -> flowcore.Flow | None:
            try:
                return self.store.flow_by_hash(spec_hash)
            except HostError:
                return None

        return await self._db(find)

    async def records(self, run_id: str, start: int = 0) -> list[flowcore.Record]:
        await self.run(run_id)
        return await self._db(self.store.log_records, run_id, start)

    async def archived(self, run_id: str) -> list[tuple[int, flowcore.Record]]:
        """The log records resumes moved out of the run's live log: (resume number, record)."""
        await self.run(run_id)
        return await self._db(self.store.archived, run_id)

    async def export(self, run_id: str) -> bytes:
        return flowcore.encode_records(await self.records(run_id))

    async def events(
        self, run_id: str, start_index: int = 0, follow: bool = False
    ) -> AsyncIterator[flowcore.Record]:
        """The run's log records from ``start_index``; with ``follow``, until it settles.

        Following wakes at each commit of this host, and every ``poll_ms`` for
        what other processes on the database commit.
        """
        index = start_index
        while True:
            committed = self._committed  # taken before reading: no commit slips between
            batch = await self.records(run_id, index)
            for record in batch:
                yield record
                index = record.index + 1
            if not follow:
                return
            row = await self.run(run_id)
            if row.status != "running" and row.next_index <= index:
                return
            try:
                await asyncio.wait_for(committed.wait(), self.poll_ms / 1000)
            except TimeoutError:
                pass

    async def progress_records(self, run_id: str, start: int = 0) -> list[flowcore.Record]:
        """The run's progress stream from index ``start`` (at most 1000 items), as
        envelopes: ``progress`` items ``{key, step, data}``, and a ``progress.dropped``
        ``{from, count}`` first when items from ``start`` on were dropped for the
        run's cap (its index the last one dropped)."""
        await self.run(run_id)
        return await self._db(progress_records, self.store.conn, run_id, start)

    async def progress(
        self, run_id: str, start: int = 0, follow: bool = False
    ) -> AsyncIterator[flowcore.Record]:
        """The run's progress stream from index ``start`` (``progress_records``); with
        ``follow``, live: new items as they are committed, ending once the run has
        settled and every item is read. Resume after a disconnect from the last
        index seen plus one."""
        index = start
        while True:
            committed = self._committed  # taken before reading: no commit slips between
            row = await self.run(run_id)
            batch = await self.progress_records(run_id, index)
            for record in batch:
                yield record
                index = record.index + 1
            if len(batch) >= 1000:
                continue
            if not follow or row.status != "running":
                return  # read after the run settled: nothing more comes
            try:
                await asyncio.wait_for(committed.wait(), self.poll_ms / 1000)
            except TimeoutError:
                pass

    async def idle(self, horizon_ms: int = 0) -> bool:
        """Whether no run can go on now without an answer, a signal, or a timer due
        more than ``horizon_ms`` from now: no work is ready or out (with this host
        or another worker), no child run or signal-run is to start, no timer is due
        sooner, and this host has no result waiting for its commit. A database
        with no running run is idle. Schedules' next slots are not looked at."""
        if self._running or self._queue or self._firing:
            return False
        horizon = self.now() + horizon_ms
        return not await self._db(self.store.busy, horizon)

    async def wait(self, run_id: str, timeout: float | None = None) -> RunRow:
        """Wait until the run settles (someone must be running a worker)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            row = await self.run(run_id)
            if row.status != "running":
                return row
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"run {run_id} has not settled within {timeout} s")
            await asyncio.sleep(self.poll_ms / 1000)

    async def show(self, run_id: str) -> dict[str, Any]:
        """Status, pending effects and questions, budget used and left, dead letters,
        buffered signals, handler failures (with tracebacks) and resumes; for a
        fork, ``forkedFrom`` ``{runId, index}``."""

        def showing() -> dict[str, Any]:
            store = self.store
            row = store.run_row(run_id)
            state = store.state(run_id)
            view = flowcore.waiting_for(state)
            questions = {q.key: q for q in view.questions}
            signals = {s.key: s.signal for s in view.signals}
            outbox = store.outbox_rows(run_id)  # in emission order
            incarnation = store.state(run_id).incarnation
            info: dict[str, Any] = {
                "runId": row.run_id,
                "flowId": row.flow_id,
                "status": row.status,
                "parent": row.parent_run,
                "startedBy": row.started_by,
                "depth": row.depth,
                "output": row.output,
                "error": row.error,
                "budget": msgspec.to_builtins(flowcore.usage_figures(state)),
                "pending": [o for o in outbox if o["status"] in ("ready", "dispatched", "timer")],
                "questions": [
                    {
                        "key": q.key,
                        "question": q.question,
                        "options": None if q.options is None else list(q.options),
                    }
                    for q in (questions[o["key"]] for o in outbox if o["key"] in questions)
                ],
                "waitingFor": [signals[o["key"]] for o in outbox if o["key"] in signals],
                "buffered": [
                    {"signal": name, "payload": payload}
                    for name, payloads in view.buffered.items()
                    for payload in payloads
                ],
                "deadLetters": store.dead_letters(run_id),
                "failures": store.failures(run_id),
                "resumes": store.resumes(run_id),
                "tools": row.tools,
                "children": store.children(run_id),
                "metadata": dict(state.metadata or {}),
                "detached": store.detached(run_id),
            }
            updates = flowcore.updates_of(state)
            if updates:  # the incarnation's updates (language.md §16), in the order taken
                info["updates"] = [
                    {
                        "updateId": u.update_id,
                        "name": u.name,
                        "status": u.status,
                        "output": u.output,
                        "error": None if u.error is None else msgspec.to_builtins(u.error),
                    }
                    for u in updates
                ]
            if incarnation != 1:  # a run that continued as new (language.md §4.18)
                info["incarnation"] = incarnation
            forked = store.forked_from(run_id)
            if forked is not None:  # (only a fork's output has the key)
                info["forkedFrom"] = forked
            return info

        return await self._db(showing)


def _summary(row: RunRow, metadata: dict[str, Any]) -> RunSummary:
    return RunSummary(
        run_id=row.run_id,
        status=contract_status(row.status),
        started_ms=row.created_ms,
        flow_id=row.flow_id,
        metadata=metadata,
        principal=row.principal,
        parent=row.parent_run,
        updated_ms=row.updated_ms,
        depth=row.depth,
        next_index=row.next_index,
    )
