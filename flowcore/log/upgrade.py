"""Moving a running run to another version of its flow, once its log replays against it.

Theory of operation
-------------------

A run pins its spec by hash (``Flow.spec_hash``): a host keeps driving it
with the spec it started with, whatever is deployed since, so a new version
never makes an in-flight run act differently behind its back. To move a run
to a new version (same flow id, other content), its log is replayed against
the new spec (``replay``; ``specs/log.md`` §9). When every recorded effect is
re-derived identically, the new version would have made the same decisions
so far and waits for the same effects under the same keys: the work, timers,
questions and signal waits the host has open stay valid as they are, and the
state replay ends in is a state of the new version (``encode_state`` of it
pins the new hash). Otherwise the first divergence says where and how the
new version would have acted differently, and the run stays on its version.

``upgrade`` is that check plus what a host needs to carry it out: the new
state and the effects it waits for (``pending``, as ``fork`` returns them).
It refuses, with ``UpgradeRefused`` and a ``reason``, a log that diverges
(``diverged``: ``index``, ``expected`` what the log records, ``actual`` what
the new version emits), a log of another flow (``other-flow``), a run that
has settled (``settled``) and records that are not one run's log from a
``run.started`` on (``not-one-run``). A log that cannot be read raises as
``replay`` does (``LogCorrupt``, ``ReplayError``).

No log record marks the move. The records before it are exactly the ones
the check re-derived with the new spec, and the records after it are the new
spec's own, so the whole log replays against the version the run was moved
to (and against any later version it could move to), while ``run.started``
keeps the hash the run started with (``spec_matches`` is then false). The
host's pin, not the log, says which version a run is on now.

This module must never do I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from .._data import short
from .._errors import FlowcoreError, ReplayDivergence
from ..decision.state import State
from ..decision.wire import effect_to_wire
from ..language.spec import Flow
from .fork import ForkError, OpenEffect, _pending
from .formats import as_records
from .records import EFFECT_EMITTED, RUN_SETTLED, RUN_STARTED, LogRead, Record
from .replay import replay

__all__ = ["Upgrade", "UpgradeRefused", "upgrade"]


class UpgradeRefused(FlowcoreError, ValueError):
    """A run that cannot move to the new version, and why.

    ``reason`` is ``diverged``, ``other-flow``, ``settled`` or
    ``not-one-run``. For ``diverged``: ``index`` is the log index where the
    new version parts ways with the run, ``expected`` what the log records
    there and ``actual`` what the new version emits (``None`` for nothing),
    as in ``divergence`` (the ``ReplayDivergence``).
    """

    def __init__(
        self,
        message: str,
        reason: str,
        *,
        run_id: str | None = None,
        divergence: ReplayDivergence | None = None,
    ) -> None:
        self.reason = reason
        self.run_id = run_id
        self.divergence = divergence
        self.index: int | None = None if divergence is None else divergence.index
        self.expected: Any = None if divergence is None else divergence.expected
        self.actual: Any = None if divergence is None else divergence.actual
        super().__init__(message)


class Upgrade(msgspec.Struct, frozen=True, kw_only=True):
    """A run's log that replays against ``flow_id`` at ``spec_hash``: what moving it takes.

    ``changed`` is false when the run is on that spec already
    (``from_spec_hash == spec_hash``): there is nothing to do. ``at`` is the
    index of the log's next record, the first the new version writes.
    ``state``: the run's state under the new version (its snapshot pins
    ``spec_hash``); ``pending``: the effects it waits for (work, timers,
    questions, signal waits; never ``settled``), in emission order, the same
    the run waited for before, under the same keys.
    """

    run_id: str
    flow_id: str
    from_spec_hash: str
    spec_hash: str
    version: int
    changed: bool
    at: int
    state: State
    pending: tuple[OpenEffect, ...]


def _records(records: bytes | LogRead | Iterable[Record]) -> list[Record]:
    out = as_records(records)
    if not out or not isinstance(out[0], Record) or out[0].type != RUN_STARTED:
        raise UpgradeRefused(
            "moving a run needs its log from a run.started on (index 0, or the start of an"
            " incarnation whose earlier records a host dropped)",
            "not-one-run",
        )
    run_id = out[0].run_id
    for rec in out:
        if not isinstance(rec, Record) or rec.run_id != run_id:
            where = rec.index if isinstance(rec, Record) else short(rec)
            raise UpgradeRefused(
                f"record {where} is not one of run {short(run_id)}'s: a log holds one run",
                "not-one-run",
                run_id=run_id if isinstance(run_id, str) else None,
            )
    return out


def upgrade(
    records: bytes | LogRead | Iterable[Record],
    flow: Flow,
    *,
    pinned: str | None = None,
) -> Upgrade:
    """Check that the run whose log is ``records`` can move to ``flow``; see the module docstring.

    ``pinned`` is the spec hash the host has the run pinned to (default:
    what the log's latest ``run.started`` records; a host that moved the run
    before knows better). Raises ``UpgradeRefused`` (``reason``, and for a
    divergence ``index``, ``expected``, ``actual``), or what ``replay``
    raises for a log that cannot be read.
    """
    log = _records(records)
    run_id = log[0].run_id
    latest = next(r for r in reversed(log) if r.type == RUN_STARTED)
    started = latest.data if isinstance(latest.data, dict) else {}
    flow_id = started.get("flowId")
    if flow_id != flow.id:
        raise UpgradeRefused(
            f"run {short(run_id)} is a run of flow {short(flow_id)}, not {flow.id!r}: a run"
            " moves only to another version of its own flow",
            "other-flow",
            run_id=run_id,
        )
    if log[-1].type == RUN_SETTLED:
        raise UpgradeRefused(
            f"run {short(run_id)} settled at index {log[-1].index}: only a running run moves"
            " to another version",
            "settled",
            run_id=run_id,
        )
    if pinned is None:
        recorded = started.get("specHash")
        pinned = recorded if isinstance(recorded, str) else ""
    report = replay(log, flow, raise_on_divergence=False)
    divergence = report.divergence
    if divergence is not None:
        raise UpgradeRefused(
            f"run {short(run_id)} cannot move to version {flow.version} of flow {flow.id!r}"
            f" (spec {flow.spec_hash[:12]}): {divergence}",
            "diverged",
            run_id=run_id,
            divergence=divergence,
        )
    state = report.state
    assert state is not None  # (start ran: the log begins with run.started)
    if state.settled is not None:  # (a log that ends inside the decision that settles it)
        raise UpgradeRefused(
            f"run {short(run_id)} settled in the decision of its last records: only a running"
            " run moves to another version",
            "settled",
            run_id=run_id,
        )
    at = log[-1].index + 1
    # Effects a cut log never recorded (replayed with its own spec) are
    # waited for all the same: they count as emitted at the log's end.
    tail = [
        Record(EFFECT_EMITTED, at, run_id, log[-1].at, effect_to_wire(e)) for e in report.unrecorded
    ]
    try:
        pending = _pending([*log, *tail], state)
    except ForkError as exc:  # (replay re-derived every effect the state waits for)
        raise UpgradeRefused(str(exc), "diverged", run_id=run_id) from None
    return Upgrade(
        run_id=run_id,
        flow_id=flow.id,
        from_spec_hash=pinned,
        spec_hash=flow.spec_hash,
        version=flow.version,
        changed=pinned != flow.spec_hash,
        at=at,
        state=state,
        pending=pending,
    )
