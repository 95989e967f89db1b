"""What a flow's expressions read, checked against what exists where they stand.

``parse_flow`` runs this over the raw spec (tolerant of anything the structure
pass reports). For every ``${...}`` template and bare condition it refuses,
from the spec alone:

- a name read from the context that does not exist where the expression is
  evaluated (``stepz``; ``error`` outside a catch clause; a loop variable
  outside its loop), naming those that do;
- a field that a record of known shape never has: a step's result
  (``status``, ``output``, ``error``, and ``answer`` for ``ask_human``), an
  error, ``run``, ``schedule``;
- ``steps.<id>`` for an id not in the flow, or for a step whose result can
  never be there when the expression is evaluated: a later step of the same
  list, a step inside the reading step, the reading step itself or one it is
  inside, another case of a ``switch``, another catch clause, a ``catch``
  read from its ``try`` steps, a later branch of a ``parallel`` that runs
  one branch at a time, a step inside a loop read from outside it, a
  compensation or one of ``on_budget_exhausted``'s steps read where they
  cannot have run;
- a JMESPath function call that fails whenever it is evaluated;
- ``${...}`` in a field that is a name, not a template (``await_signal.signal``):
  it would be used as written.

Where a step may or may not have run (a branch not taken, a step after a
failure, a step of a branch running beside the reader), reading it is
allowed: its result is ``null`` then. The check is
conservative: inside a composite step with ``retry`` its children's results
of an earlier attempt stay readable, so no order is assumed there, and a
compensation (which runs as the run winds down) may read anything it can see.

This module never does I/O.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

from .expr import TemplateError, find_expressions, reads
from .hooks import _did_you_mean, _strings
from .model import _IDENT, _KINDS
from .walk import _handlers, _own_strings, _step_lists

__all__ = ["check_reads"]

Found = list[tuple[tuple[Any, ...], str]]

RESULT_FIELDS = ("status", "output", "error", "answer")
ERROR_FIELDS = ("type", "message", "retryable", "details", "cause", "attempts")
RUN_FIELDS = ("id", "flow", "version", "depth", "attempt", "incarnation")
SCHEDULE_FIELDS = ("at", "at_ms", "name")
UPDATE_FIELDS = ("id", "name", "input", "principal")
BASE_ROOTS = ("input", "steps", "run")

# Where the names that exist only in some places do exist.
_ONLY_IN = {
    "error": "inside a catch clause's steps",
    "fire_count": "inside a repeat's steps and its until",
    "payload": "in an await_signal's where",
    "received": "in an await_signal's until",
    "members": "in a run_team's prompt and its team's member instructions",
    "schedule": "in the input of a schedule under the top-level schedules",
    "update": "in an update's validator, steps and reply",
    "args": "in a query's value",
    "metadata": "in a query's value",
    "status": "in a query's value",
    "waiting": "in a query's value",
    "updates": "in a query's value",
}

# What a query's value reads beside the run's input, steps and run.
QUERY_ROOTS = {
    "args": "the query's arguments",
    "metadata": "the run's metadata",
    "status": "the run's status",
    "output": "the settled run's output",
    "error": "the settled run's error",
    "waiting": "what the run waits for",
    "updates": "the run's updates",
}

# Fields that are names, not templates: a ``${...}`` in one would be taken as
# text (``await_signal`` would wait for a signal of that literal name).
_NAMES = frozenset(
    {
        ("await_signal", "signal"),
        ("await_signal", "signals"),
        ("run_subflow", "flow"),
        ("run_agent", "agent"),
        ("run_agent", "member"),
        ("run_team", "team"),
        ("ask_human", "options"),
        ("ask_human", "default"),
    }
)

_BODY = ("body",)
_COMPENSATE = ("compensate",)
_MAIN = ("main",)
_FINAL = ("final",)
_LAST = 1 << 62  # a place after every step of a list (a repeat's until)


class _Seg(NamedTuple):
    """One level of a step's place: the list it is in (``owner``, the step that
    holds the list, ``""`` for the flow's own lists; ``lane``, which of its
    lists) and its index there."""

    owner: str
    lane: tuple[Any, ...]
    pos: int


Place = tuple[_Seg, ...]


class _Info(NamedTuple):
    kind: str
    place: Place
    body: Any
    retried: bool


class _Steps(dict[str, _Info]):
    """The flow's steps by id (the first of a duplicate id), and, in
    ``loop_vars``, each for_each variable name with the first loop defining it."""

    loop_vars: dict[str, str]


class _Reader(NamedTuple):
    """Where an expression is evaluated: ``what`` is ``step`` (a step's own
    field, as the step begins), ``output``, ``final_output``, or ``anywhere``
    (no order checked: team instructions)."""

    what: str
    place: Place
    roots: dict[str, str]  # name -> what it is (for messages)


def _kind(step: Mapping[str, Any]) -> str:
    return next((k for k in step if k in _KINDS), "")


def _retried(step: Mapping[str, Any]) -> bool:
    retry = step.get("retry")
    if not isinstance(retry, dict):
        return False
    attempts = retry.get("max_attempts", 3)
    return not isinstance(attempts, int) or attempts > 1


def _lanes(
    step: Mapping[str, Any], path: tuple[Any, ...]
) -> Iterator[tuple[list[Any], tuple[Any, ...], tuple[Any, ...]]]:
    """The lists of steps inside one raw step, each with its path and lane."""
    for steps, where in _step_lists(step, path):
        rest = where[len(path) :]
        if rest[0] in ("for_each", "repeat"):
            lane: tuple[Any, ...] = _BODY
        elif rest[0] == "try":
            lane = ("try",)
        elif rest[0] == "catch":
            lane = ("catch", rest[1])
        elif rest[0] == "compensate":
            lane = _COMPENSATE
        elif rest[0] == "switch":
            lane = ("case", rest[1])
        else:
            lane = ("branch", rest[2])
        yield steps, where, lane


def _places(
    steps: list[Any], path: tuple[Any, ...], owner: str, lane: tuple[Any, ...], above: Place
) -> Iterator[tuple[dict[str, Any], tuple[Any, ...], Place]]:
    for i, step in enumerate(steps):
        if not isinstance(step, dict):
            continue
        here = (*path, i)
        place = (*above, _Seg(owner, lane, i))
        yield step, here, place
        sid = step.get("id")
        inner_owner = sid if isinstance(sid, str) else ""
        for inner, inner_path, inner_lane in _lanes(step, here):
            yield from _places(inner, inner_path, inner_owner, inner_lane, place)


def _all_places(raw: Mapping[str, Any]) -> Iterator[tuple[dict[str, Any], tuple[Any, ...], Place]]:
    steps = raw.get("steps")
    if isinstance(steps, list):
        yield from _places(steps, ("steps",), "", _MAIN, ())
    final = raw.get("on_budget_exhausted")
    if isinstance(final, dict) and isinstance(final.get("steps"), list):
        yield from _places(final["steps"], ("on_budget_exhausted", "steps"), "", _FINAL, ())
    for name, handler in _handlers(raw):
        yield from _places(handler, ("updates", name, "steps"), "", ("update", name), ())


def _roots(place: Place, info: _Steps) -> dict[str, str]:
    """The names an expression at ``place`` reads, with what each is."""
    roots = {"input": "the run's input", "steps": "step results", "run": "the run"}
    if place and place[0].lane[0] == "update":
        roots["update"] = f"the update {place[0].lane[1]!r}: id, name, input, principal"
    for seg in place:
        owner = info.get(seg.owner)
        if owner is None:
            continue
        if seg.lane == _BODY and owner.kind == "for_each":
            body = owner.body if isinstance(owner.body, dict) else {}
            for key, default in (("as", "item"), ("index", "index")):
                name = body.get(key, default)
                if isinstance(name, str) and _IDENT.match(name):
                    roots[name] = f"a variable of for_each {seg.owner!r}"
        elif seg.lane == _BODY and owner.kind == "repeat":
            roots["fire_count"] = f"the fire of repeat {seg.owner!r}"
        elif seg.lane[0] == "catch":
            roots["error"] = f"the error caught by {seg.owner!r}"
    return roots


def check_reads(raw: Mapping[str, Any]) -> Found:
    """Every problem of what the spec's expressions read (see the module docstring)."""
    info = _Steps()
    info.loop_vars = {}
    placed: list[tuple[dict[str, Any], tuple[Any, ...], Place]] = []
    for step, path, place in _all_places(raw):
        placed.append((step, path, place))
        sid = step.get("id")
        if isinstance(sid, str) and _IDENT.match(sid) and sid not in info:
            kind = _kind(step)
            info[sid] = _Info(kind, place, step.get(kind), _retried(step))
            body = step.get(kind)
            if kind == "for_each" and isinstance(body, dict):
                for name in (body.get("as", "item"), body.get("index", "index")):
                    if isinstance(name, str):
                        info.loop_vars.setdefault(name, sid)
    out: Found = []
    team_roots: dict[str, dict[str, str]] = {}
    for step, path, place in placed:
        roots = _roots(place, info)
        kind = _kind(step)
        if kind == "run_team" and isinstance(step.get(kind), dict):
            team = step[kind].get("team")
            if isinstance(team, str):
                team_roots.setdefault(team, {}).update(roots)
        for text, spath, cond in _own_strings(step, path):
            here = roots
            at = place
            key = spath[len(path) + 1] if len(spath) > len(path) + 1 else None
            if (kind, key) in _NAMES and find_expressions(text):
                message = (
                    f"{kind}.{key} is a name, used as written: '${{...}}' in it is not evaluated"
                )
                out.append((spath, message))
                continue
            if kind == "repeat" and key == "until":
                here = {**roots, "fire_count": f"the fire of repeat {step.get('id')!r}"}
                at = (*place, _Seg(str(step.get("id")), _BODY, _LAST))
            elif kind == "await_signal" and key == "where":
                here = {**roots, "payload": "the signal's payload"}
            elif kind == "await_signal" and key == "until":
                here = {**roots, "received": "the signals taken so far"}
            elif kind == "run_team" and key == "prompt":
                here = {**roots, "members": "the outputs of the members that finished"}
            _check(text, cond, spath, _Reader("step", at, here), info, out)
        for key in ("timeout_ms", "attempt_timeout_ms", "heartbeat_timeout_ms"):
            if isinstance(step.get(key), str):
                _check(step[key], False, (*path, key), _Reader("step", place, roots), info, out)
    base = _roots((), info)
    for where, what in ((("output",), "output"), (("on_budget_exhausted", "output"), "final")):
        value = raw.get(where[0])
        if len(where) == 2:
            value = value.get(where[1]) if isinstance(value, dict) else None
        reader = _Reader("output" if what == "output" else "final_output", (), base)
        for text, spath in _strings(value, where, frozenset()):
            _check(text, False, spath, reader, info, out)
    _check_teams(raw, team_roots, base, info, out)
    _check_schedules(raw, info, out)
    _check_declarations(raw, base, info, out)
    return list(dict.fromkeys(out))  # once each, in order


