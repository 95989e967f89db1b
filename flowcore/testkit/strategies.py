"""The hypothesis strategies: flows, their inputs, events, event streams and faults."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any

from hypothesis import strategies as st

from ..decision.state import State
from ..decision.wire import (
    BudgetRemaining,
    Event,
)
from ..language.spec import Budget
from .events import _FRIENDLY, events_from_moves, hostile_events, pending_events
from .simulator import (
    FAULT_KINDS,
    Fault,
    Spec,
    as_flow,
)
from .vocabulary import (
    _LEAF_KINDS,
    _NEST_KINDS,
    _TOOL_NAMES,
    AGENTS,
    META_FIELDS,
    SIGNAL_KEY,
    SIGNALS,
    TEAMS,
    TOOLS,
    UPDATE_EXAMPLES,
    UPDATE_NAMES,
)

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
            # How the branches share the budget (language.md §11.7), from the same draw.
            if shape % 5 == 1:
                par["share"] = "first-come"
            elif shape % 5 == 2:
                par["weights"] = {names[0]: 3}
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
            if width == 2:
                each["share"] = "first-come"
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
    if deco % 11 == 6 and kind in ("run_agent", "run_team", "run_subflow"):  # a capped share
        step["max_usage"] = {"steps": deco % 4, "cost_minor_units": deco % 3}
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
    updates: bool = False,
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
    ``child`` (``CHILD_SPEC``). With ``updates``, about half of them declare
    updates (``UPDATE_NAMES``, each with the inputs ``UPDATE_EXAMPLES`` as its
    examples, a handler of one or two steps, sometimes a validator, a reply
    and a ``max_running_updates`` limit) and a query ``peek``.
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
    if updates and draw(st.booleans()):
        _updates(draw, ids, knobs, spec)
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


def _updates(draw: st.DrawFn, ids: _Ids, knobs: _Knobs, spec: dict[str, Any]) -> None:
    """Declare one or both of ``UPDATE_NAMES``, and a query, in ``spec``."""
    top = [step["id"] for step in spec["steps"]]
    decls: dict[str, Any] = {}
    for name in UPDATE_NAMES[: draw(st.integers(1, len(UPDATE_NAMES)))]:
        shape = draw(st.integers(0, 15))
        handler = [_leaf(draw, ids, draw(st.sampled_from(knobs.leaves)), top)]
        if shape % 2:
            handler.append(_leaf(draw, ids, draw(st.sampled_from(knobs.leaves)), top))
        decl: dict[str, Any] = {
            "input_schema": {
                "type": "object",
                "properties": {"by": {"type": "string"}},
                "required": ["by"],
            },
            "examples": list(UPDATE_EXAMPLES),
            "steps": handler,
        }
        if shape // 2 % 2:
            decl["validator"] = "update.input.by != 'bob'"
        if shape // 4 % 2:
            decl["reply"] = (
                f"${{ {{by: update.input.by, last: steps.{handler[-1]['id']}.output}} }}"
            )
        decls[name] = decl
    spec["updates"] = decls
    spec["queries"] = {"peek": {"value": "${ {status: status, updates: updates} }"}}
    if draw(st.booleans()):
        spec.setdefault("limits", {})["max_running_updates"] = draw(st.integers(1, 2))


def flow_inputs() -> st.SearchStrategy[dict[str, Any]]:
    """Inputs that fit ``flows()``: a flag, a short item list and a number."""
    return st.fixed_dictionaries(
        {
            "flag": st.booleans(),
            "items": st.lists(st.integers(0, 9), max_size=3),
            "n": st.integers(0, 100),
        }
    )


def events_for(state: State) -> st.SearchStrategy[Event]:
    """One event for ``state``: usually a fitting one, sometimes a hostile one."""
    fitting = pending_events(state)
    hostile = hostile_events(state)
    return st.one_of(st.sampled_from(fitting), st.sampled_from(hostile))


def moves(max_size: int = 40, hostile: bool = True) -> st.SearchStrategy[list[tuple[int, int]]]:
    """Lists of ``(op, choice)`` moves for ``events_from_moves`` (see ``MOVES``)."""
    top = 99 if hostile else _FRIENDLY - 1
    return st.lists(st.tuples(st.integers(0, top), st.integers(0, 2**16)), max_size=max_size)


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
