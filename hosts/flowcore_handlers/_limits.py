"""Limits across runs that a host applies: per tool, a run's priority, a start's dedup key.

These are the host's, not a flow's: a spec declares its tools and its own
``limits`` (``max_concurrency``, decided by the interpreter inside one run),
while a ``ToolLimit`` caps one tool over every run a host (and every process
sharing its database, or task queue) works on. Nothing here touches the core's
decisions: a call held back by a limit simply starts later.

``parse_tool_limits`` reads the command line's ``--tool-limit`` values
(``charge=concurrency:2,rate:10/1s``); ``check_priority`` and ``check_dedup_key``
check the start options. Each raises ``LimitError`` with one line naming the
value and what is wrong.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "DEFAULT_PRIORITY",
    "LimitError",
    "MAX_PRIORITY",
    "MIN_PRIORITY",
    "ToolLimit",
    "check_dedup_key",
    "check_priority",
    "check_tool_limits",
    "parse_tool_limits",
]

# Priorities are Temporal's priority keys with its server's default levels:
# 1 runs first, 5 last, 3 when none is given. The same range on every host
# keeps a start portable.
MIN_PRIORITY = 1
MAX_PRIORITY = 5
DEFAULT_PRIORITY = 3
MAX_COUNT = 1_000_000
MAX_PER_MS = 10 * 366 * 24 * 3600 * 1000  # ten years, as flowcore's durations
MAX_DEDUP_KEY = 256


class LimitError(ValueError):
    """A tool limit, priority or dedup key that cannot be used (one line, naming it)."""


def _count(value: object, what: str) -> int:
    if type(value) is not int or not 1 <= value <= MAX_COUNT:
        raise LimitError(f"{what} must be an integer from 1 to {MAX_COUNT:,}, not {value!r:.60}")
    return value


@dataclass(frozen=True, slots=True)
class ToolLimit:
    """Caps on one tool across every run a host works on.

    ``concurrency``: at most this many of the tool's calls dispatched and not
    finished at once. ``rate``: at most this many calls started in any window
    of ``per_ms`` milliseconds (a sliding window). ``None``: no cap of that kind.
    """

    concurrency: int | None = None
    rate: int | None = None
    per_ms: int = 1000

    def __post_init__(self) -> None:
        if self.concurrency is not None:
            _count(self.concurrency, "concurrency")
        if self.rate is not None:
            _count(self.rate, "rate")
        per = self.per_ms
        if type(per) is not int or not 1 <= per <= MAX_PER_MS:
            raise LimitError(f"per_ms must be an integer from 1 to {MAX_PER_MS:,}, not {per!r:.60}")
        if self.concurrency is None and self.rate is None:
            raise LimitError("a tool limit needs a concurrency, a rate, or both")

    def text(self) -> str:
        """The limit as ``--tool-limit`` writes it (without the tool)."""
        parts = []
        if self.concurrency is not None:
            parts.append(f"concurrency:{self.concurrency}")
        if self.rate is not None:
            parts.append(f"rate:{self.rate}/{self.per_ms}ms")
        return ",".join(parts)


def check_tool_limits(limits: Mapping[str, ToolLimit] | None) -> dict[str, ToolLimit]:
    """A host's ``tool_limits`` argument checked: tool names to ``ToolLimit``s."""
    if limits is None:
        return {}
    if not isinstance(limits, Mapping):
        raise LimitError(
            f"tool_limits must be a mapping of tool names to ToolLimit, not {limits!r:.60}"
        )
    out: dict[str, ToolLimit] = {}
    for tool, limit in limits.items():
        if not isinstance(tool, str) or not tool.strip():
            raise LimitError(
                f"tool_limits: a tool name must be a non-empty string, not {tool!r:.60}"
            )
        if not isinstance(limit, ToolLimit):
            raise LimitError(f"tool_limits[{tool!r}] must be a ToolLimit, not {limit!r:.60}")
        out[tool] = limit
    return out


def parse_tool_limits(values: Iterable[str]) -> dict[str, ToolLimit]:
    """``--tool-limit`` values (``TOOL=concurrency:N,rate:K/DURATION``) as ``ToolLimit``s."""
    from flowcore import DurationError, parse_duration

    out: dict[str, ToolLimit] = {}
    for value in values:
        tool, sep, spec = value.partition("=")
        tool = tool.strip()
        if not sep or not tool or not spec.strip():
            raise LimitError(
                f"--tool-limit {value!r:.80}: expected TOOL=concurrency:N,rate:K/DURATION"
            )
        if tool in out:
            raise LimitError(f"--tool-limit: tool {tool!r:.80} is limited twice")
        fields: dict[str, Any] = {}
        for part in spec.split(","):
            name, colon, number = (p.strip() for p in part.partition(":"))
            if not colon or name not in ("concurrency", "rate") or name in fields:
                raise LimitError(
                    f"--tool-limit {tool}: {part.strip()!r:.60} is not concurrency:N or"
                    " rate:K/DURATION (each at most once)"
                )
            if name == "rate":
                count, slash, period = number.partition("/")
                if not slash:
                    raise LimitError(
                        f"--tool-limit {tool}: rate {number!r:.60} needs a period: K/DURATION,"
                        " e.g. 10/1s"
                    )
                try:
                    per = period.strip()
                    fields["per_ms"] = parse_duration(int(per) if per.isdigit() else per)
                except DurationError as exc:
                    raise LimitError(f"--tool-limit {tool}: rate period: {exc}") from None
                number = count.strip()
            if not number.isdigit():
                raise LimitError(
                    f"--tool-limit {tool}: {name} must be a whole number, not {number!r:.60}"
                )
            fields[name] = int(number)
        try:
            out[tool] = ToolLimit(**fields)
        except LimitError as exc:
            raise LimitError(f"--tool-limit {tool}: {exc}") from None
    return out


def check_priority(priority: object) -> int:
    """A start's priority: an integer from 1 (first) to 5 (last); None is the default 3."""
    if priority is None:
        return DEFAULT_PRIORITY
    if type(priority) is not int or not MIN_PRIORITY <= priority <= MAX_PRIORITY:
        raise LimitError(
            f"priority must be an integer from {MIN_PRIORITY} (first) to {MAX_PRIORITY} (last),"
            f" not {priority!r:.60}"
        )
    return priority


def check_dedup_key(key: object) -> str | None:
    """A start's dedup key: a non-empty string of at most 256 characters, or None."""
    if key is None:
        return None
    if not isinstance(key, str) or not key or len(key) > MAX_DEDUP_KEY or not key.isprintable():
        raise LimitError(
            f"dedup key must be a non-empty printable string of at most {MAX_DEDUP_KEY}"
            f" characters, not {key!r:.60}"
        )
    return key
