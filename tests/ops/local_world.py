"""The parity scenarios' world on the local host: a real SQLite file, its runs
worked until each asks its question (and ``p-fail`` has failed), two scheduled
calls pending on ``p-main`` and one it ran to its end."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from flowcore_local import LocalHost

from ..local.local_helpers import work_until
from .parity import FAILING, FLOW, FLOW_V2, NEW_RUNS, TOOLS, runs


def write_files(folder: Path) -> dict[str, Path]:
    files = {
        "parity.yaml": FLOW,
        "parity-v2.yaml": FLOW_V2,
        "failing.yaml": FAILING,
        "parity_tools.py": TOOLS,
    }
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    return {name: folder / name for name in files}


def past_window() -> tuple[str, str]:
    """Two hours ago to one hour ago, as RFC 3339 instants (one or two hourly slots)."""
    now = datetime.now(UTC).replace(microsecond=0)
    return (
        (now - timedelta(hours=2)).isoformat().replace("+00:00", "Z"),
        (now - timedelta(hours=1)).isoformat().replace("+00:00", "Z"),
    )


@asynccontextmanager
async def local_world(folder: Path) -> AsyncIterator[tuple[LocalHost, dict[str, Any]]]:
    """The open host and the facts the scenarios' inputs read."""
    files = write_files(folder)
    async with LocalHost(folder / "parity.db", str(files["parity_tools.py"])) as host:
        started = runs()
        for run_id, (flow, given) in started.items():
            await host.start(files[flow], given, run_id, flows=[folder])

        async def ready() -> bool:
            asking = all([await host.open_questions(r) for r in started if r != "p-fail"])
            return asking and (await host.run("p-fail")).status == "failed"

        await work_until(host, ready)
        first = await host.add_scheduled("p-main", "remind", {"to": "bob"}, 3_600_000)
        second = await host.add_scheduled("p-main", "remind", {"to": "cy"}, 3_600_000)
        done = await host.add_scheduled("p-main", "remind", {"to": "di"})

        async def ran() -> bool:
            return any(
                c.id == done and c.status == "completed" for c in await host.scheduled("p-main")
            )

        await work_until(host, ran)
        start, end = past_window()
        yield (
            host,
            {
                "flow": str(files["parity.yaml"]),
                "flow_v2": str(files["parity-v2.yaml"]),
                "call_id": first,
                "call_id_2": second,
                "call_id_done": done,
                "past_start": start,
                "past_end": end,
                "folder": folder,
                "runs": {name: name for name in [*started, *NEW_RUNS]},
                "prefix": "",
                "schedule": "nightly",
            },
        )
