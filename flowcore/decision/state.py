"""The run state: a value, never mutated, cheap to derive the next one from.

A ``State`` is a handful of records, each owning one concern:

- ``run``: who the run is (id, depth, input, start); never changes;
- ``ledger``: the budget and what is spent;
- ``tree``: the frames that run now (see ``transitions``), their
  variables, the compensation stack and how the run will end;
- ``waiting``: every key the run waits for (``Pending``, by kind), keys it
  stopped waiting for (``Resolution``), buffered signals, held work;
- ``results``: step results (``results.ResultStore``);
- ``report``: how every work effect ended, as a persistent list of chunks
  (its rows and links are ``report_rows``'s, named here too);
- ``schedules``: detached scheduled calls.

A transaction copies these references, replaces the records it changes and
builds a new ``State`` from them. The snapshot (``snapshot.encode_state``) is
derived from the same records: their fields are written once, here.

Records are frozen msgspec Structs rather than attrs classes: they are created
on every event, msgspec builds them several times faster
(``benchmarks/bench_advance.py --model``), and they encode to snapshot bytes
without a conversion layer. Those that hold only strings, numbers and the
run's JSON data are not tracked by the garbage collector (``gc=False``). The
two linked lists (``ReportLink``, ``CompLink``) stay tracked: a tracked
object's deallocation is iterative, and a long chain freed at once would
otherwise overflow the C stack.

This module must never do I/O.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal, TypeAlias

import immutables
import msgspec

from ..language.spec import Flow
from .report_rows import (
    REPORT_CHUNK,
    ReportLink,
    ReportRow,
    add_report_row,
    iter_report,
    oldest_first,
)
from .results import ResultStore
from .update_wire import UpdateReply
from .wire import (
    BudgetRemaining,
    CallTool,
    ContinueAsNew,
    Effect,
    ErrorInfo,
    ExhaustedLimit,
    RunAgent,
    RunSubflow,
    RunTeam,
    Settled,
    SignalRun,
)

__all__ = [
    "REPORT_CHUNK",
    "Closing",
    "CompLink",
    "Decision",
    "Ending",
    "Env",
    "ApprovalProgress",
    "ForEachProgress",
    "Frame",
    "Held",
    "How",
    "Journal",
    "Ledger",
    "ListKind",
    "ParallelProgress",
    "Pending",
    "PendingKind",
    "RepeatProgress",
    "ReportLink",
    "ReportRow",
    "Resolution",
    "Run",
    "Recurrence",
    "Sched",
    "SchedStatus",
    "ScheduledAnswer",
    "SeqFrame",
    "State",
    "StepFrame",
    "TeamProgress",
    "Tree",
    "TryProgress",
    "UpdateRec",
    "Waiting",
    "add_report_row",
    "iter_report",
    "oldest_first",
    "parent_close",
]


class _S(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Base for state records."""


_EMPTY: immutables.Map[Any, Any] = immutables.Map()


# --- what the run waits for -----------------------------------------------------------


class PendingKind(StrEnum):
    """What a pending key waits for. ``transitions.ANSWERS`` says which event answers which."""

    WORK = "work"  # a work effect (run-agent, run-team, call-tool, run-subflow)
    SCHEDULED_CALL = "sched-call"  # the call-tool of a scheduled call
    QUESTION = "ask"  # an ask-human
    SIGNAL = "signal"  # an await-signal
    # Timers, by role (``transitions.TIMERS``):
    SLEEP = "wait"  # a sleep step
    STEP_TIMEOUT = "timeout"  # a step's timeout_ms
    ATTEMPT_TIMEOUT = "attempt-timeout"  # a step's attempt_timeout_ms, for one attempt
    BACKOFF = "backoff"  # the pause before a retry
    DEADLINE = "deadline"  # the wall-clock budget
    TICK = "tick"  # a repeat's next fire
    QUESTION_TIMEOUT = "ask-timeout"
    SIGNAL_TIMEOUT = "signal-timeout"
    SCHEDULE_DELAY = "sched-delay"  # a scheduled call's delay
    CHILD = "child"  # a child run its step no longer waits for, that the run waits for
    # before it settles (``run_subflow.parent_close: wait``)
    # Work of ``cancellation: wait_cancellation_completed`` the run stopped waiting
    # for: the host cancels it, and its end (any answer) is awaited by ``frame``
    # (a step that ends once it comes; "": the run, before it settles).
    CANCELLING = "cancelling"


