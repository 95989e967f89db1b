"""Run metadata on the local host: a real SQLite file, runs listed by their metadata,
and the ``flowcore`` command run for real in subprocesses."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

import flowcore
from flowcore_handlers import Registry
from flowcore_local import LocalHost

from ..local_helpers import work_until
from ..test_local_cli import bad, ok

T = TypeVar("T")

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
      stage: quoted
  - id: wait
    await_signal: {signal: go}
  - id: done
    set_metadata: {stage: done}
"""

# customer, amount, tier: what each run is started with and quoted at.
RUNS = [("acme", 50, 1), ("acme", 150, 2), ("zeta", 300.5, 3), ("beta", 100, 1)]


def registry() -> Registry:
    return Registry(tools={"quote": lambda call: {"total": call.input["amount"]}})


def on_host(db: Path | str, body: Callable[[LocalHost], Awaitable[T]]) -> T:
    async def main() -> T:
        async with LocalHost(db, registry=registry()) as host:
            return await body(host)

    return asyncio.run(main())


async def until_waiting(host: LocalHost, run_id: str) -> None:
    """Work until the run waits for a signal (or has settled)."""

    async def waiting() -> bool:
        info = await host.show(run_id)
        return info["status"] != "running" or bool(info["waitingFor"])

    await work_until(host, waiting)


async def start_all(host: LocalHost, settle: bool = True) -> None:
    for i, (customer, amount, tier) in enumerate(RUNS):
        rid = f"r{i}"
        await host.start(
            ORDERS, {"amount": amount}, rid, metadata={"customer": customer, "tier": tier}
        )
        await until_waiting(host, rid)
        if settle:
            await host.signal(rid, "go")
            await host.work(until_settled=rid)


async def ids(host: LocalHost, where: Any, status: str | None = None) -> list[str]:
    return [r.run_id for r in await host.runs(status, where=where)]


def test_runs_are_listed_by_their_metadata(tmp_path: Path, local_db: Path | str) -> None:
    db = local_db

    async def body(host: LocalHost) -> dict[str, list[str]]:
        await start_all(host, settle=False)
        await host.signal("r1", "go")
        await host.work(until_settled="r1")
        cases: dict[str, Any] = {
            "customer": ["customer=acme"],
            "not acme": ["customer!=acme"],
            "big": ["amount>100"],
            "at most 100": ["amount<=100"],
            "exactly": ["amount=300.5"],
            "urgent acme": ["urgent=true", "customer=acme"],
            "not urgent": {"urgent": False},
            "tier": {"tier": 1},
            "tier range": ["tier>=2", "tier<3"],
            "done": ["stage=done"],
            "nobody": ["customer=nobody"],
            "undeclared": ["color=red"],
            "text on a number": ["amount=lots"],
        }
        out = {name: await ids(host, where) for name, where in cases.items()}
        out["running acme"] = await ids(host, ["customer=acme"], "running")
        out["all"] = await ids(host, None)
        return out

    found = on_host(db, body)
    assert found == {
        "customer": ["r0", "r1"],
        "not acme": ["r2", "r3"],
        "big": ["r1", "r2"],
        "at most 100": ["r0", "r3"],
        "exactly": ["r2"],
        "urgent acme": ["r1"],
        "not urgent": ["r0", "r3"],
        "tier": ["r0", "r3"],
        "tier range": ["r1"],
        "done": ["r1"],
        "nobody": [],
        "undeclared": [],
        "text on a number": [],
        "running acme": ["r0"],
        "all": ["r0", "r1", "r2", "r3"],
    }


# SQLite only: it reads or doctors the SQLite file itself.
def test_the_index_holds_the_current_values_and_survives_a_reopen(tmp_path: Path) -> None:
    db = tmp_path / "meta.db"
    on_host(db, lambda host: start_all(host, settle=False))

    async def later(host: LocalHost) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
        before = await host.metadata("r2")
        await host.signal("r2", "go")
        await host.work(until_settled="r2")
        return before, await host.show("r2"), await ids(host, ["stage=done"])

    before, shown, done = on_host(db, later)
    assert before == {
        "customer": "zeta",
        "tier": 3,
        "amount": 300.5,
        "urgent": True,
        "stage": "quoted",
    }
    assert shown["metadata"] == {**before, "stage": "done"}
    assert done == ["r2"]
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT name, kind, typeof(value) FROM run_metadata WHERE run_id = 'r2' ORDER BY name"
        ).fetchall()
    assert rows == [
        ("amount", "number", "real"),
        ("customer", "string", "text"),
        ("stage", "string", "text"),
        ("tier", "integer", "integer"),
        ("urgent", "boolean", "integer"),
    ]


