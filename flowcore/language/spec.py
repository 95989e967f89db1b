"""Flow specs: the model, and ``parse_flow`` that builds it from YAML or JSON.

Parsing happens in two passes that both always run, so that a bad spec is
reported with every problem at once:

1. structure: cattrs turns the untrusted mapping into the frozen attrs model,
   collecting every type error, unknown key, bad number, bad expression and
   bad cron string with the exact path of the field;
2. cross-references: a tolerant walk over the raw mapping finds duplicate step
   ids, calls to undeclared tools and expressions that read unknown step ids.

A name that is not known (a key, a step kind, a choice, a tool, a step id) is
reported with the closest known one when there is a close one (difflib's
cutoff): ``unknown key 'clas' (did you mean 'class'?)``.

Paths look like ``steps[3].parallel.branches.sec[0].call_tool.tool``; when the
spec was text, each problem also carries the 1-based line and column, taken
from the YAML node tree (JSON is parsed by the same YAML reader, so JSON
specs get positions too).

Reading files is I/O: this module parses text, the caller reads the file.

The parts live by concern: the model in ``model``, the structure hooks in
``hooks`` and the converter built from them in ``converter``, the
cross-references in ``refs``, the YAML positions in ``positions``.
This module holds ``parse_flow`` and its checks, and re-exports their names.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from itertools import islice
from typing import Any

import attrs
import cattrs
import msgspec
import yaml

from .._data import first_surrogate
from .._data import problems as data_problems
from .._errors import Problem, SpecError
from .converter import _build_converter
from .expr import Template, find_expressions
from .hooks import _collect, _describe, _unknown_key
from .hooks import _did_you_mean as _did_you_mean
from .hooks import _strings as _strings
from .hooks import _wire_key as _wire_key
from .metadata import MetaType, name_problem, value_problem
from .model import _COMMON as _COMMON
from .model import _IDENT as _IDENT
from .model import _KINDS as _KINDS
from .model import _TOP as _TOP
from .model import MAX_AMOUNT as MAX_AMOUNT
from .model import MAX_COUNT as MAX_COUNT
from .model import MAX_MS as MAX_MS
from .model import RESERVED_NAMES as RESERVED_NAMES
from .model import (
    AgentDecl,
    AskHumanStep,
    AwaitSignalStep,
    Budget,
    CallToolStep,
    Cancellation,
    CancelScheduledStep,
    CatchClause,
    ContinueAsNewStep,
    Defaults,
    Duration,
    DurationExpr,
    FailStep,
    Flow,
    ForEachStep,
    Limits,
    MaxUsage,
    ParallelStep,
    RepeatStep,
    Retry,
    RunAgentStep,
    RunSubflowStep,
    RunTeamStep,
    ScheduleStep,
    SetMetadataStep,
    SignalRunStep,
    SleepStep,
    Step,
    SwitchCase,
    SwitchStep,
    TeamDecl,
    TeamMember,
    ToolDecl,
    TryStep,
    UsageCap,
    duration_text,
)
from .model import Amount as Amount
from .model import Count as Count
from .model import Factor as Factor
from .model import Fraction as Fraction
from .model import Ident as Ident
from .model import Ms as Ms
from .model import Name as Name
from .model import OnExhausted as OnExhausted
from .positions import Positions, _Loader, _locate, _positions
from .positions import _format_path as _format_path
from .refs import _cross_check
from .schedules import Schedule, check_schedule
from .updates import UpdateDecl, check_sections
from .walk import _all_steps
from .walk import _own_strings as _own_strings
from .walk import _step_lists as _step_lists

__all__ = [
    "AgentDecl",
    "AskHumanStep",
    "AwaitSignalStep",
    "Budget",
    "CallToolStep",
    "CancelScheduledStep",
    "Cancellation",
    "CatchClause",
    "Defaults",
    "Duration",
    "DurationExpr",
    "FailStep",
    "ContinueAsNewStep",
    "Flow",
    "ForEachStep",
    "Limits",
    "MaxUsage",
    "ParallelStep",
    "RepeatStep",
    "Retry",
    "RunAgentStep",
    "RunSubflowStep",
    "RunTeamStep",
    "ScheduleStep",
    "SignalRunStep",
    "SetMetadataStep",
    "SleepStep",
    "Step",
    "SwitchCase",
    "SwitchStep",
    "TeamDecl",
    "TeamMember",
    "ToolDecl",
    "UsageCap",
    "TryStep",
    "duration_text",
    "parse_flow",
]

# --- entry point ------------------------------------------------------------------

_CONVERTER: cattrs.Converter | None = None
_SPEC_DEPTH = 256


def _converter() -> cattrs.Converter:
    global _CONVERTER
    if _CONVERTER is None:
        _CONVERTER = _build_converter()
    return _CONVERTER


def _load_text(text: str, source: str) -> tuple[Any, Positions, list[Problem]]:
    bad = first_surrogate(text)
    if bad is not None:  # the YAML reader would fail encoding it, not report it
        at = bad.start()
        row, column = text.count("\n", 0, at) + 1, at - text.rfind("\n", 0, at)
        message = f"not valid text: a lone surrogate {bad.group()!a} (not encodable as UTF-8)"
        return None, {}, [Problem("", message, source, row, column)]
    try:
        node = yaml.compose(text, Loader=_Loader)
        data = yaml.load(text, Loader=_Loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        line = mark.line + 1 if mark else None
        col = mark.column + 1 if mark else None
        return None, {}, [Problem("", f"not valid YAML/JSON: {exc.problem}", source, line, col)]
    except yaml.YAMLError as exc:
        return None, {}, [Problem("", f"not valid YAML/JSON: {exc}", source)]
    positions: Positions = {}
    dups: list[Any] = []
    if node is not None:
        _positions(node, (), positions, dups)
    problems = [Problem(_format_path(p), m, source, line, col) for p, m, (line, col) in dups]
    return data, positions, problems


def _problem(path: tuple[Any, ...], message: str, source: str, positions: Positions) -> Problem:
    pos = _locate(path, positions)
    line, col = pos if pos else (None, None)
    return Problem(_format_path(path), message, source, line, col)


def _index(steps: tuple[Step, ...], path: str, out: dict[str, Step]) -> tuple[Step, ...]:
    """Give every step its path and index in its list, and index it by id (ids are unique)."""
    placed: list[Step] = []
    for i, step in enumerate(steps):
        here = f"{path}[{i}]"
        body = step.body
        if isinstance(body, SwitchStep):
            body = SwitchStep(
                tuple(
                    SwitchCase(
                        c.cond,
                        _index(
                            c.steps,
                            f"{here}.switch[{j}].{'else' if c.cond is None else 'steps'}",
                            out,
                        ),
                    )
                    for j, c in enumerate(body.cases)
                )
            )
        elif isinstance(body, ParallelStep):
            body = attrs.evolve(
                body,
                branches={
                    name: _index(b, f"{here}.parallel.branches.{name}", out)
                    for name, b in body.branches.items()
                },
            )
        elif isinstance(body, (ForEachStep, RepeatStep)):
            kind = "for_each" if isinstance(body, ForEachStep) else "repeat"
            body = attrs.evolve(body, steps=_index(body.steps, f"{here}.{kind}.steps", out))
        elif isinstance(body, TryStep):
            body = TryStep(
                _index(body.steps, f"{here}.try", out),
                tuple(
                    attrs.evolve(c, steps=_index(c.steps, f"{here}.catch[{j}].steps", out))
                    for j, c in enumerate(body.catch)
                ),
            )
        comp = _index(step.compensate, f"{here}.compensate", out)
        placed_step = attrs.evolve(step, body=body, compensate=comp, path=here, index=i)
        out[step.id] = placed_step
        placed.append(placed_step)
    return tuple(placed)


def _index_handlers(updates: dict[str, UpdateDecl], by_id: dict[str, Step]) -> None:
    """Index each update handler's steps with the flow's, and note its scope's ids."""
    for name, decl in updates.items():
        handler = _index(decl.steps, f"updates.{name}.steps", by_id)
        updates[name] = attrs.evolve(decl, steps=handler, scoped=_scoped_ids(handler))


