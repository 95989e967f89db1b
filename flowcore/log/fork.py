"""Forking a run: a new run whose history is another run's log up to a point.

Theory of operation
-------------------

A fork (Temporal's reset, DBOS's ``fork_workflow``) is a new run, under a new
run id, of the same flow and input as its source, that has already received
the events the source received before a point in the source's log. Because
``start`` and ``advance`` are pure, the fork is built exactly as replay
rebuilds a run: ``start`` with what the source's ``run.started`` recorded
(input, budget, depth, decision level, clock) under the new run id, then
``advance`` with each event the source reported before the point. Work that
was answered before the point keeps its result and is never run again; work
that was still open at the point is open in the fork, under the fork's keys,
so the host dispatches it again; everything the source did after the point
does not happen in the fork.

The point is a record index of the source's log: the fork takes the records
before it. It must fall between two decisions: the index of an event record
(``event.reported``, ``event.rejected``, ``effect.redispatched``), or the end
of a log that has not settled. ``from_step`` names a step instead: the point
is the end of the decision that emitted the step's first effect (or the first
effect of a step nested in it), so the step is open in the fork and it, and
everything after it, runs again.

Keys hold the run id (``keys``), so the source's events are carried over
with their keys spelled for the fork: the source's run id prefix is replaced
by the fork's (``r-1/fetch#1`` becomes ``r-1-fork-7/fetch#1``); nothing else
in an event changes, and their ``atMs`` are the source's. The fork's log is an
ordinary log that ``replay`` verifies: its ``run.started`` (at the source's
start time) also records ``forkedFrom`` ``{runId, index}``, and it holds the
carried events as ``event.reported`` records with the effects they derive
under the fork's keys. ``event.rejected`` and ``effect.redispatched``
records change no state and are not carried.

An event the fork cannot apply (a flow that reads ``run.id`` and decides
differently under the new id, say) is a ``ForkError`` naming its index.

This module must never do I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, TypeAlias

import msgspec

from .._data import short
from .._errors import EventRejected, FlowcoreError
from ..decision.interp import advance, start
from ..decision.keys import parse_key
from ..decision.state import State
from ..decision.waiting import waiting_for
from ..decision.wire import (
    AskHuman,
    AwaitSignal,
    CallTool,
    ContinueAsNew,
    Event,
    RunAgent,
    RunSubflow,
    RunTeam,
    Settled,
    SignalRun,
    Sleep,
    effect_from_wire,
    event_from_wire,
)
from ..language.spec import Flow
from .formats import as_records
from .records import (
    EFFECT_EMITTED,
    EFFECT_REDISPATCHED,
    EVENT_REJECTED,
    EVENT_REPORTED,
    RUN_SETTLED,
    RUN_STARTED,
    LogRead,
    Record,
    Recorder,
    RunStartedData,
    budget_from_wire,
)
from .replay import replay

__all__ = ["Fork", "ForkError", "fork", "fork_point", "source_key"]

# An effect a run waits for: every effect but ``settled``.
OpenEffect: TypeAlias = (
    RunAgent | RunTeam | CallTool | AskHuman | Sleep | AwaitSignal | RunSubflow | SignalRun
)

# Records a fork point may name: each begins a decision (or stands between two).
_BOUNDARY = frozenset({EVENT_REPORTED, EVENT_REJECTED, EFFECT_REDISPATCHED})


class ForkError(FlowcoreError, ValueError):
    """A fork that cannot be made: a bad point, an unknown step, an event it cannot apply.

    ``index`` is the source record index concerned and ``step`` the step asked
    for, when there is one.
    """

    def __init__(self, message: str, index: int | None = None, step: str | None = None) -> None:
        self.index = index
        self.step = step
        super().__init__(message)


class Fork(msgspec.Struct, frozen=True, kw_only=True):
    """A new run forked from ``source_run_id`` at source index ``at``.

    ``records``: the fork's log, from its ``run.started``; ``state``: the
    fork's state after them; ``pending``: the effects it waits for at that
    point (work, timers, questions, signal waits; never ``settled``), in
    emission order, which a host opens as it opens a new decision's effects.
    """

    run_id: str
    source_run_id: str
    at: int
    records: tuple[Record, ...]
    state: State
    pending: tuple[OpenEffect, ...]


def source_key(key: str, fork_run_id: str, source_run_id: str) -> str:
    """The source's key for a fork's ``key``: the same work as the source spelled it.

    A handler that records what it did by key can look this up to tell work
    the source already did (after the fork point, say) from new work.
    """
    if not key.startswith(fork_run_id + "/"):
        raise ValueError(f"key {key[:200]!r} does not belong to run {fork_run_id[:200]!r}")
    return source_run_id + key[len(fork_run_id) :]


def _records(records: bytes | LogRead | Iterable[Record]) -> list[Record]:
    """The source's records, their envelopes checked (``ForkError`` naming the first bad one)."""
    out = as_records(records)
    if not out or not isinstance(out[0], Record) or out[0].type != RUN_STARTED:
        raise ForkError(
            "a fork needs the source's log from a run.started on (index 0, or the start of"
            " an incarnation whose earlier records a host dropped)"
        )
    run_id = out[0].run_id
    base = out[0].index
    if type(base) is not int or base < 0:
        raise ForkError(f"record 0: index is not an integer >= 0: {short(base)}", 0)
    for i, rec in enumerate(out, base):
        # The envelope, as decoding checks it (records built in Python never were).
        if not isinstance(rec, Record) or type(rec.index) is not int or rec.index != i:
            raise ForkError(f"the source's log has no record {i}: a fork needs its whole log", i)
        if not isinstance(rec.type, str) or not isinstance(run_id, str) or rec.run_id != run_id:
            raise ForkError(f"record {i} is not one of run {short(run_id)}'s", i)
        if type(rec.at) is not int or rec.at < 0:
            raise ForkError(f"record {i}: at is not an integer >= 0: {short(rec.at)}", i)
    return out