# SQLite only: it reads or doctors the SQLite file itself.
def test_metadata_rows_are_written_only_when_the_metadata_changed(tmp_path: Path) -> None:
    """The store is the hot path: an event that leaves the metadata as it was writes
    no metadata row; the one that changes it replaces the run's rows in its own
    transaction."""
    db = tmp_path / "meta.db"
    spec = """
flow: waits
metadata: {stage: string}
steps:
  - {id: a, await_signal: {signal: go}}
  - {id: b, await_signal: {signal: go}}
  - {id: c, set_metadata: {stage: two}}
  - {id: d, await_signal: {signal: go}}
"""

    async def body(host: LocalHost) -> list[list[str]]:
        written: list[list[str]] = []
        await host.start(spec, None, "w", metadata={"stage": "one"})
        statements: list[str] = []
        conn = host.store.conn
        assert isinstance(conn, sqlite3.Connection)  # SQLite's statement trace
        conn.set_trace_callback(statements.append)
        for _ in range(3):
            statements.clear()
            await host.signal("w", "go")
            await until_waiting(host, "w")
            written.append([s.split()[0] for s in statements if "run_metadata" in s])
        conn.set_trace_callback(None)
        return written

    assert on_host(db, body) == [[], ["DELETE", "INSERT"], []]
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT name, value FROM run_metadata").fetchall() == [("stage", "two")]


def test_bad_metadata_and_filters_are_typed_errors_and_write_nothing(
    tmp_path: Path, local_db: Path | str
) -> None:
    db = local_db

    async def body(host: LocalHost) -> list[str]:
        errors = []
        for metadata in ({"tier": "high"}, {"color": "red"}, {"urgent": 1}):
            with pytest.raises(flowcore.MetadataError) as info:
                await host.start(ORDERS, {"amount": 1}, "bad", metadata=metadata)
            errors.append(info.value.problems[0])
        with pytest.raises(flowcore.MetadataFilterError, match="compares numbers"):
            await host.runs(where=["amount>lots"])
        assert await host.runs() == []
        return errors

    assert on_host(db, body) == [
        "metadata field 'tier' (integer) must be an integer, got the string 'high'",
        "metadata field 'color' is not declared"
        " (the flow declares: customer, amount, urgent, tier, stage)",
        "metadata field 'urgent' (boolean) must be true or false, got the number 1",
    ]


# SQLite only: it reads or doctors the SQLite file itself.
def test_a_run_without_metadata_writes_no_metadata_rows(tmp_path: Path) -> None:
    db = tmp_path / "plain.db"
    spec = (
        "flow: plain\ntools: {quote: {}}\n"
        "steps: [{id: q, call_tool: {tool: quote, input: {amount: 1}}}]\n"
    )

    async def body(host: LocalHost) -> dict[str, Any]:
        await host.start(spec, None, "p")
        await host.work(until_settled="p")
        return await host.show("p")

    assert on_host(db, body)["metadata"] == {}
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT COUNT(*) FROM run_metadata").fetchone() == (0,)


# --- the command line ------------------------------------------------------------------------

TOOLS = """
def quote(call):
    return {"total": call.input["amount"]}


TOOLS = {"quote": quote}
"""


