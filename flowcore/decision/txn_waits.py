"""What a transaction waits for: the budget, pending keys, work, and abandoning.

``TxnWaits`` is the middle layer of ``Txn``: over the records
(``txn_records``) it charges the budget, waits for keys and timers, emits
work (budget, ``max_concurrency``), drops keys a step no longer waits for,
and abandons frames with what they wait for.

This module must never do I/O, read a clock or draw a random number.
"""

from __future__ import annotations

from typing import Any, TypeVar

import immutables
import msgspec

from ..language.spec import Budget
from . import keys, shares
from .halt import Exhausted
from .outcome import (
    NO_USAGE,
    effect_tag,
)
from .state import (
    Frame,
    Held,
    How,
    Pending,
    PendingKind,
    ReportRow,
    Resolution,
    Sched,
    SchedStatus,
    StepFrame,
    TeamProgress,
    add_report_row,
    parent_close,
)
from .txn_records import TxnRecords
from .wire import (
    BudgetRemaining,
    CallTool,
    CancellationType,
    Effect,
    RunAgent,
    RunSubflow,
    RunTeam,
    Settled,
    SignalRun,
    Sleep,
    Usage,
)

__all__ = ["TxnWaits"]

_EMPTY: immutables.Map[Any, Any] = immutables.Map()
_replace = msgspec.structs.replace

E = TypeVar("E", bound=RunAgent | RunTeam | CallTool)
W = TypeVar("W", bound=RunAgent | RunTeam | RunSubflow)


