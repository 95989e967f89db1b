"""Run metadata on Temporal: typed search attributes, against a real dev server.

The dev server registers ``flowcore_customer`` (Keyword), ``flowcore_amount``
(Double), ``flowcore_urgent`` (Bool), ``flowcore_tier`` (Int) and
``flowcore_stage`` (Keyword) when it starts (``conftest.search_attributes``).
Listing runs goes through Temporal's visibility store, which is eventually
consistent: those checks poll, with a generous bound, until the list is the
expected one. Each test tags its runs with customers of its own, since the
server is shared by the whole session.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("temporalio", reason="the Temporal host tests need temporalio (.[dev])")

import flowcore
import flowcore_temporal as ft
from flowcore_handlers import Registry

from .support import eventually, running_host, unique, waiting_for
from .test_temporal_cli import Cli, worker_process

ORDERS = """
flow: orders
metadata: {customer: string, amount: number, urgent: boolean, tier: integer, stage: string}
tools: {quote: {class: readonly}}
steps:
  - id: quote
    call_tool: {tool: quote, input: {amount: "${input.amount}"}}
  - id: mark
    set_metadata:
      amount: "${steps.quote.output.total}"
      urgent: "${steps.quote.output.total > `100`}"
      tier: null
  - id: wait
    await_signal: {signal: go}
  - id: done
    set_metadata: {stage: done}
