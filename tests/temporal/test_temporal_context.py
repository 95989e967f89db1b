"""A handler's context on Temporal (``flowcore_handlers.context()``, specs/temporal.md):
the activity knows the run (its workflow), the key, and the step and attempt the
key names; what it does not know is ``None``, and nothing can be asked of the
run from there. A real dev server and worker."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import msgspec

from flowcore import CallTool
from flowcore_handlers import ContextError, HandlerError, Registry, context

from .support import running_host, unique

SPEC = """
flow: ctx
tools: {fetch: {class: idempotent}}
steps:
  - id: fetch
    call_tool: {tool: fetch}
    retry: {max_attempts: 2, initial_interval_ms: 0}
output: "${steps.fetch.output}"
"""


def test_the_context_has_what_the_activity_knows(temporal_address: str) -> None:
    def fetch(call: CallTool) -> Any:
        ctx = context()
        if ctx.attempt == 1:
            raise HandlerError("again", retryable=True)
        try:
            ctx.schedule("fetch")
        except ContextError as exc:
            refused = str(exc)
        names = [
            f.name for f in dataclasses.fields(ctx) if f.name not in ("host", "loop", "_order")
        ]
        fields = {name: msgspec.to_builtins(getattr(ctx, name)) for name in names}
        return {"fields": fields, "refused": refused}

    async def main() -> tuple[str, dict[str, Any]]:
        async with running_host(
            temporal_address, None, registry=Registry(tools={"fetch": fetch})
        ) as host:
            rid = await host.start(SPEC, None, unique("ctx"))
            return rid, await asyncio.wait_for(host.result(rid), timeout=120)

    rid, result = asyncio.run(main())
    assert result["status"] == "completed", result
    fields = result["output"]["fields"]
    assert {k: fields.get(k) for k in ("run_id", "idempotency_key", "step", "attempt")} == {
        "run_id": rid,
        "idempotency_key": f"{rid}/fetch#2",
        "step": "fetch",
        "attempt": 2,
    }
    unknown = ("root_run_id", "execution_class", "principal", "flow_id", "flow_version")
    for name in (*unknown, "budget_remaining", "deadline_ms"):  # a tool's effect has no budget
        assert name in fields and fields[name] is None, name
    assert "does not offer it" in result["output"]["refused"]