WorkKind: TypeAlias = Literal["run-agent", "run-team", "call-tool", "run-subflow", "signal-run"]
ReportStatus: TypeAlias = Literal["succeeded", "failed", "uncertain", "not-started"]


class Pending(_S, frozen=True, gc=False, array_like=True):
    """Something the run waits for, by idempotency key.

    ``frame``: the frame that owns it (a schedule id for scheduled calls and
    their delay). ``sent``: the effect as it was emitted (a timer's is its
    sleep), so that a state can say what it waits for (``waiting_for``) and
    an unknown outcome is re-issued exactly. Work entries also say which
    effect it is, for the report.
    """

    kind: PendingKind
    frame: str
    sent: Effect
    effect: str = ""  # the wire kind of a work effect
    member: str = ""  # a team member's name, for member run-agent effects
    seq: int = 0  # invocation order of a work effect, for the settled report
    target: str = ""  # the tool, agent, team or flow a work effect addresses
    # What work handed a budget was handed (its ``budgetRemaining``): held back
    # from what others are handed until it stops being pending (shares.py).
    reserved: BudgetRemaining | None = None


def parent_close(entry: Pending) -> str:
    """What stopping to wait for ``entry`` does to it: ``cancel`` (the host stops
    it), ``abandon`` (left to run on: a child run of ``run_subflow.parent_close:
    abandon`` or a detached child, work of ``cancellation: abandon``) or ``wait``
    (the run waits for the child)."""
    sent = entry.sent
    if not isinstance(sent, RunSubflow):
        return "abandon" if getattr(sent, "cancellation", "") == "abandon" else "cancel"
    return "abandon" if sent.detached else sent.parent_close


class How(StrEnum):
    """Why a key is no longer waited for, when that must be remembered."""

    ABANDONED = "abandoned"  # its step ended another way: a late answer is accepted once
    TAKEN_BACK = "taken back"  # abandoned in the decision that emitted it: never reached the host
    LATE = "late"  # abandoned, and its late answer has come
    DETACHED = "detached"  # a child run left to run on (``parent_close: abandon``,
    # ``detached``) or work of ``cancellation: abandon``: its step ended another
    # way; a late answer is accepted once


class Resolution(_S, frozen=True, gc=False, array_like=True):
    """A key the run stopped waiting for; its answer, if any, is late.

    What it waited for is kept, so that a late answer of the wrong kind, or
    not among a question's options, is still rejected; abandoned work keeps
    its report row, which a late result rewrites.
    """

    how: How
    waited: PendingKind | None = None
    step: str = ""  # the question's step, to check a late answer's options
    row: ReportRow | None = None


class Held(_S, frozen=True, gc=False, array_like=True):
    """A work effect held back by ``limits.max_concurrency``."""

    frame: str
    effect: RunAgent | RunTeam | CallTool | RunSubflow | SignalRun
    seq: int
    target: str
    member: str = ""  # a team member's name, when the work is a member's run-agent


class Waiting(_S, frozen=True, gc=False):
    """Every key the run waits for, and the signals and work it holds."""

    pending: immutables.Map[str, Pending] = _EMPTY
    resolved: immutables.Map[str, Resolution] = _EMPTY  # keys that must still be recognised
    signals: immutables.Map[str, tuple[Any, ...]] = _EMPTY  # buffered payloads
    waiters: immutables.Map[str, tuple[str, ...]] = _EMPTY  # signal -> waiting keys
    queue: immutables.Map[int, Held] = _EMPTY  # held work (max_concurrency), by position
    queue_head: int = 0
    queue_tail: int = 0
    in_flight: int = 0  # work effects issued and not answered
    seq: int = 0  # work effects requested so far: the report's order
    # Signals sent with a key, and waits with a key, by ``[name, key]`` (JSON text).
    keyed_signals: immutables.Map[str, tuple[Any, ...]] = _EMPTY
    keyed_waiters: immutables.Map[str, tuple[str, ...]] = _EMPTY


# --- the tree of frames ---------------------------------------------------------------------


class ListKind(StrEnum):
    """Which list of steps a ``SeqFrame`` runs, relative to its owner step."""

    FLOW = "flow"  # the flow's own steps (no owner)
    CASE = "case"  # a switch case (``index``)
    TRY = "try"
    CATCH = "catch"  # a catch clause (``index``)
    BRANCH = "branch"  # a parallel branch (``branch``)
    BODY = "body"  # a for_each iteration or a repeat fire (``index``)
    COMPENSATION = "compensation"  # the owner's compensate steps
    FINAL = "final"  # on_budget_exhausted's steps, run within the reserve (no owner)
    UPDATE = "update"  # an update's handler (no owner; ``index``: its seq, ``branch``: its id)


