"""Property-test flows with hypothesis, and explore them exhaustively.

Five parts, all usable on your own flows (``specs/testing.md`` walks through
them):

* **The simulator** (``Simulator``, ``simulate``; responses ``Ok``, ``Fail``,
  ``Unknown``, ``Hang``, ``HeartbeatTimeout``, ``Responses``; ``Fault``,
  ``Signal``): a
  synchronous host with a virtual clock that runs a flow, its subflows and a
  scripted world to the end and returns a ``Trajectory``.
* **Strategies**: ``flows()`` generates valid specs that use every construct
  of the language; ``event_streams(flow, input)`` generates what a host may
  report to a run, hostile reports included (duplicates, unknown keys, wrong
  options, wrong kinds, reordering, clocks going backwards, oversize payloads,
  events after settlement); ``faults()`` generates fault injections for the
  simulator.
* **Invariants**: ``check_run(flow, input, events)`` drives a run and checks
  everything below; each check also exists alone (``check_determinism``,
  ``check_budget``, ``check_keys``, ``check_settlement``,
  ``check_work_accounted``, ``check_rejections``) and takes either
  ``(flow, input, events)`` or a ``RunHistory``; ``check_trajectory`` checks a
  simulation, every child run included. They raise ``AssertionError`` with a
  message that names the run, the turn and the event.
* **``FlowMachine``**: a hypothesis ``RuleBasedStateMachine`` that drives one
  run with rules (deliver a result, fail, outcome unknown, duplicate, advance
  the clock, signal, answer, cancel, hostile events) and checks the invariants
  after every rule. Subclass it with ``flow = ...`` and ``input = ...``.
* **Exploration** (``explore``, ``World``, ``Point``, ``Exploration``,
  ``Violation``): every ordering of what a world may report to a run, up to
  a bound, each distinct state once, commuting answers in one order; the
  built-in invariants (``BUILT_IN``), your own and liveness at every
  transition; a violation as the shortest event sequence to it, a log and a
  trajectory.

Like the rest of flowcore this module does no I/O, reads no clock and draws
no random number of its own: every choice comes from hypothesis or from the
caller.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, ClassVar, TypeAlias

import msgspec
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from ._errors import EventRejected
from ._explore import (
    BUILT_IN,
    Exploration,
    Point,
    Progress,
    Violation,
    World,
    explore,
    same_but_budget,
)
from ._interp import Decision, advance, continue_run
from ._keys import KeyRole, deadline_key, incarnation_base, parse_key
from ._query import Waits, waiting_for
from ._sim import (
    FAULT_KINDS,
    Call,
    Entry,
    Fail,
    Fault,
    Hang,
    HeartbeatTimeout,
    Ok,
    Responses,
    RunHistory,
    Signal,
    SimulationError,
    Simulator,
    Spec,
    Trajectory,
    Turn,
    Unknown,
    UsageLine,
    UsageReport,
    as_flow,
    drive,
    simulate,
)
from ._spec import Budget, Flow
from ._state import State, decode_state, encode_state
from ._wire import (
    EVENT_TYPES,
    AskHuman,
    AwaitSignal,
    BudgetRemaining,
    CallTool,
    CancelRequested,
    Effect,
    EffectFailed,
    EffectOutcomeUnknown,
    EffectSucceeded,
    ErrorInfo,
    Event,
    HumanAnswered,
    ReportEntry,
    RunAgent,
    RunSubflow,
    RunTeam,
    ScheduledAddRequested,
    ScheduledCancelRequested,
    ScheduledRunNowRequested,
    Settled,
    SignalReceived,
    SignalRun,
    Sleep,
    SubflowSettled,
    TimerFired,
    Usage,
    encode_effect,
    event_from_wire,
    event_to_wire,
)

__all__ = [
    "BUILT_IN",
    "CHILD_SPEC",
    "EVENT_KINDS",
    "FAULT_KINDS",
    "MOVES",
    "META_FIELDS",
    "SIGNALS",
    "TEAMS",
    "TOOLS",
    "Call",
    "Entry",
    "Exploration",
    "Fail",
    "Fault",
    "FlowMachine",
    "Hang",
    "HeartbeatTimeout",
    "Ok",
    "Point",
    "Progress",
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
    "Violation",
    "World",
    "apply",
    "check_budget",
    "check_determinism",
    "check_history",
    "check_keys",
    "check_rejections",
    "check_run",
    "check_settlement",
    "check_trajectory",
    "check_work_accounted",
    "drive",
    "event_of_kind",
    "event_streams",
    "events_for",
    "events_from_moves",
    "explore",
    "faults",
    "flow_inputs",
    "flows",
    "generated_world",
    "hostile_events",
    "moves",
    "pending_events",
    "play",
    "simulate",
]

# --- the vocabulary of generated flows ---------------------------------------------------

TOOLS = {
    "read": {"class": "readonly"},
    "put": {"class": "idempotent", "schedulable": True},
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
        "members": [
            {"member": "left", "agent": "a3", "instructions": "lean left"},
            {"member": "right", "agent": "a4"},
        ],
    },
}
AGENTS = ("bot", "a1", "a2", "a3", "a4")
SIGNALS = ("go", "stop")
SIGNAL_KEY = "k"  # the key of generated keyed waits and signals
ERROR_TYPES = ("boom", "busy", "timeout", "outcome-unknown")
_TOOL_NAMES = tuple(sorted(TOOLS))

CHILD_SPEC: dict[str, Any] = {
    "flow": "child",
    "tools": {"read": {"class": "readonly"}},
    "limits": {"max_subflow_depth": 3},
    "steps": [
        {"id": "look", "call_tool": {"tool": "read", "input": {"v": "${input.v}"}}},
        {
            "id": "deeper",
            "try": [{"id": "again", "run_subflow": {"flow": "child", "input": {"v": 1}}}],
            "catch": [{"errors": ["*"], "steps": [{"id": "rest", "sleep": {"for_ms": 10}}]}],
        },
    ],
    "output": "${steps.look.output}",
}
"""The flow that generated ``run_subflow`` steps start: it calls a tool, then
itself, until its depth limit fails the innermost call (which it catches)."""

EVENT_KINDS = (
    "effect-succeeded",
    "effect-failed",
    "effect-outcome-unknown",
    "human-answered",
    "timer-fired",
    "signal-received",
    "subflow-settled",
    "cancel-requested",
    "scheduled-cancel-requested",
    "scheduled-run-now-requested",
    "scheduled-add-requested",
)

STEP_KINDS = (
    "call_tool",
    "run_agent",
    "run_team",
    "ask_human",
    "sleep",
    "await_signal",
    "run_subflow",
    "schedule",
    "cancel_scheduled",
    "switch",
    "parallel",
    "for_each",
    "repeat",
    "try",
    "fail",
    "signal_run",
    "set_metadata",
    "continue_as_new",
)
META_FIELDS = {"n": "number", "caught": "boolean"}
"""The metadata fields generated flows declare when a ``set_metadata`` step sets them."""
_LEAF_KINDS = (
    "call_tool",
    "run_agent",
    "run_team",
    "ask_human",
    "sleep",
    "await_signal",
    "run_subflow",
    "schedule",
    "signal_run",
)
_NEST_KINDS = ("switch", "parallel", "for_each", "repeat", "try")

# --- flows -------------------------------------------------------------------------------


class _Ids:
    """Hands out step ids unique within one generated flow."""

    def __init__(self) -> None:
        self.n = 0
        self.scheduled: list[str] = []
        self.teams: set[str] = set()
        self.metadata = False  # a set_metadata step was generated

    def next(self) -> str:
        self.n += 1
        return f"s{self.n}"


def _leaf(draw: st.DrawFn, ids: _Ids, kind: str, earlier: list[str]) -> dict[str, Any]:
    # Few draws per step, each deciding several things: the number of draws
    # is what generating a flow costs.
    sid = ids.next()
    ref = f"${{steps.{draw(st.sampled_from(earlier))}.output}}" if earlier else "${input.n}"
    step: dict[str, Any] = {"id": sid}
    if kind == "call_tool":
        step["call_tool"] = {"tool": draw(st.sampled_from(_TOOL_NAMES)), "input": {"v": ref}}
    elif kind == "run_agent":
        agent: dict[str, Any] = {"agent": "bot", "prompt": f"do {ref}"}
        if draw(st.integers(0, 3)) == 3:
            agent["instructions"] = "be brief"
            agent["member"] = "solo"
        step["run_agent"] = agent
    elif kind == "run_team":
        team = draw(st.sampled_from(["duo", "pair", "crowd"]))
        ids.teams.add(team)
        step["run_team"] = {"team": team, "prompt": "p"}
    elif kind == "ask_human":
        # options 4 in 5; a timeout 1 in 2, with a default 1 in 2 of those
        shape = draw(st.integers(0, 19))
        ask: dict[str, Any] = {"question": f"ok {ref}?"}
        if shape % 5 != 4:
            ask["options"] = ["yes", "no"]
        if shape // 5 % 2:
            ask["timeout_ms"] = _written(draw(st.integers(1, 5000)))
            if shape // 10:
                ask["default"] = "no"
        step["ask_human"] = ask
    elif kind == "sleep":
        wait_ms = draw(st.integers(0, 6000))
        if wait_ms > 5000:  # an instant instead, mostly already past
            step["sleep"] = {"until": f"1970-01-01T00:00:0{wait_ms % 10}Z"}
        else:
            step["sleep"] = {"for_ms": _written(wait_ms)}
    elif kind == "await_signal":
        # the name, a timeout 1 in 2; 1 in 5 a condition on the payload, 1 in
        # 5 both names and two signals collected, 1 in 5 a key
        shape = draw(st.integers(0, 9))
        wait: dict[str, Any] = {"signal": SIGNALS[shape % 2]}
        if shape >= 8:
            wait["key"] = SIGNAL_KEY
            shape -= 8
        if shape // 2 % 2:
            wait["timeout_ms"] = _written(draw(st.integers(1, 5000)))
        if shape // 4 and shape % 2:
            wait["where"] = "payload != `2`"
        elif shape // 4:
            del wait["signal"]
            wait.update(signals=list(SIGNALS), count=2)
        step["await_signal"] = wait
    elif kind == "run_subflow":
        step["run_subflow"] = {"flow": "child", "input": {"v": ref}}
        # 1 in 2 as written before; else parent_close abandon or wait, or detached
        shape = draw(st.integers(0, 5))
        if shape == 3:
            step["run_subflow"]["detached"] = True
        elif shape == 4 or shape == 5:
            step["run_subflow"]["parent_close"] = ("abandon", "wait")[shape - 4]
    elif kind == "signal_run":
        # to the run itself (the one run every host has): a name, a key 1 in 2
        shape = draw(st.integers(0, 3))
        send: dict[str, Any] = {"run": "${run.id}", "signal": SIGNALS[shape % 2], "payload": ref}
        if shape // 2:
            send["key"] = SIGNAL_KEY
        step["signal_run"] = send
    elif kind == "schedule":
        shape = draw(st.integers(0, 7))
        step["schedule"] = {
            "tool": _TOOL_NAMES[shape % 4],
            "delay_ms": _written(draw(st.integers(0, 5000))),
            "outlive_run": shape >= 4,
        }
        ids.scheduled.append(sid)
    else:  # pragma: no cover - the callers pass leaf kinds only
        raise AssertionError(kind)
    return step


def _written(ms: int) -> int | str:
    """A duration of ``ms`` in one of the forms a spec may write it, chosen by its
    value so that no draw is spent on it: milliseconds, human text (``250ms``),
    ISO-8601 (``PT0.250S``), or an expression evaluated when the step begins
    (``${`250`}``). Every form means the same time."""
    match ms % 4:
        case 1:
            return f"{ms}ms"
        case 2:
            return f"PT{ms // 1000}.{ms % 1000:03d}S"
        case 3:
            return f"${{`{ms}`}}"
        case _:
            return ms


class _Knobs:
    def __init__(self, kinds: Collection[str] | None) -> None:
        self.leaves = tuple(k for k in _LEAF_KINDS if kinds is None or k in kinds)
        self.nests = tuple(k for k in _NEST_KINDS if kinds is None or k in kinds)
        self.cancel = kinds is None or "cancel_scheduled" in kinds
        self.fail = kinds is None or "fail" in kinds
        self.meta = kinds is None or "set_metadata" in kinds
        self.cont = kinds is None or "continue_as_new" in kinds
        if not self.leaves:
            raise ValueError(f"flows(kinds=...) needs at least one leaf kind of {_LEAF_KINDS}")


def _steps(
    draw: st.DrawFn, ids: _Ids, knobs: _Knobs, depth: int, max_len: int, earlier: list[str]
) -> list[dict[str, Any]]:
    n = draw(st.integers(1, max_len))
    out: list[dict[str, Any]] = []
    for _ in range(n):
        out.append(_step(draw, ids, knobs, depth, earlier))
        earlier = [*earlier, out[-1]["id"]]
    return out


def _apart(
    ids: _Ids, make: Callable[[], list[dict[str, Any]]]
) -> tuple[list[dict[str, Any]], list[str]]:
    """The steps ``make`` builds, and the schedule steps among them, which no step
    made later may cancel unless the caller says so: a step in a loop's body, or
    in one case or branch, may not be there to read from outside it or another."""
    before = len(ids.scheduled)
    steps = make()
    made = ids.scheduled[before:]
    del ids.scheduled[before:]
    return steps, made


def _step(
    draw: st.DrawFn, ids: _Ids, knobs: _Knobs, depth: int, earlier: list[str]
) -> dict[str, Any]:
    kinds = knobs.leaves + (knobs.nests if depth > 0 else ())
    if ids.scheduled and knobs.cancel:
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
            first, made = _apart(ids, lambda: _steps(draw, ids, knobs, inner, 2, earlier))
            cases: list[dict[str, Any]] = [{"if": "input.flag", "steps": first}]
            if draw(st.booleans()):
                other, more = _apart(ids, lambda: _steps(draw, ids, knobs, inner, 2, earlier))
                cases.append({"else": other})
                made += more
            ids.scheduled.extend(made)
            step = {"id": sid, "switch": cases}
        elif kind == "parallel":
            # branches: a non-empty subset of a, b, c; a mode; max_concurrency none, 1 or 2
            shape = draw(st.integers(0, 7 * 4 * 3 - 1))
            names = [n for i, n in enumerate("abc") if (1 + shape % 7) >> i & 1]
            branches: dict[str, Any] = {}
            made = []
            for n in names:
                branches[n], more = _apart(ids, lambda: _steps(draw, ids, knobs, inner, 2, earlier))
                made += more
            ids.scheduled.extend(made)
            par: dict[str, Any] = {
                "mode": ("all", "all_settled", "race", "any")[shape // 7 % 4],
                "branches": branches,
            }
            if shape // 28:
                par["max_concurrency"] = shape // 28
            step = {"id": sid, "parallel": par}
        elif kind == "for_each":
            width = draw(st.integers(0, 2))
            each: dict[str, Any] = {
                "items": "${input.items}",
                "as": "it",
                "steps": _apart(ids, lambda: _steps(draw, ids, knobs, inner, 2, earlier))[0],
            }
            if width:
                each["max_concurrency"] = width
            step = {"id": sid, "for_each": each}
        elif kind == "repeat":
            # max_fires 1..3; a cron cadence 1 in 6 (else every_ms); an until 1 in 2
            shape = draw(st.integers(0, 3 * 6 * 2 - 1))
            rep: dict[str, Any] = {
                "max_fires": 1 + shape % 3,
                "steps": _apart(ids, lambda: _steps(draw, ids, knobs, inner, 2, earlier))[0],
            }
            if shape // 3 % 6 == 5:
                rep["cron"] = "*/5 * * * *"
            else:
                rep["every_ms"] = _written(draw(st.integers(1, 5000)))
            if shape // 18:
                rep["until"] = "fire_count >= `2`"
            step = {"id": sid, "repeat": rep}
        else:
            body = _steps(draw, ids, knobs, inner, 2, earlier)
            errors = draw(st.sampled_from([["*"], ["timeout"], ["boom", "outcome-unknown"]]))
            if knobs.fail and len(errors) == 2:  # the body raises what the catch takes
                raised = {"type": "boom", "message": "raised", "details": {"n": "${input.n}"}}
                body.append({"id": ids.next(), "fail": raised})
            caught = _steps(draw, ids, knobs, inner, 1, earlier)
            if knobs.meta and len(errors) == 1:  # the catch records what it caught
                marks = {"n": "${input.n}", "caught": errors[0] == "*"}
                caught.append({"id": ids.next(), "set_metadata": marks})
                ids.metadata = True
            step = {"id": sid, "try": body, "catch": [{"errors": errors, "steps": caught}]}
    # One draw decides the decorations (about 1 in 5 steps gets a timeout, 1
    # in 5 a retry, 1 in 6 a compensation): draws are what generation costs.
    deco = draw(st.integers(0, 149))
    if deco % 5 == 4:
        step["timeout_ms"] = _written(draw(st.integers(1, 10000)))
    if deco % 10 == 3:  # each attempt timed on its own
        step["attempt_timeout_ms"] = _written(1 + deco * 37 % 5000)
    if deco % 10 == 7 and kind in ("call_tool", "run_agent", "run_team"):  # must heartbeat
        step["heartbeat_timeout_ms"] = _written(1 + deco * 53 % 5000)
    if deco % 7 >= 5 and kind in ("call_tool", "run_agent", "run_team"):  # 2 in 7: not try_cancel
        step["cancellation"] = ("wait_cancellation_completed", "abandon")[deco % 7 - 5]
    if deco // 5 % 5 == 4:
        # max_attempts 1..3, the interval, jitter on or off, an errors filter or not.
        shape = draw(st.integers(0, 11))
        step["retry"] = {
            "max_attempts": 1 + shape % 3,
            "initial_interval_ms": draw(st.integers(0, 1000)),
            "backoff": 2.0,
            "max_interval_ms": 2000,
            "jitter": 0.5 if shape // 3 % 2 else 0.0,
            **({"errors": ["*"]} if shape // 6 else {}),
        }
    if "call_tool" in knobs.leaves and deco // 25 == 5:
        step["compensate"] = [_leaf(draw, ids, "call_tool", earlier)]
    return step


@st.composite
def flows(
    draw: st.DrawFn,
    max_depth: int = 2,
    max_steps: int = 4,
    budget: bool = True,
    concurrency: bool = True,
    kinds: Collection[str] | None = None,
) -> dict[str, Any]:
    """Valid flow specs (mappings) using every construct, bounded in size.

    ``max_depth`` bounds nesting, ``max_steps`` the length of the top-level
    step list (nested lists hold one or two steps); ``budget`` and
    ``concurrency`` allow budgets and ``max_concurrency`` limits; ``kinds``
    restricts the step kinds (see ``STEP_KINDS``). Generated flows read
    ``input.flag`` (bool), ``input.items`` (list) and ``input.n``: use
    ``flow_inputs()`` for matching inputs. They call the tools in ``TOOLS``,
    the agents ``bot``, ``a1``..``a4``, the teams in ``TEAMS`` (declared when
    used) and an undeclared team ``crowd``, the signals in ``SIGNALS`` and the subflow
    ``child`` (``CHILD_SPEC``).
    """
    knobs = _Knobs(kinds)
    ids = _Ids()
    spec: dict[str, Any] = {
        "flow": "generated",
        "tools": TOOLS,
        "steps": _steps(draw, ids, knobs, max_depth, max_steps, []),
        "output": "${input.n}",
    }
    # Only the teams the steps use are declared: parsing each declaration
    # costs as much as a step.
    teams = {name: decl for name, decl in TEAMS.items() if name in ids.teams}
    if teams:
        spec["teams"] = teams
    if ids.metadata:
        spec["metadata"] = META_FIELDS
    if budget and draw(st.booleans()):
        spec["budget"] = {
            "steps": draw(st.integers(1, 30)),
            "cost_minor_units": draw(st.integers(0, 500)),
            "wall_clock_ms": draw(st.integers(1000, 100000)),
        }
    limits: dict[str, Any] = {"max_subflow_depth": draw(st.integers(0, 3))}
    if concurrency and draw(st.booleans()):
        limits["max_concurrency"] = draw(st.integers(1, 3))
    if draw(st.integers(0, 4)) == 0:
        limits["max_buffered_signals"] = draw(st.integers(0, 2))
    spec["limits"] = limits
    if draw(st.integers(0, 9)) == 0:
        spec["input_schema"] = {"type": "object", "required": ["n"]}
    if knobs.cont and draw(st.integers(0, 3)) == 0:
        # The run starts again, at most twice: a new incarnation with the same
        # input, or with n counted up (drawn last, so earlier draws stay as they were).
        again: dict[str, Any] = {}
        if draw(st.booleans()):
            again["input"] = {
                "flag": "${input.flag}",
                "items": "${input.items}",
                "n": "${sum([input.n, `1`])}",
            }
        cont = {"id": ids.next(), "continue_as_new": again}
        guard = "run.incarnation == null || run.incarnation < `3`"
        spec["steps"].append({"id": ids.next(), "switch": [{"if": guard, "steps": [cont]}]})
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


# --- single events for a state (kept for the exhaustive state x event test) --------------


def _answered_by(waits: Waits) -> dict[str, str]:
    """Every key the run waits for, in order, and what answers it: ``work``,
    ``subflow``, ``ask``, ``signal`` or ``timer`` (work held back is not out yet)."""
    found = {
        # A detached child's start is answered as work is: effect-succeeded.
        w.key: "subflow"
        if w.effect["kind"] == "run-subflow" and not w.effect.get("detached")
        else "work"
        for w in waits.work
        if not w.held
    }
    found.update((q.key, "ask") for q in waits.questions)
    found.update((s.key, "signal") for s in waits.signals)
    found.update((t.key, "timer") for t in waits.timers)
    return dict(sorted(found.items()))


def pending_events(state: State) -> list[Event]:
    """Events a well-behaved host could report now, one or more per pending key."""
    out: list[Event] = []
    at = state.now_ms + 1
    for key, what in _answered_by(waiting_for(state)).items():
        if what in ("work", "subflow"):
            if what == "subflow":
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
        elif what == "ask":
            out.append(HumanAnswered(idempotency_key=key, answer="yes", at_ms=at))
        elif what == "signal":
            pass  # answered by a signal, below
        else:
            out.append(TimerFired(idempotency_key=key, at_ms=at))
    for name in SIGNALS:
        out.append(SignalReceived(signal=name, payload={"from": name}, at_ms=at))
    for sid, sched in sorted(state.schedules.items()):
        if sched.status == "pending":
            out.append(ScheduledCancelRequested(schedule_id=sid, at_ms=at))
            out.append(ScheduledRunNowRequested(schedule_id=sid, at_ms=at))
    for tool, decl in sorted(state.flow.tools.items()):
        if decl.schedulable:
            out.append(ScheduledAddRequested(tool=tool, input={"k": tool}, delay_ms=50, at_ms=at))
    out.append(CancelRequested(reason="test", at_ms=at))
    return out


def hostile_events(state: State, sent: Sequence[Event] = ()) -> list[Event]:
    """Events a broken host might send: unknown keys, wrong kinds, bad answers, time
    travel, oversize payloads, values that are not flowcore data, and duplicates
    of the events in ``sent``."""
    at = state.now_ms
    keys = list(_answered_by(waiting_for(state))) or ["nobody/none#1"]
    key = keys[0]
    out: list[Event] = [
        EffectSucceeded(idempotency_key=f"{key}-ghost", at_ms=at),
        EffectFailed(idempotency_key="???", error=ErrorInfo(type="x"), at_ms=at),
        HumanAnswered(idempotency_key=key, answer="maybe", at_ms=at),
        HumanAnswered(idempotency_key=key, answer=["not", "a", "string"], at_ms=at),
        TimerFired(idempotency_key=key, at_ms=at),
        SubflowSettled(idempotency_key=key, status="cancelled", at_ms=at),
        EffectSucceeded(idempotency_key=key, output="x" * 10_000, at_ms=0),
        SignalReceived(signal="nobody-waits", payload=list(range(100)), at_ms=at),
        # Values flowcore refuses as data (see specs/protocol.md §3.1).
        EffectSucceeded(idempotency_key=key, output={"n": 10**20}, at_ms=at),
        SignalReceived(signal="nobody-waits", payload="\ud800", at_ms=at),
        HumanAnswered(idempotency_key=key, answer=float("nan"), at_ms=at),
    ]
    out.extend(sent[-3:])
    return out


def event_of_kind(kind: str, state: State, choice: int) -> Event:
    """An event of ``kind``, aimed at a pending key when one fits (``choice`` picks)."""
    keys = list(_answered_by(waiting_for(state)))
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
    if kind in ("scheduled-cancel-requested", "scheduled-run-now-requested"):
        ids = [*sorted(state.schedules), f"{state.run_id}/~scheduled-99"]
        sid = ids[choice % len(ids)]
        if kind == "scheduled-cancel-requested":
            return ScheduledCancelRequested(schedule_id=sid, at_ms=at)
        return ScheduledRunNowRequested(schedule_id=sid, at_ms=at)
    if kind == "scheduled-add-requested":
        tools = [*sorted(state.flow.tools), "nowhere"]
        tool = tools[choice % len(tools)]
        return ScheduledAddRequested(tool=tool, input=choice, delay_ms=100 * choice, at_ms=at)
    raise ValueError(f"unknown event kind {kind!r}")


def events_for(state: State) -> st.SearchStrategy[Event]:
    """One event for ``state``: usually a fitting one, sometimes a hostile one."""
    fitting = pending_events(state)
    hostile = hostile_events(state)
    return st.one_of(st.sampled_from(fitting), st.sampled_from(hostile))


def apply(state: State, event: Event) -> Decision | None:
    """``advance``, or None when the event is rejected (the state is then unchanged)."""
    try:
        return advance(state, event)
    except EventRejected:
        return None


# --- event streams: a host that makes up its reports --------------------------------------

MOVES: tuple[tuple[str, int], ...] = (
    # A move is (op, choice); the op is drawn from 0..99 and these are the
    # ops' shares. Well-behaved ops come first so that streams shrink
    # towards plain successes.
    ("succeed", 30),
    ("fire", 10),
    ("answer", 8),
    ("fail", 8),
    ("unknown", 6),
    ("subflow", 6),
    ("signal", 5),
    ("stale", 3),
    ("cancel", 2),
    # hostile
    ("duplicate", 4),
    ("ghost", 2),
    ("bad-answer", 2),
    ("wrong-kind", 3),
    ("time-travel", 2),
    ("oversize", 3),
    ("flood", 3),
    ("early-timer", 3),
)
_OPS: tuple[str, ...] = tuple(name for name, share in MOVES for _ in range(share))
_FRIENDLY = 78  # ops below this index are what a well-behaved host sends
assert len(_OPS) == 100 and _OPS[_FRIENDLY - 1] == "cancel" and _OPS[_FRIENDLY] == "duplicate"
_WORK = ("work", "subflow")  # what answers a work key (``_answered_by``)
_WORK_EFFECTS = (CallTool, RunAgent, RunTeam, RunSubflow, SignalRun)


def _output(choice: int) -> Any:
    shape = choice % 5
    if shape == 0:
        return {"v": choice, "green": choice % 2 == 0, "items": [choice % 3]}
    if shape == 1:
        return choice
    if shape == 2:
        return None
    if shape == 3:
        return f"text {choice}"
    return [choice, {"k": "v"}]


def _oversize(choice: int) -> Any:
    shape = choice % 3
    if shape == 0:
        return "x" * 100_000
    if shape == 1:
        return list(range(5_000))
    nested: Any = choice
    for _ in range(100):
        nested = {"n": nested}
    return nested


_ANSWERS = (EffectSucceeded, EffectFailed, EffectOutcomeUnknown, SubflowSettled)


class _Host:
    """What a host knows about one run while it makes up events to report."""

    def __init__(
        self,
        history: RunHistory,
        paranoid: bool = True,
        outputs: Callable[[Effect, int], Any] | None = None,
    ) -> None:
        self.h = history
        self.paranoid = paranoid
        self.outputs = outputs
        self.work: dict[str, Effect] = {}
        self.signal_names: set[str] = set(SIGNALS)
        self.sent: list[Event] = []
        self.answered: set[str] = set()  # work keys an accepted event answered
        self.clock = history.state.now_ms
        for turn in history.turns:
            self.learn(turn.effects)
        self.look()

    def look(self) -> None:
        """What the run waits for now (``waiting_for``), and what answers each key."""
        self.waits = waiting_for(self.h.state)
        self.keys = _answered_by(self.waits)

    def learn(self, effects: Iterable[Effect]) -> None:
        for effect in effects:
            if isinstance(effect, _WORK_EFFECTS):
                self.work[effect.idempotency_key] = effect
            elif isinstance(effect, AwaitSignal):
                self.signal_names.add(effect.signal)

    def send(self, event: Event) -> Turn:
        before = len(self.h.turns)
        turn = self.h.record(event, self.paranoid)
        self.sent.append(event)
        if turn.rejected is None and isinstance(event, _ANSWERS):
            self.answered.add(event.idempotency_key)
        for recorded in self.h.turns[before:]:  # with the next incarnation's, if it continued
            self.clock = max(self.clock, recorded.state.now_ms)
            self.learn(recorded.effects)
        self.look()
        return turn

    # --- what is pending ------------------------------------------------------------------

    def pending(self, *whats: str) -> list[str]:
        """The keys answered by ``whats`` (see ``_answered_by``), in order."""
        return [k for k, what in self.keys.items() if what in whats]

    def has(self, what: str) -> bool:
        if what == "sent":
            return bool(self.sent)
        if what not in ("work", "subflow", "ask", "timer"):
            raise ValueError(what)
        return bool(self.pending(*_WORK) if what == "work" else self.pending(what))

    def at(self, choice: int) -> int:
        return self.clock + choice % 3

    # --- making events ------------------------------------------------------------------------

    def make(self, op: str, choice: int) -> Event:
        """An event for ``op``; when nothing fits the op, one that moves the run on."""
        event = getattr(self, "op_" + op.replace("-", "_"))(choice)
        return event if event is not None else self.progress(choice)

    def succeed_event(self, key: str, choice: int) -> Event:
        effect = self.work.get(key)
        if isinstance(effect, RunSubflow) and effect.detached:  # started: the child's run id
            return EffectSucceeded(
                idempotency_key=key, output={"run_id": key}, at_ms=self.at(choice)
            )
        if isinstance(effect, RunSubflow):
            usage = Usage(steps=choice % 3, cost_minor_units=choice % 40)
            return SubflowSettled(
                idempotency_key=key,
                status="completed",
                output=_output(choice),
                usage=usage,
                at_ms=self.at(choice),
            )
        output = _output(choice)
        if self.outputs is not None and effect is not None:
            output = self.outputs(effect, choice)
        reported: Usage | None = None
        if choice % 4 == 0:
            reported = Usage(steps=choice // 4 % 2, cost_minor_units=choice % 50)
        return EffectSucceeded(
            idempotency_key=key, output=output, usage=reported, at_ms=self.at(choice)
        )

    def op_succeed(self, choice: int) -> Event | None:
        keys = self.pending(*_WORK)
        return self.succeed_event(keys[choice % len(keys)], choice) if keys else None

    def op_fail(self, choice: int) -> Event | None:
        keys = self.pending(*_WORK)
        if not keys:
            return None
        key = keys[choice % len(keys)]
        error = ErrorInfo(
            type=ERROR_TYPES[choice % len(ERROR_TYPES)],
            message=f"failure {choice}",
            retryable=choice // 4 % 2 == 0,
        )
        watched = getattr(self.work.get(key), "heartbeat_timeout_ms", None) is not None
        if watched and choice // 8 % 2 == 0:  # the host stopped it: it went quiet
            details = {"beat": choice} if choice // 16 % 2 else None
            error = ErrorInfo(type="heartbeat-timeout", message="no heartbeat", details=details)
        return EffectFailed(idempotency_key=key, error=error, at_ms=self.at(choice))

    def op_unknown(self, choice: int) -> Event | None:
        keys = self.pending(*_WORK)
        if not keys:
            return None
        return EffectOutcomeUnknown(idempotency_key=keys[choice % len(keys)], at_ms=self.at(choice))

    def op_subflow(self, choice: int) -> Event | None:
        keys = self.pending("subflow")
        if not keys:
            return None
        status = ("completed", "failed", "cancelled", "budget-exhausted")[choice % 4]
        return SubflowSettled(
            idempotency_key=keys[choice % len(keys)],
            status=status,  # type: ignore[arg-type]
            output=_output(choice) if status == "completed" else None,
            usage=Usage(steps=choice % 3, cost_minor_units=choice % 40),
            at_ms=self.at(choice),
        )

    def op_answer(self, choice: int) -> Event | None:
        questions = self.waits.questions
        if not questions:
            return None
        question = questions[choice % len(questions)]
        options = question.options
        answer: Any = options[choice % len(options)] if options else f"answer {choice}"
        return HumanAnswered(idempotency_key=question.key, answer=answer, at_ms=self.at(choice))

    def due_timers(self) -> list[tuple[int, str]]:
        return sorted((t.due_ms, t.key) for t in self.waits.timers)

    def op_fire(self, choice: int) -> Event | None:
        due = self.due_timers()
        if not due:
            return None
        until, key = due[0]
        return TimerFired(idempotency_key=key, at_ms=max(until, self.clock))

    def op_signal(self, choice: int) -> Event | None:
        names = sorted(self.signal_names)
        return SignalReceived(
            signal=names[choice % len(names)],
            payload={"n": choice},
            at_ms=self.at(choice),
            key=SIGNAL_KEY if choice % 5 == 4 else None,
        )

    def op_cancel(self, choice: int) -> Event | None:
        return CancelRequested(reason=f"cancel {choice}", at_ms=self.at(choice))

    def op_stale(self, choice: int) -> Event | None:
        """A late result for work the run abandoned (emitted, never answered)."""
        keys = sorted(k for k in self.work if k not in self.keys and k not in self.answered)
        if not keys:
            return None
        key = keys[choice % len(keys)]
        if choice % 2:
            return self.succeed_event(key, choice)
        error = ErrorInfo(type="late", message="too late")
        return EffectFailed(idempotency_key=key, error=error, at_ms=self.at(choice))

    # hostile ---------------------------------------------------------------------------------

    def op_duplicate(self, choice: int) -> Event | None:
        return self.sent[choice % len(self.sent)] if self.sent else None

    def op_ghost(self, choice: int) -> Event | None:
        at = self.at(choice)
        rid = self.h.run_id
        return (
            EffectSucceeded(idempotency_key=f"{rid}/ghost{choice}#1", output=1, at_ms=at),
            EffectFailed(idempotency_key="elsewhere/x#1", error=ErrorInfo(type="boom"), at_ms=at),
            HumanAnswered(idempotency_key=f"{rid}/ghost#1", answer="yes", at_ms=at),
            TimerFired(idempotency_key=f"{rid}/ghost#1/timeout", at_ms=at),
            EffectOutcomeUnknown(idempotency_key="", at_ms=at),
        )[choice % 5]

    def op_bad_answer(self, choice: int) -> Event | None:
        keys = self.pending("ask") or self.pending(*_WORK)
        if not keys:
            return None
        bad: Any = ("maybe", None, ["yes"], {"answer": "yes"}, "YES", "")[choice % 6]
        return HumanAnswered(
            idempotency_key=keys[choice % len(keys)], answer=bad, at_ms=self.at(choice)
        )

    def op_wrong_kind(self, choice: int) -> Event | None:
        pending = list(self.keys.items())
        if not pending:
            return None
        key, what = pending[choice % len(pending)]
        at = self.at(choice)
        if what in _WORK:
            if what == "subflow":
                return EffectSucceeded(idempotency_key=key, output=1, at_ms=at)
            options: tuple[Event, ...] = (
                TimerFired(idempotency_key=key, at_ms=at),
                HumanAnswered(idempotency_key=key, answer="yes", at_ms=at),
                SubflowSettled(idempotency_key=key, status="completed", at_ms=at),
            )
            return options[choice % 3]
        if what in ("ask", "signal"):
            return (
                EffectSucceeded(idempotency_key=key, at_ms=at),
                TimerFired(idempotency_key=key, at_ms=at),
                EffectOutcomeUnknown(idempotency_key=key, at_ms=at),
            )[choice % 3]
        return (
            EffectSucceeded(idempotency_key=key, at_ms=at),
            HumanAnswered(idempotency_key=key, answer="yes", at_ms=at),
            EffectFailed(idempotency_key=key, error=ErrorInfo(type="boom"), at_ms=at),
        )[choice % 3]

    def op_time_travel(self, choice: int) -> Event | None:
        keys = self.pending("work")
        if keys:
            key = keys[choice % len(keys)]
            return EffectSucceeded(idempotency_key=key, output=_output(choice), at_ms=0)
        return SignalReceived(signal=sorted(self.signal_names)[0], payload=choice, at_ms=0)

    def op_oversize(self, choice: int) -> Event | None:
        keys = self.pending("work")
        if keys and choice % 4:
            key = keys[choice % len(keys)]
            return EffectSucceeded(
                idempotency_key=key, output=_oversize(choice), at_ms=self.at(choice)
            )
        names = sorted(self.signal_names)
        return SignalReceived(
            signal=names[choice % len(names)], payload=_oversize(choice), at_ms=self.at(choice)
        )

    def op_flood(self, choice: int) -> Event | None:
        return SignalReceived(signal=f"nobody{choice % 3}", payload=choice, at_ms=self.at(choice))

    def op_early_timer(self, choice: int) -> Event | None:
        keys = self.pending("timer")
        if not keys:
            return None
        return TimerFired(idempotency_key=keys[choice % len(keys)], at_ms=self.clock)

    def progress(self, choice: int) -> Event:
        """Something that moves the run on: answer work, a question, a timer, a wait."""
        for op in ("succeed", "answer", "fire"):
            event = getattr(self, "op_" + op)(choice)
            if event is not None:
                assert isinstance(
                    event, (EffectSucceeded, SubflowSettled, HumanAnswered, TimerFired)
                )
                return event
        waiting = sorted({(s.signal, s.signal_key or "") for s in self.waits.signals})
        if waiting:
            name, key = waiting[choice % len(waiting)]
            return SignalReceived(
                signal=name, payload={"n": choice}, at_ms=self.at(choice), key=key or None
            )
        return CancelRequested(reason="nothing else to do", at_ms=self.at(choice))


def moves(max_size: int = 40, hostile: bool = True) -> st.SearchStrategy[list[tuple[int, int]]]:
    """Lists of ``(op, choice)`` moves for ``events_from_moves`` (see ``MOVES``)."""
    top = 99 if hostile else _FRIENDLY - 1
    return st.lists(st.tuples(st.integers(0, top), st.integers(0, 2**16)), max_size=max_size)


def play(
    flow: Spec,
    input: Any = None,
    moves: Iterable[tuple[int, int]] = (),
    *,
    run_id: str = "r",
    now_ms: int = 0,
    budget: Budget | BudgetRemaining | None = None,
    depth: int = 0,
    paranoid: bool = True,
    finish: bool = False,
    max_finish: int = 2_000,
) -> RunHistory:
    """Drive a run with events made up from ``moves``; the run's full history.

    With ``finish``, a well-behaved host then keeps answering whatever the run
    waits for (results, answers, timers, signals) until it settles, at most
    ``max_finish`` more events.
    """
    history = drive(flow, input, run_id=run_id, now_ms=now_ms, budget=budget, depth=depth)
    host = _Host(history, paranoid)
    for op, choice in moves:
        host.send(host.make(_OPS[op % 100], choice))
    if finish:
        for n in range(max_finish):
            if history.state.settled is not None:
                break
            host.send(host.progress(n))
    return history


def events_from_moves(
    flow: Spec,
    input: Any = None,
    moves: Iterable[tuple[int, int]] = (),
    **start: Any,
) -> list[Event]:
    """The events ``play`` reports for ``moves``: replayable with ``check_run``."""
    return play(flow, input, moves, paranoid=False, **start).events()


def event_streams(
    flow: Spec,
    input: Any = None,
    *,
    hostile: bool = True,
    max_events: int = 40,
    run_id: str = "r",
    now_ms: int = 0,
    budget: Budget | BudgetRemaining | None = None,
    depth: int = 0,
) -> st.SearchStrategy[list[Event]]:
    """Streams of events a host reports to one run of ``flow``.

    Events are made up against the run as it moves: results for the work it
    emitted (in any order: reordering), failures, unknown outcomes, answers,
    timers fired at their due times, signals, subflow results, late results
    for abandoned work, cancellation. With ``hostile`` (the default) about a
    fifth are hostile: duplicates, unknown keys, answers that are not among
    the options, events of the wrong kind for a key, clocks going backwards,
    oversize payloads, floods of signals nobody waits for, timers fired
    early; and a stream goes on after the run settles. Use the same
    ``run_id``/``now_ms``/``budget``/``depth`` when replaying it.
    """
    parsed = as_flow(flow)
    return moves(max_events, hostile).map(
        lambda ms: events_from_moves(
            parsed, input, ms, run_id=run_id, now_ms=now_ms, budget=budget, depth=depth
        )
    )


# --- a world for generated flows ----------------------------------------------------------


def _echo(call: Call) -> Any:
    if call.kind == "run-agent":
        return Ok({"n": call.n, "green": call.n % 2 == 0}, steps=call.n % 2, cost=call.n % 7)
    return {"n": call.n, "green": call.n % 2 == 0}


def _answer_humans(call: Call) -> Any:
    options = call.options
    return options[call.n % len(options)] if options else f"answer {call.n}"


def faults(
    targets: Sequence[str] = (*sorted(TOOLS), *AGENTS, "crowd", "child"), max_size: int = 3
) -> st.SearchStrategy[list[Fault]]:
    """Fault injections for the simulator, aimed at ``targets`` (or at every call)."""
    return st.lists(
        st.builds(
            Fault,
            kind=st.sampled_from(FAULT_KINDS),
            target=st.sampled_from(("*", *targets)),
            calls=st.one_of(st.none(), st.lists(st.integers(1, 4), min_size=1, max_size=2)),
            delay_ms=st.integers(0, 20_000),
        ),
        max_size=max_size,
    )


def generated_world(
    faults: Iterable[Fault] = (),
    signals: Iterable[Signal] = (),
    order: Sequence[int] = (),
    cancel_at_ms: int | None = None,
    paranoid: bool = True,
    subflows: Mapping[str, Spec] | None = None,
) -> Simulator:
    """A simulator that can run any flow from ``flows()``: every tool, agent and team
    answers, humans pick an option (or answer with text), ``child`` is
    ``CHILD_SPEC``; ``subflows`` adds flows to that registry."""
    return Simulator(
        default=_echo,
        humans=_answer_humans,
        subflows={"child": CHILD_SPEC, **(subflows or {})},
        faults=faults,
        signals=signals,
        order=order,
        cancel_at_ms=cancel_at_ms,
        paranoid=paranoid,
        max_events=5_000,
    )


# --- invariants ------------------------------------------------------------------------------


Events: TypeAlias = Iterable[Event | Mapping[str, Any]]
"""Events, or their wire dicts (validated with ``event_from_wire``)."""


def _history(
    run: RunHistory | Spec, input: Any, events: Events, start: Mapping[str, Any]
) -> RunHistory:
    if isinstance(run, RunHistory):
        return run
    evs = [e if not isinstance(e, Mapping) else event_from_wire(dict(e)) for e in events]
    return drive(run, input, evs, paranoid=True, **start)


def _show(value: Effect | Event | None) -> str:
    if value is None:
        return "start"
    if isinstance(value, EVENT_TYPES):
        text = msgspec.json.encode(event_to_wire(value)).decode()
    else:
        text = encode_effect(value).decode()
    return text if len(text) <= 300 else text[:300] + "..."


def _at(h: RunHistory, i: int) -> str:
    return f"run {h.run_id}, turn {i} ({_show(h.turns[i].event)})"


def _fail(message: str) -> None:
    raise AssertionError(message)


def check_settlement(
    run: RunHistory | Spec, input: Any = None, events: Events = (), **start: Any
) -> RunHistory:
    """Nothing is emitted or accepted after ``settled``; ``settled`` is alone and last
    in its decision; the state agrees; the clock never goes backwards."""
    h = _history(run, input, events, start)
    settled_at: int | None = None
    now = h.turns[0].state.now_ms
    for i, turn in enumerate(h.turns):
        state = turn.state
        if state.now_ms < now:
            _fail(f"{_at(h, i)}: the run's clock went back from {now} to {state.now_ms}")
        now = state.now_ms
        if settled_at is not None:
            if turn.rejected is None or turn.effects:
                _fail(
                    f"{_at(h, i)}: accepted (effects {[_show(e) for e in turn.effects]}) after "
                    f"the run settled at turn {settled_at}; every event must be rejected"
                )
            continue
        settles = [e for e in turn.effects if isinstance(e, Settled)]
        if settles:
            if len(turn.effects) != 1:
                _fail(
                    f"{_at(h, i)}: a settling decision must hold only settled, got "
                    f"{[_show(e) for e in turn.effects]}"
                )
            if state.settled != settles[0] or state.status != settles[0].status:
                _fail(f"{_at(h, i)}: the state does not record the settled effect it emitted")
            settled_at = i
        elif state.settled is not None or state.status != "running":
            _fail(f"{_at(h, i)}: status {state.status} without a settled effect")
    return h


def check_keys(
    run: RunHistory | Spec, input: Any = None, events: Events = (), **start: Any
) -> RunHistory:
    """Idempotency keys are unique within the run and carry its run id. The
    exceptions: a safe call re-issued, same key and same call, right after an
    unknown outcome for that key; and the delay timer of a scheduled call a new
    incarnation carries over, armed again as it was. (Stable across replays:
    ``check_determinism``.)"""
    h = _history(run, input, events, start)
    seen: dict[str, tuple[int, Effect]] = {}
    prefix = h.run_id + "/"
    for i, turn in enumerate(h.turns):
        ev = turn.event
        for effect in turn.effects:
            if isinstance(effect, Settled):
                continue
            key = effect.idempotency_key
            if not key.startswith(prefix):
                _fail(f"{_at(h, i)}: key {key!r} does not start with the run id {prefix!r}")
            if key in seen:
                j, first = seen[key]
                reissue = (
                    isinstance(ev, EffectOutcomeUnknown)
                    and ev.idempotency_key == key
                    and isinstance(effect, (CallTool, RunSubflow, SignalRun))
                    and same_but_budget(effect, first)
                ) or (
                    i > 0
                    and ev is None  # the first decision of a new incarnation
                    and isinstance(effect, Sleep)
                    and effect == first
                    and parse_key(key, h.run_id).role is KeyRole.SCHEDULE_DELAY
                )
                if not reissue:
                    _fail(
                        f"{_at(h, i)}: key {key!r} emitted again as {_show(effect)}; "
                        f"first emitted at turn {j} as {_show(first)}"
                    )
            seen[key] = (i, effect)
    return h


def check_budget(
    run: RunHistory | Spec, input: Any = None, events: Events = (), **start: Any
) -> RunHistory:
    """The budget is never exceeded by the core and never negative.

    Every ``budgetRemaining`` is non-negative, within the limits and never
    grows; the run never issues more work effects than its step limit, never
    emits work once its wall clock is up, stays within every limit unless it
    settles ``budget-exhausted`` (only reported usage can overshoot, and then
    the run stops), and ``exhausted`` names a limit that really was reached.
    """
    h = _history(run, input, events, start)
    first = h.turns[0].state
    # The ledger itself is checked (its limits never change), so it is read as such.
    limits = first.ledger
    deadline = None if limits.wall_clock_ms is None else first.run.started_ms + limits.wall_clock_ms
    issued = 0
    last: BudgetRemaining | None = None
    for i, turn in enumerate(h.turns):
        state = turn.state
        if i and turn.event is None:  # a new incarnation: the flow's budget afresh
            if issued > (limits.steps if limits.steps is not None else issued):
                _fail(f"{_at(h, i - 1)}: {issued} work effects with a limit of {limits.steps}")
            limits, issued, last = state.ledger, 0, None
            wall = limits.wall_clock_ms
            deadline = None if wall is None else state.run.started_ms + wall
        led = state.ledger
        if (led.steps, led.cost, led.wall_clock_ms) != (
            limits.steps,
            limits.cost,
            limits.wall_clock_ms,
        ):
            _fail(f"{_at(h, i)}: the budget's limits changed from {limits} to {led}")
        if led.used_steps < 0 or led.used_cost < 0:
            _fail(f"{_at(h, i)}: negative usage in {led}")
        for effect in turn.effects:
            if not isinstance(effect, _WORK_EFFECTS):
                continue
            issued += 1
            if deadline is not None and state.now_ms >= deadline:
                _fail(
                    f"{_at(h, i)}: {_show(effect)} emitted at {state.now_ms}, at or after the "
                    f"wall-clock deadline {deadline}"
                )
            if isinstance(effect, (RunAgent, RunSubflow)):
                br = effect.budget_remaining
                values = (br.steps, br.cost_minor_units, br.wall_clock_ms)
                if any(v is not None and v < 0 for v in values):
                    _fail(f"{_at(h, i)}: negative budgetRemaining in {_show(effect)}")
                for name, value, limit in (
                    ("steps", br.steps, limits.steps),
                    ("cost", br.cost_minor_units, limits.cost),
                    ("wall clock", br.wall_clock_ms, limits.wall_clock_ms),
                ):
                    if limit is not None and (value is None or value > limit):
                        _fail(
                            f"{_at(h, i)}: budgetRemaining {name} {value} in {_show(effect)} "
                            f"is not within the limit {limit}"
                        )
                if last is not None:
                    for name, now_v, before in (
                        ("steps", br.steps, last.steps),
                        ("cost", br.cost_minor_units, last.cost_minor_units),
                        ("wall clock", br.wall_clock_ms, last.wall_clock_ms),
                    ):
                        if now_v is not None and before is not None and now_v > before:
                            _fail(
                                f"{_at(h, i)}: budgetRemaining {name} grew from {before} to "
                                f"{now_v} in {_show(effect)}"
                            )
                last = br
        settled = state.settled
        if settled is not None and turn.effects and settled.status == "budget-exhausted":
            # The host's timers are the authority on time: the deadline timer
            # firing is the deadline, whatever the clock in the event says.
            ev = turn.event
            base = incarnation_base(h.run_id, state.incarnation)
            fired = isinstance(ev, TimerFired) and ev.idempotency_key == deadline_key(base)
            # Work taken back in the settling decision has its step refunded
            # (and is reported not-started), so the steps used at the moment of
            # exhaustion may be up to that many more than the ledger now says.
            refunded = sum(1 for r in settled.report if r.status == "not-started")
            reached = {
                "steps": limits.steps is not None and led.used_steps + refunded >= limits.steps,
                "cost": limits.cost is not None and led.used_cost >= limits.cost,
                "wall-clock": deadline is not None and (state.now_ms >= deadline or fired),
            }
            if settled.exhausted is None or not reached[settled.exhausted]:
                _fail(
                    f"{_at(h, i)}: settled budget-exhausted ({settled.exhausted}) but that "
                    f"limit was not reached: {led}, now {state.now_ms}, deadline {deadline}"
                )
        elif settled is None or settled.status != "budget-exhausted":
            if limits.steps is not None and led.used_steps > limits.steps:
                _fail(f"{_at(h, i)}: {led.used_steps} steps used of {limits.steps}")
            if limits.cost is not None and led.used_cost > limits.cost:
                _fail(f"{_at(h, i)}: cost {led.used_cost} used of {limits.cost}")
    if limits.steps is not None and issued > limits.steps:
        _fail(f"run {h.run_id}: {issued} work effects issued with a step limit of {limits.steps}")
    return h


_EMITTED_AS = {  # what answers a key (``_answered_by``) -> what must have been emitted
    "work": (
        CallTool,
        RunAgent,
        RunTeam,
        SignalRun,
        RunSubflow,
    ),  # a detached start is answered as work
    "subflow": (RunSubflow,),
    "ask": (AskHuman,),
    "signal": (AwaitSignal,),
    "timer": (Sleep,),
}


def check_work_accounted(
    run: RunHistory | Spec, input: Any = None, events: Events = (), **start: Any
) -> RunHistory:
    """Every pending work effect is eventually answered or abandoned.

    While the run goes on, everything it waits for was emitted, and a running
    run waits for something (else nothing could ever move it). At settlement
    nothing is pending any more, and every work effect ever emitted is in the
    settled report with the status its last accepted answer gave it
    (succeeded, failed, or uncertain when unknown or never answered); report
    rows for work never emitted are ``not-started``.
    """
    h = _history(run, input, events, start)
    emitted: dict[str, Effect] = {}
    status: dict[str, str] = {}
    for i, turn in enumerate(h.turns):
        ev = turn.event
        # An answer at or after the wall-clock deadline settles the run
        # budget-exhausted, and the report still records how the work ended
        # (language.md, decisions): no exception here.
        if turn.rejected is None and ev is not None:
            key = getattr(ev, "idempotency_key", None)
            if key in emitted:
                if isinstance(ev, EffectSucceeded):
                    status[key] = "succeeded"
                elif isinstance(ev, EffectFailed):
                    status[key] = _failed_as(turn.state, emitted[key], ev)
                elif isinstance(ev, EffectOutcomeUnknown):
                    status[key] = "uncertain"
                elif isinstance(ev, SubflowSettled):
                    status[key] = "succeeded" if ev.status == "completed" else "failed"
        for effect in turn.effects:
            if isinstance(effect, _WORK_EFFECTS):
                emitted[effect.idempotency_key] = effect
                status.pop(effect.idempotency_key, None)
            elif not isinstance(effect, Settled):
                emitted[effect.idempotency_key] = effect
        state = turn.state
        continued = state.tree.continued
        if continued is not None:
            # The incarnation ended: its report accounts for its work, as a
            # settled report would; the next incarnation starts afresh.
            if turn.rejected is None and turn.effects:
                _check_report(h, i, state, continued.report, emitted, status)
            emitted, status = {}, {}
            continue
        if state.settled is None:
            waits = _answered_by(waiting_for(state))
            for key, what in waits.items():
                if not isinstance(emitted.get(key), _EMITTED_AS[what]):
                    _fail(f"{_at(h, i)}: the run waits for {key!r} ({what}), never emitted")
            if not waits:
                _fail(f"{_at(h, i)}: the run is {state.status} but waits for nothing: stuck")
            continue
        if turn.rejected is not None:
            continue
        _check_report(h, i, state, state.settled.report, emitted, status)
    return h


def _failed_as(state: State, effect: Effect, ev: EffectFailed) -> str:
    """The report status a failure gives its work: ``failed``, except a heartbeat
    timeout of watched work not safe to repeat, whose outcome is unknown
    (language.md §6: anything but a readonly or idempotent tool)."""
    if ev.error.type != "heartbeat-timeout" or not isinstance(
        effect, CallTool | RunAgent | RunTeam
    ):
        return "failed"
    if effect.heartbeat_timeout_ms is None:
        return "failed"
    if isinstance(effect, CallTool):
        decl = state.flow.tools.get(effect.tool)
        if decl is not None and decl.exec_class in ("readonly", "idempotent"):
            return "failed"
    return "uncertain"


def _check_report(
    h: RunHistory,
    i: int,
    state: State,
    rows: tuple[ReportEntry, ...],
    emitted: dict[str, Effect],
    status: dict[str, str],
) -> None:
    """At settlement (or the end of an incarnation) nothing is pending, and the
    report holds every work effect with the status its last answer gave it."""
    # The core's own bookkeeping must be emptied at settlement; its
    # in-flight count is not something a run waits for (waiting_for).
    if state.waiting.pending or state.waiting.in_flight:
        _fail(
            f"{_at(h, i)}: settled with {len(state.waiting.pending)} keys pending and "
            f"{state.waiting.in_flight} in flight: {sorted(state.waiting.pending.keys())[:5]}"
        )
    report: dict[str, str] = {}
    for row in rows:
        if row.idempotency_key in report:
            _fail(f"{_at(h, i)}: {row.idempotency_key!r} twice in the settled report")
        report[row.idempotency_key] = row.status
    for key, effect in emitted.items():
        if not isinstance(effect, _WORK_EFFECTS):
            continue
        if key not in report:
            _fail(
                f"{_at(h, i)}: work effect {key!r} ({_show(effect)}) is missing from "
                "the settled report"
            )
        want = status.get(key, "uncertain")
        if report[key] != want:
            _fail(
                f"{_at(h, i)}: the settled report says {key!r} {report[key]}, but its "
                f"last accepted answer makes it {want}"
            )
    for key, row_status in report.items():
        if key not in emitted and row_status != "not-started":
            _fail(
                f"{_at(h, i)}: the settled report says {key!r} {row_status}, but it "
                "was never emitted (it must be not-started)"
            )


def check_rejections(
    run: RunHistory | Spec, input: Any = None, events: Events = (), **start: Any
) -> RunHistory:
    """Rejected events leave the state byte-identical, and ``advance`` never mutates
    the state it is given (checked on histories recorded with ``paranoid``)."""
    h = _history(run, input, events, start)
    for i, turn in enumerate(h.turns):
        if turn.before is not None and turn.input_after is not None:
            if turn.before != turn.input_after:
                what = "rejecting" if turn.rejected is not None else "applying"
                _fail(f"{_at(h, i)}: {what} the event changed the state it was given")
        if turn.rejected is not None:
            if turn.effects:
                _fail(f"{_at(h, i)}: a rejected event emitted effects")
            if i and turn.state is not h.turns[i - 1].state:
                _fail(f"{_at(h, i)}: a rejected event replaced the state")
    return h


def _state_bytes(state: State, cache: dict[int, bytes], i: int) -> bytes:
    data = cache.get(i)
    if data is None:
        data = encode_state(state)
        cache[i] = data
    return data


def check_determinism(
    run: RunHistory | Spec, input: Any = None, events: Events = (), **start: Any
) -> RunHistory:
    """Same flow + same events => same effects and states, byte for byte.

    The run is driven a second time from the start, and resumed from a
    snapshot (``encode_state``/``decode_state``) before every event: each
    decision, rejection reason, effect and state snapshot must be identical,
    so idempotency keys are stable across replays.
    """
    h = _history(run, input, events, start)
    again = drive(
        h.flow,
        h.input,
        h.events(),
        run_id=h.run_id,
        now_ms=h.now_ms,
        budget=h.budget,
        depth=h.depth,
        metadata=h.metadata,
    )
    mine: dict[int, bytes] = {}
    for i, (a, b) in enumerate(zip(h.turns, again.turns, strict=True)):
        _same_turn(h, i, a, b, _state_bytes(a.state, mine, i), "a second run over the same events")
    for i in range(len(h.turns) - 1):
        state = decode_state(_state_bytes(h.turns[i].state, mine, i), h.flow)
        nxt = h.turns[i + 1]
        if nxt.event is None:  # the next incarnation, from the effect in the snapshot
            effect = state.tree.continued
            assert effect is not None
            at = nxt.state.run.started_ms
            d = continue_run(h.flow, effect, h.run_id, at, h.depth)
            resumed = Turn(None, d.effects, d.state)
            _same_turn(
                h,
                i + 1,
                nxt,
                resumed,
                _state_bytes(nxt.state, mine, i + 1),
                f"a run continued from the snapshot after turn {i}",
            )
            continue
        try:
            d = advance(state, nxt.event)
        except EventRejected as exc:
            resumed = Turn(nxt.event, (), state, exc.reason)
        else:
            resumed = Turn(nxt.event, d.effects, d.state)
        _same_turn(
            h,
            i + 1,
            nxt,
            resumed,
            _state_bytes(nxt.state, mine, i + 1),
            f"a run resumed from the snapshot after turn {i}",
        )
    return h


def _same_turn(h: RunHistory, i: int, a: Turn, b: Turn, a_bytes: bytes, how: str) -> None:
    if a.rejected != b.rejected:
        _fail(f"{_at(h, i)}: rejected {a.rejected!r}, but {how} says {b.rejected!r}")
    ea = [encode_effect(e) for e in a.effects]
    eb = [encode_effect(e) for e in b.effects]
    if ea != eb:
        _fail(
            f"{_at(h, i)}: effects differ in {how}:\n  "
            + "\n  ".join(x.decode() for x in ea)
            + "\nvs\n  "
            + "\n  ".join(x.decode() for x in eb)
        )
    if a_bytes != encode_state(b.state):
        _fail(f"{_at(h, i)}: the state snapshot differs in {how}")


def check_history(run: RunHistory) -> RunHistory:
    """Every check that needs no re-run: settlement, keys, budget, work, rejections."""
    check_settlement(run)
    check_keys(run)
    check_budget(run)
    check_work_accounted(run)
    check_rejections(run)
    return run


def check_run(
    run: RunHistory | Spec, input: Any = None, events: Events = (), **start: Any
) -> RunHistory:
    """Drive a run over ``events`` (or take a recorded history) and check every
    invariant; ``start`` takes ``run_id``, ``now_ms``, ``budget``, ``depth``.
    Returns the run's history."""
    h = _history(run, input, events, start)
    check_history(h)
    check_determinism(h)
    return h


