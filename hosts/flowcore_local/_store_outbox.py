"""The local store's outbox and leases: the effects in flight and who runs them.

Every effect a transition emits gets an outbox row (``_outbox``): work is
``ready`` (or recorded as dispatched to this worker in the same transaction),
a timer waits for its due time, a question or a signal wait stays open until
answered. Workers claim ready work within the tools' limits
(``claim_ready_work``), keep their leases alive (``extend_leases``), and
recover the work of workers that are gone (``expired``, ``requeue``; the dead
letters and handler failures are kept here too).
"""

from __future__ import annotations

from typing import Any, TypeVar

import flowcore
from flowcore import (
    AskHuman,
    AwaitSignal,
    CallTool,
    Flow,
    RunAgent,
    RunSubflow,
    RunTeam,
    SignalRun,
    Sleep,
)

from ._store_base import WORK, Applied, Claimed, _dumps, _effect_dec, _json, _json_decode
from ._store_runs import RunStore

# An outbox row written again under its key replaces the old one whole: the
# columns the insert leaves out take their defaults (SQLite's INSERT OR REPLACE,
# said the way PostgreSQL says it too).
_REPLACE_OUTBOX = (
    " ON CONFLICT (run_id, key) DO UPDATE SET kind = excluded.kind, effect = excluded.effect,"
    " status = excluded.status, due_ms = excluded.due_ms, exec_class = excluded.exec_class,"
    " dispatches = excluded.dispatches, lease_owner = excluded.lease_owner,"
    " lease_until = excluded.lease_until, note = excluded.note, seq = excluded.seq,"
    " priority = excluded.priority, queued_ms = excluded.queued_ms, tool = excluded.tool"
)

E = TypeVar("E", bound=RunSubflow | SignalRun)


