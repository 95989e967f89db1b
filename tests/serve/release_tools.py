"""Deterministic tools of the web view's test flow (``flows/release.yaml``)."""

from __future__ import annotations

from typing import Any

from flowcore import CallTool


def build(call: CallTool) -> dict[str, Any]:
    return {"artifact": f"app-{call.input['ref']}.tar.gz"}


def ship(call: CallTool) -> dict[str, Any]:
    return {"shipped": call.input["artifact"]}


TOOLS = {"build.artifact": build, "deploy.ship": ship}
