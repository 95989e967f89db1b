"""Tools for the local host's crash and two-worker tests.

Every invocation is journaled to $FLOWCORE_TEST_JOURNAL: "S key" before the
handler's work, "E key" after, each line written with O_APPEND and fsync'd,
so the test can count how often each key really ran, across SIGKILLs.
"""

from __future__ import annotations

import os
import random
import time
from typing import Any

from flowcore import CallTool


def _journal(mark: str, key: str) -> None:
    path = os.environ["FLOWCORE_TEST_JOURNAL"]
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{mark} {key} {os.getpid()}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def _work(call: CallTool) -> Any:
    _journal("S", call.idempotency_key)
    time.sleep(random.uniform(0.0, float(os.environ.get("FLOWCORE_TEST_DELAY", "0.01"))))
    _journal("E", call.idempotency_key)
    return {"echo": call.input, "tool": call.tool}


def crash(call: CallTool) -> Any:
    _journal("S", call.idempotency_key)
    os.kill(os.getpid(), 9)  # takes the whole host down, every time
    return None


TOOLS = {"read": _work, "put": _work, "send": _work, "crash": crash}
