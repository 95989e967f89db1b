"""JSON text as one flowcore value, refused whole when it is not (``decode_json_text``).

The one reader of JSON a person or a client hands over: the command's
options (``flowcore_cli``), the HTTP API's bodies (``flowcore_serve``) and
the stdio wire. It refuses, naming ``source`` and the bad part: malformed
JSON, NaN or an infinity (1e999), a lone surrogate, nesting deeper than
``MAX_DEPTH``, an integer beyond 64 bits, a key given twice in one object, or
a value over ``limit`` bytes as compact JSON. Nothing is rewritten: a value
is accepted as written or refused. msgspec decides; Python's own parser only
explains what msgspec refused and finds repeated keys.

This module must never do I/O.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from ._data import MAX_DEPTH, MAX_EVENT_BYTES, DataError, check_data, json_size, short

__all__ = ["JsonTextError", "decode_json_text"]


class JsonTextError(ValueError):
    """JSON text that is not one flowcore value; the message names the source and why."""


def decode_json_text(data: bytes, source: str, limit: int = MAX_EVENT_BYTES) -> Any:
    """The value ``data`` holds, or ``JsonTextError``."""
    if not data.strip():
        raise JsonTextError(f"{source} is empty: expected a JSON value")
    try:
        # msgspec, strictly: no NaN or infinities, no lone surrogates, valid
        # UTF-8. Its recursion is bounded by a RecursionError, caught below.
        value = msgspec.json.decode(data)
    except RecursionError:
        raise JsonTextError(
            f"{source} is nested too deeply (flowcore data is at most {MAX_DEPTH} levels deep)"
        ) from None
    except msgspec.DecodeError as exc:
        _explain(data, source)
        raise JsonTextError(f"{source} is not valid JSON: {exc}") from None
    try:
        check_data(value, "$", source)
    except DataError as exc:
        raise JsonTextError(str(exc)) from None
    size = json_size(value)
    if size > limit:
        raise JsonTextError(
            f"{source}: the value is {size:,} bytes as JSON, over the limit of {limit:,}"
        )
    _refuse_repeated_keys(data, source)
    return value


def _explain(data: bytes, source: str) -> None:
    """Say precisely why msgspec refused text that Python's parser reads.

    msgspec's messages are terse, and one is wrong: a lone surrogate escape
    ``"\\ud800"`` is "Input data was truncated". Python's parser accepts NaN,
    1e999 (as inf) and lone surrogates; when it reads the text, the core's
    ``check_data`` names the bad part and its path. msgspec still decides: a
    text it refused is refused, with its own message if this finds nothing.
    """
    try:
        value = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError):
        return  # malformed for both parsers: msgspec's message (with its offset) stands
    try:
        check_data(value, "$", source)
    except DataError as exc:
        raise JsonTextError(str(exc)) from None


class _RepeatedKey(Exception):
    def __init__(self, key: str) -> None:
        self.key = key


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _RepeatedKey(key)
            seen.add(key)
    return result


def _refuse_repeated_keys(data: bytes, source: str) -> None:
    """Refuse an object that gives a key twice.

    msgspec (like most parsers) keeps the last value and drops the others
    without a word: that is a silent rewrite, and spec files refuse it too.
    Python's parser reports the pairs as written; the text is known to be
    valid and shallow by now.
    """
    if b"{" not in data:
        return
    try:
        json.loads(data.decode("utf-8"), object_pairs_hook=_unique_pairs)
    except _RepeatedKey as exc:
        raise JsonTextError(
            f"{source}: key {short(exc.key)} appears twice in one object;"
            " give each key once (only one of the values could be kept)"
        ) from None
