"""The bodies the HTTP API reads and writes, as msgspec Structs.

The handlers decode requests into these types and encode their replies from
them, and Litestar builds ``/openapi.json`` from the same types: the
document cannot drift from what the server does. Field names are camelCase
on the wire, as in flowcore's wire protocol.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec

__all__ = [
    "Access",
    "AnswerBody",
    "BackfillBody",
    "BudgetBody",
    "CancelBody",
    "FlowList",
    "FlowSummary",
    "Graph",
    "Problem",
    "RunPage",
    "RunSummary",
    "RunView",
    "RunsQuery",
    "ScheduleChange",
    "ScheduleList",
    "ScheduledCallList",
    "SignalBody",
    "StartBody",
    "StreamQuery",
    "Whoami",
]

Access = Literal["read", "write", "admin"]
Name = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
INT64_MAX = 2**63 - 1  # what the database's integers hold: a larger index or count is refused


class _Body(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, rename="camel"):
    """A request body: unknown fields are refused, not ignored."""


class _Reply(msgspec.Struct, kw_only=True, rename="camel"):
    """A reply body."""


# --- requests ----------------------------------------------------------------------


class BudgetBody(_Body):
    """Caps the run below its spec's budget (each field optional)."""

    steps: Annotated[int, msgspec.Meta(ge=0)] | None = None
    cost_minor_units: Annotated[int, msgspec.Meta(ge=0)] | None = None
    wall_clock_ms: Annotated[int, msgspec.Meta(ge=1)] | None = None
    tokens: Annotated[int, msgspec.Meta(ge=0)] | None = None
    tool_calls: Annotated[int, msgspec.Meta(ge=0)] | None = None
    turns: Annotated[int, msgspec.Meta(ge=0)] | None = None


class StartBody(_Body):
    """Start a run of a flow of the server's registry folder."""

    flow: Name
    input: Any = None
    budget: BudgetBody | None = None
    run_id: Name | None = None
    # Initial values of the metadata fields the flow declares (checked against them).
    metadata: dict[str, str | int | float | bool] | None = None
    # When ``runId`` names a run started with another input or spec: refuse it
    # (409), or answer with that run as it is (200, nothing written).
    on_conflict: Literal["refuse", "use-existing"] = "refuse"


class CancelBody(_Body):
    reason: Annotated[str, msgspec.Meta(max_length=1000)] = ""


class AnswerBody(_Body):
    """Answer an open question: ``key`` is its key, relative key or step id."""

    key: Name
    answer: Any


class SignalBody(_Body):
    """A signal; with ``key``, only a wait with that key takes it (buffered until then)."""

    name: Name
    payload: Any = None
    key: Name | None = None


class BackfillBody(_Body):
    """Start the runs of the slots in [start, end) (RFC 3339 instants; no zone: UTC)."""

    start: datetime
    end: datetime


class ScheduleChange(_Body):
    note: Annotated[str, msgspec.Meta(max_length=1000)] = ""


# --- query strings -----------------------------------------------------------------


class RunsQuery(_Body):
    """Filters of the runs list; ``cursor`` is the ``nextCursor`` of the previous page."""

    flow: Name | None = None
    status: Literal["running", "completed", "failed", "cancelled", "budget-exhausted"] | None = None
    parent: Name | None = None
    created_from: datetime | None = None  # RFC 3339 instant, inclusive (no zone: UTC)
    created_to: datetime | None = None  # exclusive
    cursor: str | None = None
    limit: Annotated[int, msgspec.Meta(ge=1, le=500)] = 50
    # Metadata filters, every one of which must hold (``where=amount>100``; repeatable).
    where: list[str] = []


class StreamQuery(_Body):
    """Where an event stream starts: the index of the first record wanted."""

    start: Annotated[int, msgspec.Meta(ge=0, le=INT64_MAX)] = 0


# --- replies -----------------------------------------------------------------------


class RunSummary(_Reply):
    run_id: str
    flow_id: str
    status: str
    parent: str | None
    depth: int
    principal: str | None
    created_at: datetime  # RFC 3339, UTC
    updated_at: datetime
    duration_ms: int  # from start to settlement, or to now while running
    next_index: int  # the index the next log record will have
    metadata: dict[str, Any]  # the run's metadata fields now (empty: none set)


class RunPage(_Reply):
    runs: list[RunSummary]
    next_cursor: str | None  # None on the last page


class RunView(_Reply):
    """One run: its summary, what it waits for (``flowcore.waiting_for``), its budget
    (``flowcore.usage_figures``: what it used and has left, as ``flowcore show``
    reports it), and once settled its output or error and the settled report."""

    run: RunSummary
    waits: dict[str, Any]
    budget: dict[str, Any]
    output: Any = None
    error: Any = None
    exhausted: str | None = None
    report: list[dict[str, Any]] | None = None
    dead_letters: list[dict[str, Any]] = msgspec.field(default_factory=list)
    children: list[str] = msgspec.field(default_factory=list)


class Graph(_Reply):
    """The run's flow as Mermaid text (``flowcore graph``) and the nodes it is at now."""

    mermaid: str
    current: list[str]
    done: list[str]


class FlowSummary(_Reply):
    flow_id: str
    version: int
    source: str


class FlowList(_Reply):
    flows: list[FlowSummary]


class ScheduleList(_Reply):
    schedules: list[dict[str, Any]]


class ScheduledCallList(_Reply):
    calls: list[dict[str, Any]]


class Whoami(_Reply):
    principal: str
    access: Access


class Problem(_Reply, omit_defaults=True):
    """An error, as ``application/problem+json`` (RFC 9457)."""

    type: str
    title: str
    status: int
    detail: str
    instance: str | None = None
    options: list[str] | None = None  # an answer's allowed options, when it was not one
    open_questions: list[str] | None = None