def fork_point(
    records: Sequence[Record], flow: Flow, *, at: int | None = None, from_step: str | None = None
) -> int:
    """The source index a fork takes the records before; see the module docstring.

    Exactly one of ``at`` (a record index) and ``from_step`` (a step id of
    ``flow``) is given. Raises ``ForkError`` naming the index or the step.
    """
    if (at is None) == (from_step is None):
        raise ForkError("give exactly one of at (a record index) and from_step (a step id)")
    records = _records(records)
    base = records[0].index  # above 0 where a host dropped earlier incarnations' records
    end = base + len(records)
    settled = records[-1].type == RUN_SETTLED
    if from_step is not None:
        return _step_point(records, flow, from_step, settled)
    assert at is not None
    if isinstance(at, bool) or not isinstance(at, int):
        raise ForkError(f"a fork point is a record index, not {at!r}")
    if at <= base:
        raise ForkError(
            f"index {at} is not after run.started: a fork takes the records before its point,"
            " and begins with the source's run.started",
            index=at,
        )
    if at > end:
        raise ForkError(f"index {at} is past the end of the log (its last index is {end - 1})", at)
    if at == end:
        if settled:
            raise ForkError(
                f"index {at} is the end of a log that settled at index {end - 1}: fork before"
                " the event that settled it",
                index=at,
            )
        return at
    kind = records[at - base].type
    if kind not in _BOUNDARY:
        decision = next(
            i
            for i in range(at - 1, base - 1, -1)
            if records[i - base].type in _BOUNDARY | {RUN_STARTED}
        )
        raise ForkError(
            f"index {at} ({kind}) is inside the decision of record {decision}"
            f" ({records[decision - base].type}): a fork point is the index of an event record"
            f" (event.reported, event.rejected, effect.redispatched) or the end of an unsettled"
            f" log ({end})",
            index=at,
        )
    return at


def _step_point(records: Sequence[Record], flow: Flow, step: str, settled: bool) -> int:
    if step not in flow.by_id:
        raise ForkError(f"flow {flow.id!r} has no step {step!r}", step=step)
    path = flow.by_id[step].path
    within = {s.id for s in flow.by_id.values() if s.path == path or s.path.startswith(path + ".")}
    run_id = records[0].run_id
    base = records[0].index
    # The step's first effect in the latest incarnation that started it (a run
    # that continues as new runs its steps again in each).
    first = None
    latest = None
    for rec in records:
        if rec.type == RUN_STARTED:
            latest, first = first if first is not None else latest, None
            continue
        if first is not None or rec.type != EFFECT_EMITTED or not isinstance(rec.data, dict):
            continue
        key = rec.data.get("idempotencyKey")
        if not isinstance(key, str):
            continue
        try:
            info = parse_key(key, run_id)
        except ValueError:
            continue
        if info.step in within:
            first = rec.index
    first = first if first is not None else latest
    if first is None:
        raise ForkError(
            f"step {step!r} emitted no effect in run {run_id!r}: it never started", step=step
        )
    end = base + len(records)
    at = next((r.index for r in records[first - base :] if r.type in _BOUNDARY), end)
    if at == end and settled:  # (a decision that emits work does not settle)
        raise ForkError(f"step {step!r}: the run settled in the decision that started it", at, step)
    return at