class Env(_S, frozen=True, gc=False, array_like=True):
    """Where expressions look things up: loop variables and the results scope."""

    parent: str | None
    scope: str
    vars: dict[str, Any] = {}


class ParallelProgress(_S, frozen=True, gc=False, tag="parallel"):
    waiting: tuple[str, ...] = ()  # branches not started yet (max_concurrency)
    running: tuple[str, ...] = ()
    outcomes: dict[str, Any] = {}  # branch -> {"status", "output"|"error"}


class ForEachProgress(_S, frozen=True, gc=False, tag="for_each"):
    items: tuple[Any, ...] = ()
    next: int = 0
    running: int = 0
    done: int = 0


class RepeatProgress(_S, frozen=True, gc=False, tag="repeat"):
    fires: int = 0
    due_ms: int = 0
    every_ms: int = 0  # a cadence decided when the step began (0: the spec's, or a cron)
    last: Any = None
    comp_depth: int = 0  # compensation stack depth when the current fire began


class TeamProgress(_S, frozen=True, gc=False, tag="team"):
    next: int = 0
    running: tuple[str, ...] = ()
    outputs: dict[str, Any] = {}


class TryProgress(_S, frozen=True, gc=False, tag="try"):
    phase: Literal["try", "catch"] = "try"


class SignalsProgress(_S, frozen=True, gc=False, tag="signals"):
    """What a collecting ``await_signal`` (``count``, ``until``) took so far:
    ``{signal, payload}`` in order of arrival."""

    received: tuple[Any, ...] = ()


class ApprovalProgress(_S, frozen=True, gc=False, tag="approval"):
    """A call waiting for a person's approval: the input the question showed,
    which is the input issued once approved."""

    input: Any = None


Progress: TypeAlias = (
    ParallelProgress
    | ForEachProgress
    | RepeatProgress
    | TeamProgress
    | TryProgress
    | SignalsProgress
    | ApprovalProgress
)


class SeqFrame(_S, frozen=True, gc=False, tag="seq"):
    """A list of steps run one after another: list ``list`` of step ``owner``."""

    id: str
    parent: str | None
    env: str
    prefix: str
    owner: str  # the step owning the list, "" for the flow's own steps
    list: ListKind = ListKind.FLOW
    index: int = 0  # the case, catch clause, iteration or fire
    branch: str = ""  # the parallel branch


class StepFrame(_S, frozen=True, gc=False, tag="step"):
    """One running step."""

    id: str
    parent: str
    env: str
    prefix: str
    step: str
    attempt: int = 1
    key: str | None = None  # outstanding effect for work and waiting steps
    timer: str | None = None  # the step's timeout timer
    backoff: str | None = None  # a retry backoff timer in flight
    unknowns: int = 0  # re-issues after an unknown outcome
    progress: Progress | None = None
    failures: tuple[ErrorInfo, ...] = ()  # the errors of its earlier attempts
    attempt_timer: str | None = None  # this attempt's attempt_timeout_ms timer
    heartbeat_ms: int | None = None  # this attempt's heartbeat_timeout_ms
    heartbeat_details: Any = None  # the last an attempt's heartbeat timeout reported
    # Calls of ``cancellation: wait_cancellation_completed`` being cancelled that
    # this step waits for before it ends, and the outcome it then ends with.
    cancelling: int = 0
    closing: Closing | None = None


class Closing(_S, frozen=True, gc=False, array_like=True):
    """The outcome a step ends with once the calls it waits to see cancelled have
    ended (``StepFrame.closing``)."""

    ok: bool
    output: Any = None
    error: ErrorInfo | None = None


Frame: TypeAlias = SeqFrame | StepFrame

SettledStatus: TypeAlias = Literal["completed", "failed", "cancelled", "budget-exhausted"]


class CompLink(_S, frozen=True, array_like=True):
    """The compensation stack, newest first, as a persistent linked list."""

    step: str
    env: str
    prefix: str
    depth: int = 1  # links in the stack, this one included
    rest: CompLink | None = None


class Ending(_S, frozen=True, gc=False, array_like=True):
    """How the run will settle once compensations (or outliving calls) are done."""

    status: SettledStatus
    output: Any = None
    error: ErrorInfo | None = None


