"""Handlers for the Temporal host tests: the same contract as any tools module.

``FLOWCORE_TEST_JOURNAL`` names a file where every call appends ``start KEY
PID`` before it runs and ``done KEY PID`` after, so a test can tell which
calls ran, in which process, and which finished.
"""

from __future__ import annotations

import os
import time
from typing import Any

from flowcore import CallTool
from flowcore_handlers import HandlerError

JOURNAL_ENV = "FLOWCORE_TEST_JOURNAL"


def _journal(what: str, key: str) -> None:
    path = os.environ.get(JOURNAL_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"{what} {key} {os.getpid()}\n")


def journal_lines(path: str | os.PathLike[str]) -> list[tuple[str, str, int]]:
    """The calls a journal recorded: ``(start|done, key, pid)``, in order."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f.read().splitlines():
            what, key, pid = line.split()
            out.append((what, key, int(pid)))
    return out


def _input(call: CallTool) -> dict[str, Any]:
    return call.input if isinstance(call.input, dict) else {}


def echo(call: CallTool) -> Any:
    _journal("start", call.idempotency_key)
    _journal("done", call.idempotency_key)
    return _input(call).get("value", call.input)


def slow(call: CallTool) -> Any:
    """Sleeps ``seconds`` (default 0.3), then answers ``value``."""
    _journal("start", call.idempotency_key)
    time.sleep(float(_input(call).get("seconds", 0.3)))
    _journal("done", call.idempotency_key)
    return _input(call).get("value", "slept")


def gate(call: CallTool) -> Any:
    """Waits until the file ``path`` exists (two minutes at most), then answers ``value``."""
    _journal("start", call.idempotency_key)
    path = str(_input(call).get("path", ""))
    deadline = time.monotonic() + 120
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.05)
    _journal("done", call.idempotency_key)
    return _input(call).get("value", "opened")


def fail(call: CallTool) -> Any:
    _journal("start", call.idempotency_key)
    raise HandlerError(str(_input(call).get("type", "boom")), "failed on purpose")


TOOLS = {
    "echo": echo,
    "slow": slow,
    "gate": gate,
    "fail": fail,
    "book": echo,
    "unbook": echo,
}
