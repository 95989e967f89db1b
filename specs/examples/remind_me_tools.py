"""Tools for specs/examples/remind_me.yaml: a tool that schedules a reminder.

``remind_me`` schedules a call to ``send_reminder`` through its handler's
context (``flowcore_handlers.context()``) and returns the scheduled call's id;
run again with the same idempotency key (a retry after a crash), it gets the
same id and schedules nothing twice. ``send_reminder``, when it goes, signals
the run that scheduled it, which waits for that signal. Run it with:

    flowcore run specs/examples/remind_me.yaml --tools specs/examples/remind_me_tools.py \\
        --input '{"text": "stretch", "delay_ms": 1000}' --db /tmp/remind.db
"""

from __future__ import annotations

from typing import Any

from flowcore import CallTool
from flowcore_handlers import context


def remind_me(call: CallTool) -> dict[str, Any]:
    ctx = context()
    text = call.input["text"]
    reminder = ctx.schedule("send_reminder", {"text": text}, delay_ms=call.input["delay_ms"])
    return {"reminder": reminder}


def send_reminder(call: CallTool) -> dict[str, Any]:
    ctx = context()
    assert ctx.run_id is not None
    ctx.signal(ctx.run_id, "reminder", {"text": call.input["text"]})
    return {"sent": call.input["text"]}


TOOLS = {"remind_me": remind_me, "send_reminder": send_reminder}
