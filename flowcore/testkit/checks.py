"""The invariants: ``check_*``, each over a run's history or a simulation."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeAlias

import msgspec

from .._errors import EventRejected
from ..decision.interp import advance, continue_run
from ..decision.keys import KeyRole, deadline_key, incarnation_base, parse_key
from ..decision.snapshot import decode_state, encode_state
from ..decision.state import State
from ..decision.updates import update_of
from ..decision.waiting import waiting_for
from ..decision.wire import (
    AskHuman,
    AwaitSignal,
    BudgetRemaining,
    CallTool,
    Effect,
    EffectFailed,
    EffectOutcomeUnknown,
    EffectSucceeded,
    Event,
    KeyEvent,
    ReportEntry,
    RunAgent,
    RunSubflow,
    RunTeam,
    Settled,
    SignalRun,
    Sleep,
    SubflowSettled,
    TimerFired,
    UpdateRequested,
    encode_effect,
    event_from_wire,
    event_to_wire,
)
from .events import _WORK_EFFECTS, _answered_by
from .history import snapshot
from .simulator import (
    RunHistory,
    Spec,
    Trajectory,
    Turn,
    drive,
)

# --- invariants ------------------------------------------------------------------------------


Events: TypeAlias = Iterable[Event | Mapping[str, Any]]
"""Events, or their wire dicts (validated with ``event_from_wire``)."""


def _history(
    run: RunHistory | Spec, input: Any, events: Events, start: Mapping[str, Any]
) -> RunHistory:
    if isinstance(run, RunHistory):
        return run
    evs = [e if not isinstance(e, Mapping) else event_from_wire(dict(e)) for e in events]
    return drive(run, input, evs, paranoid=True, **start)


def _show(value: Effect | Event | None) -> str:
    if value is None:
        return "start"
    if isinstance(value, Event):
        text = msgspec.json.encode(event_to_wire(value)).decode()
    else:
        text = encode_effect(value).decode()
    return text if len(text) <= 300 else text[:300] + "..."


def _at(h: RunHistory, i: int) -> str:
    return f"run {h.run_id}, turn {i} ({_show(h.turns[i].event)})"


def _fail(message: str) -> None:
    raise AssertionError(message)


def check_settlement(
    run: RunHistory | Spec, input: Any = None, events: Events = (), **start: Any
) -> RunHistory:
    """Nothing is emitted or accepted after ``settled``; ``settled`` is alone and last
    in its decision; the state agrees; the clock never goes backwards."""
    h = _history(run, input, events, start)
    settled_at: int | None = None
    now = h.turns[0].state.now_ms
    for i, turn in enumerate(h.turns):
        state = turn.state
        if state.now_ms < now:
            _fail(f"{_at(h, i)}: the run's clock went back from {now} to {state.now_ms}")
        now = state.now_ms
        if settled_at is not None:
            if turn.rejected is None or turn.effects:
                _fail(
                    f"{_at(h, i)}: accepted (effects {[_show(e) for e in turn.effects]}) after "
                    f"the run settled at turn {settled_at}; every event must be rejected"
                )
            continue
        settles = [e for e in turn.effects if isinstance(e, Settled)]
        if settles:
            if len(turn.effects) != 1:
                _fail(
                    f"{_at(h, i)}: a settling decision must hold only settled, got "
                    f"{[_show(e) for e in turn.effects]}"
                )
            if state.settled != settles[0] or state.status != settles[0].status:
                _fail(f"{_at(h, i)}: the state does not record the settled effect it emitted")
            settled_at = i
        elif state.settled is not None or state.status != "running":
            _fail(f"{_at(h, i)}: status {state.status} without a settled effect")
    return h


def check_keys(
    run: RunHistory | Spec, input: Any = None, events: Events = (), **start: Any
) -> RunHistory:
    """Idempotency keys are unique within the run and carry its run id. The
    exceptions: a safe call re-issued, same key and same call, right after an
    unknown outcome for that key; and the delay timer of a scheduled call a new
    incarnation carries over, armed again as it was. (Stable across replays:
    ``check_determinism``.)"""
    h = _history(run, input, events, start)
    seen: dict[str, tuple[int, Effect]] = {}
    prefix = h.run_id + "/"
    for i, turn in enumerate(h.turns):
        ev = turn.event
        for effect in turn.effects:
            if isinstance(effect, Settled):
                continue
            key = effect.idempotency_key
            if not key.startswith(prefix):
                _fail(f"{_at(h, i)}: key {key!r} does not start with the run id {prefix!r}")
            if key in seen:
                j, first = seen[key]
                reissue = (
                    isinstance(ev, EffectOutcomeUnknown)
                    and ev.idempotency_key == key
                    and isinstance(effect, (CallTool, RunSubflow, SignalRun))
                    and same_but_budget(effect, first)
                ) or (
                    i > 0
                    and ev is None  # the first decision of a new incarnation
                    and isinstance(effect, Sleep)
                    and effect == first
                    and parse_key(key, h.run_id).role is KeyRole.SCHEDULE_DELAY
                )
                if not reissue:
                    _fail(
                        f"{_at(h, i)}: key {key!r} emitted again as {_show(effect)}; "
                        f"first emitted at turn {j} as {_show(first)}"
                    )
            seen[key] = (i, effect)
    return h


def check_budget(
    run: RunHistory | Spec, input: Any = None, events: Events = (), **start: Any
) -> RunHistory:
    """The budget is never exceeded by the core and never negative.

    Every ``budgetRemaining`` is non-negative and within the limits (a share
    may be more than an earlier one: others released theirs), what the ledger
    holds back is what the pending work was handed; the run never issues more
    work effects than its step limit, never emits work once its wall clock is
    up, stays within every limit unless it settles ``budget-exhausted`` (only
    reported usage can overshoot, and then the run stops), and ``exhausted``
    names a limit that really was reached.
    """
    h = _history(run, input, events, start)
    first = h.turns[0].state
    # The ledger itself is checked (its limits never change), so it is read as such.
    limits = first.ledger
    deadline = None if limits.wall_clock_ms is None else first.run.started_ms + limits.wall_clock_ms
    issued = 0
    for i, turn in enumerate(h.turns):
        state = turn.state
        if i and turn.event is None:  # a new incarnation: the flow's budget afresh
            if issued > (limits.steps if limits.steps is not None else issued):
                _fail(f"{_at(h, i - 1)}: {issued} work effects with a limit of {limits.steps}")
            limits, issued = state.ledger, 0
            wall = limits.wall_clock_ms
            deadline = None if wall is None else state.run.started_ms + wall
        led = state.ledger
        if (led.steps, led.cost, led.wall_clock_ms) != (
            limits.steps,
            limits.cost,
            limits.wall_clock_ms,
        ):
            _fail(f"{_at(h, i)}: the budget's limits changed from {limits} to {led}")
        if led.used_steps < 0 or led.used_cost < 0:
            _fail(f"{_at(h, i)}: negative usage in {led}")
        _check_reserved(h, i, state)
        for effect in turn.effects:
            if not isinstance(effect, _WORK_EFFECTS):
                continue
            issued += 1
            if deadline is not None and state.now_ms >= deadline:
                _fail(
                    f"{_at(h, i)}: {_show(effect)} emitted at {state.now_ms}, at or after the "
                    f"wall-clock deadline {deadline}"
                )
            if isinstance(effect, (RunAgent, RunSubflow)):
                br = effect.budget_remaining
                values = (br.steps, br.cost_minor_units, br.wall_clock_ms)
                if any(v is not None and v < 0 for v in values):
                    _fail(f"{_at(h, i)}: negative budgetRemaining in {_show(effect)}")
                entry = state.waiting.pending.get(effect.idempotency_key)
                if entry is not None and entry.reserved not in (None, br):
                    _fail(
                        f"{_at(h, i)}: {_show(effect)} was handed a budget other than the "
                        f"one it holds, {entry.reserved}"
                    )
                for name, value, limit in (
                    ("steps", br.steps, limits.steps),
                    ("cost", br.cost_minor_units, limits.cost),
                    ("wall clock", br.wall_clock_ms, limits.wall_clock_ms),
                ):
                    if limit is not None and (value is None or value > limit):
                        _fail(
                            f"{_at(h, i)}: budgetRemaining {name} {value} in {_show(effect)} "
                            f"is not within the limit {limit}"
                        )
        settled = state.settled
        if settled is not None and turn.effects and settled.status == "budget-exhausted":
            # The host's timers are the authority on time: the deadline timer
            # firing is the deadline, whatever the clock in the event says.
            ev = turn.event
            base = incarnation_base(h.run_id, state.incarnation)
            fired = isinstance(ev, TimerFired) and ev.idempotency_key == deadline_key(base)
            # Work taken back in the settling decision has its step refunded
            # (and is reported not-started), so the steps used at the moment of
            # exhaustion may be up to that many more than the ledger now says.
            refunded = sum(1 for r in settled.report if r.status == "not-started")
            reached = {
                "steps": limits.steps is not None and led.used_steps + refunded >= limits.steps,
                "cost": limits.cost is not None and led.used_cost >= limits.cost,
                "wall-clock": deadline is not None and (state.now_ms >= deadline or fired),
            }
            if settled.exhausted is None or not reached[settled.exhausted]:
                _fail(
                    f"{_at(h, i)}: settled budget-exhausted ({settled.exhausted}) but that "
                    f"limit was not reached: {led}, now {state.now_ms}, deadline {deadline}"
                )
        elif settled is None or settled.status != "budget-exhausted":
            if limits.steps is not None and led.used_steps > limits.steps:
                _fail(f"{_at(h, i)}: {led.used_steps} steps used of {limits.steps}")
            if limits.cost is not None and led.used_cost > limits.cost:
                _fail(f"{_at(h, i)}: cost {led.used_cost} used of {limits.cost}")
    if limits.steps is not None and issued > limits.steps:
        _fail(f"run {h.run_id}: {issued} work effects issued with a step limit of {limits.steps}")
    return h


_EMITTED_AS = {  # what answers a key (``_answered_by``) -> what must have been emitted
    "work": (
        CallTool,
        RunAgent,
        RunTeam,
        SignalRun,
        RunSubflow,
    ),  # a detached start is answered as work
    "subflow": (RunSubflow,),
    "ask": (AskHuman,),
    "signal": (AwaitSignal,),
    "timer": (Sleep,),
}


def _check_reserved(h: RunHistory, i: int, state: State) -> None:
    """What the ledger holds back is what the pending work was handed (language.md §11.7)."""
    led = state.ledger
    held = [0, 0, 0, 0, 0]
    for entry in state.waiting.pending.values():
        r = entry.reserved
        if r is not None:
            for j, v in enumerate((r.steps, r.cost_minor_units, r.tokens, r.tool_calls, r.turns)):
                held[j] += v or 0
    ledger = [
        led.reserved_steps,
        led.reserved_cost,
        led.reserved_tokens,
        led.reserved_tool_calls,
        led.reserved_turns,
    ]
    if held != ledger:
        _fail(f"{_at(h, i)}: the ledger holds {ledger}, the pending work was handed {held}")


def check_work_accounted(
    run: RunHistory | Spec, input: Any = None, events: Events = (), **start: Any
) -> RunHistory:
    """Every pending work effect is eventually answered or abandoned.

    While the run goes on, everything it waits for was emitted, and a running
    run waits for something (else nothing could ever move it). At settlement
    nothing is pending any more, and every work effect ever emitted is in the
    settled report with the status its last accepted answer gave it
    (succeeded, failed, or uncertain when unknown or never answered); report
    rows for work never emitted are ``not-started``.
    """
    h = _history(run, input, events, start)
    emitted: dict[str, Effect] = {}
    status: dict[str, str] = {}
    for i, turn in enumerate(h.turns):
        ev = turn.event
        # An answer at or after the wall-clock deadline settles the run
        # budget-exhausted, and the report still records how the work ended
        # (language.md, decisions): no exception here.
        if turn.rejected is None and isinstance(ev, KeyEvent):
            key = ev.idempotency_key
            if key in emitted:
                if isinstance(ev, EffectSucceeded):
                    status[key] = "succeeded"
                elif isinstance(ev, EffectFailed):
                    status[key] = _failed_as(turn.state, emitted[key], ev)
                elif isinstance(ev, EffectOutcomeUnknown):
                    status[key] = "uncertain"
                elif isinstance(ev, SubflowSettled):
                    status[key] = "succeeded" if ev.status == "completed" else "failed"
        for effect in turn.effects:
            if isinstance(effect, _WORK_EFFECTS):
                emitted[effect.idempotency_key] = effect
                status.pop(effect.idempotency_key, None)
            elif not isinstance(effect, Settled):
                emitted[effect.idempotency_key] = effect
        state = turn.state
        continued = state.tree.continued
        if continued is not None:
            # The incarnation ended: its report accounts for its work, as a
            # settled report would; the next incarnation starts afresh.
            if turn.rejected is None and turn.effects:
                _check_report(h, i, state, continued.report, emitted, status)
            emitted, status = {}, {}
            continue
        if state.settled is None:
            waits = _answered_by(waiting_for(state))
            for key, what in waits.items():
                if not isinstance(emitted.get(key), _EMITTED_AS[what]):
                    _fail(f"{_at(h, i)}: the run waits for {key!r} ({what}), never emitted")
            if not waits:
                _fail(f"{_at(h, i)}: the run is {state.status} but waits for nothing: stuck")
            continue
        if turn.rejected is not None:
            continue
        _check_report(h, i, state, state.settled.report, emitted, status)
    return h


def _failed_as(state: State, effect: Effect, ev: EffectFailed) -> str:
    """The report status a failure gives its work: ``failed``, except a heartbeat
    timeout of watched work not safe to repeat, whose outcome is unknown
    (language.md §6: anything but a readonly or idempotent tool)."""
    if ev.error.type != "heartbeat-timeout" or not isinstance(
        effect, CallTool | RunAgent | RunTeam
    ):
        return "failed"
    if effect.heartbeat_timeout_ms is None:
        return "failed"
    if isinstance(effect, CallTool):
        decl = state.flow.tools.get(effect.tool)
        if decl is not None and decl.exec_class in ("readonly", "idempotent"):
            return "failed"
    return "uncertain"


def _check_report(
    h: RunHistory,
    i: int,
    state: State,
    rows: tuple[ReportEntry, ...],
    emitted: dict[str, Effect],
    status: dict[str, str],
) -> None:
    """At settlement (or the end of an incarnation) nothing is pending, and the
    report holds every work effect with the status its last answer gave it."""
    # The core's own bookkeeping must be emptied at settlement; its
    # in-flight count is not something a run waits for (waiting_for).
    if state.waiting.pending or state.waiting.in_flight:
        _fail(
            f"{_at(h, i)}: settled with {len(state.waiting.pending)} keys pending and "
            f"{state.waiting.in_flight} in flight: {sorted(state.waiting.pending.keys())[:5]}"
        )
    report: dict[str, str] = {}
    for row in rows:
        if row.idempotency_key in report:
            _fail(f"{_at(h, i)}: {row.idempotency_key!r} twice in the settled report")
        report[row.idempotency_key] = row.status
    for key, effect in emitted.items():
        if not isinstance(effect, _WORK_EFFECTS):
            continue
        if key not in report:
            _fail(
                f"{_at(h, i)}: work effect {key!r} ({_show(effect)}) is missing from "
                "the settled report"
            )
        want = status.get(key, "uncertain")
        if report[key] != want:
            _fail(
                f"{_at(h, i)}: the settled report says {key!r} {report[key]}, but its "
                f"last accepted answer makes it {want}"
            )
    for key, row_status in report.items():
        if key not in emitted and row_status != "not-started":
            _fail(
                f"{_at(h, i)}: the settled report says {key!r} {row_status}, but it "
                "was never emitted (it must be not-started)"
            )


def check_rejections(
    run: RunHistory | Spec, input: Any = None, events: Events = (), **start: Any
) -> RunHistory:
    """Rejected events leave the state byte-identical, and ``advance`` never mutates
    the state it is given (checked on histories recorded with ``paranoid``)."""
    h = _history(run, input, events, start)
    for i, turn in enumerate(h.turns):
        if turn.before is not None and turn.input_after is not None:
            if turn.before != turn.input_after:
                what = "rejecting" if turn.rejected is not None else "applying"
                _fail(f"{_at(h, i)}: {what} the event changed the state it was given")
        if turn.rejected is not None:
            if turn.effects:
                _fail(f"{_at(h, i)}: a rejected event emitted effects")
            if i and turn.state is not h.turns[i - 1].state:
                _fail(f"{_at(h, i)}: a rejected event replaced the state")
    return h


def _state_bytes(h: RunHistory, cache: dict[int, bytes], i: int) -> bytes:
    """Turn ``i``'s state as snapshot bytes, encoded at most once: a state paranoid
    mode snapshot when it was given to ``advance`` is not encoded again."""
    data = cache.get(i)
    if data is None:
        data = snapshot(h, i)
        cache[i] = data
    return data


def check_determinism(
    run: RunHistory | Spec, input: Any = None, events: Events = (), **start: Any
) -> RunHistory:
    """Same flow + same events => same effects and states, byte for byte.

    The run is driven a second time from the start, and resumed from a
    snapshot (``encode_state``/``decode_state``) before every event: each
    decision, rejection reason, effect, update reply and state snapshot must be identical,
    so idempotency keys are stable across replays.
    """
    h = _history(run, input, events, start)
    again = drive(
        h.flow,
        h.input,
        h.events(),
        run_id=h.run_id,
        now_ms=h.now_ms,
        budget=h.budget,
        depth=h.depth,
        metadata=h.metadata,
    )
    mine: dict[int, bytes] = {}
    # Each recorded turn's effects, encoded once for both comparisons.
    effects = [[encode_effect(e) for e in turn.effects] for turn in h.turns]
    for i, (a, b) in enumerate(zip(h.turns, again.turns, strict=True)):
        how = "a second run over the same events"
        _same_turn(h, i, a, b, effects[i], _state_bytes(h, mine, i), how)
    for i in range(len(h.turns) - 1):
        state = decode_state(_state_bytes(h, mine, i), h.flow)
        nxt = h.turns[i + 1]
        if nxt.event is None:  # the next incarnation, from the effect in the snapshot
            effect = state.tree.continued
            assert effect is not None
            at = nxt.state.run.started_ms
            d = continue_run(h.flow, effect, h.run_id, at, h.depth)
            resumed = Turn(None, d.effects, d.state, replies=d.replies)
            _same_turn(
                h,
                i + 1,
                nxt,
                resumed,
                effects[i + 1],
                _state_bytes(h, mine, i + 1),
                f"a run continued from the snapshot after turn {i}",
            )
            continue
        try:
            d = advance(state, nxt.event)
        except EventRejected as exc:
            resumed = Turn(nxt.event, (), state, exc.reason)
        else:
            resumed = Turn(nxt.event, d.effects, d.state, replies=d.replies)
        _same_turn(
            h,
            i + 1,
            nxt,
            resumed,
            effects[i + 1],
            _state_bytes(h, mine, i + 1),
            f"a run resumed from the snapshot after turn {i}",
        )
    return h


def _same_turn(
    h: RunHistory, i: int, a: Turn, b: Turn, ea: list[bytes], a_bytes: bytes, how: str
) -> None:
    if a.rejected != b.rejected:
        _fail(f"{_at(h, i)}: rejected {a.rejected!r}, but {how} says {b.rejected!r}")
    eb = [encode_effect(e) for e in b.effects]
    if ea != eb:
        _fail(
            f"{_at(h, i)}: effects differ in {how}:\n  "
            + "\n  ".join(x.decode() for x in ea)
            + "\nvs\n  "
            + "\n  ".join(x.decode() for x in eb)
        )
    if a_bytes != encode_state(b.state):
        _fail(f"{_at(h, i)}: the state snapshot differs in {how}")
    if a.replies != b.replies:
        _fail(f"{_at(h, i)}: the update replies differ in {how}")


def check_updates(
    run: RunHistory | Spec, input: Any = None, events: Events = (), **start: Any
) -> RunHistory:
    """Every update the run accepted gets exactly one reply, on the decision that
    ends it (an update abandoned by a cancel, a failure or a continue-as-new
    too), saying what the state records; no reply names an update the run
    never accepted in that incarnation; an id is accepted once per
    incarnation; no update is running once the run has settled."""
    h = _history(run, input, events, start)
    if not h.flow.updates:
        return h
    running: dict[str, str] = {}  # accepted in this incarnation, not answered yet
    answered: set[str] = set()
    for i, turn in enumerate(h.turns):
        event, state = turn.event, turn.state
        if event is None and i > 0:  # the next incarnation: a fresh window of ids
            if running:
                _fail(f"{_at(h, i)}: update(s) {sorted(running)} carried into a new incarnation")
            answered = set()
        if turn.rejected is not None:
            if turn.replies:
                _fail(f"{_at(h, i)}: a rejected event gave replies {list(turn.replies)}")
            continue
        if isinstance(event, UpdateRequested):
            uid = event.update_id
            if uid in running or uid in answered:
                _fail(f"{_at(h, i)}: update id {uid!r} accepted twice in one incarnation")
            running[uid] = event.name
        for reply in turn.replies:
            uid = reply.update_id
            if uid in answered:
                _fail(f"{_at(h, i)}: a second reply for update {uid!r}")
            if running.pop(uid, None) is None:
                _fail(f"{_at(h, i)}: a reply for update {uid!r}, which the run never accepted")
            answered.add(uid)
            view = update_of(state, uid) if state.tree.continued is None else None
            if view is not None and (view.status, view.output, view.error) != (
                reply.status,
                reply.output,
                reply.error,
            ):
                _fail(
                    f"{_at(h, i)}: the reply of update {uid!r} ({reply.status}) is not what the "
                    f"state records ({view.status})"
                )
        for uid in running:
            view = update_of(state, uid)
            if view is None or view.status != "running":
                shown = "gone" if view is None else view.status
                _fail(f"{_at(h, i)}: update {uid!r} ended ({shown}) without a reply")
        if state.settled is not None and running:
            _fail(
                f"{_at(h, i)}: the run settled {state.settled.status} with update(s) "
                f"{sorted(running)} running"
            )
    return h


def check_history(run: RunHistory) -> RunHistory:
    """Every check that needs no re-run: settlement, keys, budget, work,
    rejections, updates."""
    check_settlement(run)
    check_keys(run)
    check_budget(run)
    check_work_accounted(run)
    check_rejections(run)
    check_updates(run)
    return run


def check_run(
    run: RunHistory | Spec, input: Any = None, events: Events = (), **start: Any
) -> RunHistory:
    """Drive a run over ``events`` (or take a recorded history) and check every
    invariant; ``start`` takes ``run_id``, ``now_ms``, ``budget``, ``depth``.
    Returns the run's history."""
    h = _history(run, input, events, start)
    check_history(h)
    check_determinism(h)
    return h


