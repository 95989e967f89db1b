"""How a worker makes failures visible, and how it limits itself to one run.

- A run that fails because its tools module cannot be loaded says which module
  and why; ``work(on_settled=...)`` hears of every run the worker settles.
- A handler's exception keeps its traceback beside the run (``show``'s
  ``failures``), never on the wire.
- ``work(only=run_id)`` works on that run and its child runs alone.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import flowcore
from flowcore_local import LocalHost, RunRow

from ..local_helpers import JOURNALED, journal, settle, tools_file

ONE_CALL = """
flow: one
tools: {echo: {class: readonly}}
steps:
  - {id: a, call_tool: {tool: echo, input: "${input.n}"}}
output: "${steps.a.output}"
"""


def run(db: Path | str, body: Any, **options: Any) -> Any:
    async def main() -> Any:
        async with LocalHost(db, **options) as host:
            return await body(host)

    return asyncio.run(main())


def test_a_tools_module_that_cannot_be_loaded_fails_the_run_naming_it_and_on_settled_hears(
    tmp_path: Path,
    local_db: Path | str,
) -> None:
    good = tools_file(tmp_path / "good", "good_tools", JOURNALED + 'TOOLS = {{"echo": echo}}\n')
    bad = tools_file(
        tmp_path / "bad",
        "bad_tools",
        "def load():\n    raise RuntimeError('no network here')\n\n\nload()\nTOOLS = {{}}\n",
    )
    settled: list[RunRow] = []

    async def body(host: LocalHost) -> Any:
        ok = await host.start(ONE_CALL, {"n": 1}, "ok", tools=str(good))
        broken = await host.start(ONE_CALL, {"n": 2}, "broken", tools=str(bad))

        async def both() -> bool:
            return len(settled) == 2

        stop = asyncio.Event()
        worker = asyncio.create_task(host.work(stop, on_settled=settled.append))
        while not await both():
            await asyncio.sleep(0.02)
        stop.set()
        await asyncio.wait_for(worker, timeout=20)
        return await host.run(ok), await host.run(broken), await host.show(broken)

    ok, broken, info = run(local_db, body)
    assert sorted((r.run_id, r.status) for r in settled) == [
        ("broken", "failed"),
        ("ok", "completed"),
    ]
    assert ok.output == {"echo": 1}
    assert broken.error["type"] == "tools-module-error"
    assert broken.error["message"] == (
        f"cannot import tools module '{bad.resolve()}': RuntimeError: no network here"
    )
    (failure,) = info["failures"]
    assert (failure["key"], failure["type"]) == ("broken/a#1", "tools-module-error")
    assert "in load" in failure["traceback"]  # the import's traceback, kept beside the run
    assert failure["traceback"].rstrip().endswith("RuntimeError: no network here")


def test_on_settled_is_told_of_child_runs_and_its_exceptions_do_not_stop_the_worker(
    tmp_path: Path, local_db: Path | str, caplog: Any
) -> None:
    tools = tools_file(tmp_path, "echo_tools", JOURNALED + 'TOOLS = {{"echo": echo}}\n')
    child = tmp_path / "kid.yaml"
    child.write_text(ONE_CALL.replace("flow: one", "flow: kid"))
    parent = "flow: p\nsteps:\n  - {id: k, run_subflow: {flow: kid, input: {n: 4}}}\n"
    heard: list[str] = []

    def listener(row: RunRow) -> None:
        heard.append(f"{row.run_id} {row.status}")
        raise RuntimeError("a buggy listener")

    async def body(host: LocalHost) -> RunRow:
        rid = await host.start(parent, {}, "p", tools=str(tools), flows=[child])
        return await settle(host, rid, on_settled=listener)

    row = run(local_db, body)
    assert row.status == "completed"
    assert heard == ["p/k#1 completed", "p completed"]
    assert "on_settled raised for run p/k#1: RuntimeError: a buggy listener" in caplog.text


DEEP = """
from flowcore_handlers import HandlerError


def helper(depth, size):
    if depth:
        return helper(depth - 1, size)
    raise ValueError("bad input " + "x" * size)


def fails(call):
    return helper(3, call.input)


def declared(call):
    raise HandlerError("busy", "come back later", retryable=False)