class TxnWaits(TxnRecords):
    """Waiting, work, the budget and abandoning, over the records."""

    __slots__ = ()

    # --- budget ---------------------------------------------------------------------

    def budget_remaining(self) -> BudgetRemaining:
        return self.ledger.remaining(self.run.started_ms, self.now_ms)

    def charge_usage(self, usage: Usage | None) -> None:
        """Add ``usage`` to what is spent; spent beyond a limit, the transition stops
        (``Exhausted``: the caller checks ``halt``)."""
        if usage is None or usage == NO_USAGE:
            return
        led = self.ledger
        led = _replace(
            led,
            used_steps=led.used_steps + usage.steps,
            used_cost=led.used_cost + usage.cost_minor_units,
            used_tokens=led.used_tokens + usage.tokens,
            used_tool_calls=led.used_tool_calls + usage.tool_calls,
            used_turns=led.used_turns + usage.turns,
            used_input_tokens=led.used_input_tokens + usage.input_tokens,
            used_output_tokens=led.used_output_tokens + usage.output_tokens,
            used_cache_read_tokens=led.used_cache_read_tokens + usage.cache_read_tokens,
        )
        self.ledger = led
        over = led.over()
        if over is not None:
            self.stop(Exhausted(over))

    def release_reserve(self, reserve: Budget) -> None:
        """Add ``reserve`` back to the limits the main work ran within (``on_budget_exhausted``);
        a reserved wall clock moves the deadline."""
        led = self.ledger
        widened: dict[str, int] = {}
        for name, extra in (
            ("steps", reserve.steps),
            ("cost", reserve.cost_minor_units),
            ("tokens", reserve.tokens),
            ("tool_calls", reserve.tool_calls),
            ("turns", reserve.turns),
            ("wall_clock_ms", reserve.wall_clock_ms),
        ):
            limit = getattr(led, name)
            if limit is not None and extra:
                widened[name] = limit + extra
        self.ledger = _replace(led, **widened)
        if "wall_clock_ms" in widened:
            self.drop_key(keys.deadline_key(self.key_run))
            due = self.run.started_ms + widened["wall_clock_ms"]
            self.timer(keys.reserve_deadline_key(self.key_run), due, PendingKind.DEADLINE, "")

    def check_clock(self) -> None:
        """Past the wall-clock budget, the transition stops (the caller checks ``halt``)."""
        wall = self.ledger.wall_clock_ms
        if wall is not None and self.now_ms >= self.run.started_ms + wall:
            self.stop(Exhausted("wall-clock"))

    # --- waiting --------------------------------------------------------------------

    def wait_for(self, key: str, kind: PendingKind, frame: str, effect: Effect) -> None:
        """Emit ``effect`` and wait for ``key`` (a question, a signal wait or a timer)."""
        self.effects.append(effect)
        self.emitted_now.add(key)
        self.pending = self.pending.set(key, Pending(kind, frame, effect))

    def timer(self, key: str, until_ms: int, kind: PendingKind, frame: str) -> None:
        self.wait_for(key, kind, frame, Sleep(until_ms=until_ms, idempotency_key=key))

    def stop_waiting(self, key: str) -> None:
        """``key`` was answered: forget it (answered keys are not remembered)."""
        self.pending = self.pending.delete(key)

    def drop_key(self, key: str, waiter: str | None = None) -> None:
        """Stop waiting for ``key``; a late answer is then recorded and ignored.

        What the key waited for is remembered, so that a late answer of the
        wrong kind, or not among the options, is still rejected. An effect
        emitted in this very decision never reaches the host: it is taken
        back (and its step refunded).

        Work of ``cancellation: wait_cancellation_completed`` is not dropped:
        the host cancels it and the run waits for its end (``CANCELLING``), on
        behalf of ``waiter`` (the step frame whose end waits for it; "": the
        run, which settles only after it; None: the work's own step).
        """
        entry = self.pending.get(key)
        if entry is None or entry.kind is PendingKind.CHILD:
            return  # a child the run waits for outlives its step: only settling stops it
        if entry.kind is PendingKind.CANCELLING:
            self.await_cancel(key, entry, waiter)  # whoever stops waiting hands the wait on
            return
        kind = entry.kind
        taken_back = key in self.emitted_now and self.take_back(key)
        close = parent_close(entry)
        if close == "wait" and not taken_back:
            # The child runs on and the run settles only after it (language.md §4.7).
            child = _replace(entry, kind=PendingKind.CHILD, frame="")
            self.pending = self.pending.set(key, child)
            return
        if (
            kind is PendingKind.WORK
            and not taken_back
            and getattr(entry.sent, "cancellation", "") == "wait-cancellation-completed"
        ):
            # The host cancels it and reports its end, which someone waits for.
            self.cancelling_now.append(key)
            self.await_cancel(key, entry, entry.frame if waiter is None else waiter)
            return
        row = None
        if kind is PendingKind.WORK or kind is PendingKind.SCHEDULED_CALL:
            status = "not-started" if taken_back else "uncertain"
            row = ReportRow(key, entry.seq, entry.effect, entry.target, status)
            self.pending = self.pending.delete(key)
            self.ledger = shares.release(self.ledger, entry.reserved)
            self.in_flight -= 1
            self.add_row(row)
            if taken_back:  # refunded: what issuing it charged
                led = self.ledger
                calls = 1 if entry.effect == "call-tool" else 0
                self.ledger = _replace(
                    led, used_steps=led.used_steps - 1, used_tool_calls=led.used_tool_calls - calls
                )
        else:
            self.pending = self.pending.delete(key)
            if kind is PendingKind.SIGNAL:
                self.unwait(key)
        if taken_back:
            self.resolve(key, Resolution(How.TAKEN_BACK))
            return
        step = ""
        if kind is PendingKind.QUESTION:
            frame = self.frames.get(entry.frame)
            step = frame.step if isinstance(frame, StepFrame) else ""
        how = How.DETACHED if close == "abandon" else How.ABANDONED
        self.resolve(key, Resolution(how, kind, step, row))

    def await_cancel(self, key: str, entry: Pending, waiter: str | None) -> None:
        """Make ``waiter`` the one that waits for the end of the cancelled work ``key``:
        a step frame (which counts it in ``cancelling``) or "" (the run). A frame
        that is going away hands its waits to whoever stops waiting for it."""
        if waiter is None:
            waiter = entry.frame
        if waiter and not isinstance(self.frames.get(waiter), StepFrame):
            waiter = ""
        if entry.kind is PendingKind.CANCELLING and entry.frame == waiter:
            return
        if waiter:
            frame = self.frames[waiter]
            assert isinstance(frame, StepFrame)
            self.set_frame(frame, cancelling=frame.cancelling + 1)
        moved = _replace(entry, kind=PendingKind.CANCELLING, frame=waiter)
        self.pending = self.pending.set(key, moved)

    def resolve(self, key: str, how: Resolution) -> None:
        w = self.waiting
        self.waiting = _replace(w, resolved=w.resolved.set(key, how))
        self.resolved_now.append(key)

    def take_back(self, key: str) -> bool:
        for i, effect in enumerate(self.effects):
            if not isinstance(effect, Settled) and effect.idempotency_key == key:
                del self.effects[i]
                return True
        return False

    def unwait(self, key: str) -> None:
        """The signal wait ``key`` is no longer open: off every name it waits for."""
        for field in ("waiters", "keyed_waiters"):
            waiters = getattr(self.waiting, field)
            changed = waiters
            for name, waiting in waiters.items():
                if key in waiting:
                    rest = tuple(k for k in waiting if k != key)
                    changed = changed.set(name, rest) if rest else changed.delete(name)
            if changed is not waiters:
                self.waiting = _replace(self.waiting, **{field: changed})

    # --- work ---------------------------------------------------------------------

    def emit_work(
        self,
        frame: str,
        effect: RunAgent | RunTeam | CallTool | RunSubflow | SignalRun,
        target: str,
        member: str = "",
        tag: str = "",
    ) -> None:
        if isinstance(effect, RunAgent | RunTeam | CallTool):
            effect = self.heartbeat(frame, effect)
            effect = self.cancellation(frame, effect)
        w = self.waiting
        seq = self.seq + 1
        cap = self.flow.limits.max_concurrency
        queued = w.queue_head < w.queue_tail
        busy = cap is not None and (self.in_flight >= cap or queued)
        # A step's work waits while its own step would come out of what pending
        # work holds (shares.py); a scheduled call, outside the steps, never does.
        no_room = not self.is_scheduled(frame) and (
            queued or shares.needs_room(self.ledger, isinstance(effect, CallTool))
        )
        if busy or no_room:
            # Held work goes first: new work queues behind it, in request order.
            self.seq = seq
            self.hold(Held(frame, effect, seq, target, member))
            return
        self.issue(frame, effect, member, seq, target, tag)  # it records seq

    def is_scheduled(self, frame: str) -> bool:
        """Whether ``frame`` names a scheduled call (not a step's frame)."""
        return bool(self.schedules) and frame in self.schedules

    def hold(self, held: Held) -> None:
        """Queue work until a slot (``max_concurrency``) or a step (shares.py) is free."""
        w = self.waiting
        self.waiting = _replace(
            w, queue=w.queue.set(w.queue_tail, held), queue_tail=w.queue_tail + 1
        )

    def heartbeat(self, fid: str, effect: E) -> E:
        """``effect`` with its step's heartbeat timeout and the last heartbeat details
        an earlier attempt reported, when the step has a heartbeat_timeout_ms."""
        frame = self.frames.get(fid)
        if not isinstance(frame, StepFrame) or frame.heartbeat_ms is None:
            return effect
        details = frame.heartbeat_details
        return _replace(effect, heartbeat_timeout_ms=frame.heartbeat_ms, heartbeat_details=details)

    def cancellation(self, fid: str, effect: E) -> E:
        """``effect`` with its step's cancellation type, when that is not try_cancel."""
        frame = self.frames.get(fid)
        if not isinstance(frame, StepFrame):
            return effect
        mode = self.flow.cancellation(self.flow.by_id[frame.step])
        if mode == "try_cancel":
            return effect
        return _replace(effect, cancellation=_WIRE_CANCELLATION[mode])

    def issue(
        self,
        frame: str,
        effect: RunAgent | RunTeam | CallTool | RunSubflow | SignalRun,
        member: str,
        seq: int,
        target: str,
        tag: str = "",
    ) -> None:
        """Emit work now (work handed a budget with its share: ``hand_budget``), or
        stop the transition (``Exhausted``: the caller checks ``halt``) if the
        budget has no room for it. Work issued again after an unknown outcome
        comes here directly: it is never held (``emit_work`` holds new work)."""
        # Report rows are written when work stops being pending (answered or
        # abandoned); pending work is reported from ``pending`` at settlement.
        led = self.ledger
        if led.steps is not None and led.used_steps + 1 > led.steps:
            self.stop(Exhausted("steps"))
            return
        if led.cost is not None and led.used_cost >= led.cost:
            self.stop(Exhausted("cost"))
            return
        calls = 0
        if isinstance(effect, CallTool):
            calls = 1  # a tool call; an agent's own ones come in its usage
            if led.tool_calls is not None and led.used_tool_calls + 1 > led.tool_calls:
                self.stop(Exhausted("tool-calls"))
                return
        elif not isinstance(effect, (RunSubflow, SignalRun)):  # an agent or a team: turn, tokens
            if led.turns is not None and led.used_turns >= led.turns:
                self.stop(Exhausted("turns"))
                return
            if led.tokens is not None and led.used_tokens >= led.tokens:
                self.stop(Exhausted("tokens"))
                return
        self.ledger = _replace(
            led, used_steps=led.used_steps + 1, used_tool_calls=led.used_tool_calls + calls
        )
        reserved = None
        if not tag:
            tag = effect_tag(effect)
            if isinstance(effect, RunAgent | RunTeam | RunSubflow):
                effect, reserved = self.hand_budget(frame, effect, member)
        key = effect.idempotency_key
        self.effects.append(effect)
        self.emitted.append(key)
        self.emitted_now.add(key)
        kind = (
            PendingKind.SCHEDULED_CALL
            if self.schedules and frame in self.schedules
            else PendingKind.WORK
        )
        entry = Pending(kind, frame, effect, tag, member, seq, target, reserved)
        self.pending = self.pending.set(key, entry)
        self.in_flight += 1
        if seq > self.seq:  # a new request (held or re-issued work was counted before)
            self.seq = seq

    def hand_budget(self, frame: str, effect: W, member: str) -> tuple[W, BudgetRemaining | None]:
        """``effect`` with its share of the budget (shares.py), and what it holds
        back from others. A detached child spends a budget of its own: it is
        told what remains and holds nothing."""
        left = self.budget_remaining()
        if isinstance(effect, RunSubflow) and effect.detached:
            return _replace(effect, budget_remaining=left), None
        fr = self.frames.get(frame)
        step = self.flow.by_id.get(fr.step) if isinstance(fr, StepFrame) else None
        cap = None if step is None else step.max_usage
        lane = shares.lane(self.flow, self.find_frame, frame, member)
        handed = shares.hand(self.ledger, left, lane, cap)
        self.ledger = shares.reserve(self.ledger, handed)
        return _replace(effect, budget_remaining=handed), handed

    def find_frame(self, fid: str) -> Frame | None:
        """A running frame, a list begun in this decision included."""
        frame = self.frames.get(fid)
        return self.opening.get(fid) if frame is None else frame

    def set_sched(self, sid: str, sched: Sched) -> None:
        """Replace a scheduled call's record; the journal names it (``scheduled.changed``)."""
        self.schedules = self.schedules.set(sid, sched)
        self.sched_changed.append(sid)

    def work_answered(self, key: str, entry: Pending, status: str) -> None:
        """Pending work got its result: it is no longer in flight; the report says how."""
        self.pending = self.pending.delete(key)
        self.ledger = shares.release(self.ledger, entry.reserved)
        self.in_flight -= 1
        self.add_row(ReportRow(key, entry.seq, entry.effect, entry.target, status))

    def drain_queue(self) -> None:
        cap = self.flow.limits.max_concurrency
        while True:
            w = self.waiting
            if w.queue_head >= w.queue_tail or (cap is not None and self.in_flight >= cap):
                return
            held = w.queue[w.queue_head]
            if not self.is_scheduled(held.frame) and shares.needs_room(
                self.ledger, isinstance(held.effect, CallTool)
            ):
                return  # until pending work releases what it holds
            self.waiting = _replace(
                w, queue=w.queue.delete(w.queue_head), queue_head=w.queue_head + 1
            )
            if not self.still_wanted(held):
                key = held.effect.idempotency_key
                self.add_row(
                    ReportRow(key, held.seq, effect_tag(held.effect), held.target, "not-started")
                )
                continue
            self.issue(held.frame, held.effect, held.member, held.seq, held.target)
            if self.halt is not None:
                return

    def still_wanted(self, held: Held) -> bool:
        key = held.effect.idempotency_key
        sched = self.schedules.get(held.frame)
        if sched is not None:
            return sched.status is SchedStatus.CALLED
        frame = self.frames.get(held.frame)
        if isinstance(frame, StepFrame):
            if frame.key == key:
                return True
            prog = frame.progress
            return isinstance(prog, TeamProgress) and key in prog.running
        return False

    def add_row(self, row: ReportRow) -> None:
        self.report = add_report_row(self.report, row)
        self.rows += 1

    # --- abandoning -------------------------------------------------------------------

    def descendants(self, root: str) -> set[str]:
        """Frame ids at or under ``root``: O(active frames x depth)."""
        frames = self.frames
        out = {root} if root in frames else set()
        for fid, frame in frames.items():
            parent = frame.parent
            while parent is not None:
                if parent == root or parent in out:
                    out.add(fid)
                    break
                above = frames.get(parent)
                parent = above.parent if above is not None else None
        return out

    def abandon_frame(self, root: str) -> None:
        """Abandon ``root`` and what runs under it; calls being cancelled that it
        waited for are waited for by the step that owns it."""
        frame = self.frames.get(root)
        self.abandon(self.descendants(root), None if frame is None else frame.parent)

    def abandon_children(self, fid: str) -> None:
        """Stop everything ``fid`` waits for, but its own timeout, and drop its children."""
        gone = self.descendants(fid)
        frame = self.frames.get(fid)
        own_timer = frame.timer if isinstance(frame, StepFrame) else None
        for key, entry in sorted(self.pending.items()):  # in key order in every process
            if entry.frame in gone and key != own_timer:
                self.drop_key(key, fid)
        gone.discard(fid)
        self.cancelled(gone)
        self.drop_frames(gone)

    def abandon(self, gone: set[str], waiter: str | None = None) -> None:
        if not gone:
            return
        for key, entry in sorted(self.pending.items()):  # in key order in every process
            if entry.frame in gone:
                self.drop_key(key, "" if waiter is None else waiter)
        self.cancelled(gone)
        self.drop_frames(gone)

    def cancelled(self, gone: set[str]) -> None:
        """Steps abandoned while they ran read ``{status: cancelled}`` to expressions
        (level 2; language.md §9.2). In order of their frame ids: the journal's
        order must not depend on how a set of strings iterates."""
        if self.semantics < 2:
            return
        frames = self.frames
        for fid in sorted(gone):
            frame = frames.get(fid)
            if isinstance(frame, StepFrame) and frame.env in self.envs:
                name = self.envs[frame.env].scope + frame.step
                self.record(name, {"status": "cancelled", "output": None}, rewrite=True)

    def drop_frames(self, gone: set[str]) -> None:
        frames = self.frames
        for fid in gone:
            if fid in frames:
                frames = frames.delete(fid)
        self.frames = frames

    def abandon_all(self) -> None:
        """The run is ending: stop waiting for anything but scheduled calls and the deadline."""
        for key, entry in sorted(self.pending.items()):  # in key order in every process
            if entry.kind not in _OUTLIVE_THE_STEPS:
                self.drop_key(key, "")  # the run waits for calls being cancelled
        self.frames = _EMPTY


_WIRE_CANCELLATION: dict[str, CancellationType] = {
    "try_cancel": "try-cancel",
    "wait_cancellation_completed": "wait-cancellation-completed",
    "abandon": "abandon",
}

_OUTLIVE_THE_STEPS = frozenset(
    (
        PendingKind.SCHEDULE_DELAY,
        PendingKind.SCHEDULED_CALL,
        PendingKind.DEADLINE,
        PendingKind.CHILD,
    )
)
