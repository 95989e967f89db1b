"""The decision function: ``start`` and ``advance``.

``start`` builds a run's first state and effects; ``advance`` applies one
reported event to a state and returns the next state and effects, or raises
``EventRejected`` and leaves the state as it was. Both work on a ``txn.Txn``
(the scratch copy of one transition); which event answers what, and how,
is ``transitions``; what each step does is ``constructs``.

This module must never do I/O, read a clock or draw a random number.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

import immutables
import msgspec

from .._data import MAX_EVENT_BYTES, MAX_NAME_CHARS, DataError, check_data, json_size, text_ok
from .._errors import EventRejected, InputError, MetadataError
from ..language.defaults import DEFAULT_STEP_BUDGET
from ..language.metadata import check_values
from ..language.spec import Budget, Flow
from . import compiled, constructs, keys, updates
from . import ending as _ending
from . import transitions as _transitions
from .constructs import schedule
from .outcome import err
from .results import ResultStore
from .state import (
    Decision,
    Env,
    How,
    Ledger,
    ListKind,
    Pending,
    PendingKind,
    Run,
    Sched,
    SchedStatus,
    ScheduledAnswer,
    State,
    Tree,
    Waiting,
)
from .txn import Txn
from .update_wire import UpdateReply
from .wire import (
    BudgetRemaining,
    ContinueAsNew,
    Effect,
    Event,
    KeyEvent,
    Settled,
    UpdateRequested,
    check_event,
)

__all__ = [
    "DEFAULT_STEP_BUDGET",
    "SEMANTICS",
    "Decision",
    "InputError",
    "advance",
    "continue_run",
    "start",
    "validate_update",
]


SEMANTICS = 3
"""The interpreter's decision level for new runs (``start(semantics=)``).

