"""The simulator: a synchronous host with a virtual clock, for tests.

Theory of operation
-------------------

A simulation plays every part a real host plays for one root run and every
child run it starts: it executes each effect by asking a *script* (tools,
agents and teams are plain Python callables or canned responses, humans are
scripted answers, signals are scheduled at virtual times, subflows come from a
registry of flows) and reports the results back with ``advance``.

Time is virtual. An *agenda* holds every event that is due, ordered by
(virtual time, arrival order); the clock jumps straight to the next one. So
sleeps, timeouts, retry backoffs, repeats and wall-clock deadlines complete
at once, in the order their times say. A host may disarm a timer it knows the
run no longer waits for; the simulator does (a timer the driver, ``plan``,
says to drop, because its step ended another way or its run settled, is
dropped unfired). Everything else that is due is delivered, including
answers for work the run abandoned (recorded and ignored by the core) and
answers that arrive after the run settled (rejected, and logged as
``event.rejected``). Work of ``cancellation: wait_cancellation_completed``
that never answers (``Hang``) reports, once cancelled, that it stopped
(``effect-failed`` of type ``cancelled``), as a host's handler would.

Child runs are started with the ``run-subflow`` effect's idempotency key as
their run id, its depth and its remaining budget, in the same virtual clock;
when a child settles its parent gets ``subflow-settled`` with the child's
usage (steps, including its own work effects, and cost). A re-issued
``run-subflow`` (after an unknown outcome) attaches to the child that already
runs under that key instead of starting a second one. When a run settles, its
children that are still running are cancelled, but those ``plan`` says to
detach (``parent_close: abandon``), which run on. A ``detached`` child is
started as a root run (its own flow's budget, depth 0) and its parent gets
``effect-succeeded`` with ``{"run_id": <key>}`` at once; nothing more.

Faults (``Fault``) change how one target's calls are answered: fail, fail
retryably, outcome unknown, never answer, answer twice, answer late, answer
after the next delivery (out of order). When several events are due at the
same virtual instant, ``order`` may pick which goes first (hypothesis draws
it); otherwise they go in arrival order.

Every run's log is recorded with ``Recorder``, so the records are exactly the
event log format; the result is a ``Trajectory``: every effect and event in
order, the log, usage (total and per agent member), final status.

This module must never do I/O, read a clock or draw a random number: the only
nondeterminism is what the caller passes in.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, TypeAlias, assert_never

import attrs
import msgspec

from .._data import DataError, check_data
from .._errors import EventRejected, FlowcoreError
from ..decision.interp import Decision, InputError, advance, continue_run, start
from ..decision.keys import parse_key
from ..decision.outcome import NO_USAGE, effect_tag
from ..decision.plan import plan
from ..decision.state import State, encode_state
from ..decision.transitions import HEARTBEAT_TIMEOUT
from ..decision.waiting import waiting_for
from ..decision.wire import (
    AskHuman,
    AwaitSignal,
    BudgetRemaining,
    CallTool,
    CancelRequested,
    ContinueAsNew,
    Effect,
    EffectFailed,
    EffectOutcomeUnknown,
    EffectSucceeded,
    ErrorInfo,
    Event,
    HumanAnswered,
    RunAgent,
    RunSubflow,
    RunTeam,
    Settled,
    SignalReceived,
    SignalRun,
    Sleep,
    SubflowSettled,
    TimerFired,
    Usage,
    effect_to_wire,
    event_to_wire,
    result_event,
)
from ..language.spec import Budget, Flow, parse_flow
from ..log.fork import Fork, fork
from ..log.records import Record, Recorder, budget_from_wire

__all__ = [
    "FAULT_KINDS",
    "Call",
    "Entry",
    "Fail",
    "Fault",
    "Hang",
    "HeartbeatTimeout",
    "Ok",
    "Responses",
    "RunHistory",
    "Signal",
    "SimulationError",
    "Simulator",
    "Trajectory",
    "Turn",
    "Unknown",
    "UsageLine",
    "UsageReport",
    "drive",
    "simulate",
]

Spec: TypeAlias = "Flow | str | bytes | Mapping[str, Any]"


class SimulationError(FlowcoreError):
    """The script does not say how to go on (a test set-up mistake, not a flow bug)."""


# --- responses ----------------------------------------------------------------------------


@attrs.frozen
class Ok:
    """Answer with ``output`` (and optionally reported usage), after ``delay_ms``.

    ``delay_ms=None`` means the simulator's ``latency_ms``.
    """

    output: Any = None
    steps: int = attrs.field(default=0, kw_only=True)
    cost: int = attrs.field(default=0, kw_only=True)
    tokens: int = attrs.field(default=0, kw_only=True)
    tool_calls: int = attrs.field(default=0, kw_only=True)
    turns: int = attrs.field(default=0, kw_only=True)
    delay_ms: int | None = attrs.field(default=None, kw_only=True)


@attrs.frozen
class Fail:
    """Answer with ``effect-failed``; ``usage``: what the work spent before it
    failed (an agent cut off by its limits), charged to the run's ledger."""

    type: str = "error"
    message: str = ""
    retryable: bool = False
    delay_ms: int | None = attrs.field(default=None, kw_only=True)
    details: Any = attrs.field(default=None, kw_only=True)
    usage: Usage | None = attrs.field(default=None, kw_only=True)


@attrs.frozen
class Unknown:
    """Answer with ``effect-outcome-unknown`` (the host lost track of the call)."""

    delay_ms: int | None = None


@attrs.frozen
class Hang:
    """Never answer."""


