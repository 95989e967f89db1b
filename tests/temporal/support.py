"""What the Temporal host tests share: a worker plus a host in one process."""

from __future__ import annotations

import asyncio
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import flowcore_temporal as ft
from flowcore_handlers import Registry

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
TOOLS = HERE / "tools.py"
EXAMPLES = ROOT / "specs" / "examples"
INCIDENT = EXAMPLES / "incident.yaml"
DEMO_TOOLS = EXAMPLES / "demo_tools.py"
DEMO_INPUT = {"incident_id": "INC-7"}


def die_with_parent() -> None:
    """In the child before exec: on Linux, get SIGTERM when the test process ends.

    pytest may end without tearing fixtures down (``os._exit`` after temporalio
    was used, a killed run); servers and workers must not outlive it.
    """
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@asynccontextmanager
async def running_host(
    address: str,
    tools: str | Path | None = TOOLS,
    *,
    registry: Registry | None = None,
    sandbox: str = "off",
    authorize: Any = None,
) -> AsyncIterator[ft.TemporalHost]:
    """A worker on a fresh task queue, and a host that starts runs there.

    ``sandbox``: ``off`` (the workers' default), ``passthrough`` (Temporal's
    sandbox, flowcore passed through) or ``reimport`` (flowcore imported
    again in the sandbox, under its eyes). ``authorize``: the worker's hook."""
    client = await ft.connect(address)
    queue = unique("q")
    options: dict[str, Any] = {}
    if sandbox != "off":
        options["workflow_runner"] = ft.workflow_runner(flowcore=sandbox == "passthrough")
    worker = ft.new_worker(
        client,
        task_queue=queue,
        tools=str(tools) if tools is not None else None,
        registry=registry,
        authorize=authorize,
        **options,
    )
    async with worker:
        yield ft.TemporalHost(client, queue)


async def eventually(
    check: Callable[[], Any], what: str, timeout: float = 20.0, every: float = 0.05
) -> Any:
    """Poll the async ``check`` until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(every)


async def question(host: ft.TemporalHost, run_id: str) -> dict[str, Any]:
    async def check() -> Any:
        questions = await host.questions(run_id)
        return questions[0] if questions else None

    found: dict[str, Any] = await eventually(check, f"a question in {run_id}")
    return found


async def waiting_for(host: ft.TemporalHost, run_id: str, signal: str) -> None:
    async def check() -> bool:
        return signal in (await host.status(run_id)).get("waitingFor", [])

    await eventually(check, f"{run_id} to wait for signal {signal}")


def normalise_keys(value: Any, run_id: str) -> Any:
    """``value`` with the run id in idempotency keys replaced by ``RUN``."""
    if isinstance(value, dict):
        return {k: normalise_keys(v, run_id) for k, v in value.items()}
    if isinstance(value, list):
        return [normalise_keys(v, run_id) for v in value]
    if isinstance(value, str) and value.startswith(run_id + "/"):
        return "RUN" + value[len(run_id) :]
    return value
