"""What a simulation's script is made of: the responses a handler gives
(``Ok``, ``Fail``, ``Unknown``, ``Hang``, ``HeartbeatTimeout``, or canned
``Responses``), the ``Call`` it is given, the faults that change how one
target's calls are answered (``Fault``), the signals scheduled at virtual
times (``Signal``), and ``SimulationError`` when the script does not say how
to go on. ``simulator`` describes the simulator.

This module must never do I/O, read a clock or draw a random number.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal, TypeAlias

import attrs

from .._errors import FlowcoreError
from ..decision.waiting import WorkPlace
from ..decision.wire import AskHuman, Effect, Usage
from ..language.spec import Flow

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


def spend_all(effect: Effect) -> Ok:
    """A response that spends everything its work was handed: ``Ok`` reporting,
    as usage, each limited amount of the effect's ``budgetRemaining`` (steps,
    cost, tokens, tool calls, turns; none for work handed no budget). For a
    ``World`` or a simulator script: members that each try to spend it all."""
    br = getattr(effect, "budget_remaining", None)
    if br is None:
        return Ok()
    return Ok(
        steps=br.steps,
        cost=br.cost_minor_units or 0,
        tokens=br.tokens or 0,
        tool_calls=br.tool_calls or 0,
        turns=br.turns or 0,
    )


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
    count). ``place``: where the work stands in its run (step, attempt,
    execution class, deadline, remaining budget; ``flowcore.work_place``), the
    fields a host's handler reads from ``flowcore_handlers.context()``.
    """

    effect: Effect
    run_id: str
    key: str
    target: str
    input: Any
    n: int
    now_ms: int
    place: WorkPlace | None = None

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
