"""The progress lines both hosts' ``run`` commands print (``flowcore_cli._progress``)."""

from __future__ import annotations

from typing import Any

import pytest

import flowcore
from flowcore_cli._progress import progress_line


def line(kind: str, data: dict[str, Any], run_id: str = "r") -> str | None:
    text = progress_line(flowcore.Record(kind, 3, run_id, 5, data))
    return None if text is None else text.plain


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"kind": "call-tool", "tool": "t", "idempotencyKey": "r/a#1"}, "→ call-tool t r/a#1"),
        (
            {
                "kind": "run-agent",
                "agentId": "w",
                "prompt": "p",
                "member": "sre",
                "idempotencyKey": "r/b#1",
                "budgetRemaining": {"steps": 7, "costMinorUnits": 90},
            },
            "→ run-agent w (sre) r/b#1  budget left: 7 steps, 90 cost",
        ),
        (
            {
                "kind": "run-agent",
                "agentId": "w",
                "prompt": "p",
                "idempotencyKey": "r/b#1",
                "budgetRemaining": {"steps": 7},
            },
            "→ run-agent w r/b#1  budget left: 7 steps",
        ),
        (
            {"kind": "ask-human", "question": "ok?", "options": ["y", "n"], "idempotencyKey": "k"},
            "? ok? ['y', 'n'] k",
        ),
        ({"kind": "ask-human", "question": "why?", "idempotencyKey": "k"}, "? why?  k"),
        (
            {"kind": "await-signal", "signal": "go", "idempotencyKey": "k"},
            "… waiting for signal go k",
        ),
        ({"kind": "sleep", "untilMs": 9, "idempotencyKey": "k"}, None),
        ({"kind": "settled", "status": "failed"}, "■ r settled failed"),
    ],
)
def test_effect_lines(data: dict[str, Any], expected: str | None) -> None:
    assert line("effect.emitted", data) == expected


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"kind": "effect-succeeded", "idempotencyKey": "k", "atMs": 1}, "✓ k"),
        (
            {"kind": "effect-failed", "idempotencyKey": "k", "atMs": 1, "error": {"type": "x"}},
            "✗ k x: ",
        ),
        (
            {"kind": "human-answered", "idempotencyKey": "k", "answer": "y", "atMs": 1},
            "! k answered 'y'",
        ),
        ({"kind": "signal-received", "signal": "go", "atMs": 1}, "! signal go received"),
        ({"kind": "timer-fired", "idempotencyKey": "r/a#1/backoff", "atMs": 1}, "⏲ r/a#1/backoff"),
        ({"kind": "timer-fired", "idempotencyKey": "r/$deadline", "atMs": 1}, None),
        ({"kind": "cancel-requested", "reason": "[bold]", "atMs": 1}, "■ cancel requested: [bold]"),
    ],
)
def test_event_lines(data: dict[str, Any], expected: str | None) -> None:
    assert line("event.reported", data) == expected


def test_other_records_and_unreadable_data_show_nothing() -> None:
    assert line("run.started", {"flowId": "f"}) is None
    assert line("effect.emitted", {"kind": "call-tool"}) is None  # not an effect
    assert line("event.reported", {"kind": "no-such-event"}) is None