def fork(
    records: bytes | LogRead | Iterable[Record],
    flow: Flow,
    run_id: str,
    *,
    at: int | None = None,
    from_step: str | None = None,
) -> Fork:
    """Fork the run whose log is ``records`` (a run of ``flow``) as run ``run_id``.

    The point is ``at`` (a record index) or ``from_step`` (a step id); see the
    module docstring. The source's records before the point are replayed first
    (``replay``), so a source log that does not belong to ``flow`` or does not
    replay raises as ``replay`` does (``ReplayError``, ``ReplayDivergence``,
    ``LogCorrupt``). Raises ``ForkError`` for a bad point or step, a run id
    that is the source's, and an event the fork cannot apply.
    """
    log = _records(records)
    source = log[0].run_id
    if not isinstance(run_id, str) or not run_id:
        raise ForkError("a fork's run id must be a non-empty string")
    if run_id == source:
        raise ForkError(f"a fork needs a run id of its own, not its source's ({source!r})")
    point = fork_point(log, flow, at=at, from_step=from_step)
    base = log[0].index
    # The fork begins where the incarnation holding the point began (a run
    # that continued as new: language.md §4.18), as that incarnation did.
    first = max(i for i in range(point - base) if log[i].type == RUN_STARTED)
    log = log[first : point - base]
    replay(log, flow)  # the source's prefix must be a faithful history of this flow
    started = log[0].data
    assert isinstance(started, dict)  # (replay checked it)
    budget = budget_from_wire(started.get("budget"))
    depth = started.get("depth", 0)
    input = started.get("input")
    metadata = started.get("metadata")
    continued = None
    if started.get("incarnation", 1) != 1:
        carried = msgspec.convert(started, RunStartedData)
        continued = ContinueAsNew(
            input=input,
            incarnation=carried.incarnation,
            idempotency_key="",
            signals=carried.signals,
            scheduled=carried.scheduled,
            metadata=metadata,
            idle_incarnations=carried.idle_incarnations,
        )
    decision = start(
        flow,
        input,
        run_id=run_id,
        now_ms=log[0].at,
        budget=budget,
        depth=depth,
        semantics=started.get("semantics", 1),
        metadata=metadata,
        continued=continued,
    )
    recorder = Recorder(run_id)
    out = recorder.started(
        flow, input, log[0].at, decision, budget, depth, metadata, continued=continued
    )
    data = dict(out[0].data)
    data["forkedFrom"] = {"runId": source, "index": point}
    out[0] = msgspec.structs.replace(out[0], data=data)
    state = decision.state
    for rec in log[1:]:
        if rec.type != EVENT_REPORTED:
            continue
        event = _rekeyed(event_from_wire(rec.data), source, run_id)
        try:
            decision = advance(state, event)
        except EventRejected as exc:
            raise ForkError(
                f"the fork cannot apply the event at index {rec.index} of run {source!r}"
                f" ({exc}): the flow decides otherwise under run id {run_id!r}",
                index=rec.index,
            ) from None
        state = decision.state
        out.extend(recorder.applied(event, decision))
    return Fork(
        run_id=run_id,
        source_run_id=source,
        at=point,
        records=tuple(out),
        state=state,
        pending=_pending(out, state),
    )


def _rekeyed(event: Event, source: str, run_id: str) -> Event:
    """``event`` with every key it holds spelled for the fork."""
    changes: dict[str, Any] = {}
    prefix = source + "/"
    for field in ("idempotency_key", "schedule_id"):
        value = getattr(event, field, None)
        if isinstance(value, str) and value.startswith(prefix):
            changes[field] = run_id + value[len(source) :]
    return msgspec.structs.replace(event, **changes) if changes else event


def _pending(records: list[Record], state: State) -> tuple[OpenEffect, ...]:
    """The effects ``state`` waits for, as the fork's log last emitted them, in that order."""
    view = waiting_for(state)
    open_keys = {w.key for w in view.work if not w.held}
    open_keys.update(t.key for t in view.timers)
    open_keys.update(q.key for q in view.questions)
    open_keys.update(s.key for s in view.signals)
    emitted: dict[str, tuple[int, Any]] = {}
    for rec in records:
        if rec.type == EFFECT_EMITTED and isinstance(rec.data, dict):
            key = rec.data.get("idempotencyKey")
            if isinstance(key, str):
                emitted[key] = (rec.index, rec.data)
    missing = sorted(open_keys - emitted.keys())
    if missing:  # (every open key was emitted by some decision of the fork)
        raise ForkError(f"the fork waits for {missing[0]!r}, which its log never emitted")
    found = sorted((emitted[k] for k in open_keys), key=lambda e: e[0])
    effects = [effect_from_wire(data) for _, data in found]
    return tuple(e for e in effects if not isinstance(e, Settled | ContinueAsNew))