def check_trajectory(trajectory: Trajectory, determinism: bool = True) -> None:
    """Check a simulation: every run (children too) keeps every invariant, children
    never get more budget than their parent had left, logs are well formed, and
    no run was left waiting for an answer the simulator could give."""
    runs = trajectory.histories
    for run_id, h in runs.items():
        check_history(h)
        if determinism:
            check_determinism(h)
        records = trajectory.log_of(run_id)
        if [r.index for r in records] != list(range(len(records))):
            _fail(f"run {run_id}: log indices are not 0..{len(records) - 1}")
        if not records or records[0].type != "run.started":
            _fail(f"run {run_id}: the log does not open with run.started")
        settled_records = [r for r in records if r.type == "run.settled"]
        if len(settled_records) != (1 if h.state.settled is not None else 0):
            _fail(f"run {run_id}: {len(settled_records)} run.settled records")
        emitted = sum(1 for r in records if r.type == "effect.emitted")
        if emitted != len(h.effects()):
            _fail(f"run {run_id}: {emitted} effect.emitted records for {len(h.effects())} effects")
        if isinstance(h.budget, BudgetRemaining):
            given = h.budget
            led = h.turns[0].state.ledger  # the limits it got: waiting_for shows what is left
            for name, got, limit in (
                ("steps", led.steps, given.steps),
                ("cost", led.cost, given.cost_minor_units),
                ("wall clock", led.wall_clock_ms, given.wall_clock_ms),
            ):
                if limit is not None and (got is None or got > limit):
                    _fail(
                        f"child run {run_id} got a {name} budget of {got}, more than the "
                        f"{limit} its parent had left"
                    )


def same_but_budget(a: Effect, b: Effect) -> bool:
    """The same effect, but for a run-subflow's budgetRemaining (which a re-issue refreshes)."""
    if isinstance(a, RunSubflow) and isinstance(b, RunSubflow):
        a = msgspec.structs.replace(a, budget_remaining=b.budget_remaining)
    return encode_effect(a) == encode_effect(b)
