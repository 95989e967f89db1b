"""The runs' progress streams in the database: what handlers publish
(``flowcore_handlers.publish``), kept per run in ``progress``.

Items are written in the host's group commit, in batches, never one fsync per
item: ``publish`` returns before its item is stored, and a crash loses the
items not yet committed. Each run keeps at most ``items`` items and ``bytes``
bytes of data (``ProgressCap``); past either, its oldest items are dropped.
Indexes go on counting (an item's index never changes, none is reused), so a
reader that asks from an index that was dropped is told the gap: a
``progress.dropped`` envelope before the items kept. Rows go with the run
(``_db.RUN_TABLES``: deleted and pruned with it).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Final

import msgspec

import flowcore

__all__ = [
    "DROPPED",
    "ITEM",
    "MAX_PROGRESS_BYTES",
    "MAX_PROGRESS_ITEMS",
    "ProgressCap",
    "Published",
    "add_progress",
    "progress_records",
]

MAX_PROGRESS_ITEMS: Final = 10_000
"""A run keeps at most this many progress items (its newest)."""
MAX_PROGRESS_BYTES: Final = 16 * 1024 * 1024
"""A run keeps at most this many bytes of progress data (its newest items)."""

ITEM: Final = "progress"
"""The envelope type of a progress item: data ``{key, step, data}``."""
DROPPED: Final = "progress.dropped"
"""The envelope type of a gap: data ``{from, count}``, its index the last one dropped."""


@dataclass(frozen=True)
class ProgressCap:
    """How much of its progress stream a run keeps: its newest ``items`` items,
    within ``bytes`` bytes of data."""

    items: int = MAX_PROGRESS_ITEMS
    bytes: int = MAX_PROGRESS_BYTES


@dataclass(frozen=True)
class Published:
    """One item a handler published, waiting for the group commit."""

    run_id: str
    key: str
    step: str | None
    at_ms: int
    data: bytes  # its JSON


def add_progress(conn: sqlite3.Connection, items: list[Published], cap: ProgressCap) -> None:
    """Write ``items`` (in a transaction the caller holds), each at its run's next
    index, then drop each run's oldest items past ``cap``. An item of a run that
    is gone (deleted meanwhile) is dropped."""
    touched: dict[str, int] = {}
    for item in items:
        nxt = touched.get(item.run_id)
        if nxt is None:
            row = conn.execute(
                "SELECT (SELECT MAX(idx) FROM progress WHERE run_id = ?),"
                " EXISTS (SELECT 1 FROM runs WHERE run_id = ?)",
                (item.run_id, item.run_id),
            ).fetchone()
            assert row is not None
            if not row[1]:
                continue
            nxt = 0 if row[0] is None else int(row[0]) + 1
        conn.execute(
            "INSERT INTO progress (run_id, idx, key, step, at, size, data)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            (item.run_id, nxt, item.key, item.step, item.at_ms, len(item.data), item.data.decode()),
        )
        touched[item.run_id] = nxt + 1
    for run_id in touched:
        # The newest item past the cap, counting back from the newest: it and
        # every older one go.
        row = conn.execute(
            "SELECT idx FROM (SELECT idx, ROW_NUMBER() OVER w AS n, SUM(size) OVER w AS total"
            " FROM progress WHERE run_id = ? WINDOW w AS (ORDER BY idx DESC))"
            " WHERE n > ? OR total > ? ORDER BY idx DESC LIMIT 1",
            (run_id, cap.items, cap.bytes),
        ).fetchone()
        if row is not None:
            conn.execute("DELETE FROM progress WHERE run_id = ? AND idx <= ?", (run_id, row[0]))


def progress_records(
    conn: sqlite3.Connection, run_id: str, start: int = 0, limit: int = 1000
) -> list[flowcore.Record]:
    """The run's progress from index ``start``, at most ``limit`` items, as envelopes
    (``ITEM``); when items from ``start`` on were dropped, a ``DROPPED`` envelope first."""
    found: list[flowcore.Record] = []
    rows = conn.execute(
        "SELECT idx, key, step, at, data FROM progress WHERE run_id = ? AND idx >= ?"
        " ORDER BY idx LIMIT ?",
        (run_id, start, limit),
    )
    for idx, key, step, at, data in rows:
        index = int(idx)
        if not found and index > start:
            found.append(
                flowcore.Record(
                    DROPPED, index - 1, run_id, int(at), {"from": start, "count": index - start}
                )
            )
        item = {"key": key, "step": step, "data": msgspec.json.decode(data)}
        found.append(flowcore.Record(ITEM, index, run_id, int(at), item))
    return found
