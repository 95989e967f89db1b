"""The inputs and outputs of the catalogue's operations, as msgspec Structs.

Field names are camelCase on the wire, as in flowcore's wire protocol. An
input refuses fields it does not know. The HTTP API reads them from the path
(the fields its path names), the query string (GET, DELETE) or the JSON body;
the command line from its arguments and options. ``/openapi.json`` is built
from these same types.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec

from ._declare import Access

__all__ = [
    "AddScheduledInput",
    "AddSchedulesInput",
    "AnswerInput",
    "BackfillInput",
    "BudgetBody",
    "CancelInput",
    "CallInput",
    "CompareInput",
    "Comparison",
    "DeleteInput",
    "DeletedView",
    "EventsInput",
    "ForkInput",
    "Graph",
    "Nothing",
    "ProgressInput",
    "PruneInput",
    "QuestionList",
    "QuestionView",
    "ReplayScheduledInput",
    "ResumeInput",
    "RunInput",
    "RunPage",
    "RunSummary",
    "RunView",
    "RunsQuery",
    "FlowList",
    "FlowSummary",
    "RunCounts",
    "RunCountsQuery",
    "ScheduleChange",
    "ScheduleInput",
    "ScheduleList",
    "ScheduleNames",
    "ScheduledCallList",
    "ScheduledInput",
    "ScheduledView",
    "SignalInput",
    "SignalKeyInput",
    "SignalledRuns",
    "StartInput",
    "StreamQuery",
    "UpgradeInput",
    "UpgradeView",
    "SpecVersion",
    "Whoami",
    "INT64_MAX",
    "QueryDeclView",
    "QueryInput",
    "QueryValue",
    "SignalWithStartInput",
    "UpdateDeclView",
    "UpdateInput",
    "UpdateOutcome",
    "UpdateResultInput",
    "UpdateWithStartInput",
    "RunStatus",
]

Name = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
Note = Annotated[str, msgspec.Meta(max_length=1000)]
INT64_MAX = 2**63 - 1  # what the databases' integers hold: a larger index or count is refused
Index = Annotated[int, msgspec.Meta(ge=0, le=INT64_MAX)]
# The contract's status words (``flowcore_handlers.RUN_STATUSES``), as a type.
RunStatus = Literal[
    "running", "completed", "failed", "cancelled", "budget-exhausted", "terminated", "timed-out"
]


class _In(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, rename="camel"):
    """An operation's input: unknown fields are refused, not ignored."""


class _Out(msgspec.Struct, kw_only=True, rename="camel"):
    """An operation's output."""


class Nothing(_In):
    """No input."""


# --- inputs: runs --------------------------------------------------------------------


class RunInput(_In):
    """One run, named by its id."""

    run_id: Name


class BudgetBody(_In):
    """Caps the run below its spec's budget (each field optional)."""

    steps: Annotated[int, msgspec.Meta(ge=0)] | None = None
    cost_minor_units: Annotated[int, msgspec.Meta(ge=0)] | None = None
    wall_clock_ms: Annotated[int, msgspec.Meta(ge=1)] | None = None
    tokens: Annotated[int, msgspec.Meta(ge=0)] | None = None
    tool_calls: Annotated[int, msgspec.Meta(ge=0)] | None = None
    turns: Annotated[int, msgspec.Meta(ge=0)] | None = None


class StartInput(_In):
    """Start a run of a flow (on HTTP: a flow id of the server's registry folder;
    on the command line: a spec file)."""

    flow: Name
    input: Any = None
    budget: BudgetBody | None = None
    run_id: Name | None = None
    # Initial values of the metadata fields the flow declares (checked against them).
    metadata: dict[str, str | int | float | bool] | None = None
    priority: Annotated[int, msgspec.Meta(ge=-1000, le=1000)] | None = None
    dedup_key: Name | None = None
    # When ``runId`` names a run started with another input or spec: refuse it
    # (409), or answer with that run as it is (nothing written).
    on_conflict: Literal["refuse", "use-existing"] = "refuse"
    # The handler module the run uses (on a server: one of its modules; default,
    # the first of them with a handler for everything the flow calls).
    tools: Name | None = None