@attrs.frozen
class HeartbeatTimeout:
    """The work stalls after heartbeating ``details`` at ``after_ms`` from its start.

    For work whose effect has a ``heartbeatTimeoutMs`` the simulator reports
    what a host does: ``effect-failed`` with type ``heartbeat-timeout`` and
    those details (none: the details the effect brought, if any), that long
    after the last heartbeat. Work without a heartbeat timeout hangs.
    """

    details: Any = None
    after_ms: int = attrs.field(default=0, kw_only=True)


Response: TypeAlias = Ok | Fail | Unknown | Hang | HeartbeatTimeout


def _as_tuple(items: Iterable[Any]) -> tuple[Any, ...]:
    return tuple(items)


@attrs.frozen
class Responses:
    """Canned responses in turn: the n-th call gets the n-th one; the last one repeats.

    Items are responses (``Ok``, ``Fail``...), plain outputs, or callables.
    """

    items: tuple[Any, ...] = attrs.field(converter=_as_tuple)

    @items.validator
    def _not_empty(self, _: Any, value: tuple[Any, ...]) -> None:
        if not value:
            raise ValueError("Responses needs at least one response")

    def pick(self, n: int) -> Any:
        return self.items[min(n, len(self.items)) - 1]


@attrs.frozen
class Call:
    """What a handler is asked: one effect, with where and when it happens.

    ``input`` is the tool input, the agent or team prompt, or the human
    question, as a JSON host would see it (a fresh copy). ``target`` is the
    tool, agent, team or flow id, or the step id for a human. ``n`` counts
    the calls of ``target`` in the simulation, from 1 (retries and re-issues
    count).
    """

    effect: Effect
    run_id: str
    key: str
    target: str
    input: Any
    n: int
    now_ms: int

    @property
    def kind(self) -> str:
        tag = self.effect.__struct_config__.tag
        assert isinstance(tag, str)
        return tag

    @property
    def options(self) -> tuple[str, ...] | None:
        return self.effect.options if isinstance(self.effect, AskHuman) else None


FaultKind: TypeAlias = Literal[
    "fail",
    "fail-retryable",
    "unknown",
    "hang",
    "duplicate",
    "late",
    "reorder",
    "heartbeat-timeout",
]
FAULT_KINDS: tuple[str, ...] = (
    "fail",
    "fail-retryable",
    "unknown",
    "hang",
    "duplicate",
    "late",
    "reorder",
    "heartbeat-timeout",
)


def _calls(value: Iterable[int] | None) -> tuple[int, ...] | None:
    return None if value is None else tuple(value)


@attrs.frozen
class Fault:
    """Change how calls of ``target`` (a tool, agent, team or flow id; ``*`` any) are answered.

    ``calls`` picks which calls, counted from 1 per target (``None``: all).
    Kinds: ``fail`` / ``fail-retryable`` (the call fails before doing
    anything), ``unknown`` (it runs, but the host reports an unknown outcome),
    ``hang`` (it runs and never answers), ``duplicate`` (the answer is
    delivered twice), ``late`` (the answer comes ``delay_ms`` later),
    ``reorder`` (the answer is delivered after the next delivery, whatever
    that is), ``heartbeat-timeout`` (it stalls after heartbeating
    ``{"call": n}``: ``HeartbeatTimeout``). The first fault that matches a
    call applies.
    """

    kind: FaultKind = attrs.field(validator=attrs.validators.in_(FAULT_KINDS))
    target: str = "*"
    calls: tuple[int, ...] | None = attrs.field(default=None, converter=_calls)
    delay_ms: int = 1000
    error_type: str = "injected"

    def matches(self, target: str, n: int) -> bool:
        if self.target != "*" and self.target != target:
            return False
        return self.calls is None or n in self.calls


@attrs.frozen
class Signal:
    """A signal sent at virtual time ``at_ms`` to the root run (or ``run_id``),
    with ``key`` when set (taken only by a wait with that key)."""

    name: str
    payload: Any = None
    at_ms: int = 0
    run_id: str | None = None
    key: str | None = None


# --- run histories ------------------------------------------------------------------------


class Turn(msgspec.Struct, frozen=True):
    """One decision of a run: ``start`` (``event`` None) or one reported event.

    A rejected event has ``rejected`` (the reason), no effects, and ``state``
    is the unchanged state. In paranoid mode ``before`` is the snapshot of the
    state the event was given to and ``input_after`` the snapshot of that same
    state object after ``advance`` returned or raised: they must be equal.
    """

    event: Event | None
    effects: tuple[Effect, ...]
    state: State
    rejected: str | None = None
    before: bytes | None = None
    input_after: bytes | None = None


