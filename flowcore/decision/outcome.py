"""The values a transition hands around: a step's outcome, and the errors it makes.

This module must never do I/O, read a clock or draw a random number.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any, TypeAlias, final

import msgspec

from .wire import BudgetRemaining, Effect, ErrorInfo, Usage

__all__ = [
    "NO_BUDGET",
    "NO_USAGE",
    "Failed",
    "InvalidDuration",
    "Ok",
    "add_usage",
    "Outcome",
    "effect_tag",
    "err",
    "error_dict",
    "error_types",
    "matches",
    "unit_fraction",
]


@final
class Ok(msgspec.Struct, frozen=True, gc=False):
    """A step or list succeeded with ``value``, its output."""

    value: Any


@final
class Failed(msgspec.Struct, frozen=True, gc=False):
    """A step or list failed with ``error``."""

    error: ErrorInfo


# The outcome of a step or list: read it with ``match`` or, on the hot paths,
# ``type(out) is Ok`` (the classes are final, so mypy narrows both branches).
# Not ``isinstance``: for a class whose metaclass is not ``type`` (msgspec's),
# a check that fails looks up ``__instancecheck__`` and binds it, five times
# the cost of a check that succeeds. Frozen, slotted msgspec Structs,
# untracked by the garbage collector (they hold JSON data and errors): this is
# the hottest value here, and building one costs about what a tuple does (an
# attrs or plain class costs 4-8 times as much).
Outcome: TypeAlias = Ok | Failed

NO_BUDGET = BudgetRemaining(steps=0)
"""The placeholder budget of a run-agent or run-subflow, filled in when it is issued."""

NO_USAGE = Usage()
"""Usage of nothing: charging it changes no ledger."""


def add_usage(a: Usage, b: Usage) -> Usage:
    """The sum of two usages, field by field."""
    return Usage(**{f: getattr(a, f) + getattr(b, f) for f in Usage.__struct_fields__})


class InvalidDuration(Exception):
    """A duration decided at run time is not one: the step fails ``invalid-duration``.

    Raised while a step begins (its message names the field and the value);
    ``Txn.begin`` turns it into the step's failure, which ``try/catch`` can catch."""


def err(kind: str, message: str, retryable: bool = False) -> ErrorInfo:
    return ErrorInfo(type=kind, message=message, retryable=retryable)


def error_dict(error: ErrorInfo) -> dict[str, Any]:
    """An error as expressions see it (``${error}``, ``${steps.a.error}``):
    ``type``, ``message``, ``retryable``, and ``details``, ``cause`` and
    ``attempts`` where the error has them."""
    out: dict[str, Any] = {
        "type": error.type,
        "message": error.message,
        "retryable": error.retryable,
    }
    if error.details is not None:
        out["details"] = error.details
    if error.cause is not None:
        out["cause"] = error_dict(error.cause)
    if error.attempts:
        out["attempts"] = [error_dict(attempt) for attempt in error.attempts]
    return out


def error_types(error: ErrorInfo) -> Iterator[str]:
    """The types an error matches in ``catch`` and ``retry`` ``errors``: its own,
    then its cause's, and so on down the chain."""
    current: ErrorInfo | None = error
    while current is not None:
        yield current.type
        current = current.cause


def matches(names: tuple[str, ...], error: ErrorInfo) -> bool:
    """Whether ``errors: names`` takes ``error``: ``*``, or a type of its chain."""
    return "*" in names or any(kind in names for kind in error_types(error))


def unit_fraction(key: str) -> float:
    """A number in [0, 1) derived from a key: jitter that replays agree on."""
    digest = hashlib.sha256(key.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def effect_tag(effect: Effect) -> str:
    tag = effect.__struct_config__.tag
    assert isinstance(tag, str)
    return tag
