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

from dataclasses import dataclass
from typing import Final

import msgspec

import flowcore

from ._db import Connection

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
    within ``bytes`` bytes of data (the newest item is kept even if it alone is
    over). Each must be a positive integer (``ValueError`` naming it)."""

    items: int = MAX_PROGRESS_ITEMS
    bytes: int = MAX_PROGRESS_BYTES

    def __post_init__(self) -> None:
        for name in ("items", "bytes"):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise ValueError(f"ProgressCap.{name} must be a positive integer, not {value!r}")


@dataclass(frozen=True)
class Published:
    """One item a handler published, waiting for the group commit."""

    run_id: str
    key: str
    step: str | None
    at_ms: int
    data: bytes  # its JSON


def add_progress(conn: Connection, items: list[Published], cap: ProgressCap) -> None:
    """Write ``items`` (in a transaction the caller holds), each at its run's next
    index, then drop each run's oldest items past ``cap``. An item of a run that
    is gone (deleted meanwhile) is dropped. Each step reads or deletes by an
    index: no run's items are scanned."""
    last: dict[str, tuple[int, int]] = {}  # run -> (its last index, its bytes so far)
    for item in items:
        at = last.get(item.run_id)
        if at is None:
            if not conn.execute("SELECT 1 FROM runs WHERE run_id = ?", (item.run_id,)).fetchone():
                continue
            row = conn.execute(
                "SELECT idx, before + size FROM progress WHERE run_id = ?"
                " ORDER BY idx DESC LIMIT 1",
                (item.run_id,),
            ).fetchone()
            at = (-1, 0) if row is None else (int(row[0]), int(row[1]))
        index, before = at[0] + 1, at[1]
        conn.execute(
            "INSERT INTO progress (run_id, idx, key, step, at, size, before, data)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                item.run_id,
                index,
                item.key,
                item.step,
                item.at_ms,
                len(item.data),
                before,
                item.data.decode(),
            ),
        )
        last[item.run_id] = (index, before + len(item.data))
    for run_id, (index, total) in last.items():
        # Kept: the newest ``cap.items`` items, of which those that end within
        # ``cap.bytes`` of the newest's end (an item over the cap alone is kept).
        conn.execute(
            "DELETE FROM progress WHERE run_id = ? AND idx <= ?", (run_id, index - cap.items)
        )
        conn.execute(
            "DELETE FROM progress WHERE run_id = ? AND before < ? AND idx < ?",
            (run_id, total - cap.bytes, index),
        )


def progress_records(
    conn: Connection, run_id: str, start: int = 0, limit: int = 1000
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