class UpdateRec(_S, frozen=True, gc=False, array_like=True):
    """One update the incarnation took (``Tree.updates``): ``seq`` numbers it
    (its handler's frames are under ``~update-<seq>/``)."""

    name: str
    seq: int
    status: Literal["running", "completed", "failed"] = "running"
    output: Any = None
    error: ErrorInfo | None = None
    principal: str | None = None


class Tree(_S, frozen=True, gc=False):
    """The frames that run now, their variables, and how the run winds down."""

    frames: immutables.Map[str, Frame] = _EMPTY
    envs: immutables.Map[str, Env] = _EMPTY
    compensations: CompLink | None = None
    ending: Ending | None = None  # set while compensations run before settling
    exhausted: str | None = None  # the limit reached, while on_budget_exhausted's steps run
    # Set when this incarnation ended by ``continue_as_new``: the effect that
    # starts the next one (``flowcore.continue_run``). No event applies after.
    continued: ContinueAsNew | None = None
    # The run's incarnation: 1, then one more after each ``continue_as_new``
    # (here, not in ``Run``, so that the snapshots of runs that never continue
    # keep their bytes: this record's defaults are left out of them).
    incarnation: int = 1
    # The updates this incarnation took, by update id (language.md §16).
    updates: immutables.Map[str, UpdateRec] = _EMPTY


# --- budget, schedules, report ------------------------------------------------------------


class Ledger(_S, frozen=True, gc=False, array_like=True):
    """The root run's budget: limits (None = unlimited) and what is used."""

    steps: int | None
    cost: int | None
    wall_clock_ms: int | None
    used_steps: int = 0
    used_cost: int = 0
    # Added in a later flowcore: at the end, with defaults, so that older
    # snapshots (which end at used_cost) decode unchanged.
    tokens: int | None = None
    tool_calls: int | None = None
    turns: int | None = None
    used_tokens: int = 0
    used_tool_calls: int = 0
    used_turns: int = 0
    # The split of used_tokens where agents report it (``Usage``): counted
    # beside the total, never limited. Also at the end, for older snapshots.
    used_input_tokens: int = 0
    used_output_tokens: int = 0
    used_cache_read_tokens: int = 0
    # What the pending work handed a budget holds (``Pending.reserved``), summed:
    # what is free to hand on is what remains less this. At the end, as above.
    reserved_steps: int = 0
    reserved_cost: int = 0
    reserved_tokens: int = 0
    reserved_tool_calls: int = 0
    reserved_turns: int = 0

    def remaining(self, started_ms: int, now_ms: int) -> BudgetRemaining:
        """What is left at ``now_ms`` of a run started at ``started_ms``."""
        wall = None
        if self.wall_clock_ms is not None:
            wall = max(0, started_ms + self.wall_clock_ms - now_ms)
        return BudgetRemaining(
            steps=max(0, (self.steps or 0) - self.used_steps),
            cost_minor_units=_left(self.cost, self.used_cost),
            wall_clock_ms=wall,
            tokens=_left(self.tokens, self.used_tokens),
            tool_calls=_left(self.tool_calls, self.used_tool_calls),
            turns=_left(self.turns, self.used_turns),
        )

    def over(self) -> ExhaustedLimit | None:
        """The limit used beyond what it allows, if one is (``exhausted``'s words)."""
        checks: tuple[tuple[int | None, int, ExhaustedLimit], ...] = (
            (self.steps, self.used_steps, "steps"),
            (self.cost, self.used_cost, "cost"),
            (self.tokens, self.used_tokens, "tokens"),
            (self.tool_calls, self.used_tool_calls, "tool-calls"),
            (self.turns, self.used_turns, "turns"),
        )
        for limit, used, name in checks:
            if limit is not None and used > limit:
                return name
        return None


def _left(limit: int | None, used: int) -> int | None:
    return None if limit is None else max(0, limit - used)


class SchedStatus(StrEnum):
    PENDING = "pending"  # its delay has not fired
    CALLED = "called"  # its call-tool is out (or held)
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    UNCERTAIN = "uncertain"
    CANCELLED = "cancelled"


class Recurrence(_S, frozen=True, gc=False, array_like=True):
    """When a recurring scheduled call fires again: every ``every_ms``, or at
    each point of ``cron`` read in ``timezone`` (UTC when None); it ends after
    ``count`` firings or when its next firing would be after ``until_ms``."""

    every_ms: int | None = None
    cron: str | None = None
    timezone: str | None = None
    count: int | None = None
    until_ms: int | None = None