def _canonical_hash(data: Any) -> str:
    # Content hash of the spec's data, independent of formatting, key order
    # and YAML-vs-JSON: snapshots and logs pin this.
    canonical = msgspec.json.encode(_sorted(data))
    return hashlib.sha256(canonical).hexdigest()


def canonical_spec(spec: str | bytes | Mapping[str, Any]) -> bytes:
    """The canonical JSON of a valid spec: the bytes its ``Flow.spec_hash`` is the
    SHA-256 of (keys sorted, no whitespace; the same for YAML and JSON text)."""
    if isinstance(spec, bytes):
        spec = spec.decode("utf-8")
    data = _load_text(spec, "<spec>")[0] if isinstance(spec, str) else spec
    canonical: bytes = msgspec.json.encode(_sorted(data))
    return canonical


def _sorted(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _sorted(value[k]) for k in sorted(value, key=str)}
    if isinstance(value, list):
        return [_sorted(v) for v in value]
    return value


def parse_flow(spec: str | bytes | Mapping[str, Any], source_name: str = "<spec>") -> Flow:
    """Parse and validate a flow spec (YAML or JSON text, or a mapping).

    Raises ``SpecError`` listing every problem at once, each with its path and,
    for text, its line and column.
    """
    positions: Positions = {}
    problems: list[Problem] = []
    if isinstance(spec, bytes):
        try:
            spec = spec.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SpecError([Problem("", f"not UTF-8 text: {exc}", source_name)]) from None
    if isinstance(spec, str):
        data, positions, problems = _load_text(spec, source_name)
        if data is None and problems:
            raise SpecError(problems)
    else:
        data = spec
    if not isinstance(data, dict):
        raise SpecError(
            [
                Problem(
                    "",
                    f"a flow spec must be a mapping, got {_describe(data)}",
                    source_name,
                    1 if isinstance(spec, str) else None,
                    1 if isinstance(spec, str) else None,
                )
            ]
        )
    raw: dict[str, Any] = dict(data)
    found: list[tuple[tuple[Any, ...], str]] = []
    for key in raw:
        if key not in _TOP:
            found.append(((str(key),), _unknown_key(key, _TOP)))
    conv = _converter()

    def field(key: str, typ: Any, default: Any, required: bool = False) -> Any:
        if key not in raw:
            if required:
                found.append(((), f"missing required key {key!r}"))
            return default
        try:
            return conv.structure(raw[key], typ)
        except Exception as exc:
            _collect(exc, (key,), found)
            return default

    flow_id = field("flow", Name, "", required=True)
    version = field("version", Amount, 1)
    field("description", str, None)
    tools = field("tools", dict[str, ToolDecl], {})
    teams = field("teams", dict[str, TeamDecl], {})
    budget = field("budget", Budget, Budget())
    limits = field("limits", Limits, Limits())
    steps = field("steps", tuple[Step, ...], (), required=True)
    output = field("output", Template, None)
    on_exhausted = field("on_budget_exhausted", OnExhausted, None)
    metadata = field("metadata", dict[str, MetaType], {})
    agents = field("agents", dict[str, AgentDecl], {})
    defaults = field("defaults", Defaults, Defaults())
    updates, queries = check_sections(raw, conv, found)
    tools = _tool_schemas(tools, found)
    _literal_inputs(raw, tools, found)
    input_schema = raw.get("input_schema")
    if input_schema is not None:
        input_schema = _check_schema(input_schema, found)
    schedules = _check_schedules(raw, flow_id, found)
    if "steps" in raw and isinstance(raw["steps"], list) and not raw["steps"]:
        found.append((("steps",), "a flow needs at least one step"))
    found.extend(_cross_check(raw))
    _metadata_steps(raw, metadata, found)
    # Constants in a spec become effects' inputs and outputs: they must be
    # flowcore data too (YAML has .nan, .inf and integers of any size). The
    # spec's own nesting may go deeper than a value's. One place is reported
    # once: for a bad value the data check says it best, for a bad key (an
    # unknown key 404) the checks above do.
    data = list(islice(data_problems(raw, max_depth=_SPEC_DEPTH), 20))
    bad_values = {_format_path(p) for p, m in data if not m.startswith("key ")}
    found = [f for f in found if _format_path(f[0]) not in bad_values]
    seen = {_format_path(p) for p, _ in found}
    found.extend(d for d in data if _format_path(d[0]) not in seen)
    problems.extend(_problem(p, m, source_name, positions) for p, m in found)
    if problems:
        problems.sort(key=lambda p: (p.line or 0, p.column or 0))
        raise SpecError(problems)
    by_id: dict[str, Step] = {}
    placed = _index(steps, "steps", by_id)
    if on_exhausted is not None:
        final = _index(on_exhausted.steps, "on_budget_exhausted.steps", by_id)
        on_exhausted = attrs.evolve(on_exhausted, steps=final)
    _index_handlers(updates, by_id)
    return Flow(
        id=flow_id,
        version=version,
        steps=placed,
        tools=tools,
        teams=teams,
        budget=budget,
        limits=limits,
        input_schema=input_schema,
        output=output,
        spec_hash=_canonical_hash(raw),
        source_name=source_name,
        by_id=by_id,
        scopes={
            step.id: _scoped_ids(step.body.steps)
            for step in by_id.values()
            if isinstance(step.body, ForEachStep | RepeatStep)
        },
        schedules=schedules,
        on_exhausted=on_exhausted,
        metadata=metadata,
        agents=agents,
        defaults=defaults,
        updates=updates,
        queries=queries,
    )