@attrs.define
class RunHistory:
    """Everything one run was told and answered, turn by turn."""

    flow: Flow
    input: Any
    run_id: str
    now_ms: int
    budget: Budget | BudgetRemaining | None
    depth: int
    turns: list[Turn] = attrs.field(factory=list)
    metadata: Mapping[str, Any] | None = None  # given at start

    @property
    def state(self) -> State:
        return self.turns[-1].state

    def events(self) -> list[Event]:
        """Every event reported to the run, accepted or not, in order."""
        return [t.event for t in self.turns if t.event is not None]

    def effects(self) -> list[Effect]:
        return [e for t in self.turns for e in t.effects]

    def record(self, event: Event, paranoid: bool = False) -> Turn:
        """Report ``event`` to the run's current state and append the turn.

        When the run continues as new, the next incarnation starts at once, as
        every host starts it: a turn without an event follows (``continued``).
        """
        state = self.state
        before = encode_state(state) if paranoid else None
        try:
            d = advance(state, event)
        except EventRejected as exc:
            after = encode_state(state) if paranoid else None
            turn = Turn(event, (), state, exc.reason, before, after)
        else:
            after = encode_state(state) if paranoid else None
            turn = Turn(event, d.effects, d.state, None, before, after)
        self.turns.append(turn)
        if turn.rejected is None:
            self.continued(event.at_ms)
        return turn

    def log(self) -> tuple[Record, ...]:
        """The run's log records, as a host driving it would have written them
        (``flowcore replay`` replays them)."""
        recorder = Recorder(self.run_id)
        first = self.turns[0]
        out = recorder.started(
            self.flow,
            self.input,
            self.now_ms,
            Decision(first.state, first.effects),
            self.budget,
            self.depth,
            self.metadata,
        )
        for before, turn in zip(self.turns, self.turns[1:], strict=False):
            if turn.event is None:  # the next incarnation
                effect = before.state.tree.continued
                assert effect is not None
                out += recorder.started(
                    self.flow,
                    effect.input,
                    turn.state.run.started_ms,
                    Decision(turn.state, turn.effects),
                    depth=self.depth,
                    continued=effect,
                )
            elif turn.rejected is not None:
                out += recorder.rejected(turn.event, turn.rejected)
            else:
                out += recorder.applied(turn.event, Decision(turn.state, turn.effects))
        return tuple(out)

    def continued(self, at_ms: int) -> None:
        """Start the next incarnation while the run's last decision continued as new
        (an incarnation may continue at once after taking a carried signal)."""
        while (effect := self.state.tree.continued) is not None:
            at = max(at_ms, self.state.now_ms)
            d = continue_run(self.flow, effect, self.run_id, at, self.depth)
            self.turns.append(Turn(None, d.effects, d.state))


def as_flow(spec: Spec) -> Flow:
    return spec if isinstance(spec, Flow) else parse_flow(spec)


def drive(
    flow: Spec,
    input: Any = None,
    events: Iterable[Event] = (),
    *,
    run_id: str = "r",
    now_ms: int = 0,
    budget: Budget | BudgetRemaining | None = None,
    depth: int = 0,
    paranoid: bool = False,
    metadata: Mapping[str, Any] | None = None,
) -> RunHistory:
    """Start a run and report ``events`` to it one by one; rejected ones are kept too."""
    flow = as_flow(flow)
    d = start(
        flow, input, run_id=run_id, now_ms=now_ms, budget=budget, depth=depth, metadata=metadata
    )
    history = RunHistory(
        flow, input, run_id, now_ms, budget, depth, [Turn(None, d.effects, d.state)], metadata
    )
    history.continued(now_ms)
    for event in events:
        history.record(event, paranoid)
    return history


# --- trajectories -------------------------------------------------------------------------

EntryKind: TypeAlias = Literal["effect", "event", "rejected"]


@attrs.frozen
class Entry:
    """One thing that happened: an effect emitted, an event accepted, or one rejected."""

    at_ms: int
    run_id: str
    kind: EntryKind
    effect: Effect | None = None
    event: Event | None = None
    reason: str | None = None

    def __str__(self) -> str:
        if self.effect is not None:
            body = msgspec.json.encode(effect_to_wire(self.effect)).decode()
            return f"t={self.at_ms} {self.run_id} <- {body}"
        assert self.event is not None
        body = msgspec.json.encode(event_to_wire(self.event)).decode()
        if self.kind == "rejected":
            return f"t={self.at_ms} {self.run_id} x- {body} (rejected: {self.reason})"
        return f"t={self.at_ms} {self.run_id} -> {body}"


@attrs.frozen
class UsageLine:
    """Work of one agent or member: effects emitted, steps charged (one per effect
    plus reported steps) and reported cost."""

    effects: int = 0
    steps: int = 0
    cost_minor_units: int = 0


@attrs.frozen
class UsageReport:
    """The root run's ledger (children's usage included) and agent work by member and agent."""

    steps: int
    cost_minor_units: int
    by_member: Mapping[str, UsageLine]
    by_agent: Mapping[str, UsageLine]


Stop: TypeAlias = Literal["settled", "idle", "max-events", "horizon"]


@attrs.frozen
class Trajectory:
    """The outcome of a simulation.

    ``status`` is the root run's status (``running`` if it never settled:
    see ``stop`` for why the simulation ended: ``idle`` means nothing more
    was due, e.g. a signal nobody sends). ``entries`` lists every effect and
    event of every run in order; ``log`` holds every run's log records, in
    the order they were written; ``histories`` each run's turns.
    """

    run_id: str
    status: str
    settled: Settled | None
    stop: Stop
    end_ms: int
    entries: tuple[Entry, ...]
    log: tuple[Record, ...]
    usage: UsageReport
    histories: Mapping[str, RunHistory]

    @property
    def output(self) -> Any:
        return None if self.settled is None else self.settled.output

    @property
    def error(self) -> ErrorInfo | None:
        return None if self.settled is None else self.settled.error

    @property
    def state(self) -> State:
        """The root run's final state."""
        return self.histories[self.run_id].state

    @property
    def metadata(self) -> dict[str, Any]:
        """The root run's metadata as it ended (start values, then set_metadata)."""
        return dict(self.state.metadata or {})

    @property
    def runs(self) -> tuple[str, ...]:
        """Run ids, root first, then children in the order they started."""
        return tuple(self.histories)

    def effects(self, kind: str | None = None, run_id: str | None = None) -> list[Effect]:
        """Emitted effects, optionally of one wire kind (``call-tool``) or one run."""
        out: list[Effect] = []
        for entry in self.entries:
            effect = entry.effect
            if effect is None or (run_id is not None and entry.run_id != run_id):
                continue
            if kind is None or effect.__struct_config__.tag == kind:
                out.append(effect)
        return out

    def events(self, run_id: str | None = None, rejected: bool = False) -> list[Event]:
        """Accepted events (or, with ``rejected=True``, rejected ones)."""
        want = "rejected" if rejected else "event"
        return [
            e.event
            for e in self.entries
            if e.kind == want and e.event is not None and (run_id is None or e.run_id == run_id)
        ]

    def log_of(self, run_id: str | None = None) -> tuple[Record, ...]:
        """One run's log records (the root's by default)."""
        rid = self.run_id if run_id is None else run_id
        return tuple(r for r in self.log if r.run_id == rid)

    def describe(self) -> str:
        """Every entry, one per line: for assertion messages."""
        lines = [str(e) for e in self.entries]
        lines.append(f"stop: {self.stop} at t={self.end_ms}; status {self.status}")
        return "\n".join(lines)


