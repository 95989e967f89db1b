"""Values flowcore cannot store, and a tools module that returns them.

Shared by the hosts' tests (local, Temporal): a real tool returns each bad
value beside healthy runs on one worker, and every host must fail that tool's
own effect once with ``unencodable-output`` naming where the bad value is.
"""

from __future__ import annotations

import datetime
import json
import threading
from collections import Counter
from typing import Any

from flowcore import CallTool
from flowcore_handlers import Registry

LONE = json.loads('"\\ud800"')  # what Python's JSON parser makes of a lone surrogate escape
DEEP = json.loads("[" * 100 + "]" * 100)

BAD: dict[str, tuple[Any, str]] = {
    # case: (what the tool returns, where the error message must point)
    "bigint": ({"n": 10**20}, "output.n"),
    "surrogate": ({"text": LONE}, "output.text"),
    "nan": ([1.0, float("nan")], "output[1]"),
    "infinity": ({"x": float("inf")}, "output.x"),
    "datetime": ({"when": datetime.datetime(2026, 1, 1)}, "output.when"),
    "set": ({"s": {1, 2}}, "output.s"),
    "int-key": ({1: "one"}, "output['1']"),
    "deep": (DEEP, "output" + "[0]" * 64),
    "huge": ("y" * (2 << 20), "result"),  # 2 MiB
}

EXECUTIONS: Counter[str] = Counter()
_lock = threading.Lock()  # sync handlers run on worker threads


def _ran(call: CallTool) -> None:
    with _lock:
        EXECUTIONS[call.idempotency_key] += 1


def bad(call: CallTool) -> Any:
    _ran(call)
    return BAD[call.input["case"]][0]


def fine(call: CallTool) -> Any:
    _ran(call)
    return {"fine": call.input}


REGISTRY = Registry(tools={"bad": bad, "fine": fine})

# Neither tool declares a class: both are uncertain, so a host never runs them
# again after an unknown outcome, and a second execution would show.
BAD_FLOW = """
flow: hostile
tools: {bad: {}}
steps:
  - {id: call, call_tool: {tool: bad, input: {case: "${input.case}"}}}
"""

CAUGHT_FLOW = """
flow: hostile-caught
tools: {bad: {}, fine: {}}
steps:
  - id: guarded
    try:
      - {id: call, call_tool: {tool: bad, input: {case: "${input.case}"}}}
    catch:
      - errors: [unencodable-output]
        steps: [{id: fallback, call_tool: {tool: fine, input: "${error.type}"}}]
output: "${steps.fallback.output}"
"""

HEALTHY_FLOW = """
flow: healthy
tools: {fine: {}}
steps:
  - {id: call, call_tool: {tool: fine, input: "${input.n}"}}
output: "${steps.call.output}"
"""