def _metadata_steps(
    raw: Mapping[str, Any],
    declared: dict[str, MetaType],
    found: list[tuple[tuple[Any, ...], str]],
) -> None:
    """Each ``set_metadata`` field must be declared; a literal value must be of its type."""
    bad_section = "metadata" in raw and not declared
    for step, path in _all_steps(raw):
        body = step.get("set_metadata")
        if not isinstance(body, dict):
            continue
        for name, value in body.items():
            where = (*path, "set_metadata", str(name))
            kind = declared.get(name) if isinstance(name, str) else None
            if kind is None:
                if not bad_section and name_problem(name) is None:
                    known = ", ".join(declared) or "none"
                    found.append(
                        (
                            where,
                            f"metadata field {name!r} is not declared in the"
                            f" flow's top-level metadata (declared: {known})",
                        )
                    )
                continue
            if any(find_expressions(text) for text, _ in _strings(value, (), frozenset())):
                continue  # evaluated at run time
            problem = value_problem(kind, value)
            if problem is not None:
                found.append((where, f"metadata field {name!r} ({kind}) {problem}"))


def _check_schedules(
    raw: Mapping[str, Any], flow_id: str, found: list[tuple[tuple[Any, ...], str]]
) -> dict[str, Schedule]:
    """The top-level ``schedules:`` (name -> definition), checked by ``flowcore.schedules``."""
    section = raw.get("schedules")
    if section is None:
        return {}
    if not isinstance(section, dict):
        message = f"expected a mapping of schedule name to schedule, got {_describe(section)}"
        found.append((("schedules",), message))
        return {}
    out: dict[str, Schedule] = {}
    for name, definition in section.items():
        schedule, problems = check_schedule(name, definition, flow_id)
        for path, message in problems:
            found.append((("schedules", str(name), *path), message))
        if schedule is not None:
            out[schedule.name] = schedule
    return out


