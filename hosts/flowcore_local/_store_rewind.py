"""The local store's rewinds and forks: rewriting a run from a point of its log.

A resume rewinds a failed run to just before the event that failed it
(``rewind``; ``_resume`` decides whether and where), a fork writes a new run
with a source's history up to a point (``fork_run``), an upgrade moves a
running run to another version of its flow (``move_run``). Each re-derives
the run's rows from its log (``_rebuild``) in the caller's transaction.
"""

from __future__ import annotations

from typing import Any

import msgspec

import flowcore
from flowcore import CallTool, ContinueAsNew, Effect, Flow, Settled, State, persist

from . import _scheduled as scheduled
from ._store_base import (
    Applied,
    HostError,
    LocalUnknownRun,
    RunRow,
    _Cached,
    _dumps,
    _effect_dec,
    _json,
    _json_decode,
    _Unsaved,
)
from ._store_outbox import OutboxStore


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
    continued = None
    if data.get("incarnation", 1) != 1:  # the log begins at a later incarnation
        continued = msgspec.convert(
            {
                "kind": "continue-as-new",
                "input": data.get("input"),
                "incarnation": data["incarnation"],
                "idempotencyKey": "",
                "signals": data.get("signals", []),
                "scheduled": data.get("scheduled", []),
                "idleIncarnations": data.get("idleIncarnations", 0),
            },
            ContinueAsNew,
        )
    decision = flowcore.start(
        flow,
        data.get("input"),
        run_id=run_id,
        now_ms=first.at,
        budget=flowcore.budget_from_wire(budget),
        depth=data.get("depth", 0),
        semantics=data.get("semantics", 1),
        metadata=data.get("metadata"),
        continued=continued,
    )
    rows = _Unsaved()
    state = decision.state
    rows.take(state)
    for record in records[1:]:
        if record.index >= cut:
            break
        if record.type == "event.reported":
            state = persist.advance(state, flowcore.event_from_wire(record.data)).state
            rows.take(state)
        elif record.type == "run.started" and state.tree.continued is not None:
            # The next incarnation: its rows are all the run stores.
            effect, depth = state.tree.continued, state.run.depth
            state = flowcore.continue_run(flow, effect, run_id, record.at, depth=depth).state
            rows = _Unsaved()
            rows.take(state)
    return state, rows.results, rows.report, rows.resolved


