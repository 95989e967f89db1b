"""What a simulation's script is made of: the responses a handler gives
(``Ok``, ``Fail``, ``Unknown``, ``Hang``, ``HeartbeatTimeout``, or canned
``Responses``), the ``Call`` it is given (and what it may ask of its run
through it, refused with ``CallError``), the faults that change how one
target's calls are answered (``Fault``), the signals scheduled at virtual
times (``Signal``), the update requests (``Update``) and what a refused one
left (``Refusal``), and ``SimulationError`` when the script does not say how
to go on. ``simulator`` describes the simulator.

This module must never do I/O, read a clock or draw a random number.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal, Protocol, TypeAlias

import attrs

from .._errors import FlowcoreError
from ..decision.waiting import ScheduledCall, WorkPlace
from ..decision.wire import AskHuman, Effect, Usage
from ..language.spec import Flow

Spec: TypeAlias = "Flow | str | bytes | Mapping[str, Any]"


class SimulationError(FlowcoreError):
    """The script does not say how to go on (a test set-up mistake, not a flow bug)."""


class CallError(FlowcoreError):
    """What a handler asked of its run through its ``Call`` cannot be done: bad
    arguments, data flowcore cannot keep, or a request its run refuses (the
    message says which, as a host's context says it). Raised in the handler;
    one it lets through fails its work, as any exception does."""


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


class CallWorld(Protocol):
    """What a simulation offers the handlers it calls: their requests to its runs
    (``Call``'s methods check their arguments, then ask this)."""

    def schedule(
        self,
        call: Call,
        tool: str,
        input: Any,
        delay_ms: int,
        request: str,
        fields: Mapping[str, Any],
    ) -> str: ...

    def cancel_scheduled(self, call: Call, schedule_id: str) -> bool: ...

    def scheduled(self, call: Call) -> tuple[ScheduledCall, ...]: ...

    def signal(self, call: Call, run_id: str, name: str, payload: Any) -> None: ...

    def publish(self, call: Call, data: Any) -> None: ...


class _Order:
    """The order of one call's ``schedule`` requests: ``<key>#1``, ``<key>#2``..."""

    __slots__ = ("n",)

    def __init__(self) -> None:
        self.n = 0

    def next(self) -> int:
        self.n += 1
        return self.n


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

    A tool's, agent's or team's handler asks its run through the call what a
    host's handler asks through its context: ``schedule``,
    ``cancel_scheduled``, ``scheduled``, ``signal`` and ``publish``. Each is
    done at once, at ``now_ms``, before the handler's own result (which comes
    later in virtual time); a refusal raises ``CallError``. A human's call
    (``world`` None) can do none of them.
    """

    effect: Effect
    run_id: str
    key: str
    target: str
    input: Any
    n: int
    now_ms: int
    place: WorkPlace | None = None
    world: CallWorld | None = attrs.field(default=None, kw_only=True, repr=False, eq=False)
    _order: _Order = attrs.field(factory=_Order, init=False, repr=False, eq=False)

    @property
    def kind(self) -> str:
        tag = self.effect.__struct_config__.tag
        assert isinstance(tag, str)
        return tag

    @property
    def options(self) -> tuple[str, ...] | None:
        return self.effect.options if isinstance(self.effect, AskHuman) else None

    # --- what a handler asks of its run ---------------------------------------------------

    def schedule(
        self,
        tool: str,
        input: Any = None,
        *,
        delay_ms: int | None = None,
        at_ms: int | None = None,
        **fields: Any,
    ) -> str:
        """Schedule a call to ``tool`` (declared ``schedulable`` by the run's flow)
        with ``input``, after ``delay_ms`` or at ``at_ms`` (virtual epoch ms; one
        in the past is due now), neither: now; ``fields`` go to the
        ``scheduled-add-requested`` event as they are (its other fields). Returns
        the scheduled call's id: the one a host gives, derived from the request
        ``<key>#<n>`` (this call's ``n``-th ``schedule``), so the same call
        issued again under its key gets the same ids and schedules nothing twice.
        """
        world = self._world("schedule")
        if not isinstance(tool, str):
            raise CallError(f"schedule: the tool is a name (str), not {tool!r}")
        if delay_ms is not None and at_ms is not None:
            raise CallError("schedule: give delay_ms or at_ms, not both")
        for name, value in (("delay_ms", delay_ms), ("at_ms", at_ms)):
            if value is not None and (type(value) is not int or value < 0):
                raise CallError(f"schedule: {name} must be an integer >= 0, not {value!r}")
        delay = delay_ms or 0
        if at_ms is not None:
            delay = max(0, at_ms - self.now_ms)
        request = f"{self.key}#{self._order.next()}"
        return world.schedule(self, tool, input, delay, request, fields)

    def cancel_scheduled(self, schedule_id: str) -> bool:
        """Cancel a pending scheduled call of this run (its id, or the id without
        the ``<run>/`` prefix): True if it was pending; else False, and nothing is
        recorded."""
        world = self._world("cancel_scheduled")
        if not isinstance(schedule_id, str):
            raise CallError(f"cancel_scheduled: a schedule id is a str, not {schedule_id!r}")
        return world.cancel_scheduled(self, schedule_id)

    def scheduled(self) -> tuple[ScheduledCall, ...]:
        """This run's scheduled calls as they stand now, pending and finished,
        oldest due first (``flowcore.scheduled_calls``)."""
        return self._world("scheduled").scheduled(self)

    def signal(self, run_id: str, name: str, payload: Any = None) -> None:
        """Send signal ``name`` to run ``run_id`` of the simulation, this call's own
        ``run_id`` included (a name its flow or subflows wait for, as a host
        checks)."""
        world = self._world("signal")
        for what, value in (("run id", run_id), ("signal name", name)):
            if not isinstance(value, str):
                raise CallError(f"signal: the {what} is a str, not {value!r}")
        world.signal(self, run_id, name, payload)

    def publish(self, data: Any) -> None:
        """Add ``data`` (a text chunk or JSON data) to the run's progress stream,
        which the ``Trajectory`` keeps (``progress``); data flowcore cannot keep
        (not flowcore data, over 64 KiB as JSON) raises ``CallError``."""
        self._world("publish").publish(self, data)

    def _world(self, what: str) -> CallWorld:
        if self.world is None:
            raise CallError(
                f"{what}: only a tool's, agent's or team's handler can ask its run"
                f" (not the {self.kind} {self.key})"
            )
        return self.world


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


@attrs.frozen
class Update:
    """An update request sent at virtual time ``at_ms`` to the root run (or
    ``run_id``): the flow's update ``name`` with ``input``, under ``update_id``
    (None: ``u<n>`` for the n-th of the simulator's ``updates``), from
    ``principal``. As a host does: an id the run already holds is answered from
    the run and runs nothing; a refused request writes nothing (the trajectory's
    ``refused`` says why)."""

    name: str
    input: Any = None
    update_id: str | None = None
    at_ms: int = 0
    run_id: str | None = None
    principal: str | None = None


@attrs.frozen
class Refusal:
    """An update request a run refused: its id, name, the ``UpdateRefused`` code
    (``unknown-update``, ``bad-input``, ``validator``, ``limit``, ``ending``; None
    for another rejection), the reason, the run and the virtual time."""

    update_id: str
    name: str
    code: str | None
    reason: str
    run_id: str
    at_ms: int
