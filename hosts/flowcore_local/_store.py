"""Persistence of runs in the local host's SQLite database.

Everything here is synchronous and runs on the host's single database thread.
The unit of work is a transaction (``Store.tx``); inside one, ``start_run``
and ``apply`` do the whole job for one run and one event: append the log
records, store the hot snapshot and the new result and report rows, insert the
outbox rows of the new effects, close the rows of what the event answered and
of what ``flowcore.plan`` stops (cancelling the child runs among them) and,
when a child run settles, report that to its parent. A crash before the
commit leaves nothing behind; after it, everything.

A run's state is cached in memory between events (keyed by the index of its
next log record, so a write by another process is noticed and the state
reloaded).

Besides events, two things write a run's rows here: a claim of work that was
recovered from a lost worker appends an ``effect.redispatched`` record in the
claiming transaction (``claim_ready_work``), and a resume rewinds a failed run
to just before the event that failed it (``rewind``; ``_resume`` decides
whether and where).
"""

from __future__ import annotations

from ._store_base import (
    CHECKPOINT_RECORDS,
    Applied,
    Claimed,
    Conflict,
    HostError,
    LocalRunSettled,
    LocalUnknownRun,
    LocalUnknownSchedule,
    NoSignalWait,
    NothingToCancel,
    RunRow,
    contract_status,
    local_status,
)
from ._store_rewind import RewindStore

__all__ = [
    "CHECKPOINT_RECORDS",
    "Applied",
    "Claimed",
    "Conflict",
    "HostError",
    "LocalRunSettled",
    "LocalUnknownRun",
    "LocalUnknownSchedule",
    "NoSignalWait",
    "NothingToCancel",
    "RunRow",
    "Store",
    "contract_status",
    "local_status",
]


class Store(RewindStore):
    """The local host's database, by concern, each layer built on the one before:
    transactions and the cache (``_store_base``), flows by hash
    (``_store_flows``), runs (``_store_runs``), the outbox and leases
    (``_store_outbox``), rewinds and forks (``_store_rewind``). Schedules
    (``_schedules``), scheduled calls (``_scheduled``) and retention
    (``_prune``) are functions over it."""