def _check_teams(
    raw: Mapping[str, Any],
    team_roots: dict[str, dict[str, str]],
    base: dict[str, str],
    info: _Steps,
    out: Found,
) -> None:
    teams = raw.get("teams")
    if not isinstance(teams, dict):
        return
    for name, decl in teams.items():
        members = decl.get("members") if isinstance(decl, dict) else None
        if not isinstance(members, list):
            continue
        roots = {
            **team_roots.get(name, base),
            "members": "the outputs of the members that finished",
        }
        for i, member in enumerate(members):
            if isinstance(member, dict) and "instructions" in member:
                where = ("teams", name, "members", i, "instructions")
                for text, spath in _strings(member["instructions"], where, frozenset()):
                    _check(text, False, spath, _Reader("anywhere", (), roots), info, out)


def _check_schedules(raw: Mapping[str, Any], info: _Steps, out: Found) -> None:
    schedules = raw.get("schedules")
    if not isinstance(schedules, dict):
        return
    roots = {"schedule": "the slot: at, at_ms, name"}
    for name, definition in schedules.items():
        if not isinstance(definition, dict) or "input" not in definition:
            continue
        where = ("schedules", str(name), "input")
        for text, spath in _strings(definition["input"], where, frozenset()):
            _check(text, False, spath, _Reader("anywhere", (), roots), info, out)


