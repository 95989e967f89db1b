"""A run's snapshot: the bytes of a ``State`` (``encode_state``), and back.

A snapshot never embeds the spec; it pins the spec by content hash, and
``decode_state`` refuses a different spec or another snapshot format. Its
types are derived from the records of ``state``, so a field added to a record
is saved without a second list to keep in step.

This module must never do I/O.
"""

from __future__ import annotations

import operator
import typing
from typing import Any

import immutables
import msgspec

from .._errors import SnapshotMismatch, WireError
from ..language.spec import Flow
from .report_rows import ReportLink, ReportRow, add_report_row, oldest_first
from .results import ResultStore
from .state import Journal, Sched, State, Tree, Waiting

__all__ = ["SNAPSHOT_FORMAT", "canonical_snapshot", "decode_state", "encode_state"]

SNAPSHOT_FORMAT = 2


# --- snapshots ---------------------------------------------------------------------------
#
# A snapshot holds every field of ``State`` but the flow (pinned by hash), in
# the same records. Persistent maps become dicts sorted by key (a HAMT
# iterates in hash order, and str hashes differ between processes: sorted, a
# snapshot's bytes are the same anywhere), the result store becomes one dict
# of live results and the report its rows, oldest first. The snapshot types
# are derived from the records below, so a field added to a record is saved
# without a second list to keep in step.


def _is_map(tp: Any) -> bool:
    return typing.get_origin(tp) is immutables.Map


def _snapshot_type(cls: type[msgspec.Struct]) -> type[msgspec.Struct]:
    """``cls`` with its persistent maps as plain dicts."""
    fields: list[tuple[str, Any, Any]] = []
    for f in msgspec.structs.fields(cls):
        tp = dict[typing.get_args(f.type)] if _is_map(f.type) else f.type  # type: ignore[misc]
        default = f.default if f.default is not msgspec.NODEFAULT else msgspec.NODEFAULT
        if _is_map(f.type) and default is not msgspec.NODEFAULT:
            default = msgspec.field(default_factory=dict)
        fields.append((f.name, tp, default))
    return msgspec.defstruct(
        f"{cls.__name__}Snapshot", fields, kw_only=True, frozen=True, omit_defaults=True
    )


_MAP_FIELDS: dict[type[Any], tuple[str, ...]] = {
    cls: tuple(f.name for f in msgspec.structs.fields(cls) if _is_map(f.type))
    for cls in (Tree, Waiting)
}
_FORMS: dict[type[Any], type[msgspec.Struct]] = {cls: _snapshot_type(cls) for cls in _MAP_FIELDS}


def _to_form(record: msgspec.Struct) -> msgspec.Struct:
    cls = type(record)
    values = msgspec.structs.asdict(record)
    for name in _MAP_FIELDS[cls]:
        values[name] = dict(sorted(values[name].items()))
    return _FORMS[cls](**values)


def _from_form(cls: type[Any], form: msgspec.Struct) -> Any:
    values = msgspec.structs.asdict(form)
    for name in _MAP_FIELDS[cls]:
        values[name] = immutables.Map(values[name])
    return cls(**values)


class _Header(msgspec.Struct, frozen=True, kw_only=True):
    """What every snapshot format begins with (format 1 named the run at the top)."""

    format: int
    flow_id: str = "?"
    flow_version: int = 0
    spec_hash: str = ""
    run_id: str = ""  # format 1
    run: tuple[Any, ...] = ()  # format 2 and later: Run, whose first field is the id

    @property
    def run_name(self) -> str:
        return str(self.run[0]) if self.run else self.run_id


def _snapshot_fields() -> list[tuple[str, Any, Any]]:
    fields: list[tuple[str, Any, Any]] = [
        ("format", int, msgspec.NODEFAULT),
        ("flow_id", str, msgspec.NODEFAULT),
        ("flow_version", int, msgspec.NODEFAULT),
        ("spec_hash", str, msgspec.NODEFAULT),
    ]
    forms: dict[Any, Any] = {
        **_FORMS,
        ResultStore: dict[str, Any],
        ReportLink | None: list[ReportRow],
        immutables.Map[str, Sched]: dict[str, Sched],
    }
    for f in msgspec.structs.fields(State):
        if f.name in ("flow", "report_complete"):
            continue  # pinned by hash; a snapshot always holds the whole report
        fields.append((f.name, forms.get(f.type, f.type), f.default))
    return fields


