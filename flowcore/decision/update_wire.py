"""The wire values of updates: how one ended (``UpdateReply``, on
``Decision.replies``) and what a state knows of one (``UpdateView``). Their
request is an event (``wire.UpdateRequested``).

This module must never do I/O.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from .._data import check_data
from .._errors import WireError
from .wire import ErrorInfo, _Value, _wire_error

__all__ = ["UpdateReply", "UpdateView", "update_reply_from_wire", "update_reply_to_wire"]


class UpdateReply(_Value, frozen=True, kw_only=True):
    """How an update ended (``Decision.replies``): ``completed`` with its reply
    (``output``), or ``failed`` with ``error``."""

    update_id: str
    name: str
    status: Literal["completed", "failed"]
    output: Any = None
    error: ErrorInfo | None = None


class UpdateView(_Value, frozen=True, kw_only=True):
    """What a state knows of one update (``flowcore.update_of``): ``seq`` is its
    number in the incarnation (1, 2, ...)."""

    update_id: str
    name: str
    seq: int
    status: Literal["running", "completed", "failed"]
    output: Any = None
    error: ErrorInfo | None = None
    principal: str | None = None


def update_reply_to_wire(reply: UpdateReply) -> dict[str, Any]:
    """An update's reply as a wire dict: ``{updateId, name, status, output?, error?}``."""
    out: dict[str, Any] = msgspec.to_builtins(reply)
    return out


def update_reply_from_wire(data: Any) -> UpdateReply:
    """Validate a wire dict into an ``UpdateReply``; raises ``WireError`` naming the bad field."""
    if not isinstance(data, dict):
        raise WireError(f"invalid update reply at $: expected an object, got {type(data).__name__}")
    check_data(data, what="invalid update reply")
    try:
        reply: UpdateReply = msgspec.convert(data, UpdateReply, strict=True)
    except msgspec.ValidationError as exc:
        raise _wire_error("update reply", exc) from None
    return reply
