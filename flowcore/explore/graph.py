"""The explored graph: a distinct state (``_Node``) and what the world may
still do beside it (``_Residue``), one move of the world (``_Move``), one
transition as the checks see it (``_Transition``), the digest that identifies
a state, and ``Point``, what an invariant looks at. ``search`` walks it.

This module must never do I/O.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, TypeAlias

import attrs
import immutables
import msgspec

from ..decision.snapshot import canonical_snapshot
from ..decision.state import State
from ..decision.update_wire import UpdateReply
from ..decision.waiting import Waits, waiting_for
from ..decision.wire import (
    Effect,
    Event,
    Settled,
)

if TYPE_CHECKING:
    from .search import _Explorer


class _Node:
    """One distinct state: how it was first reached, and what the world may still do."""

    __slots__ = ("depth", "effects", "event", "keys", "parent", "residue", "state")

    def __init__(
        self,
        parent: int,
        event: Event | None,
        effects: tuple[Effect, ...],
        depth: int,
        state: State | None,
        residue: _Residue,
        keys: immutables.Map[str, Effect],
    ) -> None:
        self.parent = parent
        self.event = event
        self.effects = effects
        self.depth = depth
        self.state = state
        self.residue = residue
        self.keys = keys


@attrs.frozen
class _Residue:
    """What the world may still do, beside the run's state: the signals not sent
    yet (a bit each), whether the cancel came, when pending work was emitted,
    how many update requests it made."""

    signals: int = 0
    cancelled: bool = False
    emitted: tuple[tuple[str, int], ...] = ()
    updates: int = 0  # update requests the run accepted (the next id is u<updates + 1>)

    def digest_bytes(self) -> bytes:
        return msgspec.msgpack.encode((self.signals, self.cancelled, self.emitted, self.updates))


class Point:
    """What an invariant looks at: one transition of the run and where it led.

    ``state`` after it, ``before`` (None at the start), the ``event`` (None at
    the start), the ``effects`` it emitted and the ``replies`` of the updates
    it ended (``UpdateReply``, in order); ``waits`` is
    ``waiting_for(state)``; ``settled`` the ``settled`` effect once the run
    settled; ``depth`` the number of events since the start. ``path()`` gives
    every event since the start and ``emitted()`` every effect (both walk back
    the path: call them where needed).
    """

    __slots__ = (
        "_explorer",
        "_parent",
        "_waits",
        "before",
        "depth",
        "effects",
        "event",
        "replies",
        "state",
    )

    def __init__(
        self,
        explorer: _Explorer,
        parent: int,
        before: State | None,
        event: Event | None,
        effects: tuple[Effect, ...],
        state: State,
        depth: int,
        replies: tuple[UpdateReply, ...] = (),
    ) -> None:
        self._explorer = explorer
        self._parent = parent
        self._waits: Waits | None = None
        self.before = before
        self.event = event
        self.effects = effects
        self.state = state
        self.depth = depth
        self.replies = replies

    @property
    def waits(self) -> Waits:
        if self._waits is None:
            self._waits = waiting_for(self.state)
        return self._waits

    @property
    def settled(self) -> Settled | None:
        return self.state.settled

    def path(self) -> tuple[Event, ...]:
        events = self._explorer.events_to(self._parent)
        return (*events, self.event) if self.event is not None else events

    def emitted(self) -> tuple[Effect, ...]:
        out = self._explorer.effects_to(self._parent)
        return (*out, *self.effects)


class _Move(msgspec.Struct, frozen=True):
    """One thing the world may do now: ``event``; ``group`` is the key of the
    work it answers ("" for anything else); ``signal`` the world's signal it
    sends (-1 for none)."""

    group: str
    event: Event
    signal: int = -1


_Step: TypeAlias = "tuple[State, tuple[Effect, ...], int, tuple[UpdateReply, ...]]"
"""A transition: the state reached, the effects, how many the event itself
emitted (the rest start the next incarnation), the update replies."""
_Result: TypeAlias = "_Step | str | None"


class _Transition(msgspec.Struct, frozen=True):
    """One transition as the checks see it: the state ``before`` (None at the
    start) and its snapshot, the ``event``, the ``state`` reached and its
    snapshot, the ``effects`` and how many of them the event itself emitted
    (``mine``; the rest start the next incarnation), and the replies of the
    updates it ended."""

    before: State | None
    before_data: bytes | None
    event: Event | None
    state: State
    effects: tuple[Effect, ...]
    mine: int
    data: bytes
    replies: tuple[UpdateReply, ...] = ()


def _snapshot(state: State) -> bytes:
    """``canonical_snapshot``: the state as it decides, however its report was built."""
    return canonical_snapshot(state)


def _digest(state: State, residue: _Residue) -> tuple[bytes, bytes]:
    """(``_snapshot``, the digest that identifies the state and the world's residue)."""
    data = _snapshot(state)
    h = hashlib.blake2b(data, digest_size=16)
    h.update(residue.digest_bytes())
    return data, h.digest()
