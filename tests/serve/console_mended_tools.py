"""A second handler module for ``console_flows/mend.yaml``: its check passes."""

from __future__ import annotations

from typing import Any

from flowcore import CallTool


def check(call: CallTool) -> dict[str, Any]:
    return {"mended": "by the other module"}


TOOLS = {"mend.check": check}