_Snapshot = msgspec.defstruct("_Snapshot", _snapshot_fields(), kw_only=True, frozen=True)
_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(_Snapshot)
_header = msgspec.msgpack.Decoder(_Header)


def encode_state(state: State) -> bytes:
    """Snapshot bytes (MessagePack). The spec is pinned by hash, not embedded."""
    if not state.report_complete:
        raise ValueError(
            "this state was restored without its report rows (flowcore.persist): "
            "encode it with flowcore.persist.encode_hot, or restore it with the rows"
        )
    return _encoder.encode(_snapshot(state, state.results.live(), oldest_first(state.report)))


_BY_SEQ = operator.attrgetter("seq")


def canonical_snapshot(state: State) -> bytes:
    """The snapshot of what ``state`` decides from: without the record of its
    last change (``journal``), and with the report's rows in the order every
    reader takes them (by ``seq``; a key's rows in the order written), not the
    order the work ended in. Two states with the same canonical snapshot
    decide alike on every event; ``flowcore.testing.explore`` identifies
    states by it."""
    rows = sorted(oldest_first(state.report), key=_BY_SEQ)  # stable: a key's rows in order
    plain = msgspec.structs.replace(state, journal=Journal())
    return _encoder.encode(_snapshot(plain, state.results.live(), rows))


def _snapshot(state: State, results: dict[str, Any], report: list[ReportRow]) -> msgspec.Struct:
    return _Snapshot(
        format=SNAPSHOT_FORMAT,
        flow_id=state.flow.id,
        flow_version=state.flow.version,
        spec_hash=state.flow.spec_hash,
        run=state.run,
        now_ms=state.now_ms,
        ledger=state.ledger,
        tree=_to_form(state.tree),
        waiting=_to_form(state.waiting),
        results=dict(sorted(results.items())),
        report=report,
        schedules=dict(sorted(state.schedules.items())),
        settled=state.settled,
        journal=state.journal,
        scheduled_added=state.scheduled_added,
        metadata=state.metadata,
    )


def decode_state(data: bytes, flow: Flow) -> State:
    """Rebuild a state from snapshot bytes; ``flow`` must be the pinned spec."""
    try:
        head = _header.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise WireError(f"invalid state snapshot: {exc}") from None
    if head.format != SNAPSHOT_FORMAT:
        raise SnapshotMismatch(
            f"snapshot of run {head.run_name!r} is in format {head.format}; this flowcore "
            f"reads format {SNAPSHOT_FORMAT} (run states are not migrated: finish or "
            "replay the run with the flowcore that wrote it)"
        )
    if head.spec_hash != flow.spec_hash:
        raise SnapshotMismatch(
            f"snapshot of run {head.run_name!r} pins flow {head.flow_id!r} v{head.flow_version} "
            f"(spec {head.spec_hash[:12]}), not {flow.id!r} v{flow.version} "
            f"(spec {flow.spec_hash[:12]})"
        )
    try:
        snap: Any = _decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise WireError(f"invalid state snapshot: {exc}") from None
    link: ReportLink | None = None
    for row in snap.report:
        link = add_report_row(link, row)
    return State(
        flow=flow,
        run=snap.run,
        now_ms=snap.now_ms,
        ledger=snap.ledger,
        tree=_from_form(Tree, snap.tree),
        waiting=_from_form(Waiting, snap.waiting),
        results=ResultStore.of(snap.results),
        report=link,
        schedules=immutables.Map(snap.schedules),
        settled=snap.settled,
        journal=snap.journal,
        scheduled_added=snap.scheduled_added,
        metadata=snap.metadata,
    )
