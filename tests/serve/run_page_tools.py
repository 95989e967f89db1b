"""Deterministic handlers of the run page's test flow (``run_page_flows/``):
an agent that reports usage, a large output, and a tool that raises."""

from __future__ import annotations

from typing import Any

import flowcore
from flowcore import CallTool, RunAgent
from flowcore_handlers import Result

BOOM = "the deploy target refused the artifact: " + "x" * 120


def writer(run: RunAgent) -> Result:
    usage = flowcore.Usage(
        cost_minor_units=12,
        tokens=1500,
        input_tokens=1200,
        output_tokens=300,
        turns=2,
        tool_calls=1,
    )
    return Result({"note": f"written for: {run.prompt}"}, usage)


def dump(call: CallTool) -> dict[str, Any]:
    return {"lines": [f"line {n:03d} of the dump" for n in range(call.input["lines"])]}


def step(call: CallTool) -> dict[str, Any]:
    return {"n": call.input["n"]}


def explode(call: CallTool) -> Any:
    raise RuntimeError(BOOM)


TOOLS = {"big.dump": dump, "ok.step": step, "boom.explode": explode}
AGENTS = {"writer": writer}