class OutboxStore(RunStore):
    """Outbox rows, claims, leases, dead letters and failures (see ``Store``)."""

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
    ) -> None:
        """The outbox row of a new effect; ``seq``: its ``effect.emitted`` record's index."""
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
            limits = self.tool_limits
            limited = limits and isinstance(effect, CallTool) and effect.tool in limits
            if self.dispatching and not limited and self.in_scope(run_id) and self.keeps(run_id):
                # Recorded as dispatched to this worker in the same transaction
                # that created it: the worker runs it right after the commit.
                status, lease_owner, lease_until = "dispatched", self.worker_id, now + self.lease_ms
                dispatches = 1
                applied.claimed.append(Claimed(run_id, key, effect, tools))
            else:
                status = "ready"
        elif isinstance(effect, (RunSubflow, SignalRun)):
            status, exec_class = "ready", "idempotent"
        elif isinstance(effect, Sleep):
            status, due = "timer", effect.until_ms
        if status == "ready":
            # Waiting work carries what orders its claim (its run's priority,
            # when it became ready) and a call's tool, for the tool limits.
            tool = effect.tool if isinstance(effect, CallTool) else None
            self._write(
                "INSERT INTO outbox (run_id, key, kind, effect, status, exec_class,"
                " dispatches, seq, priority, queued_ms, tool) VALUES (?, ?, ?, ?, 'ready', ?,"
                " COALESCE((SELECT dispatches FROM outbox WHERE run_id = ? AND key = ?), 0), ?,"
                " (SELECT priority FROM runs WHERE run_id = ?), ?, ?)" + _REPLACE_OUTBOX,
                (
                    run_id,
                    key,
                    kind,
                    _json.encode(effect),
                    exec_class,
                    run_id,
                    key,
                    seq,
                    run_id,
                    now,
                    tool,
                ),
            )
            return
        # Work re-issued under its key keeps counting the dispatches of its row.
        self._write(
            "INSERT INTO outbox (run_id, key, kind, effect, status, due_ms, exec_class,"
            " dispatches, lease_owner, lease_until, seq) VALUES (?, ?, ?, ?, ?, ?, ?, ? + COALESCE("
            "(SELECT dispatches FROM outbox WHERE run_id = ? AND key = ?), 0), ?, ?, ?)"
            + _REPLACE_OUTBOX,
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
                seq,
            ),
        )

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

    def busy(self, horizon_ms: int) -> bool:
        """Whether a running run can go on before ``horizon_ms`` without an answer or
        a signal: work ready or out (a child run's own rows speak for it, not its
        parent's ``run-subflow``), a child or signal-run to start, a timer due by then."""
        row = self.conn.execute(
            "SELECT 1 FROM outbox o JOIN runs r USING (run_id) WHERE r.status = 'running'"
            " AND (o.status = 'ready' OR (o.status = 'dispatched' AND o.kind != 'run-subflow')"
            " OR (o.status = 'timer' AND o.due_ms <= ?)) LIMIT 1",
            (horizon_ms,),
        ).fetchone()
        return row is not None

    def next_timer(self) -> int | None:
        scope, args = self._scope()
        row = self.conn.execute(
            f"SELECT min(due_ms) FROM outbox WHERE status = 'timer'{scope}", args
        ).fetchone()
        return None if row is None else row[0]

    def ready_subflows(self, limit: int = 64) -> list[tuple[str, str, RunSubflow]]:
        return self._ready("run-subflow", RunSubflow, limit)

    def ready_signal_runs(self, limit: int = 64) -> list[tuple[str, str, SignalRun]]:
        """The ``signal-run`` effects not delivered yet (read again inside the
        transaction that delivers them: a row there is not delivered)."""
        return self._ready("signal-run", SignalRun, limit)

    def _ready(self, kind: str, of: type[E], limit: int) -> list[tuple[str, str, E]]:
        """Up to ``limit`` ready outbox rows of ``kind``: (run id, key, effect)."""
        out: list[tuple[str, str, E]] = []
        scope, args = self._scope()
        for run_id, key, blob in self.conn.execute(
            f"SELECT run_id, key, effect FROM outbox WHERE status = 'ready' AND kind = ?{scope}"
            " LIMIT ?",
            (kind, *args, limit),
        ):
            effect = _effect_dec.decode(blob)
            assert isinstance(effect, of)
            out.append((run_id, key, effect))
        return out

    def signal_waits(self, name: str, key: str) -> list[str]:
        """The running runs with an open wait for signal ``name`` sent with ``key``."""
        found: list[str] = []
        for run_id, blob in self.conn.execute(
            "SELECT o.run_id, o.effect FROM outbox o JOIN runs r USING (run_id)"
            " WHERE o.kind = 'await-signal' AND o.status = 'waiting' AND r.status = 'running'"
            " ORDER BY o.run_id"
        ):
            effect = _effect_dec.decode(blob)
            assert isinstance(effect, AwaitSignal)
            names = effect.signals or (effect.signal,)
            if effect.key == key and name in names and run_id not in found:
                found.append(run_id)
        return found

    def mark(self, run_id: str, key: str, status: str) -> None:
        self.conn.execute(
            "UPDATE outbox SET status = ?, lease_owner = NULL WHERE run_id = ? AND key = ?",
            (status, run_id, key),
        )

    def close(self, run_id: str, key: str) -> None:
        self._write("DELETE FROM outbox WHERE run_id = ? AND key = ?", (run_id, key))

    def dead_letter(
        self, run_id: str, key: str, kind: str, dispatches: int, note: str, now: int
    ) -> None:
        self.conn.execute(
            "INSERT INTO dead_letters (run_id, key, kind, dispatches, note, at_ms)"
            " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (run_id, key) DO UPDATE SET"
            " kind = excluded.kind, dispatches = excluded.dispatches, note = excluded.note,"
            " at_ms = excluded.at_ms",
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
        self._write(
            "INSERT INTO failures (run_id, key, type, message, traceback, at_ms)"
            " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (run_id, key) DO UPDATE SET"
            " type = excluded.type, message = excluded.message, traceback = excluded.traceback,"
            " at_ms = excluded.at_ms",
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
        """Work left ``ready`` (by a process not working, by recovery, or held back by
        a tool limit): dispatch up to ``limit`` of it to us.

        Rows are taken by their run's priority (1 first), then in the order they
        became ready. A call of a tool in ``tool_limits`` is taken only while
        the tool has room: fewer than ``concurrency`` of its calls dispatched
        and unfinished (over every worker of the database), and fewer than
        ``rate`` of them dispatched within the last ``per_ms`` (``tool_starts``).
        Both are counted in this transaction holding the limited tools' locks
        (``Database.lock_tools``; on SQLite the write lock), so two workers
        never take the same room.

        The transaction may run beside others (``tx(shared=True)``): the rows
        it takes are locked as they are read, and rows another claim holds are
        passed over (``FOR UPDATE SKIP LOCKED`` on PostgreSQL).

        Work that recovery took back from a lost worker (``requeue`` left the
        lost worker in ``lease_owner``) runs again under the same key: the
        claim appends an ``effect.redispatched`` record to its run's log in
        this same transaction.
        """
        scope, args = self._scope("o.run_id")
        if self.tool_limits:
            self.db.lock_tools(self.conn, list(self.tool_limits))
        room = self._tool_room(now) if self.tool_limits else {}
        out: list[Claimed] = []
        passed: set[tuple[str, str]] = set()  # rows left ready this time
        while len(out) < limit:
            full = sorted(tool for tool, left in room.items() if left <= 0)
            skip = f" AND (o.tool IS NULL OR o.tool NOT IN ({','.join('?' * len(full))}))"
            want = limit - len(out) + len(passed)
            rows = list(
                self.conn.execute(
                    "SELECT o.run_id, o.key, o.effect, r.tools, o.dispatches, o.lease_owner"
                    f" FROM outbox o{self.db.indexed_by('outbox_queue')} JOIN runs r USING (run_id)"
                    f" WHERE o.status = 'ready' AND o.kind IN (?, ?, ?){skip if full else ''}"
                    f"{scope} ORDER BY o.priority, o.queued_ms LIMIT ?{self.db.skip_locked}",
                    (*WORK, *full, *args, want),
                )
            )
            progressed = False
            for run_id, key, blob, tools, dispatches, lost in rows:
                if (run_id, key) in passed or len(out) >= limit:
                    continue
                effect = _effect_dec.decode(blob)
                assert isinstance(effect, (CallTool, RunAgent, RunTeam))
                tool = effect.tool if isinstance(effect, CallTool) else None
                # A limited tool's calls go to whichever worker has room when
                # they are claimed, whatever its share of the runs (``keeps``).
                if (room[tool] <= 0 if tool in room else not self.keeps(run_id)) or (
                    lost is not None and not self._lock_run(run_id)
                ):
                    passed.add((run_id, key))
                    progressed = True
                    continue
                progressed = True
                limit_ = self.tool_limits.get(tool) if tool is not None else None
                note = None if lost is None else f"re-dispatched after recovery ({dispatches})"
                self.conn.execute(
                    "UPDATE outbox SET status = 'dispatched', dispatches = dispatches + 1,"
                    " lease_owner = ?, lease_until = ?, note = COALESCE(?, note),"
                    " tool = COALESCE(?, tool) WHERE run_id = ? AND key = ? AND status = 'ready'",
                    (
                        self.worker_id,
                        now + self.lease_ms,
                        note,
                        None if limit_ is None else tool,
                        run_id,
                        key,
                    ),
                )
                if limit_ is not None:
                    assert tool is not None
                    room[tool] -= 1
                    if limit_.rate is not None:
                        self.conn.execute(
                            "INSERT INTO tool_starts (tool, at_ms) VALUES (?, ?)", (tool, now)
                        )
                if lost is not None:
                    self.append_redispatched(run_id, key, dispatches, lost or None, now)
                out.append(Claimed(run_id, key, effect, tools))
            if len(rows) < want or not progressed:
                break
        return out

    def _lock_run(self, run_id: str) -> bool:
        """Lock ``run_id``'s row for this transaction unless another holds it
        (then False: its work waits for the next round), and make its next load
        check the cached state against the row."""
        if not self.db.row_locks:
            return True
        row = self.conn.execute(
            "SELECT 1 FROM runs WHERE run_id = ? FOR UPDATE SKIP LOCKED", (run_id,)
        ).fetchone()
        self._verified.discard(run_id)
        return row is not None

    def _tool_room(self, now: int) -> dict[str, int]:
        """How many more calls of each limited tool may be dispatched now."""
        room = {}
        for tool, limit in self.tool_limits.items():
            left = limit.concurrency if limit.concurrency is not None else limit.rate
            assert left is not None
            if limit.concurrency is not None:
                (running,) = self.conn.execute(
                    "SELECT count(*) FROM outbox WHERE tool = ? AND status = 'dispatched'", (tool,)
                ).fetchone()
                left = limit.concurrency - running
            if limit.rate is not None:
                since = now - limit.per_ms
                self.conn.execute(
                    "DELETE FROM tool_starts WHERE tool = ? AND at_ms <= ?", (tool, since)
                )
                (started,) = self.conn.execute(
                    "SELECT count(*) FROM tool_starts WHERE tool = ? AND at_ms > ?", (tool, since)
                ).fetchone()
                left = min(left, limit.rate - started)
            room[tool] = left
        return room

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
        cached.version += 1
        buffered = self._run_rows.get(run_id)
        if buffered is not None:
            self._buffer_run_row(run_id, cached, buffered[0], None)
        else:
            self.conn.execute(
                "UPDATE runs SET next_index = ?, version = ? WHERE run_id = ?",
                (recorder.index, cached.version, run_id),
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
            "UPDATE outbox SET status = 'ready', lease_owner = ?, lease_until = NULL, note = ?,"
            " priority = (SELECT priority FROM runs WHERE run_id = ?) WHERE run_id = ? AND key = ?",
            (lost or "", note, run_id, run_id, key),
        )

    def forget_idle(self) -> None:
        """Stop counting, among the runs this worker keeps, those it runs no work of.

        A run this worker kept may settle elsewhere (another worker's commit, a
        caller's cancel), or wait (for a signal, an answer, a timer) while its
        next work goes to another worker: counted still, it would fill the
        worker's share, and with every worker's share full of such runs, new
        work would stay ``ready`` with no worker claiming it (``keeps``).
        """
        owned = self._owned
        if not owned:
            return
        marks = ",".join("?" * len(owned))
        busy = {
            run_id
            for (run_id,) in self.conn.execute(
                "SELECT DISTINCT run_id FROM outbox WHERE status = 'dispatched'"
                f" AND lease_owner = ? AND run_id IN ({marks})",
                (self.worker_id, *owned),
            )
        }
        owned.intersection_update(busy)

    def extend_leases(self, keys: list[tuple[str, str]], now: int) -> None:
        self.conn.executemany(
            "UPDATE outbox SET lease_until = ? WHERE run_id = ? AND key = ? AND lease_owner = ?",
            [(now + self.lease_ms, run_id, key, self.worker_id) for run_id, key in keys],
        )

    def outbox_rows(self, run_id: str) -> list[dict[str, Any]]:
        out = []
        for key, kind, status, due, dispatches, note, blob in self.conn.execute(
            "SELECT key, kind, status, due_ms, dispatches, note, effect FROM outbox"
            " WHERE run_id = ? ORDER BY seq, key",
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
