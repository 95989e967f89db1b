"""Durations on the Temporal host: a cron read in a time zone and a duration
decided at run time arm their timers, flowcore passed through the workflow
sandbox (as hosts run it) or imported and watched by it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from .support import eventually, running_host, unique

NIGHTLY = """
flow: nightly
tools: {echo: {class: readonly}}
steps:
  - id: plan
    call_tool: {tool: echo, input: {every: 1d}}
  - id: both
    parallel:
      branches:
        nap:
          - id: wait
            sleep: {for_ms: "${steps.plan.output.every}"}
        zoned:
          - id: nightly
            repeat:
              cron: "30 2 * * *"
              timezone: America/New_York
              steps: [{id: say, call_tool: {tool: echo}}]
"""


@pytest.mark.filterwarnings("ignore:Module flowcore")
@pytest.mark.parametrize("sandbox", ["off", "passthrough", "reimport"])
def test_a_zoned_cron_and_a_decided_sleep_arm_their_timers(
    temporal_address: str, sandbox: str
) -> None:
    async def main() -> tuple[list[dict[str, str]], dict[str, Any]]:
        async with running_host(temporal_address, sandbox=sandbox) as host:
            rid = await host.start(NIGHTLY, None, unique("zoned"))

            async def armed() -> Any:
                pending = (await host.status(rid)).get("pending")
                return pending if pending and len(pending) == 2 else None

            asleep: list[dict[str, str]] = await eventually(armed, "the sleep and the tick")
            await host.cancel(rid, "enough")
            return asleep, await host.result(rid)

    asleep, result = asyncio.run(main())
    run = asleep[0]["key"].split("/")[0]
    assert asleep == [
        {"key": f"{run}/nightly[1]/tick", "kind": "tick"},
        {"key": f"{run}/wait#1", "kind": "sleep"},
    ]
    assert result["status"] == "cancelled"
