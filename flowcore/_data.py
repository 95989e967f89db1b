"""What counts as data in flowcore, checked where values enter.

Every value a run holds (its input, a tool's output, an answer, a signal's
payload, an error's text) is stored in snapshots and logs by msgspec, in JSON
and MessagePack, and read by hosts in other languages. Python's own JSON
parser and Python handlers produce values those encoders cannot hold, or hold
only by rewriting them: an integer beyond 64 bits (``OverflowError``), a lone
surrogate (``UnicodeEncodeError``), ``NaN`` or an infinity (written as
``null``), a ``datetime`` (written as text), a key that is not a string
(written as text). A value like that must be refused where it enters, with the
path of the bad part, and never reach a state: one run's bad value must not
make that run, or the commit it shares with others, fail later.

flowcore data is exactly:

- ``None``, ``True`` / ``False``;
- integers that fit in 64 bits, signed or unsigned: -2**63 to 2**64 - 1
  (what MessagePack's int64 and uint64 hold, and msgspec in both codecs);
- finite floats (JSON has no NaN or infinities);
- strings of Unicode scalar values (no lone surrogates: UTF-8 cannot encode
  them);
- lists (tuples are accepted and become lists) and dicts with string keys;
- nested at most ``MAX_DEPTH`` containers deep.

Events also have a size limit (``MAX_EVENT_BYTES`` as JSON), so that one
report cannot grow a run's snapshot without bound. ``specs/protocol.md``
documents both.

This module must never do I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from typing import Any, Final

import msgspec

from ._errors import WireError

__all__ = [
    "MAX_DEPTH",
    "MAX_EVENT_BYTES",
    "MAX_INT",
    "MAX_NAME_CHARS",
    "MIN_INT",
    "DataError",
    "check_data",
    "check_text",
    "first_surrogate",
    "format_path",
    "json_size",
    "problems",
    "quick_json",
    "shallow",
    "short",
    "short_json",
    "text_ok",
]

MAX_DEPTH: Final = 64
MAX_EVENT_BYTES: Final = 1 << 20
# Keys, signal names and error types name things; they are never bulk data.
MAX_NAME_CHARS: Final = 4096
MIN_INT: Final = -(2**63)
MAX_INT: Final = 2**64 - 1

_SURROGATE = re.compile("[\ud800-\udfff]")
_json = msgspec.json.Encoder()
_msgpack = msgspec.msgpack.Encoder()


class DataError(WireError):
    """A value is not flowcore data (see ``flowcore/_data.py``).

    ``path`` is where in the value (``$.items[3].n``); ``problem`` says what
    is wrong there, without quoting more than a short prefix of the value.
    """

    def __init__(self, path: str, problem: str, what: str = "value") -> None:
        self.problem = problem
        super().__init__(f"{what} at {path}: {problem}", path)


def short(value: Any, limit: int = 60) -> str:
    """``repr(value)``, cut to a short prefix that says how long the whole is.

    Safe for any value: error messages must never echo a 10 MiB answer, and
    ``repr`` of a lone surrogate is ASCII, so the message can be printed.
    """
    if isinstance(value, str):
        text = ascii(value)
        if len(value) > limit:
            return f"{ascii(value[:limit])[:-1]}…' ({len(value):,} characters)"
        return text
    try:
        text = ascii(value)
    except Exception:  # a foreign object's repr may fail in any way
        text = f"<{type(value).__name__}>"
    if len(text) > limit:
        return f"{text[:limit]}… ({type(value).__name__})"
    return text


def short_json(value: Any, limit: int = 60) -> str:
    """``value`` (flowcore data) as compact JSON, cut to a short prefix."""
    text = msgspec.json.encode(value, order="sorted").decode()
    if len(text) > limit:
        return f"{text[:limit]}… ({len(text):,} bytes)"
    return text


def first_surrogate(text: str) -> re.Match[str] | None:
    """The first lone surrogate in ``text`` (where UTF-8 cannot encode it), if any."""
    return None if text.isascii() else _SURROGATE.search(text)


def text_ok(text: str) -> bool:
    """Whether ``text`` holds no lone surrogate (so it encodes as UTF-8)."""
    return text.isascii() or _SURROGATE.search(text) is None


# --- the quick check --------------------------------------------------------------------
#
# Checking happens on every event, so most of it is done by msgspec, in C: a
# value that encodes to JSON, nests shallowly and decodes back to an equal
# value is data. Encoding refuses lone surrogates, integers beyond 64 bits and
# objects msgspec knows nothing of; the round trip catches what encoding
# rewrites (NaN and infinities become null, a key 1 becomes "1", a datetime or
# a set becomes text or a list). Anything else (a tuple, which is data but
# decodes as a list, or a value that failed) goes to the walk in ``problems``,
# which decides and names the path. Both must agree on what is data: the
# property tests in tests/decision/test_hostile_events.py hold them to it.

_NOT_BRACKETS = bytes(sorted(set(range(256)) - set(b"[]{}")))
_probe_errors = (TypeError, ValueError, OverflowError, RecursionError, msgspec.MsgspecError)


def shallow(data: bytes, max_depth: int = MAX_DEPTH) -> bool:
    """Whether the JSON ``data`` surely nests at most ``max_depth`` containers.

    Few brackets mean a shallow value. Otherwise the brackets alone are kept
    and innermost pairs are deleted pass after pass; a pass deletes one or two
    levels, so emptying the text in ``max_depth // 2`` passes proves the depth.
    False means "not sure" (deep, or brackets inside strings): walk the value.
    """
    if data.count(b"[") + data.count(b"{") <= max_depth:
        return True
    brackets = data.translate(None, _NOT_BRACKETS)
    for _ in range(max_depth // 2):
        brackets = brackets.replace(b"[]", b"").replace(b"{}", b"")
        if not brackets:
            return True
    return False


def quick_json(value: Any, decoder: msgspec.json.Decoder[Any] | None = None) -> bytes | None:
    """``value`` as JSON if it is surely data (decoded by ``decoder`` to an equal value).

    None means "not sure": the caller walks the value to know, and to say where.
    """
    try:
        data = _json.encode(value)
        # JSON holds integers of any size; MessagePack refuses one beyond 64
        # bits (OverflowError), which is the range flowcore allows.
        _msgpack.encode(value)
        if data.count(b"[") + data.count(b"{") > MAX_DEPTH and not shallow(data):
            return None
        back = _any.decode(data) if decoder is None else decoder.decode(data)
    except _probe_errors:
        return None
    return data if back == value else None


_any = msgspec.json.Decoder()


Parts = tuple[str | int, ...]


def problems(value: Any, max_depth: int = MAX_DEPTH) -> Iterator[tuple[Parts, str]]:
    """Every problem in ``value``: where (keys and indices) and what (the slow walk)."""
    stack: list[tuple[Any, Parts, int]] = [(value, (), 0)]
    while stack:
        item, parts, depth = stack.pop()
        found = _scalar_problem(item)
        if found is not None:
            yield parts, found
            continue
        if isinstance(item, (dict, list, tuple)) and depth >= max_depth:
            yield parts, f"nested deeper than {max_depth} levels"
            continue
        children: list[tuple[Any, Parts, int]] = []
        if isinstance(item, dict):
            for key, child in item.items():
                # A bad key is reported at the key's own path.
                if not isinstance(key, str):
                    kind = type(key).__name__
                    yield (*parts, str(key)), f"key {short(key)} ({kind}) is not a string"
                elif not text_ok(key):
                    yield (*parts, key), f"key {short(key)} holds a lone surrogate"
                else:
                    children.append((child, (*parts, key), depth + 1))
        elif isinstance(item, (list, tuple)):
            children = [(child, (*parts, i), depth + 1) for i, child in enumerate(item)]
        stack.extend(reversed(children))  # depth first, in document order


def _scalar_problem(value: Any) -> str | None:
    if value is None or value is True or value is False:
        return None
    if isinstance(value, str):
        if text_ok(value):
            return None
        at = _SURROGATE.search(value)
        assert at is not None
        return (
            f"string {short(value)} holds a lone surrogate {at.group()!a} at position"
            f" {at.start()}; strings must be valid Unicode (encodable as UTF-8)"
        )
    if isinstance(value, int):
        if MIN_INT <= value <= MAX_INT:
            return None
        digits = str(value) if abs(value) < 10**30 else f"with {len(str(abs(value)))} digits"
        return (
            f"integer {digits} is outside the 64-bit range (-2**63 to 2**64-1);"
            " send a larger number as a string"
        )
    if isinstance(value, float):
        if math.isfinite(value):
            return None
        return f"{value!r} is not a JSON number (NaN and infinities are not allowed)"
    if isinstance(value, (dict, list, tuple)):
        return None
    return (
        f"a {type(value).__name__} is not JSON data"
        " (null, booleans, numbers, strings, lists and objects with string keys)"
    )


def format_path(parts: Parts, root: str = "$") -> str:
    """``("items", 3, "n")`` as ``$.items[3].n``."""
    out = [root]
    for part in parts:
        if isinstance(part, int):
            out.append(f"[{part}]")
        elif part.isidentifier() and part.isascii():
            out.append(f".{part}")
        else:
            out.append(f"[{short(part, 30)}]")
    return "".join(out)


def check_data(value: Any, path: str = "$", what: str = "value") -> None:
    """Raise ``DataError`` (naming the path) unless ``value`` is flowcore data."""
    if value is None or quick_json(value) is not None:
        return
    found = next(problems(value), None)
    if found is not None:  # else it is data the quick check could not vouch for (a tuple)
        raise DataError(format_path(found[0], path), found[1], what)


def check_text(value: Any, path: str, what: str = "value", limit: int | None = None) -> None:
    """Raise ``DataError`` unless ``value`` is a valid string (of at most ``limit`` characters)."""
    if not isinstance(value, str):
        raise DataError(path, f"expected a string, got {type(value).__name__}", what)
    if not text_ok(value):
        check_data(value, path, what)
    if limit is not None and len(value) > limit:
        raise DataError(path, f"{short(value)} is longer than {limit:,} characters", what)


def json_size(value: Any) -> int:
    """The length in bytes of ``value`` as compact JSON (for a value ``check_data`` passed)."""
    return len(_json.encode(value))
