"""A handler that raises ``OutcomeUnknown``: effect-outcome-unknown, settled by execution class."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import flowcore
from flowcore import CallTool, EffectOutcomeUnknown
from flowcore_handlers import OutcomeUnknown, Registry, outcome_event
from flowcore_local import LocalHost

CALLS: list[str] = []


def lost_once(call: CallTool) -> Any:
    CALLS.append(call.idempotency_key)
    if CALLS.count(call.idempotency_key) == 1:
        raise OutcomeUnknown("the connection broke mid-call")
    return {"done": call.input}


def spec(klass: str) -> str:
    return (
        f"flow: lost\ntools: {{t: {{class: {klass}}}}}\nsteps:\n"
        "  - {id: a, call_tool: {tool: t, input: 1}}\noutput: '${steps.a.output}'\n"
    )


def run(db: Path | str, text: str, run_id: str) -> Any:
    async def main() -> Any:
        registry = Registry(tools={"t": lost_once})
        # A long lease: the re-issue must not wait for recovery.
        async with LocalHost(db, registry=registry, lease_ms=3_600_000) as host:
            rid = await host.start(text, {}, run_id)
            await asyncio.wait_for(host.work(until_settled=rid), 60)
            return await host.run(rid)

    return asyncio.run(main())


def test_outcome_event_reports_outcome_unknown() -> None:
    effect = CallTool(tool="t", input=None, idempotency_key="r-1/a#1")
    event = outcome_event(effect, None, OutcomeUnknown("lost"), 5)
    assert event == EffectOutcomeUnknown(idempotency_key="r-1/a#1", at_ms=5)
    flowcore.check_event(event)


@pytest.mark.parametrize("klass", ["readonly", "idempotent"])
def test_a_safe_tool_is_issued_again_at_once_with_the_same_key(
    tmp_path: Path, local_db: Path | str, klass: str
) -> None:
    CALLS.clear()
    row = run(local_db, spec(klass), f"ou-{klass}")
    assert (row.status, row.output) == ("completed", {"done": 1})
    assert CALLS == [f"ou-{klass}/a#1", f"ou-{klass}/a#1"]


def test_an_uncertain_tool_fails_with_outcome_unknown(tmp_path: Path, local_db: Path | str) -> None:
    CALLS.clear()
    row = run(local_db, spec("uncertain"), "ou-u")
    assert row.status == "failed"
    assert row.error["type"] == "outcome-unknown"
    assert CALLS == ["ou-u/a#1"]