A run keeps the level it started with, so a newer flowcore decides its runs
in flight, and replays their logs, as the flowcore that started them did.
3: an idle incarnation may continue as new (up to
``limits.max_idle_incarnations`` in a row; keyed signals carried over count as
taken), a ``schedule`` step whose arguments fail the tool's schema records
that call failed and goes on, and ``signal_run.signal`` is a template.
2: a retry with no backoff begins its next attempt at once (no zero-length
timer), a retried step that fails lists every attempt's error in its
error's ``attempts``, and a step abandoned while it ran reads as
``cancelled``. 1: none of these (runs and logs from before levels).
"""
"""Steps a run may spend when neither the spec nor the caller sets a budget."""

_EMPTY: immutables.Map[Any, Any] = immutables.Map()


class _Above:
    """The layers above the transaction, as it calls them (``txn.Above``)."""

    start = staticmethod(compiled.start)
    begin = staticmethod(constructs.begin)
    child_done = staticmethod(constructs.child_done)
    steps_of = staticmethod(constructs.steps_of)
    root_done = staticmethod(_ending.root_done)
    maybe_finish = staticmethod(_ending.maybe_finish)


ABOVE = _Above()


def _tighter(own: int | None, given: int | None) -> int | None:
    if own is None:
        return given
    return own if given is None else min(own, given)


def _less(limit: int | None, reserve: int | None) -> int | None:
    """A limit less a reserve (an unlimited one stays unlimited)."""
    if limit is None or not reserve:
        return limit
    return max(0, limit - reserve)


def _ledger(flow: Flow, budget: Budget | BudgetRemaining | None) -> Ledger:
    """The budget a run starts with: the spec's own, capped by ``budget`` (a
    parent's remainder, a caller's limits), the default step budget when
    neither sets one, less the reserve of ``on_budget_exhausted`` (which the
    main work never sees)."""
    own = flow.budget
    steps: int | None = own.steps
    cost: int | None = own.cost_minor_units
    wall: int | None = own.wall_clock_ms
    tokens: int | None = own.tokens
    tool_calls: int | None = own.tool_calls
    turns: int | None = own.turns
    if budget is not None:
        steps = _tighter(steps, budget.steps)
        cost = _tighter(cost, budget.cost_minor_units)
        wall = _tighter(wall, budget.wall_clock_ms)
        tokens = _tighter(tokens, budget.tokens)
        tool_calls = _tighter(tool_calls, budget.tool_calls)
        turns = _tighter(turns, budget.turns)
    if steps is None:
        steps = DEFAULT_STEP_BUDGET
    if flow.on_exhausted is not None:  # the main work runs within what the reserve leaves
        keep = flow.on_exhausted.reserve
        steps = _less(steps, keep.steps)
        cost = _less(cost, keep.cost_minor_units)
        wall = _less(wall, keep.wall_clock_ms)
        tokens = _less(tokens, keep.tokens)
        tool_calls = _less(tool_calls, keep.tool_calls)
        turns = _less(turns, keep.turns)
    return Ledger(steps, cost, wall, tokens=tokens, tool_calls=tool_calls, turns=turns)


def start(
    flow: Flow,
    input: Any = None,
    run_id: str = "run",
    now_ms: int = 0,
    budget: Budget | BudgetRemaining | None = None,
    depth: int = 0,
    semantics: int | None = None,
    metadata: Mapping[str, Any] | None = None,
    continued: ContinueAsNew | None = None,
) -> Decision:
    """Begin a run of ``flow``. Raises ``InputError`` if the input fails the schema.

    ``metadata``: initial values of the flow's declared metadata fields
    (``MetadataError`` names a field that is not declared or a value of the
    wrong type; a null value is left out).

    ``budget`` caps the run below the spec's own budget: a child run gets the
    parent's remaining budget from its ``run-subflow`` effect. ``semantics``:
    the decision level (``SEMANTICS`` when None); a host rebuilding or
    replaying a run passes the level its ``run.started`` record holds.
    ``continued``: the ``continue-as-new`` effect this run's previous
    incarnation ended with (``continue_run``): the new incarnation takes its
    number, buffered signals and scheduled calls; its keys differ from every
    earlier incarnation's.
    """
    if not isinstance(run_id, str) or not run_id:
        raise ValueError("run_id must be a non-empty string")
    incarnation = 1
    if continued is not None:
        incarnation = _check_continued(flow, continued)
    if semantics is None:
        semantics = SEMANTICS
    elif isinstance(semantics, bool) or not isinstance(semantics, int) or not 1 <= semantics:
        raise ValueError(f"semantics must be an integer from 1, got {semantics!r}")
    elif semantics > SEMANTICS:
        raise ValueError(
            f"the run was started by a newer flowcore (semantics {semantics});"
            f" this one decides up to {SEMANTICS}"
        )
    if isinstance(now_ms, bool) or not isinstance(now_ms, int) or now_ms < 0:
        raise ValueError(f"now_ms must be a non-negative integer, got {now_ms!r}")
    try:
        check_data(input, "$", "input")
    except DataError as exc:
        raise InputError(flow.id, [str(exc)]) from None
    size = json_size(input)
    if size > MAX_EVENT_BYTES:
        raise InputError(
            flow.id, [f"the input is {size:,} bytes as JSON, over {MAX_EVENT_BYTES:,}"]
        )
    if flow.input_schema is not None:
        from ..language.validate import input_problems

        problems = input_problems(flow.input_schema, input)
        if problems:
            raise InputError(flow.id, problems)
    if metadata:
        problems = check_values(flow.metadata, metadata)
        if problems:
            raise MetadataError(flow.id, problems)
        metadata = {k: v for k, v in metadata.items() if v is not None} or None
    ledger = _ledger(flow, budget)
    wall = ledger.wall_clock_ms
    state = State(
        flow=flow,
        run=Run(run_id, depth, input, now_ms, semantics),
        now_ms=now_ms,
        ledger=ledger,
        tree=Tree(envs=immutables.Map({"": Env(parent=None, scope="")}), incarnation=incarnation),
        waiting=Waiting(),
        results=ResultStore(),
        report=None,
        schedules=_EMPTY,
        settled=None,
        metadata=dict(metadata) if metadata else None,
    )
    t = Txn(state, ABOVE)
    if depth > flow.limits.max_subflow_depth:
        limit = flow.limits.max_subflow_depth
        error = err("depth-exceeded", f"run at depth {depth} exceeds max_subflow_depth {limit}")
        _ending.settle(t, "failed", None, error, None)
    else:
        if wall is not None:
            t.timer(keys.deadline_key(t.key_run), now_ms + wall, PendingKind.DEADLINE, "")
        if continued is not None:
            _carry(t, continued)
        t.starting = len(continued.signals) if continued is not None else 0
        t.idle = continued.idle_incarnations if continued is not None else 0
        out = t.start_list("", None, "", "", "", ListKind.FLOW)
        if out is not None:
            _ending.root_done(t, None, out)
        if t.halt is None:
            t.drain_queue()
        _ending.halted(t)  # a budget ran out, or the run continues as new at once
    return Decision(t.freeze(), tuple(t.effects))


def continue_run(
    flow: Flow,
    continued: ContinueAsNew,
    run_id: str,
    now_ms: int,
    depth: int = 0,
    semantics: int | None = None,
) -> Decision:
    """The next incarnation of run ``run_id``, whose last ended with ``continued``.

    What every host does with a ``continue-as-new`` effect: ``start`` with the
    effect's input, its budget (a child's remainder; None for a root run,
    which gets the flow's budget afresh) and what it carries. ``now_ms``
    starts the incarnation's clock (its wall-clock budget counts from it).
    """
    if not isinstance(continued, ContinueAsNew):
        raise TypeError(
            f"continued must be a flowcore.ContinueAsNew effect, got {type(continued).__name__}"
        )
    return start(
        flow,
        continued.input,
        run_id=run_id,
        now_ms=now_ms,
        budget=continued.budget_remaining,
        depth=depth,
        semantics=semantics,
        metadata=continued.metadata,
        continued=continued,
    )


def _check_continued(flow: Flow, continued: object) -> int:
    """The new incarnation's number; what the effect carries must be well-formed."""
    if not isinstance(continued, ContinueAsNew):
        raise TypeError(
            f"continued must be a flowcore.ContinueAsNew effect, got {type(continued).__name__}"
        )
    n = continued.incarnation
    if isinstance(n, bool) or not isinstance(n, int) or not 2 <= n <= 2**63 - 1:
        raise ValueError(f"continued.incarnation must be an integer from 2, got {n!r}")
    idle = continued.idle_incarnations
    if isinstance(idle, bool) or not isinstance(idle, int) or not 0 <= idle <= 2**63 - 1:
        raise ValueError(
            f"continued.idle_incarnations must be a non-negative integer, got {idle!r}"
        )
    limit = flow.limits.max_buffered_signals
    if len(continued.signals) > limit:
        raise InputError(
            flow.id,
            [f"{len(continued.signals)} carried signals, over max_buffered_signals {limit}"],
        )
    try:
        for i, sig in enumerate(continued.signals):
            check_data(sig.signal, f"$.signals[{i}].signal", "continued")
            check_data(sig.payload, f"$.signals[{i}].payload", "continued")
            if sig.key is not None:
                check_data(sig.key, f"$.signals[{i}].key", "continued")
        for i, call in enumerate(continued.scheduled):
            check_data(call.id, f"$.scheduled[{i}].id", "continued")
            check_data(call.input, f"$.scheduled[{i}].input", "continued")
            if call.tool not in flow.tools:
                raise DataError(
                    f"$.scheduled[{i}].tool", f"tool {call.tool!r} is not declared", "continued"
                )
    except DataError as exc:
        raise InputError(flow.id, [str(exc)]) from None
    return n


