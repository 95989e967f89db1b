"""A local-host worker that is about to die: ``python doomed_worker.py DB AT NAMES``.

It works on the database ``DB`` with its clock stopped at ``AT`` (ms), fires
what is due, claims ready work and starts every handler it gets (tools,
agents and teams named in the JSON object ``NAMES``), which prints its
idempotency key and never returns. The conformance player SIGKILLs it once
the key is printed, so that the call is left dispatched to a dead worker:
the next worker reports ``effect-outcome-unknown`` for an uncertain one.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from flowcore_handlers import Registry
from flowcore_local import LocalHost


async def main(db: str, at: int, names: dict[str, list[str]]) -> None:
    async def running(effect: Any) -> None:
        print(effect.idempotency_key, flush=True)
        await asyncio.Event().wait()  # until SIGKILL

    registry = Registry(
        tools={n: running for n in names["tools"]},
        agents={n: running for n in names["agents"]},
        teams={n: running for n in names["teams"]},
    )
    host = LocalHost(db, registry=registry, poll_ms=5)
    host.now = lambda: at
    async with host:
        await host.work()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])))
