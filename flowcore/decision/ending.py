"""How a run ends: the output, compensations, outliving calls, and the settled effect.

When the flow's own list ends (``root_done``), the run winds down: on
failure or cancel the compensations run first (newest first), scheduled
calls not yet due are cancelled, and outliving scheduled calls are waited
for; then the run settles. Settling builds the report of every work effect
of the run and replaces the decision's effects with the one ``settled``
effect: work emitted earlier in the same decision never reaches the host
and is reported as not-started. A transition that stops (``halt``) is
handled by ``halted``: a budget that runs out settles the run at once
(``exhaust``), a ``continue_as_new`` step ends the incarnation
(``continue_as_new``).

This module must never do I/O, read a clock or draw a random number.
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any, assert_never

import immutables
import msgspec

from .._data import MAX_EVENT_BYTES, json_size
from ..language.expr import TemplateError
from . import keys, shares, updates
from .constructs import compensation, schedule
from .halt import ContinueRequested, Exhausted
from .outcome import Failed, Ok, Outcome, effect_tag, err
from .state import (
    Ending,
    Frame,
    How,
    ListKind,
    PendingKind,
    ReportRow,
    Resolution,
    SchedStatus,
    SettledStatus,
    StepFrame,
    oldest_first,
    parent_close,
)
from .wire import CarriedCall, CarriedSignal, ContinueAsNew, ErrorInfo, ReportEntry, Settled

if TYPE_CHECKING:
    from .txn import Txn

__all__ = [
    "NeedsReport",
    "continue_as_new",
    "exhaust",
    "halted",
    "maybe_finish",
    "root_done",
    "settle",
    "wind_down",
]

_BY_SEQ = operator.attrgetter("seq")
_REPORTED = frozenset(
    (PendingKind.WORK, PendingKind.SCHEDULED_CALL, PendingKind.CHILD, PendingKind.CANCELLING)
)
_AWAITED = frozenset((PendingKind.CHILD, PendingKind.CANCELLING))
_EMPTY: immutables.Map[Any, Any] = immutables.Map()
_EXHAUSTED = {
    "steps": "step budget exhausted",
    "cost": "cost budget exhausted",
    "wall-clock": "wall-clock budget exhausted",
    "tokens": "token budget exhausted",
    "tool-calls": "tool-call budget exhausted",
    "turns": "turn budget exhausted",
}


class NeedsReport(Exception):
    """Settling a state restored without its report rows (``flowcore.persist``)."""


def root_done(t: Txn, child: Frame | None, out: Outcome) -> None:
    """A list without a parent ended: the flow's own steps, a compensation, or the
    steps run within the reserve after the budget ran out."""
    kind = getattr(child, "list", None)
    if kind is ListKind.UPDATE:
        assert child is not None and not isinstance(child, StepFrame)
        updates.handler_done(t, child, out)
        return
    if kind is ListKind.COMPENSATION:
        next_compensation(t)
        return
    if kind is ListKind.FINAL:
        final_done(t, out)
        return
    if type(out) is Failed:
        t.abandon_all()
        wind_down(t, Ending("failed", None, out.error))
        return
    output = None
    if t.flow.output is not None:
        try:
            output = t.flow.output.evaluate(t.resolver(""))
        except TemplateError as exc:
            wind_down(t, Ending("failed", None, err("expression-error", f"output: {exc}")))
            return
        # A parent receives the output in a subflow-settled event, which has
        # the size limit of every event: a larger output fails here, where
        # the flow author can see why, not in the parent.
        size = json_size(output)
        if size > MAX_EVENT_BYTES:
            message = f"output: {size:,} bytes as JSON, over the limit of {MAX_EVENT_BYTES:,}"
            wind_down(t, Ending("failed", None, err("output-too-large", message)))
            return
    wind_down(t, Ending("completed", output, None))


def wind_down(t: Txn, ending: Ending) -> None:
    """Run compensations (on failure or cancel), wait for outliving calls, settle."""
    t.tree = msgspec.structs.replace(t.tree, ending=ending)
    if ending.status != "completed":  # a completed run waits for its updates instead
        updates.abandon_running(t, _abandoned(ending.status))
    if ending.status in ("failed", "cancelled") and t.tree.compensations is not None:
        next_compensation(t)
        return
    schedule.cancel_pending(t)
    maybe_finish(t)


def next_compensation(t: Txn) -> None:
    if compensation.run_next(t):
        return
    schedule.cancel_pending(t)
    maybe_finish(t)


def maybe_finish(t: Txn) -> None:
    """Settle if the run is winding down and nothing it must wait for is left."""
    ending = t.tree.ending
    if ending is None or t.frames:
        return
    if ending.status != "cancelled" and schedule.outstanding(t):
        return  # an outliving scheduled call is still due (a cancelled run waits for nothing)
    if any(entry.kind in _AWAITED for entry in t.pending.values()):
        # a child run of parent_close: wait has not settled, or a call of cancellation:
        # wait_cancellation_completed being cancelled has not ended (even for a cancelled run)
        return
    settle(t, ending.status, ending.output, ending.error, None)


def halted(t: Txn) -> None:
    """The transition stopped (``Txn.stop``): handle its halt, if it has one.

    Called where a transition began (``interp.start``, ``transitions.apply``),
    once the work that stopped has returned all the way up."""
    halt = t.take_halt()
    match halt:
        case None:
            return
        case Exhausted():
            exhaust(t, halt.limit)
        case ContinueRequested():  # at once, before anything else of the transition
            continue_as_new(t, halt.key, halt.input, halt.idle)
        case _:
            assert_never(halt)


def exhaust(t: Txn, limit: str) -> None:
    """A limit was reached: settle ``budget-exhausted`` at once, or first run the
    flow's ``on_budget_exhausted`` steps within the reserve (once)."""
    t.abandon_all()
    updates.abandon_running(t, _abandoned("budget-exhausted"))
    final = t.flow.on_exhausted
    if final is None or t.tree.exhausted is not None or t.tree.ending is not None:
        settle(t, "budget-exhausted", None, err("budget-exhausted", _EXHAUSTED[limit]), limit)
        return
    t.tree = msgspec.structs.replace(t.tree, exhausted=limit)
    t.release_reserve(final.reserve)
    out = t.start_list(keys.FINAL_LIST, None, "", "", "", ListKind.FINAL)
    if out is not None:
        final_done(t, out)
    if t.halt is None:
        t.drain_queue()
    again = t.take_halt()
    if again is not None:  # the reserve was not enough: settle now
        # The final steps cannot continue as new (``continue-refused``): only a
        # budget stops them.
        assert isinstance(again, Exhausted)
        t.abandon_all()
        settle(t, "budget-exhausted", None, err("budget-exhausted", _EXHAUSTED[again.limit]), limit)


