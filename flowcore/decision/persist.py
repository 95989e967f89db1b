"""Incremental persistence, for hosts that store a run as rows (opt-in).

``flowcore.encode_state`` writes a whole run; its size grows with the run's
history (every step result kept, every work effect's report row). A host
that stores runs on every event can instead keep:

- the **hot snapshot** (``encode_hot``): everything but results, report and
  resolved keys. Its size depends on what the run holds now, not on its
  history; store it on every event;
- the **rows** each transition wrote (``state_changes``): result records,
  report rows and resolutions, appended or replaced by key.

``restore_state`` rebuilds the state from them. With ``report=None`` the
report rows are not read at all, so restoring costs what the run holds now;
such a state is *partial*: advance it with ``persist.advance``, which asks the
host for the rows (``load_report``) only on the rare transition that reads
them (settling the run) and then repeats it. ``flowcore.advance`` refuses a
partial state with a ``TypeError`` naming this function. ``persist.advance``
of a whole state needs no ``load_report``: it is then ``flowcore.advance``, so
it is the one entry a host calls whatever it keeps (both hosts do).

This module must never do I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import islice
from typing import Any

import immutables
import msgspec

from ..language.spec import Flow
from .ending import NeedsReport
from .interp import advance_partial
from .results import ResultStore
from .snapshot import _encoder, _snapshot, decode_state
from .state import (
    Decision,
    Journal,
    ReportLink,
    ReportRow,
    Resolution,
    State,
    add_report_row,
    iter_report,
)
from .wire import Event

_EMPTY_MAP: immutables.Map[str, Resolution] = immutables.Map()

__all__ = [
    "ReportRow",
    "Resolution",
    "StateChanges",
    "advance",
    "decode_resolution",
    "decode_row",
    "encode_hot",
    "encode_resolution",
    "encode_row",
    "restore_state",
    "state_changes",
]


def encode_hot(state: State) -> bytes:
    """A snapshot without the parts that only grow (results, report, resolved keys)."""
    hot = msgspec.structs.replace(
        state, waiting=msgspec.structs.replace(state.waiting, resolved=_EMPTY_MAP)
    )
    return _encoder.encode(_snapshot(hot, {}, []))


class StateChanges(msgspec.Struct, frozen=True):
    """What the last transition wrote to the parts of the state that only grow."""

    results: list[tuple[str, Any]]  # (scoped step id, result record or None: deleted)
    report: list[ReportRow]  # newest last
    resolved: list[tuple[str, Resolution]]  # later replaces earlier


def state_changes(state: State) -> StateChanges:
    """The result records, report rows and resolutions the last transition wrote."""
    journal = state.journal
    results = [(name, state.results.get(name)) for name in journal.results]
    rows = list(islice(iter_report(state.report), journal.report))
    rows.reverse()
    resolved = [(key, state.waiting.resolved[key]) for key in journal.resolved]
    return StateChanges(results, rows, resolved)


def restore_state(
    hot: bytes,
    results: Iterable[tuple[str, Any]],
    flow: Flow,
    resolved: Iterable[tuple[str, Resolution]] = (),
    report: Iterable[ReportRow] | None = (),
) -> State:
    """Rebuild a state from ``encode_hot`` bytes plus the stored rows.

    ``results`` rows whose record is None (deleted) are skipped. ``report``
    rows may repeat a key (a later status for the same effect) and must come
    oldest first; ``report=None`` leaves them out and gives a partial state
    (see the module docstring). The result equals the original for every
    purpose of ``advance``, though its internal layout may differ.
    """
    state = decode_state(hot, flow)
    link: ReportLink | None = None
    for row in report or ():
        link = add_report_row(link, row)
    return msgspec.structs.replace(
        state,
        waiting=msgspec.structs.replace(state.waiting, resolved=immutables.Map(resolved)),
        results=ResultStore.of({name: record for name, record in results if record is not None}),
        report=link,
        journal=Journal(),
        report_complete=report is not None,
    )


def advance(
    state: State,
    event: Event,
    load_report: Callable[[], Iterable[ReportRow]] | None = None,
) -> Decision:
    """``flowcore.advance`` for a state ``restore_state`` may have left partial.

    ``load_report`` returns the run's report rows, oldest first; it is called
    only when the transition reads them, and the transition is then repeated
    on the completed state. A whole state never needs them: without
    ``load_report`` this is ``flowcore.advance``, and a partial state whose
    transition reads its report is a ``TypeError``. Raises ``EventRejected``
    like ``flowcore.advance``.
    """
    try:
        return advance_partial(state, event)
    except NeedsReport:
        if load_report is None:
            raise TypeError(
                "this state was restored without its report rows and the transition"
                " reads them: give persist.advance a load_report"
            ) from None
    return advance_partial(with_report(state, load_report()), event)


def with_report(state: State, rows: Iterable[ReportRow]) -> State:
    """A partial state completed with its report rows (oldest first).

    ``rows`` must be every row the host stored, those the partial state's
    own transitions wrote (``state_changes``) included: they replace the
    partial report, which holds only the rows written since the restore.
    """
    link: ReportLink | None = None
    for row in rows:
        link = add_report_row(link, row)
    return msgspec.structs.replace(state, report=link, report_complete=True)


_row_enc = msgspec.msgpack.Encoder()
_row_dec = msgspec.msgpack.Decoder(ReportRow)
_res_dec = msgspec.msgpack.Decoder(Resolution)


def encode_row(row: ReportRow) -> bytes:
    return _row_enc.encode(row)


def decode_row(data: bytes) -> ReportRow:
    return _row_dec.decode(data)


def encode_resolution(how: Resolution) -> bytes:
    return _row_enc.encode(how)


def decode_resolution(data: bytes) -> Resolution:
    return _res_dec.decode(data)