class CancelInput(_In):
    run_id: Name
    reason: Note = ""


class AnswerInput(_In):
    """Answer an open question: ``key`` is its key, relative key or step id."""

    run_id: Name
    key: Name
    answer: Any


class SignalInput(_In):
    """A signal; with ``key``, only a wait with that key takes it (buffered until then)."""

    run_id: Name
    name: Name
    payload: Any = None
    key: Name | None = None


class SignalKeyInput(_In):
    """Signal every run that waits for ``name`` with ``key`` now."""

    name: Name
    key: Name
    payload: Any = None


class ResumeInput(_In):
    """Retry a failed run from its failed step, with the handler module ``tools``
    from now on (on a server: one of its modules; default: the run's own)."""

    run_id: Name
    tools: Name | None = None


class ForkInput(_In):
    """A new run with the history of ``runId`` up to record ``at`` (or to just before
    step ``fromStep`` first ran); ``cancelSource`` cancels the source run."""

    run_id: Name
    at: Index | None = None
    from_step: Name | None = None
    new_run_id: Name | None = None
    cancel_source: bool = False


class UpgradeInput(_In):
    """Move a running run to another version of its flow, once its log replays against it."""

    run_id: Name
    flow: Name
    dry_run: bool = False


class DeleteInput(_In):
    """Delete a run and its child runs; ``force`` cancels a running one first."""

    run_id: Name
    force: bool = False


class PruneInput(_In):
    """Delete the runs that settled before ``settledBefore`` (with their child runs)."""

    settled_before: datetime  # RFC 3339 instant (no zone: UTC)
    statuses: list[RunStatus] | None = None
    dry_run: bool = False


class RunsQuery(_In):
    """Filters of the runs list; ``cursor`` is the ``nextCursor`` of the previous page."""

    flow: Name | None = None
    status: RunStatus | None = None
    parent: Name | None = None
    created_from: datetime | None = None  # RFC 3339 instant, inclusive (no zone: UTC)
    created_to: datetime | None = None  # exclusive
    cursor: str | None = None
    limit: Annotated[int, msgspec.Meta(ge=1, le=500)] = 50
    # Metadata filters, every one of which must hold (``where=amount>100``; repeatable).
    where: list[str] = []
    id_prefix: Name | None = None  # the runs whose id starts with it


class RunCountsQuery(_In):
    """Filters of a count of runs by status (those of ``RunsQuery`` but a status and paging)."""

    flow: Name | None = None
    parent: Name | None = None
    created_from: datetime | None = None  # RFC 3339 instant, inclusive (no zone: UTC)
    created_to: datetime | None = None  # exclusive
    where: list[str] = []
    id_prefix: Name | None = None


class EventsInput(_In):
    """A run's log records from index ``start``."""

    run_id: Name
    start: Index = 0


class CompareInput(_In):
    """Two runs whose logs are compared, record by record."""

    a: Name
    b: Name


class ProgressInput(_In):
    """A run's progress stream from index ``start`` (the first item wanted)."""

    run_id: Name
    start: Index = 0


class StreamQuery(_In):
    """Where an event stream starts: the index of the first record wanted."""

    start: Index = 0


# --- inputs: updates and queries ------------------------------------------------------

# How long a caller waits for an update's reply, in seconds (a day at most).
WaitSeconds = Annotated[float, msgspec.Meta(ge=0, le=86_400)]


class UpdateInput(_In):
    """Ask run ``runId`` for update ``name`` with ``input``. ``updateId``: the
    caller's id for it (default: one is made); the same id again runs nothing
    and answers the first outcome. ``wait``: until the update ends, or
    ``timeoutS`` seconds (then its status is ``running``)."""

    run_id: Name
    name: Name
    input: Any = None
    update_id: Name | None = None
    wait: bool = True
    timeout_s: WaitSeconds | None = None