def _check_declarations(
    raw: Mapping[str, Any], base: dict[str, str], info: _Steps, out: Found
) -> None:
    """An update's validator (before its steps) and reply (after them); a query's value."""
    updates = raw.get("updates")
    for name, decl in updates.items() if isinstance(updates, dict) else ():
        if not isinstance(decl, dict):
            continue
        lane = ("update", name)
        roots = _roots((_Seg("", lane, 0),), info)
        for key, pos, cond in (("validator", -1, True), ("reply", _LAST, False)):
            if key in decl:
                at = (_Seg("", lane, pos),)
                for text, spath in _strings(decl[key], ("updates", name, key), frozenset()):
                    _check(text, cond, spath, _Reader("step", at, roots), info, out)
    queries = raw.get("queries")
    for name, decl in queries.items() if isinstance(queries, dict) else ():
        if isinstance(decl, dict) and "value" in decl:
            reader = _Reader("output", (), {**base, **QUERY_ROOTS})
            for text, spath in _strings(decl["value"], ("queries", name, "value"), frozenset()):
                _check(text, False, spath, reader, info, out)


def _check(
    text: str,
    cond: bool,
    path: tuple[Any, ...],
    reader: _Reader,
    info: _Steps,
    out: Found,
) -> None:
    try:
        chains, problems = reads(text, cond)
    except TemplateError:
        return  # reported by the structure pass
    for message in problems:
        out.append((path, message))
    for chain in chains:
        problem = _chain_problem(chain, reader, info)
        if problem is not None:
            out.append((path, problem))


