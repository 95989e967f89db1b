"""The handlers of the screenshot flows (``flows/``): deterministic, no I/O."""

from __future__ import annotations

from typing import Any

from flowcore import CallTool


def check(call: CallTool) -> dict[str, Any]:
    order = str(call.input["order"])
    return {"order": order, "amount": 40 + 7 * len(order), "items": 3}


def charge(call: CallTool) -> dict[str, Any]:
    if call.input["order"] == "A-1002":
        raise RuntimeError(f"card declined for order {call.input['order']} (insufficient funds)")
    return {"charged": call.input["amount"], "receipt": f"R-{call.input['order']}"}


def notify(call: CallTool) -> dict[str, Any]:
    return {"notified": call.input}


TOOLS = {"orders.check": check, "orders.charge": charge, "notify": notify}
