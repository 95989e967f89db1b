"""The local store's runs: starting them, applying events, their state and rows.

``start_run`` and ``apply`` do the whole job for one run and one event in
the open transaction: append the log records, buffer the run's row, the
outbox rows of the new effects (``_store_outbox``), close the rows of what
the event answered and of what ``flowcore.plan`` stops (cancelling the child
runs among them) and, when a child run settles, report that to its parent.
A run's state is cached between events and restored from its checkpoint and
log (``load``); reads of runs (by status, a page at a time, metadata) are
here too.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import flowcore
from flowcore import (
    AskHuman,
    AwaitSignal,
    CallTool,
    CancelRequested,
    ContinueAsNew,
    Event,
    EventRejected,
    Flow,
    RunAgent,
    RunSubflow,
    RunTeam,
    Settled,
    SignalReceived,
    SignalRun,
    Sleep,
    State,
    SubflowSettled,
    persist,
)
from flowcore_handlers import tools_module_name
from flowcore_handlers._limits import DEFAULT_PRIORITY

from . import _scheduled as scheduled
from ._store_base import (
    CHECKPOINT_RECORDS,
    Applied,
    HostError,
    LocalUnknownRun,
    RunRow,
    _Cached,
    _dumps,
    _json,
    _json_decode,
    _Unsaved,
)
from ._store_flows import FlowStore


def _answered(event: Event, before: State, after: State) -> tuple[str, ...]:
    """The keys ``event`` answered itself (``flowcore.plan`` lists only the others)."""
    key = getattr(event, "idempotency_key", None)
    if key is not None:
        return (key,)
    if not isinstance(event, SignalReceived):
        return ()
    # A signal is taken by a wait for it, which is then no longer open.
    still = {wait.key for wait in flowcore.waiting_for(after).signals}
    return tuple(wait.key for wait in flowcore.waiting_for(before).signals if wait.key not in still)


_NUMERIC = "kind IN ('integer', 'number')"


def _metadata_condition(f: flowcore.MetadataFilter, column: str = "value") -> tuple[str, list[Any]]:
    """SQL (on ``runs``) for one metadata filter, and its arguments.

    The rows of one field are found through ``run_metadata_by_value``; the
    type each run's flow declares decides how the filter's text compares.
    """
    number, boolean = f.number, f.boolean
    if f.op in ("=", "!="):
        op = f.op
        parts = ["(kind = 'string' AND value " + op + " ?)"]
        args: list[Any] = [f.text]
        if number is not None:
            parts.append(f"({_NUMERIC} AND {column} {op} ?)")
            args.append(number)
        elif op == "!=":
            parts.append(f"({_NUMERIC})")  # no number equals the text
        if boolean is not None:
            parts.append(f"(kind = 'boolean' AND {column} {op} ?)")
            args.append(int(boolean))
        elif op == "!=":
            parts.append("(kind = 'boolean')")
        cond = " OR ".join(parts)
    else:
        cond = f"{_NUMERIC} AND {column} {f.op} ?"
        args = [number]
    sql = f"run_id IN (SELECT run_id FROM run_metadata WHERE name = ? AND ({cond}))"
    return sql, [f.field, *args]


class RunStore(FlowStore):
    """Runs: start, apply, state, checkpoints and reads (see ``Store``)."""

    if TYPE_CHECKING:  # written by the outbox (``_store_outbox``)

        def _outbox(
            self,
            run_id: str,
            flow: Flow,
            effect: RunAgent
            | RunTeam
            | CallTool
            | AskHuman
            | Sleep
            | AwaitSignal
            | RunSubflow
            | SignalRun,
            now: int,
            applied: Applied,
            tools: str | None,
            seq: int,
        ) -> None: ...

    # --- runs -------------------------------------------------------------------------

    def run_row(self, run_id: str) -> RunRow:
        row = self.conn.execute(
            "SELECT run_id, flow_id, spec_hash, parent_run, parent_key, depth, status, input,"
            " output, error, tools, created_ms, updated_ms, next_index, principal, started_by,"
            " priority, dedup_key FROM runs WHERE run_id = ?",
            (run_id,),
        ).fetchone()
        if row is None:
            raise LocalUnknownRun(run_id, f"no run {run_id!r} in the database")
        values = list(row)
        for i in (7, 8, 9):
            values[i] = None if values[i] is None else _json_decode(values[i])
        return RunRow(*values)

    def runs(
        self, status: str | None = None, where: list[flowcore.MetadataFilter] | None = None
    ) -> list[RunRow]:
        """Runs oldest first; ``status`` and every metadata filter of ``where`` must hold."""
        query = "SELECT run_id FROM runs"
        conds: list[str] = []
        args: list[Any] = []
        if status:
            conds.append("status = ?")
            args.append(status)
        for f in where or ():
            sql, values = _metadata_condition(f, self.db.metadata_number)
            conds.append(sql)
            args.extend(values)
        if conds:
            query += " WHERE " + " AND ".join(conds)
        ids = [r[0] for r in self.conn.execute(query + " ORDER BY created_ms, run_id", args)]
        return [self.run_row(i) for i in ids]

    def page_runs(
        self,
        *,
        flow: str | None = None,
        status: str | None = None,
        parent: str | None = None,
        created_from: int | None = None,
        created_to: int | None = None,
        principal: str | None = None,
        before: tuple[int, str] | None = None,
        limit: int = 50,
        metadata: list[flowcore.MetadataFilter] | None = None,
        id_prefix: str | None = None,
    ) -> list[RunRow]:
        """Runs newest first, filtered; ``before`` is the (created_ms, run_id) of
        the last run of the previous page. ``principal`` keeps that principal's runs;
        ``metadata``: filters every one of which must hold; ``id_prefix``: the runs
        whose id starts with it."""
        where, args = _run_conditions(
            flow, status, parent, created_from, created_to, principal, metadata, id_prefix, self
        )
        if before is not None:
            where.append("(created_ms < ? OR (created_ms = ? AND run_id < ?))")
            args.extend((before[0], before[0], before[1]))
        query = "SELECT run_id FROM runs"
        if where:
            query += " WHERE " + " AND ".join(where)
        query += " ORDER BY created_ms DESC, run_id DESC LIMIT ?"
        ids = [r[0] for r in self.conn.execute(query, (*args, limit))]
        return [self.run_row(i) for i in ids]

    def count_runs(
        self,
        *,
        flow: str | None = None,
        parent: str | None = None,
        created_from: int | None = None,
        created_to: int | None = None,
        principal: str | None = None,
        metadata: list[flowcore.MetadataFilter] | None = None,
        id_prefix: str | None = None,
    ) -> dict[str, int]:
        """How many runs the filters (as ``page_runs``) find, by stored status."""
        where, args = _run_conditions(
            flow, None, parent, created_from, created_to, principal, metadata, id_prefix, self
        )
        found = " WHERE " + " AND ".join(where) if where else ""
        query = f"SELECT status, COUNT(*) FROM runs{found} GROUP BY status"
        return {status: n for status, n in self.conn.execute(query, args)}

    def start_run(
        self,
        flow: Flow,
        input: Any,
        run_id: str,
        now: int,
        tools: str | None,
        parent_run: str | None = None,
        parent_key: str | None = None,
        budget: flowcore.Budget | flowcore.BudgetRemaining | None = None,
        depth: int = 0,
        principal: str | None = None,
        metadata: dict[str, Any] | None = None,
        started_by: str | None = None,
        priority: int = DEFAULT_PRIORITY,
        dedup_key: str | None = None,
    ) -> tuple[bool, Applied]:
        """Start a run; an existing run started with the same options is returned as is.

        The options compared are the input, the flow spec, and the tools module
        and budget when they are given (None: whatever the run has). ``metadata``
        is not compared: the run's metadata may have changed since its start. The
        priority and the dedup key are those of the first start.
        """
        existing = self.existing(run_id)
        if existing is not None:
            differs = self.differences(existing, flow, input, tools, budget)
            if differs:
                raise HostError(f"run {run_id!r} already exists with a different {differs}")
            return False, Applied(run_id)
        decision = flowcore.start(
            flow, input, run_id=run_id, now_ms=now, budget=budget, depth=depth, metadata=metadata
        )
        recorder = flowcore.Recorder(run_id)
        records = recorder.started(
            flow, input, now, decision, budget=budget, depth=depth, metadata=metadata
        )
        self.conn.execute(
            "INSERT INTO runs (run_id, flow_id, spec_hash, parent_run, parent_key, depth, status,"
            " input, budget, tools, created_ms, updated_ms, next_index, principal, started_by,"
            " priority, dedup_key)"
            " VALUES (?, ?, ?, ?, ?, ?, 'running', ?, ?, ?, ?, ?, 0, ?, ?, ?, ?)",
            (
                run_id,
                flow.id,
                flow.spec_hash,
                parent_run,
                parent_key,
                depth,
                _dumps(input),
                None if budget is None else _dumps(flowcore.budget_to_wire(budget)),
                tools,
                now,
                now,
                principal,
                started_by,
                priority,
                dedup_key,
            ),
        )
        if decision.state.metadata:
            self._put_metadata(run_id, decision.state)
        cached = _Cached(0, decision.state, tools, 0, 0, 0)
        applied = self._persist(run_id, cached, decision, records, now, tools, (), checkpoint=True)
        return True, applied

    def _put_metadata(self, run_id: str, state: State) -> None:
        """Replace the run's metadata rows with its state's (buffered like the other writes)."""
        self._write("DELETE FROM run_metadata WHERE run_id = ?", (run_id,))
        kinds = state.flow.metadata
        self._write_many(
            "INSERT INTO run_metadata (run_id, name, kind, value) VALUES (?, ?, ?, ?)",
            [(run_id, name, kinds[name], value) for name, value in (state.metadata or {}).items()],
        )

    def metadata(self, run_ids: list[str]) -> dict[str, dict[str, Any]]:
        """The current metadata of each run (runs without any are left out)."""
        out: dict[str, dict[str, Any]] = {}
        for start in range(0, len(run_ids), 500):
            chunk = run_ids[start : start + 500]
            marks = ",".join("?" * len(chunk))
            for run_id, name, kind, value in self.conn.execute(
                f"SELECT run_id, name, kind, value FROM run_metadata WHERE run_id IN ({marks})"
                " ORDER BY run_id, name",
                chunk,
            ):
                out.setdefault(run_id, {})[name] = self.db.metadata_value(kind, value)
        return out

    def deduplicated(self, dedup_key: str) -> str | None:
        """The running run started with ``dedup_key``, if there is one."""
        row = self.conn.execute(
            "SELECT run_id FROM runs WHERE dedup_key = ? AND status = 'running'", (dedup_key,)
        ).fetchone()
        return None if row is None else str(row[0])

    def existing(self, run_id: str) -> tuple[Any, str, str | None, Any] | None:
        """An existing run's start options: (input, spec hash, tools, budget JSON)."""
        row = self.conn.execute(
            "SELECT input, spec_hash, tools, budget FROM runs WHERE run_id = ?", (run_id,)
        ).fetchone()
        if row is None:
            return None
        return (
            _json_decode(row[0]),
            row[1],
            row[2],
            None if row[3] is None else _json_decode(row[3]),
        )

    @staticmethod
    def differences(
        existing: tuple[Any, str, str | None, Any],
        flow: Flow,
        input: Any,
        tools: str | None,
        budget: flowcore.Budget | flowcore.BudgetRemaining | None,
    ) -> str:
        """Which start options differ from the stored run's, as words ('' when none do)."""
        stored_input, spec_hash, stored_tools, stored_budget = existing
        differs = []
        if stored_input != input:
            differs.append("input")
        if spec_hash != flow.spec_hash:
            differs.append("flow spec")
        # (A run stored before paths were made absolute may hold a relative one.)
        if tools is not None and tools not in (stored_tools, tools_module_name(stored_tools)):
            differs.append(f"tools module (it has {stored_tools!r}, not {tools!r})")
        wanted = flowcore.budget_to_wire(budget)
        if wanted is not None and stored_budget != wanted:
            differs.append(f"budget (it has {_dumps(stored_budget)}, not {_dumps(wanted)})")
        return " and ".join(differs)

    # --- state ------------------------------------------------------------------------

    def load(self, run_id: str, report: bool = False) -> _Cached:
        """A run's state, from the cache or restored from its checkpoint and log.

        A cached state is used while the run's ``runs.version`` is the one it
        was stored with (checked once another connection has committed).
        Restoring reads the checkpoint (hot state, results, resolved keys and
        the *number* of report rows) and replays the events the log holds
        after it, at most ``CHECKPOINT_RECORDS`` records: it costs what the
        run holds now, not its history. The report rows themselves are read
        only when ``report`` is set; the rare transition that needs them
        reads them then (``flowcore.persist.advance``, see ``apply``).
        """
        if not (self.conn.in_transaction or self._planning):  # else tx/planned looked
            self._drop_stale()
        cached = self._cache.get(run_id)
        # While planning, a cached state is used as it is (not verified): the
        # plan's check under the write lock finds a run another connection
        # changed, before the plan or during it.
        if cached is not None and run_id not in self._verified and not self._planning:
            row = self.conn.execute(
                "SELECT version FROM runs WHERE run_id = ?", (run_id,)
            ).fetchone()
            if row is not None and row[0] == cached.version:
                self._verified.add(run_id)
            else:
                cached = None
        if cached is not None and (cached.state.report_complete or not report):
            if self._planning and run_id not in self._read:
                self._read[run_id] = cached.version
                if run_id not in self._verified:
                    self._doubted.add(run_id)
            return cached
        self._before_read(run_id)  # the rows read below may be buffered still
        with self._snapshot():
            cached = self._restore(run_id, report)
        self._cache[run_id] = cached
        self._verified.add(run_id)
        return cached

    @contextmanager
    def _snapshot(self) -> Iterator[None]:
        """A read transaction around several reads (nothing when one is open):
        a run is restored from one state of the file."""
        if self.conn.in_transaction:
            yield
            return
        self.conn.execute(self.db.begin_read)
        try:
            yield
        finally:
            self.conn.execute("COMMIT")

    def _restore(self, run_id: str, report: bool) -> _Cached:
        """A run restored from its checkpoint and the events the log holds after it."""
        row = self.conn.execute(
            "SELECT next_index, spec_hash, tools, state, saved_index, version FROM runs"
            " WHERE run_id = ?",
            (run_id,),
        ).fetchone()
        if self._planning:
            self._read.setdefault(run_id, None if row is None else row[5])
        if row is None:
            raise LocalUnknownRun(run_id, f"no run {run_id!r} in the database")
        next_index, spec_hash, tools, hot, saved_index, version = row
        flow = self.flow_by_hash(spec_hash)
        results = (
            (name, _json_decode(record))
            for name, record in self.conn.execute(
                "SELECT name, record FROM results WHERE run_id = ?", (run_id,)
            )
        )
        (count,) = self.conn.execute(
            "SELECT COALESCE(MAX(n) + 1, 0) FROM report WHERE run_id = ?", (run_id,)
        ).fetchone()
        resolved = (  # read after the snapshot's format is checked
            (key, persist.decode_resolution(how))
            for key, how in self.conn.execute(
                "SELECT key, how FROM resolved WHERE run_id = ?", (run_id,)
            )
        )
        rows = self._saved_report(run_id) if report else None
        state = persist.restore_state(hot, results, flow, resolved, rows)
        cached = _Cached(next_index, state, tools, count, version, saved_index)
        unsaved = cached.unsaved
        for (data,) in self.conn.execute(
            "SELECT data FROM log WHERE run_id = ? AND idx >= ? AND type = 'event.reported'"
            " ORDER BY idx",
            (run_id, saved_index),
        ).fetchall():
            event = flowcore.event_from_wire(_json_decode(data))
            cached.state = persist.advance(
                cached.state, event, lambda: self._report(run_id, cached)
            ).state
            unsaved.take(cached.state)
        return cached

    def _saved_report(self, run_id: str) -> list[persist.ReportRow]:
        """The report rows of a run's checkpoint, oldest first."""
        self._before_read(run_id)
        return [
            persist.decode_row(blob)
            for (blob,) in self.conn.execute(
                "SELECT row FROM report WHERE run_id = ? ORDER BY n", (run_id,)
            )
        ]

    def _report(self, run_id: str, cached: _Cached) -> list[persist.ReportRow]:
        """Every report row of a run, oldest first: the checkpoint's, then the later ones."""
        return [*self._saved_report(run_id), *cached.unsaved.report]

    def state(self, run_id: str) -> State:
        return self.load(run_id).state

    def forget(self, run_ids: list[str]) -> None:
        """Drop the cached states of runs that were deleted (``_prune``)."""
        for run_id in run_ids:
            self._cache.pop(run_id, None)
        self._in_scope.difference_update(run_ids)

    # --- applying events -------------------------------------------------------------

    def apply(self, run_id: str, event: Event, now: int) -> Applied:
        """Apply one event inside the current transaction; rejected ones change nothing."""
        cached = self.load(run_id)
        try:
            decision = persist.advance(cached.state, event, lambda: self._report(run_id, cached))
        except EventRejected as exc:
            return Applied(run_id, rejected=exc.reason)
        recorder = flowcore.Recorder(run_id)
        recorder.index = cached.next_index
        records = recorder.applied(event, decision)
        answered = _answered(event, cached.state, decision.state)
        return self._persist(run_id, cached, decision, records, now, cached.tools, answered)

    def _persist(
        self,
        run_id: str,
        cached: _Cached,
        decision: flowcore.Decision,
        records: list[flowcore.Record],
        now: int,
        tools: str | None,
        answered: tuple[str, ...],
        *,
        checkpoint: bool = False,
    ) -> Applied:
        """Write what one transition did (in the open transaction, buffered).

        Every transition appends its log records, updates the run's row
        (``next_index``, ``version``) and its outbox rows. What it wrote to the
        growing parts (results, report, resolved keys) and the hot state are
        kept in memory and written at the run's next checkpoint: when the log
        holds ``CHECKPOINT_RECORDS`` records after the last one, when the run
        settles, or when ``checkpoint`` is set (a start). Until then the log's
        events are what restores them (``load``).
        """
        self._touched.add(run_id)
        state = decision.state
        plan = flowcore.plan(decision)
        applied = Applied(run_id, plan, scheduled=decision.scheduled, records=records)
        self._log_rows.extend((run_id, r.index, r.type, r.at, _dumps(r.data)) for r in records)
        self._write_many(scheduled.UPSERT, scheduled.changed(state))
        if state.metadata is not cached.state.metadata:  # replaced only when it changed
            self._put_metadata(run_id, state)
        cached.unsaved.take(state)
        emitted = set()
        seqs = [r.index for r in records if r.type == "effect.emitted"]
        for effect, seq in zip(decision.effects, seqs, strict=True):  # in emission order
            if not isinstance(effect, Settled | ContinueAsNew):
                emitted.add(effect.idempotency_key)
                self._outbox(run_id, state.flow, effect, now, applied, tools, seq)
        # Close what the run no longer waits for (and was not issued again):
        # what the event answered, and what the plan stops (everything, when the
        # run settles). Done rows are deleted: the log keeps the history, and
        # the outbox stays as small as what is in flight.
        gone = (*answered, *plan.drop, *plan.cancel, *plan.withdraw, *plan.detach)
        # Work cancelled whose end the run still waits for (cancellation:
        # wait_cancellation_completed) keeps its row until that end is reported,
        # so that recovery reports it after a crash.
        still = state.waiting.pending
        self._write_many(
            "DELETE FROM outbox WHERE run_id = ? AND key = ?",
            [(run_id, key) for key in gone if key not in emitted and key not in still],
        )
        settled = plan.settled
        entry = _Cached(
            cached.next_index + len(records),
            state,
            cached.tools,
            cached.report_rows,
            cached.version + 1,
            cached.saved_index,
            cached.unsaved,
        )
        hot = None
        if (
            checkpoint
            or settled is not None
            or (entry.next_index - entry.saved_index >= CHECKPOINT_RECORDS)
        ):
            hot = self._checkpoint(run_id, entry)
        if settled is not None:
            self._owned.discard(run_id)
            self._run_rows.pop(run_id, None)
            self._write(
                "UPDATE runs SET status = ?, output = ?, error = ?, updated_ms = ?, next_index = ?,"
                " version = ?, state = ?, saved_index = ? WHERE run_id = ?",
                (
                    settled.status,
                    _dumps(settled.output),
                    None if settled.error is None else _dumps(settled.error),
                    now,
                    entry.next_index,
                    entry.version,
                    hot,
                    entry.saved_index,
                    run_id,
                ),
            )
            # A schedule's overlap policy asks only about its runs still running:
            # a settled one is forgotten in the transaction that settles it.
            self._write("DELETE FROM schedule_runs WHERE run_id = ?", (run_id,))
        else:
            self._buffer_run_row(run_id, entry, now, hot)
        self._cache[run_id] = entry
        self._verified.add(run_id)
        # A child run the run no longer waits for is cancelled once this run's
        # own writes are complete: cancelling it may tell this run, re-entering apply.
        for key in plan.cancel:
            self._cancel_child(run_id, key, now)
        if settled is not None:
            self._notify_parent(run_id, state, settled, now)
        if plan.continued is not None:
            self._continue_all((run_id, entry, plan.continued, now))
        return applied

    def _continue_all(self, first: tuple[str, _Cached, ContinueAsNew, int]) -> None:
        """Start the next incarnation, and each that one continues into at once.

        A loop, not a recursion through ``_persist``: a run may continue at
        once up to its ``limits.max_idle_incarnations`` times in a row.
        """
        if self._continues is not None:  # in the loop below: it starts this one next
            self._continues.append(first)
            return
        self._continues = [first]
        try:
            while self._continues:
                self._pending_applied.append(self._continue(*self._continues.pop(0)))
        finally:
            self._continues = None

    def _continue(self, run_id: str, entry: _Cached, effect: ContinueAsNew, now: int) -> Applied:
        """Start the run's next incarnation in the transaction that ended the last.

        The log keeps the incarnation that ended (so that whoever follows it
        sees how it ended) and the new one; the records of earlier ones go,
        with every state row of the ended one. The new incarnation is
        checkpointed at once, so that loading the run never reads further back.
        """
        flow = entry.state.flow
        depth = entry.state.run.depth
        decision = flowcore.continue_run(flow, effect, run_id, now, depth=depth)
        recorder = flowcore.Recorder(run_id, entry.next_index)
        records = recorder.started(flow, effect.input, now, decision, depth=depth, continued=effect)
        first = entry.next_index
        # Where the ending incarnation's log begins: its run.started, still
        # buffered (it began in this transaction) or already written.
        buffered = [r[1] for r in self._log_rows if r[0] == run_id and r[2] == "run.started"]
        if buffered:
            kept = max(buffered)
        else:
            row = self.conn.execute(
                "SELECT MAX(idx) FROM log WHERE run_id = ? AND type = 'run.started'", (run_id,)
            ).fetchone()
            kept = row[0] if row is not None and row[0] is not None else 0
        self._log_rows = [r for r in self._log_rows if r[0] != run_id or r[1] >= kept]
        # The ending incarnation's state rows are not needed any more.
        self._result_rows = {k: v for k, v in self._result_rows.items() if k[0] != run_id}
        self._report_rows = [r for r in self._report_rows if r[0] != run_id]
        self._resolved_rows = {k: v for k, v in self._resolved_rows.items() if k[0] != run_id}
        self._write("DELETE FROM log WHERE run_id = ? AND idx < ?", (run_id, kept))
        for table in ("results", "report", "resolved", "scheduled_calls"):
            self._write(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))
        fresh = _Cached(first, decision.state, entry.tools, 0, entry.version, first)
        return self._persist(
            run_id, fresh, decision, records, now, entry.tools, (), checkpoint=True
        )

    def keeps(self, run_id: str) -> bool:
        """Whether this worker runs the new work of ``run_id`` itself (else it is left
        ``ready`` for any worker to claim).

        A worker keeps the runs whose work it runs, up to its ``share`` of the
        running runs when other workers share the database: past its share it
        lets runs go, one at a time as their next work is created, and claims
        no others, so that work started by one worker spreads over all of them.
        """
        share, owned = self.share, self._owned
        if share is None:
            return True
        if run_id in owned:
            if len(owned) <= share:
                return True
            owned.discard(run_id)
            return False
        if len(owned) < share:
            owned.add(run_id)
            return True
        return False

    def _checkpoint(self, run_id: str, entry: _Cached) -> bytes:
        """Buffer the rows of a checkpoint of ``entry`` and return its hot state."""
        unsaved = entry.unsaved
        for name, rec in unsaved.results.items():  # None: a finished loop scope's, deleted
            self._result_rows[(run_id, name)] = None if rec is None else _json.encode(rec)
        start = entry.report_rows
        self._report_rows.extend(
            (run_id, start + i, persist.encode_row(r)) for i, r in enumerate(unsaved.report)
        )
        for key, how in unsaved.resolved.items():
            self._resolved_rows[(run_id, key)] = persist.encode_resolution(how)
        entry.report_rows += len(unsaved.report)
        entry.unsaved = _Unsaved()
        entry.saved_index = entry.next_index
        return persist.encode_hot(entry.state)

    def checkpoint_all(self) -> None:
        """Checkpoint every cached run with events after its checkpoint (in the open
        transaction): a host that closes leaves nothing to replay."""
        for run_id, entry in list(self._cache.items()):
            if entry.saved_index == entry.next_index:
                continue
            try:
                entry = self.load(run_id)  # checked against runs.version
            except HostError:  # deleted meanwhile
                continue
            if entry.saved_index == entry.next_index:
                continue
            self._touched.add(run_id)
            entry.version += 1
            hot = self._checkpoint(run_id, entry)
            self.conn.execute(
                "UPDATE runs SET version = ?, state = ?, saved_index = ? WHERE run_id = ?",
                (entry.version, hot, entry.saved_index, run_id),
            )

    def _buffer_run_row(self, run_id: str, entry: _Cached, now: int, hot: bytes | None) -> None:
        """Buffer the update of a running run's row; a checkpoint's hot state stays with it."""
        if hot is None and (earlier := self._run_rows.get(run_id)) is not None:
            hot = earlier[3]
        self._run_rows[run_id] = (now, entry.next_index, entry.version, hot, entry.saved_index)

    def _notify_parent(self, run_id: str, state: State, settled: Settled, now: int) -> None:
        row = self.conn.execute(
            "SELECT parent_run, parent_key FROM runs WHERE run_id = ?", (run_id,)
        ).fetchone()
        if row is None or row[0] is None:
            return
        parent_run, parent_key = row
        try:
            parent = self.load(parent_run)
        except HostError:  # deleted
            return
        used = flowcore.waiting_for(state)
        usage = used.usage()
        event = SubflowSettled(
            idempotency_key=parent_key,
            status=settled.status,
            output=settled.output,
            usage=usage,
            error=settled.error,
            at_ms=now,
        )
        if parent.state.status == "running":
            self._pending_applied.append(self.apply(parent_run, event, now))

    def _cancel_child(self, run_id: str, key: str, now: int) -> None:
        """Cancel the child run of ``key`` (work that is not a subflow has none)."""
        row = self.conn.execute(
            "SELECT status, version FROM runs WHERE run_id = ? AND parent_run = ?", (key, run_id)
        ).fetchone()
        if self._planning:  # a child started meanwhile must be cancelled too
            self._read.setdefault(key, None if row is None else row[1])
        if row is not None and row[0] == "running":
            event = CancelRequested(reason="the parent no longer waits for it", at_ms=now)
            self._pending_applied.append(self.apply(key, event, now))

    # --- reading for the CLI -----------------------------------------------------------

    def log_records(self, run_id: str, start: int = 0) -> list[flowcore.Record]:
        return [
            flowcore.Record(type_, idx, run_id, at, _json_decode(data))
            for idx, type_, at, data in self.conn.execute(
                "SELECT idx, type, at, data FROM log WHERE run_id = ? AND idx >= ? ORDER BY idx",
                (run_id, start),
            )
        ]

    def children(self, run_id: str) -> list[str]:
        return [
            r[0]
            for r in self.conn.execute(
                "SELECT run_id FROM runs WHERE parent_run = ? ORDER BY created_ms, run_id",
                (run_id,),
            )
        ]

    def detached(self, run_id: str) -> list[str]:
        """The root runs ``run_id`` started with a detached ``run_subflow``."""
        return [
            r[0]
            for r in self.conn.execute(
                "SELECT run_id FROM runs WHERE started_by = ? ORDER BY created_ms, run_id",
                (run_id,),
            )
        ]


def _run_conditions(
    flow: str | None,
    status: str | None,
    parent: str | None,
    created_from: int | None,
    created_to: int | None,
    principal: str | None,
    metadata: list[flowcore.MetadataFilter] | None,
    id_prefix: str | None,
    store: RunStore,  # its database says what a number compares with
) -> tuple[list[str], list[Any]]:
    """The WHERE conditions (and their arguments) of a listing or count of runs."""
    where: list[str] = []
    args: list[Any] = []
    for f in metadata or ():
        sql, values = _metadata_condition(f, store.db.metadata_number)
        where.append(sql)
        args.extend(values)
    for column, value in (("flow_id", flow), ("status", status), ("parent_run", parent)):
        if value is not None:
            where.append(f"{column} = ?")
            args.append(value)
    if created_from is not None:
        where.append("created_ms >= ?")
        args.append(created_from)
    if created_to is not None:
        where.append("created_ms < ?")
        args.append(created_to)
    if principal is not None:
        where.append("principal = ?")
        args.append(principal)
    if id_prefix:
        # substr, not LIKE: exact (LIKE folds case and reads % and _ in the prefix)
        where.append("substr(run_id, 1, ?) = ?")
        args.extend((len(id_prefix), id_prefix))
    return where, args
