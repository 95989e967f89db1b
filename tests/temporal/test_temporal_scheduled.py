"""The scheduled-call events from outside on Temporal: the ``scheduled`` update."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping

import pytest
from temporalio.client import WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

import flowcore
import flowcore_temporal as ft

from .support import eventually, running_host, unique

SPEC = """
flow: managed
tools:
  send_reminder: {class: idempotent, schedulable: true}
  cleanup: {class: readonly}
steps:
  - id: nudge
    schedule: {tool: send_reminder, input: {to: ana}, delay_ms: 3600000}
  - id: wait
    await_signal: {signal: done}
"""


def test_the_scheduled_update_answers_and_refuses(temporal_address: str) -> None:
    async def main() -> None:
        async with running_host(temporal_address) as host:
            rid = await host.start(SPEC, None, unique("sched"))
            handle = host.handle(rid)

            async def send(event: Mapping[str, object]) -> object:
                return await asyncio.wait_for(
                    handle.execute_update(ft.SCHEDULED_UPDATE, args=[event]), 20
                )

            cancel = {"kind": "scheduled-cancel-requested", "scheduleId": f"{rid}/nudge#1"}
            assert await send(cancel) == {"id": f"{rid}/nudge#1", "done": True}
            before = len(await handle.query(ft.LOG_QUERY))
            # A cancel that changes nothing is refused before it is accepted:
            # nothing is written, and the host answers False.
            with pytest.raises(WorkflowUpdateFailedError) as refused:
                await send(cancel)
            assert isinstance(refused.value.cause, ApplicationError)
            assert refused.value.cause.type == ft.NOT_PENDING_ERROR
            assert await host.cancel_scheduled(rid, "nudge#1") is False
            assert len(await handle.query(ft.LOG_QUERY)) == before
            add = {"kind": "scheduled-add-requested", "tool": "send_reminder", "delayMs": 3600000}
            assert await send(add) == {"id": f"{rid}/~scheduled-1", "done": True}
            for bad, why in (
                (
                    {"kind": "scheduled-add-requested", "tool": "cleanup"},
                    "not declared schedulable",
                ),
                ({"kind": "signal-received", "signal": "done"}, "refused: expected an object"),
            ):
                with pytest.raises(WorkflowUpdateFailedError) as info:
                    await send(bad)
                assert why in str(info.value.cause)
            await host.signal(rid, "done")
            result = await asyncio.wait_for(host.result(rid), 20)
            assert result["status"] == "completed"
            types = [r["type"] for r in await handle.query(ft.LOG_QUERY)]
            assert types.count("scheduled.changed") == 4  # pending, cancelled, pending, cancelled

    asyncio.run(main())


MANAGED = """
flow: managed-cli
tools:
  echo: {class: idempotent, schedulable: true}
  book: {class: idempotent}
steps:
  - id: nudge
    schedule: {tool: echo, input: {to: ana}, delay_ms: 3600000}
  - id: wait
    await_signal: {signal: done}