class Sched(_S, frozen=True, gc=False, array_like=True):
    """A detached scheduled call, and what a person needs to know about it.

    ``created_ms`` and ``due_ms``: when it was scheduled and when its delay
    fires (run-now moves ``due_ms`` to the moment it was issued);
    ``attempts``: how many times its call-tool was issued (a readonly or
    idempotent call is issued again after an unknown outcome, up to
    ``transitions.SCHEDULED_ATTEMPTS``); ``finished_ms`` and ``error``:
    when and how it ended. ``outside``: added by ``scheduled-add-requested``,
    not by a step. Fields added after the first snapshot format have
    defaults, so older snapshots still decode.
    """

    status: SchedStatus
    tool: str
    input: Any = None
    outlive: bool = False
    created_ms: int = 0
    due_ms: int = 0
    attempts: int = 0
    finished_ms: int | None = None
    error: ErrorInfo | None = None
    outside: bool = False
    # A recurring call: its recurrence, the firings issued so far, and whether
    # it was cancelled while a firing was out (no firing follows that one).
    recur: Recurrence | None = None
    fires: int = 0
    stopping: bool = False
    # Replays of a finished call: how many were issued, and the requests that
    # asked for them (the same request again replays nothing).
    replays: int = 0
    replay_requests: tuple[str, ...] = ()


class Journal(_S, frozen=True, gc=False, array_like=True):
    """What the last transition added to the parts of the state that only grow.

    ``flowcore.persist`` reads it to store a run incrementally.
    """

    results: tuple[str, ...] = ()  # scoped step ids whose result was (re)written
    report: int = 0  # report rows added at the head of the report list
    resolved: tuple[str, ...] = ()  # keys whose resolution was (re)written
    scheduled: tuple[str, ...] = ()  # schedule ids whose record changed, in order of change
    # Work keys the host must now cancel while the run waits for their end
    # (``PendingKind.CANCELLING``): ``flowcore.plan`` lists them under ``cancel``.
    cancelling: tuple[str, ...] = ()


class Run(_S, frozen=True, gc=False, array_like=True):
    """Who the run is. Never changes."""

    run_id: str
    depth: int
    input: Any
    started_ms: int
    # How the interpreter decides for this run (``flowcore.SEMANTICS``): fixed
    # at its start, so code that changed a decision since decides its runs
    # in flight, and replays their logs, as it did when they started.
    semantics: int = 1


Status: TypeAlias = Literal["running", "completed", "failed", "cancelled", "budget-exhausted"]


class State(msgspec.Struct, frozen=True, kw_only=True):
    """One run's state. Treat as opaque; ask it what it waits for with ``waiting_for``.

    ``report_complete`` is False only for a state that ``flowcore.persist``
    restored without its report rows (see there).
    """

    flow: Flow
    run: Run
    now_ms: int
    ledger: Ledger
    tree: Tree
    waiting: Waiting
    results: ResultStore
    report: ReportLink | None
    schedules: immutables.Map[str, Sched]
    settled: Settled | None
    journal: Journal = Journal()
    report_complete: bool = True
    scheduled_added: int = 0  # scheduled calls added from outside: numbers their ids
    # The run's metadata (field -> value; None when no field is set): given at
    # start, changed by set_metadata steps, replaced whole (never mutated).
    metadata: dict[str, Any] | None = None

    @property
    def run_id(self) -> str:
        return self.run.run_id

    @property
    def incarnation(self) -> int:
        """1, then one more each time the run continued as new."""
        return self.tree.incarnation

    @property
    def status(self) -> Status:
        """``running`` until the run settles, then how it settled."""
        return "running" if self.settled is None else self.settled.status

    @property
    def error(self) -> ErrorInfo | None:
        return None if self.settled is None else self.settled.error


class ScheduledAnswer(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """What a scheduled-call event from outside answers (``Decision.scheduled``).

    ``id``: the schedule id (for an add, the id it was given). ``done``: for a
    cancel or run-now, whether the call was still pending and so was
    cancelled or issued now (false for an unknown or finished id, as an
    answer, not an error); for an add, always true.
    """

    id: str
    done: bool


class Decision(msgspec.Struct, frozen=True):
    """The result of ``start`` or ``advance``: the next state and what to do.

    ``scheduled`` is set only by the scheduled-call events from outside
    (``scheduled-cancel-requested``, ``scheduled-run-now-requested``,
    ``scheduled-add-requested``): what the host tells whoever asked.
    ``replies``: the updates this decision ended, in order (what the host
    tells the callers who wait for them).
    """

    state: State
    effects: tuple[Effect, ...]
    scheduled: ScheduledAnswer | None = None
    replies: tuple[UpdateReply, ...] = ()
