"""Property-testing kit: hypothesis strategies for flows and for hosts' events.

``flows()`` generates valid flow specs (as mappings) that use every construct
of the language, bounded by knobs. ``pending_events(state)`` lists the events
a well-behaved host could send to a run now, and ``hostile_events(state)``
the ones a broken or malicious host might send; ``events_for(state)`` draws
from both.

Like the rest of flowcore this module does no I/O: it only builds values.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from ._interp import Decision, advance
from ._state import State
from ._wire import (
    CancelRequested,
    EffectFailed,
    EffectOutcomeUnknown,
    EffectSucceeded,
    ErrorInfo,
    Event,
    HumanAnswered,
    SignalReceived,
    SubflowSettled,
    TimerFired,
    Usage,
)

__all__ = [
    "EVENT_KINDS",
    "TOOLS",
    "apply",
    "event_of_kind",
    "events_for",
    "flows",
    "hostile_events",
    "pending_events",
]

TOOLS = {
    "read": {"class": "readonly"},
    "put": {"class": "idempotent"},
    "send": {"class": "uncertain"},
    "poke": {},
}
TEAMS = {
    "duo": {
        "mode": "sequential",
        "members": [{"member": "first", "agent": "a1"}, {"member": "second", "agent": "a2"}],
    },
    "pair": {
        "mode": "parallel",
        "members": [{"member": "left", "agent": "a3"}, {"member": "right", "agent": "a4"}],
    },
}
SIGNALS = ("go", "stop")
ERROR_TYPES = ("boom", "busy", "timeout", "outcome-unknown")

EVENT_KINDS = (
    "effect-succeeded",
    "effect-failed",
    "effect-outcome-unknown",
    "human-answered",
    "timer-fired",
    "signal-received",
    "subflow-settled",
    "cancel-requested",
)

_LEAF_KINDS = (
    "call_tool",
    "run_agent",
    "run_team",
    "ask_human",
    "sleep",
    "await_signal",
    "run_subflow",
    "schedule",
)
_NEST_KINDS = ("switch", "parallel", "for_each", "repeat", "try")


class _Ids:
    """Hands out step ids unique within one generated flow."""

    def __init__(self) -> None:
        self.n = 0
        self.scheduled: list[str] = []

    def next(self) -> str:
        self.n += 1
        return f"s{self.n}"


def _leaf(draw: st.DrawFn, ids: _Ids, kind: str, earlier: list[str]) -> dict[str, Any]:
    sid = ids.next()
    ref = f"${{steps.{draw(st.sampled_from(earlier))}.output}}" if earlier else "${input.n}"
    step: dict[str, Any] = {"id": sid}
    if kind == "call_tool":
        step["call_tool"] = {"tool": draw(st.sampled_from(sorted(TOOLS))), "input": {"v": ref}}
    elif kind == "run_agent":
        step["run_agent"] = {"agent": "bot", "prompt": f"do {ref}"}
    elif kind == "run_team":
        step["run_team"] = {"team": draw(st.sampled_from(["duo", "pair", "crowd"])), "prompt": "p"}
    elif kind == "ask_human":
        ask: dict[str, Any] = {"question": f"ok {ref}?", "options": ["yes", "no"]}
        if draw(st.booleans()):
            ask["timeout_ms"] = draw(st.integers(1, 5000))
            if draw(st.booleans()):
                ask["default"] = "no"
        step["ask_human"] = ask
    elif kind == "sleep":
        step["sleep"] = {"for_ms": draw(st.integers(0, 5000))}
    elif kind == "await_signal":
        wait: dict[str, Any] = {"signal": draw(st.sampled_from(SIGNALS))}
        if draw(st.booleans()):
            wait["timeout_ms"] = draw(st.integers(1, 5000))
        step["await_signal"] = wait
    elif kind == "run_subflow":
        step["run_subflow"] = {"flow": "child", "input": {"v": ref}}
    elif kind == "schedule":
        step["schedule"] = {
            "tool": draw(st.sampled_from(sorted(TOOLS))),
            "delay_ms": draw(st.integers(0, 5000)),
            "outlive_run": draw(st.booleans()),
        }
        ids.scheduled.append(sid)
    else:  # pragma: no cover - the callers pass leaf kinds only
        raise AssertionError(kind)
    return step


def _steps(
    draw: st.DrawFn, ids: _Ids, depth: int, max_len: int, earlier: list[str]
) -> list[dict[str, Any]]:
    n = draw(st.integers(1, max_len))
    out: list[dict[str, Any]] = []
    for _ in range(n):
        out.append(_step(draw, ids, depth, earlier))
        earlier = [*earlier, out[-1]["id"]]
    return out


def _step(draw: st.DrawFn, ids: _Ids, depth: int, earlier: list[str]) -> dict[str, Any]:
    kinds = _LEAF_KINDS + (_NEST_KINDS if depth > 0 else ())
    if ids.scheduled:
        kinds = (*kinds, "cancel_scheduled")
    kind = draw(st.sampled_from(kinds))
    if kind in _LEAF_KINDS:
        step = _leaf(draw, ids, kind, earlier)
    elif kind == "cancel_scheduled":
        target = draw(st.sampled_from(ids.scheduled))
        step = {"id": ids.next(), "cancel_scheduled": {"id": f"${{steps.{target}.output}}"}}
    else:
        sid = ids.next()
        inner = depth - 1
        if kind == "switch":
            cases: list[dict[str, Any]] = [
                {"if": "input.flag", "steps": _steps(draw, ids, inner, 2, earlier)}
            ]
            if draw(st.booleans()):
                cases.append({"else": _steps(draw, ids, inner, 2, earlier)})
            step = {"id": sid, "switch": cases}
        elif kind == "parallel":
            names = draw(st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, unique=True))
            par: dict[str, Any] = {
                "mode": draw(st.sampled_from(["all", "all_settled", "race", "any"])),
                "branches": {n: _steps(draw, ids, inner, 2, earlier) for n in names},
            }
            if draw(st.booleans()):
                par["max_concurrency"] = draw(st.integers(1, 2))
            step = {"id": sid, "parallel": par}
        elif kind == "for_each":
            each: dict[str, Any] = {
                "items": "${input.items}",
                "as": "it",
                "steps": _steps(draw, ids, inner, 2, earlier),
            }
            if draw(st.booleans()):
                each["max_concurrency"] = draw(st.integers(1, 2))
            step = {"id": sid, "for_each": each}
        elif kind == "repeat":
            rep: dict[str, Any] = {
                "every_ms": draw(st.integers(1, 5000)),
                "max_fires": draw(st.integers(1, 3)),
                "steps": _steps(draw, ids, inner, 2, earlier),
            }
            if draw(st.booleans()):
                rep["until"] = "fire_count >= `2`"
            step = {"id": sid, "repeat": rep}
        else:
            body = _steps(draw, ids, inner, 2, earlier)
            errors = draw(st.sampled_from([["*"], ["timeout"], ["boom", "outcome-unknown"]]))
            step = {
                "id": sid,
                "try": body,
                "catch": [{"errors": errors, "steps": _steps(draw, ids, inner, 1, earlier)}],
            }
    if draw(st.integers(0, 4)) == 0:
        step["timeout_ms"] = draw(st.integers(1, 10000))
    if draw(st.integers(0, 4)) == 0:
        step["retry"] = {
            "max_attempts": draw(st.integers(1, 3)),
            "initial_interval_ms": draw(st.integers(0, 1000)),
            "backoff": 2.0,
            "max_interval_ms": 2000,
            "jitter": draw(st.sampled_from([0.0, 0.5])),
            **({"errors": ["*"]} if draw(st.booleans()) else {}),
        }
    if draw(st.integers(0, 5)) == 0:
        step["compensate"] = [_leaf(draw, ids, "call_tool", earlier)]
    return step


@st.composite
def flows(
    draw: st.DrawFn,
    max_depth: int = 2,
    max_steps: int = 4,
    budget: bool = True,
    concurrency: bool = True,
) -> dict[str, Any]:
    """Valid flow specs (mappings) using every construct, bounded in size.

    ``max_depth`` bounds nesting, ``max_steps`` the length of each step list.
    Generated flows read ``input.flag`` (bool), ``input.items`` (list) and
    ``input.n``; use ``flow_inputs()`` for matching inputs.
    """
    ids = _Ids()
    spec: dict[str, Any] = {
        "flow": "generated",
        "tools": TOOLS,
        "teams": TEAMS,
        "steps": _steps(draw, ids, max_depth, max_steps, []),
        "output": "${input.n}",
    }
    if budget and draw(st.booleans()):
        spec["budget"] = {
            "steps": draw(st.integers(1, 30)),
            "cost_minor_units": draw(st.integers(0, 500)),
            "wall_clock_ms": draw(st.integers(1000, 100000)),
        }
    limits: dict[str, Any] = {"max_subflow_depth": draw(st.integers(0, 3))}
    if concurrency and draw(st.booleans()):
        limits["max_concurrency"] = draw(st.integers(1, 3))
    spec["limits"] = limits
    return spec


def flow_inputs() -> st.SearchStrategy[dict[str, Any]]:
    """Inputs that fit ``flows()``: a flag, a short item list and a number."""
    return st.fixed_dictionaries(
        {
            "flag": st.booleans(),
            "items": st.lists(st.integers(0, 9), max_size=3),
            "n": st.integers(0, 100),
        }
    )


# --- events ----------------------------------------------------------------------------------


def _later(state: State, step: int) -> int:
    return state.now_ms + step


def pending_events(state: State) -> list[Event]:
    """Events a well-behaved host could report now, one or more per pending key."""
    out: list[Event] = []
    at = state.now_ms + 1
    for key, entry in sorted(state.pending.items()):
        if entry.kind in ("work", "sched-call"):
            if entry.effect == "run-subflow":
                out.append(SubflowSettled(idempotency_key=key, status="completed", at_ms=at))
                out.append(SubflowSettled(idempotency_key=key, status="failed", at_ms=at))
            else:
                out.append(
                    EffectSucceeded(
                        idempotency_key=key,
                        output={"k": key},
                        usage=Usage(steps=0, cost_minor_units=10),
                        at_ms=at,
                    )
                )
            out.append(
                EffectFailed(
                    idempotency_key=key, error=ErrorInfo(type="boom", retryable=True), at_ms=at
                )
            )
            out.append(EffectOutcomeUnknown(idempotency_key=key, at_ms=at))
        elif entry.kind == "ask":
            out.append(HumanAnswered(idempotency_key=key, answer="yes", at_ms=at))
        elif entry.kind == "signal":
            pass  # answered by a signal, below
        else:
            out.append(TimerFired(idempotency_key=key, at_ms=at))
    for name in SIGNALS:
        out.append(SignalReceived(signal=name, payload={"from": name}, at_ms=at))
    out.append(CancelRequested(reason="test", at_ms=at))
    return out


def hostile_events(state: State) -> list[Event]:
    """Events a broken host might send: unknown keys, wrong kinds, bad answers."""
    at = state.now_ms
    keys = sorted(state.pending.keys()) or ["nobody/none#1"]
    key = keys[0]
    return [
        EffectSucceeded(idempotency_key=f"{key}-ghost", at_ms=at),
        EffectFailed(idempotency_key="???", error=ErrorInfo(type="x"), at_ms=at),
        HumanAnswered(idempotency_key=key, answer="maybe", at_ms=at),
        HumanAnswered(idempotency_key=key, answer=["not", "a", "string"], at_ms=at),
        TimerFired(idempotency_key=key, at_ms=at),
        SubflowSettled(idempotency_key=key, status="cancelled", at_ms=at),
        EffectSucceeded(idempotency_key=key, output="x" * 10_000, at_ms=0),
        SignalReceived(signal="nobody-waits", payload=list(range(100)), at_ms=at),
    ]


def event_of_kind(kind: str, state: State, choice: int) -> Event:
    """An event of ``kind``, aimed at a pending key when one fits (``choice`` picks)."""
    keys = sorted(state.pending.keys())
    key = keys[choice % len(keys)] if keys else f"{state.run_id}/none#1"
    at = state.now_ms + choice % 7
    if kind == "effect-succeeded":
        return EffectSucceeded(idempotency_key=key, output=choice, at_ms=at)
    if kind == "effect-failed":
        return EffectFailed(
            idempotency_key=key,
            error=ErrorInfo(type=ERROR_TYPES[choice % len(ERROR_TYPES)], retryable=choice % 2 == 0),
            at_ms=at,
        )
    if kind == "effect-outcome-unknown":
        return EffectOutcomeUnknown(idempotency_key=key, at_ms=at)
    if kind == "human-answered":
        return HumanAnswered(
            idempotency_key=key, answer=("yes", "no", "maybe")[choice % 3], at_ms=at
        )
    if kind == "timer-fired":
        return TimerFired(idempotency_key=key, at_ms=at)
    if kind == "signal-received":
        return SignalReceived(signal=SIGNALS[choice % 2], payload=choice, at_ms=at)
    if kind == "subflow-settled":
        status = ("completed", "failed", "cancelled", "budget-exhausted")[choice % 4]
        return SubflowSettled(idempotency_key=key, status=status, at_ms=at)  # type: ignore[arg-type]
    if kind == "cancel-requested":
        return CancelRequested(reason="because", at_ms=at)
    raise ValueError(f"unknown event kind {kind!r}")


def events_for(state: State) -> st.SearchStrategy[Event]:
    """One event for ``state``: usually a fitting one, sometimes a hostile one."""
    fitting = pending_events(state)
    hostile = hostile_events(state)
    return st.one_of(st.sampled_from(fitting), st.sampled_from(hostile))


def apply(state: State, event: Event) -> Decision | None:
    """``advance``, or None when the event is rejected (the state is then unchanged)."""
    from ._errors import EventRejected

    try:
        return advance(state, event)
    except EventRejected:
        return None