TOOLS = {{"fails": fails, "declared": declared}}
"""


def test_a_handlers_traceback_is_kept_beside_the_run_and_not_sent_on_the_wire(
    tmp_path: Path,
    local_db: Path | str,
) -> None:
    tools = tools_file(tmp_path, "deep_tools", DEEP)
    spec = """
flow: f
tools: {fails: {}, declared: {}}
steps:
  - id: t
    try: [{id: small, call_tool: {tool: fails, input: 3}}]
    catch: [{steps: [{id: huge, call_tool: {tool: fails, input: 300000}}]}]
"""
    declared = "flow: d\ntools: {declared: {}}\nsteps:\n  - {id: x, call_tool: {tool: declared}}\n"

    async def body(host: LocalHost) -> Any:
        rid = await host.start(spec, {}, "f", tools=str(tools))
        did = await host.start(declared, {}, "d", tools=str(tools))
        await settle(host, rid)
        await settle(host, did)
        return await host.show(rid), await host.records(rid), await host.show(did)

    info, records, declared_info = run(local_db, body)
    small, huge = info["failures"]
    assert (small["key"], small["type"], small["message"]) == (
        "f/small#1",
        "ValueError",
        "bad input xxx",
    )
    assert small["traceback"].count("in helper") == 4
    assert small["traceback"].rstrip().endswith("ValueError: bad input xxx")
    assert huge["key"] == "f/huge#1"
    assert len(huge["traceback"].encode()) <= 64 * 1024 + 100  # the last 64 KiB, and a line
    assert huge["traceback"].startswith("… (")
    assert huge["traceback"].rstrip().endswith("x" * 100)
    # On the wire, the event holds the error as before: type, message (cut), no traceback.
    failed = [r.data for r in records if r.type == "event.reported"]
    assert failed[0]["error"] == {"type": "ValueError", "message": "bad input xxx"}
    assert len(failed[1]["error"]["message"]) < 4200
    assert not any("Traceback" in str(r.data) for r in records)
    (busy,) = declared_info["failures"]
    assert (busy["type"], busy["message"]) == ("busy", "come back later")
    assert "HandlerError" in busy["traceback"]


# SQLite only: it reads or doctors the SQLite file itself.
def test_work_only_one_run_works_on_it_and_its_children_and_leaves_the_others(
    tmp_path: Path,
) -> None:
    tools = tools_file(tmp_path, "echo_tools", JOURNALED + 'TOOLS = {{"echo": echo}}\n')
    child = tmp_path / "kid.yaml"
    child.write_text(ONE_CALL.replace("flow: one", "flow: kid"))
    parent = """
flow: p
tools: {echo: {class: readonly}}
steps:
  - {id: nap, sleep: {for_ms: 1}}
  - {id: k, run_subflow: {flow: kid, input: {n: 5}}}
  - {id: e, call_tool: {tool: echo, input: after}}
output: "${steps.e.output}"
"""
    napper = "flow: napper\nsteps:\n  - {id: z, sleep: {for_ms: 1}}\n"
    db = tmp_path / "only.db"

    async def starting(host: LocalHost) -> None:  # started, not worked on (like --detach)
        await host.start(parent, {}, "mine", tools=str(tools), flows=[child])
        await host.start(ONE_CALL, {"n": 9}, "other", tools=str(tools))
        await host.start(napper, {}, "sleeper")

    run(db, starting)

    async def only_mine(host: LocalHost) -> Any:
        await asyncio.sleep(0.01)  # the sleeper's timer is due
        row = await settle(host, "mine", only="mine")
        return row, await host.run("mine/k#1"), await host.run("other"), await host.run("sleeper")

    mine, kid, other, sleeper = run(db, only_mine)
    assert (mine.status, mine.output) == ("completed", {"echo": "after"})
    assert kid.status == "completed"
    assert (other.status, other.next_index, sleeper.status) == ("running", 2, "running")
    assert journal(tmp_path) == {"mine/k#1/a#1": 1, "mine/e#1": 1}
    with sqlite3.connect(db) as conn:
        rows = sorted(conn.execute("SELECT run_id, kind, status FROM outbox WHERE kind != 'sleep'"))
    assert rows == [("other", "call-tool", "ready")]

    async def everything(host: LocalHost) -> Any:
        return await settle(host, "other"), await settle(host, "sleeper")

    other, sleeper = run(db, everything)
    assert (other.status, sleeper.status) == ("completed", "completed")
    for rid, spec in (("mine", parent), ("other", ONE_CALL)):
        records = run(db, lambda host, rid=rid: host.records(rid))
        assert flowcore.replay(records, flowcore.parse_flow(spec)).status == "completed"


DECLINE = """
flow: pay
tools: {charge: {class: idempotent}, notify: {class: idempotent}}
steps:
  - id: pay
    try:
      - id: charge
        call_tool: {tool: charge, input: {amount: "${input.amount}"}}
        retry: {max_attempts: 2, initial_interval_ms: 0}
    catch:
      - errors: [card-declined]
        steps:
          - id: tell
            call_tool:
              tool: notify
              input: {status: "${error.details.status}", code: "${error.details.decline.code}"}
