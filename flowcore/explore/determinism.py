"""The determinism check of an exploration: every transition the search takes
is taken again from the state decoded from the snapshot of the state it left,
and must decide the same, byte for byte — an event accepted is accepted, with
the same effects, the same state (its canonical snapshot) and the same update
replies. So a run resumed from its snapshot decides as the run that wrote it.

A speed-up (``specs/architecture.md`` §5): a state's snapshot is decoded once,
for every transition out of it (``DecodedOnce``), not once per transition
(``DecodeEachTime``, the plain path, which the lockstep property in
``tests/explore/test_determinism.py`` compares it with). It is the same check
because ``advance`` never changes the state it is given, and the explorer
checks that too, of every state it expands: of the state the search holds, and
of the decoded one when it served more than one transition, whose snapshot is
taken again after the last (decoded and encoded again, it must be the same
bytes; a state is frozen records throughout, its only mutable parts the
dicts and lists of values the snapshot holds). A core that changed the state
it was given is told by those checks ("advance changed the state …") where
the plain path might first see a later transition differ.

This module must never do I/O.
"""

from __future__ import annotations

from collections.abc import Callable

from .._errors import EventRejected
from ..decision.snapshot import decode_state
from ..decision.state import State
from ..decision.update_wire import UpdateReply
from ..decision.wire import Effect, Event, encode_effect
from ..language.spec import Flow
from .graph import _snapshot, _Step
from .invariants import _Broken


class DecodeEachTime:
    """The plain path: a fresh ``decode_state`` for every transition."""

    __slots__ = ("flow",)

    def __init__(self, flow: Flow) -> None:
        self.flow = flow

    def __call__(self, data: bytes) -> State:
        return decode_state(data, self.flow)

    def changed(self, data: bytes) -> bool:
        """Never: no decoded state served two transitions."""
        return False


class DecodedOnce(DecodeEachTime):
    """``decode_state`` of the last snapshot asked for, kept while the same bytes
    are asked for again: the transitions out of one state, checked one after
    another as the search expands it, share one decoded state."""

    __slots__ = ("data", "state", "uses")

    def __init__(self, flow: Flow) -> None:
        super().__init__(flow)
        self.data: bytes | None = None
        self.state: State | None = None
        self.uses = 0

    def __call__(self, data: bytes) -> State:
        if self.state is None or data != self.data:
            self.state = decode_state(data, self.flow)
            self.data = data
            self.uses = 0
        self.uses += 1
        return self.state

    def changed(self, data: bytes) -> bool:
        """Whether the state decoded from ``data``, if it served more than one
        transition, no longer encodes to ``data``: ``advance`` changed it (or the
        snapshot does not round-trip). Once it served one only, the check was
        the plain path's."""
        state = self.state
        return (
            state is not None and self.uses > 1 and data == self.data and _snapshot(state) != data
        )


def same_decision(
    step: Callable[[State, Event], _Step],
    resumed: State,
    event: Event,
    effects: tuple[Effect, ...],
    data: bytes,
    replies: tuple[UpdateReply, ...],
) -> None:
    """``step`` of ``event`` from ``resumed`` (the state decoded from the snapshot
    of the state the transition left) decides as the transition did: the same
    ``effects``, a state whose snapshot is ``data``, the same ``replies``.
    Raises ``_Broken("determinism", …)`` saying what differs."""
    try:
        state2, effects2, _, replies2 = step(resumed, event)
    except EventRejected as exc:
        raise _Broken(
            "determinism", f"accepted, but rejected from the state's snapshot: {exc.reason}"
        ) from None
    except Exception as exc:  # a snapshot that lost what the decision reads
        raise _Broken(
            "determinism",
            f"accepted, but raised {type(exc).__name__} from the state's snapshot: {exc}",
        ) from None
    a = [encode_effect(e) for e in effects]
    b = [encode_effect(e) for e in effects2]
    if a != b:
        raise _Broken(
            "determinism",
            "the effects differ when resumed from the snapshot:\n  "
            + "\n  ".join(x.decode() for x in a)
            + "\nvs\n  "
            + "\n  ".join(x.decode() for x in b),
        )
    if _snapshot(state2) != data:
        raise _Broken("determinism", "the state differs when resumed from the snapshot")
    if replies2 != replies:
        raise _Broken("determinism", "the update replies differ when resumed from the snapshot")