def _scoped_ids(steps: tuple[Step, ...]) -> tuple[str, ...]:
    """Ids of the steps in ``steps`` and the lists they own, not entering nested loops."""
    found: list[str] = []
    todo = list(reversed(steps))
    while todo:
        step = todo.pop()
        found.append(step.id)
        nested: list[Step] = list(step.compensate)
        body = step.body
        if isinstance(body, SwitchStep):
            for case in body.cases:
                nested.extend(case.steps)
        elif isinstance(body, ParallelStep):
            for branch in body.branches.values():
                nested.extend(branch)
        elif isinstance(body, TryStep):
            nested.extend(body.steps)
            for clause in body.catch:
                nested.extend(clause.steps)
        todo.extend(reversed(nested))
    return tuple(found)


def _check_schema(
    schema: Any,
    found: list[tuple[tuple[Any, ...], str]],
    where: tuple[Any, ...] = ("input_schema",),
) -> dict[str, Any] | None:
    from .validate import schema_problems

    if not isinstance(schema, dict):
        found.append((where, f"expected a JSON Schema mapping, got {_describe(schema)}"))
        return None
    problems = schema_problems(schema)
    for path, message in problems:
        found.append(((*where, *path), message))
    return None if problems else schema


def _tool_schemas(
    tools: dict[str, ToolDecl], found: list[tuple[tuple[Any, ...], str]]
) -> dict[str, ToolDecl]:
    """The declared tools, each schema checked (an invalid one is reported and dropped)."""
    out = {}
    for name, decl in tools.items():
        where = ("tools", name)
        if decl.input_schema is not None:
            checked = _check_schema(decl.input_schema, found, (*where, "input_schema"))
            decl = attrs.evolve(decl, input_schema=checked)
        if decl.output_schema is not None:
            checked = _check_schema(decl.output_schema, found, (*where, "output_schema"))
            decl = attrs.evolve(decl, output_schema=checked)
        out[name] = decl
    return out


def _literal_inputs(
    raw: Mapping[str, Any], tools: dict[str, ToolDecl], found: list[tuple[tuple[Any, ...], str]]
) -> None:
    """A call_tool or schedule input with no expression in it, checked against its
    tool's input_schema now, where the spec says it (evaluated ones are checked
    before the call is issued)."""
    from .validate import input_problems

    for step, path in _all_steps(raw):
        for kind in ("call_tool", "schedule"):
            body = step.get(kind)
            if not isinstance(body, dict) or not isinstance(body.get("tool"), str):
                continue
            decl = tools.get(body["tool"])
            if decl is None or decl.input_schema is None:
                continue
            value = body.get("input")
            if any(find_expressions(text) for text, _ in _strings(value, (), frozenset())):
                continue  # evaluated at run time
            for problem in input_problems(decl.input_schema, value):
                found.append(
                    ((*path, kind, "input"), f"input of tool {body['tool']!r} at {problem}")
                )
