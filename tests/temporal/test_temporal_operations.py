"""Every catalogue operation on the Temporal host (the real dev server), called
directly and over HTTP: each gives its declared output, or the typed refusal
specs/hosts.md lists for Temporal."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import msgspec
import pytest

import flowcore
import flowcore_temporal as ft
from flowcore_ops import ACCESS, BY_NAME, Context, OperationError, Principal, allows

from ..ops.local_world import past_window, write_files
from ..ops.parity import NEW_RUNS, ORDER, REFUSED, SCENARIOS, runs
from ..ops.surfaces import Refused, command_line, http_client, over_http
from .support import eventually, running_host, unique


@asynccontextmanager
async def temporal_world(
    address: str, folder: Path
) -> AsyncIterator[tuple[ft.TemporalHost, dict[str, Any]]]:
    """A worker on a fresh queue, the world's runs started there and asking (p-fail
    failed), two scheduled calls pending on p-main and one done; the facts the
    scenarios read."""
    files = write_files(folder)
    prefix = unique("par") + "-"
    flow_id = prefix.rstrip("-").replace("-", "_")
    for name in ("parity.yaml", "parity-v2.yaml"):
        text = files[name].read_text().replace("flow: parity\n", f"flow: {flow_id}\n")
        files[name].write_text(text)
    async with running_host(address, files["parity_tools.py"]) as host:
        started = {prefix + name: made for name, made in runs(prefix).items()}
        for run_id, (flow, given) in started.items():
            await host.start(files[flow], given, run_id)

        async def ready() -> bool:
            for run_id in started:
                if run_id.endswith("p-fail"):
                    if (await host.show(run_id)).get("status") != "failed":
                        return False
                elif not await host.open_questions(run_id):
                    return False
            return True

        await eventually(ready, "the world's runs asking", timeout=60)
        main = prefix + "p-main"
        first = await host.add_scheduled(main, "remind", {"to": "bob"}, 3_600_000)
        second = await host.add_scheduled(main, "remind", {"to": "cy"}, 3_600_000)
        done = await host.add_scheduled(main, "remind", {"to": "di"})

        async def ran() -> bool:
            return any(c.id == done and c.status == "completed" for c in await host.scheduled(main))

        await eventually(ran, "the world's scheduled call done", timeout=60)
        start, end = past_window()
        names = [*runs(), *NEW_RUNS]
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
                "runs": {name: prefix + name for name in names},
                "prefix": prefix,
                "schedule": "nightly",
            },
        )


async def call(ctx: Context, name: str, given: dict[str, Any]) -> Any:
    op = BY_NAME[name]
    out = await op.call(ctx, msgspec.convert(given, op.input))
    if name in ("follow", "progress-follow"):  # (a settled run's: it ends)
        return [record async for record in out]
    return out


def test_every_operation_on_the_temporal_host(temporal_address: str, tmp_path: Path) -> None:
    async def main() -> tuple[dict[str, Any], dict[str, str]]:
        async with temporal_world(temporal_address, tmp_path) as (host, facts):
            ctx = Context(host, Principal.operator(), flows=Path, flow_folders=(tmp_path,))
            got: dict[str, Any] = {}
            refused: dict[str, str] = {}
            for name in ORDER:
                scenario = SCENARIOS[name]
                try:
                    out = await call(ctx, name, scenario.input(facts))
                except OperationError as exc:
                    if exc.code != "host-refuses":
                        raise
                    refused[name] = exc.detail
                    continue
                assert scenario.expect(out), (name, out)
                facts.update(scenario.remember(out))
                output = BY_NAME[name].output
                if output is not None and name not in (
                    "events",
                    "follow",
                    "export",
                    "progress",
                    "progress-follow",
                ):
                    msgspec.convert(msgspec.to_builtins(out), output)
                got[name] = out
            return got, refused

    got, refused = asyncio.run(main())
    assert set(refused) == REFUSED["temporal"], refused
    for name, detail in refused.items():
        assert detail.startswith("Temporal host cannot "), (name, detail)
    assert "show" in got and "schedule.delete" in got


@pytest.mark.parametrize("principal", ["alice"])
def test_another_principals_run_is_unknown_on_temporal(
    temporal_address: str, tmp_path: Path, principal: str
) -> None:
    async def main() -> None:
        async with running_host(temporal_address) as host:
            files = write_files(tmp_path)
            ctx = Context(host, Principal(principal, "write"), flows=Path)
            mine = await BY_NAME["start"].call(
                ctx, BY_NAME["start"].input(flow=str(files["parity.yaml"]), run_id=unique("a"))
            )
            assert mine.principal == principal
            theirs = await host.start(files["parity.yaml"], None, unique("b"), principal="bob")
            with pytest.raises(OperationError) as refused:
                await call(ctx, "show", {"runId": theirs})
            assert (refused.value.code, refused.value.detail) == (
                "unknown-run",
                f"no run {theirs!r}",
            )

    asyncio.run(main())


def test_every_operation_over_http_on_the_temporal_host(
    temporal_address: str, tmp_path: Path
) -> None:
    """The same scenarios through the HTTP API served on the Temporal host: each
    output, or the refusal (501 ``host-refuses``); too little access is 403 first."""

    async def main() -> dict[str, str]:
        async with temporal_world(temporal_address, tmp_path) as (host, facts):
            flow_id = flowcore.parse_flow(Path(facts["flow"]).read_text()).id
            facts["flow"] = facts["flow_v2"] = flow_id  # a flow id of the registry folder
            refused: dict[str, str] = {}
            async with http_client(host, tmp_path) as client:
                for name in ORDER:
                    op = BY_NAME[name]
                    scenario = SCENARIOS[name]
                    given = scenario.input(facts)
                    for held in ACCESS:
                        if not allows(held, op.access):
                            with pytest.raises(Refused) as too_little:
                                await over_http(client, name, given, held)
                            assert too_little.value.status == 403, (name, held)
                    try:
                        out = await over_http(client, name, given)
                    except Refused as exc:
                        assert (exc.status, exc.type) == (501, "host-refuses"), (name, exc)
                        refused[name] = exc.detail
                        continue
                    assert scenario.expect(out), (name, out)
                    facts.update(scenario.remember(out))
            return refused

    refused = asyncio.run(main())
    assert set(refused) == REFUSED["temporal"], refused


def test_every_operation_on_the_command_line_on_the_temporal_host(
    temporal_address: str, tmp_path: Path
) -> None:
    """The same scenarios through the command, Temporal chosen by the environment
    (each command a process of its own; the worker runs in this one): each exits
    0 with its JSON, or 2 with the host's refusal in one line."""
    env = {
        **os.environ,
        "FLOWCORE_TEMPORAL_ADDRESS": temporal_address,
        "PYTHONPATH": os.pathsep.join(sys.path),
    }
    env.pop("FLOWCORE_DB", None)

    async def main() -> dict[str, str]:
        async with temporal_world(temporal_address, tmp_path) as (host, facts):
            env["FLOWCORE_TEMPORAL_TASK_QUEUE"] = host.task_queue
            refused: dict[str, str] = {}
            for name in ORDER:
                if BY_NAME[name].command is None and name not in (
                    "follow",
                    "progress-follow",
                    "run-counts",  # runs --counts
                ):
                    continue  # whoami, graph: HTTP and the console only
                argv = command_line(name, SCENARIOS[name].input(facts))
                proc = await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "flowcore_cli",
                    *argv,
                    env=env,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE,
                )
                out, err = await asyncio.wait_for(proc.communicate(), 120)
                if proc.returncode == 2 and b"Temporal host cannot" in err:
                    assert len(err.decode().strip().splitlines()) == 1, err
                    refused[name] = err.decode().strip()
                    continue
                assert proc.returncode == 0, (name, argv, err.decode())
                assert out.strip(), (name, argv)
                if name == "schedule.add":  # (its document: the schedules added, as shown)
                    added = json.loads(out)
                    facts["schedule"] = added[0]["name"] if isinstance(added, list) else added

            return refused

    refused = asyncio.run(main())
    assert set(refused) == REFUSED["temporal"], refused
