"""The run state: a value, never mutated, cheap to derive the next one from.

Everything that grows with a run's history shares structure with the
previous state instead of being copied: the report of work effects is a
persistent list, and step results are a small persistent map of recent ones
(``immutables.Map``) in front of a stack of frozen dicts, newest first. A
full batch of recent results becomes a new dict; dicts of equal size are
merged like the carries of a binary counter, so each result is copied
O(log n) times in all, by fast sequential dict copies, and a dict once built
is never changed (old states stay valid). A persistent hash map of every
result was the first design: inserting into a 100k-entry HAMT touches four
levels of nodes that are no longer in the CPU cache, and the cost per event
grew by half from 1k to 100k events (``benchmarks/bench_replay.py``).
A result is deleted by writing ``GONE`` over it; the oldest dict drops them.

Frames and their progress records are frozen msgspec Structs rather than attrs
classes: they are created on every event, msgspec builds them several times
faster (``benchmarks/bench_advance.py --model`` measures both side by side),
and they encode to snapshot bytes without a conversion layer. They are not
tracked by the garbage collector (``gc=False``): they hold strings, numbers
and the run's JSON data, so they never take part in a reference cycle, and a
replay allocates tens of them per event (untracking them saved 2-5% per
event). The two linked lists (``ReportLink``, ``CompLink``) stay tracked: a
tracked object's deallocation is iterative, and a long chain freed at once
would otherwise overflow the C stack.

A snapshot (``encode_state``) never embeds the spec; it pins the spec by its
content hash, and ``decode_state`` refuses a different spec.

This module must never do I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import islice
from typing import Any, Literal, TypeAlias

import immutables
import msgspec

from ._errors import ReportNeeded, SnapshotMismatch, WireError
from ._spec import Flow
from ._wire import CallTool, Effect, ErrorInfo, RunAgent, RunSubflow, RunTeam, Settled

__all__ = [
    "CompLink",
    "Decision",
    "Ending",
    "Env",
    "Held",
    "Journal",
    "ForEachProgress",
    "Frame",
    "ParallelProgress",
    "Pending",
    "RepeatProgress",
    "Sched",
    "ReportLink",
    "ReportRow",
    "add_report_row",
    "iter_report",
    "oldest_first",
    "SeqFrame",
    "State",
    "StateChanges",
    "StepFrame",
    "TeamProgress",
    "TryProgress",
    "GONE",
    "Results",
    "all_results",
    "decode_state",
    "encode_hot",
    "find_result",
    "merge_results",
    "encode_state",
    "restore_state",
    "state_changes",
]

SNAPSHOT_FORMAT = 1


class _Gone:
    """The value that marks a deleted result until the oldest dict drops it."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "GONE"


GONE: Any = _Gone()

Results: TypeAlias = tuple[dict[str, Any], ...]  # frozen dicts of results, newest first


def find_result(recent: immutables.Map[str, Any], results: Results, name: str) -> Any:
    """A result record by scoped id, or None."""
    record = recent.get(name)
    if record is None:
        for segment in results:
            record = segment.get(name)
            if record is not None:
                break
        else:
            return None
    return None if record is GONE else record


def merge_results(recent: immutables.Map[str, Any], results: Results) -> Results:
    """Move the recent results into a new dict, merging dicts of no larger size."""
    segment = dict(recent.items())
    rest = list(results)
    while rest and len(rest[0]) <= len(segment):
        merged = rest.pop(0).copy()
        merged.update(segment)  # the newer value wins
        segment = merged
    if not rest and GONE in segment.values():
        segment = {name: record for name, record in segment.items() if record is not GONE}
    return (segment, *rest)


def all_results(recent: immutables.Map[str, Any], results: Results) -> dict[str, Any]:
    """Every live result, by scoped id."""
    out: dict[str, Any] = {}
    for segment in reversed(results):
        out.update(segment)
    out.update(recent.items())
    return {name: record for name, record in out.items() if record is not GONE}