def final_done(t: Txn, out: Outcome) -> None:
    """``on_budget_exhausted``'s steps ended: settle ``budget-exhausted`` with their output."""
    limit = t.tree.exhausted
    final = t.flow.on_exhausted
    assert limit is not None and final is not None
    t.abandon_all()
    error = err("budget-exhausted", _EXHAUSTED[limit])
    match out:
        case Ok():
            output = out.value
        case Failed():
            failed = out.error
            why = f"{failed.type}: {failed.message}"
            message = f"{_EXHAUSTED[limit]}; its final steps failed ({why})"
            settle(t, "budget-exhausted", None, err("budget-exhausted", message), limit)
            return
        case _:
            assert_never(out)
    if final.output is not None:
        try:
            output = final.output.evaluate(t.resolver(""))
        except TemplateError as exc:
            message = f"{_EXHAUSTED[limit]}; on_budget_exhausted.output: {exc}"
            settle(t, "budget-exhausted", None, err("budget-exhausted", message), limit)
            return
    if json_size(output) > MAX_EVENT_BYTES:
        message = f"{_EXHAUSTED[limit]}; its final output is over {MAX_EVENT_BYTES:,} bytes"
        settle(t, "budget-exhausted", None, err("budget-exhausted", message), limit)
        return
    settle(t, "budget-exhausted", output, error, limit)


def settle(
    t: Txn, status: SettledStatus, output: Any, error: ErrorInfo | None, exhausted: str | None
) -> None:
    if not t.report_complete:
        raise NeedsReport
    updates.abandon_running(t, _abandoned(status))
    schedule.settle_open(t)
    settled = Settled(
        status=status,
        output=output,
        error=error,
        exhausted=exhausted,  # type: ignore[arg-type]
        report=_close(t),
    )
    t.settled = settled
    t.effects = [settled]


