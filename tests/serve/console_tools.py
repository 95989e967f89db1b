"""Deterministic tools of the console's test flows (``console_flows/``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flowcore import CallTool


def prep(call: CallTool) -> dict[str, Any]:
    return {"prepared": call.input["n"]}


def tick(call: CallTool) -> dict[str, Any]:
    return {"ticked": call.input}


def check(call: CallTool) -> dict[str, Any]:
    marker = Path(call.input["marker"])
    if not marker.exists():
        raise RuntimeError(f"no marker at {marker.name}")
    return {"mended": marker.read_text()}


TOOLS = {"prep.step": prep, "tick": tick, "mend.check": check}