class UpdateResultInput(_In):
    """The outcome of update ``updateId`` of run ``runId``; ``wait``: until it ends,
    or ``timeoutS`` seconds."""

    run_id: Name
    update_id: Name
    wait: bool = False
    timeout_s: WaitSeconds | None = None


class QueryInput(_In):
    """The value of query ``name`` of run ``runId`` with ``args``."""

    run_id: Name
    name: Name
    args: Any = None


class UpdateWithStartInput(_In):
    """Start run ``runId`` of ``flow`` with ``input`` unless a run holds the id, and
    ask it for update ``name`` with ``updateInput``, in one write. ``onConflict``
    ``refuse``: a run holding the id is refused (409); ``use-existing`` (the
    default): the update goes to it. Then as ``update``."""

    flow: Name
    run_id: Name
    name: Name
    input: Any = None
    update_input: Any = None
    update_id: Name | None = None
    wait: bool = True
    timeout_s: WaitSeconds | None = None
    on_conflict: Literal["refuse", "use-existing"] = "use-existing"
    budget: BudgetBody | None = None
    metadata: dict[str, str | int | float | bool] | None = None
    priority: Annotated[int, msgspec.Meta(ge=-1000, le=1000)] | None = None
    tools: Name | None = None


class SignalWithStartInput(_In):
    """Start run ``runId`` of ``flow`` with ``input`` unless a run holds the id, and
    send it signal ``name`` with ``payload`` (and ``key``), in one write."""

    flow: Name
    run_id: Name
    name: Name
    input: Any = None
    payload: Any = None
    key: Name | None = None
    on_conflict: Literal["refuse", "use-existing"] = "use-existing"
    budget: BudgetBody | None = None
    metadata: dict[str, str | int | float | bool] | None = None
    priority: Annotated[int, msgspec.Meta(ge=-1000, le=1000)] | None = None
    tools: Name | None = None


# --- inputs: scheduled calls and schedules -----------------------------------------------


class ScheduledInput(_In):
    """The scheduled calls of a run (``runId``), or of every run (admin)."""

    run_id: Name | None = None
    tool: Name | None = None
    status: (
        Literal["pending", "running", "done", "completed", "failed", "cancelled", "uncertain"]
        | None
    ) = None


class AddScheduledInput(_In):
    """Schedule a call of ``tool`` with ``input`` in ``delayMs`` for a running run;
    a recurring one every ``everyMs`` or at each point of ``cron`` (read in
    ``timezone``, an IANA name, UTC by default), at most ``count`` times, never
    after ``untilMs`` (epoch ms)."""

    run_id: Name
    tool: Name
    input: Any = None
    delay_ms: Annotated[int, msgspec.Meta(ge=0, le=INT64_MAX)] = 0
    every_ms: Annotated[int, msgspec.Meta(ge=1, le=INT64_MAX)] | None = None
    cron: Name | None = None
    timezone: Name | None = None
    count: Annotated[int, msgspec.Meta(ge=1, le=INT64_MAX)] | None = None
    until_ms: Annotated[int, msgspec.Meta(ge=0, le=INT64_MAX)] | None = None


class ReplayScheduledInput(_In):
    """Replay a finished scheduled call of a run (its id, or its id relative to the
    run); ``request``: the caller's name for this request, so that sending it
    again (a retry) replays once."""

    run_id: Name
    call_id: Name
    request: Name | None = None


class CallInput(_In):
    """One scheduled call of a run: its id, or its id relative to the run."""

    run_id: Name
    call_id: Name


class AddSchedulesInput(_In):
    """Add (or replace) the schedules a flow declares under ``schedules:``.
    ``owner``: the principal the runs they start belong to; default, the one who
    adds them (at the command line: no one, so the runs are the admins')."""

    flow: Name
    owner: Name | None = None


class ScheduleInput(_In):
    name: Name


