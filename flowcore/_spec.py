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
"""

from __future__ import annotations

import datetime as _dt
import difflib
import hashlib
import re
import typing
from collections.abc import Iterator, Mapping
from itertools import islice
from typing import Any, Literal, NewType, TypeAlias, cast

import attrs
import cattrs
import msgspec
import yaml
from cattrs.errors import (
    AttributeValidationNote,
    ClassValidationError,
    ForbiddenExtraKeysError,
    IterableValidationError,
    IterableValidationNote,
)
from cattrs.gen import make_dict_structure_fn, override

from ._data import first_surrogate
from ._data import problems as data_problems
from ._errors import Problem, SpecError
from ._expr import Cond, Template, TemplateError, compile_cond, compile_template, find_expressions
from ._metadata import MAX_FIELDS, MetaType, name_problem, value_problem
from ._time import MAX_DURATION_MS, DurationError, check_zone, parse_duration
from .schedules import Schedule, check_schedule

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
    "TryStep",
    "duration_text",
    "parse_flow",
]

# --- constrained scalars --------------------------------------------------------

Ms = NewType("Ms", int)  # a duration or instant in milliseconds
Count = NewType("Count", int)  # a positive count
Amount = NewType("Amount", int)  # a non-negative budget amount
Factor = NewType("Factor", float)  # a backoff factor
Fraction = NewType("Fraction", float)  # a jitter fraction
Ident = NewType("Ident", str)  # a step id, usable unquoted in JMESPath
Name = NewType("Name", str)  # a non-empty name (tool, agent, signal...)

MAX_MS = MAX_DURATION_MS  # ten years
MAX_COUNT = 1_000_000_000
MAX_AMOUNT = 10**15
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

RESERVED_NAMES = frozenset({"input", "steps", "run", "error", "fire_count", "members"})

ExecClass: TypeAlias = Literal["readonly", "idempotent", "uncertain"]
ParallelMode: TypeAlias = Literal["all", "all_settled", "race", "any"]
TeamMode: TypeAlias = Literal["sequential", "parallel"]
ParentClose: TypeAlias = Literal["cancel", "abandon", "wait"]
# What becomes of a work step's call when the run stops waiting for it
# (a timeout, a lost race, a cancel): Temporal's three activity cancellation types.
Cancellation: TypeAlias = Literal["try_cancel", "wait_cancellation_completed", "abandon"]

# --- the model -------------------------------------------------------------------


@attrs.frozen
class DurationExpr:
    """A duration decided when its step begins: a template (``${...}``) whose
    value is milliseconds or duration text (``90s``, ``PT2H``), read then by
    ``_time.parse_duration``; a bad value fails the step ``invalid-duration``."""

    template: Template

    @property
    def source(self) -> str:
        source = self.template.source
        assert isinstance(source, str)
        return source


# A duration field: milliseconds (written as an integer or as text, read at
# parse time) or an expression evaluated when the step begins.
Duration: TypeAlias = Ms | DurationExpr


def duration_text(value: Duration) -> str:
    """A duration as messages show it: ``1500 ms``, or the expression that decided it."""
    return f"{value} ms" if isinstance(value, int) else f"the time {value.source!r} gave"


@attrs.frozen
class MaxUsage:
    """The most usage one call of a tool or an agent reports (``max_usage``): an
    amount not written is none. Only ``flowcore.budget_bound`` reads it; a run
    charges what is reported, whatever was declared."""

    steps: Amount = Amount(0)
    cost_minor_units: Amount = Amount(0)
    tool_calls: Amount = Amount(0)


@attrs.frozen
class ToolDecl:
    """A declared tool: its execution class, whether a call to it may be
    scheduled from outside the run (``scheduled-add-requested``), and the JSON
    Schemas its input and output must meet (checked by the interpreter: a
    literal input when the spec is parsed, an evaluated one before the call is
    issued, the output when it is reported)."""

    exec_class: ExecClass = "uncertain"
    schedulable: bool = False
    input_schema: dict[str, Any] | None = None
    output_schema: dict[str, Any] | None = None
    max_usage: MaxUsage | None = None  # the most usage one call reports


@attrs.frozen
class AgentDecl:
    """An agent's declaration (top-level ``agents``): only what ``budget_bound`` reads."""

    max_usage: MaxUsage | None = None


@attrs.frozen
class TeamMember:
    member: Name
    agent: Name
    instructions: Template | None = None


@attrs.frozen
class TeamDecl:
    members: tuple[TeamMember, ...]
    mode: TeamMode = "sequential"


@attrs.frozen
class Budget:
    steps: Amount | None = None
    cost_minor_units: Amount | None = None
    wall_clock_ms: Ms | None = None
    tokens: Amount | None = None  # input + output tokens agents report
    tool_calls: Amount | None = None  # call-tool effects, and the tool calls agents report
    turns: Amount | None = None  # the model turns agents report


@attrs.frozen
class OnExhausted:
    """What a run does when a budget limit is reached (``on_budget_exhausted``):
    run ``steps`` within ``reserve``, which the main work may not spend, and
    settle ``budget-exhausted`` with ``output`` (default: the last step's)."""

    reserve: Budget
    steps: tuple[Step, ...]
    output: Template | None = None


@attrs.frozen
class Limits:
    max_subflow_depth: Amount = Amount(4)
    max_concurrency: Count | None = None
    max_buffered_signals: Amount = Amount(64)
    max_idle_incarnations: Amount = Amount(1000)


@attrs.frozen
class Defaults:
    """What every step of the flow has unless it says otherwise (top-level ``defaults``)."""

    cancellation: Cancellation = "try_cancel"


@attrs.frozen
class Retry:
    max_attempts: Count = Count(3)
    initial_interval_ms: Ms = Ms(1000)
    backoff: Factor = Factor(2.0)
    max_interval_ms: Ms = Ms(60000)
    jitter: Fraction = Fraction(0.0)
    errors: tuple[Name, ...] | None = None  # None: errors marked retryable


@attrs.frozen
class CallToolStep:
    tool: Name
    input: Template = attrs.field(factory=lambda: compile_template(None))


@attrs.frozen
class RunAgentStep:
    agent: Name
    prompt: Template
    instructions: Template | None = None
    member: Name | None = None


@attrs.frozen
class RunTeamStep:
    team: Name
    prompt: Template


