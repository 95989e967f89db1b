"""Run ids on the Temporal host: the child namespace is reserved, and a run id
taken by another start is refused or used as asked (``on_conflict``)."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("temporalio", reason="the Temporal host tests need temporalio (.[dev])")

import flowcore
import flowcore_temporal as ft

from .support import running_host, unique

WAITS = """
flow: waits
steps:
  - {id: go, await_signal: {signal: go}}
output: "${input}"
"""


def test_child_ids_are_reserved_and_a_conflicting_start_is_refused_or_used(
    temporal_address: str,
) -> None:
    async def main() -> None:
        async with running_host(temporal_address) as host:
            taken = unique("X2") + "/child#1"
            with pytest.raises(flowcore.RunIdError, match="reserved"):
                await host.start(WAITS, 1, taken)
            with pytest.raises(flowcore.RunIdError):
                await host.start(WAITS, 1, dedup_key="a#1")
            rid = unique("conflict")
            assert await host.start(WAITS, 1, rid) == rid
            assert await host.start(WAITS, 1, rid) == rid  # the same options: that run
            with pytest.raises(ft.TemporalHostError, match="different input"):
                await host.start(WAITS, 2, rid)
            assert await host.start(WAITS, 2, rid, on_conflict="use-existing") == rid
            await host.signal(rid, "go")
            result = await host.result(rid)
            assert result["status"] == "completed" and result["output"] == 1

    asyncio.run(main())
