"""What the world may do to a run, for ``explore``: ``World``, and the events
that report its responses; one-line descriptions of effects and events.

This module must never do I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeAlias

import attrs
import msgspec

from ..decision.state import Pending
from ..decision.transitions import HEARTBEAT_TIMEOUT
from ..decision.wire import (
    Effect,
    EffectFailed,
    EffectOutcomeUnknown,
    EffectSucceeded,
    ErrorInfo,
    Event,
    RunSubflow,
    Settled,
    SubflowSettled,
    Usage,
    effect_to_wire,
    event_to_wire,
)
from ..language.spec import Flow
from ..testkit.simulator import Fail, Hang, HeartbeatTimeout, Ok, Signal, Unknown

__all__ = ["Response", "World", "describe_effect", "describe_event", "hangs", "response_event"]

Response: TypeAlias = Ok | Fail | Unknown | Hang | HeartbeatTimeout


# --- the world ------------------------------------------------------------------------------


def _response(value: Any, where: str) -> Response | Callable[[Effect], Any]:
    if isinstance(value, Ok | Fail | Unknown | Hang | HeartbeatTimeout):
        return value
    if callable(value):
        return value  # type: ignore[no-any-return]
    return Ok(value)


def _responses(value: Any, where: str) -> tuple[Any, ...]:
    items = list(value) if isinstance(value, list | tuple) else [value]
    if not items:
        raise ValueError(f"World: {where} lists no response (use [Hang()] for none)")
    return tuple(_response(v, where) for v in items)


def _response_map(name: str, value: Any) -> dict[str, tuple[Any, ...]]:
    if not isinstance(value, Mapping):
        raise TypeError(f"World.{name} must map an id to responses, got {type(value).__name__}")
    return {str(k): _responses(v, f"{name}[{k!r}]") for k, v in value.items()}


def _tools(value: Any) -> dict[str, tuple[Any, ...]]:
    return _response_map("tools", value)


def _agents(value: Any) -> dict[str, tuple[Any, ...]]:
    return _response_map("agents", value)


def _teams(value: Any) -> dict[str, tuple[Any, ...]]:
    return _response_map("teams", value)


def _subflows(value: Any) -> dict[str, tuple[Any, ...]]:
    return _response_map("subflows", value)


def _default(value: Any) -> tuple[Any, ...]:
    return _responses(value, "default")


def _humans(value: Any) -> dict[str, tuple[str, ...]] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise TypeError(f"World.humans must map a step id (or '*') to answers, got {value!r}")
    out: dict[str, tuple[str, ...]] = {}
    for step, answers in value.items():
        items = [answers] if isinstance(answers, str) else list(answers)
        if not all(isinstance(a, str) for a in items):
            raise TypeError(f"World.humans[{step!r}]: answers are strings, got {answers!r}")
        out[str(step)] = tuple(items)
    return out


def _signals(value: Iterable[Any]) -> tuple[Signal, ...]:
    out = []
    for item in value:
        if isinstance(item, str):
            item = Signal(item)
        elif isinstance(item, tuple):
            item = Signal(*item)
        if not isinstance(item, Signal):
            raise TypeError(f"World.signals: expected Signal, a name or (name, payload): {item!r}")
        out.append(item)
    return tuple(out)


def _update_inputs(value: Any) -> dict[str, tuple[Any, ...]] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise TypeError(f"World.update_inputs must map an update name to inputs, got {value!r}")
    out: dict[str, tuple[Any, ...]] = {}
    for name, inputs in value.items():
        if not isinstance(inputs, list | tuple):
            raise TypeError(f"World.update_inputs[{name!r}]: a list of inputs, got {inputs!r}")
        out[str(name)] = tuple(inputs)
    return out


@attrs.frozen
class World:
    """What the world may do to a run, for ``explore``.

    ``tools``, ``agents``, ``teams`` and ``subflows`` map an id (or ``"*"``)
    to the responses any one call may get: ``Ok(output, steps=, cost=...)``,
    ``Fail(type, message, retryable)``, ``Unknown()``, ``Hang()`` (never
    answered: only a timer moves the step on), ``HeartbeatTimeout(details)``
    (for work with a heartbeat timeout), a plain value (``Ok`` of it), or a
    callable taking the effect and returning any of these or a list of them.
    Every call may get any of its responses, independently. Work not listed
    gets ``default``. For a child flow (``run-subflow``) ``Ok`` is a completed
    child and ``Fail`` a failed one; a detached child and a ``signal-run`` are
    answered as work is.

    ``humans`` maps a question's step id (or ``"*"``) to the answers a person
    may give; by default each of the question's options (``"yes"`` when it
    has none). ``signals`` may each arrive once, at any time from its
    ``at_ms`` on, whether or not a step waits (``Signal(name, payload,
    at_ms=0, key=None)``, a name, or ``(name, payload)``). ``cancel_at_ms``:
    a cancel may arrive at any time from then on (None: never).
    ``late_ms``: a result comes at most that long after its effect (None: any
    time, so every interleaving with timers is explored; 0: before the clock
    moves on). ``updates``: how many update requests (``update-requested``)
    may arrive in a run, at any time, with ids ``u1``, ``u2``, … in the order
    they come; each may be any declared update with any of its ``examples``
    (or the inputs ``update_inputs`` lists for it). A request the run refuses
    is not a move: it changes nothing.
    """

    tools: dict[str, tuple[Any, ...]] = attrs.field(factory=dict, converter=_tools)
    agents: dict[str, tuple[Any, ...]] = attrs.field(factory=dict, converter=_agents)
    teams: dict[str, tuple[Any, ...]] = attrs.field(factory=dict, converter=_teams)
    subflows: dict[str, tuple[Any, ...]] = attrs.field(factory=dict, converter=_subflows)
    default: tuple[Any, ...] = attrs.field(default=(Ok(),), converter=_default)
    humans: dict[str, tuple[str, ...]] | None = attrs.field(default=None, converter=_humans)
    signals: tuple[Signal, ...] = attrs.field(default=(), converter=_signals)
    cancel_at_ms: int | None = None
    late_ms: int | None = None
    updates: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    update_inputs: dict[str, tuple[Any, ...]] | None = attrs.field(
        default=None, converter=_update_inputs
    )

    def update_requests(self, flow: Flow) -> tuple[tuple[str, Any], ...]:
        """Every (update name, input) the world may request, in a fixed order: each
        declared update with each of its ``examples`` (or of ``update_inputs[name]``)."""
        if not self.updates:
            return ()
        out: list[tuple[str, Any]] = []
        for name in sorted(flow.updates):
            given = None if self.update_inputs is None else self.update_inputs.get(name)
            inputs = given if given is not None else tuple(flow.updates[name].examples)
            out.extend((name, value) for value in inputs or (None,))
        return tuple(out)

    def responses(self, entry: Pending) -> tuple[Response, ...]:
        """What the work of ``entry`` may get, callables applied to its effect."""
        table = {
            "call-tool": self.tools,
            "run-agent": self.agents,
            "run-team": self.teams,
            "run-subflow": self.subflows,
        }.get(entry.effect, {})
        found = table.get(entry.target) or table.get("*") or self.default
        out: list[Response] = []
        for item in found:
            if isinstance(item, Ok | Fail | Unknown | Hang | HeartbeatTimeout):
                out.append(item)
                continue
            made = item(entry.sent)
            for r in made if isinstance(made, list | tuple) else [made]:
                resp = _response(r, f"the callable for {entry.target!r}")
                if callable(resp):
                    raise TypeError(f"World: the callable for {entry.target!r} returned a callable")
                out.append(resp)
        return tuple(out)

    def may_report_steps(self) -> bool:
        """Whether some response may report usage steps (a callable may)."""
        tables = (self.tools, self.agents, self.teams, self.subflows, {"": self.default})
        return any(
            not isinstance(r, Ok | Fail | Unknown | Hang | HeartbeatTimeout)
            or (isinstance(r, Ok) and r.steps > 0)
            for table in tables
            for responses in table.values()
            for r in responses
        )

    def answers(self, step: str, options: tuple[str, ...] | None) -> tuple[str, ...]:
        if self.humans is not None:
            found = self.humans.get(step, self.humans.get("*"))
            if found is not None:
                return found
        return options if options else ("yes",)


def hangs(world: World, entry: Pending) -> bool:
    """Whether the work of ``entry`` may never be answered."""
    sent = entry.sent
    for r in world.responses(entry):
        if isinstance(r, Hang):
            return True
        if isinstance(r, HeartbeatTimeout) and getattr(sent, "heartbeat_timeout_ms", None) is None:
            return True
    return False


def _usage(r: Ok) -> Usage | None:
    if not (r.steps or r.cost or r.tokens or r.tool_calls or r.turns):
        return None
    return Usage(
        steps=r.steps,
        cost_minor_units=r.cost,
        tokens=r.tokens,
        tool_calls=r.tool_calls,
        turns=r.turns,
    )


def response_event(key: str, entry: Pending, r: Response, at: int) -> Event | None:
    """The event that reports response ``r`` for the work of ``entry``."""
    sent = entry.sent
    child = isinstance(sent, RunSubflow) and not sent.detached
    if isinstance(r, Ok):
        if child:
            return SubflowSettled(
                idempotency_key=key, status="completed", output=r.output, usage=_usage(r), at_ms=at
            )
        return EffectSucceeded(idempotency_key=key, output=r.output, usage=_usage(r), at_ms=at)
    if isinstance(r, Fail):
        error = ErrorInfo(type=r.type, message=r.message, retryable=r.retryable, details=r.details)
        if child:
            return SubflowSettled(idempotency_key=key, status="failed", error=error, at_ms=at)
        return EffectFailed(idempotency_key=key, error=error, at_ms=at)
    if isinstance(r, Unknown):
        return EffectOutcomeUnknown(idempotency_key=key, at_ms=at)
    if isinstance(r, HeartbeatTimeout):
        if getattr(sent, "heartbeat_timeout_ms", None) is None:
            return None
        details = r.details if r.details is not None else getattr(sent, "heartbeat_details", None)
        error = ErrorInfo(
            type=HEARTBEAT_TIMEOUT, message="no heartbeat", retryable=True, details=details
        )
        return EffectFailed(idempotency_key=key, error=error, at_ms=at)
    return None  # Hang


# --- one-line descriptions ----------------------------------------------------------------


def _short(value: Any, limit: int = 60) -> str:
    text = msgspec.json.encode(value).decode()
    return text if len(text) <= limit else text[: limit - 3] + "..."


def describe_effect(effect: Effect) -> str:
    """One line for an effect: its kind, what it addresses, its key."""
    wire = effect_to_wire(effect)
    kind = wire["kind"]
    if isinstance(effect, Settled):
        text = f"settled {effect.status}"
        if effect.exhausted:
            text += f" ({effect.exhausted})"
        if effect.error is not None:
            text += f": {effect.error.type}"
            if effect.error.message:
                text += f" ({effect.error.message[:80]})"
        elif effect.output is not None:
            text += f": {_short(effect.output)}"
        return text
    what = {
        "call-tool": "tool",
        "run-agent": "agentId",
        "run-team": "teamId",
        "run-subflow": "flowId",
        "ask-human": "question",
        "await-signal": "signal",
        "sleep": "untilMs",
        "signal-run": "signal",
        "continue-as-new": "incarnation",
    }.get(kind)
    detail = f" {_short(wire[what], 50)}" if what and what in wire else ""
    key = wire.get("idempotencyKey", "")
    return f"{kind}{detail} {key}".rstrip()


def describe_event(event: Event) -> str:
    """One line for an event: its kind, the key or signal, and what it carries."""
    wire = event_to_wire(event)
    kind = wire.pop("kind")
    wire.pop("atMs", None)
    key = wire.pop("idempotencyKey", None) or wire.pop("signal", None) or ""
    rest = " ".join(f"{k}={_short(v, 50)}" for k, v in wire.items() if v is not None)
    return " ".join(x for x in (kind, str(key), rest) if x)