"""


def test_scheduled_calls_are_listed_and_managed_from_the_command_and_the_api(
    temporal_address: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`flowcore temporal scheduled list|cancel|run-now|add` (each in a process) and
    the TemporalHost methods behind them, on a run a worker is running."""
    from .test_temporal_cli import Cli

    monkeypatch.setenv("COLUMNS", "200")  # the commands' tables, unsqueezed

    async def main() -> None:
        async with running_host(temporal_address) as host:
            rid = await host.start(MANAGED, None, unique("schedcli"))
            cli = Cli(temporal_address, host.task_queue)

            async def run(*args: str) -> str:
                return await asyncio.to_thread(cli.ok, "scheduled", *args)

            async def bad(*args: str) -> str:
                return await asyncio.to_thread(cli.bad, "scheduled", *args)

            listed = await run("list", rid)
            assert "nudge#1" in listed and "pending" in listed and '{"to":"ana"}' in listed
            sid = (await run("add", rid, "echo", "--input", '{"n": 1}', "--delay", "2h")).strip()
            assert sid == f"{rid}/~scheduled-1"
            refused = await bad("add", rid, "book")
            assert "not declared schedulable" in refused and "'echo'" in refused
            assert "90 minutes" in await bad("add", rid, "echo", "--delay", "90 minutes")
            assert (await run("cancel", rid, "nudge#1")).strip() == "true"
            # Nothing to cancel: false, and exit 1 (the HTTP API's 409).
            nothing = await asyncio.to_thread(cli, "scheduled", "cancel", rid, "nudge#1")
            assert (nothing.returncode, nothing.stdout.strip()) == (1, "false"), nothing.stderr
            assert "nothing to cancel" in nothing.stderr
            answer = json.loads(await run("run-now", rid, "~scheduled-1", "--json"))
            assert answer == {"runId": rid, "id": sid, "done": True}

            async def ran() -> bool:
                calls = {c.id: c for c in await host.scheduled(rid)}
                return calls[sid].status == "completed"

            await eventually(ran, "the call run now to complete", timeout=30)
            rows = json.loads(await run("list", rid, "--json"))
            assert {r["id"]: r["status"] for r in rows} == {
                f"{rid}/nudge#1": "cancelled",
                sid: "completed",
            }
            assert [
                r["id"] for r in json.loads(await run("list", rid, "--json", "--tool", "x"))
            ] == []
            pending = json.loads(await run("list", rid, "--status", "pending", "--json"))
            assert pending == []

            # The API: the same answers.
            again = await host.add_scheduled(rid, "echo", None, 60_000)
            assert again == f"{rid}/~scheduled-2"
            assert await host.cancel_scheduled(rid, "~scheduled-2") is True
            assert await host.run_scheduled_now(rid, again) is False
            with pytest.raises(ft.TemporalHostError, match="schedulable"):
                await host.add_scheduled(rid, "book")
            await host.signal(rid, "done")
            result = await asyncio.wait_for(host.result(rid), 20)
            assert result["status"] == "completed"

    asyncio.run(main())


RECURRING = """
flow: recurring
tools:
  echo: {class: idempotent, schedulable: true}
steps:
  - id: wait
    await_signal: {signal: done}
"""


def test_a_recurring_call_fires_its_count_and_a_finished_one_is_replayed(
    temporal_address: str,
) -> None:
    """TemporalHost.add_scheduled with every_ms and count, then replay_scheduled:
    each firing and the replay under its own key, the same request replaying once."""

    async def main() -> None:
        async with running_host(temporal_address) as host:
            rid = await host.start(RECURRING, None, unique("recur"))
            sid = await host.add_scheduled(rid, "echo", {"n": 1}, every_ms=200, count=2)
            with pytest.raises(ft.TemporalHostError, match="is still pending"):
                await host.replay_scheduled(rid, sid, request="again")
            with pytest.raises(ft.TemporalHostError, match="count: must be at least 1"):
                await host.add_scheduled(rid, "echo", every_ms=200, count=0)

            async def listed() -> flowcore.ScheduledCall | None:
                return next((c for c in await host.scheduled(rid) if c.id == sid), None)

            async def fired_twice() -> bool:
                call = await listed()
                return call is not None and call.status == "completed" and call.fires == 2

            await eventually(fired_twice, "two firings", timeout=30)
            await host.replay_scheduled(rid, sid, request="again")
            await host.replay_scheduled(rid, sid, request="again")  # a retry: nothing more

            async def replayed() -> bool:
                call = await listed()
                return call is not None and call.status == "completed" and call.replays == 1

            await eventually(replayed, "the replay", timeout=30)
            await host.signal(rid, "done")
            result = await asyncio.wait_for(host.result(rid), 20)
            assert result["status"] == "completed"
            log = await host.handle(rid).query(ft.LOG_QUERY)
            calls = [
                r["data"]["idempotencyKey"]
                for r in log
                if r["type"] == "effect.emitted" and r["data"]["kind"] == "call-tool"
            ]
            assert calls == [f"{sid}/call", f"{sid}/call-2", f"{sid}/replay-1"]

    asyncio.run(main())