def check_trajectory(trajectory: Trajectory, determinism: bool = True) -> None:
    """Check a simulation: every run (children too) keeps every invariant, children
    never get more budget than their parent had left, logs are well formed, and
    no run was left waiting for an answer the simulator could give."""
    runs = trajectory.histories
    for run_id, h in runs.items():
        check_history(h)
        if determinism:
            check_determinism(h)
        records = trajectory.log_of(run_id)
        if [r.index for r in records] != list(range(len(records))):
            _fail(f"run {run_id}: log indices are not 0..{len(records) - 1}")
        if not records or records[0].type != "run.started":
            _fail(f"run {run_id}: the log does not open with run.started")
        settled_records = [r for r in records if r.type == "run.settled"]
        if len(settled_records) != (1 if h.state.settled is not None else 0):
            _fail(f"run {run_id}: {len(settled_records)} run.settled records")
        emitted = sum(1 for r in records if r.type == "effect.emitted")
        if emitted != len(h.effects()):
            _fail(f"run {run_id}: {emitted} effect.emitted records for {len(h.effects())} effects")
        if isinstance(h.budget, BudgetRemaining):
            given = h.budget
            led = h.turns[0].state.ledger  # the limits it got: waiting_for shows what is left
            for name, got, limit in (
                ("steps", led.steps, given.steps),
                ("cost", led.cost, given.cost_minor_units),
                ("wall clock", led.wall_clock_ms, given.wall_clock_ms),
            ):
                if limit is not None and (got is None or got > limit):
                    _fail(
                        f"child run {run_id} got a {name} budget of {got}, more than the "
                        f"{limit} its parent had left"
                    )