@attrs.frozen
class AskHumanStep:
    question: Template
    options: tuple[str, ...] | None = None
    timeout_ms: Duration | None = None
    default: str | None = None


@attrs.frozen
class SleepStep:
    for_ms: Duration | None = None
    until: Template | None = None


@attrs.frozen
class AwaitSignalStep:
    signal: Name | None = None
    timeout_ms: Duration | None = None
    # Only a signal whose payload makes this true (``payload`` in it) is taken.
    where: Cond | None = None
    signals: tuple[Name, ...] | None = None  # any of these names, instead of ``signal``
    count: Count | None = None  # collect this many signals (a list), instead of one
    until: Cond | None = None  # collect until this holds over ``received``
    # Take only signals sent with this key (text, evaluated when the wait starts).
    key: Template | None = None

    @property
    def names(self) -> tuple[str, ...]:
        """The names the wait takes, in the order written."""
        return self.signals if self.signals is not None else (str(self.signal),)

    @property
    def collects(self) -> bool:
        """Whether the output is the list of signals taken (``count`` or ``until``)."""
        return self.count is not None or self.until is not None


@attrs.frozen
class RunSubflowStep:
    flow: Name
    input: Template = attrs.field(factory=lambda: compile_template(None))
    # What happens to the child when the run stops waiting for it (None: ``cancel``).
    parent_close: ParentClose | None = None
    detached: bool = False  # a root run of its own: the step succeeds once it has started

    @property
    def close_policy(self) -> ParentClose:
        return "cancel" if self.parent_close is None else self.parent_close


@attrs.frozen
class SignalRunStep:
    """Send a signal to another run (``run``: its id), once per idempotency key.
    ``signal`` is text, a template like every other field: evaluated when the
    step begins, as ``run`` and ``key`` are."""

    run: Template
    signal: Template
    payload: Template = attrs.field(factory=lambda: compile_template(None))
    key: Template | None = None


@attrs.frozen
class SwitchCase:
    cond: Cond | None  # None: the else branch
    steps: tuple[Step, ...]


@attrs.frozen
class SwitchStep:
    cases: tuple[SwitchCase, ...]


@attrs.frozen
class ParallelStep:
    branches: dict[str, tuple[Step, ...]]
    mode: ParallelMode = "all"
    max_concurrency: Count | None = None


@attrs.frozen
class ForEachStep:
    items: Template
    steps: tuple[Step, ...]
    as_: Ident = Ident("item")
    index: Ident = Ident("index")
    max_concurrency: Count | None = None
    max_items: Count | None = None  # more items fail the step ``too-many-items``


@attrs.frozen
class RepeatStep:
    steps: tuple[Step, ...]
    every_ms: Duration | None = None
    cron: str | None = None
    timezone: str | None = None  # the cron's IANA time zone; UTC when None
    max_fires: Count | None = None
    until: Cond | None = None


@attrs.frozen
class ScheduleStep:
    tool: Name
    delay_ms: Duration
    input: Template = attrs.field(factory=lambda: compile_template(None))
    outlive_run: bool = False


@attrs.frozen
class CancelScheduledStep:
    id: Template


@attrs.frozen
class FailStep:
    """Fail with an error the flow makes: ``type``, ``message``, ``details``."""

    type: Template
    message: Template = attrs.field(factory=lambda: compile_template(""))
    details: Template | None = None
    retryable: bool = False


@attrs.frozen
class SetMetadataStep:
    """Set run metadata: field -> template (a null value clears the field)."""

    fields: dict[str, Template]


@attrs.frozen
class ContinueAsNewStep:
    """Start the run again from its first step with a new input (None: the same input)."""

    input: Template | None = None


@attrs.frozen
class CatchClause:
    steps: tuple[Step, ...]
    errors: tuple[Name, ...] = (Name("*"),)


@attrs.frozen
class TryStep:
    steps: tuple[Step, ...]
    catch: tuple[CatchClause, ...] = ()


Body: TypeAlias = (
    CallToolStep
    | RunAgentStep
    | RunTeamStep
    | AskHumanStep
    | SleepStep
    | AwaitSignalStep
    | RunSubflowStep
    | SwitchStep
    | ParallelStep
    | ForEachStep
    | RepeatStep
    | ScheduleStep
    | CancelScheduledStep
    | FailStep
    | TryStep
    | SignalRunStep
    | SetMetadataStep
    | ContinueAsNewStep
)


@attrs.frozen
class Step:
    id: str
    kind: str
    body: Body
    retry: Retry | None = None
    timeout_ms: Duration | None = None
    compensate: tuple[Step, ...] = ()
    path: str = ""
    index: int = 0  # in the list that holds it
    attempt_timeout_ms: Duration | None = None  # each attempt's own timeout
    # Work steps: an attempt that does not heartbeat within it is stopped.
    heartbeat_timeout_ms: Duration | None = None
    # Work steps: what becomes of the call when the run stops waiting for it
    # (None: the flow's ``defaults.cancellation``).
    cancellation: Cancellation | None = None


@attrs.frozen(eq=False)
class Flow:
    """A parsed, validated flow. ``spec_hash`` pins snapshots and logs to it."""

    id: str
    version: int
    steps: tuple[Step, ...]
    tools: dict[str, ToolDecl]
    teams: dict[str, TeamDecl]
    budget: Budget
    limits: Limits
    input_schema: dict[str, Any] | None
    output: Template | None
    spec_hash: str
    source_name: str
    by_id: dict[str, Step]
    # loop step id -> ids of the steps whose results land in one iteration or
    # fire (nested loops excluded, compensation steps included): what ending
    # the iteration's scope deletes.
    scopes: dict[str, tuple[str, ...]] = attrs.field(factory=dict)
    # The spec's top-level ``schedules:``: name -> flowcore.schedules.Schedule,
    # each starting this flow (a host registers them; the flow's runs ignore them).
    schedules: dict[str, Schedule] = attrs.field(factory=dict)
    # ``on_budget_exhausted``: the final steps and the reserve they run within.
    on_exhausted: OnExhausted | None = None
    # The top-level ``metadata:``: field name -> type, in the order declared.
    metadata: dict[str, MetaType] = attrs.field(factory=dict)
    # The top-level ``agents:``: agent id -> its declaration (``max_usage``).
    agents: dict[str, AgentDecl] = attrs.field(factory=dict)
    # The top-level ``defaults:``: what a step has unless it says otherwise.
    defaults: Defaults = attrs.field(factory=lambda: Defaults())

    def cancellation(self, step: Step) -> Cancellation:
        """What becomes of ``step``'s call when the run stops waiting for it."""
        own = step.cancellation
        return self.defaults.cancellation if own is None else own

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Flow) and other.spec_hash == self.spec_hash

    def __hash__(self) -> int:
        return int(self.spec_hash[:16], 16)