class _S(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Base for state records."""


class Pending(_S, frozen=True, gc=False, array_like=True):
    """Something the run waits for, by idempotency key.

    ``kind`` says what answers it: ``work`` (a work effect, ``effect`` its wire
    kind), ``ask``, ``wait`` (a sleep step), ``signal``, or a timer role:
    ``timeout``, ``backoff``, ``deadline``, ``tick`` (repeat), ``ask-timeout``,
    ``signal-timeout``, ``sched-delay``; ``sched-call`` is a scheduled call.
    """

    kind: str
    frame: str
    effect: str = ""
    member: str = ""  # a team member's name, for member run-agent effects
    seq: int = 0  # invocation order of a work effect, for the settled report
    target: str = ""  # the tool, agent, team or flow a work effect addresses


class ReportRow(_S, frozen=True, gc=False, array_like=True):
    """A work effect that is no longer pending, and how it ended."""

    key: str
    seq: int
    effect: str
    target: str
    status: str


class ReportLink(_S, frozen=True, array_like=True):
    """The report as a persistent list of chunks, newest chunk first.

    A chunk holds up to ``REPORT_CHUNK`` rows, oldest first; adding a row
    copies the head chunk's tuple (a few pointers) or starts a new
    chunk. A long run thus holds one link per chunk, not per work effect,
    and the garbage collector's full passes have that much less to walk (a
    link per row was most of what a long replay kept tracked).

    A later row for the same key (a late result for abandoned work) overrides
    an earlier one when the report is folded at settlement.
    """

    rows: tuple[ReportRow, ...]
    rest: ReportLink | None = None


REPORT_CHUNK = 16  # 64 costs 0.31 us per row added, 16 costs 0.19


def add_report_row(head: ReportLink | None, row: ReportRow) -> ReportLink:
    """The report with one more row."""
    if head is None or len(head.rows) >= REPORT_CHUNK:
        return ReportLink((row,), head)
    return ReportLink((*head.rows, row), head.rest)


def iter_report(link: ReportLink | None) -> Iterator[ReportRow]:
    """The report's rows, newest first (iteratively: the list can be long)."""
    while link is not None:
        yield from reversed(link.rows)
        link = link.rest


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
    last: Any = None
    comp_depth: int = 0  # compensation stack depth when the current fire began


class TeamProgress(_S, frozen=True, gc=False, tag="team"):
    next: int = 0
    running: tuple[str, ...] = ()
    outputs: dict[str, Any] = {}


class TryProgress(_S, frozen=True, gc=False, tag="try"):
    phase: Literal["try", "catch"] = "try"


Progress: TypeAlias = (
    ParallelProgress | ForEachProgress | RepeatProgress | TeamProgress | TryProgress
)


class SeqFrame(_S, frozen=True, gc=False, tag="seq"):
    """A list of steps run one after another."""

    id: str
    parent: str | None
    env: str
    prefix: str
    owner: str  # id of the step owning the list, "" for the flow's own steps
    label: str  # which list of the owner: see _interp._step_list


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


Frame: TypeAlias = SeqFrame | StepFrame


class Journal(_S, frozen=True, gc=False, array_like=True):
    """What the last transition added to the parts of the state that only grow.

    Hosts that persist a run incrementally store these as rows (see
    ``state_changes`` and ``restore_state``) instead of re-writing the whole
    history on every event.
    """

    results: tuple[str, ...] = ()  # scoped step ids whose result was (re)written
    report: int = 0  # report rows added at the head of the report list
    resolved: tuple[str, ...] = ()  # keys whose resolution was (re)written


class Held(_S, frozen=True, gc=False, array_like=True):
    """A work effect held back by ``limits.max_concurrency``."""

    frame: str
    effect: RunAgent | RunTeam | CallTool | RunSubflow
    seq: int
    target: str
    member: str = ""  # a team member's name, when the work is a member's run-agent


class CompLink(_S, frozen=True, array_like=True):
    """The compensation stack, newest first, as a persistent linked list."""

    step: str
    env: str
    prefix: str
    depth: int = 1  # links in the stack, this one included
    rest: CompLink | None = None


class Ending(_S, frozen=True, gc=False, array_like=True):
    """How the run will settle once compensations (or outliving calls) are done."""

    status: str
    output: Any = None
    error: ErrorInfo | None = None


class Sched(_S, frozen=True, gc=False, array_like=True):
    """A detached scheduled call: ``pending`` until its delay fires."""

    status: str  # pending | called | succeeded | failed | uncertain | cancelled
    tool: str
    input: Any = None
    outlive: bool = False


Status: TypeAlias = Literal["running", "completed", "failed", "cancelled", "budget-exhausted"]


class Ledger(_S, frozen=True, gc=False, array_like=True):
    """The root run's budget: limits (None = unlimited) and what is used."""

    steps: int | None
    cost: int | None
    wall_clock_ms: int | None
    used_steps: int = 0
    used_cost: int = 0