# --- the state machine -------------------------------------------------------------------------

_CHOICE = st.integers(0, 2**16)


class FlowMachine(RuleBasedStateMachine):
    """Drive one run of ``flow`` with hypothesis rules; check the invariants after each.

    Subclass it and set ``flow`` (a ``Flow`` or a spec) and ``input``; hypothesis
    then explores sequences of rules: deliver a result, fail, report an
    unknown outcome, re-send an event (duplicate), advance the clock (fire the
    timers that are due), send a signal, answer a question, cancel, and send
    hostile events. ``outputs`` maps a tool, agent or team id to the output
    its results carry (a value, or a callable taking the effect). After every
    rule the history so far must pass ``check_history``; at the end of each
    example, ``check_determinism``.

    Use it as ``TestMyFlow = MyFlowMachine.TestCase``.
    """

    flow: ClassVar[Flow | str | Mapping[str, Any] | None] = None
    input: ClassVar[Any] = None
    run_id: ClassVar[str] = "r"
    outputs: ClassVar[Mapping[str, Any]] = {}
    _parsed: ClassVar[dict[type, Flow]] = {}

    def __init__(self) -> None:
        super().__init__()
        cls = type(self)
        flow = cls._parsed.get(cls)
        if flow is None:
            if cls.flow is None:
                raise TypeError(f"{cls.__name__} must set flow = <a Flow or a spec>")
            flow = as_flow(cls.flow)
            cls._parsed[cls] = flow
        history = drive(flow, cls.input, run_id=cls.run_id)
        self.host = _Host(history, paranoid=True, outputs=self._output_for)

    def _output_for(self, effect: Effect, choice: int) -> Any:
        target = getattr(effect, "tool", None) or getattr(effect, "agent_id", None)
        target = target or getattr(effect, "team_id", None)
        if isinstance(target, str) and target in self.outputs:
            out = self.outputs[target]
            return out(effect) if callable(out) else out
        return _output(choice)

    @property
    def history(self) -> RunHistory:
        return self.host.h

    def send(self, event: Event) -> Turn:
        return self.host.send(event)

    @precondition(lambda self: self.host.has("work"))
    @rule(choice=_CHOICE)
    def deliver_result(self, choice: int) -> None:
        self.send(self.host.make("succeed", choice))

    @precondition(lambda self: self.host.has("work"))
    @rule(choice=_CHOICE)
    def fail(self, choice: int) -> None:
        self.send(self.host.make("fail", choice))

    @precondition(lambda self: self.host.has("work"))
    @rule(choice=_CHOICE)
    def outcome_unknown(self, choice: int) -> None:
        self.send(self.host.make("unknown", choice))

    @precondition(lambda self: self.host.has("subflow"))
    @rule(choice=_CHOICE)
    def settle_subflow(self, choice: int) -> None:
        self.send(self.host.make("subflow", choice))

    @precondition(lambda self: self.host.has("sent"))
    @rule(choice=_CHOICE)
    def duplicate(self, choice: int) -> None:
        self.send(self.host.make("duplicate", choice))

    @precondition(lambda self: self.host.has("timer"))
    @rule(ms=st.integers(0, 100_000_000))
    def advance_clock(self, ms: int) -> None:
        """Fire, in due order, every timer due within ``ms`` of the host's clock."""
        horizon = self.host.clock + ms
        for _ in range(100):  # a cadence of 1 ms would otherwise take a while
            due = self.host.due_timers()
            if not due or due[0][0] > horizon:
                break
            until, key = due[0]
            self.send(TimerFired(idempotency_key=key, at_ms=max(until, self.host.clock)))
        self.host.clock = max(self.host.clock, horizon)

    @rule(choice=_CHOICE)
    def signal(self, choice: int) -> None:
        self.send(self.host.make("signal", choice))

    @precondition(lambda self: self.host.has("ask"))
    @rule(choice=_CHOICE)
    def answer(self, choice: int) -> None:
        self.send(self.host.make("answer", choice))

    @rule(choice=_CHOICE)
    def cancel(self, choice: int) -> None:
        self.send(self.host.make("cancel", choice))

    @rule(op=st.integers(_FRIENDLY, 99), choice=_CHOICE)
    def hostile(self, op: int, choice: int) -> None:
        self.send(self.host.make(_OPS[op], choice))

    @rule(choice=_CHOICE)
    def late_result(self, choice: int) -> None:
        self.send(self.host.make("stale", choice))

    @invariant()
    def invariants_hold(self) -> None:
        check_history(self.host.h)

    def teardown(self) -> None:
        check_determinism(self.host.h)
