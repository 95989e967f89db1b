"""The records a replay returns: ``ReplayReport`` and its ``TrajectoryEntry`` rows.

They live apart from ``replay``, which holds only the fold: kept that way,
the interpreter and the fold could be compiled (mypyc) without moving any
msgspec Struct, whose annotations msgspec reads when the class is made and
cannot read from a compiled module. ``flowcore._replay`` re-exports them.
"""

from __future__ import annotations

from typing import Any

import msgspec

from .._errors import FlowcoreError, ReplayDivergence
from ..decision.state import State
from ..decision.wire import (
    CarriedCall,
    CarriedSignal,
    Effect,
    ErrorInfo,
    Event,
    NonNegInt,
    Settled,
    Usage,
)

__all__ = ["ForkedFrom", "ReplayError", "ReplayReport", "TornTail", "TrajectoryEntry"]


class TornTail(msgspec.Struct, frozen=True):
    """An incomplete last record of a log (a crash mid-write), at byte ``offset``."""

    offset: int
    length: int
    reason: str


class ReplayError(FlowcoreError, ValueError):
    """The log and the flow given cannot be replayed together (not a divergence).

    Raised for a log of another flow id, a snapshot tail that does not begin
    at an event, or a ``until`` before the first record.
    """


class TrajectoryEntry(msgspec.Struct, kw_only=True, gc=False):
    """One thing that happened in a run, as replay saw it.

    ``kind`` is the effect kind (``call-tool``, ``run-agent``, ``run-team``,
    ``ask-human``, ``sleep``, ``await-signal``, ``run-subflow``,
    ``continue-as-new``: ``target`` names the next incarnation) or, for
    events that answer no effect, ``signal-received``, ``cancel-requested``,
    ``scheduled-cancel-requested``, ``scheduled-run-now-requested``,
    ``scheduled-add-requested`` (``key``: the schedule id), ``update-requested``
    (``key``: the update id, ``target`` its name, ``status`` ``running``,
    ``completed`` or ``failed``, ``output`` its reply) or ``event-rejected``.
    ``target`` is the tool, agent, team, flow or signal
    (for ``sleep``, the timer's role: ``wait``, ``timeout``, ``backoff``,
    ``deadline``, ``tick``, ``ask-timeout``, ``signal-timeout``,
    ``sched-delay``). ``input`` is the tool or subflow input, the prompt, the
    question, the time a timer is due, the cancel reason or the rejected
    event; ``output`` the result, answer or signal payload.

    ``status``: ``pending``, ``succeeded``, ``failed``, ``uncertain``,
    ``not-started``, ``answered``, ``fired``, ``received``, ``abandoned``
    (dropped before anything answered it), ``delivered`` / ``buffered``
    (signals), ``requested`` (cancel), ``rejected``; for the scheduled-call
    events from outside ``cancelled`` / ``issued`` / ``not-pending`` (the id
    was not pending) and ``scheduled``. ``issues`` counts
    re-issues under the same key after an unknown outcome, plus one.

    A plain record, filled in while replay folds (hence not frozen): treat
    the entries of a finished report as read-only.
    """

    index: int
    kind: str
    key: str = ""
    target: str = ""
    member: str | None = None
    input: Any = None
    status: str = "pending"
    output: Any = None
    error: ErrorInfo | None = None
    usage: Usage | None = None
    at: int = 0
    ended_at: int | None = None
    issues: int = 1
    note: str = ""


class ForkedFrom(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A fork's source: its run and the index of the first of its records not carried."""

    run_id: str
    index: NonNegInt


class ReplayReport(msgspec.Struct, frozen=True, kw_only=True):
    """What a replay found. ``ok`` when nothing diverged.

    ``version`` and ``spec_hash`` are what the log recorded (``run.started``;
    for a snapshot replay, the snapshot's flow); ``replayed_spec_hash`` is the
    flow replayed against: they differ when a log is replayed against a newer
    spec, which is allowed (``spec_matches`` is then false).

    ``usage`` sums the usage hosts reported (on success and on failure, as the
    ledger charges it); ``usage_by_member`` splits the part reported for team
    members' run-agent effects by member name; ``usage_delegated`` is the part
    child runs reported (``subflow-settled``); ``steps_used`` and ``cost_used``
    are the run's ledger (every work effect costs one step on top of reported
    usage), whose every figure is ``flowcore.usage_figures(state)``. ``state``
    is the state after the last record replayed (before a divergence), None if
    ``start`` itself failed.
    ``forked_from``: what the ``run.started`` of a fork's log records
    (``flowcore.fork``), else None.
    """

    run_id: str
    flow_id: str
    version: int
    spec_hash: str
    replayed_spec_hash: str
    first_index: int
    last_index: int
    records: int
    events: int
    rejected: int
    effects: int
    status: str
    settled: Settled | None
    trajectory: tuple[TrajectoryEntry, ...]
    usage: Usage
    usage_by_member: dict[str, Usage]
    steps_used: int
    cost_used: int
    unrecorded: tuple[Effect, ...] = ()
    usage_delegated: Usage = Usage()  # the part of ``usage`` child runs reported
    torn: TornTail | None = None
    divergence: ReplayDivergence | None = None
    state: State | None = None
    forked_from: ForkedFrom | None = None

    @property
    def ok(self) -> bool:
        return self.divergence is None

    @property
    def spec_matches(self) -> bool:
        return self.spec_hash == self.replayed_spec_hash


class _Started(msgspec.Struct, frozen=True, rename="camel"):
    flow_id: str
    version: int = 1
    spec_hash: str = ""
    input: Any = None
    budget: dict[str, int | None] | None = None
    depth: int = 0
    semantics: int = 1
    metadata: dict[str, Any] | None = None
    incarnation: int = 1
    signals: tuple[CarriedSignal, ...] = ()
    scheduled: tuple[CarriedCall, ...] = ()
    forked_from: ForkedFrom | None = None
    idle_incarnations: int = 0


class _Rejected(msgspec.Struct, frozen=True):
    event: Event
    reason: str = ""
