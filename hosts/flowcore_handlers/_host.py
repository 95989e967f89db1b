"""The ``Host`` contract: everything a person or program does to runs, on any host.

``Host`` is a ``typing.Protocol`` made of four areas (``RunCommands``,
``ScheduledCalls``, ``Schedules``, ``RunReads``). ``flowcore_local.LocalHost``
and ``flowcore_temporal.TemporalHost`` both satisfy it, and mypy checks that
they do; code written against ``Host`` runs on either. A host that cannot do
an operation raises ``HostRefusal`` (``.operation``, ``.why``, ``.host``), a
``HostFailure`` like every error a host raises for a request it cannot carry
out; specs/hosts.md lists, per operation and host, what is done and what is
refused and why.

The typed failures a surface maps without reading messages are here too:
``UnknownRun``, ``RunSettled``, ``NothingToCancel``, ``UnknownSchedule`` and
``NotPending``, each a ``HostFailure``; a host raises its own subclass of each
(also its own error class), with its own message.

Updates and queries (specs/language.md §16): ``RunCommands.update`` asks a
running run something and answers with an ``UpdateOutcome``; ``UnknownUpdate``
is an update id the run does not know.

The shared values where the hosts' own answers differ live here too:
``RunQuery`` / ``RunPage`` / ``RunSummary`` (runs a page at a time, in one
status vocabulary, ``RUN_STATUSES``) and ``Deleted`` (what a delete or prune
removed). This module holds types only: it does no I/O and never imports a host.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

import msgspec

import flowcore

__all__ = [
    "RUN_STATUSES",
    "Deleted",
    "Host",
    "HostFailure",
    "HostRefusal",
    "NotPending",
    "NothingToCancel",
    "RunCommands",
    "RunPage",
    "RunQuery",
    "RunReads",
    "RunSettled",
    "RunSummary",
    "ScheduledCallView",
    "ScheduledCalls",
    "Schedules",
    "UnknownRun",
    "UnknownSchedule",
    "UnknownUpdate",
    "UpdateOutcome",
    "status_problem",
]

RUN_STATUSES = (
    "running",
    "completed",
    "failed",
    "cancelled",
    "budget-exhausted",
    "terminated",
    "timed-out",
)
"""The words of ``RunSummary.status`` and ``RunQuery.status`` on every host."""


def status_problem(status: str | None) -> str | None:
    """What is wrong with ``status`` as a ``RunQuery.status`` (None: nothing)."""
    if status is None or status in RUN_STATUSES:
        return None
    return f"unknown run status {status!r:.60}: one of {', '.join(RUN_STATUSES)}"


class HostFailure(Exception):
    """A request a host cannot carry out; the message is one line. The base of
    ``flowcore_local.HostError`` and ``flowcore_temporal.TemporalHostError``."""


class HostRefusal(HostFailure):
    """An operation of the ``Host`` contract this host does not do, and why.

    Each host raises its own subclass (also its own error class), so a caller
    that catches the host's errors catches its refusals too."""

    def __init__(self, operation: str, why: str, *, host: str) -> None:
        super().__init__(f"{host} host cannot {operation}: {why}")
        self.operation = operation
        self.why = why
        self.host = host


class UnknownRun(HostFailure):
    """No run has the id ``run_id`` on this host."""

    def __init__(self, run_id: str, message: str | None = None) -> None:
        super().__init__(message or f"no run {run_id!r}")
        self.run_id = run_id


class RunSettled(HostFailure):
    """An operation that needs a running run, asked of one that has settled
    (``status``: its word in ``RUN_STATUSES``, None where the host cannot tell)."""

    def __init__(self, run_id: str, status: str | None, message: str | None = None) -> None:
        super().__init__(message or f"run {run_id!r} has settled")
        self.run_id = run_id
        self.status = status


class NothingToCancel(HostFailure):
    """A cancel that would change nothing (the run has settled, or already
    compensates): refused, and nothing is written."""

    def __init__(self, run_id: str, message: str | None = None) -> None:
        super().__init__(message or f"run {run_id!r}: nothing to cancel")
        self.run_id = run_id


class UnknownSchedule(HostFailure):
    """No schedule is named ``name`` on this host."""

    def __init__(self, name: str, message: str | None = None) -> None:
        super().__init__(message or f"no schedule {name!r}")
        self.name = name


class NotPending(HostFailure):
    """A scheduled call that is not pending (unknown, issued or finished). The
    contract's ``cancel_scheduled`` and ``run_scheduled_now`` answer False for it
    rather than raise; a host may raise it inside, where a bool cannot travel."""

    def __init__(self, schedule_id: str, message: str | None = None) -> None:
        super().__init__(message or f"scheduled call {schedule_id!r} is not pending")
        self.schedule_id = schedule_id