def _chain_problem(chain: tuple[str, ...], reader: _Reader, info: _Steps) -> str | None:
    root = chain[0]
    if root == "null" and len(chain) == 1:
        return None  # a name never defined reads null: the same as `null`
    if root in ("true", "false") and len(chain) == 1:
        return (
            f"expression reads a name {root!r}, which is not defined here: a JSON literal"
            f" is written in backticks in JMESPath (`{root}`)"
        )
    if root not in reader.roots:
        if root == "steps" and "schedule" in reader.roots:
            return None  # a schedule's input: check_schedule says it reads no steps
        hint = _did_you_mean(root, reader.roots)
        known = ", ".join(reader.roots)
        where: str | None = _ONLY_IN.get(root)
        if where is None and not hint:
            loop = info.loop_vars.get(root)
            if loop is not None:
                where = f"inside the steps of for_each {loop!r}"
        only = f"; {root!r} exists only {where}" if where else ""
        return (
            f"expression reads {root!r}, which is not defined here{hint}{only};"
            f" here it can read {known}"
        )
    rest = chain[1:]
    if not rest:
        return None
    if root == "run":
        return _field_problem("run", rest[0], RUN_FIELDS)
    if root == "schedule":
        return _field_problem("schedule", rest[0], SCHEDULE_FIELDS)
    if root == "error" and "args" not in reader.roots:  # a query's is the settled run's
        return _error_problem("the caught error", rest)
    if root == "update":
        return _field_problem("update", rest[0], UPDATE_FIELDS)
    if root != "steps":
        return None
    target = rest[0]
    found = info.get(target)
    if found is None:
        hint = _did_you_mean(target, info)
        return f"expression reads unknown step {target!r}{hint}"
    if len(rest) > 1:
        field = rest[1]
        if field == "answer" and found.kind not in ("ask_human", ""):
            return (
                f"step {target!r} is a {found.kind}: only an ask_human step's result has"
                " 'answer' (read 'output')"
            )
        fields = RESULT_FIELDS if found.kind in ("ask_human", "") else RESULT_FIELDS[:3]
        problem = _field_problem(f"the result of step {target!r}", field, fields)
        if problem is not None:
            return problem
        if field == "error" and len(rest) > 2:
            problem = _error_problem(f"the error of step {target!r}", rest[2:])
            if problem is not None:
                return problem
    return _order_problem(target, found, reader, info)


def _field_problem(what: str, field: str, fields: tuple[str, ...]) -> str | None:
    if field in fields:
        return None
    hint = _did_you_mean(field, fields)
    return f"{what} has no field {field!r}{hint}: it has {', '.join(fields)}"


def _error_problem(what: str, rest: tuple[str, ...]) -> str | None:
    while rest:
        problem = _field_problem(what, rest[0], ERROR_FIELDS)
        if problem is not None or rest[0] != "cause":
            return problem
        what, rest = f"the cause of {what}", rest[1:]
    return None