def _carry(t: Txn, continued: ContinueAsNew) -> None:
    """Buffered signals and scheduled calls, as the last incarnation left them."""
    signals: dict[str, tuple[Any, ...]] = {}
    keyed: dict[str, tuple[Any, ...]] = {}
    for sig in continued.signals:
        into = signals if sig.key is None else keyed
        slot = constructs.leaf.signal_slot(sig.signal, sig.key)
        into[slot] = (*into.get(slot, ()), sig.payload)
    if signals or keyed:
        t.waiting = msgspec.structs.replace(
            t.waiting, signals=immutables.Map(signals), keyed_signals=immutables.Map(keyed)
        )
    for call in continued.scheduled:
        sched = Sched(
            SchedStatus.PENDING,
            call.tool,
            call.input,
            call.outlive,
            created_ms=call.created_ms,
            due_ms=call.due_ms,
            outside=call.outside,
            recur=schedule.recurrence_of(call),
            fires=call.fires,
        )
        t.set_sched(call.id, sched)
        delay = keys.delay_key(call.id, call.fires + 1)
        t.timer(delay, call.due_ms, PendingKind.SCHEDULE_DELAY, call.id)


def event_key(event: object) -> str | None:
    """The idempotency key ``event`` answers; ``None`` for an event that names none."""
    return event.idempotency_key if isinstance(event, KeyEvent) else None


def _checked(event: object) -> None:
    try:
        check_event(event)
    except DataError as exc:
        key = event_key(event)
        if not isinstance(key, str) or len(key) > MAX_NAME_CHARS or not text_ok(key):
            key = None  # the key itself may be what is wrong
        raise EventRejected(str(exc), key) from None


def _ended_reject(state: State, event: Event) -> NoReturn:
    """Why ``event`` cannot apply to a run that has settled or continued as new
    (an update is answered as ``updates`` says: a taken id, else ``ending``)."""
    if type(event) is UpdateRequested:
        raise updates.check_ended(state, event)
    key = event_key(event)
    if state.settled is not None:
        raise EventRejected(
            f"run {state.run_id} has already settled ({state.settled.status}); no event applies",
            key,
        )
    continued = state.tree.continued
    assert continued is not None
    raise EventRejected(
        f"run {state.run_id} continued as new (incarnation {continued.incarnation});"
        " no event applies to the incarnation that ended",
        key,
    )


