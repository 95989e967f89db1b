"""flowcore's local host: asyncio + SQLite, crash-safe, the embedded default.

async with LocalHost("flowcore.db", tools="myapp.tools") as host:
    run_id = await host.start(Path("flow.yaml"), {"x": 1})
    await host.work(until_settled=run_id)
    print((await host.run(run_id)).output)
"""

from ._db import DB_ENV, NotAFlowcoreDatabase, default_db_path
from ._host import LocalHost
from ._scheduled import Retention, ScheduledRow
from ._store import HostError, RunRow

__all__ = [
    "DB_ENV",
    "HostError",
    "LocalHost",
    "NotAFlowcoreDatabase",
    "Retention",
    "RunRow",
    "ScheduledRow",
    "default_db_path",
]