def _order_problem(target: str, found: _Info, reader: _Reader, info: _Steps) -> str | None:
    """Why ``steps.<target>`` can never hold a result where ``reader`` reads it, or None."""
    if reader.what == "anywhere":
        return None  # evaluated where the spec does not say (team instructions)
    tp, rp = found.place, reader.place
    never = "so it reads null here"
    reader_loops = {seg.owner for seg in rp if seg.lane == _BODY}
    for seg in tp:
        if seg.lane == _BODY and seg.owner not in reader_loops:
            loop = info.get(seg.owner)
            if loop is not None and loop.kind == "repeat":
                return (
                    f"step {target!r} is inside the steps of repeat {seg.owner!r} and this is"
                    f" not: its result is gone when each fire ends, {never}; read it in the"
                    " repeat's steps or its until"
                )
            return (
                f"step {target!r} is inside the steps of for_each {seg.owner!r} and this is"
                f" not: its result is gone when each iteration ends, {never}; read"
                f" steps.{seg.owner}.output (the outputs of the iterations) instead"
            )
    handler = tp[0].lane if tp and tp[0].lane[0] == "update" else None
    if handler is not None and (not rp or rp[0].lane != handler):
        return (
            f"step {target!r} is in the steps of update {handler[1]!r} and this is not:"
            f" its result is gone when the update ends, {never}; an update's steps are"
            " read only by its own steps and reply"
        )
    reader_compensates = any(seg.lane == _COMPENSATE for seg in rp)
    if any(seg.lane == _COMPENSATE for seg in tp) and not reader_compensates:
        return (
            f"step {target!r} runs only as a compensation, when the run winds down after a"
            f" failure or a cancel, {never}"
        )
    if reader_compensates or reader.what in ("anywhere", "final_output"):
        return None  # evaluated when anything it can see may have run
    target_final = bool(tp) and tp[0].lane == _FINAL
    final_step = (
        f"step {target!r} is one of on_budget_exhausted's steps, which run only once the"
        f" budget has run out and the flow's own steps have stopped, {never}"
    )
    if reader.what == "output":
        return final_step if target_final else None
    reader_final = bool(rp) and rp[0].lane == _FINAL
    if target_final != reader_final:
        return final_step if target_final else None
    k = 0
    while k < len(rp) and k < len(tp) and rp[k] == tp[k]:
        k += 1
    # A composite with retry around both: an earlier attempt's results stay.
    if any(info[seg.owner].retried for seg in tp[1 : k + 1] if seg.owner in info):
        return None
    if k == len(tp) == len(rp):
        return (
            f"step {target!r} reads its own result, which is recorded only when the step"
            f" ends, {never}"
        )
    if k == len(tp):
        return (
            f"this is inside step {target!r}, whose result is recorded only when it ends, {never}"
        )
    if k == len(rp):
        return f"step {target!r} runs inside step {tp[k].owner!r}, after this is evaluated, {never}"
    mine, theirs = rp[k], tp[k]
    if mine.lane == theirs.lane:
        if theirs.pos < mine.pos:
            return None
        return f"step {target!r} comes after this in the same steps (it has not run yet), {never}"
    owner = info.get(mine.owner)
    kind = owner.kind if owner is not None else ""
    if kind == "switch":
        return (
            f"step {target!r} is in another case of switch {mine.owner!r} (one case runs), {never}"
        )
    if kind == "parallel":
        body = owner.body if owner is not None and isinstance(owner.body, dict) else {}
        named = body.get("branches")
        branches = list(named) if isinstance(named, dict) else []
        a, b = mine.lane[1], theirs.lane[1]
        if body.get("max_concurrency") == 1 and a in branches and b in branches:
            if branches.index(b) > branches.index(a):
                return (
                    f"step {target!r} is in branch {b!r} of parallel {mine.owner!r}, which"
                    f" starts only after this branch {a!r} has ended (max_concurrency: 1),"
                    f" {never}"
                )
        # Branches that run at the same time: it may have ended, or not yet.
        return None
    if kind == "try":
        if mine.lane[0] == "catch" and theirs.lane[0] == "try":
            return None
        if mine.lane[0] == "try":
            return (
                f"step {target!r} is in a catch clause of {mine.owner!r}, which runs only after"
                f" its try steps have failed, {never}"
            )
        return (
            f"step {target!r} is in another catch clause of {mine.owner!r} (at most one runs),"
            f" {never}"
        )
    return None
