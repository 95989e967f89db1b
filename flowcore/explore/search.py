"""Explore every ordering of what a run may be told, up to a bound.

Because a run's state is a value and ``advance`` is pure, every event a host
could report can be tried from every state. ``explore`` walks the reachable
states breadth-first, in virtual time:

* **The world** (``World``) says what may happen: the responses each tool,
  agent, team or child flow may give (the simulator's ``Ok``, ``Fail``,
  ``Unknown``, ``Hang``, ``HeartbeatTimeout``, or a plain output), the
  answers people may give, the signals, the update requests and the cancel
  that may arrive, and how late a result may come (``late_ms``). At each state
  every response to every pending piece of work, every answer, every signal not
  sent yet, every update request (while the world may make more), the cancel
  and the earliest timers are tried; a request the run refuses is no move.
* **Time** moves only when a timer fires, in due order, or when a signal or
  cancel arrives that may not come earlier; results arrive at the current
  time. With ``late_ms`` a result comes at most that long after its effect was
  emitted, so the clock cannot pass that instant while it is out (unless the
  work may hang).
* **Equal states** are found by a digest of the snapshot (``encode_state``,
  without the record of the last change) and of what the world still may do,
  so each state is expanded once.
* **Partial-order reduction**: at a state where the responses to one piece
  of work commute with every other event that could happen now (both orders
  lead to the same state, with the same effects), only those responses are
  tried; the other orders reach the same states. This is sound under the
  assumption ``specs/testing.md`` states.
* **Checks** at every transition: the built-in invariants (determinism, unique
  keys, the budget, settlement, only typed errors, a running run waits for
  something, every accepted update gets exactly one reply) and the caller's
  own predicates over a ``Point``; optionally liveness: every path settles
  within N events.

A violation comes back as the shortest event sequence that reaches it
(breadth-first), which ``drive`` replays, as a log that ``flowcore replay``
replays, and as a readable trajectory.

This module holds the search; ``graph`` what it walks (states, moves,
transitions, ``Point``) and ``invariants`` what it checks (the built-in
invariants, the caller's, liveness).

This module must never do I/O.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import immutables
import msgspec

from .._errors import EventRejected
from ..decision.interp import advance, continue_run, start
from ..decision.keys import parse_key
from ..decision.state import PendingKind, State
from ..decision.transitions import TIMERS
from ..decision.update_wire import UpdateReply
from ..decision.wire import (
    BudgetRemaining,
    CancelRequested,
    ContinueAsNew,
    Effect,
    Event,
    HumanAnswered,
    Settled,
    SignalReceived,
    Sleep,
    TimerFired,
    UpdateRequested,
    encode_effect,
)
from ..language.spec import Budget, Flow
from ..testkit.simulator import as_flow
from .determinism import DecodedOnce, same_decision
from .graph import (
    Point,
    _digest,
    _Move,
    _Node,
    _Residue,
    _Result,
    _snapshot,
    _Step,
    _Transition,
)
from .invariants import Invariant, _Broken, _Checks, _name
from .reduction import Reducible
from .result import Exploration, Progress, Stop, Violation
from .world import World, describe_effect, describe_event, hangs, response_event

__all__ = [
    "BUILT_IN",
    "Exploration",
    "Point",
    "Progress",
    "Violation",
    "World",
    "explore",
]

BUILT_IN = (
    "determinism",
    "unique-keys",
    "budget",
    "settlement",
    "typed-errors",
    "waits",
    "updates",
)
"""The invariants ``explore`` checks at every transition (``specs/testing.md`` §8)."""

_WORK_KINDS = frozenset(
    {PendingKind.WORK, PendingKind.SCHEDULED_CALL, PendingKind.CHILD, PendingKind.CANCELLING}
)
_NO_KEYS: immutables.Map[str, Effect] = immutables.Map()


# --- the explorer ---------------------------------------------------------------------------


class _Explorer(_Checks):
    """One exploration: the search over the graph of distinct states."""

    def __init__(
        self,
        flow: Flow,
        input: Any,
        world: World,
        start: dict[str, Any],
        invariants: Sequence[Invariant],
        *,
        max_depth: int,
        max_states: int,
        max_events: int | None,
        settles_within: int | None,
        reduce: bool,
        dedup: bool,
        determinism: bool,
        max_violations: int,
        progress: Callable[[Progress], None] | None,
        progress_every: int,
    ) -> None:
        self.flow = flow
        self.input = input
        self.world = world
        self.start_args = start
        self.invariants = tuple(invariants)
        self.max_depth = max_depth
        self.max_states = max_states
        self.max_events = max_events
        self.settles_within = settles_within
        self.reduce = reduce
        self.dedup = dedup
        self.determinism = determinism
        self.max_violations = max_violations
        self.progress = progress
        self.progress_every = max(1, progress_every)
        self.nodes: list[_Node] = []
        self.seen: dict[bytes, int] = {}
        # With liveness: every transition (from, to, event), for the longest paths.
        self.edges: list[tuple[int, int, Event]] | None = [] if settles_within is not None else None
        self.violations: list[Violation] = []
        self.broken: set[str] = set()
        self.transitions = self.revisits = self.rejected = self.reduced = 0
        self.dead_ends = self.cut = self.depth = 0
        self.settled: dict[str, int] = {}
        self.max_steps = self.max_cost = 0
        self.stop: Stop = "exhausted"
        self.dead: list[int] = []
        self.resumed = DecodedOnce(flow)  # the state decoded from the snapshot of the one expanded
        self.next_progress = self.progress_every
        self.reducible = Reducible(flow) if reduce else None
        if self.reducible is not None and world.may_report_steps():
            self.reducible.why_not = "the world reports steps"
        # Each (update name, input) the world may request, with the next id.
        self.update_requests = world.update_requests(flow)
        if self.reducible is not None and self.update_requests:
            # A handler runs beside the main steps and may read their results,
            # as a parallel branch reading another's would: never reduced.
            self.reducible.why_not = "update requests may arrive"

    # --- transitions --------------------------------------------------------------------

    def step(self, state: State, event: Event) -> _Step:
        """``advance``, then every incarnation that starts at once (as ``drive`` does).
        Returns the state, the effects, how many of them the event itself emitted
        and the replies of the updates it ended."""
        d = advance(state, event)
        effects = d.effects
        replies: tuple[UpdateReply, ...] = d.replies
        mine = len(effects)
        new = d.state
        while (continued := new.tree.continued) is not None:
            at = max(event.at_ms, new.now_ms)
            c = continue_run(self.flow, continued, new.run_id, at, new.run.depth)
            effects = (*effects, *c.effects)
            replies = (*replies, *c.replies)
            new = c.state
        return new, effects, mine, replies

    def try_move(self, state: State, move: _Move) -> _Result:
        """The transition, None when the event is rejected, or the message of an
        error that is not a typed one."""
        try:
            return self.step(state, move.event)
        except EventRejected:
            return None
        except Exception as exc:  # not a typed error: a violation of its own
            return f"advance raised {type(exc).__name__}: {exc}"

    def residue_after(self, residue: _Residue, move: _Move | None, state: State) -> _Residue:
        signals, cancelled, updates = residue.signals, residue.cancelled, residue.updates
        if move is not None:
            if move.signal >= 0:
                signals |= 1 << move.signal
            elif isinstance(move.event, CancelRequested):
                cancelled = True
            elif isinstance(move.event, UpdateRequested):
                updates += 1
        emitted = residue.emitted
        if self.world.late_ms is not None:
            pending = state.waiting.pending
            known = {k: at for k, at in emitted if k in pending}
            for key, entry in pending.items():
                if entry.kind in _WORK_KINDS and key not in known:
                    known[key] = state.now_ms
            emitted = tuple(sorted(known.items()))
        if (signals, cancelled, emitted, updates) == (
            residue.signals,
            residue.cancelled,
            residue.emitted,
            residue.updates,
        ):
            return residue
        return _Residue(signals, cancelled, emitted, updates)

    def enabled(self, state: State, residue: _Residue) -> list[_Move]:
        """Every move the world may make now, in a fixed order."""
        world = self.world
        now = state.now_ms
        out: list[_Move] = []
        timers: list[tuple[int, str]] = []
        for key, entry in sorted(state.waiting.pending.items()):
            kind = entry.kind
            if kind in TIMERS:
                sent = entry.sent
                assert isinstance(sent, Sleep)
                timers.append((sent.until_ms, key))
            elif kind in _WORK_KINDS:
                for r in world.responses(entry):
                    ev = response_event(key, entry, r, now)
                    if ev is not None:
                        out.append(_Move(key, ev))
            elif kind is PendingKind.QUESTION:
                step = parse_key(key, state.run_id).step or ""
                for answer in world.answers(step, getattr(entry.sent, "options", None)):
                    out.append(
                        _Move("", HumanAnswered(idempotency_key=key, answer=answer, at_ms=now))
                    )
        # The clock may not pass the instant a result must have come by.
        limit: int | None = None
        if world.late_ms is not None:
            for key, at in residue.emitted:
                out_there = state.waiting.pending.get(key)
                if out_there is not None and not hangs(world, out_there):
                    due = at + world.late_ms
                    limit = due if limit is None else min(limit, due)
        earliest = min((due for due, _ in timers), default=None)

        def may_come_at(t: int) -> bool:
            if t <= now:
                return True
            if limit is not None and t > limit:
                return False
            return earliest is None or t <= earliest

        for i, sig in enumerate(world.signals):
            if residue.signals & (1 << i):
                continue
            at = max(now, sig.at_ms)
            if may_come_at(at):
                ev = SignalReceived(signal=sig.name, payload=sig.payload, key=sig.key, at_ms=at)
                out.append(_Move("", ev, i))
        if residue.updates < world.updates:
            uid = f"u{residue.updates + 1}"
            for name, value in self.update_requests:
                request = UpdateRequested(update_id=uid, name=name, input=value, at_ms=now)
                out.append(_Move("", request))
        if world.cancel_at_ms is not None and not residue.cancelled:
            at = max(now, world.cancel_at_ms)
            if may_come_at(at):
                out.append(_Move("", CancelRequested(reason="cancel", at_ms=at)))
        if earliest is not None and may_come_at(earliest):
            at = max(now, earliest)
            out.extend(
                _Move("", TimerFired(idempotency_key=key, at_ms=at))
                for due, key in timers
                if due == earliest
            )
        return out

    # --- checks -------------------------------------------------------------------------

    def check(
        self, tr: _Transition, keys: immutables.Map[str, Effect]
    ) -> immutables.Map[str, Effect]:
        """The built-in invariants over one transition; returns the keys emitted so far."""
        before, event, state, effects = tr.before, tr.event, tr.state, tr.effects
        if before is not None and event is not None:
            if state.now_ms < before.now_ms:
                raise _Broken(
                    "settlement", f"the clock went back from {before.now_ms} to {state.now_ms}"
                )
            if self.determinism:
                assert tr.before_data is not None
                resumed = self.resumed(tr.before_data)
                same_decision(self.step, resumed, event, effects, tr.data, tr.replies)
        keys = self.check_keys(event, effects, tr.mine, state, keys)
        self.check_budget(before, effects, state)
        if self.flow.updates:
            self.check_updates(before, event, state, tr.replies)
        settled = state.settled
        if any(isinstance(e, Settled) for e in effects):
            # Alone in its decision: the event's own, or the start of an
            # incarnation the event's continue-as-new began.
            alone = effects[-1] == settled and (
                len(effects) == 1 or isinstance(effects[-2], ContinueAsNew)
            )
            if not alone:
                shown = [describe_effect(e) for e in effects]
                raise _Broken("settlement", f"settled must be alone in its decision: {shown}")
            assert settled is not None
            if state.status != settled.status:
                raise _Broken("settlement", "the state does not record the settled it emitted")
            self.check_report(state, keys)
            lates: list[Event] = [
                CancelRequested(reason="after", at_ms=state.now_ms),
                SignalReceived(signal="after-settled", at_ms=state.now_ms),
            ]
            for name in sorted(self.flow.updates)[:1]:
                lates.append(
                    UpdateRequested(update_id="after-settled", name=name, at_ms=state.now_ms)
                )
            for late in lates:
                try:
                    advance(state, late)
                except EventRejected:
                    continue
                raise _Broken("settlement", f"{describe_event(late)} accepted after settlement")
        elif settled is not None or state.status != "running":
            raise _Broken("settlement", f"status {state.status} without a settled effect")
        else:
            waiting = state.waiting
            if not waiting.pending and waiting.queue_head == waiting.queue_tail:
                raise _Broken("waits", "the run is running but waits for nothing: stuck")
        return keys

    def checked(
        self, parent: int, tr: _Transition, keys: immutables.Map[str, Effect], depth: int
    ) -> immutables.Map[str, Effect]:
        """Every invariant over one transition (the start's: ``event`` None)."""
        path: tuple[Event, ...] | None = None
        event = tr.event

        def to_here() -> tuple[Event, ...]:
            events = self.events_to(parent)
            return (*events, event) if event is not None else events

        try:
            keys = self.check(tr, keys)
        except _Broken as exc:
            path = to_here()
            self.violation(exc.invariant, exc.message, path)
        if self.invariants:
            point = Point(self, parent, tr.before, event, tr.effects, tr.state, depth, tr.replies)
            found = self.check_user(point)
            if found is not None:
                self.violation(found[0], found[1], path or to_here())
        return keys

    # --- the search ---------------------------------------------------------------------

    def run(self) -> Exploration:
        flow = self.flow
        d = start(flow, self.input, **self.start_args)
        state, effects = d.state, d.effects
        while (continued := state.tree.continued) is not None:
            c = continue_run(flow, continued, state.run_id, state.now_ms, state.run.depth)
            state, effects = c.state, (*effects, *c.effects)
        residue = self.residue_after(_Residue(), None, state)
        data, digest = _digest(state, residue)
        start_tr = _Transition(None, None, None, state, effects, len(effects), data)
        keys = self.checked(-1, start_tr, _NO_KEYS, 0)
        self.nodes.append(_Node(-1, None, effects, 0, state, residue, keys))
        self.seen[digest] = 0
        self.account(state)
        frontier: deque[tuple[int, bytes]] = deque([(0, data)])
        while frontier and not self.done():
            index, data = frontier.popleft()
            node = self.nodes[index]
            here = node.state
            assert here is not None
            node.state = None  # only the path to it is kept
            state = here
            if state.settled is not None:
                continue
            if node.depth >= self.max_depth:
                self.cut += 1
                self.stop = "max-depth"
                continue
            self.depth = max(self.depth, node.depth + 1)
            self.expand(index, node, state, data, frontier)
            if self.progress is not None and len(self.nodes) >= self.next_progress:
                self.next_progress = len(self.nodes) + self.progress_every
                self.report_progress(len(frontier))
            if len(self.nodes) >= self.max_states or (
                self.max_events is not None and self.transitions >= self.max_events
            ):
                if frontier:
                    self.cut += len(frontier)
                    self.stop = "max-states" if len(self.nodes) >= self.max_states else "max-events"
                break
        if self.done():
            self.stop = "violation"
        longest = self.liveness() if self.edges is not None else None
        if self.progress is not None:
            self.report_progress(0)
        named = tuple(_name(i) for i in self.invariants)
        live = ("settles-within",) if self.settles_within is not None else ()
        return Exploration(
            states=len(self.nodes),
            transitions=self.transitions,
            revisits=self.revisits,
            rejected=self.rejected,
            reduced=self.reduced,
            settled=dict(sorted(self.settled.items())),
            dead_ends=self.dead_ends,
            cut=self.cut,
            depth=self.depth,
            longest=longest,
            complete=self.cut == 0 and not self.violations,
            max_steps=self.max_steps,
            max_cost=self.max_cost,
            stop=self.stop,
            violations=tuple(self.violations),
            invariants=(*BUILT_IN, *named, *live),
        )

    def report_progress(self, frontier: int) -> None:
        assert self.progress is not None
        self.progress(
            Progress(
                states=len(self.nodes),
                transitions=self.transitions,
                depth=self.depth,
                frontier=frontier,
                violations=len(self.violations),
            )
        )

    def account(self, state: State) -> None:
        led = state.ledger
        self.max_steps = max(self.max_steps, led.used_steps)
        self.max_cost = max(self.max_cost, led.used_cost)
        if state.settled is not None:
            status = state.settled.status
            self.settled[status] = self.settled.get(status, 0) + 1

    def expand(
        self,
        index: int,
        node: _Node,
        state: State,
        data: bytes,
        frontier: deque[tuple[int, bytes]],
    ) -> None:
        moves = self.enabled(state, node.residue)
        results: dict[int, _Result] = {}
        chosen: Sequence[int] = range(len(moves))
        if self.reduce and len(moves) > 1:
            chosen = self.reduced_set(node, state, moves, results)
            self.reduced += len(moves) - len(chosen)
        moved = False
        for i in chosen:
            move = moves[i]
            result = results[i] if i in results else self.try_move(state, move)
            if isinstance(result, str):
                self.violation("typed-errors", result, (*self.events_to(index), move.event))
                continue
            if result is None:
                self.rejected += 1
                if move.group:  # an answer to work the run waits for must be taken
                    self.violation(
                        "waits",
                        f"the run waits for {move.group} but rejected {describe_event(move.event)}",
                        (*self.events_to(index), move.event),
                    )
                continue
            moved = True
            self.transitions += 1
            self.arrive(index, node, state, data, move, result, frontier)
            if self.done():
                return
        if self.determinism and _snapshot(state) != data:
            self.violation(
                "determinism", "advance changed the state it was given", self.events_to(index)
            )
        elif self.determinism and self.resumed.changed(data):
            self.violation(
                "determinism",
                "advance changed the state decoded from the snapshot it was given "
                "(it no longer encodes to that snapshot)",
                self.events_to(index),
            )
        if not moved:
            self.dead_ends += 1
            self.dead.append(index)

    def arrive(
        self,
        index: int,
        node: _Node,
        state: State,
        data: bytes,
        move: _Move,
        result: _Step,
        frontier: deque[tuple[int, bytes]],
    ) -> None:
        new, effects, mine, replies = result
        event = move.event
        residue = self.residue_after(node.residue, move, new)
        new_data, digest = _digest(new, residue)
        tr = _Transition(state, data, event, new, effects, mine, new_data, replies)
        keys = self.checked(index, tr, node.keys, node.depth + 1)
        known = self.seen.get(digest) if self.dedup else None
        if known is not None:
            self.revisits += 1
            if self.edges is not None:
                self.edges.append((index, known, event))
            return
        self.nodes.append(_Node(index, event, effects, node.depth + 1, new, residue, keys))
        number = len(self.nodes) - 1
        if self.dedup:
            self.seen[digest] = number
        if self.edges is not None:
            self.edges.append((index, number, event))
        self.account(new)
        frontier.append((number, new_data))

    # --- partial-order reduction --------------------------------------------------------

    def reduced_set(
        self,
        node: _Node,
        state: State,
        moves: list[_Move],
        results: dict[int, _Result],
    ) -> Sequence[int]:
        """The moves to try: the responses to one piece of work, when each of them
        commutes with every other move possible now; else every move."""
        groups: dict[str, list[int]] = {}
        for i, move in enumerate(moves):
            if move.group:
                groups.setdefault(move.group, []).append(i)
        if not groups or (len(groups) == 1 and len(moves) == len(next(iter(groups.values())))):
            return range(len(moves))
        pending = state.waiting.pending

        def result(i: int) -> _Result:
            if i not in results:
                results[i] = self.try_move(state, moves[i])
            return results[i]

        assert self.reducible is not None
        cancel_left = self.world.cancel_at_ms is not None and not node.residue.cancelled
        for group, members in groups.items():
            entry = pending[group]
            if hangs(self.world, entry):
                continue  # it may never be answered: paths without its answer differ
            if not self.reducible.may_commit(state, entry, cancel_left):
                continue
            others = [i for i in range(len(moves)) if i not in members]
            if not self.commutes(node.residue, moves, members, others, result):
                continue
            # One answer at least must lead somewhere new, or a cycle could put
            # the other moves off for ever (the reduction's proviso).
            for i in members:
                r = result(i)
                assert isinstance(r, tuple)
                if (
                    _digest(r[0], self.residue_after(node.residue, moves[i], r[0]))[1]
                    not in self.seen
                ):
                    return members
        return range(len(moves))

    def commutes(
        self,
        residue: _Residue,
        moves: list[_Move],
        members: list[int],
        others: list[int],
        result: Callable[[int], _Result],
    ) -> bool:
        """Each member and each other move stay possible after one another, and
        in either order reach the same state with the same effects."""
        after: dict[int, list[_Move]] = {}  # the moves possible after move i

        def possible_after(i: int, r: _Step) -> list[_Move]:
            if i not in after:
                after[i] = self.enabled(r[0], self.residue_after(residue, moves[i], r[0]))
            return after[i]

        for i in members:
            a = result(i)
            if not isinstance(a, tuple):
                return False
            for j in others:
                b = result(j)
                if not isinstance(b, tuple):
                    return False
                # Accepted is not enough: the world must still make the move (an
                # answer after a cancel is a late result no world sends).
                if moves[j] not in possible_after(i, a) or moves[i] not in possible_after(j, b):
                    return False
                ab = self.try_move(a[0], moves[j])
                ba = self.try_move(b[0], moves[i])
                if not isinstance(ab, tuple) or not isinstance(ba, tuple):
                    return False
                r_a = self.residue_after(residue, moves[i], a[0])
                r_b = self.residue_after(residue, moves[j], b[0])
                r_ab = self.residue_after(r_a, moves[j], ab[0])
                r_ba = self.residue_after(r_b, moves[i], ba[0])
                if _digest(ab[0], r_ab)[1] != _digest(ba[0], r_ba)[1]:
                    return False
                one = sorted(encode_effect(e) for e in (*a[1], *ab[1]))
                two = sorted(encode_effect(e) for e in (*b[1], *ba[1]))
                if one != two or sorted(map(_encoded, (*a[3], *ab[3]))) != sorted(
                    map(_encoded, (*b[3], *ba[3]))
                ):
                    return False
        return True


def _encoded(reply: UpdateReply) -> bytes:
    return msgspec.msgpack.encode(reply)


def explore(
    flow: Flow | str | bytes | Mapping[str, Any],
    input: Any = None,
    world: World | None = None,
    *,
    invariants: Iterable[Invariant] = (),
    max_depth: int = 40,
    max_states: int = 200_000,
    max_events: int | None = None,
    settles_within: int | None = None,
    reduce: bool = True,
    dedup: bool = True,
    determinism: bool = True,
    max_violations: int = 1,
    progress: Callable[[Progress], None] | None = None,
    progress_every: int = 1000,
    run_id: str = "r",
    now_ms: int = 0,
    budget: Budget | BudgetRemaining | None = None,
    depth: int = 0,
    metadata: Mapping[str, Any] | None = None,
) -> Exploration:
    """Explore every ordering of what ``world`` may report to a run of ``flow``.

    Breadth-first over distinct states, up to ``max_depth`` events per path,
    ``max_states`` distinct states and ``max_events`` transitions in all.
    Checks the built-in invariants (``BUILT_IN``) and each of ``invariants``
    (callables taking a ``Point``, returning None or True when it holds,
    False or a message when it does not, or raising ``AssertionError``) at
    every transition; with ``settles_within``, also that every path settles
    within that many events (``max_depth`` is raised to reach it) and that no
    state is a dead end. Stops after ``max_violations`` violations (the
    shortest path to each invariant broken). ``reduce``: partial-order
    reduction; ``dedup``: identify equal states (both on by default; off for
    comparison); ``determinism``: re-apply every event to the state decoded
    from its snapshot, decoded once per state (``determinism.DecodedOnce``;
    the check about doubles the cost). ``run_id``, ``now_ms``,
    ``budget``, ``depth`` and ``metadata`` go to ``start``.
    """
    f = as_flow(flow)
    if settles_within is not None:
        if settles_within < 1:
            raise ValueError(f"settles_within must be at least 1, got {settles_within}")
        max_depth = max(max_depth, settles_within)
    if max_depth < 0:
        raise ValueError(f"max_depth must be at least 0, got {max_depth}")
    if max_states < 1:
        raise ValueError(f"max_states must be at least 1, got {max_states}")
    if max_violations < 1:
        raise ValueError(f"max_violations must be at least 1, got {max_violations}")
    the_world = world if world is not None else World()
    unknown = sorted(set(the_world.update_inputs or ()) - set(f.updates))
    if unknown:
        declared = ", ".join(sorted(f.updates)) or "none"
        raise ValueError(
            f"World.update_inputs names updates flow {f.id!r} does not declare: "
            f"{', '.join(unknown)} (it declares: {declared})"
        )
    start_args: dict[str, Any] = {"run_id": run_id, "now_ms": now_ms, "depth": depth}
    if budget is not None:
        start_args["budget"] = budget
    if metadata is not None:
        start_args["metadata"] = dict(metadata)
    explorer = _Explorer(
        f,
        input,
        the_world,
        start_args,
        tuple(invariants),
        max_depth=max_depth,
        max_states=max_states,
        max_events=max_events,
        settles_within=settles_within,
        reduce=reduce,
        dedup=dedup,
        determinism=determinism,
        max_violations=max_violations,
        progress=progress,
        progress_every=progress_every,
    )
    return explorer.run()
