"""JSON data and text a handler hands to its host, checked as flowcore data.

``checked_json`` encodes what a handler hands over (heartbeat details, a
progress item) once checked and within its size; ``safe_text`` turns any
object's text into flowcore data (cut, lone surrogates escaped).
"""

from __future__ import annotations

from typing import Any

import msgspec

import flowcore

__all__ = ["MAX_MESSAGE_CHARS", "checked_json", "safe_text"]

MAX_MESSAGE_CHARS = 4096
"""An error message from a handler is cut to this many characters."""


def safe_text(value: Any, limit: int = MAX_MESSAGE_CHARS) -> str:
    """Any object's text as flowcore data: cut to ``limit`` characters, surrogates escaped."""
    try:
        text = value if isinstance(value, str) else str(value)
    except Exception:  # an exception's __str__ may itself raise
        text = f"<unprintable {type(value).__name__}>"
    if len(text) > limit:
        text = f"{text[:limit]}… ({len(text):,} characters)"
    # A lone surrogate cannot be stored; keep it visible as an escape.
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def checked_json(data: Any, what: str, limit: int, error: type[ValueError]) -> bytes:
    """``data`` as JSON bytes: flowcore data of at most ``limit`` bytes, or ``error``
    naming ``what`` (``heartbeat details``, ``progress item``) and why."""
    try:
        flowcore.check_data(data, "$", what)
        encoded = msgspec.json.encode(data)
    except (flowcore.DataError, TypeError, ValueError) as exc:
        raise error(f"{what} cannot be stored: {safe_text(exc)}") from None
    if len(encoded) > limit:
        verb = "are" if what.endswith("s") else "is"
        raise error(f"{what} {verb} {len(encoded):,} bytes as JSON; at most {limit:,} are kept")
    return encoded
