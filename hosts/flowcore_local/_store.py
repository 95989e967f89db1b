"""Persistence of runs in the local host's SQLite database.

Everything here is synchronous and runs on the host's single database thread.
The unit of work is a transaction (``Store.tx``); inside one, ``start_run``
and ``apply`` do the whole job for one run and one event: append the log
records, store the hot snapshot and the new result and report rows, insert the
outbox rows of the new effects, close the rows of what the event answered and
of what ``flowcore.plan`` stops (cancelling the child runs among them) and,
when a child run settles, report that to its parent. A crash before the
commit leaves nothing behind; after it, everything.

A run's state is cached in memory between events (keyed by the index of its
next log record, so a write by another process is noticed and the state
reloaded).

Besides events, two things write a run's rows here: a claim of work that was
recovered from a lost worker appends an ``effect.redispatched`` record in the
claiming transaction (``claim_ready_work``), and a resume rewinds a failed run
to just before the event that failed it (``rewind``; ``_resume`` decides
whether and where).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import msgspec

import flowcore
from flowcore import (
    AskHuman,
    AwaitSignal,
    CallTool,
    CancelRequested,
    Effect,
    Event,
    EventRejected,
    Flow,
    Plan,
    RunAgent,
    RunSubflow,
    RunTeam,
    Settled,
    SignalReceived,
    Sleep,
    State,
    SubflowSettled,
    persist,
)
from flowcore_handlers import tools_module_name

from . import _scheduled as scheduled

__all__ = ["Applied", "Claimed", "HostError", "RunRow", "Store"]

WORK = ("call-tool", "run-agent", "run-team")
# The run ``?`` and every run below it (its child runs, theirs, ...).
_TREE = (
    "IN (WITH RECURSIVE tree(id) AS (SELECT ? UNION ALL SELECT r.run_id FROM runs r"
    " JOIN tree ON r.parent_run = tree.id) SELECT id FROM tree)"
)

_json = msgspec.json.Encoder()
_json_decode = msgspec.json.decode
_effect_dec: msgspec.json.Decoder[Effect] = msgspec.json.Decoder(Effect)


class HostError(Exception):
    """A request the host cannot carry out (unknown run, conflicting start, ...)."""


@dataclass
class RunRow:
    run_id: str
    flow_id: str
    spec_hash: str
    parent_run: str | None
    parent_key: str | None
    depth: int
    status: str
    input: Any
    output: Any
    error: Any
    tools: str | None
    created_ms: int
    updated_ms: int
    next_index: int
    principal: str | None = None  # who started it through ``flowcore serve`` (children inherit)


@dataclass
class _Cached:
    next_index: int
    state: State
    tools: str | None
    report_rows: int


@dataclass
class Claimed:
    """A work effect this worker recorded as dispatched and must now run."""

    run_id: str
    key: str
    effect: CallTool | RunAgent | RunTeam
    tools: str | None


@dataclass
class Applied:
    """What one start or event did: its plan, and the new work this worker now owns."""

    run_id: str
    plan: Plan = field(default_factory=Plan)
    claimed: list[Claimed] = field(default_factory=list)
    rejected: str | None = None
    scheduled: flowcore.ScheduledAnswer | None = None  # a scheduled-call event's answer

    @property
    def settled(self) -> Settled | None:
        return self.plan.settled


def _dumps(value: Any) -> str:
    return _json.encode(value).decode()


def _rebuild(
    flow: Flow, run_id: str, records: list[flowcore.Record], cut: int
) -> tuple[State, dict[str, Any], list[persist.ReportRow], dict[str, persist.Resolution]]:
    """The state after the records before index ``cut``, and every row it stores.

    ``start`` with what ``run.started`` recorded, then ``advance`` with each
    reported event, collecting what each transition wrote
    (``persist.state_changes``), as the run's own transactions did.
    """
    first = records[0]
    data = first.data
    budget = data.get("budget")
    decision = flowcore.start(
        flow,
        data.get("input"),
        run_id=run_id,
        now_ms=first.at,
        budget=flowcore.budget_from_wire(budget),
        depth=data.get("depth", 0),
    )
    results: dict[str, Any] = {}
    report: list[persist.ReportRow] = []
    resolved: dict[str, persist.Resolution] = {}

    def take(state: State) -> None:
        changes = persist.state_changes(state)
        results.update(changes.results)
        report.extend(changes.report)
        resolved.update(changes.resolved)

    state = decision.state
    take(state)
    for record in records[1:]:
        if record.index >= cut:
            break
        if record.type == "event.reported":
            state = flowcore.advance(state, flowcore.event_from_wire(record.data)).state
            take(state)
    return state, results, report, resolved


class Store:
    def __init__(
        self,
        conn: sqlite3.Connection,
        worker_id: str,
        lease_ms: int = 10_000,
    ) -> None:
        self.conn = conn
        self.worker_id = worker_id
        self.lease_ms = lease_ms
        self._flows: dict[str, Flow] = {}
        self._parsed: dict[str, Flow] = {}  # spec text -> flow, for this process
        self._data_version = -1
        self._cache: dict[str, _Cached] = {}
        self._touched: set[str] = set()
        self._pending_applied: list[Applied] = []
        # Rows written by the events of one transaction, sent to SQLite in one
        # statement per table when it commits (see _flush): a group commit of
        # many events then costs a few statements, not a few per event.
        self._log_rows: list[tuple[str, int, str, int, str]] = []
        self._result_rows: dict[tuple[str, str], bytes | None] = {}  # None: delete
        self._report_rows: list[tuple[str, int, bytes]] = []
        self._run_rows: dict[str, tuple[int, int, bytes]] = {}  # a running run's new state
        # True while this process runs a worker: new work is then recorded as
        # dispatched to it in the transaction that creates it, and run at once.
        self.dispatching = False
        # The run a worker limits itself to (with its child runs), or None.
        self._only: str | None = None
        self._in_scope: set[str] = set()

    # --- which runs a worker works on --------------------------------------------------

    @property
    def only(self) -> str | None:
        return self._only

    @only.setter
    def only(self, run_id: str | None) -> None:
        self._only = run_id
        self._in_scope = set()

    def _scope(self, column: str = "run_id") -> tuple[str, tuple[Any, ...]]:
        """An ``AND ...`` clause keeping the worker's runs, and its parameters."""
        if self._only is None:
            return "", ()
        return f" AND {column} {_TREE}", (self._only,)

    def in_scope(self, run_id: str) -> bool:
        """Whether the worker works on ``run_id``: always, unless ``only`` is set."""
        only = self._only
        if only is None or run_id == only or run_id in self._in_scope:
            return True
        chain: list[str] = []
        current: str | None = run_id
        while current is not None and len(chain) < 10_000:
            if current == only or current in self._in_scope:
                self._in_scope.update(chain)
                return True
            chain.append(current)
            row = self.conn.execute(
                "SELECT parent_run FROM runs WHERE run_id = ?", (current,)
            ).fetchone()
            current = None if row is None else row[0]
        return False

    # --- transactions ----------------------------------------------------------------

    def _drop_stale(self) -> None:
        """Forget every cached state if another connection committed since we looked.

        ``PRAGMA data_version`` changes exactly when another connection commits
        to the file (our own commits leave it alone). It says nothing about
        *which* run was written, so the whole cache goes.
        """
        version = self.conn.execute("PRAGMA data_version").fetchone()[0]
        if version != self._data_version:
            self._cache.clear()
            self._data_version = version

    @contextmanager
    def tx(self) -> Iterator[None]:
        """One write transaction. On failure, cached states it touched are dropped."""
        self.conn.execute("BEGIN IMMEDIATE")
        # Holding the write lock, nobody else can commit until we do: one
        # look at data_version serves every load in this transaction.
        self._drop_stale()
        self._touched = set()
        try:
            yield
            self._flush()
            self.conn.execute("COMMIT")
        except BaseException:
            self._discard()
            self.conn.execute("ROLLBACK")
            for run_id in self._touched:
                self._cache.pop(run_id, None)
            raise

    def _flush(self) -> None:
        """Write the buffered rows (in the open transaction)."""
        conn = self.conn
        if self._log_rows:
            conn.executemany(
                "INSERT INTO log (run_id, idx, type, at, data) VALUES (?, ?, ?, ?, ?)",
                self._log_rows,
            )
        if self._result_rows:
            items = self._result_rows.items()
            conn.executemany(
                "INSERT OR REPLACE INTO results (run_id, name, record) VALUES (?, ?, ?)",
                [(run_id, name, rec) for (run_id, name), rec in items if rec is not None],
            )
            conn.executemany(
                "DELETE FROM results WHERE run_id = ? AND name = ?",
                [ident for ident, rec in items if rec is None],
            )
        if self._report_rows:
            conn.executemany(
                "INSERT INTO report (run_id, n, row) VALUES (?, ?, ?)", self._report_rows
            )
        if self._run_rows:
            conn.executemany(
                "UPDATE runs SET updated_ms = ?, next_index = ?, state = ? WHERE run_id = ?",
                [(*row, run_id) for run_id, row in self._run_rows.items()],
            )
        self._discard()

    def _discard(self) -> None:
        self._log_rows = []
        self._result_rows = {}
        self._report_rows = []
        self._run_rows = {}

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        touched = set(self._touched)
        self._touched = set()
        self._flush()  # what came before the savepoint survives a rollback to it
        self.conn.execute("SAVEPOINT item")
        try:
            yield
            self._flush()
            self.conn.execute("RELEASE item")
        except BaseException:
            self._discard()
            self.conn.execute("ROLLBACK TO item")
            self.conn.execute("RELEASE item")
            for run_id in self._touched:
                self._cache.pop(run_id, None)
            raise
        finally:
            self._touched |= touched

    # --- flows ------------------------------------------------------------------------

    def register_flow(self, spec: str, source: str, now: int) -> Flow:
        flow = self._parsed.get(spec)
        if flow is None:
            flow = flowcore.parse_flow(spec, source_name=source)
            self._parsed[spec] = flow
        self.conn.execute(
            "INSERT OR IGNORE INTO flows (spec_hash, flow_id, version, source, spec, added_ms)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (flow.spec_hash, flow.id, flow.version, source, spec, now),
        )
        self._flows[flow.spec_hash] = flow
        return flow

    def flow_by_hash(self, spec_hash: str) -> Flow:
        flow = self._flows.get(spec_hash)
        if flow is None:
            row = self.conn.execute(
                "SELECT spec, source FROM flows WHERE spec_hash = ?", (spec_hash,)
            ).fetchone()
            if row is None:
                raise HostError(f"no flow spec with hash {spec_hash[:12]} in the database")
            flow = flowcore.parse_flow(row[0], source_name=row[1])
            self._flows[spec_hash] = flow
        return flow

    def flow_by_id(self, flow_id: str) -> Flow | None:
        row = self.conn.execute(
            "SELECT spec_hash FROM flows WHERE flow_id = ? ORDER BY added_ms DESC, version DESC"
            " LIMIT 1",
            (flow_id,),
        ).fetchone()
        return None if row is None else self.flow_by_hash(row[0])

    # --- runs -------------------------------------------------------------------------

    def run_row(self, run_id: str) -> RunRow:
        row = self.conn.execute(
            "SELECT run_id, flow_id, spec_hash, parent_run, parent_key, depth, status, input,"
            " output, error, tools, created_ms, updated_ms, next_index, principal FROM runs"
            " WHERE run_id = ?",
            (run_id,),
        ).fetchone()
        if row is None:
            raise HostError(f"no run {run_id!r} in the database")
        values = list(row)
        for i in (7, 8, 9):
            values[i] = None if values[i] is None else _json_decode(values[i])
        return RunRow(*values)

    def runs(self, status: str | None = None) -> list[RunRow]:
        query = "SELECT run_id FROM runs"
        args: tuple[Any, ...] = ()
        if status:
            query += " WHERE status = ?"
            args = (status,)
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
    ) -> list[RunRow]:
        """Runs newest first, filtered; ``before`` is the (created_ms, run_id) of
        the last run of the previous page. ``principal`` keeps that principal's runs."""
        where: list[str] = []
        args: list[Any] = []
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
        if before is not None:
            where.append("(created_ms < ? OR (created_ms = ? AND run_id < ?))")
            args.extend((before[0], before[0], before[1]))
        query = "SELECT run_id FROM runs"
        if where:
            query += " WHERE " + " AND ".join(where)
        query += " ORDER BY created_ms DESC, run_id DESC LIMIT ?"
        ids = [r[0] for r in self.conn.execute(query, (*args, limit))]
        return [self.run_row(i) for i in ids]

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
    ) -> tuple[bool, Applied]:
        """Start a run; an existing run started with the same options is returned as is.

        The options compared are the input, the flow spec, and the tools module
        and budget when they are given (None: whatever the run has).
        """
        existing = self.existing(run_id)
        if existing is not None:
            differs = self.differences(existing, flow, input, tools, budget)
            if differs:
                raise HostError(f"run {run_id!r} already exists with a different {differs}")
            return False, Applied(run_id)
        decision = flowcore.start(
            flow, input, run_id=run_id, now_ms=now, budget=budget, depth=depth
        )
        recorder = flowcore.Recorder(run_id)
        records = recorder.started(flow, input, now, decision, budget=budget, depth=depth)
        self.conn.execute(
            "INSERT INTO runs (run_id, flow_id, spec_hash, parent_run, parent_key, depth, status,"
            " input, budget, tools, created_ms, updated_ms, next_index, principal)"
            " VALUES (?, ?, ?, ?, ?, ?, 'running', ?, ?, ?, ?, ?, 0, ?)",
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
            ),
        )
        cached = _Cached(0, decision.state, tools, 0)
        return True, self._persist(run_id, cached, decision, records, now, tools, ())

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
        """A run's state, from the cache or restored from its rows.

        The report rows (one per work effect ever run) are read only when
        ``report`` is set: restoring costs what the run holds now, not its
        history, and the rare transition that needs them reads them then
        (``flowcore.persist.advance``, see ``apply``).
        """
        if not self.conn.in_transaction:  # in one, tx() has looked already
            self._drop_stale()
        cached = self._cache.get(run_id)
        if cached is not None and (cached.state.report_complete or not report):
            return cached  # nobody else has written since it was cached
        self._flush()  # the rows read below may be buffered still
        row = self.conn.execute(
            "SELECT next_index, spec_hash, tools FROM runs WHERE run_id = ?", (run_id,)
        ).fetchone()
        if row is None:
            raise HostError(f"no run {run_id!r} in the database")
        flow = self.flow_by_hash(row[1])
        hot = self.conn.execute("SELECT state FROM runs WHERE run_id = ?", (run_id,)).fetchone()
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
        rows = self._report(run_id) if report else None
        state = persist.restore_state(hot[0], results, flow, resolved, rows)
        cached = _Cached(int(row[0]), state, row[2], count)
        self._cache[run_id] = cached
        return cached

    def _report(self, run_id: str) -> list[persist.ReportRow]:
        """Every report row of a run, oldest first."""
        self._flush()
        return [
            persist.decode_row(blob)
            for (blob,) in self.conn.execute(
                "SELECT row FROM report WHERE run_id = ? ORDER BY n", (run_id,)
            )
        ]

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
            decision = persist.advance(cached.state, event, lambda: self._report(run_id))
        except EventRejected as exc:
            return Applied(run_id, rejected=exc.reason)
        recorder = flowcore.Recorder(run_id)
        recorder.index = cached.next_index
        records = recorder.applied(event, decision)
        answered = self._answered(run_id, event, decision.state)
        return self._persist(run_id, cached, decision, records, now, cached.tools, answered)

    def _answered(self, run_id: str, event: Event, state: State) -> tuple[str, ...]:
        """The keys ``event`` answered itself (``flowcore.plan`` lists only the others)."""
        key = getattr(event, "idempotency_key", None)
        if key is not None:
            return (key,)
        if not isinstance(event, SignalReceived):
            return ()
        # A signal is taken by a wait for it, which is then no longer open.
        query = "SELECT key FROM outbox WHERE run_id = ? AND kind = 'await-signal'"
        waits = [key for (key,) in self.conn.execute(query, (run_id,))]
        still = {wait.key for wait in flowcore.waiting_for(state).signals} if waits else ()
        return tuple(key for key in waits if key not in still)

    def _persist(
        self,
        run_id: str,
        cached: _Cached,
        decision: flowcore.Decision,
        records: list[flowcore.Record],
        now: int,
        tools: str | None,
        answered: tuple[str, ...],
    ) -> Applied:
        self._touched.add(run_id)
        conn = self.conn
        state = decision.state
        plan = flowcore.plan(decision)
        applied = Applied(run_id, plan, scheduled=decision.scheduled)
        self._log_rows.extend((run_id, r.index, r.type, r.at, _dumps(r.data)) for r in records)
        scheduled.project(conn, run_id, state)
        changes = persist.state_changes(state)
        results, rows = changes.results, changes.report
        if changes.resolved:
            conn.executemany(
                "INSERT OR REPLACE INTO resolved (run_id, key, how) VALUES (?, ?, ?)",
                [(run_id, key, persist.encode_resolution(how)) for key, how in changes.resolved],
            )
        buffered = self._result_rows
        for name, rec in results:  # None: a finished loop scope's result, deleted
            buffered[(run_id, name)] = None if rec is None else _json.encode(rec)
        if rows:
            start = cached.report_rows
            self._report_rows.extend(
                (run_id, start + i, persist.encode_row(r)) for i, r in enumerate(rows)
            )
            cached.report_rows += len(rows)
        emitted = set()
        for effect in decision.effects:  # in emission order, as ``show`` lists them
            if not isinstance(effect, Settled):
                emitted.add(effect.idempotency_key)
                self._outbox(run_id, state.flow, effect, now, applied, tools)
        # Close what the run no longer waits for (and was not issued again):
        # what the event answered, and what the plan stops (everything, when the
        # run settles). Done rows are deleted: the log keeps the history, and
        # the outbox stays as small as what is in flight.
        gone = (*answered, *plan.drop, *plan.cancel, *plan.withdraw)
        conn.executemany(
            "DELETE FROM outbox WHERE run_id = ? AND key = ?",
            [(run_id, key) for key in gone if key not in emitted],
        )
        next_index = cached.next_index + len(records)
        settled = plan.settled
        if settled is not None:
            self._run_rows.pop(run_id, None)
            conn.execute(
                "UPDATE runs SET status = ?, output = ?, error = ?, updated_ms = ?, next_index = ?,"
                " state = ? WHERE run_id = ?",
                (
                    settled.status,
                    _dumps(settled.output),
                    None if settled.error is None else _dumps(settled.error),
                    now,
                    next_index,
                    persist.encode_hot(state),
                    run_id,
                ),
            )
        else:
            self._run_rows[run_id] = (now, next_index, persist.encode_hot(state))
        self._cache[run_id] = _Cached(next_index, state, cached.tools, cached.report_rows)
        # A child run the run no longer waits for is cancelled once this run's
        # own writes are complete: cancelling it may tell this run, re-entering apply.
        for key in plan.cancel:
            self._cancel_child(run_id, key, now)
        if settled is not None:
            self._notify_parent(run_id, state, settled, now)
        return applied

    def _outbox(
        self,
        run_id: str,
        flow: Flow,
        effect: RunAgent | RunTeam | CallTool | AskHuman | Sleep | AwaitSignal | RunSubflow,
        now: int,
        applied: Applied,
        tools: str | None,
    ) -> None:
        key = effect.idempotency_key
        kind = str(effect.__struct_config__.tag)
        exec_class = "uncertain"
        status = "waiting"  # ask-human, await-signal
        due: int | None = None
        lease_owner: str | None = None
        lease_until: int | None = None
        dispatches = 0
        if isinstance(effect, CallTool):
            decl = flow.tools.get(effect.tool)
            exec_class = decl.exec_class if decl is not None else "uncertain"
        if isinstance(effect, (CallTool, RunAgent, RunTeam)):
            if self.dispatching and self.in_scope(run_id):
                # Recorded as dispatched to this worker in the same transaction
                # that created it: the worker runs it right after the commit.
                status, lease_owner, lease_until = "dispatched", self.worker_id, now + self.lease_ms
                dispatches = 1
                applied.claimed.append(Claimed(run_id, key, effect, tools))
            else:
                status = "ready"
        elif isinstance(effect, RunSubflow):
            status, exec_class = "ready", "idempotent"
        elif isinstance(effect, Sleep):
            status, due = "timer", effect.until_ms
        # Work re-issued under its key keeps counting the dispatches of its row.
        self.conn.execute(
            "INSERT OR REPLACE INTO outbox (run_id, key, kind, effect, status, due_ms, exec_class,"
            " dispatches, lease_owner, lease_until) VALUES (?, ?, ?, ?, ?, ?, ?, ? + COALESCE("
            "(SELECT dispatches FROM outbox WHERE run_id = ? AND key = ?), 0), ?, ?)",
            (
                run_id,
                key,
                kind,
                _json.encode(effect),
                status,
                due,
                exec_class,
                dispatches,
                run_id,
                key,
                lease_owner,
                lease_until,
            ),
        )

    def _notify_parent(self, run_id: str, state: State, settled: Settled, now: int) -> None:
        row = self.conn.execute(
            "SELECT parent_run, parent_key FROM runs WHERE run_id = ?", (run_id,)
        ).fetchone()
        if row is None or row[0] is None:
            return
        parent_run, parent_key = row
        used = flowcore.waiting_for(state)
        usage = used.usage()
        event = SubflowSettled(
            idempotency_key=parent_key,
            status=settled.status,
            output=settled.output,
            usage=usage,
            at_ms=now,
        )
        parent_status = self.conn.execute(
            "SELECT status FROM runs WHERE run_id = ?", (parent_run,)
        ).fetchone()
        if parent_status is not None and parent_status[0] == "running":
            self._pending_applied.append(self.apply(parent_run, event, now))

    def _cancel_child(self, run_id: str, key: str, now: int) -> None:
        """Cancel the child run of ``key`` (work that is not a subflow has none)."""
        row = self.conn.execute(
            "SELECT status FROM runs WHERE run_id = ? AND parent_run = ?", (key, run_id)
        ).fetchone()
        if row is not None and row[0] == "running":
            event = CancelRequested(reason="the parent no longer waits for it", at_ms=now)
            self._pending_applied.append(self.apply(key, event, now))

    def take_extra(self) -> list[Applied]:
        """Applies made on the side (parents told, children cancelled) since last asked."""
        extra, self._pending_applied = self._pending_applied, []
        return extra

    # --- resuming a failed run ---------------------------------------------------------

    def rewind(
        self,
        run_id: str,
        flow: Flow,
        records: list[flowcore.Record],
        cut: int,
        pending: list[Effect],
        now: int,
        tools: str | None,
        failed_key: str,
        child_resumed: bool,
    ) -> Applied:
        """Rewind a failed run to just before its record ``cut`` (in the open transaction).

        The state there is re-derived event by event from the records before
        ``cut``, exactly as the run's own transactions stored it (each
        transition's ``persist.state_changes``); the records from ``cut`` on
        move to ``log_archive`` under this resume's number; ``pending`` (the
        effects open at that point) get their outbox rows again; the run is
        ``running``. ``child_resumed``: the failed key is a child run that is
        resumed too, so its row is ``dispatched`` (the child exists).
        """
        conn = self.conn
        self._flush()
        state, results, report_rows, resolved = _rebuild(flow, run_id, records, cut)
        (n,) = conn.execute(
            "SELECT COALESCE(MAX(n), 0) + 1 FROM resumes WHERE run_id = ?", (run_id,)
        ).fetchone()
        before = conn.execute(
            "SELECT tools, error FROM runs WHERE run_id = ?", (run_id,)
        ).fetchone()
        conn.execute(
            "INSERT INTO log_archive (run_id, resume, idx, type, at, data)"
            " SELECT run_id, ?, idx, type, at, data FROM log WHERE run_id = ? AND idx >= ?",
            (n, run_id, cut),
        )
        conn.execute("DELETE FROM log WHERE run_id = ? AND idx >= ?", (run_id, cut))
        conn.execute(
            "INSERT INTO resumes (run_id, n, at_ms, from_index, key, error, tools_before,"
            " tools_after) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (run_id, n, now, cut, failed_key, before[1], before[0], tools),
        )
        for table in ("results", "report", "resolved", "outbox"):
            conn.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))
        scheduled.project_all(conn, run_id, state)
        conn.executemany(
            "INSERT INTO results (run_id, name, record) VALUES (?, ?, ?)",
            [(run_id, name, _json.encode(rec)) for name, rec in results.items() if rec is not None],
        )
        conn.executemany(
            "INSERT INTO report (run_id, n, row) VALUES (?, ?, ?)",
            [(run_id, i, persist.encode_row(row)) for i, row in enumerate(report_rows)],
        )
        conn.executemany(
            "INSERT INTO resolved (run_id, key, how) VALUES (?, ?, ?)",
            [(run_id, key, persist.encode_resolution(how)) for key, how in resolved.items()],
        )
        conn.execute("DELETE FROM dead_letters WHERE run_id = ? AND key = ?", (run_id, failed_key))
        conn.execute(
            "UPDATE runs SET status = 'running', output = NULL, error = NULL, tools = ?,"
            " updated_ms = ?, next_index = ?, state = ? WHERE run_id = ?",
            (tools, now, cut, persist.encode_hot(state), run_id),
        )
        self._touched.add(run_id)
        self._cache[run_id] = _Cached(cut, state, tools, len(report_rows))
        applied = Applied(run_id)
        for effect in pending:
            if not isinstance(effect, Settled):
                self._outbox(run_id, flow, effect, now, applied, tools)
        if child_resumed:
            self.mark(run_id, failed_key, "dispatched")
        return applied

    def archived(self, run_id: str) -> list[tuple[int, flowcore.Record]]:
        """The records resumes moved out of the live log: (resume number, record)."""
        return [
            (n, flowcore.Record(type_, idx, run_id, at, _json_decode(data)))
            for n, idx, type_, at, data in self.conn.execute(
                "SELECT resume, idx, type, at, data FROM log_archive WHERE run_id = ?"
                " ORDER BY resume, idx",
                (run_id,),
            )
        ]

    def resumes(self, run_id: str) -> list[dict[str, Any]]:
        return [
            {
                "n": n,
                "atMs": at,
                "fromIndex": index,
                "key": key,
                "error": None if error is None else _json_decode(error),
                "toolsBefore": before,
                "toolsAfter": after,
            }
            for n, at, index, key, error, before, after in self.conn.execute(
                "SELECT n, at_ms, from_index, key, error, tools_before, tools_after FROM resumes"
                " WHERE run_id = ? ORDER BY n",
                (run_id,),
            )
        ]

    # --- the worker's queries ----------------------------------------------------------

    def due_timers(self, now: int, limit: int = 256) -> list[tuple[str, str, int]]:
        scope, args = self._scope()
        return list(
            self.conn.execute(
                "SELECT run_id, key, due_ms FROM outbox WHERE status = 'timer' AND due_ms <= ?"
                f"{scope} ORDER BY due_ms LIMIT ?",
                (now, *args, limit),
            )
        )

    def next_timer(self) -> int | None:
        scope, args = self._scope()
        row = self.conn.execute(
            f"SELECT min(due_ms) FROM outbox WHERE status = 'timer'{scope}", args
        ).fetchone()
        return None if row is None else row[0]

    def ready_subflows(self, limit: int = 64) -> list[tuple[str, str, RunSubflow]]:
        out = []
        scope, args = self._scope()
        for run_id, key, blob in self.conn.execute(
            "SELECT run_id, key, effect FROM outbox WHERE status = 'ready' AND kind = 'run-subflow'"
            f"{scope} LIMIT ?",
            (*args, limit),
        ):
            effect = _effect_dec.decode(blob)
            assert isinstance(effect, RunSubflow)
            out.append((run_id, key, effect))
        return out

    def mark(self, run_id: str, key: str, status: str) -> None:
        self.conn.execute(
            "UPDATE outbox SET status = ?, lease_owner = NULL WHERE run_id = ? AND key = ?",
            (status, run_id, key),
        )

    def close(self, run_id: str, key: str) -> None:
        self.conn.execute("DELETE FROM outbox WHERE run_id = ? AND key = ?", (run_id, key))

    def dead_letter(
        self, run_id: str, key: str, kind: str, dispatches: int, note: str, now: int
    ) -> None:
        self.conn.execute(
            "INSERT OR REPLACE INTO dead_letters (run_id, key, kind, dispatches, note, at_ms)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (run_id, key, kind, dispatches, note, now),
        )

    def dead_letters(self, run_id: str) -> list[dict[str, Any]]:
        return [
            {"key": key, "kind": kind, "dispatches": n, "note": note, "atMs": at}
            for key, kind, n, note, at in self.conn.execute(
                "SELECT key, kind, dispatches, note, at_ms FROM dead_letters WHERE run_id = ?"
                " ORDER BY at_ms, key",
                (run_id,),
            )
        ]

    def record_failure(
        self,
        run_id: str,
        key: str,
        error: flowcore.ErrorInfo,
        traceback: str | None,
        now: int,
    ) -> None:
        """Keep a handler failure of ``key`` with its traceback (the last one per key)."""
        self.conn.execute(
            "INSERT OR REPLACE INTO failures (run_id, key, type, message, traceback, at_ms)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (run_id, key, error.type, error.message, traceback, now),
        )

    def failures(self, run_id: str) -> list[dict[str, Any]]:
        return [
            {"key": key, "type": type_, "message": message, "traceback": tb, "atMs": at}
            for key, type_, message, tb, at in self.conn.execute(
                "SELECT key, type, message, traceback, at_ms FROM failures WHERE run_id = ?"
                " ORDER BY at_ms, key",
                (run_id,),
            )
        ]

    def has_ready_work(self) -> bool:
        scope, args = self._scope()
        row = self.conn.execute(
            f"SELECT 1 FROM outbox WHERE status = 'ready' AND kind IN (?, ?, ?){scope} LIMIT 1",
            (*WORK, *args),
        ).fetchone()
        return row is not None

    def claim_ready_work(self, now: int, limit: int) -> list[Claimed]:
        """Work left ``ready`` (by a process not working, or by recovery): dispatch it to us.

        Work that recovery took back from a lost worker (``requeue`` left the
        lost worker in ``lease_owner``) runs again under the same key: the
        claim appends an ``effect.redispatched`` record to its run's log in
        this same transaction.
        """
        scope, args = self._scope("o.run_id")
        rows = list(
            self.conn.execute(
                "SELECT o.run_id, o.key, o.effect, r.tools, o.dispatches, o.lease_owner"
                " FROM outbox o JOIN runs r USING (run_id)"
                f" WHERE o.status = 'ready' AND o.kind IN (?, ?, ?){scope} LIMIT ?",
                (*WORK, *args, limit),
            )
        )
        out = []
        for run_id, key, blob, tools, dispatches, lost in rows:
            note = None if lost is None else f"re-dispatched after recovery ({dispatches})"
            self.conn.execute(
                "UPDATE outbox SET status = 'dispatched', dispatches = dispatches + 1,"
                " lease_owner = ?, lease_until = ?, note = COALESCE(?, note)"
                " WHERE run_id = ? AND key = ? AND status = 'ready'",
                (self.worker_id, now + self.lease_ms, note, run_id, key),
            )
            if lost is not None:
                self.append_redispatched(run_id, key, dispatches, lost or None, now)
            effect = _effect_dec.decode(blob)
            assert isinstance(effect, (CallTool, RunAgent, RunTeam))
            out.append(Claimed(run_id, key, effect, tools))
        return out

    def append_redispatched(
        self, run_id: str, key: str, recovery: int, worker: str | None, now: int
    ) -> None:
        """Append ``effect.redispatched`` to a run's log (in the open transaction)."""
        cached = self.load(run_id)
        recorder = flowcore.Recorder(run_id, cached.next_index)
        records = recorder.redispatched(key, recovery, worker, now)
        self._touched.add(run_id)
        self._log_rows.extend((run_id, r.index, r.type, r.at, _dumps(r.data)) for r in records)
        cached.next_index = recorder.index
        buffered = self._run_rows.get(run_id)
        if buffered is not None:
            self._run_rows[run_id] = (buffered[0], recorder.index, buffered[2])
        else:
            self.conn.execute(
                "UPDATE runs SET next_index = ? WHERE run_id = ?", (recorder.index, run_id)
            )

    def expired(
        self, now: int, dead_owners: list[str]
    ) -> list[tuple[str, str, str, int, str, str | None]]:
        """Dispatched work whose worker is gone: (run, key, class, dispatches, kind, owner)."""
        marks = ",".join("?" * len(dead_owners)) or "''"
        scope, args = self._scope()
        return list(
            self.conn.execute(
                "SELECT run_id, key, exec_class, dispatches, kind, lease_owner FROM outbox"
                f" WHERE status = 'dispatched' AND kind IN (?, ?, ?) AND (lease_until < ?"
                f" OR lease_owner IN ({marks})){scope}",
                (*WORK, now, *dead_owners, *args),
            )
        )

    def requeue(self, run_id: str, key: str, lost: str | None = None) -> None:
        """Recovered work back to ``ready``, remembering the worker it was lost with.

        ``lease_owner`` of a ready row is otherwise NULL: a row that holds one
        was recovered, and its next claim is a re-dispatch (``''``: the lost
        worker is not known).
        """
        note = f"recovered from worker {lost}" if lost else "recovered from a lost worker"
        self.conn.execute(
            "UPDATE outbox SET status = 'ready', lease_owner = ?, lease_until = NULL, note = ?"
            " WHERE run_id = ? AND key = ?",
            (lost or "", note, run_id, key),
        )

    def extend_leases(self, keys: list[tuple[str, str]], now: int) -> None:
        self.conn.executemany(
            "UPDATE outbox SET lease_until = ? WHERE run_id = ? AND key = ? AND lease_owner = ?",
            [(now + self.lease_ms, run_id, key, self.worker_id) for run_id, key in keys],
        )

    # --- reading for the CLI -----------------------------------------------------------

    def log_records(self, run_id: str, start: int = 0) -> list[flowcore.Record]:
        return [
            flowcore.Record(type_, idx, run_id, at, _json_decode(data))
            for idx, type_, at, data in self.conn.execute(
                "SELECT idx, type, at, data FROM log WHERE run_id = ? AND idx >= ? ORDER BY idx",
                (run_id, start),
            )
        ]

    def outbox_rows(self, run_id: str) -> list[dict[str, Any]]:
        out = []
        for key, kind, status, due, dispatches, note, blob in self.conn.execute(
            "SELECT key, kind, status, due_ms, dispatches, note, effect FROM outbox"
            " WHERE run_id = ? ORDER BY rowid",
            (run_id,),
        ):  # only what is still open: done rows are deleted
            out.append(
                {
                    "key": key,
                    "kind": kind,
                    "status": status,
                    "dueMs": due,
                    "dispatches": dispatches,
                    "note": note,
                    "effect": _json_decode(blob),
                }
            )
        return out

    def children(self, run_id: str) -> list[str]:
        return [
            r[0]
            for r in self.conn.execute(
                "SELECT run_id FROM runs WHERE parent_run = ? ORDER BY created_ms, run_id",
                (run_id,),
            )
        ]
