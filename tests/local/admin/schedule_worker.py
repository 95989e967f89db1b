"""A worker whose clock is a file: ``schedule_worker.py DB CLOCK_FILE``.

The schedule crash test moves time by rewriting the file (atomically, with a
rename) and kills this process with SIGKILL at random moments. It reads the
clock through ``LocalHost(clock=...)``, the host's only clock.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from flowcore_local import LocalHost


def main() -> None:
    db, clock_file = sys.argv[1], Path(sys.argv[2])

    def clock() -> int:
        return int(clock_file.read_text())

    async def work() -> None:
        async with LocalHost(db, clock=clock, poll_ms=5) as host:
            await host.work()

    asyncio.run(work())


if __name__ == "__main__":
    main()
