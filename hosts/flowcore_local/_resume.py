"""Resuming a failed run from its failed step: whether it can be done, and from where.

A failed run is resumed by rewinding it to just before the event that failed
it, which is the last event of its log: the run settled in that event's
decision. The state there is rebuilt by replaying the log up to that event
(``flowcore.replay`` verifies the prefix; ``Store.rewind`` re-derives the
rows event by event); the records from that event on move to the archive,
and the work pending at that point is dispatched again. Already-succeeded
steps keep their results and are not run again.

A rewind is refused (``HostError``, saying why) wherever it could not be
faithful:

- the run is not ``failed``, or is a child run (resume its root: a failed
  child is resumed with the parent it failed);
- compensations ran when it failed (they undid completed steps, which a
  rewind cannot put back);
- the failing event is not a work failure: a timer (a timeout would fire
  again at once), a scheduled call, or a result, answer or signal after
  which the flow itself failed (an expression error: it would fail the same
  way);
- the failed work's outcome is unknown (``outcome-unknown``, a dead letter,
  ``host-error``) and its tool is not readonly or idempotent: running it
  again could run it twice;
- other work in flight when it failed could not be run again safely: an
  uncertain call, an agent or team (they may have run), or a child run
  (it was cancelled with its parent);
- a timeout, question or signal timeout, or the wall-clock deadline pending
  then has fallen due since: time does not rewind, so it would fire at once.

A run that failed because its child run failed (``subflow-settled``
``failed``) is resumed together with that child, recursively.

Nothing here writes; ``plan_rewind`` only reads the store.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import flowcore
from flowcore import (
    EffectFailed,
    EffectOutcomeUnknown,
    Flow,
    KeyRole,
    Record,
    State,
    SubflowSettled,
    TimerFired,
)
from flowcore_handlers import safe_text

from ._flows import compensation_steps
from ._store import HostError, Store

__all__ = ["Rewind", "plan_rewind"]

SAFE = ("readonly", "idempotent")
_WORK_ROLES = (KeyRole.EFFECT, KeyRole.MEMBER)
_LATE_TIMERS = ("timeout", "ask-timeout", "signal-timeout", "deadline")


@dataclass
class Rewind:
    """One run to rewind: its log is cut at ``cut``, the index of the event that failed it."""

    run_id: str
    flow: Flow
    records: list[Record]  # the live log, whole
    cut: int
    key: str  # the failed work's key
    error: Any  # how the run failed (its settled error)
    state: State  # the state before the failing event (from replay)
    pending: list[flowcore.Effect]  # what to open again, in emission order
    child: Rewind | None = None  # the failed child run resumed with it
    tools: str | None = None  # the tools module the run has now


def _failure(rid: str, why: str) -> HostError:
    return HostError(f"cannot resume run {rid!r} from its failed step: {why}")


def _exec_class(flow: Flow, effect: dict[str, Any] | None) -> str:
    if effect is not None and effect.get("kind") == "call-tool":
        decl = flow.tools.get(effect.get("tool", ""))
        if decl is not None:
            return decl.exec_class
    return "uncertain"


def _what(effect: dict[str, Any] | None, key: str) -> str:
    """``call-tool send r-1/tell#1``: the effect's kind, what it addresses, its key."""
    if effect is None:
        return key
    target = next(
        (
            effect[f]
            for f in ("tool", "agentId", "teamId", "flowId")
            if isinstance(effect.get(f), str)
        ),
        "",
    )
    return " ".join(part for part in (str(effect.get("kind", "")), target, key) if part)