# SQLite only, for the suite's time: many command processes, each opening the
# database (up to 3x slower on PostgreSQL on two busy cores); others run on both.
def test_the_cli_starts_lists_and_shows_by_metadata(tmp_path: Path) -> None:
    spec = tmp_path / "orders.yaml"
    spec.write_text(ORDERS)
    tools = tmp_path / "order_tools.py"
    tools.write_text(TOOLS)
    db = str(tmp_path / "cli.db")
    common = ["--tools", str(tools), "--db", db, "--detach"]
    for i, (customer, amount, tier) in enumerate(RUNS):
        meta = ["--meta", f"customer={customer}", "--meta", f"tier={tier}"]
        inp = json.dumps({"amount": amount})
        ok("run", str(spec), "--input", inp, "--run-id", f"c{i}", *meta, *common)
        ok("signal", f"c{i}", "go", "--db", db)  # buffered until the run waits
    ok("worker", "--db", db, "--tools", str(tools), "--until-idle")

    def listed(*where: str) -> list[str]:
        args = [a for w in where for a in ("--where", w)]
        return [r["runId"] for r in json.loads(ok("runs", "--db", db, "--json", *args))]

    assert listed("customer=acme") == ["c0", "c1"]
    assert listed("amount>100") == ["c1", "c2"]
    assert listed("amount>100", "tier<3") == ["c1"]
    assert listed("urgent=false") == ["c0", "c3"]
    rows = json.loads(ok("runs", "--db", db, "--json", "--where", "customer=zeta"))
    assert rows[0]["metadata"] == {
        "amount": 300.5,
        "customer": "zeta",
        "stage": "done",
        "tier": 3,
        "urgent": True,
    }
    table = ok("runs", "--db", db, "--where", "customer=zeta")
    assert 'customer="zeta"' in table and "tier=3" in table
    shown = ok("show", "c2", "--db", db, "--no-history")
    assert 'metadata: customer="zeta" tier=3 amount=300.5 urgent=true stage="done"' in shown
    assert json.loads(ok("show", "c2", "--db", db, "--json"))["metadata"]["stage"] == "done"

    run = ["run", str(spec), "--input", "{}", *common]
    assert bad(*run, "--meta", "tier=high") == (
        "flowcore: --meta: metadata field 'tier' (integer) must be an integer,"
        " got the string 'high'"
    )
    assert "'color' is not declared" in bad(*run, "--meta", "color=red")
    assert "is not field=value" in bad(*run, "--meta", "tier")
    assert "> compares numbers, and 'lots' is not one" in bad(
        "runs", "--db", db, "--where", "amount>lots"
    )
    assert "is not field=value" in bad("runs", "--db", db, "--where", "customer")
    assert len(listed()) == 4  # the refused starts wrote nothing
    # A replay of a run's log derives its metadata again.
    replayed = json.loads(ok("replay", "c2", "--db", db, "--json"))
    assert replayed["metadata"] == {
        "customer": "zeta",
        "tier": 3,
        "amount": 300.5,
        "urgent": True,
        "stage": "done",
    }


def test_a_resume_rewinds_the_index_with_the_run(tmp_path: Path, local_db: Path | str) -> None:
    """The event that failed the run had changed its metadata; the rewound run holds,
    and the index lists it by, the metadata from before that event."""
    from flowcore_handlers import HandlerError

    db = local_db
    spec = """
flow: flaky
metadata: {stage: string}
tools: {charge: {class: idempotent}}
steps:
  - {id: a, set_metadata: {stage: charging}}
  - id: pay
    try:
      - {id: charge, call_tool: {tool: charge}}
    catch:
      - steps:
          - {id: mark, set_metadata: {stage: declined}}
          - {id: again, fail: {type: declined}}
  - {id: b, set_metadata: {stage: paid}}
"""
    down = {"yes": True}

    def charge(call: Any) -> Any:
        if down["yes"]:
            raise HandlerError("declined", "the card was declined")
        return {"ok": True}

    async def body(host: LocalHost) -> list[Any]:
        seen: list[Any] = []
        await host.start(spec, None, "f")
        await host.work(until_settled="f")
        seen.append(((await host.run("f")).status, await host.metadata("f")))
        down["yes"] = False
        await host.resume("f")
        seen.append(((await host.run("f")).status, await ids(host, ["stage=charging"])))
        await host.work(until_settled="f")
        seen.append(((await host.run("f")).status, await host.metadata("f")))
        return seen

    async def main() -> list[Any]:
        async with LocalHost(db, registry=Registry(tools={"charge": charge})) as host:
            return await body(host)

    assert asyncio.run(main()) == [
        ("failed", {"stage": "declined"}),
        ("running", ["f"]),
        ("completed", {"stage": "paid"}),
    ]
