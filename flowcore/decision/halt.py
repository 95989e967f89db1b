"""How a transition stops before its work is done: a ``Halt``.

Two things stop a transition wherever they happen, however deep: a budget
that runs out (``Exhausted``) and a ``continue_as_new`` step
(``ContinueRequested``). Each is a plain value. The place that meets one
records it on the transaction (``Txn.stop``) and returns; every caller on
the way back checks ``Txn.halt`` after a call that may stop and returns at
once, doing nothing more (a function that hands an outcome up hands up
None, as when a step waits). Where the transition began (``interp.start``,
``transitions.apply``) the halt is taken (``Txn.take_halt``) and handled:
``ending.halted`` settles the run ``budget-exhausted`` (or first runs
``on_budget_exhausted``'s steps within the reserve) or ends the incarnation
with a ``continue-as-new`` effect.

This module must never do I/O, read a clock or draw a random number.
"""

from __future__ import annotations

from typing import Any, TypeAlias

import msgspec

from .wire import ExhaustedLimit

__all__ = ["ContinueRequested", "Exhausted", "Halt"]


class Exhausted(msgspec.Struct, frozen=True):
    """A budget ran out: the run settles ``budget-exhausted`` (``ending.exhaust``)."""

    limit: ExhaustedLimit


class ContinueRequested(msgspec.Struct, frozen=True):
    """A ``continue_as_new`` step ran: the incarnation ends (``ending.continue_as_new``)."""

    key: str
    input: Any
    idle: int = 0  # idle incarnations in a row, this one included


Halt: TypeAlias = Exhausted | ContinueRequested
"""What stopped a transition before its work was done."""