def _complete(state: State) -> None:
    if not state.report_complete:
        raise TypeError(
            "this state was restored without its report rows: "
            "advance it with flowcore.persist.advance(state, event, load_report=...)"
        )


def advance(state: State, event: Event) -> Decision:
    """Apply one reported event. Raises ``EventRejected`` (state untouched) if it cannot apply.

    An event that is not well-formed flowcore data (``check_event``) is
    rejected too, before it can reach the state: every state ``advance``
    returns can be encoded.
    """
    return _decide(state, event, whole=True)


def advance_partial(state: State, event: Event) -> Decision:
    """``advance`` for a state restored without its report (``flowcore.persist``).

    Raises ``ending.NeedsReport`` if the transition must read the report.
    """
    return _decide(state, event, whole=False)


def _decide(state: State, event: Event, whole: bool) -> Decision:
    _checked(event)
    if state.settled is not None or state.tree.continued is not None:
        _ended_reject(state, event)
    if whole:
        _complete(state)
    t = Txn(state, ABOVE)
    _transitions.apply(t, event)
    return Decision(t.freeze(), tuple(t.effects), t.answer, tuple(t.replies))


def validate_update(
    state: State, name: str, input: Any = None, principal: str | None = None
) -> None:
    """Raise ``UpdateRefused`` if ``state`` would refuse the update ``name`` with
    ``input`` now (any update id not taken yet); writes nothing."""
    if state.settled is not None or state.tree.continued is not None:
        raise updates.check_ended(state, UpdateRequested(update_id="?", name=name, at_ms=0))
    updates.check(Txn(state, ABOVE), None, name, input, principal)


class Batch:
    """Events applied one after another to one transaction (replay's batch apply).

    ``advance`` copies a state's records into a transaction and freezes a new
    ``State`` for every event; a replay needs the effects of each event and
    the state only now and then. ``Batch.advance`` applies one event to the
    same transaction and returns its effects, exactly what ``advance`` would;
    a rejected event raises ``EventRejected`` and leaves the batch as it was
    (a transition checks before it writes: ``Txn.checkpoint``). ``state``
    freezes it: the ``State``, journal included, that ``advance`` would have
    returned for the last event.
    """

    __slots__ = ("applied", "t")

    def __init__(self, state: State) -> None:
        _complete(state)
        self.t = Txn(state, ABOVE)
        self.applied = False

    def advance(self, event: Event) -> Sequence[Effect]:
        _checked(event)
        t = self.t
        if t.settled is not None or t.tree.continued is not None:
            _ended_reject(self.state(), event)
        saved = t.checkpoint()
        t.next_decision()
        try:
            _transitions.apply(t, event)
        except EventRejected:
            t.rollback(saved)
            raise
        self.applied = True
        return t.effects  # this decision's own list: the next one starts another

    @property
    def signal_taker(self) -> str | None:
        """The signal wait the last event (a signal) went to; None: it was buffered."""
        return self.t.signal_taker

    def was_late(self, key: str) -> bool:
        """Whether the last event was a late answer to ``key`` (one the run no
        longer waited for): this decision resolved ``key`` as late."""
        t = self.t
        if key not in t.resolved_now:  # the commonest: nothing resolved at all
            return False
        how = t.waiting.resolved.get(key)
        return how is not None and how.how is How.LATE

    @property
    def replies(self) -> tuple[UpdateReply, ...]:
        """The updates the last event ended, in order (``Decision.replies``)."""
        return tuple(self.t.replies)

    @property
    def answer(self) -> ScheduledAnswer | None:
        """What the last event, if a scheduled-call event from outside, answers."""
        return self.t.answer

    def scheduled_changes(self) -> list[tuple[str, Sched]]:
        """The scheduled calls the last event changed, in order of change
        (what the log's ``scheduled.changed`` records hold)."""
        t = self.t
        if not t.sched_changed:  # the commonest: none
            return []
        return [(sid, t.schedules[sid]) for sid in dict.fromkeys(t.sched_changed)]

    @property
    def pending(self) -> immutables.Map[str, Pending]:
        """What the run waits for now, by key."""
        return self.t.pending

    @property
    def settled(self) -> Settled | None:
        return self.t.settled

    def state(self) -> State:
        return self.t.freeze() if self.applied else self.t.source
