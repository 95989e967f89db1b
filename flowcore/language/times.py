"""Time as people write it in specs: durations, cron fields and time zones.

Pure: a duration is text turned into milliseconds, and a cron's next point is
computed from a time the caller passes in (never a clock). Two libraries do
the reading: msgspec decodes ISO-8601 durations (``PT2H``), and cronsim
evaluates 5-field cron expressions, in a time zone from ``zoneinfo`` when one
is named. Time-zone rules are data (the system's tz database, or the
``tzdata`` package): a replay on a machine whose rules differ for the times a
run crossed can compute a different due time, as for any scheduler that
follows civil time.

Durations written as people write them (``90s``, ``2h30m``, ``1d12h``,
``500ms``) are the ISO-8601 form without its designators: the units, largest
first, each at most once, are rewritten into ``P…DT…H…M…S`` and decoded by
msgspec, so both forms share one reader and one set of rules.

DST, as cron has always done it (cronsim follows Debian's cron): a time that
a spring-forward gap skips fires at the first instant after the gap; in the
repeated hour of a fall-back, a field naming a fixed hour fires once (the
first occurrence), while a wildcard hour (``*/30 * * * *``) fires in both.
"""

from __future__ import annotations

import datetime as _dt
import re
import zoneinfo
from functools import lru_cache

import msgspec

from .._data import short

__all__ = [
    "MAX_DURATION_MS",
    "DurationError",
    "check_cron",
    "check_zone",
    "next_cron_ms",
    "parse_duration",
]

# A duration beyond ten years is a mistake in a spec, never a real delay.
MAX_DURATION_MS = 10 * 366 * 24 * 3600 * 1000

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
_HUMAN = re.compile(
    r"(?:(?P<d>\d+)d)?(?:(?P<h>\d+)h)?(?:(?P<m>\d+)m(?!s))?(?:(?P<s>\d+(?:\.\d+)?)s)?"
    r"(?:(?P<ms>\d+)ms)?"
)
_decode_iso = msgspec.json.Decoder(_dt.timedelta).decode


class DurationError(ValueError):
    """A duration that cannot be read, is negative, or is absurdly long."""


def parse_duration(value: object, *, allow_zero: bool = False) -> int:
    """Milliseconds from ``value``: an integer (already milliseconds), a human
    duration (``90s``, ``2h30m``, ``250ms``) or ISO-8601 (``PT2H``, ``P1DT2H``).

    Raises ``DurationError`` naming what is wrong. Zero is refused unless
    ``allow_zero`` (a delay may be zero; a timeout or a cadence may not)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise DurationError(
            f"expected a duration (milliseconds or text like '90s'), not {_kind(value)}"
        )
    if isinstance(value, float):
        if not value.is_integer():
            raise DurationError(f"a duration in milliseconds must be whole, got {value!r}")
        value = int(value)
    if isinstance(value, str):
        value = _text_ms(value)
    if value < 0:
        raise DurationError(f"a duration cannot be negative, got {value}")
    if value == 0 and not allow_zero:
        raise DurationError("a duration must be greater than zero")
    if value > MAX_DURATION_MS:
        raise DurationError(f"a duration of {value} ms is longer than ten years")
    return value


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def _text_ms(text: str) -> int:
    stripped = text.strip()
    human = _HUMAN.fullmatch(stripped)
    if stripped and human is not None:
        parts = human.groupdict()
        iso = "P" + (f"{parts['d']}D" if parts["d"] else "") + "T"
        iso += "".join(f"{parts[u]}{u.upper()}" for u in ("h", "m") if parts[u])
        seconds = float(parts["s"] or 0) + int(parts["ms"] or 0) / 1000
        iso += f"{seconds:.3f}S" if seconds else ""
        stripped = iso.removesuffix("T") if iso != "PT" else "PT0S"
    elif stripped[1:] and stripped[0] == "-" and _HUMAN.fullmatch(stripped[1:]):
        raise DurationError(f"a duration cannot be negative, got {short(text)}")
    elif not stripped.upper().startswith(("P", "-P")):
        hint = " (milliseconds are a number, without quotes)" if stripped.isdigit() else ""
        raise DurationError(
            f"{short(text)} is not a duration: write it like '90s', '2h30m', '1d', '250ms'"
            f" or ISO-8601 'PT2H'{hint}"
        )
    try:
        delta = _decode_iso(msgspec.json.encode(stripped))
    except msgspec.DecodeError as exc:
        reason = str(exc).removesuffix(" - at `$`")
        raise DurationError(f"{short(text)} is not a duration: {reason}") from None
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


@lru_cache(maxsize=64)
def check_zone(name: str) -> zoneinfo.ZoneInfo:
    """The time zone called ``name`` (an IANA name such as ``Europe/Paris``)."""
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise DurationError(
            f"unknown time zone {name!r} (an IANA name such as 'Europe/Paris' or 'UTC')"
        ) from None


def check_cron(text: str, zone: str | None = None) -> None:
    """Raise ``ValueError`` with the library's reason when ``text`` is not a
    5-field cron expression (or ``zone`` is not a time zone)."""
    from cronsim import CronSim, CronSimError

    if len(text.split()) != 5:
        raise ValueError(f"{text!r} is not a 5-field cron expression")
    try:
        CronSim(text, _EPOCH.astimezone(check_zone(zone)) if zone else _EPOCH)
    except CronSimError as exc:
        raise ValueError(f"{text!r} is not a valid cron expression: {exc}") from None


def next_cron_ms(cron: str, zone: str | None, after_ms: int) -> int:
    """The first point of ``cron`` strictly after ``after_ms`` (epoch ms), read
    in ``zone`` (UTC when None)."""
    from cronsim import CronSim

    start = _EPOCH + _dt.timedelta(milliseconds=after_ms)
    if zone:
        start = start.astimezone(check_zone(zone))
    due = next(CronSim(cron, start))
    return (due - _EPOCH) // _dt.timedelta(milliseconds=1)