# --- the simulator --------------------------------------------------------------------------

Handler: TypeAlias = Callable[[Call], Any]


class Simulator:
    """A scripted world that runs flows in virtual time. Reusable: ``run`` is pure.

    ``tools``, ``agents``, ``teams`` map a tool, agent or team id to a handler:
    a callable taking a ``Call``, a ``Responses`` sequence, a response
    (``Ok``, ``Fail``, ``Unknown``, ``Hang``) or any other value (the output).
    A callable may return any of those; an exception it raises becomes
    ``effect-failed`` (type: the exception's class name), except
    ``AssertionError``, which propagates. ``default`` answers anything not
    scripted; without it an unscripted call raises ``SimulationError``.

    ``humans`` answers ``ask-human``: a mapping from step id (or ``*``) to an
    answer, a callable taking a ``Call``, or one answer for every question.
    ``signals`` are sent at their virtual times, ``cancel_at_ms`` requests
    cancellation of the root run. ``events`` are other events from outside the
    root run (``scheduled-cancel-requested``, ``scheduled-run-now-requested``,
    ``scheduled-add-requested``), each delivered at its ``at_ms``. ``subflows``
    is the registry of flows that ``run-subflow`` may start (a mapping by id,
    or flows). ``latency_ms`` is how long every answer takes unless the
    response says otherwise.

    ``order`` breaks ties between events due at the same instant: a sequence
    of choices (each taken modulo the number of ties; FIFO once used up) or a
    callable ``n -> index``. ``max_events`` and ``until_ms`` bound the
    simulation. ``paranoid`` snapshots the state around every ``advance`` so
    that ``flowcore.testing`` can check it was never mutated.
    """

    def __init__(
        self,
        *,
        tools: Mapping[str, Any] | None = None,
        agents: Mapping[str, Any] | None = None,
        teams: Mapping[str, Any] | None = None,
        humans: Any = None,
        signals: Iterable[Signal] = (),
        subflows: Mapping[str, Spec] | Iterable[Flow] | None = None,
        faults: Iterable[Fault] = (),
        cancel_at_ms: int | None = None,
        events: Iterable[Event] = (),
        latency_ms: int = 1,
        default: Any = None,
        order: Sequence[int] | Callable[[int], int] | None = None,
        max_events: int = 100_000,
        until_ms: int | None = None,
        paranoid: bool = False,
    ) -> None:
        if latency_ms < 0:
            raise ValueError(f"latency_ms must not be negative, got {latency_ms}")
        self.tools = dict(tools or {})
        self.agents = dict(agents or {})
        self.teams = dict(teams or {})
        self.humans = humans
        self.signals = tuple(signals)
        registry: dict[str, Flow] = {}
        if isinstance(subflows, Mapping):
            for name, spec in subflows.items():
                registry[name] = as_flow(spec)
        elif subflows is not None:
            for flow in subflows:
                registry[flow.id] = flow
        self.subflows = registry
        self.faults = tuple(faults)
        self.cancel_at_ms = cancel_at_ms
        self.events = tuple(events)
        self.latency_ms = latency_ms
        self.default = default
        self.order = order
        self.max_events = max_events
        self.until_ms = until_ms
        self.paranoid = paranoid

    def run(
        self,
        flow: Spec,
        input: Any = None,
        *,
        run_id: str = "run",
        now_ms: int = 0,
        budget: Budget | BudgetRemaining | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Trajectory:
        """Simulate one root run of ``flow`` (and its children) to the end.

        ``run_id``, ``now_ms``, ``budget`` and ``metadata`` go to ``flowcore.start``.
        """
        return _Simulation(self, now_ms).run(as_flow(flow), input, run_id, budget, metadata)

    def fork(
        self,
        flow: Spec,
        records: Iterable[Record],
        run_id: str,
        *,
        at: int | None = None,
        from_step: str | None = None,
    ) -> Trajectory:
        """Simulate a fork of the run whose log is ``records`` to the end (``flowcore.fork``).

        The fork begins with the source's history up to the point (its log
        holds the carried records); what is open there is answered by this
        simulator's world, from the time of the last carried record on.
        """
        parsed = as_flow(flow)
        forked = fork(records, parsed, run_id, at=at, from_step=from_step)
        return _Simulation(self, forked.records[-1].at).run(
            parsed, None, run_id, None, forked=forked
        )


def simulate(flow: Spec, input: Any = None, **world: Any) -> Trajectory:
    """``Simulator(**world).run(flow, input)``, for one-off runs."""
    names = ("run_id", "now_ms", "budget", "metadata")
    run_args = {k: world.pop(k) for k in names if k in world}
    return Simulator(**world).run(flow, input, **run_args)


class _Slot:
    """A run inside a simulation, and what its host knows about it."""

    __slots__ = (
        "awaiting",
        "children",
        "detached",
        "flow",
        "history",
        "key",
        "parent",
        "recorder",
        "run_id",
        "timers",
    )

    def __init__(
        self, flow: Flow, run_id: str, history: RunHistory, parent: str | None, key: str | None
    ) -> None:
        self.flow = flow
        self.run_id = run_id
        self.history = history
        self.recorder = Recorder(run_id)
        self.parent = parent
        self.key = key
        # run-subflow keys whose child's settlement this run waits for, and
        # the fault (if any) that shapes that answer.
        self.awaiting: dict[str, Fault | None] = {}
        self.children: list[str] = []
        self.detached: set[str] = set()  # children left to run on (parent_close: abandon)
        self.timers: set[str] = set()  # keys of the timers armed and not fired or dropped

    @property
    def state(self) -> State:
        return self.history.state


class _Due:
    __slots__ = ("at", "event", "reorder", "run_id", "seq")

    def __init__(self, at: int, seq: int, run_id: str, event: Event, reorder: bool) -> None:
        self.at = at
        self.seq = seq
        self.run_id = run_id
        self.event = event
        self.reorder = reorder

    def __lt__(self, other: _Due) -> bool:
        return (self.at, self.seq) < (other.at, other.seq)


class _Simulation:
    def __init__(self, sim: Simulator, now_ms: int) -> None:
        self.sim = sim
        self.now = now_ms
        self.agenda: list[_Due] = []
        self.seq = 0
        self.runs: dict[str, _Slot] = {}
        self.entries: list[Entry] = []
        self.log: list[Record] = []
        self.count = 0
        self.calls: dict[str, int] = {}
        self.choices = 0
        self.agent_effects: dict[str, RunAgent] = {}
        self.by_member: dict[str, list[int]] = {}
        self.by_agent: dict[str, list[int]] = {}
        self.delivered: set[str] = set()  # signal-run keys delivered
        # Work of cancellation wait-cancellation-completed that never answers
        # (Hang), by (run, key): cancelled, it reports that it stopped.
        self.hung: dict[tuple[str, str], CallTool | RunAgent | RunTeam] = {}

    # --- the loop ---------------------------------------------------------------------------

    def run(
        self,
        flow: Flow,
        input: Any,
        run_id: str,
        budget: Budget | BudgetRemaining | None,
        metadata: Mapping[str, Any] | None = None,
        forked: Fork | None = None,
    ) -> Trajectory:
        sim = self.sim
        if forked is None:
            root = self.start_run(flow, input, run_id, budget, 0, None, None, metadata)
        else:
            root = self.start_fork(flow, forked)
        for signal in sim.signals:
            target = signal.run_id or run_id
            event = SignalReceived(
                signal=signal.name,
                payload=signal.payload,
                at_ms=max(signal.at_ms, self.now),
                key=signal.key,
            )
            self.push(event.at_ms, target, event)
        if sim.cancel_at_ms is not None:
            at = max(sim.cancel_at_ms, self.now)
            self.push(at, run_id, CancelRequested(reason="cancel requested", at_ms=at))
        for outside in sim.events:
            at = max(outside.at_ms, self.now)
            self.push(at, run_id, msgspec.structs.replace(outside, at_ms=at))
        stop: Stop = "idle"
        while self.agenda:
            if self.count >= sim.max_events:
                stop = "max-events"
                break
            due = self.pop()
            if sim.until_ms is not None and due.at > sim.until_ms:
                stop = "horizon"
                break
            if due.reorder:
                # Out of order: let the next delivery overtake this one.
                due.reorder = False
                if self.agenda:
                    nxt = min(self.agenda)
                    self.seq += 1
                    due.seq = self.seq
                    if nxt.at > due.at:
                        due.at = nxt.at
                        due.event = msgspec.structs.replace(due.event, at_ms=nxt.at)
                heapq.heappush(self.agenda, due)
                continue
            slot = self.runs.get(due.run_id)
            if slot is None:
                raise SimulationError(
                    f"{due.event.__struct_config__.tag} at t={due.at} is addressed to run "
                    f"{due.run_id!r}, which has not started"
                )
            if isinstance(due.event, TimerFired):
                key = due.event.idempotency_key
                if key not in slot.timers:
                    continue  # disarmed
                slot.timers.discard(key)
            self.now = max(self.now, due.at)
            self.deliver(slot, due.event)
        root_state = root.state
        if root_state.settled is not None and stop == "idle":
            stop = "settled"
        used = waiting_for(root_state)
        return Trajectory(
            run_id=run_id,
            status=root_state.status,
            settled=root_state.settled,
            stop=stop,
            end_ms=self.now,
            entries=tuple(self.entries),
            log=tuple(self.log),
            usage=UsageReport(
                steps=used.used_steps,
                cost_minor_units=used.used_cost_minor_units,
                by_member={k: UsageLine(*v) for k, v in sorted(self.by_member.items())},
                by_agent={k: UsageLine(*v) for k, v in sorted(self.by_agent.items())},
            ),
            histories={rid: slot.history for rid, slot in self.runs.items()},
        )

    def push(self, at: int, run_id: str, event: Event, reorder: bool = False) -> None:
        self.seq += 1
        heapq.heappush(self.agenda, _Due(at, self.seq, run_id, event, reorder))

    def pop(self) -> _Due:
        order = self.sim.order
        first = heapq.heappop(self.agenda)
        if order is None or not self.agenda or self.agenda[0].at != first.at:
            return first
        ties = [first]
        while self.agenda and self.agenda[0].at == first.at:
            ties.append(heapq.heappop(self.agenda))
        if callable(order):
            pick = order(len(ties))
        elif self.choices < len(order):
            pick = order[self.choices]
        else:
            pick = 0
        self.choices += 1
        chosen = ties.pop(pick % len(ties))
        for other in ties:
            heapq.heappush(self.agenda, other)
        return chosen

    # --- runs -------------------------------------------------------------------------------

    def start_run(
        self,
        flow: Flow,
        input: Any,
        run_id: str,
        budget: Budget | BudgetRemaining | None,
        depth: int,
        parent: str | None,
        key: str | None,
        metadata: Mapping[str, Any] | None = None,
    ) -> _Slot:
        d = start(
            flow,
            input,
            run_id=run_id,
            now_ms=self.now,
            budget=budget,
            depth=depth,
            metadata=metadata,
        )
        history = RunHistory(flow, input, run_id, self.now, budget, depth, metadata=metadata)
        history.turns.append(Turn(None, d.effects, d.state))
        history.continued(self.now)
        slot = _Slot(flow, run_id, history, parent, key)
        self.runs[run_id] = slot
        self.log.extend(slot.recorder.started(flow, input, self.now, d, budget, depth, metadata))
        self.execute(slot, d)
        return slot

    def start_fork(self, flow: Flow, forked: Fork) -> _Slot:
        """A fork's root run: its carried log, then only what is open at its end."""
        first = forked.records[0]
        data = first.data if isinstance(first.data, dict) else {}
        budget = budget_from_wire(data.get("budget"))
        depth = data.get("depth", 0)
        history = RunHistory(flow, data.get("input"), forked.run_id, first.at, budget, depth)
        history.turns.append(Turn(None, forked.pending, forked.state))
        slot = _Slot(flow, forked.run_id, history, None, None)
        slot.recorder = Recorder(forked.run_id, len(forked.records))
        self.runs[forked.run_id] = slot
        self.log.extend(forked.records)
        self.execute(slot, Decision(forked.state, forked.pending))
        return slot

    def deliver(self, slot: _Slot, event: Event) -> None:
        self.count += 1
        turn = slot.history.record(event, self.sim.paranoid)
        if turn.rejected is not None:
            self.entries.append(
                Entry(event.at_ms, slot.run_id, "rejected", event=event, reason=turn.rejected)
            )
            self.log.extend(slot.recorder.rejected(event, turn.rejected))
            return
        self.entries.append(Entry(event.at_ms, slot.run_id, "event", event=event))
        decision = Decision(turn.state, turn.effects)
        self.log.extend(slot.recorder.applied(event, decision))
        if isinstance(event, (EffectSucceeded, EffectFailed)):
            self.charge_agent(event)
        self.execute(slot, decision)

    def execute(self, slot: _Slot, decision: Decision) -> None:
        todo = plan(decision)
        slot.detached.update(todo.detach)
        for key in todo.cancel:  # a hung handler told to stop stops, as on every host
            hung = self.hung.pop((slot.run_id, key), None)
            if hung is not None:
                message = f"{effect_tag(hung)} {key} stopped when cancelled"
                error = ErrorInfo(type="cancelled", message=message)
                self.push(
                    self.now,
                    slot.run_id,
                    EffectFailed(idempotency_key=key, error=error, at_ms=self.now),
                )
        slot.timers.difference_update(todo.drop)
        slot.timers.update(sleep.idempotency_key for sleep in todo.arm)
        effects = decision.effects
        for effect in effects:
            self.entries.append(Entry(self.now, slot.run_id, "effect", effect=effect))
        # In the order emitted, not grouped as in the plan: what is due at one
        # instant arrives in that order. Abandoned work runs on (see above).
        for effect in effects:
            match effect:
                case Sleep():
                    at = max(effect.until_ms, self.now)
                    self.push(
                        at,
                        slot.run_id,
                        TimerFired(idempotency_key=effect.idempotency_key, at_ms=at),
                    )
                case AwaitSignal():
                    pass  # signals come from the script's schedule
                case AskHuman():
                    self.ask(slot, effect)
                case CallTool() | RunAgent() | RunTeam():
                    self.work(slot, effect)
                case RunSubflow():
                    self.subflow(slot, effect)
                case SignalRun():
                    self.signal_run(slot, effect)
                case Settled():
                    self.settled(slot, effect)
                case ContinueAsNew():
                    self.continued(slot, effect)
                case _:
                    assert_never(effect)

    # --- answering work -----------------------------------------------------------------------

    def next_call(self, target: str) -> int:
        n = self.calls.get(target, 0) + 1
        self.calls[target] = n
        return n

    def fault_for(self, target: str, n: int) -> Fault | None:
        for fault in self.sim.faults:
            if fault.matches(target, n):
                return fault
        return None

    def work(self, slot: _Slot, effect: CallTool | RunAgent | RunTeam) -> None:
        sim = self.sim
        if isinstance(effect, CallTool):
            target, table, what, payload = effect.tool, sim.tools, "tool", effect.input
        elif isinstance(effect, RunAgent):
            target, table, what, payload = effect.agent_id, sim.agents, "agent", effect.prompt
            self.agent_effects[effect.idempotency_key] = effect
            self.charge_line(effect, 1, 1, 0)
        else:
            target, table, what, payload = effect.team_id, sim.teams, "team", effect.prompt
        n = self.next_call(target)
        fault = self.fault_for(target, n)
        if fault is not None and fault.kind in ("fail", "fail-retryable"):
            response: Response = Fail(
                fault.error_type,
                f"injected fault on call {n} of {target}",
                retryable=fault.kind == "fail-retryable",
            )
        else:
            handler = table.get(target, sim.default)
            if handler is None:
                raise SimulationError(
                    f"no {what} {target!r} in the script (for {effect.idempotency_key}); "
                    f"script it with {what}s={{{target!r}: ...}} or pass default="
                )
            call = Call(
                effect, slot.run_id, effect.idempotency_key, target, _copy(payload), n, self.now
            )
            response = self.respond(handler, call)
            if fault is not None and fault.kind == "unknown":
                response = Unknown()
            elif fault is not None and fault.kind == "hang":
                response = Hang()
            elif fault is not None and fault.kind == "heartbeat-timeout":
                response = HeartbeatTimeout({"call": n})
        if isinstance(response, HeartbeatTimeout):
            response = _stalled(effect, response, self.now)
        if isinstance(response, Hang) and effect.cancellation == "wait-cancellation-completed":
            self.hung[(slot.run_id, effect.idempotency_key)] = effect
        self.answer(slot.run_id, effect.idempotency_key, response, fault)

    def respond(self, handler: Any, call: Call) -> Response:
        if isinstance(handler, Responses):
            handler = handler.pick(call.n)
        if callable(handler) and not isinstance(handler, _RESPONSES):
            try:
                handler = handler(call)
            except (AssertionError, SimulationError):
                raise
            except Exception as exc:
                return Fail(type(exc).__name__, str(exc))
        if isinstance(handler, _RESPONSES):
            return handler
        return Ok(handler)

    def answer(self, run_id: str, key: str, response: Response, fault: Fault | None) -> None:
        if isinstance(response, (Hang, HeartbeatTimeout)):  # work() turned the latter into others
            return
        delay = self.sim.latency_ms if response.delay_ms is None else response.delay_ms
        if fault is not None and fault.kind == "late":
            delay += fault.delay_ms
        at = self.now + delay
        event: Event
        if isinstance(response, Ok):
            usage: Usage | None = Usage(
                steps=response.steps,
                cost_minor_units=response.cost,
                tokens=response.tokens,
                tool_calls=response.tool_calls,
                turns=response.turns,
            )
            if usage == NO_USAGE:
                usage = None
            # What every host does with a handler's unstorable value.
            event = result_event(key, response.output, usage, at_ms=at)
            if isinstance(event, EffectSucceeded):
                output = _copy(response.output, f"the output for {key}")
                event = EffectSucceeded(idempotency_key=key, output=output, usage=usage, at_ms=at)
        elif isinstance(response, Fail):
            error = ErrorInfo(
                type=response.type,
                message=response.message,
                retryable=response.retryable,
                details=_copy(response.details, f"the details for {key}"),
            )
            event = EffectFailed(idempotency_key=key, error=error, usage=response.usage, at_ms=at)
        else:
            event = EffectOutcomeUnknown(idempotency_key=key, at_ms=at)
        self.deliver_later(run_id, event, fault)

    def deliver_later(self, run_id: str, event: Event, fault: Fault | None) -> None:
        kind = fault.kind if fault is not None else None
        self.push(event.at_ms, run_id, event, reorder=kind == "reorder")
        if kind == "duplicate":
            self.push(event.at_ms, run_id, event)

    def ask(self, slot: _Slot, effect: AskHuman) -> None:
        key = effect.idempotency_key
        step = parse_key(key, slot.run_id).step
        assert step is not None
        n = self.next_call(f"human:{step}")
        humans = self.sim.humans
        if humans is None:
            raise SimulationError(
                f"no human is scripted to answer {key} ({effect.question!r}); pass humans="
            )
        call = Call(effect, slot.run_id, key, step, effect.question, n, self.now)
        if isinstance(humans, Mapping):
            if step in humans:
                handler = humans[step]
            elif "*" in humans:
                handler = humans["*"]
            else:
                raise SimulationError(f"humans= has no answer for step {step!r} ({key})")
        else:
            handler = humans
        response = self.respond(handler, call)
        if isinstance(response, Hang):
            return
        if not isinstance(response, Ok):
            raise SimulationError(f"a human answers with a value or Hang(), not {response!r}")
        delay = self.sim.latency_ms if response.delay_ms is None else response.delay_ms
        answer = _copy(response.output, f"the answer for {key}")
        self.push(
            self.now + delay,
            slot.run_id,
            HumanAnswered(idempotency_key=key, answer=answer, at_ms=self.now + delay),
        )

    # --- signals to other runs -----------------------------------------------------------------

    def signal_run(self, slot: _Slot, effect: SignalRun) -> None:
        """Deliver the signal to a run of this simulation (the root or a child), once
        per idempotency key: a re-issue after an unknown outcome is not delivered
        again."""
        key = effect.idempotency_key
        target = self.runs.get(effect.run_id)
        response: Response
        # A host delivers it itself: the signal and the answer come at once.
        if key in self.delivered:
            response = Ok({"run_id": effect.run_id}, delay_ms=0)
        elif target is None:
            response = Fail("unknown-run", f"no run {effect.run_id!r} to signal", delay_ms=0)
        elif target.state.settled is not None:
            message = f"run {effect.run_id!r} has already settled"
            response = Fail("run-settled", message, delay_ms=0)
        else:
            self.delivered.add(key)
            event = SignalReceived(
                signal=effect.signal, payload=_copy(effect.payload), at_ms=self.now, key=effect.key
            )
            self.push(self.now, effect.run_id, event)
            response = Ok({"run_id": effect.run_id}, delay_ms=0)
        n = self.next_call(effect.signal)
        fault = self.fault_for(effect.signal, n)
        if fault is not None and fault.kind == "unknown":
            response = Unknown()
        self.answer(slot.run_id, key, response, None)

    # --- subflows -------------------------------------------------------------------------------

    def subflow(self, slot: _Slot, effect: RunSubflow) -> None:
        key = effect.idempotency_key
        n = self.next_call(effect.flow_id)
        fault = self.fault_for(effect.flow_id, n)
        kind = fault.kind if fault is not None else None
        if kind in ("fail", "fail-retryable"):
            assert fault is not None
            error = Fail(
                fault.error_type,
                f"injected fault on call {n} of {effect.flow_id}",
                retryable=kind == "fail-retryable",
            )
            self.answer(slot.run_id, key, error, fault)
            return
        if effect.detached:
            self.detached(slot, effect, kind)
            return
        slot.awaiting.pop(key, None)
        if kind not in ("unknown", "hang"):
            slot.awaiting[key] = fault
        child = self.runs.get(key)
        if child is None:
            flow = self.sim.subflows.get(effect.flow_id)
            if flow is None:
                raise SimulationError(
                    f"run-subflow {key} asks for flow {effect.flow_id!r}, which is not in "
                    f"subflows= ({sorted(self.sim.subflows)})"
                )
            try:
                self.start_run(
                    flow,
                    _copy(effect.input),
                    key,
                    effect.budget_remaining,
                    effect.depth,
                    slot.run_id,
                    key,
                )
            except InputError as exc:
                slot.awaiting.pop(key, None)
                self.answer(slot.run_id, key, Fail("input-rejected", str(exc)), None)
                return
            slot.children.append(key)
        elif child.state.settled is not None and key in slot.awaiting:
            self.report_child(child)
        if kind == "unknown":
            self.answer(slot.run_id, key, Unknown(), None)

    def detached(self, slot: _Slot, effect: RunSubflow, kind: str | None) -> None:
        """Start a detached child as a root run; its parent only hears that it started."""
        key = effect.idempotency_key
        if key not in self.runs:
            flow = self.sim.subflows.get(effect.flow_id)
            if flow is None:
                raise SimulationError(
                    f"run-subflow {key} asks for flow {effect.flow_id!r}, which is not in "
                    f"subflows= ({sorted(self.sim.subflows)})"
                )
            try:
                self.start_run(flow, _copy(effect.input), key, None, 0, None, None)
            except InputError as exc:
                self.answer(slot.run_id, key, Fail("input-rejected", str(exc)), None)
                return
        if kind == "unknown":
            self.answer(slot.run_id, key, Unknown(), None)
        elif kind != "hang":
            self.answer(slot.run_id, key, Ok({"run_id": key}), None)

    def settled(self, slot: _Slot, effect: Settled) -> None:
        if slot.key is not None:
            self.report_child(slot)
        for child_id in slot.children:
            child = self.runs[child_id]
            if child.state.settled is None and child_id not in slot.detached:
                event = CancelRequested(reason=f"parent run {slot.run_id} settled", at_ms=self.now)
                self.push(self.now, child_id, event)

    def continued(self, slot: _Slot, effect: ContinueAsNew) -> None:
        """Start the run's next incarnation at once, as every host does: no
        event can fall between the two. Children still running are cancelled."""
        for child_id in slot.children:
            child = self.runs[child_id]
            if child.state.settled is None:
                reason = f"parent run {slot.run_id} continued as new"
                self.push(self.now, child_id, CancelRequested(reason=reason, at_ms=self.now))
        slot.children = []
        slot.awaiting.clear()
        history = slot.history
        # The next incarnation's turn, which ``RunHistory.record`` appended.
        turn = next(
            t
            for t in reversed(history.turns)
            if t.event is None and t.state.incarnation == effect.incarnation
        )
        d = Decision(turn.state, turn.effects)
        self.log.extend(
            slot.recorder.started(
                slot.flow, effect.input, self.now, d, depth=history.depth, continued=effect
            )
        )
        self.execute(slot, d)

    def report_child(self, child: _Slot) -> None:
        assert child.parent is not None and child.key is not None
        parent = self.runs[child.parent]
        if child.key not in parent.awaiting or parent.state.settled is not None:
            return
        fault = parent.awaiting.pop(child.key)
        state = child.state
        assert state.settled is not None
        used = waiting_for(state)
        delay = self.sim.latency_ms
        if fault is not None and fault.kind == "late":
            delay += fault.delay_ms
        event = SubflowSettled(
            idempotency_key=child.key,
            status=state.settled.status,
            output=state.settled.output,
            usage=used.usage(),
            error=state.settled.error,
            at_ms=self.now + delay,
        )
        self.deliver_later(parent.run_id, event, fault)

    # --- usage ----------------------------------------------------------------------------------

    def charge_line(self, effect: RunAgent, effects: int, steps: int, cost: int) -> None:
        lines = [self.by_agent.setdefault(effect.agent_id, [0, 0, 0])]
        if effect.member is not None:
            lines.append(self.by_member.setdefault(effect.member, [0, 0, 0]))
        for line in lines:
            line[0] += effects
            line[1] += steps
            line[2] += cost

    def charge_agent(self, event: EffectSucceeded | EffectFailed) -> None:
        effect = self.agent_effects.get(event.idempotency_key)
        if effect is not None and event.usage is not None:
            self.charge_line(effect, 0, event.usage.steps, event.usage.cost_minor_units)


_RESPONSES = (Ok, Fail, Unknown, Hang, HeartbeatTimeout)


def _stalled(effect: CallTool | RunAgent | RunTeam, r: HeartbeatTimeout, now: int) -> Response:
    """What a host reports for work that stalled after its last heartbeat."""
    if effect.heartbeat_timeout_ms is None:
        return Hang()  # nothing watches it
    details = effect.heartbeat_details if r.details is None else r.details
    after = effect.heartbeat_timeout_ms
    message = f"no heartbeat within {after} ms"
    return Fail(HEARTBEAT_TIMEOUT, message, delay_ms=r.after_ms + after, details=details)


def _copy(value: Any, what: str = "a value") -> Any:
    """A fresh copy, as a JSON host would see it: handlers never share objects with the core."""
    try:
        check_data(value, "$", what)
    except DataError as exc:
        raise SimulationError(f"{what} is not flowcore data: {exc}") from None
    return msgspec.json.decode(msgspec.json.encode(value))
