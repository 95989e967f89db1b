"""What a simulation leaves: one run's history (``RunHistory``, its ``Turn``s
and its log), ``drive`` (a run fed a fixed list of events), and the
``Trajectory`` of a simulation (every effect and event in order, the logs,
usage, the final status, the progress its handlers published). ``simulator``
describes the simulator.

This module must never do I/O, read a clock or draw a random number.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal, TypeAlias

import attrs
import msgspec

from .._errors import EventRejected
from ..decision.interp import Decision, advance, continue_run, start
from ..decision.queries import query
from ..decision.snapshot import encode_state
from ..decision.state import ScheduledAnswer, State
from ..decision.update_wire import UpdateReply
from ..decision.wire import (
    BudgetRemaining,
    Effect,
    ErrorInfo,
    Event,
    Settled,
    effect_to_wire,
    event_to_wire,
)
from ..language.spec import Budget, Flow, parse_flow
from ..log.records import Record, Recorder
from .script import Refusal, Spec

# --- run histories ------------------------------------------------------------------------


class Turn(msgspec.Struct, frozen=True, gc=False):
    """One decision of a run: ``start`` (``event`` None) or one reported event.

    A rejected event has ``rejected`` (the reason), no effects, and ``state``
    is the unchanged state. In paranoid mode ``before`` is the snapshot of the
    state the event was given to and ``input_after`` the snapshot of that same
    state object after ``advance`` returned or raised: they must be equal.
    ``scheduled``: what a scheduled-call event from outside answered
    (``Decision.scheduled``); ``replies``: the updates the decision ended
    (``Decision.replies``). Not tracked by the garbage collector
    (``gc=False``): a turn is built from values that never refer back to it.
    """

    event: Event | None
    effects: tuple[Effect, ...]
    state: State
    rejected: str | None = None
    before: bytes | None = None
    input_after: bytes | None = None
    scheduled: ScheduledAnswer | None = None
    replies: tuple[UpdateReply, ...] = ()


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
    # Paranoid mode's snapshot of each turn's state given to ``advance``, by
    # the turn's index (with the state, so that a turn replaced since is not
    # taken for it): ``check_determinism`` compares against it instead of
    # encoding the state again (``snapshot``).
    _snapshots: dict[int, tuple[State, bytes]] = attrs.field(
        factory=dict, init=False, repr=False, eq=False
    )

    @property
    def state(self) -> State:
        return self.turns[-1].state

    def events(self) -> list[Event]:
        """Every event reported to the run, accepted or not, in order."""
        return [t.event for t in self.turns if t.event is not None]

    def effects(self) -> list[Effect]:
        return [e for t in self.turns for e in t.effects]

    def replies(self) -> list[UpdateReply]:
        """Every update reply the run's decisions gave, in order."""
        return [r for t in self.turns for r in t.replies]

    def record(self, event: Event, paranoid: bool = False, keep_rejected: bool = True) -> Turn:
        """Report ``event`` to the run's current state and append the turn.

        When the run continues as new, the next incarnation starts at once, as
        every host starts it: a turn without an event follows (``continued``).
        ``keep_rejected=False``: a rejected event's turn is returned, not kept
        (a request a host refuses leaves nothing in the run).
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
            turn = Turn(event, d.effects, d.state, None, before, after, d.scheduled, d.replies)
        if after is not None:
            self._snapshots[len(self.turns) - 1] = (state, after)
        if turn.rejected is not None and not keep_rejected:
            return turn
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
            self.turns.append(Turn(None, d.effects, d.state, replies=d.replies))


def snapshot(history: RunHistory, i: int) -> bytes:
    """The snapshot bytes of turn ``i``'s state: the one paranoid mode took
    after ``advance`` was given that state (here or at an earlier turn that
    holds the same state: a rejected event keeps it), or else encoded now."""
    turns = history.turns
    state = turns[i].state
    while i >= 0 and turns[i].state is state:
        taken = history._snapshots.get(i)
        if taken is not None and taken[0] is state:
            return taken[1]
        i -= 1
    return encode_state(state)


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


@attrs.frozen
class ProgressItem:
    """One item a handler published to its run's progress stream (``Call.publish``).

    ``index`` counts the run's items from 0, in the order they were published;
    ``key`` is the work's idempotency key, ``step`` its step (None for a
    scheduled call), ``at_ms`` the virtual time, ``data`` a fresh copy.
    """

    index: int
    key: str
    step: str | None
    at_ms: int
    data: Any


Stop: TypeAlias = Literal["settled", "idle", "max-events", "horizon"]


@attrs.frozen
class Trajectory:
    """The outcome of a simulation.

    ``status`` is the root run's status (``running`` if it never settled:
    see ``stop`` for why the simulation ended: ``idle`` means nothing more
    was due, e.g. a signal nobody sends). ``entries`` lists every effect and
    event of every run in order; ``log`` holds every run's log records, in
    the order they were written; ``histories`` each run's turns;
    ``progress`` each run's published items, in order (``progress_of``);
    ``refused`` the update requests a run refused (``Refusal``), in order.
    The root run's update replies are ``replies`` (``reply(id)`` finds one);
    ``query(name, args)`` answers one of the flow's queries.
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
    progress: Mapping[str, tuple[ProgressItem, ...]] = attrs.field(factory=dict)
    refused: tuple[Refusal, ...] = ()

    @property
    def replies(self) -> tuple[UpdateReply, ...]:
        """The root run's update replies, in the order its decisions gave them."""
        return self.replies_of()

    def replies_of(self, run_id: str | None = None) -> tuple[UpdateReply, ...]:
        """One run's update replies (the root's by default), in order."""
        return tuple(self.histories[self.run_id if run_id is None else run_id].replies())

    def reply(self, update_id: str, run_id: str | None = None) -> UpdateReply | None:
        """The reply to update ``update_id`` (of the root run by default); None
        while it runs, or when the run never accepted it (see ``refused``).
        Within an incarnation an id is answered once; after a continue-as-new
        the same id may be taken again: the last reply is the one returned."""
        found = [r for r in self.replies_of(run_id) if r.update_id == update_id]
        return found[-1] if found else None

    def query(
        self, name: str, args: Any = None, *, at_ms: int | None = None, run_id: str | None = None
    ) -> Any:
        """Answer the flow's query ``name`` with ``args`` (``flowcore.query``) from
        the root run's state (or ``run_id``'s) as it ended, or as it was at virtual
        time ``at_ms`` (after every decision at or before it). Raises
        ``QueryError`` as ``flowcore.query`` does."""
        h = self.histories[self.run_id if run_id is None else run_id]
        state = h.turns[0].state
        for turn in h.turns:
            at = turn.state.now_ms if turn.event is None else turn.event.at_ms
            if at_ms is not None and at > at_ms:
                break
            if turn.rejected is None:
                state = turn.state
        return query(state, name, args)

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

    def progress_of(self, run_id: str | None = None) -> tuple[ProgressItem, ...]:
        """One run's progress stream (the root's by default), oldest first."""
        return self.progress.get(self.run_id if run_id is None else run_id, ())

    def describe(self) -> str:
        """Every entry, one per line, then the root run's update replies and the
        refused update requests: for assertion messages."""
        lines = [str(e) for e in self.entries]
        for reply in self.replies:
            said = (
                msgspec.json.encode(reply.output).decode()
                if reply.error is None
                else f"{reply.error.type} ({reply.error.message})"
            )
            lines.append(f"reply {reply.update_id} ({reply.name}) {reply.status}: {said}")
        for refusal in self.refused:
            lines.append(
                f"refused {refusal.update_id} ({refusal.name}) at t={refusal.at_ms}: "
                f"{refusal.code}: {refusal.reason}"
            )
        lines.append(f"stop: {self.stop} at t={self.end_ms}; status {self.status}")
        return "\n".join(lines)
