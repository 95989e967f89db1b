"""Wire forms of effects and report rows, and a check for a rejected event:
what the construct tests around here assert decisions against.
"""

from __future__ import annotations

from typing import Any

import pytest

from flowcore import EventRejected
from tests.harness import Run

_ABSENT: Any = object()


def call(key: str, tool: str, input: Any = _ABSENT) -> dict[str, Any]:
    """The wire form of a call-tool effect."""
    out: dict[str, Any] = {"kind": "call-tool", "tool": tool}
    if input is not _ABSENT:
        out["input"] = input
    out["idempotencyKey"] = key
    return out


def sleep(key: str, until_ms: int) -> dict[str, Any]:
    return {"kind": "sleep", "untilMs": until_ms, "idempotencyKey": key}


def row(key: str, status: str, target: str = "a", effect: str = "call-tool") -> dict[str, Any]:
    """One entry of a settled report, on the wire."""
    return {"idempotencyKey": key, "effect": effect, "target": target, "status": status}


def error(type: str, message: str, retryable: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"type": type, "message": message}
    if retryable:
        out["retryable"] = True
    return out


def settled(
    status: str,
    report: list[dict[str, Any]],
    output: Any = None,
    err: dict[str, Any] | None = None,
    exhausted: str | None = None,
) -> dict[str, Any]:
    """The wire form of a settled effect (defaults are omitted on the wire)."""
    out: dict[str, Any] = {"kind": "settled", "status": status}
    if output is not None:
        out["output"] = output
    if err is not None:
        out["error"] = err
    if exhausted is not None:
        out["exhausted"] = exhausted
    if report:
        out["report"] = report
    return out


def rejected(run: Run, action: Any) -> EventRejected:
    """Run ``action``; it must be rejected and leave the run's state untouched."""
    before = run.state
    with pytest.raises(EventRejected) as info:
        action()
    assert run.state is before
    return info.value