# --- structuring ------------------------------------------------------------------

_KINDS: dict[str, type[Any]] = {
    "call_tool": CallToolStep,
    "run_agent": RunAgentStep,
    "run_team": RunTeamStep,
    "ask_human": AskHumanStep,
    "sleep": SleepStep,
    "await_signal": AwaitSignalStep,
    "run_subflow": RunSubflowStep,
    "switch": SwitchStep,
    "parallel": ParallelStep,
    "for_each": ForEachStep,
    "repeat": RepeatStep,
    "schedule": ScheduleStep,
    "cancel_scheduled": CancelScheduledStep,
    "fail": FailStep,
    "try": TryStep,
    "signal_run": SignalRunStep,
    "set_metadata": SetMetadataStep,
    "continue_as_new": ContinueAsNewStep,
}
_COMMON = (
    "id",
    "retry",
    "timeout_ms",
    "attempt_timeout_ms",
    "heartbeat_timeout_ms",
    "cancellation",
    "compensate",
    "catch",
    "description",
)
# The step kinds whose work a host runs and can watch for heartbeats.
_HEARTBEAT_KINDS = frozenset({"call_tool", "run_agent", "run_team"})
_TOP = (
    "flow",
    "version",
    "description",
    "input_schema",
    "budget",
    "limits",
    "tools",
    "teams",
    "steps",
    "output",
    "schedules",
    "on_budget_exhausted",
    "metadata",
    "agents",
    "defaults",
)


class _Msg(ValueError):
    """A problem message raised from inside a structure hook."""


def _note_attr(exc: Exception, name: str) -> Exception:
    exc.__notes__ = [*getattr(exc, "__notes__", []), AttributeValidationNote(name, name, object)]
    return exc


def _note_index(exc: Exception, index: int) -> Exception:
    exc.__notes__ = [
        *getattr(exc, "__notes__", []),
        IterableValidationNote(str(index), index, object),
    ]
    return exc