class State(msgspec.Struct, frozen=True, kw_only=True):
    """One run's state. Treat as opaque; read it through the public helpers."""

    flow: Flow
    run_id: str
    depth: int
    input: Any
    status: Status
    started_ms: int
    now_ms: int
    ledger: Ledger
    seq: int
    frames: immutables.Map[str, Frame]
    envs: immutables.Map[str, Env]
    pending: immutables.Map[str, Pending]
    results: Results  # step results by scoped id (see find_result) ...
    recent: immutables.Map[str, Any]  # ... and the newest ones, merged in batches
    report: ReportLink | None
    resolved: immutables.Map[str, str]  # keys answered or abandoned -> how
    signals: immutables.Map[str, tuple[Any, ...]]  # buffered payloads
    waiters: immutables.Map[str, tuple[str, ...]]  # signal -> waiting keys
    queue: immutables.Map[int, Held]  # held work (max_concurrency)
    queue_head: int
    queue_tail: int
    in_flight: int
    compensations: CompLink | None
    compensating: Ending | None  # set while compensations run before settling
    scheduled: immutables.Map[str, Sched]
    settled: Settled | None
    error: ErrorInfo | None
    journal: Journal = Journal()
    report_loaded: bool = True  # False: the oldest rows were not restored (ReportNeeded)
    # True once a result may have been written twice (the children of a retried
    # composite record into the same scope again): deleting a result must then
    # check that no older value shows through (see _interp._Txn.forget).
    rewrites: bool = False


class Decision(msgspec.Struct, frozen=True):
    """The result of ``start`` or ``advance``: the next state and what to do."""

    state: State
    effects: tuple[Effect, ...]


# --- snapshots -------------------------------------------------------------------


class _Snapshot(msgspec.Struct, frozen=True, kw_only=True):
    format: int
    flow_id: str
    flow_version: int
    spec_hash: str
    run_id: str
    depth: int
    input: Any
    status: Status
    started_ms: int
    now_ms: int
    ledger: Ledger
    seq: int
    frames: dict[str, Frame]
    envs: dict[str, Env]
    pending: dict[str, Pending]
    results: dict[str, Any]
    recent: dict[str, Any]
    report: list[ReportRow]  # oldest first
    resolved: dict[str, str]
    signals: dict[str, tuple[Any, ...]]
    waiters: dict[str, tuple[str, ...]]
    queue: dict[int, Held]
    queue_head: int
    queue_tail: int
    in_flight: int
    compensations: CompLink | None
    compensating: Ending | None
    scheduled: dict[str, Sched]
    settled: Settled | None
    error: ErrorInfo | None
    journal: Journal = Journal()
    rewrites: bool = False


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(_Snapshot)
_MAPS = (
    "frames",
    "envs",
    "pending",
    "results",
    "recent",
    "resolved",
    "signals",
    "waiters",
    "queue",
    "scheduled",
)


def encode_state(state: State) -> bytes:
    """Snapshot bytes (MessagePack). The spec is pinned by hash, not embedded."""
    fields: dict[str, Any] = {
        name: getattr(state, name)
        for name in _Snapshot.__struct_fields__
        if name not in ("format", "flow_id", "flow_version", "spec_hash")
    }
    gone = [name for name, record in state.recent.items() if record is GONE]
    fields["results"] = all_results(_EMPTY, state.results)
    if gone:
        for name in gone:
            fields["results"].pop(name, None)
        fields["recent"] = {k: v for k, v in state.recent.items() if v is not GONE}
    for name in _MAPS:
        fields[name] = _ordered(fields[name])
    if not state.report_loaded:
        raise ReportNeeded("encode_state needs the report rows: restore them first")
    fields["report"] = oldest_first(state.report)
    snap = _Snapshot(
        format=SNAPSHOT_FORMAT,
        flow_id=state.flow.id,
        flow_version=state.flow.version,
        spec_hash=state.flow.spec_hash,
        **fields,
    )
    return _encoder.encode(snap)


_EMPTY: immutables.Map[Any, Any] = immutables.Map()


def _ordered(mapping: immutables.Map[Any, Any] | dict[Any, Any]) -> dict[Any, Any]:
    # A HAMT iterates in hash order, and str hashes differ between processes:
    # snapshots list entries in key order so their bytes are the same anywhere.
    return dict(sorted(mapping.items()))


