"""What ``explore`` answers: ``Exploration`` (the figures and the violations),
``Violation`` (the shortest path to one, as events, a log and text) and
``Progress`` (handed to a progress callback).

This module must never do I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypeAlias

import attrs

from ..decision.wire import Event
from ..language.spec import Flow
from ..log.records import Record, encode_records
from ..testkit.simulator import RunHistory, drive
from .world import describe_effect, describe_event

__all__ = ["Exploration", "Progress", "Stop", "Violation"]


@attrs.frozen
class Violation:
    """An invariant that does not hold, with the shortest event sequence to it.

    ``invariant`` is its name (a built-in one, ``settles-within``,
    ``dead-end``, or the name of the caller's predicate), ``message`` what
    went wrong; ``events`` start from ``start(flow, input, **start)``.
    ``history()`` drives them (``drive``); ``log()`` gives the run's log
    records (``flowcore replay`` replays them; ``ndjson()`` as bytes);
    ``describe()`` a readable trajectory.
    """

    invariant: str
    message: str
    events: tuple[Event, ...]
    flow: Flow = attrs.field(repr=False)
    input: Any = attrs.field(repr=False)
    start: Mapping[str, Any] = attrs.field(repr=False, factory=dict)

    def history(self) -> RunHistory:
        return drive(self.flow, self.input, self.events, **self.start)

    def log(self) -> tuple[Record, ...]:
        return self.history().log()

    def ndjson(self) -> bytes:
        return encode_records(self.log())

    def describe(self) -> str:
        h = self.history()
        lines = [
            f"{self.invariant}: {self.message}",
            f"after {len(self.events)} event{'s' if len(self.events) != 1 else ''} "
            f"(flow {self.flow.id} v{self.flow.version}, run {h.run_id}):",
        ]
        for i, turn in enumerate(h.turns):
            if turn.event is None:
                head = "start" if i == 0 else "continued as new"
                lines.append(f"  {head:>4}  t={turn.state.now_ms}")
            else:
                n = sum(1 for t in h.turns[1 : i + 1] if t.event is not None)
                what = describe_event(turn.event)
                lines.append(f"  {n:>4}. t={turn.event.at_ms} {what}")
                if turn.rejected is not None:
                    lines.append(f"        rejected: {turn.rejected}")
            lines.extend(f"        -> {describe_effect(e)}" for e in turn.effects)
        return "\n".join(lines)


@attrs.frozen
class Progress:
    """How far an exploration is: handed to ``explore``'s ``progress`` callback."""

    states: int
    transitions: int
    depth: int
    frontier: int
    violations: int


Stop: TypeAlias = Literal["exhausted", "max-depth", "max-states", "max-events", "violation"]


@attrs.frozen
class Exploration:
    """What ``explore`` found.

    ``states``: distinct states; ``transitions``: events applied and accepted;
    ``explored`` = 1 + transitions (states reached, duplicates counted);
    ``revisits``: transitions that reached a state already known, so it was
    not expanded again (what deduplication saved); ``rejected``: events the
    run refused; ``reduced``: events left out by partial-order reduction;
    ``settled`` by status; ``dead_ends``: states where nothing the world can
    do moves the run; ``cut``: states not expanded because of a bound;
    ``depth``: the deepest level expanded; ``longest``: the longest path in
    events (with ``settles_within``); ``complete``: nothing was cut, so every
    reachable state was checked; ``max_steps``/``max_cost``: the most steps
    and cost any explored state had spent; ``stop``: why it ended.
    """

    states: int
    transitions: int
    revisits: int
    rejected: int
    reduced: int
    settled: Mapping[str, int]
    dead_ends: int
    cut: int
    depth: int
    longest: int | None
    complete: bool
    max_steps: int
    max_cost: int
    stop: Stop
    violations: tuple[Violation, ...]
    invariants: tuple[str, ...]

    @property
    def explored(self) -> int:
        return 1 + self.transitions

    @property
    def ok(self) -> bool:
        return not self.violations

    def _completeness(self) -> str:
        if self.complete:
            return "yes"
        if self.stop == "violation":
            return "no (stopped at a violation)"
        return f"no ({self.cut:,} states not expanded: {self.stop})"

    def summary(self) -> list[tuple[str, str]]:
        """The figures as (name, value) rows, for a table."""
        explored = self.explored
        saved = self.revisits / explored if explored else 0.0
        rows = [
            ("distinct states", f"{self.states:,}"),
            ("states explored", f"{explored:,}"),
            ("transitions", f"{self.transitions:,}"),
            ("deduplicated", f"{self.revisits:,} ({saved:.0%} of states explored)"),
            ("left out by reduction", f"{self.reduced:,}"),
            ("rejected events", f"{self.rejected:,}"),
            ("settled", ", ".join(f"{k} {v:,}" for k, v in sorted(self.settled.items())) or "0"),
            ("dead ends", f"{self.dead_ends:,}"),
            ("depth", str(self.depth)),
        ]
        if self.longest is not None:
            rows.append(("longest path", f"{self.longest} events"))
        rows += [
            ("most steps spent", str(self.max_steps)),
            ("most cost spent", str(self.max_cost)),
            ("complete", self._completeness()),
            ("invariants", ", ".join(self.invariants)),
            ("violations", str(len(self.violations))),
        ]
        return rows
