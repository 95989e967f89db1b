"""Keyed signals and ``signal_run`` on a real ``temporal server start-dev``.

Runs waiting on one signal name with different keys are found by the
``FlowcoreSignalKeys`` search attribute (registered by the dev server the
tests start); a run signals another run from its workflow, once; a run that
is gone or has settled fails the step with ``unknown-run`` / ``run-settled``.
The CLI routes a keyed signal without a run id."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from typing import Any

import pytest

pytest.importorskip("temporalio", reason="the Temporal host tests need temporalio (.[dev])")

import flowcore_temporal as ft

from .support import eventually, running_host, unique

ORDER = """
flow: order
steps:
  - id: paid
    await_signal: {signal: payment, key: "order-${input.order}"}
output: "${steps.paid.output}"
"""

SENDER = """
flow: sender
steps:
  - id: tell
    signal_run:
      run: "${input.to}"
      signal: payment
      payload: {amount: "${input.amount}"}
      key: "order-${input.order}"
output: "${steps.tell.output}"
"""


async def waiting_with_key(host: ft.TemporalHost, run_id: str) -> bool:
    info: dict[str, Any] = await host.status(run_id)
    return "payment" in info.get("waitingFor", [])


def received(records: list[Any]) -> list[dict[str, Any]]:
    return [
        r.data
        for r in records
        if r.type == "event.reported" and r.data["kind"] == "signal-received"
    ]


def test_keyed_signals_are_routed_by_the_search_attribute(temporal_address: str) -> None:
    async def main() -> None:
        async with running_host(temporal_address) as host:
            order = unique("o")
            a, b = f"{order}-a", f"{order}-b"
            await host.start(ORDER, {"order": f"{order}-A"}, a)
            await host.start(ORDER, {"order": f"{order}-B"}, b)
            await eventually(lambda: waiting_with_key(host, a), "a waits")
            await eventually(lambda: waiting_with_key(host, b), "b waits")
            # Visibility may lag: signal_key polls (up to wait_s) until it lists the run.
            assert await host.signal_key("payment", f"order-{order}-B", {"n": 2}) == [b]
            assert (await host.result(b))["output"] == {"n": 2}
            assert (await host.status(a))["status"] == "running"  # not its key
            # A keyed signal for a run by id: buffered there until a wait with that key.
            await host.signal(a, "payment", "other", key="order-elsewhere")
            assert await host.signal_key("payment", f"order-{order}-A", {"n": 1}) == [a]
            assert (await host.result(a))["output"] == {"n": 1}
            keys = [e.get("key") for e in received(await host.records(a))]
            assert keys == ["order-elsewhere", f"order-{order}-A"]
            with pytest.raises(ft.NoSignalWait, match="no running run waits"):
                await host.signal_key("payment", f"order-{order}-none", 0, wait_s=1.0)

    asyncio.run(main())


def test_a_run_signals_another_run_once(temporal_address: str) -> None:
    async def main() -> None:
        async with running_host(temporal_address) as host:
            receiver, sender = unique("recv"), unique("send")
            await host.start(ORDER, {"order": 7}, receiver)
            await host.start(SENDER, {"to": receiver, "amount": 30, "order": 7}, sender)
            result = await host.result(sender)
            assert (result["status"], result["output"]) == ("completed", {"run_id": receiver})
            settled = await host.result(receiver)
            assert (settled["status"], settled["output"]) == ("completed", {"amount": 30})
            got = received(await host.records(receiver))
            assert [(e["signal"], e["key"]) for e in got] == [("payment", "order-7")]
            late = await host.start(SENDER, {"to": receiver, "amount": 1, "order": 7}, unique("l"))
            failed = await host.result(late)
            assert failed["status"] == "failed" and failed["error"]["type"] == "run-settled"
            lost = await host.start(SENDER, {"to": unique("nobody"), "amount": 1, "order": 7})
            failed = await host.result(lost)
            assert failed["status"] == "failed" and failed["error"]["type"] == "unknown-run"

    asyncio.run(main())


def test_cli_routes_a_keyed_signal_without_a_run_id(temporal_address: str) -> None:
    def fc(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "flowcore_cli", "temporal", *args],
            capture_output=True,
            text=True,
            timeout=120,
            env=dict(os.environ),
            check=False,
        )

    async def main() -> None:
        async with running_host(temporal_address) as host:
            run = unique("cli")
            await host.start(ORDER, {"order": run}, run)
            await eventually(lambda: waiting_with_key(host, run), "the run waits")
            common = ["--address", temporal_address, "--task-queue", host.task_queue]
            args = ("signal", "payment", "--key", f"order-{run}", "--data", '{"ok": 1}')
            proc = await asyncio.to_thread(fc, *args, *common)
            assert proc.returncode == 0, proc.stderr
            assert proc.stdout.split() == [run]
            assert (await host.result(run))["output"] == {"ok": 1}
            none = ("signal", "payment", "--key", "order-nobody-waits")
            proc = await asyncio.to_thread(fc, *none, *common)
            assert proc.returncode == 2 and "Traceback" not in proc.stderr
            assert proc.stderr.strip().splitlines() == [
                "flowcore: no running run waits for signal 'payment' with key 'order-nobody-waits'"
            ]

    asyncio.run(main())