def decode_state(data: bytes, flow: Flow) -> State:
    """Rebuild a state from snapshot bytes; ``flow`` must be the pinned spec."""
    try:
        snap = _decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise WireError(f"invalid state snapshot: {exc}") from None
    if snap.format != SNAPSHOT_FORMAT:
        raise SnapshotMismatch(f"snapshot format {snap.format} is not supported")
    if snap.spec_hash != flow.spec_hash:
        raise SnapshotMismatch(
            f"snapshot of run {snap.run_id!r} pins flow {snap.flow_id!r} v{snap.flow_version} "
            f"(spec {snap.spec_hash[:12]}), not {flow.id!r} v{flow.version} "
            f"(spec {flow.spec_hash[:12]})"
        )
    fields: dict[str, Any] = {
        name: getattr(snap, name)
        for name in State.__struct_fields__
        if name not in ("flow", "report_loaded")
    }
    for name in _MAPS:
        fields[name] = immutables.Map(fields[name])
    fields["results"] = (snap.results,) if snap.results else ()
    if not snap.rewrites and any(name in snap.results for name in snap.recent):
        fields["rewrites"] = True  # a snapshot from before the flag was kept
    link: ReportLink | None = None
    for row in fields["report"]:
        link = add_report_row(link, row)
    fields["report"] = link
    return State(flow=flow, **fields)


def oldest_first(link: ReportLink | None) -> list[ReportRow]:
    """The report's rows, oldest first."""
    chunks: list[tuple[ReportRow, ...]] = []
    while link is not None:
        chunks.append(link.rows)
        link = link.rest
    rows: list[ReportRow] = []
    for chunk in reversed(chunks):
        rows.extend(chunk)
    return rows


# --- incremental persistence -------------------------------------------------------------

_COLD = ("results", "recent", "report", "resolved")


def encode_hot(state: State) -> bytes:
    """A snapshot without the parts that only grow (results, report).

    Its size depends on what is active now, not on the history: a host can
    store it on every event. Pair it with the rows from ``state_changes``.
    """
    fields: dict[str, Any] = {
        name: getattr(state, name)
        for name in _Snapshot.__struct_fields__
        if name not in ("format", "flow_id", "flow_version", "spec_hash", *_COLD)
    }
    for name in _MAPS:
        if name not in _COLD:
            fields[name] = _ordered(fields[name])
    fields["results"] = {}
    fields["recent"] = {}
    fields["report"] = []
    fields["resolved"] = {}
    snap = _Snapshot(
        format=SNAPSHOT_FORMAT,
        flow_id=state.flow.id,
        flow_version=state.flow.version,
        spec_hash=state.flow.spec_hash,
        **fields,
    )
    return _encoder.encode(snap)


class StateChanges(msgspec.Struct, frozen=True):
    """What the last transition wrote to the parts of the state that only grow."""

    results: list[tuple[str, Any]]  # (scoped step id, result record or None: deleted)
    report: list[ReportRow]  # newest last
    resolved: list[tuple[str, str]]  # (key, how it was resolved); later replaces earlier


def state_changes(state: State) -> StateChanges:
    """The result records, report rows and resolved keys the last transition wrote.

    A host that stores these and the ``encode_hot`` snapshot can rebuild the
    state with ``restore_state``.
    """
    results = [
        (name, find_result(state.recent, state.results, name)) for name in state.journal.results
    ]
    rows = list(islice(iter_report(state.report), state.journal.report))
    rows.reverse()
    resolved = [(key, state.resolved[key]) for key in state.journal.resolved]
    return StateChanges(results, rows, resolved)


def restore_state(
    hot: bytes,
    results: Iterable[tuple[str, Any]],
    report: Iterable[ReportRow],
    flow: Flow,
    resolved: Iterable[tuple[str, str]] = (),
    *,
    report_loaded: bool = True,
) -> State:
    """Rebuild a state from ``encode_hot`` bytes plus the stored rows.

    ``results`` rows whose record is None (deleted) are skipped.
    ``report`` rows may repeat a key (a later status for the same effect); they
    must come oldest first. The result equals the original for every purpose
    of ``advance``, though its internal layout may differ.

    With ``report_loaded=False`` the report rows are left out (pass none):
    restoring then costs what the run holds now, not what its history holds.
    ``advance`` raises ``ReportNeeded`` on the rare transition that reads the
    report (settling, a late answer for abandoned work); the host restores
    again with the rows and repeats it. Rows added after such a restore come
    out of ``state_changes`` as usual.
    """
    state = decode_state(hot, flow)
    link: ReportLink | None = None
    for row in report:
        link = add_report_row(link, row)
    return msgspec.structs.replace(
        state,
        results=({name: record for name, record in results if record is not None},),
        recent=_EMPTY,
        report=link,
        resolved=immutables.Map(resolved),
        journal=Journal(),
        report_loaded=report_loaded,
    )