class ScheduleChange(_In):
    name: Name
    note: Note = ""


class BackfillInput(_In):
    """Start the runs of the slots in [start, end) (RFC 3339 instants; no zone: UTC)."""

    name: Name
    start: datetime
    end: datetime


# --- outputs -------------------------------------------------------------------------


class RunSummary(_Out):
    run_id: str
    flow_id: str | None
    status: str
    parent: str | None
    depth: int | None  # 0 a top-level run; None where the host does not tell
    principal: str | None
    created_at: datetime  # RFC 3339, UTC
    updated_at: datetime | None  # None where the host does not tell
    duration_ms: int | None  # from start to settlement, or to now while running
    next_index: int | None  # the index the next log record will have (None: not told)
    metadata: dict[str, Any]  # the run's metadata fields now (empty: none set)


class RunPage(_Out):
    runs: list[RunSummary]
    next_cursor: str | None  # None on the last page


class RunCounts(_Out):
    """How many runs the filters find: by status (a status none has is left out), and in all."""

    counts: dict[str, int]
    total: int


class RunView(_Out):
    """One run: its summary, what it waits for (``flowcore.waiting_for``), its budget
    (``flowcore.usage_figures``: what it used and has left, as ``flowcore show``
    reports it), its handler failures, its usage by member and by child run, and
    once settled its output or error and the settled report."""

    run: RunSummary
    waits: dict[str, Any]
    budget: dict[str, Any]
    output: Any = None
    error: Any = None
    exhausted: str | None = None
    report: list[dict[str, Any]] | None = None
    dead_letters: list[dict[str, Any]] = msgspec.field(default_factory=list)
    children: list[str] = msgspec.field(default_factory=list)
    # Handler failures the host kept, the last per key: ``{key, type, message,
    # traceback, atMs}`` (``traceback`` null where the host keeps none).
    failures: list[dict[str, Any]] = msgspec.field(default_factory=list)
    # Usage reported for team members' work by member name, and by child run
    # (its id, the key of the step that started it); each a ``flowcore.Usage``
    # in wire form, tokens split.
    usage_by_member: dict[str, dict[str, int]] = msgspec.field(default_factory=dict)
    usage_by_child: dict[str, dict[str, int]] = msgspec.field(default_factory=dict)
    # The tools its flow declares ``schedulable`` (scheduled.add may call them).
    schedulable: list[str] = msgspec.field(default_factory=list)
    # The run a fork was forked from (its ``run.started`` record says), else null.
    forked_from: str | None = None
    # The updates and queries its flow declares.
    updates: list[UpdateDeclView] = msgspec.field(default_factory=list)
    queries: list[QueryDeclView] = msgspec.field(default_factory=list)


class UpdateOutcome(_Out):
    """Where an update stands: ``running``, ``completed`` with the reply in
    ``output``, or ``failed`` with its ``error`` (``{type, message, ...}``)."""

    run_id: str
    update_id: str
    name: str
    status: Literal["running", "completed", "failed"]
    output: Any = None
    error: dict[str, Any] | None = None


class QueryValue(_Out):
    """A query's value (null is a value)."""

    value: Any


class UpdateDeclView(_Out):
    """An update a flow declares: its name, description, input schema and example
    inputs (what a console's form offers)."""

    name: str
    description: str | None = None
    input_schema: dict[str, Any] | bool | None = None
    examples: list[Any] = msgspec.field(default_factory=list)


class QueryDeclView(_Out):
    """A query a flow declares: its name, description and the schema of its args."""

    name: str
    description: str | None = None
    args_schema: dict[str, Any] | bool | None = None


class QuestionView(_Out):
    key: str
    question: str
    options: list[str] | None = None
    step: str | None = None


class QuestionList(_Out):
    questions: list[QuestionView]


class SignalledRuns(_Out):
    """The runs a keyed signal was delivered to."""

    runs: list[str]


class SpecVersion(_Out):
    version: int
    spec_hash: str