"""

VISIBLE_S = 60.0  # how long a visibility query may lag behind (generous: a busy CI machine)


def registry() -> Registry:
    return Registry(tools={"quote": lambda call: {"total": call.input["amount"]}})


async def listed(host: ft.TemporalHost, where: list[str], want: set[str]) -> set[str]:
    """The run ids the visibility query lists, once it lists ``want`` (eventually consistent)."""
    seen: set[str] = set()

    async def check() -> bool:
        nonlocal seen
        seen = {r["runId"] for r in await host.runs(where)}
        return seen == want

    try:
        await eventually(check, f"runs where {where}", timeout=VISIBLE_S, every=0.2)
    except AssertionError:
        raise AssertionError(f"runs where {where}: listed {seen}, expected {want}") from None
    return seen


def test_runs_are_indexed_and_listed_by_their_metadata(temporal_address: str) -> None:
    acme, zeta = unique("acme"), unique("zeta")
    starts = {"a": (acme, 50, 1), "b": (acme, 150, 2), "c": (zeta, 300.5, 3)}

    async def main() -> None:
        async with running_host(temporal_address, registry=registry()) as host:
            ids = {}
            for name, (customer, amount, tier) in starts.items():
                ids[name] = await host.start(
                    ORDERS,
                    {"amount": amount},
                    unique(f"meta-{name}"),
                    metadata={"customer": customer, "tier": tier},
                )
            for rid in ids.values():
                await waiting_for(host, rid, "go")
            # The query of a running run holds its metadata now (set_metadata applied).
            status = await host.status(ids["b"])
            assert status["metadata"] == {"customer": acme, "amount": 150, "urgent": True}
            # Describe reads the search attributes the workflow upserted: tier cleared.
            assert await host.metadata(ids["c"]) == {
                "amount": 300.5,
                "customer": zeta,
                "urgent": True,
            }
            a, b, c = ids["a"], ids["b"], ids["c"]
            await listed(host, [f"customer={acme}"], {a, b})
            await listed(host, [f"customer={acme}", "amount>100"], {b})
            await listed(host, [f"customer={acme}", "urgent=false"], {a})
            await listed(host, [f"customer={zeta}", "amount>=300.5"], {c})
            await listed(host, [f"customer={acme}", "amount<=50"], {a})
            await listed(host, [f"customer={zeta}", "urgent=false"], set())
            await host.signal(b, "go")
            assert (await host.result(b))["status"] == "completed"
            await listed(host, [f"customer={acme}", "stage=done"], {b})
            assert (await host.status(b))["metadata"]["stage"] == "done"
            # tier was cleared by set_metadata: no run of acme holds it any more.
            await listed(host, [f"customer={acme}", "tier>=1"], set())
            for rid in (a, c):
                await host.cancel(rid)
            # The history replays with its upserts (the same decisions, the same commands).
            records = await ft.history_to_log(await host.history(b))
            assert records[0].data["metadata"] == {"customer": acme, "tier": 2}
            report = flowcore.replay(records, flowcore.parse_flow(ORDERS))
            assert report.ok and report.state is not None
            assert report.state.metadata == {
                "customer": acme,
                "amount": 150,
                "urgent": True,
                "stage": "done",
            }

    asyncio.run(main())


def test_bad_metadata_filters_and_unregistered_fields_are_typed_errors(
    temporal_address: str,
) -> None:
    unregistered = ORDERS.replace("stage: string}", "stage: string, colour_xyz: string}")

    async def main() -> None:
        async with running_host(temporal_address, registry=registry()) as host:
            with pytest.raises(ft.TemporalHostError) as info:
                await host.start(unregistered, {"amount": 1}, unique("unreg"))
            assert str(info.value) == (
                "the flow's metadata needs search attributes this namespace lacks:"
                " flowcore_colour_xyz (Keyword) is not registered: temporal operator"
                " search-attribute create --name flowcore_colour_xyz --type Keyword"
            )
            with pytest.raises(flowcore.MetadataError, match="'tier' \\(integer\\) must be"):
                await host.start(ORDERS, {"amount": 1}, unique("bad"), metadata={"tier": "x"})
            for where, message in (
                (["colour_xyz=red"], "no search attribute flowcore_colour_xyz is registered"),
                (["customer>3"], "customer is a string field; > compares numbers"),
                (["tier=2.5"], "tier holds an integer; '2.5' is not one"),
                (["urgent=yes"], "urgent is a boolean field"),
                (["amount>lots"], "> compares numbers, and 'lots' is not one"),
            ):
                with pytest.raises(flowcore.MetadataFilterError, match=message):
                    await host.runs(where)

    asyncio.run(main())


def test_the_temporal_cli_starts_with_metadata_and_lists_runs(
    temporal_address: str, tmp_path: Path
) -> None:
    cli = Cli(temporal_address, unique("meta-cli"))
    spec = tmp_path / "orders.yaml"
    spec.write_text(ORDERS)
    tools = tmp_path / "order_tools.py"
    tools.write_text(
        "def quote(call):\n    return {'total': call.input['amount']}\n\n\n"
        "TOOLS = {'quote': quote}\n"
    )
    customer = unique("cli")
    run_id = unique("meta-cli")
    start = ["run", str(spec), "--input", '{"amount": 120}', "--detach"]
    with worker_process(cli.address, cli.queue, tools):
        meta = ["--meta", f"customer={customer}", "--meta", "tier=4"]
        assert cli.ok(*start, "--run-id", run_id, *meta).strip() == run_id
        bad = cli.bad(*start, "--meta", "tier=high")
        assert bad == (
            "flowcore: --meta: metadata field 'tier' (integer) must be an integer,"
            " got the string 'high'"
        )
        assert "> compares numbers" in cli.bad("runs", "--where", "amount>lots")
        deadline = time.monotonic() + VISIBLE_S
        found: list[dict[str, Any]] = []
        while True:  # visibility is eventually consistent
            found = json.loads(
                cli.ok(
                    "runs", "--where", f"customer={customer}", "--where", "urgent=true", "--json"
                )
            )
            if found or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert [r["runId"] for r in found] == [run_id], found
        assert found[0]["metadata"] == {"amount": 120.0, "customer": customer, "urgent": True}
        text = cli.ok("runs", "--where", f"customer={customer}")
        assert run_id in text and f'customer="{customer}"' in text
        shown = cli.ok("show", run_id)
        assert f'metadata: amount=120 customer="{customer}" urgent=true' in shown
        cli.ok("cancel", run_id)