output: "${ {told: steps.tell.output, error: steps.charge.error} }"
"""


def test_a_handler_fails_with_details_the_catch_reads(tmp_path: Path, local_db: Path | str) -> None:
    """HandlerError(type, message, retryable, details): the retryable failure is
    retried, the second is caught, and ``${error.details...}`` reads its details."""
    from flowcore_handlers import HandlerError, Registry

    calls: list[Any] = []

    def charge(effect: flowcore.CallTool) -> Any:
        calls.append(effect.idempotency_key)
        if len(calls) == 1:
            raise HandlerError("gateway-busy", "try later", retryable=True, details={"status": 503})
        details = {"status": 402, "decline": {"code": "insufficient_funds"}}
        details_given = dict(details)
        error = HandlerError("card-declined", "card declined", details=details_given)
        details_given["status"] = 0  # the error keeps the details as they were when raised
        raise error

    def notify(effect: flowcore.CallTool) -> Any:
        return effect.input

    registry = Registry(tools={"charge": charge, "notify": notify})

    async def body(host: LocalHost) -> Any:
        rid = await host.start(DECLINE, {"amount": 250}, "pay-1")
        await asyncio.wait_for(host.work(until_settled=rid), 20)
        return await host.run(rid), await host.records(rid)

    row, records = run(local_db, body, registry=registry)
    assert row.status == "completed", row.error
    assert calls == ["pay-1/charge#1", "pay-1/charge#2"]
    attempts = row.output["error"].pop("attempts")
    assert [(a["type"], a["details"]) for a in attempts] == [
        ("gateway-busy", {"status": 503}),
        ("card-declined", {"status": 402, "decline": {"code": "insufficient_funds"}}),
    ]
    assert row.output == {
        "told": {"status": 402, "code": "insufficient_funds"},
        "error": {
            "type": "card-declined",
            "message": "card declined",
            "retryable": False,
            "details": {"status": 402, "decline": {"code": "insufficient_funds"}},
        },
    }
    failed = [r.data["error"] for r in records if r.data.get("kind") == "effect-failed"]
    assert [(e["type"], e.get("retryable"), e["details"]["status"]) for e in failed] == [
        ("gateway-busy", True, 503),
        ("card-declined", None, 402),
    ]


def test_details_that_are_not_json_data_fail_the_effect_saying_where(
    tmp_path: Path, local_db: Path | str
) -> None:
    from flowcore_handlers import MAX_ERROR_DETAILS_BYTES, DetailsError, HandlerError, Registry

    def charge(effect: flowcore.CallTool) -> Any:
        raise HandlerError("card-declined", "no", details={"when": {1, 2}})

    registry = Registry(tools={"charge": charge})
    spec = "flow: f\ntools: {charge: {}}\nsteps:\n  - {id: c, call_tool: {tool: charge}}\n"

    async def body(host: LocalHost) -> Any:
        rid = await host.start(spec, None, "bad-1")
        await asyncio.wait_for(host.work(until_settled=rid), 20)
        return await host.run(rid)

    row = run(local_db, body, registry=registry)
    assert row.status == "failed"
    assert row.error["type"] == "DetailsError"
    assert row.error["message"] == (
        "HandlerError 'card-declined': details cannot be stored: details at $.when: a set"
        " is not JSON data (null, booleans, numbers, strings, lists and objects with string"
        " keys)"
    )
    big = "x" * MAX_ERROR_DETAILS_BYTES
    try:
        HandlerError("t", details=big)
    except DetailsError as exc:
        assert "65,538 bytes as JSON; at most 65,536 are kept" in str(exc)
    else:
        raise AssertionError("details over the bound were kept")