class UpgradeView(_Out):
    """What an upgrade did (or with ``dryRun`` would do): ``moved`` the run now is
    on ``to``; ``changed`` false when it was there already; ``at`` the log index
    the new version writes first; ``pending`` the effects it waits for (wire form)."""

    run_id: str
    flow_id: str
    moved: bool
    changed: bool
    dry_run: bool
    from_: SpecVersion = msgspec.field(name="from")
    to: SpecVersion
    at: int
    pending: list[dict[str, Any]]


class DeletedView(_Out):
    """What a delete or prune removed (with ``dryRun``: would remove)."""

    roots: list[str]
    runs: list[str]
    rows: dict[str, int]
    cancelled: list[str]
    dry_run: bool


class Comparison(_Out):
    """Two runs' logs compared record by record, aligned by index.

    Two records at one index are the same when their ``type`` and ``data`` are,
    once what always differs between two runs is left out: the envelope's
    ``runId`` and ``at``, the instants in ``data`` (``atMs``, ``untilMs``,
    ``createdMs``, ``dueMs``, ``bufferedMs``), ``run.started``'s ``forkedFrom``,
    and each run's own id inside keys and values (``r-1/fetch#1`` reads as
    ``r-2/fetch#1``). ``first_difference``: the first index where they are not
    the same (or where one log has ended), None when the logs are the same;
    ``a_record``/``b_record`` the records there (None where that log has ended);
    ``fields``: what differs there (``type``, the members of ``data`` that do,
    or ``missing``); ``differing``: how many indices of the two logs differ."""

    a: str
    b: str
    a_count: int
    b_count: int
    same: int  # how many records from the start are the same
    differing: int
    first_difference: int | None = None
    a_record: dict[str, Any] | None = None
    b_record: dict[str, Any] | None = None
    fields: list[str] = msgspec.field(default_factory=list)


class Graph(_Out):
    """The run's flow as Mermaid text (``flowcore graph``) and the nodes it is at now.

    ``outcomes``: node id -> how the run stands there: ``running`` (its work is
    out), ``waiting`` (for an answer, a signal or a timer), ``done``, ``failed``,
    ``cancelled``, or, once the run settled, ``skipped`` (never reached or its
    branch not taken). Nodes of steps not reached yet in a running run are left out.
    """

    mermaid: str
    current: list[str]
    done: list[str]
    outcomes: dict[str, str] = msgspec.field(default_factory=dict)


class ScheduledView(_Out):
    """One scheduled call."""

    id: str
    run_id: str
    tool: str
    input: Any
    status: str
    created_ms: int
    due_ms: int
    attempts: int
    finished_ms: int | None = None
    error: Any = None
    outside: bool = False
    every_ms: int | None = None
    cron: str | None = None
    timezone: str | None = None
    count: int | None = None
    until_ms: int | None = None
    fires: int = 0  # a recurring call's firings so far; its next is due at dueMs
    replays: int = 0


class ScheduledCallList(_Out):
    calls: list[ScheduledView]


class ScheduleNames(_Out):
    """The schedules a spec added."""

    names: list[str]


class ScheduleList(_Out):
    schedules: list[dict[str, Any]]


class Whoami(_Out):
    principal: str | None
    access: Access


class FlowSummary(_Out):
    """A flow this surface can start. ``runnable``: whether one of its handler
    modules has a handler for every tool, agent and team the flow calls (None
    where it cannot tell: the runs' workers are elsewhere); ``modules``: those
    that have; ``missing``: what the module nearest to it lacks (``tool 'x'``)."""

    flow_id: str
    version: int
    source: str
    runnable: bool | None = None
    missing: list[str] = msgspec.field(default_factory=list)
    modules: list[str] = msgspec.field(default_factory=list)
    # The updates and queries the flow declares.
    updates: list[UpdateDeclView] = msgspec.field(default_factory=list)
    queries: list[QueryDeclView] = msgspec.field(default_factory=list)


class FlowList(_Out):
    flows: list[FlowSummary]
