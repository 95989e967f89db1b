"""What ``explore`` checks: the paths to a state and the violations found on
them, the built-in invariants over a transition (unique keys, settlement's
report, the budget, update replies), the caller's own (``Invariant``, over a ``Point``) and
liveness (every path settles within N events). ``search`` calls them at every
transition.

This module must never do I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeAlias

import immutables

from ..decision.keys import INCARNATION, KeyRole, incarnation_base, parse_key
from ..decision.state import State
from ..decision.update_wire import UpdateReply
from ..decision.updates import updates_of
from ..decision.waiting import waiting_for
from ..decision.wire import (
    CallTool,
    Effect,
    EffectOutcomeUnknown,
    Event,
    RunAgent,
    RunSubflow,
    RunTeam,
    Settled,
    SignalRun,
    Sleep,
    UpdateRequested,
)
from ..language.spec import Flow
from ..testkit.checks import same_but_budget
from ..testkit.simulator import drive
from .graph import Point, _Node
from .result import Violation
from .world import describe_effect

_WORK_EFFECTS = (CallTool, RunAgent, RunTeam, RunSubflow, SignalRun)


class _Broken(Exception):
    """A built-in invariant does not hold (internal)."""

    def __init__(self, invariant: str, message: str) -> None:
        super().__init__(message)
        self.invariant = invariant
        self.message = message


Invariant: TypeAlias = Callable[[Point], Any]


def _name(inv: Invariant) -> str:
    return str(getattr(inv, "name", None) or getattr(inv, "__name__", None) or repr(inv))


class _Checks:
    """The paths, the violations and the checks of one exploration (``_Explorer``'s)."""

    flow: Flow
    input: Any
    start_args: dict[str, Any]
    invariants: tuple[Invariant, ...]
    nodes: list[_Node]
    edges: list[tuple[int, int, Event]] | None
    settles_within: int | None
    violations: list[Violation]
    broken: set[str]
    dead: list[int]
    max_violations: int

    def chain(self, index: int) -> list[_Node]:
        out = []
        while index >= 0:
            node = self.nodes[index]
            out.append(node)
            index = node.parent
        out.reverse()
        return out

    def events_to(self, index: int) -> tuple[Event, ...]:
        return tuple(n.event for n in self.chain(index) if n.event is not None)

    def effects_to(self, index: int) -> tuple[Effect, ...]:
        return tuple(e for n in self.chain(index) for e in n.effects)

    def violation(self, invariant: str, message: str, events: tuple[Event, ...]) -> None:
        if invariant in self.broken:
            return  # the shortest path to each is enough
        self.broken.add(invariant)
        self.violations.append(
            Violation(invariant, message, events, self.flow, self.input, self.start_args)
        )

    def done(self) -> bool:
        return len(self.violations) >= self.max_violations

    def check_keys(
        self,
        event: Event | None,
        effects: tuple[Effect, ...],
        mine: int,
        state: State,
        keys: immutables.Map[str, Effect],
    ) -> immutables.Map[str, Effect]:
        """Keys carry the run id and are never emitted twice, but for a safe call
        re-issued after its unknown outcome and the delay timer of a scheduled
        call a new incarnation arms again (as ``check_keys``)."""
        prefix = state.run_id + "/"
        for i, effect in enumerate(effects):
            if isinstance(effect, Settled):
                continue
            key = effect.idempotency_key
            if not key.startswith(prefix):
                raise _Broken("unique-keys", f"key {key!r} does not start with {prefix!r}")
            first = keys.get(key)
            if first is not None:
                reissue = (
                    i < mine
                    and isinstance(event, EffectOutcomeUnknown)
                    and event.idempotency_key == key
                    and isinstance(effect, CallTool | RunSubflow | SignalRun)
                    and same_but_budget(effect, first)
                ) or (
                    i >= mine  # the first decision of a new incarnation
                    and isinstance(effect, Sleep)
                    and effect == first
                    and parse_key(key, state.run_id).role is KeyRole.SCHEDULE_DELAY
                )
                if not reissue:
                    raise _Broken(
                        "unique-keys",
                        f"key {key!r} emitted again as {describe_effect(effect)}; first "
                        f"as {describe_effect(first)}",
                    )
            keys = keys.set(key, effect)
        return keys

    def check_report(self, state: State, keys: immutables.Map[str, Effect]) -> None:
        """At settlement nothing is pending and every work effect of the
        incarnation is in the report."""
        settled = state.settled
        assert settled is not None
        waiting = state.waiting
        if waiting.pending or waiting.in_flight:
            raise _Broken(
                "settlement",
                f"settled with {len(waiting.pending)} keys pending and "
                f"{waiting.in_flight} in flight",
            )
        report = {r.idempotency_key for r in settled.report}
        incarnation = state.tree.incarnation
        base = incarnation_base(state.run_id, incarnation) + "/"
        later = f"{state.run_id}/{INCARNATION}"
        for key, effect in keys.items():
            if not isinstance(effect, _WORK_EFFECTS) or not key.startswith(base):
                continue
            if incarnation == 1 and key.startswith(later):
                continue
            if key not in report:
                raise _Broken(
                    "settlement", f"work {key} ({describe_effect(effect)}) is not in the report"
                )

    def check_budget(self, before: State | None, effects: tuple[Effect, ...], state: State) -> None:
        """Never negative, never above the limits unless the run settles
        budget-exhausted; no work at or after the wall-clock deadline."""
        led = state.ledger
        if led.used_steps < 0 or led.used_cost < 0:
            raise _Broken("budget", f"negative usage: {led}")
        same = before is not None and before.tree.incarnation == state.tree.incarnation
        if same:
            assert before is not None
            old = before.ledger
            if (old.steps, old.cost, old.wall_clock_ms) != (led.steps, led.cost, led.wall_clock_ms):
                raise _Broken("budget", f"the budget's limits changed from {old} to {led}")
        wall = led.wall_clock_ms
        deadline = None if wall is None else state.run.started_ms + wall
        for effect in effects:
            if not isinstance(effect, _WORK_EFFECTS):
                continue
            if same and deadline is not None and state.now_ms >= deadline:
                raise _Broken(
                    "budget",
                    f"{describe_effect(effect)} emitted at {state.now_ms}, at or after the "
                    f"wall-clock deadline {deadline}",
                )
            if isinstance(effect, RunAgent | RunSubflow):
                br = effect.budget_remaining
                for name, value, limit in (
                    ("steps", br.steps, led.steps),
                    ("cost", br.cost_minor_units, led.cost),
                ):
                    if value is not None and value < 0:
                        raise _Broken("budget", f"negative budgetRemaining {name} in {effect}")
                    if value is not None and limit is not None and value > limit:
                        raise _Broken(
                            "budget", f"budgetRemaining {name} {value} above the limit {limit}"
                        )
        settled = state.settled
        if settled is not None and settled.status == "budget-exhausted":
            return
        if led.steps is not None and led.used_steps > led.steps:
            raise _Broken("budget", f"{led.used_steps} steps used of {led.steps}")
        if led.cost is not None and led.used_cost > led.cost:
            raise _Broken("budget", f"cost {led.used_cost} used of {led.cost}")

    def check_updates(
        self,
        before: State | None,
        event: Event | None,
        state: State,
        replies: tuple[UpdateReply, ...],
    ) -> None:
        """Every update the run accepted gets exactly one reply, on the decision
        that ends it, saying what the state records; no reply names an update
        the run never accepted; none is running once the run has settled."""
        was = {u.update_id: u for u in updates_of(before)} if before is not None else {}
        now = {u.update_id: u for u in updates_of(state)}
        same = before is None or before.tree.incarnation == state.tree.incarnation
        asked = event.update_id if isinstance(event, UpdateRequested) else None
        answered: set[str] = set()
        for reply in replies:
            uid = reply.update_id
            if uid in answered:
                raise _Broken("updates", f"update {uid!r} got two replies in one decision")
            answered.add(uid)
            prior = was.get(uid)
            if prior is None and uid != asked:
                raise _Broken(
                    "updates", f"a reply for update {uid!r}, which the run never accepted"
                )
            if prior is not None and prior.status != "running":
                raise _Broken(
                    "updates", f"a second reply for update {uid!r}, which had ended {prior.status}"
                )
            view = now.get(uid)
            if same and view is None:
                raise _Broken("updates", f"update {uid!r} got a reply the state does not record")
            if view is not None and (view.status, view.output, view.error, view.name) != (
                reply.status,
                reply.output,
                reply.error,
                reply.name,
            ):
                raise _Broken(
                    "updates",
                    f"the reply of update {uid!r} ({reply.status}) is not what the state "
                    f"records ({view.status})",
                )
        for uid, prior in was.items():
            if prior.status != "running" or uid in answered:
                continue
            view = now.get(uid)
            if view is None and same:
                raise _Broken("updates", f"update {uid!r} is gone from the state, unanswered")
            if view is None or view.status != "running":
                raise _Broken("updates", f"update {uid!r} ended without a reply")
        for uid, view in now.items():
            if uid in was or not same:
                continue
            if uid != asked:
                raise _Broken("updates", f"update {uid!r} appeared without being requested")
            if view.status != "running" and uid not in answered:
                raise _Broken("updates", f"update {uid!r} ended without a reply")
        if state.settled is not None:
            running = sorted(uid for uid, view in now.items() if view.status == "running")
            if running:
                raise _Broken(
                    "updates",
                    f"the run settled {state.settled.status} with update(s) {running} running",
                )

    def check_user(self, point: Point) -> tuple[str, str] | None:
        for inv in self.invariants:
            name = _name(inv)
            if name in self.broken:
                continue
            try:
                verdict = inv(point)
            except AssertionError as exc:
                return name, str(exc) or f"{name} does not hold"
            except Exception as exc:  # the predicate itself failed: said as a violation
                return name, f"the invariant raised {type(exc).__name__}: {exc}"
            if verdict is False:
                doc = (getattr(inv, "__doc__", None) or "").strip().splitlines()
                return name, doc[0] if doc else f"{name} does not hold"
            if isinstance(verdict, str) and verdict:
                return name, verdict
        return None

    def liveness(self) -> int:
        """The longest path (in events) of the explored graph. Reports a path of
        ``settles_within`` events that does not settle the run, a dead end, or a
        cycle."""
        assert self.edges is not None and self.settles_within is not None
        n = len(self.nodes)
        children: list[list[tuple[int, Event]]] = [[] for _ in range(n)]
        indegree = [0] * n
        for a, b, event in self.edges:
            children[a].append((b, event))
            indegree[b] += 1
        longest = [0] * n
        via: list[tuple[int, Event] | None] = [None] * n
        order = [i for i in range(n) if indegree[i] == 0]
        head = 0
        while head < len(order):
            a = order[head]
            head += 1
            for b, event in children[a]:
                if longest[a] + 1 > longest[b]:
                    longest[b] = longest[a] + 1
                    via[b] = (a, event)
                indegree[b] -= 1
                if indegree[b] == 0:
                    order.append(b)
        if head < n:
            stuck = next(i for i in range(n) if indegree[i] > 0)
            self.violation(
                "settles-within",
                "the run can go round a cycle of states for ever",
                self.events_to(stuck),
            )
        if self.dead:
            i = self.dead[0]
            self.violation(
                "dead-end",
                f"nothing the world may do moves the run on: it waits for {self.waiting(i)}",
                self.events_to(i),
            )
        limit = self.settles_within
        for i in order:
            if longest[i] >= limit and not self.is_settled(i):
                events: list[Event] = []
                at = i
                while (step := via[at]) is not None:
                    events.append(step[1])
                    at = step[0]
                events.reverse()
                self.violation(
                    "settles-within",
                    f"a path of {limit} events does not settle the run",
                    tuple(events[:limit]),
                )
                break
        return max(longest, default=0)

    def waiting(self, index: int) -> str:
        h = drive(self.flow, self.input, self.events_to(index), **self.start_args)
        waits = waiting_for(h.state)
        parts = [f"signal {s.signal!r} ({s.key})" for s in waits.signals]
        parts += [f"work {w.key}" for w in waits.work]
        parts += [f"question {q.key}" for q in waits.questions]
        return ", ".join(parts) or "nothing"

    def is_settled(self, index: int) -> bool:
        return any(isinstance(e, Settled) for e in self.nodes[index].effects)