class RewindStore(OutboxStore):
    """Rewind (resume), fork and move (upgrade) of runs (see ``Store``)."""

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
        (key,) = conn.execute("SELECT dedup_key FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        other = None if key is None else self.deduplicated(key)
        if other is not None and other != run_id:  # one running run per dedup key
            raise HostError(
                f"cannot resume run {run_id!r}: run {other!r}, started with its dedup key"
                f" {key!r}, is running"
            )
        self._flush()
        state, results, report_rows, resolved = _rebuild(flow, run_id, records, cut)
        (n,) = conn.execute(
            "SELECT COALESCE(MAX(n), 0) + 1 FROM resumes WHERE run_id = ?", (run_id,)
        ).fetchone()
        before = conn.execute(
            "SELECT tools, error, version FROM runs WHERE run_id = ?", (run_id,)
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
        self._put_rebuilt(run_id, state, results, report_rows, resolved)
        conn.execute("DELETE FROM dead_letters WHERE run_id = ? AND key = ?", (run_id, failed_key))
        conn.execute(
            "UPDATE runs SET status = 'running', output = NULL, error = NULL, tools = ?,"
            " updated_ms = ?, next_index = ?, state = ?, saved_index = ?, version = ?"
            " WHERE run_id = ?",
            (tools, now, cut, persist.encode_hot(state), cut, before[2] + 1, run_id),
        )
        self._touched.add(run_id)
        self._cache[run_id] = _Cached(cut, state, tools, len(report_rows), before[2] + 1, cut)
        self._verified.add(run_id)
        applied = Applied(run_id)
        emitted = {  # each open effect's last emission before the cut
            r.data.get("idempotencyKey"): r.index
            for r in records
            if r.type == "effect.emitted" and r.index < cut and isinstance(r.data, dict)
        }
        for effect in pending:
            if not isinstance(effect, Settled | ContinueAsNew):
                seq = emitted.get(effect.idempotency_key, cut)
                self._outbox(run_id, flow, effect, now, applied, tools, seq)
        if child_resumed:
            self.mark(run_id, failed_key, "dispatched")
        return applied

    # --- forking a run -----------------------------------------------------------------

    def fork_run(
        self,
        source: RunRow,
        fork: flowcore.Fork,
        now: int,
        tools: str | None,
        budget: Any,
    ) -> Applied:
        """Write the run ``fork`` describes (in the open transaction).

        The run's row (the source's flow, input, budget and principal; a root
        run), its log (``fork.records``), the rows its state stores (re-derived
        event by event as its own transactions would have written them) and
        its checkpoint; ``fork.pending`` get their outbox rows, as a new
        decision's effects do, so a worker dispatches the open work.
        """
        conn = self.conn
        self._flush()
        run_id = fork.run_id
        flow = self.flow_by_hash(source.spec_hash)
        records = list(fork.records)
        end = len(records)
        state, results, report_rows, resolved = _rebuild(flow, run_id, records, end)
        conn.execute(
            "INSERT INTO runs (run_id, flow_id, spec_hash, parent_run, parent_key, depth, status,"
            " input, budget, tools, created_ms, updated_ms, next_index, principal, state,"
            " saved_index) VALUES (?, ?, ?, NULL, NULL, 0, 'running', ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                run_id,
                source.flow_id,
                source.spec_hash,
                _dumps(source.input),
                None if budget is None else _dumps(budget),
                tools,
                now,
                now,
                end,
                source.principal,
                persist.encode_hot(state),
                end,
            ),
        )
        conn.executemany(
            "INSERT INTO log (run_id, idx, type, at, data) VALUES (?, ?, ?, ?, ?)",
            [(run_id, r.index, r.type, r.at, _dumps(r.data)) for r in records],
        )
        self._put_rebuilt(run_id, state, results, report_rows, resolved)
        (version,) = conn.execute("SELECT version FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        self._touched.add(run_id)
        self._cache[run_id] = _Cached(end, state, tools, len(report_rows), version, end)
        self._verified.add(run_id)
        applied = Applied(run_id, records=records)
        emitted = {
            r.data.get("idempotencyKey"): r.index
            for r in records
            if r.type == "effect.emitted" and isinstance(r.data, dict)
        }
        for effect in fork.pending:
            seq = emitted.get(effect.idempotency_key, end)
            self._outbox(run_id, flow, effect, now, applied, tools, seq)
        return applied

    # --- moving a run to another version of its flow -----------------------------------

    def move_run(self, run_id: str, flow: Flow, records: list[flowcore.Record], now: int) -> State:
        """Pin running run ``run_id`` to ``flow`` (in the open transaction); its new state.

        The caller checked with ``flowcore.upgrade`` that ``records`` (the
        run's whole live log) replays against ``flow``. The state and every
        row it stores are re-derived event by event under ``flow``, as
        ``rewind`` does, and written with a checkpoint at the log's end; the
        run's row takes the new ``spec_hash`` and a new ``version``, so a
        worker that cached the old state reloads it (``load``), and a group
        commit that read it is redone (``Conflict``). The log and the outbox
        stay: the new version waits for the same effects under the same keys
        (in-flight work, timers, questions, signal waits go on as they are);
        open calls take the execution class the new spec declares for their
        tool.
        """
        conn = self.conn
        self._flush()
        row = conn.execute(
            "SELECT next_index, version, tools FROM runs WHERE run_id = ?", (run_id,)
        ).fetchone()
        if row is None:
            raise LocalUnknownRun(run_id, f"no run {run_id!r} in the database")
        end, version, tools = row
        if not records or records[-1].index + 1 != end:  # (read in this transaction)
            raise HostError(f"run {run_id!r}: its log does not end at index {end - 1}")
        state, results, report_rows, resolved = _rebuild(flow, run_id, records, end)
        for table in ("results", "report", "resolved"):
            conn.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))
        self._put_rebuilt(run_id, state, results, report_rows, resolved)
        conn.execute(
            "UPDATE runs SET spec_hash = ?, updated_ms = ?, state = ?, saved_index = ?,"
            " version = ? WHERE run_id = ?",
            (flow.spec_hash, now, persist.encode_hot(state), end, version + 1, run_id),
        )
        classes = []
        for key, blob in conn.execute(
            "SELECT key, effect FROM outbox WHERE run_id = ? AND kind = 'call-tool'", (run_id,)
        ).fetchall():
            effect = _effect_dec.decode(blob)
            if isinstance(effect, CallTool):
                decl = flow.tools.get(effect.tool)
                classes.append((decl.exec_class if decl is not None else "uncertain", run_id, key))
        conn.executemany("UPDATE outbox SET exec_class = ? WHERE run_id = ? AND key = ?", classes)
        self._touched.add(run_id)
        self._cache[run_id] = _Cached(end, state, tools, len(report_rows), version + 1, end)
        self._verified.add(run_id)
        return state

    def _put_rebuilt(
        self,
        run_id: str,
        state: State,
        results: dict[str, Any],
        report_rows: list[Any],
        resolved: dict[str, Any],
    ) -> None:
        """The rows a state rebuilt by ``_rebuild`` stores (its run has none yet)."""
        conn = self.conn
        scheduled.project_all(conn, run_id, state)
        self._put_metadata(run_id, state)
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

    def forked_from(self, run_id: str) -> Any:
        """``{runId, index}`` when ``run_id`` is a fork (its ``run.started`` says so), else None."""
        row = self.conn.execute(
            "SELECT data FROM log WHERE run_id = ? AND idx = 0", (run_id,)
        ).fetchone()
        data = None if row is None else _json_decode(row[0])
        return data.get("forkedFrom") if isinstance(data, dict) else None

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
