"""The flow model: the frozen attrs classes a spec becomes, their constrained
scalars, and the tables of the spec's keys (step kinds, common and top-level keys).

Pure data: no structuring, no parsing, no I/O.
"""

from __future__ import annotations

import re
from typing import Any, Literal, NewType, TypeAlias

import attrs

from .expr import Cond, Template, compile_template
from .metadata import MetaType
from .schedules import Schedule
from .times import MAX_DURATION_MS

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
# How a parallel's branches or a for_each's iterations share the budget left.
Share: TypeAlias = Literal["even", "first-come"]
# What becomes of a work step's call when the run stops waiting for it
# (a timeout, a lost race, a cancel): Temporal's three activity cancellation types.
Cancellation: TypeAlias = Literal["try_cancel", "wait_cancellation_completed", "abandon"]

# --- the model -------------------------------------------------------------------


@attrs.frozen
class DurationExpr:
    """A duration decided when its step begins: a template (``${...}``) whose
    value is milliseconds or duration text (``90s``, ``PT2H``), read then by
    ``times.parse_duration``; a bad value fails the step ``invalid-duration``."""

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
class UsageCap:
    """The most of each budget limit a step's work is handed (a step's
    ``max_usage``): a limit not written is not capped."""

    steps: Amount | None = None
    cost_minor_units: Amount | None = None
    tokens: Amount | None = None
    tool_calls: Amount | None = None
    turns: Amount | None = None


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
    # Whether a person approves each call first: always, never, or when the
    # condition holds over the call's evaluated input (bound as ``input``).
    needs_approval: bool | Cond = False


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
    max_running_updates: Count = Count(10)  # updates whose handlers run at once
    max_updates: Count = Count(2000)  # updates accepted per incarnation


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
    # Branch -> its weight in even shares of the budget (a branch not named: 1).
    weights: dict[str, Count] = attrs.field(factory=dict)
    share: Share = "even"


@attrs.frozen
class ForEachStep:
    items: Template
    steps: tuple[Step, ...]
    as_: Ident = Ident("item")
    index: Ident = Ident("index")
    max_concurrency: Count | None = None
    max_items: Count | None = None  # more items fail the step ``too-many-items``
    share: Share = "even"


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
    delay_ms: Duration = Ms(0)
    input: Template = attrs.field(factory=lambda: compile_template(None))
    outlive_run: bool = False
    # A recurring call: every ``every_ms`` or at each ``cron`` point (in
    # ``timezone``, UTC when None), ``count`` firings at most, none after
    # ``until_ms`` (a template giving epoch milliseconds).
    every_ms: Duration | None = None
    cron: str | None = None
    timezone: str | None = None
    count: Count | None = None
    until_ms: Template | None = None


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
    # Steps handed a budget: the most of each limit their work is handed.
    max_usage: UsageCap | None = None


@attrs.frozen
class UpdateDecl:
    """One declared update (``updates.<name>``).

    ``examples``: inputs the tools send when they try the update (each passes
    ``input_schema``); ``scoped``: the ids of the handler's steps whose results
    live in the handler's own scope (loops' bodies excluded: they have theirs).
    """

    name: str
    steps: tuple[Step, ...] = ()
    description: str | None = None
    input_schema: dict[str, Any] | None = None
    validator: Cond | None = None
    examples: tuple[Any, ...] = ()
    reply: Template | None = None
    scoped: tuple[str, ...] = ()


@attrs.frozen
class QueryDecl:
    """One declared query (``queries.<name>``): a template over the run's state."""

    name: str
    value: Template
    description: str | None = None
    args_schema: dict[str, Any] | None = None


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
    # The top-level ``updates:`` and ``queries:`` (``language.updates``), by name.
    updates: dict[str, UpdateDecl] = attrs.field(factory=dict)
    queries: dict[str, QueryDecl] = attrs.field(factory=dict)
    # What each step needs at run time, worked out by the decision layer the
    # first time it begins the step (``decision.compiled``): never part of the
    # spec, its hash or its equality.
    compiled: dict[str, Any] = attrs.field(factory=dict, init=False, repr=False)

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
    "max_usage",
    "compensate",
    "catch",
    "description",
)
# The step kinds whose work a host runs and can watch for heartbeats.
_HEARTBEAT_KINDS = frozenset({"call_tool", "run_agent", "run_team"})
# The step kinds whose work is handed a budget (``budgetRemaining``).
_BUDGETED_KINDS = frozenset({"run_agent", "run_team", "run_subflow"})
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
    "updates",
    "queries",
)
