"""Progress a handler publishes while it runs: ``publish(data)``.

A handler (tool, agent or team; sync or ``async``) calls ``publish`` with a
text chunk (``str``) or structured JSON data, as often as it likes, while its
work goes on. The host that runs the handler provides where the items go (a
sink, set for the handler's context as heartbeats are) and keeps them as the
run's progress stream, which clients follow from an index. Progress is not an
event of the run: the decision function never reads it, and a replay is the
same with or without it.

``publish`` checks the item where it is made: anything that is not flowcore
data, or over ``MAX_PROGRESS_ITEM_BYTES`` as JSON, raises ``ProgressError``
in the handler; so does a call outside a handler. A handler run without a
host's sink (``run_handler`` alone) publishes into ``discard``: items are
checked, then dropped.
``publish`` does not wait for the item to be stored: the host writes items
in batches (the local host with its group commit, Temporal's work activity
in signals to the run's workflow).
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ._checked import checked_json

__all__ = [
    "MAX_PROGRESS_ITEM_BYTES",
    "ProgressError",
    "ProgressSink",
    "discard",
    "publish",
    "publishes",
    "publishing",
    "sink",
]

MAX_PROGRESS_ITEM_BYTES = 64 * 1024
"""A progress item is JSON data of at most this many bytes."""

ProgressSink = Callable[[bytes], None]
"""Where a running handler's progress goes: called with each item as JSON bytes,
in the handler's thread (a host passes something thread-safe)."""


class ProgressError(ValueError):
    """``publish`` was given an item flowcore cannot keep (not JSON data, too big),
    or was called outside a handler."""


_SINK: contextvars.ContextVar[ProgressSink | None] = contextvars.ContextVar(
    "flowcore_progress", default=None
)


def publish(data: Any) -> None:
    """Inside a handler: add ``data`` (a text chunk, or JSON data) to the run's
    progress stream. Returns once the host has it, before it is stored.

    Raises ``ProgressError`` for data flowcore cannot keep, and outside a handler.
    """
    sink = _SINK.get()
    if sink is None:
        raise ProgressError(
            "publish() is called outside a handler: only work a host runs has a progress stream"
        )
    sink(checked_json(data, "progress item", MAX_PROGRESS_ITEM_BYTES, ProgressError))


def discard(data: bytes) -> None:
    """The sink of a host that keeps no progress streams: items are dropped."""


def publishes() -> bool:
    """Whether ``publish`` here keeps its items: inside a handler that a host with
    progress streams runs (not outside a handler, nor into ``discard``). A handler
    whose progress costs something to make (an agent streaming its model's
    requests to publish their text) asks first."""
    found = _SINK.get()
    return found is not None and found is not discard


def sink() -> ProgressSink | None:
    """The sink ``publish`` uses here (None: outside a handler)."""
    return _SINK.get()


@contextmanager
def publishing(sink: ProgressSink) -> Iterator[None]:
    """For a host: while this is open, ``publish`` in this context (and in the
    threads a handler started from it is run in) goes to ``sink``."""
    token = _SINK.set(sink)
    try:
        yield
    finally:
        _SINK.reset(token)
