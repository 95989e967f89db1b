"""The local host's own ids come from its ``ids`` argument (the simulation draws them
from its seed): the worker id's suffix, a run id not given, an update id not given."""

from __future__ import annotations

import asyncio
from pathlib import Path

from flowcore_handlers import Registry
from flowcore_local import LocalHost

FLOW = """
flow: ids
updates:
  quick: {reply: "${update.input}"}
steps:
  - {id: go, await_signal: {signal: go}}
"""


def test_the_host_makes_its_ids_with_the_ids_it_is_given(tmp_path: Path) -> None:
    asked: list[int] = []

    def ids(size: int) -> str:
        asked.append(size)
        return "ab" * size

    async def main() -> None:
        host = LocalHost(tmp_path / "i.db", registry=Registry(), ids=ids)
        assert host.worker_id.endswith(":abababab")
        async with host:
            run_id = await host.start(FLOW, {})
            assert run_id == "ids-abababab"
            outcome = await host.update(run_id, "quick", 1, wait=False)
            assert outcome.update_id == "ab" * 16

    asyncio.run(main())
    assert asked == [4, 4, 16]