def _strict_int(value: Any, lo: int, hi: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Msg(f"expected {what}, got {_describe(value)}")
    if not lo <= value <= hi:
        raise _Msg(f"{value} is out of range: expected {what} in {lo}..{hi}")
    return value


def _strict_float(value: Any, lo: float, hi: float, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Msg(f"expected {what}, got {_describe(value)}")
    if not lo <= value <= hi:
        raise _Msg(f"{value} is out of range: expected {what} in {lo}..{hi}")
    return float(value)


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return f"the number {value}"
    if isinstance(value, str):
        return f"the string {value!r}"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def _did_you_mean(word: Any, candidates: typing.Iterable[Any]) -> str:
    """`` (did you mean 'x'?)`` naming the candidate closest to ``word``, or ``""``.

    Only a close match (difflib's default cutoff) is suggested: a typo, not a guess.
    """
    if not isinstance(word, str) or not word:
        return ""
    pool = [c for c in candidates if isinstance(c, str) and c != word]
    match = difflib.get_close_matches(word, pool, n=1)
    return f" (did you mean {match[0]!r}?)" if match else ""


def _unknown_key(key: Any, allowed: typing.Iterable[str], where: str = "") -> str:
    return f"unknown key {key!r}{where}{_did_you_mean(key, allowed)}"


def _str(value: Any, _: Any = None) -> str:
    if not isinstance(value, str):
        raise _Msg(f"expected a string, got {_describe(value)}")
    return value


def _name(value: Any, _: Any) -> str:
    text = _str(value)
    if not text.strip():
        raise _Msg("expected a non-empty name")
    return text


def _ident(value: Any, _: Any) -> str:
    text = _str(value)
    if not _IDENT.match(text):
        raise _Msg(
            f"{text!r} is not a valid id: use letters, digits and '_', not starting with a digit"
        )
    return text


def _template(value: Any, _: Any) -> Template:
    try:
        msgspec.json.encode(value)
    except (TypeError, msgspec.EncodeError):
        raise _Msg(f"expected a JSON value, got {_describe(value)}") from None
    try:
        return compile_template(value)
    except TemplateError:
        pass
    # Name the exact string that does not compile, however deep it sits.
    errors: list[Exception] = []
    for text, path in _strings(value, (), frozenset()):
        try:
            compile_template(text)
        except TemplateError as exc:
            err: Exception = _Msg(str(exc))
            for part in path:
                err = _note_index(err, part) if isinstance(part, int) else _note_attr(err, part)
            errors.append(err)
    _gather("template", errors, Template)
    raise _Msg("invalid template")  # unreachable: some string failed above


def _cond(value: Any, _: Any) -> Cond:
    try:
        return compile_cond(_str(value))
    except TemplateError as exc:
        raise _Msg(str(exc)) from None


def _literal_ms(value: Any, _: Any = None) -> int:
    """A duration written in the spec: milliseconds, or text read by ``parse_duration``."""
    if isinstance(value, str) and find_expressions(value):
        raise _Msg(
            f"{value!r}: this duration is read when the flow is parsed, so it cannot be an"
            " expression; write milliseconds or text like '90s'"
        )
    try:
        return parse_duration(value, allow_zero=True)
    except DurationError as exc:
        raise _Msg(str(exc)) from None


def _duration(value: Any, _: Any) -> Duration:
    """A literal duration (checked now), or ``${...}`` evaluated when the step begins."""
    if isinstance(value, str) and find_expressions(value):
        try:
            return DurationExpr(compile_template(value))
        except TemplateError as exc:
            raise _Msg(str(exc)) from None
    return Ms(_literal_ms(value))


# Zones suggested for a misspelt ``timezone``. A fixed list: listing the tz
# database (``zoneinfo.available_timezones``) reads the file system.
_ZONES = (
    "UTC",
    "Africa/Cairo",
    "Africa/Johannesburg",
    "Africa/Lagos",
    "America/Chicago",
    "America/Denver",
    "America/Los_Angeles",
    "America/Mexico_City",
    "America/New_York",
    "America/Sao_Paulo",
    "America/Toronto",
    "Asia/Dubai",
    "Asia/Hong_Kong",
    "Asia/Kolkata",
    "Asia/Seoul",
    "Asia/Shanghai",
    "Asia/Singapore",
    "Asia/Tokyo",
    "Australia/Sydney",
    "Europe/Amsterdam",
    "Europe/Berlin",
    "Europe/Istanbul",
    "Europe/London",
    "Europe/Madrid",
    "Europe/Moscow",
    "Europe/Paris",
    "Europe/Rome",
    "Europe/Stockholm",
    "Europe/Zurich",
    "Pacific/Auckland",
)


def _timezone(value: Any) -> str:
    text = _str(value)
    try:
        check_zone(text)
    except DurationError:
        hint = _did_you_mean(text, _ZONES)
        raise _Msg(
            f"unknown time zone {text!r}{hint} (an IANA name such as 'Europe/Paris' or 'UTC')"
        ) from None
    return text


def _cron(value: Any) -> str:
    from cronsim import CronSim, CronSimError

    text = _str(value)
    if len(text.split()) != 5:
        raise _Msg(f"invalid cron {text!r}: expected 5 fields (minute hour day month weekday)")
    try:
        CronSim(text, _EPOCH)
    except CronSimError as exc:
        raise _Msg(f"invalid cron {text!r}: {exc}") from None
    return text


def _seq(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise _Msg(f"expected a list of {what}, got {_describe(value)}")
    return value


def _mapping(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _Msg(f"expected a mapping of {what}, got {_describe(value)}")
    return value


def _gather(where: str, errors: list[Exception], cl: type[Any]) -> None:
    if errors:
        raise ClassValidationError(f"While structuring {where}", errors, cl)


def _build_converter() -> cattrs.Converter:
    conv = cattrs.Converter(forbid_extra_keys=True, detailed_validation=True)
    conv.register_structure_hook(str, _str)
    conv.register_structure_hook(
        bool,
        lambda v, _: (
            v if isinstance(v, bool) else _raise(f"expected true or false, got {_describe(v)}")
        ),
    )
    conv.register_structure_hook(int, lambda v, _: _strict_int(v, -(2**53), 2**53, "an integer"))
    conv.register_structure_hook(Name, _name)
    conv.register_structure_hook(Ident, _ident)
    conv.register_structure_hook(Ms, _literal_ms)
    _register_generic(conv, Duration, _duration)
    _register_generic(conv, Duration | None, lambda v, _: None if v is None else _duration(v, _))
    conv.register_structure_hook(
        Count, lambda v, _: _strict_int(v, 1, MAX_COUNT, "a positive integer")
    )
    conv.register_structure_hook(
        Amount, lambda v, _: _strict_int(v, 0, MAX_AMOUNT, "a non-negative integer")
    )
    conv.register_structure_hook(
        Factor, lambda v, _: _strict_float(v, 1.0, 100.0, "a backoff factor")
    )
    conv.register_structure_hook(
        Fraction, lambda v, _: _strict_float(v, 0.0, 1.0, "a fraction between 0 and 1")
    )
    conv.register_structure_hook_func(_is_literal, _literal)
    conv.register_structure_hook(Template, _template)
    conv.register_structure_hook(Cond, _cond)

    def tuple_of(inner: Any, what: str) -> Any:
        def hook(value: Any, _: Any) -> tuple[Any, ...]:
            items = _seq(value, what)
            out: list[Any] = []
            errors: list[Exception] = []
            for i, item in enumerate(items):
                try:
                    out.append(conv.structure(item, inner))
                except Exception as exc:
                    errors.append(_note_index(exc, i))
            if errors:
                raise IterableValidationError(f"While structuring {what}", errors, tuple)
            return tuple(out)

        return hook

    _register_generic(conv, tuple[Step, ...], tuple_of(Step, "steps"))
    _register_generic(conv, tuple[Name, ...], tuple_of(Name, "names"))
    _register_generic(conv, tuple[str, ...], tuple_of(str, "strings"))
    _register_generic(conv, tuple[TeamMember, ...], tuple_of(TeamMember, "team members"))
    _register_generic(conv, tuple[CatchClause, ...], tuple_of(CatchClause, "catch clauses"))

    def dict_of(inner: Any, what: str, key: Any = _str) -> Any:
        def hook(value: Any, _: Any) -> dict[str, Any]:
            items = _mapping(value, what)
            out: dict[str, Any] = {}
            errors: list[Exception] = []
            for k, v in items.items():
                try:
                    key(k, None)
                    out[k] = conv.structure(v if v is not None else {}, inner)
                except Exception as exc:
                    errors.append(_note_attr(exc, str(k)))
            _gather(what, errors, dict)
            return out

        return hook

    _register_generic(conv, dict[str, ToolDecl], dict_of(ToolDecl, "tools", _name))
    _register_generic(conv, dict[str, TeamDecl], dict_of(TeamDecl, "teams", _name))
    _register_generic(conv, dict[str, AgentDecl], dict_of(AgentDecl, "agents", _name))
    _register_generic(
        conv, dict[str, tuple[Step, ...]], dict_of(tuple[Step, ...], "branches", _ident)
    )
    # A tool's schemas are taken as written; _tool_schemas checks them with their place.
    conv.register_structure_hook(dict[str, Any] | None, lambda value, _: value)
    conv.register_structure_hook(ToolDecl, _structure_fn(conv, ToolDecl))
    plain: tuple[type[Any], ...] = (
        Budget,
        Defaults,
        OnExhausted,
        Limits,
        Retry,
        TeamDecl,
        TeamMember,
        RunAgentStep,
        RunTeamStep,
        CallToolStep,
        AskHumanStep,
        ScheduleStep,
        FailStep,
        ContinueAsNewStep,
        MaxUsage,
        AgentDecl,
    )
    for cl in plain:
        conv.register_structure_hook(cl, _mapping_first(conv, cl))

    base = {
        cl: _mapping_first(conv, cl)
        for cl in (
            TeamDecl,
            AskHumanStep,
            AwaitSignalStep,
            ForEachStep,
            SleepStep,
            RepeatStep,
            CancelScheduledStep,
            RunSubflowStep,
        )
    }

    def team_hook(value: Any, _: Any) -> TeamDecl:
        team = cast(TeamDecl, base[TeamDecl](value, TeamDecl))
        errors: list[Exception] = []
        if not team.members:
            errors.append(_note_attr(_Msg("a team needs at least one member"), "members"))
        seen: set[str] = set()
        for i, member in enumerate(team.members):
            if member.member in seen:
                err = _note_attr(_Msg(f"duplicate member name {member.member!r}"), "member")
                errors.append(_note_attr(_note_index(err, i), "members"))
            seen.add(member.member)
        _gather("team", errors, TeamDecl)
        return team

    conv.register_structure_hook(TeamDecl, team_hook)

    def ask_hook(value: Any, _: Any) -> AskHumanStep:
        ask = cast(AskHumanStep, base[AskHumanStep](value, AskHumanStep))
        errors: list[Exception] = []
        if ask.options is not None and not ask.options:
            errors.append(_note_attr(_Msg("options must not be empty"), "options"))
        if ask.options is not None and len(set(ask.options)) != len(ask.options):
            errors.append(_note_attr(_Msg("options must be distinct"), "options"))
        if ask.default is not None and ask.options and ask.default not in ask.options:
            errors.append(
                _note_attr(
                    _Msg(f"default {ask.default!r} is not one of {list(ask.options)}"), "default"
                )
            )
        if ask.default is not None and ask.timeout_ms is None:
            errors.append(_note_attr(_Msg("a default answer needs a timeout_ms"), "default"))
        _gather("ask_human", errors, AskHumanStep)
        return ask

    conv.register_structure_hook(AskHumanStep, ask_hook)

    def await_hook(value: Any, _: Any) -> AwaitSignalStep:
        wait = cast(AwaitSignalStep, base[AwaitSignalStep](value, AwaitSignalStep))
        errors: list[Exception] = []
        if (wait.signal is None) == (wait.signals is None):
            errors.append(_Msg("await_signal needs exactly one of 'signal' or 'signals'"))
        if wait.signals is not None and not wait.signals:
            errors.append(_note_attr(_Msg("signals must not be empty"), "signals"))
        if wait.signals is not None and len(set(wait.signals)) != len(wait.signals):
            errors.append(_note_attr(_Msg("signals must be distinct"), "signals"))
        if wait.count == 0:
            errors.append(_note_attr(_Msg("count must be at least 1"), "count"))
        _gather("await_signal", errors, AwaitSignalStep)
        return wait

    conv.register_structure_hook(AwaitSignalStep, await_hook)

    def subflow_hook(value: Any, _: Any) -> RunSubflowStep:
        sub = cast(RunSubflowStep, base[RunSubflowStep](value, RunSubflowStep))
        if sub.detached and sub.parent_close is not None:
            message = "a detached run_subflow has no parent_close: the parent never waits for it"
            _gather("run_subflow", [_note_attr(_Msg(message), "parent_close")], RunSubflowStep)
        return sub

    conv.register_structure_hook(RunSubflowStep, subflow_hook)

    def for_each_hook(value: Any, _: Any) -> ForEachStep:
        each = cast(ForEachStep, base[ForEachStep](value, ForEachStep))
        errors: list[Exception] = []
        for key, name in (("as", each.as_), ("index", each.index)):
            if name in RESERVED_NAMES:
                errors.append(
                    _note_attr(
                        _Msg(f"{name!r} is reserved in expressions; choose another name"), key
                    )
                )
        if each.as_ == each.index:
            errors.append(_note_attr(_Msg("'as' and 'index' must differ"), "index"))
        _gather("for_each", errors, ForEachStep)
        return each

    conv.register_structure_hook(ForEachStep, for_each_hook)
    conv.register_structure_hook(ParallelStep, _mapping_first(conv, ParallelStep))

    def sleep_hook(value: Any, _: Any) -> SleepStep:
        step = cast(SleepStep, base[SleepStep](value, SleepStep))
        if (step.for_ms is None) == (step.until is None):
            raise _Msg("sleep needs exactly one of 'for_ms' or 'until'")
        return step

    conv.register_structure_hook(SleepStep, sleep_hook)

    def repeat_hook(value: Any, _: Any) -> RepeatStep:
        raw = _mapping(value, "repeat settings")
        errors: list[Exception] = []
        cron = raw.get("cron")
        if cron is not None:
            try:
                _cron(cron)
            except _Msg as exc:
                errors.append(_note_attr(exc, "cron"))
        if raw.get("timezone") is not None:
            if isinstance(raw["timezone"], str):  # else the structure below says so
                try:
                    _timezone(raw["timezone"])
                except _Msg as exc:
                    errors.append(_note_attr(exc, "timezone"))
            if cron is None and "every_ms" in raw:
                message = "timezone applies to a cron: use it with 'cron', not 'every_ms'"
                errors.append(_note_attr(_Msg(message), "timezone"))
        try:
            step = cast(RepeatStep, base[RepeatStep](raw, RepeatStep))
        except ClassValidationError as exc:
            errors.extend(exc.exceptions)
            step = None
        if step is not None and (step.every_ms is None) == (step.cron is None):
            errors.append(_Msg("repeat needs exactly one of 'every_ms' or 'cron'"))
        if step is not None and step.every_ms == 0:
            errors.append(_note_attr(_Msg("every_ms must be positive"), "every_ms"))
        _gather("repeat", errors, RepeatStep)
        assert step is not None
        return step

    conv.register_structure_hook(RepeatStep, repeat_hook)

    signal_run = _mapping_first(conv, SignalRunStep)

    def signal_run_hook(value: Any, _: Any) -> SignalRunStep:
        raw = _mapping(value, "signal_run fields")
        errors: list[Exception] = []
        step: SignalRunStep | None = None
        if "signal" in raw:
            try:
                _name(raw["signal"], None)  # text (a name, or a template giving one)
            except _Msg as exc:
                errors.append(_note_attr(exc, "signal"))
        try:
            step = cast(SignalRunStep, signal_run(raw, SignalRunStep))
        except ClassValidationError as exc:
            errors.extend(exc.exceptions)
        _gather("signal_run", errors, SignalRunStep)
        assert step is not None
        return step

    conv.register_structure_hook(SignalRunStep, signal_run_hook)

    def cancel_hook(value: Any, _: Any) -> CancelScheduledStep:
        raw = _mapping(value, "cancel_scheduled settings")
        return cast(
            CancelScheduledStep,
            base[CancelScheduledStep](raw, CancelScheduledStep),
        )

    conv.register_structure_hook(CancelScheduledStep, cancel_hook)

    def set_metadata_hook(value: Any, _: Any) -> SetMetadataStep:
        items = _mapping(value, "set_metadata fields")
        out: dict[str, Template] = {}
        errors: list[Exception] = []
        for k, v in items.items():
            problem = name_problem(k)
            try:
                if problem is not None:
                    raise _Msg(problem)
                out[k] = conv.structure(v, Template)
            except Exception as exc:
                errors.append(_note_attr(exc, str(k)))
        _gather("set_metadata", errors, SetMetadataStep)
        if not out:
            raise _Msg("set_metadata needs at least one field")
        return SetMetadataStep(out)

    conv.register_structure_hook(SetMetadataStep, set_metadata_hook)

    def metadata_hook(value: Any, _: Any) -> dict[str, MetaType]:
        items = _mapping(value, "metadata fields")
        out: dict[str, MetaType] = {}
        errors: list[Exception] = []
        for k, v in items.items():
            try:
                problem = name_problem(k)
                if problem is not None:
                    raise _Msg(problem)
                out[k] = _literal(v, MetaType)
            except Exception as exc:
                errors.append(_note_attr(exc, str(k)))
        _gather("metadata", errors, dict)
        if len(out) > MAX_FIELDS:
            raise _Msg(f"a flow declares at most {MAX_FIELDS} metadata fields, got {len(out)}")
        return out

    _register_generic(conv, dict[str, MetaType], metadata_hook)

    def switch_hook(value: Any, _: Any) -> SwitchStep:
        items = _seq(value, "switch cases")
        cases: list[SwitchCase] = []
        errors: list[Exception] = []
        for i, item in enumerate(items):
            try:
                cases.append(_switch_case(conv, item, last=i == len(items) - 1))
            except Exception as exc:
                errors.append(_note_index(exc, i))
        if errors:
            raise IterableValidationError("While structuring switch", errors, tuple)
        if not cases:
            raise _Msg("a switch needs at least one case")
        return SwitchStep(tuple(cases))

    conv.register_structure_hook(SwitchStep, switch_hook)
    conv.register_structure_hook(CatchClause, _mapping_first(conv, CatchClause))
    conv.register_structure_hook(Step, lambda v, _: _structure_step(conv, v))
    return conv


def _literal(value: Any, typ: Any) -> Any:
    allowed = typing.get_args(typ)
    if value not in allowed or not isinstance(value, str):
        shown = ", ".join(allowed)
        raise _Msg(f"{value!r} is not one of: {shown}{_did_you_mean(value, allowed)}")
    return value


def _is_literal(typ: Any) -> bool:
    return typing.get_origin(typ) is typing.Literal


def _register_generic(conv: cattrs.Converter, typ: Any, hook: Any) -> None:
    conv.register_structure_hook_func(lambda t: t == typ, hook)


def _raise(message: str) -> Any:
    raise _Msg(message)


_SETTINGS_NAME: dict[type[Any], str] = {
    Budget: "budget",
    Limits: "limits",
    Defaults: "defaults",
    Retry: "retry",
    TeamDecl: "team",
    TeamMember: "team member",
    CatchClause: "catch clause",
    MaxUsage: "max_usage",
    AgentDecl: "agent",
    **{cl: kind for kind, cl in _KINDS.items()},
}


def _structure_fn(conv: cattrs.Converter, cl: type[Any]) -> Any:
    """cattrs' structure function for ``cl``, fields renamed to their spec names."""
    renames: dict[str, Any] = {
        f.name: override(rename=_WIRE_NAMES[f.name])
        for f in attrs.fields(cl)
        if f.name in _WIRE_NAMES
    }
    return make_dict_structure_fn(cl, conv, _cattrs_forbid_extra_keys=True, **renames)


def _mapping_first(conv: cattrs.Converter, cl: type[Any]) -> Any:
    """A structure hook that first insists on a mapping, then runs cattrs'."""
    inner = _structure_fn(conv, cl)
    what = _SETTINGS_NAME.get(cl, cl.__name__)

    def hook(value: Any, _: Any) -> Any:
        return inner(_mapping(value, f"{what} fields"), cl)

    return hook


def _switch_case(conv: cattrs.Converter, item: Any, last: bool) -> SwitchCase:
    raw = _mapping(item, "switch case fields ('if' and 'steps', or 'else')")
    errors: list[Exception] = []
    if "else" in raw:
        for key in raw:
            if key != "else":
                errors.append(_note_attr(_Msg(_unknown_key(key, (), " in an else case")), key))
        if not last:
            errors.append(_note_attr(_Msg("'else' must be the last case"), "else"))
        steps: tuple[Step, ...] = ()
        try:
            steps = conv.structure(raw["else"], tuple[Step, ...])
        except Exception as exc:
            errors.append(_note_attr(exc, "else"))
        _gather("switch case", errors, SwitchCase)
        return SwitchCase(None, steps)
    cond: Cond | None = None
    for key in raw:
        if key not in ("if", "steps"):
            message = _unknown_key(key, ("if", "steps", "else"), " in a switch case")
            errors.append(_note_attr(_Msg(message), key))
    if "if" not in raw:
        errors.append(_Msg("a switch case needs 'if' (or is an 'else' case)"))
    else:
        try:
            cond = conv.structure(raw["if"], Cond)
        except Exception as exc:
            errors.append(_note_attr(exc, "if"))
    steps = ()
    try:
        steps = conv.structure(raw.get("steps", []), tuple[Step, ...])
    except Exception as exc:
        errors.append(_note_attr(exc, "steps"))
    _gather("switch case", errors, SwitchCase)
    return SwitchCase(cond, steps)


_KIND_LIST = ", ".join(_KINDS)


def _structure_step(conv: cattrs.Converter, value: Any) -> Step:
    raw = _mapping(value, "step fields (an 'id' and one step kind)")
    errors: list[Exception] = []
    kinds = [k for k in raw if k in _KINDS]
    kind_named = False  # some unknown key was taken for a step kind
    for key in raw:
        if key in _KINDS or key in _COMMON:
            continue
        if kinds:  # the step has its kind: a stray key is a misspelled common key
            errors.append(_note_attr(_Msg(_unknown_key(key, _COMMON)), str(key)))
            continue
        # No kind: a misspelled kind, a misspelled common key, or a kind that
        # does not exist; say which when the spelling is close enough to tell.
        as_kind = _did_you_mean(key, _KINDS)
        as_common = _did_you_mean(key, _COMMON)
        if as_common and not as_kind:
            errors.append(_note_attr(_Msg(_unknown_key(key, _COMMON)), key))
            continue
        kind_named = True
        message = f"unknown step kind {key!r}"
        message += as_kind or f" (expected one of {_KIND_LIST})"
        errors.append(_note_attr(_Msg(message), key))
    if not kinds and not kind_named:
        errors.append(_Msg(f"missing step kind: expected one of {_KIND_LIST}"))
    for extra in kinds[1:]:
        errors.append(
            _note_attr(
                _Msg(f"a step has exactly one kind; found {kinds[0]!r} and {extra!r}"), extra
            )
        )
    step_id = ""
    if "id" not in raw:
        errors.append(_Msg("missing required key 'id'"))
    else:
        try:
            step_id = _ident(raw["id"], None)
        except _Msg as exc:
            errors.append(_note_attr(exc, "id"))
    kind = kinds[0] if kinds else ""
    body: Any = None
    if kind:
        try:
            if kind == "try":
                body = TryStep(conv.structure(raw["try"], tuple[Step, ...]))
            else:
                body = conv.structure(raw[kind], _KINDS[kind])
        except Exception as exc:
            errors.append(_note_attr(exc, kind))
    if "catch" in raw:
        if kind != "try":
            errors.append(_note_attr(_Msg("'catch' is only allowed on a 'try' step"), "catch"))
        else:
            try:
                catch = conv.structure(raw["catch"], tuple[CatchClause, ...])
                if body is not None:
                    body = attrs.evolve(body, catch=catch)
            except Exception as exc:
                errors.append(_note_attr(exc, "catch"))
    common: dict[str, Any] = {}
    fields: tuple[tuple[str, Any], ...] = (
        ("retry", Retry),
        ("timeout_ms", Duration),
        ("attempt_timeout_ms", Duration),
        ("heartbeat_timeout_ms", Duration),
        ("cancellation", Cancellation),
        ("compensate", tuple[Step, ...]),
        ("description", str),
    )
    for key, typ in fields:
        if key in raw:
            try:
                common[key] = conv.structure(raw[key], typ)
            except Exception as exc:
                errors.append(_note_attr(exc, key))
    for key in ("timeout_ms", "attempt_timeout_ms", "heartbeat_timeout_ms"):
        if common.get(key) == 0:
            errors.append(_note_attr(_Msg(f"{key} must be positive"), key))
    if "heartbeat_timeout_ms" in raw and kind and kind not in _HEARTBEAT_KINDS:
        message = "heartbeat_timeout_ms is only allowed on call_tool, run_agent and run_team steps"
        errors.append(_note_attr(_Msg(message), "heartbeat_timeout_ms"))
    if "cancellation" in raw and kind and kind not in _HEARTBEAT_KINDS:
        message = (
            "cancellation is only allowed on call_tool, run_agent and run_team steps"
            " (a run_subflow says what becomes of its child with parent_close)"
        )
        errors.append(_note_attr(_Msg(message), "cancellation"))
    _gather("step", errors, Step)
    common.pop("description", None)
    return Step(id=step_id, kind=kind, body=body, **common)


_EPOCH = _dt.datetime(2000, 1, 1, tzinfo=_dt.UTC)


def _collect(
    exc: BaseException, path: tuple[Any, ...], out: list[tuple[tuple[Any, ...], str]]
) -> None:
    """Turn a (nested) cattrs error into ``(path, message)`` pairs."""
    for note in getattr(exc, "__notes__", ()):
        if isinstance(note, AttributeValidationNote):
            path = (*path, _wire_key(note.name))
        elif isinstance(note, IterableValidationNote):
            path = (*path, note.index)
    if isinstance(exc, ForbiddenExtraKeysError):
        for key in sorted(exc.extra_fields, key=str):
            out.append(((*path, key), _unknown_key(key, _wire_fields(exc.cl))))
        return
    if isinstance(exc, BaseExceptionGroup):
        for sub in exc.exceptions:
            _collect(sub, path, out)
        return
    if isinstance(exc, KeyError):
        key = exc.args[0] if exc.args else "?"
        if isinstance(key, str) and key:
            out.append((path, f"missing required key {_wire_key(key)!r}"))
            return
    if isinstance(exc, _Msg):
        out.append((path, str(exc)))
        return
    out.append((path, f"invalid value: {exc}"))


# Model fields whose spec key is a Python keyword.
_WIRE_NAMES = {"exec_class": "class", "as_": "as"}


def _wire_fields(cl: Any) -> list[str]:
    """The spec keys of an attrs class's fields (none for anything else)."""
    if not attrs.has(cl):
        return []
    return [_wire_key(f.name) for f in attrs.fields(cl)]


def _wire_key(name: str) -> str:
    return _WIRE_NAMES.get(name, name)


# --- cross-references on the raw mapping ------------------------------------------


def _step_lists(
    step: Mapping[str, Any], path: tuple[Any, ...]
) -> Iterator[tuple[list[Any], tuple[Any, ...]]]:
    """Every nested list of steps inside one raw step, with its path."""
    for kind in ("for_each", "repeat"):
        body = step.get(kind)
        if isinstance(body, dict) and isinstance(body.get("steps"), list):
            yield body["steps"], (*path, kind, "steps")
    if isinstance(step.get("try"), list):
        yield step["try"], (*path, "try")
    for key in ("catch",):
        clauses = step.get(key)
        if isinstance(clauses, list):
            for i, clause in enumerate(clauses):
                if isinstance(clause, dict) and isinstance(clause.get("steps"), list):
                    yield clause["steps"], (*path, key, i, "steps")
    if isinstance(step.get("compensate"), list):
        yield step["compensate"], (*path, "compensate")
    cases = step.get("switch")
    if isinstance(cases, list):
        for i, case in enumerate(cases):
            if isinstance(case, dict):
                for key in ("steps", "else"):
                    if isinstance(case.get(key), list):
                        yield case[key], (*path, "switch", i, key)
    par = step.get("parallel")
    if isinstance(par, dict) and isinstance(par.get("branches"), dict):
        for name, branch in par["branches"].items():
            if isinstance(branch, list):
                yield branch, (*path, "parallel", "branches", name)


def _all_steps(raw: Mapping[str, Any]) -> Iterator[tuple[dict[str, Any], tuple[Any, ...]]]:
    """Every step of the spec, nested ones included: the flow's, then the final ones."""
    steps = raw.get("steps")
    if isinstance(steps, list):
        yield from _walk_steps(steps, ("steps",))
    final = raw.get("on_budget_exhausted")
    if isinstance(final, dict) and isinstance(final.get("steps"), list):
        yield from _walk_steps(final["steps"], ("on_budget_exhausted", "steps"))


def _walk_steps(
    steps: list[Any], path: tuple[Any, ...]
) -> Iterator[tuple[dict[str, Any], tuple[Any, ...]]]:
    for i, step in enumerate(steps):
        if not isinstance(step, dict):
            continue
        here = (*path, i)
        yield step, here
        for inner, inner_path in _step_lists(step, here):
            yield from _walk_steps(inner, inner_path)


def _strings(
    value: Any, path: tuple[Any, ...], skip: frozenset[str]
) -> Iterator[tuple[str, tuple[Any, ...]]]:
    if isinstance(value, str):
        yield value, path
    elif isinstance(value, dict):
        for k, v in value.items():
            if k not in skip:
                yield from _strings(v, (*path, k), frozenset())
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _strings(v, (*path, i), frozenset())


# The keys of a step kind that are bare conditions, not templates.
_CONDITIONS = frozenset({("repeat", "until"), ("await_signal", "where"), ("await_signal", "until")})


def _own_strings(
    step: Mapping[str, Any], path: tuple[Any, ...]
) -> Iterator[tuple[str, tuple[Any, ...], bool]]:
    """The strings of one raw step that are its own (not in nested steps).

    Yields ``(text, path, is_condition)``: switch ``if``, repeat ``until`` and
    await_signal ``where`` and ``until`` are bare JMESPath conditions,
    everything else is a template.
    """
    for kind, body in step.items():
        if kind not in _KINDS:
            continue
        here = (*path, kind)
        if kind == "try":
            continue  # a list of steps, walked on its own
        if kind == "switch":
            if isinstance(body, list):
                for i, case in enumerate(body):
                    if isinstance(case, dict) and isinstance(case.get("if"), str):
                        yield case["if"], (*here, i, "if"), True
            continue
        if isinstance(body, dict):
            for key, value in body.items():
                if key in ("steps", "branches"):
                    continue
                if (kind, key) in _CONDITIONS and isinstance(value, str):
                    yield value, (*here, key), True
                    continue
                for text, spath in _strings(value, (*here, key), frozenset()):
                    yield text, spath, False


def _cross_check(raw: Mapping[str, Any]) -> list[tuple[tuple[Any, ...], str]]:
    out: list[tuple[tuple[Any, ...], str]] = []
    steps = raw.get("steps")
    if not isinstance(steps, list):
        return out
    tools = raw.get("tools") if isinstance(raw.get("tools"), dict) else {}
    seen: dict[str, tuple[Any, ...]] = {}
    for step, path in _all_steps(raw):
        sid = step.get("id")
        if isinstance(sid, str) and _IDENT.match(sid):
            if sid in seen:
                first = _format_path(seen[sid])
                out.append(((*path, "id"), f"duplicate step id {sid!r} (first used at {first})"))
            else:
                seen[sid] = path
        for kind in ("call_tool", "schedule"):
            body = step.get(kind)
            if isinstance(body, dict) and isinstance(body.get("tool"), str):
                tool = body["tool"]
                if tools is not None and tool not in tools:
                    hint = _did_you_mean(tool, tools)
                    message = f"tool {tool!r} is not declared under 'tools'{hint}"
                    out.append(((*path, kind, "tool"), message))
    from ._reads import check_reads

    out.extend(check_reads(raw))
    return out


# --- YAML with positions ----------------------------------------------------------


class _Loader(yaml.CSafeLoader):
    """Safe YAML without implicit timestamps: spec values stay JSON values."""


# YAML 1.1 reads yes/no/on/off as booleans and dates as datetimes, which
# breaks options like [yes, no]; specs follow YAML 1.2's core schema instead:
# only true/false are booleans and there are no implicit timestamps.
_BOOL_12 = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
_Loader.yaml_implicit_resolvers = {}
for _ch, _resolvers in yaml.CSafeLoader.yaml_implicit_resolvers.items():
    for _tag, _rx in _resolvers:
        if _tag == "tag:yaml.org,2002:timestamp":
            continue
        if _tag == "tag:yaml.org,2002:bool":
            if _ch not in "tTfF":
                continue
            _rx = _BOOL_12
        _Loader.yaml_implicit_resolvers.setdefault(_ch, []).append((_tag, _rx))

Positions: TypeAlias = dict[tuple[Any, ...], tuple[int, int]]


def _positions(node: yaml.Node, path: tuple[Any, ...], out: Positions, dups: list[Any]) -> None:
    """Record where each key (and each list item) sits; note duplicate keys."""
    out.setdefault(path, (node.start_mark.line + 1, node.start_mark.column + 1))
    if isinstance(node, yaml.MappingNode):
        seen: set[Any] = set()
        for key_node, value_node in node.value:
            key = key_node.value
            here = (*path, key)
            mark = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            if key in seen:
                dups.append((here, f"duplicate key {key!r}", mark))
            seen.add(key)
            out.setdefault(here, mark)
            _positions(value_node, here, out, dups)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _positions(item, (*path, i), out, dups)


def _locate(path: tuple[Any, ...], positions: Positions) -> tuple[int, int] | None:
    # A key's own position is the most precise place for "unknown key" and for
    # problems with its value; fall back to the nearest enclosing node.
    probe = path
    while True:
        if probe in positions:
            return positions[probe]
        if not probe:
            return None
        probe = probe[:-1]


def _format_path(path: tuple[Any, ...]) -> str:
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text


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
    from ._validate import schema_problems

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
    from ._validate import input_problems

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
