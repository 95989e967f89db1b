"""The store of step results: a value, cheap to derive the next one from.

A run records a result for every step it finishes, and expressions read them
by scoped id (``per[2]/triage``). The store must therefore take a write per
event at a cost that does not grow with the run's history, while every old
store stays valid (states are values).

The layout: a small persistent map of recent results (``immutables.Map``) in
front of a stack of frozen dicts, newest first. A full batch of recent
results becomes a new dict; dicts of equal size are merged like the carries
of a binary counter, so each result is copied O(log n) times in all, by fast
sequential dict copies, and a dict once built is never changed. A persistent
hash map of every result was the first design: inserting into a 100k-entry
HAMT touches four levels of nodes that are no longer in the CPU cache, and
the cost per event grew by half from 1k to 100k events
(``benchmarks/bench_replay.py``).

A result is deleted by writing the marker ``GONE`` over it; merging into the
oldest dict drops the markers. ``rewrites`` remembers whether a name may have
been written twice (the children of a retried composite record into the same
scope again): only then must a deletion look past ``recent`` for an older
value that would show through.

This is the one module that knows the layout; the interpreter sees ``get``,
``put``, ``delete``, ``take`` and ``live``.
"""

from __future__ import annotations

from typing import Any

import immutables
import msgspec

__all__ = ["BATCH", "GONE", "ResultStore"]

BATCH = 64
"""Recent results merged into the dicts at once."""


class _Gone:
    """The value that marks a deleted result until the oldest dict drops it."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "GONE"


GONE: Any = _Gone()

_EMPTY: immutables.Map[str, Any] = immutables.Map()


class ResultStore(msgspec.Struct, frozen=True, gc=False):
    """Step results by scoped id. Every method returns a new store; none changes this one."""

    recent: immutables.Map[str, Any] = _EMPTY
    segments: tuple[dict[str, Any], ...] = ()  # frozen dicts, newest first
    rewrites: bool = False  # a name may have been written more than once

    @classmethod
    def of(cls, records: dict[str, Any]) -> ResultStore:
        """A store holding ``records`` (a restored snapshot)."""
        return cls(_EMPTY, (dict(records),) if records else ())

    def get(self, name: str) -> Any:
        """The record under ``name``, or None."""
        record = self.recent.get(name)
        if record is None:
            for segment in self.segments:
                record = segment.get(name)
                if record is not None:
                    break
            else:
                return None
        return None if record is GONE else record

    def put(self, name: str, record: Any, rewrite: bool = False) -> ResultStore:
        """The store with ``record`` under ``name``.

        ``rewrite``: the name may have been written before (the caller knows).
        """
        recent = self.recent.set(name, record)
        rewrites = self.rewrites or rewrite
        if len(recent) >= BATCH:
            return ResultStore(_EMPTY, _merge(recent, self.segments), rewrites)
        return ResultStore(recent, self.segments, rewrites)

    def delete(self, name: str) -> ResultStore:
        """The store without ``name`` (itself if there is none)."""
        # Written once (no ``rewrites``), a result in ``recent`` has no older
        # value in the dicts; otherwise look (about log2(n/64) dicts, each a
        # likely cache miss in a long run).
        if name in self.recent and not (self.rewrites and self._in_segments(name)):
            return ResultStore(self.recent.delete(name), self.segments, self.rewrites)
        if self.get(name) is not None:
            return self.put(name, GONE)
        return self

    def take(self, names: list[str]) -> tuple[list[Any], ResultStore]:
        """Read and delete these results (a finished for_each's outputs); each must be there.

        When they are a good part of all results, the store is rebuilt as one
        dict without them: one pass, instead of a lookup and a deletion mark
        per name, each walking and merging the dicts.
        """
        size = len(self.recent) + sum(len(segment) for segment in self.segments)
        if len(names) * 4 < size:
            store = self
            records = []
            for name in names:
                record = self.get(name)
                if record is None:
                    raise KeyError(name)
                records.append(record)
                store = store.delete(name)
            return records, store
        merged = self._merged()
        records = list(map(merged.pop, names))
        live = {name: record for name, record in merged.items() if record is not GONE}
        return records, ResultStore(_EMPTY, (live,) if live else (), self.rewrites)

    def live(self) -> dict[str, Any]:
        """Every live result, by scoped id."""
        return {name: record for name, record in self._merged().items() if record is not GONE}

    def __eq__(self, other: object) -> bool:
        """Stores are equal when they hold the same results, however they are laid out."""
        return isinstance(other, ResultStore) and self.live() == other.live()

    __hash__ = None  # type: ignore[assignment]  # mutable contents: not hashable

    def __len__(self) -> int:
        """Entries held, markers included: what a rebuild would have to walk."""
        return len(self.recent) + sum(len(segment) for segment in self.segments)

    def _merged(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for segment in reversed(self.segments):
            out.update(segment)  # newer values win
        out.update(self.recent.items())
        return out

    def _in_segments(self, name: str) -> bool:
        for segment in self.segments:
            if name in segment:
                return True
        return False


def _merge(
    recent: immutables.Map[str, Any], segments: tuple[dict[str, Any], ...]
) -> tuple[dict[str, Any], ...]:
    """Move the recent results into a new dict, merging dicts of no larger size."""
    segment = dict(recent.items())
    rest = list(segments)
    while rest and len(rest[0]) <= len(segment):
        merged = rest.pop(0).copy()
        merged.update(segment)  # the newer value wins
        segment = merged
    if not rest and GONE in segment.values():
        segment = {name: record for name, record in segment.items() if record is not GONE}
    return (segment, *rest)