def plan_rewind(store: Store, run_id: str, now: int, *, as_child: bool = False) -> Rewind:
    """Check that ``run_id`` can be rewound to before its failure, and say how."""
    row = store.run_row(run_id)
    rid = run_id
    if row.status != "failed":
        now_is = "still running" if row.status == "running" else row.status
        raise HostError(f"cannot resume run {rid!r}: it is {now_is}; only a failed run resumes")
    if row.parent_run is not None and not as_child:
        root = row.parent_run
        while (parent := store.run_row(root).parent_run) is not None:
            root = parent
        raise HostError(
            f"cannot resume run {rid!r}: it is a child run of {row.parent_run!r}; resume the"
            f" root run {root!r}, which resumes the failed child runs it failed with"
        )
    flow = store.flow_by_hash(row.spec_hash)
    records = store.log_records(run_id)
    position = next(
        (i for i in range(len(records) - 1, -1, -1) if records[i].type == "event.reported"),
        None,
    )
    if position is None:
        raise _failure(rid, f"it failed as it started ({_error_text(row.error)}); no step ran")
    tail = records[position + 1 :]
    settled = [r for r in tail if r.type == "effect.emitted"]
    if [r.type for r in tail][-1:] != ["run.settled"] or [r.data.get("kind") for r in settled] != [
        "settled"
    ]:
        raise _failure(rid, "its last event did not settle it; the log is not one of a failed run")
    emitted = _emitted(records, flow, run_id)
    failing = records[position]
    try:
        event = flowcore.event_from_wire(failing.data)
    except flowcore.FlowcoreError as exc:
        raise _failure(
            rid, f"its last event (index {failing.index}) does not decode: {exc}"
        ) from None
    key = getattr(event, "idempotency_key", None)
    info = None if key is None else _parse(key, run_id)
    kind = event.__struct_config__.tag
    error = row.error
    if isinstance(event, TimerFired):
        raise _failure(
            rid,
            f"it failed when timer {key} fired ({_error_text(error)}); time does not rewind,"
            " so the timer would fire again at once",
        )
    if (
        key is None
        or info is None
        or not isinstance(event, (EffectFailed, EffectOutcomeUnknown, SubflowSettled))
    ):
        after = f"{kind} {key}" if key is not None else str(kind)
        raise _failure(
            rid,
            f"the flow itself failed after {after} ({_error_text(error)}), not a step's work;"
            " the same events would fail it the same way",
        )
    if info.role not in _WORK_ROLES:
        raise _failure(
            rid,
            f"it failed at {key}, a {info.role.value} (the run had ended and waited for a"
            " scheduled call); only a failed step is resumed",
        )
    effect = emitted.get(key, (0, None))[1]
    child: Rewind | None = None
    if isinstance(event, SubflowSettled):
        if event.status == "completed":
            raise _failure(rid, f"child run {key!r} completed; the flow failed after it")
        try:
            child_row = store.run_row(key)
        except HostError:
            raise _failure(rid, f"its child run {key!r} is not in the database") from None
        if child_row.status != "failed":
            raise _failure(
                rid, f"its child run {key!r} ended {child_row.status}; only a failed child resumes"
            )
        try:
            child = plan_rewind(store, key, now, as_child=True)
        except HostError as exc:
            raise _failure(rid, f"its child run {key!r} cannot be resumed ({exc})") from None
    else:
        unknown = isinstance(event, EffectOutcomeUnknown) or event.error.type in (
            "dead-letter",
            "host-error",
        )
        if unknown and _exec_class(flow, effect) not in SAFE:
            how = "outcome-unknown" if isinstance(event, EffectOutcomeUnknown) else event.error.type
            raise _failure(
                rid,
                f"{_what(effect, key)} failed with {how}: it may have run, and it is not"
                " readonly or idempotent, so running it again could run it twice",
            )
    state, pending = _reopened(records, position, flow, run_id, key, emitted, now)
    return Rewind(
        run_id=run_id,
        flow=flow,
        records=records,
        cut=failing.index,
        key=key,
        error=error,
        state=state,
        pending=pending,
        child=child,
        tools=row.tools,
    )


def _emitted(
    records: list[Record], flow: Flow, run_id: str
) -> dict[str, tuple[int, dict[str, Any]]]:
    """The effects as emitted, by key (the last emission of each); refused where
    compensations ran."""
    rid = run_id
    emitted: dict[str, tuple[int, dict[str, Any]]] = {}
    comp = compensation_steps(flow)
    for i, rec in enumerate(records):
        if rec.type != "effect.emitted" or not isinstance(rec.data, dict):
            continue
        key = rec.data.get("idempotencyKey")
        if not isinstance(key, str):
            continue
        emitted[key] = (i, rec.data)
        info = _parse(key, run_id)
        if info is not None and info.step in comp:
            raise _failure(
                rid,
                f"compensations ran when it failed (step {info.step!r}, {key}); they undid"
                " completed steps, which a rewind cannot put back",
            )
    return emitted


def _reopened(
    records: list[Record],
    position: int,
    flow: Flow,
    run_id: str,
    key: str,
    emitted: dict[str, tuple[int, dict[str, Any]]],
    now: int,
) -> tuple[State, list[flowcore.Effect]]:
    """The state before the failing event (at ``position``) and the effects to
    open again, in emission order; refused where running them again is unsafe."""
    rid = run_id
    prefix = records[:position]
    try:
        report = flowcore.replay(prefix, flow)
    except flowcore.FlowcoreError as exc:
        raise _failure(rid, f"its log does not replay ({safe_text(exc, 300)})") from None
    state = report.state
    assert state is not None
    view = flowcore.waiting_for(state)
    open_keys: list[str] = []
    found = False
    for work in view.work:
        if work.held:
            continue  # not at the host: the interpreter releases it when a slot frees
        open_keys.append(work.key)
        if work.key == key:
            found = True
            continue
        wire = work.effect
        if wire.get("kind") == "run-subflow":
            raise _failure(
                rid,
                f"its child run {work.key!r} was in flight when it failed and was cancelled"
                " with it; a rewind cannot take the cancel back",
            )
        if _exec_class(flow, wire) not in SAFE:
            raise _failure(
                rid,
                f"{_what(wire, work.key)} was in flight when it failed and may have run; it is"
                " not readonly or idempotent, so running it again could run it twice",
            )
    if not found:
        raise _failure(rid, f"{key} was not pending before its last event; the log is inconsistent")
    for timer in view.timers:
        if timer.role in _LATE_TIMERS and timer.due_ms <= now:
            raise _failure(
                rid,
                f"its {timer.role} timer {timer.key} fell due at {timer.due_ms} ms since it"
                " failed; time does not rewind, so resuming would fire it at once",
            )
        open_keys.append(timer.key)
    open_keys += [q.key for q in view.questions] + [s.key for s in view.signals]
    pending = []
    for k in sorted(open_keys, key=lambda k: emitted[k][0] if k in emitted else -1):
        if k not in emitted:
            raise _failure(rid, f"{k} is pending but the log never emitted it")
        pending.append(flowcore.effect_from_wire(emitted[k][1]))
    return state, pending


def _parse(key: str, run_id: str) -> flowcore.KeyInfo | None:
    try:
        return flowcore.parse_key(key, run_id)
    except ValueError:
        return None


def _error_text(error: Any) -> str:
    if isinstance(error, dict):
        return safe_text(f"{error.get('type', '')}: {error.get('message', '')}", 300)
    return "no error recorded"