class UnknownUpdate(HostFailure):
    """Run ``run_id`` knows no update with the id ``update_id`` (in its current
    incarnation: a continue-as-new starts a fresh window of update ids)."""

    def __init__(self, run_id: str, update_id: str, message: str | None = None) -> None:
        super().__init__(message or f"run {run_id!r} has no update {update_id!r}")
        self.run_id = run_id
        self.update_id = update_id


class UpdateOutcome(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """Where an update stands: ``running`` (its handler has not ended), or
    ``completed`` with the handler's reply in ``output``, or ``failed`` with its
    ``error`` (``update-abandoned`` when the run settled or continued as new first)."""

    run_id: str
    update_id: str
    name: str
    status: Literal["running", "completed", "failed"]
    output: Any = None
    error: flowcore.ErrorInfo | None = None

    @classmethod
    def of(cls, run_id: str, view: flowcore.UpdateView) -> UpdateOutcome:
        """The outcome the core's ``UpdateView`` of run ``run_id`` stands for."""
        return cls(
            run_id=run_id,
            update_id=view.update_id,
            name=view.name,
            status=view.status,
            output=view.output,
            error=view.error,
        )


@dataclass
class Deleted:
    """What a delete or a prune removed (with ``dry_run``: would remove)."""

    roots: list[str] = field(default_factory=list)  # the trees' roots
    runs: list[str] = field(default_factory=list)  # every run removed, parents first
    rows: dict[str, int] = field(default_factory=dict)  # rows removed per table
    cancelled: list[str] = field(default_factory=list)  # runs ``force`` cancelled first
    dry_run: bool = False

    @property
    def total_rows(self) -> int:
        return sum(self.rows.values())

    def add(self, other: Deleted) -> None:
        self.roots += other.roots
        self.runs += other.runs
        for table, n in other.rows.items():
            self.rows[table] = self.rows.get(table, 0) + n


class RunQuery(msgspec.Struct, frozen=True, kw_only=True):
    """Which runs ``Host.find_runs`` lists, newest first, one page at a time.

    ``status``: one of ``RUN_STATUSES`` (another word is a ``HostFailure``
    naming them). ``principal``: the runs that principal started (child runs
    inherit their parent's); ``parent``: the child runs of that run. ``where``:
    metadata filters as ``flowcore.metadata_filters`` takes them. Times are
    epoch milliseconds of the run's start, ``started_from`` inclusive and
    ``started_to`` exclusive. ``cursor``: the ``RunPage.cursor`` of the page
    before, None for the first. ``id_prefix``: the runs whose id starts with it."""

    status: str | None = None
    flow: str | None = None
    where: list[str] | dict[str, Any] | None = None
    started_from_ms: int | None = None
    started_to_ms: int | None = None
    limit: int = 50
    cursor: str | None = None
    principal: str | None = None
    parent: str | None = None
    id_prefix: str | None = None


class RunSummary(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One run as ``Host.find_runs`` lists it and ``Host.summary`` reads it.

    ``status`` is one of ``RUN_STATUSES``; ``principal``: who started it (child
    runs inherit it), ``parent``: the run that started it as a child run;
    ``updated_ms``: when it last changed. ``flow_id``, ``principal`` and
    ``updated_ms`` are None where the host cannot tell them cheaply."""

    run_id: str
    status: str
    started_ms: int
    flow_id: str | None = None
    metadata: dict[str, Any] = {}
    principal: str | None = None
    parent: str | None = None
    updated_ms: int | None = None
    depth: int | None = None  # 0 a top-level run, 1 its child...; None: not told
    next_index: int | None = None  # the index its next log record will have; None: not told


class RunPage(msgspec.Struct, frozen=True, kw_only=True):
    """One page of runs; ``cursor`` asks for the next one (None: this was the last)."""

    runs: list[RunSummary]
    cursor: str | None = None


class ScheduledCallView(Protocol):
    """One scheduled call as ``Host.scheduled`` lists it (``flowcore.ScheduledCall``
    on Temporal, ``flowcore_local.ScheduledRow`` on the local host)."""

    @property
    def id(self) -> str: ...
    @property
    def run_id(self) -> str: ...
    @property
    def tool(self) -> str: ...
    @property
    def input(self) -> Any: ...
    @property
    def status(self) -> str: ...
    @property
    def created_ms(self) -> int: ...
    @property
    def due_ms(self) -> int: ...
    @property
    def attempts(self) -> int: ...
    @property
    def finished_ms(self) -> int | None: ...
    @property
    def error(self) -> flowcore.ErrorInfo | None: ...
    @property
    def outside(self) -> bool: ...
    # A recurring call: its recurrence (``due_ms`` is its next firing while pending)
    # and its firings so far; ``replays``: replays of a finished call.
    @property
    def every_ms(self) -> int | None: ...
    @property
    def cron(self) -> str | None: ...
    @property
    def timezone(self) -> str | None: ...
    @property
    def count(self) -> int | None: ...
    @property
    def until_ms(self) -> int | None: ...
    @property
    def fires(self) -> int: ...
    @property
    def replays(self) -> int: ...


class RunCommands(Protocol):
    """What changes runs: start, signal, answer, cancel, resume, fork, upgrade, delete,
    prune; updates (with their results) and queries; start-and-deliver in one write."""

    async def start(
        self,
        spec: str | Path,
        input: Any = None,
        run_id: str | None = None,
        *,
        tools: str | None = None,
        flows: Iterable[str | Path] = (),
        budget: flowcore.Budget | None = None,
        principal: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        priority: int | None = None,
        dedup_key: str | None = None,
        on_conflict: str = "refuse",
    ) -> str: ...

    async def signal(
        self, run_id: str, name: str, payload: Any = None, key: str | None = None
    ) -> None: ...

    async def signal_key(self, name: str, key: str, payload: Any = None) -> list[str]: ...

    async def update(
        self,
        run_id: str,
        name: str,
        input: Any = None,
        update_id: str | None = None,
        *,
        wait: bool = True,
        timeout_s: float | None = None,
        principal: str | None = None,
    ) -> UpdateOutcome:
        """Ask the run for update ``name`` with ``input``; its outcome.

        ``update_id`` None: the host makes one (a uuid4's hex). An id the run knows
        already runs nothing: its outcome is answered (waited for if asked). A
        refusal raises ``flowcore.UpdateRefused`` and nothing is written.
        ``wait`` False: answered once accepted (``running``, or the final outcome
        when the handler ended at once); with ``timeout_s``, ``running`` when it
        has not ended by then. ``UnknownRun``; ``RunSettled`` for a new id on a
        settled run."""
        ...

    async def update_result(
        self, run_id: str, update_id: str, *, wait: bool = False, timeout_s: float | None = None
    ) -> UpdateOutcome:
        """The outcome of update ``update_id`` (waited for with ``wait``);
        ``UnknownUpdate`` for an id the run does not know."""
        ...

    async def updates(self, run_id: str) -> list[UpdateOutcome]:
        """The updates of the run's current incarnation, in the order they were
        taken (``flowcore.updates_of``); ``UnknownRun``."""
        ...

    async def query(self, run_id: str, name: str, args: Any = None) -> Any:
        """The value of the run's query ``name`` with ``args``, running or settled;
        nothing is written. ``flowcore.QueryError`` as the core raises it."""
        ...

    async def update_with_start(
        self,
        spec: str | Path,
        input: Any,
        run_id: str,
        name: str,
        update_input: Any = None,
        update_id: str | None = None,
        *,
        wait: bool = True,
        timeout_s: float | None = None,
        on_conflict: str = "use-existing",
        principal: str | None = None,
        tools: str | None = None,
        flows: Iterable[str | Path] = (),
        budget: flowcore.Budget | None = None,
        metadata: Mapping[str, Any] | None = None,
        priority: int | None = None,
    ) -> UpdateOutcome:
        """Start run ``run_id`` if no run has the id, and deliver the update, in one
        durable write; then as ``update``. ``on_conflict`` ``"refuse"`` and a run
        holding the id: refused as ``start`` refuses it ("already exists")."""
        ...

    async def signal_with_start(
        self,
        spec: str | Path,
        input: Any,
        run_id: str,
        name: str,
        payload: Any = None,
        key: str | None = None,
        *,
        on_conflict: str = "use-existing",
        principal: str | None = None,
        tools: str | None = None,
        flows: Iterable[str | Path] = (),
        budget: flowcore.Budget | None = None,
        metadata: Mapping[str, Any] | None = None,
        priority: int | None = None,
    ) -> str:
        """Start run ``run_id`` if no run has the id, and send it signal ``name``,
        in one durable write; the run id."""
        ...

    async def answer(
        self, run_id: str, key: str, answer: Any, principal: str | None = None
    ) -> None: ...

    async def cancel(self, run_id: str, reason: str = "") -> None: ...

    async def resume(self, run_id: str, tools: str | None = None) -> None: ...

    async def fork(
        self,
        run_id: str,
        *,
        at: int | None = None,
        from_step: str | None = None,
        new_run_id: str | None = None,
        tools: str | None = None,
        cancel_source: bool = False,
    ) -> str: ...

    async def upgrade(
        self, run_id: str, spec: str | Path, *, dry_run: bool = False
    ) -> flowcore.Upgrade: ...

    async def delete(
        self, run_id: str, force: bool = False, *, timeout: float | None = None
    ) -> Deleted: ...

    async def prune(
        self,
        settled_before_ms: int,
        statuses: Iterable[str] | None = None,
        *,
        dry_run: bool = False,
    ) -> Deleted: ...


class ScheduledCalls(Protocol):
    """A run's scheduled calls: list (of one run, or of every run where the host
    can), add (once, or recurring: ``every_ms`` or ``cron`` in ``timezone``, at
    most ``count`` firings, none after ``until_ms``), cancel, run now, and replay
    a finished one (refused, with the reason, for an unknown id or a call still
    pending or out; the same ``request`` again replays nothing)."""

    async def scheduled(
        self, run_id: str | None = None, tool: str | None = None, status: str | None = None
    ) -> Sequence[ScheduledCallView]: ...

    async def add_scheduled(
        self,
        run_id: str,
        tool: str,
        input: Any = None,
        delay_ms: int = 0,
        *,
        every_ms: int | None = None,
        cron: str | None = None,
        timezone: str | None = None,
        count: int | None = None,
        until_ms: int | None = None,
    ) -> str: ...

    async def cancel_scheduled(self, run_id: str, schedule_id: str) -> bool: ...

    async def run_scheduled_now(self, run_id: str, schedule_id: str) -> bool: ...

    async def replay_scheduled(
        self, run_id: str, schedule_id: str, *, request: str | None = None
    ) -> None: ...


class Schedules(Protocol):
    """Schedules that start runs: add, list, show, pause, resume, trigger, backfill, delete.

    ``trigger_schedule`` returns the run it started where the host knows it at
    once; ``backfill_schedule`` the slots it started where the host lists them."""

    async def add_schedules(
        self, spec: str | Path, *, tools: str | None = None, owner: str | None = None
    ) -> list[str]: ...

    async def schedule_names(self) -> list[str]: ...

    async def schedule(self, name: str) -> dict[str, Any]: ...

    async def pause_schedule(self, name: str, note: str = "") -> None: ...

    async def resume_schedule(self, name: str, note: str = "") -> None: ...

    async def trigger_schedule(self, name: str) -> str | None: ...

    async def backfill_schedule(
        self, name: str, start_ms: int, end_ms: int
    ) -> list[dict[str, Any]] | None: ...

    async def delete_schedule(self, name: str) -> None: ...


class RunReads(Protocol):
    """Reads: runs a page at a time, one run's summary, one run shown, its events,
    export, questions, waits."""

    async def find_runs(self, query: RunQuery) -> RunPage: ...

    async def count_runs(self, query: RunQuery) -> dict[str, int]:
        """How many runs ``query``'s filters find, by status (``RUN_STATUSES`` words;
        a status none has is left out); its ``status``, ``cursor`` and ``limit`` are
        ignored. ``HostRefusal`` where the host cannot count them."""
        ...

    async def summary(self, run_id: str) -> RunSummary: ...

    async def flow(self, run_id: str) -> flowcore.Flow: ...

    @property
    def now(self) -> Callable[[], int]:
        """The host's clock, epoch milliseconds: a running run's age is read against it."""
        ...

    async def show(self, run_id: str) -> dict[str, Any]: ...

    async def metadata(self, run_id: str) -> dict[str, Any]: ...

    async def records(self, run_id: str, start: int = 0) -> list[flowcore.Record]: ...

    def events(
        self, run_id: str, start_index: int = 0, follow: bool = False
    ) -> AsyncIterator[flowcore.Record]: ...

    async def export(self, run_id: str) -> bytes: ...

    async def progress_records(self, run_id: str, start: int = 0) -> list[flowcore.Record]:
        """The run's progress stream from index ``start``: ``progress`` envelopes
        (``{key, step, data}``), after a ``progress.dropped`` one (``{from, count}``)
        when items from ``start`` on were dropped. ``HostRefusal`` where the host
        keeps none."""
        ...

    def progress(
        self, run_id: str, start: int = 0, follow: bool = False
    ) -> AsyncIterator[flowcore.Record]: ...

    async def open_questions(self, run_id: str) -> list[flowcore.Question]: ...

    async def waits(self, run_id: str) -> flowcore.Waits: ...


class Host(RunCommands, ScheduledCalls, Schedules, RunReads, Protocol):
    """Everything a person or program does to runs, on whichever host holds them."""