def continue_as_new(t: Txn, key: str, input: Any, idle: int = 0) -> None:
    """End this incarnation and hand the next one its input, buffered signals
    and scheduled calls not yet due (``ContinueAsNew``; ``start(continued=)``).

    Like settling, everything still waited for is abandoned (the host stops
    it) and the effect replaces the decision's others; compensations do not
    run (the run goes on) and no event applies to this state any more.
    ``idle``: the incarnations in a row, this one included, that continue
    without having waited for anything (0 when this one waited).
    """
    if not t.report_complete:
        raise NeedsReport
    updates.abandon_running(t, "the run continued as new before the update ended")
    signals = tuple(
        CarriedSignal(signal=name, payload=payload)
        for name, payloads in sorted(t.waiting.signals.items())
        for payload in payloads
    ) + tuple(
        CarriedSignal(signal=name, payload=payload, key=signal_key)
        for slot, payloads in sorted(t.waiting.keyed_signals.items())
        for name, signal_key in [msgspec.json.decode(slot)]
        for payload in payloads
    )
    carried = tuple(
        CarriedCall(
            id=sid,
            tool=sched.tool,
            input=sched.input,
            created_ms=sched.created_ms,
            due_ms=sched.due_ms,
            outlive=sched.outlive,
            outside=sched.outside,
            **schedule.carried_recurrence(sched),
        )
        for sid, sched in sorted(t.schedules.items())
        if sched.status is SchedStatus.PENDING
    )
    schedule.settle_open(t, keep_pending=True)
    remaining = t.budget_remaining() if t.run.depth > 0 else None
    effect = ContinueAsNew(
        input=input,
        incarnation=t.tree.incarnation + 1,
        idempotency_key=key,
        signals=signals,
        scheduled=carried,
        budget_remaining=remaining,
        report=_close(t),
        metadata=None if t.metadata is None else dict(t.metadata),
        idle_incarnations=idle,
    )
    t.waiting = msgspec.structs.replace(
        t.waiting, signals=_EMPTY, waiters=_EMPTY, keyed_signals=_EMPTY, keyed_waiters=_EMPTY
    )
    t.tree = msgspec.structs.replace(t.tree, continued=effect, compensations=None)
    t.effects = [effect]


def _abandoned(status: str) -> str:
    return f"the run settled {status} before the update ended"


def _close(t: Txn) -> tuple[ReportEntry, ...]:
    """The report of every work effect; then nothing is waited for any more."""
    # A work key keeps its seq for life (a re-issue or a late answer rewrites
    # its row), so a stable sort by seq puts each key's rows together, oldest
    # first, and the last of them is how it ended.
    rows = oldest_first(t.report)
    w = t.waiting
    fresh: dict[str, ReportRow] = {}  # rows settling writes: what was still open
    for key, entry in t.pending.items():
        if entry.kind in _REPORTED:
            fresh[key] = ReportRow(key, entry.seq, entry.effect, entry.target, "uncertain")
    for i in range(w.queue_head, w.queue_tail):
        held = w.queue[i]
        key = held.effect.idempotency_key
        fresh[key] = ReportRow(key, held.seq, effect_tag(held.effect), held.target, "not-started")
    # Work emitted in this very decision never reaches the host.
    emitted = set(t.emitted)
    if emitted:
        last: dict[str, ReportRow] = {row.key: row for row in rows if row.key in emitted}
        last.update(fresh)
        for key in emitted:
            row = last.get(key)
            if row is not None and row.status == "uncertain":
                fresh[key] = msgspec.structs.replace(row, status="not-started")
    rows.extend(fresh.values())
    rows.sort(key=_BY_SEQ)
    entries: list[ReportEntry] = []
    n = len(rows)
    for i, r in enumerate(rows):
        if i + 1 < n and rows[i + 1].key == r.key:
            continue  # a later row of the same key wins
        entries.append(
            ReportEntry(
                idempotency_key=r.key,
                effect=r.effect,  # type: ignore[arg-type]
                target=r.target,
                status=r.status,  # type: ignore[arg-type]
            )
        )
    for row in sorted(fresh.values(), key=_BY_SEQ):
        t.add_row(row)  # the rows already in the report stand as they are
    # What is still waited for is abandoned (the host stops it: ``plan``),
    # but what this very decision emitted never reaches the host.
    for key, entry in sorted(t.pending.items()):
        how = How.TAKEN_BACK if key in t.emitted_now else How.ABANDONED
        if how is How.ABANDONED and parent_close(entry) == "abandon":
            how = How.DETACHED  # the host leaves the child run to run on
        t.resolve(key, Resolution(how, entry.kind))
    # After settlement every event is rejected: nothing is waited for, and
    # nothing holds a share of the budget.
    t.pending = _EMPTY
    t.ledger = shares.unreserved(t.ledger)
    t.in_flight = 0
    t.waiting = msgspec.structs.replace(t.waiting, queue=_EMPTY, queue_head=w.queue_tail)
    t.frames = _EMPTY
    t.tree = msgspec.structs.replace(t.tree, ending=None)
    return tuple(entries)
