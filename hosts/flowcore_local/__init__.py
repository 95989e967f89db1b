"""flowcore's local host: asyncio + SQLite, crash-safe, the embedded default
(or PostgreSQL: ``LocalHost("postgresql://...")``, the postgres extra).

async with LocalHost("flowcore.db", tools="myapp.tools") as host:
    run_id = await host.start(Path("flow.yaml"), {"x": 1})
    await host.work(until_settled=run_id)
    print((await host.run(run_id)).output)
"""

from flowcore_handlers import ToolLimit

from ._authorize import Authorize, Unauthorized
from ._db import (
    DB_ENV,
    DURABILITY,
    Durability,
    NotAFlowcoreDatabase,
    db_label,
    db_location,
    default_db_path,
    is_pg_url,
    schema_version,
)
from ._host import LocalHost
from ._prune import Deleted
from ._scheduled import ScheduledRetention, ScheduledRow
from ._store import (
    HostError,
    LocalRunSettled,
    LocalUnknownRun,
    LocalUnknownSchedule,
    NoSignalWait,
    NothingToCancel,
    RunRow,
)
from ._store_progress import MAX_PROGRESS_BYTES, MAX_PROGRESS_ITEMS, ProgressCap
from ._updates import LocalUnknownUpdate

__all__ = [
    "Authorize",
    "DB_ENV",
    "DURABILITY",
    "Durability",
    "Deleted",
    "HostError",
    "LocalHost",
    "LocalRunSettled",
    "LocalUnknownRun",
    "LocalUnknownSchedule",
    "LocalUnknownUpdate",
    "MAX_PROGRESS_BYTES",
    "MAX_PROGRESS_ITEMS",
    "NoSignalWait",
    "NothingToCancel",
    "NotAFlowcoreDatabase",
    "ProgressCap",
    "RunRow",
    "ScheduledRetention",
    "ScheduledRow",
    "ToolLimit",
    "Unauthorized",
    "db_label",
    "db_location",
    "default_db_path",
    "is_pg_url",
    "schema_version",
]
