"""``LocalHost.resume``: retry a failed run from its failed step, with new handlers.

The run is rewound to just before the event that failed it: its log is cut
there (the rest moves to the archive), its state is rebuilt by replaying the
log up to there, and the work pending then runs again. Steps that succeeded
are not run again (the journal of real tools modules counts every call), the
live log still replays, and wherever a rewind would not be faithful the
resume is refused and the run left as it was.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import flowcore
from flowcore_local import HostError, LocalHost

from ..local_helpers import JOURNALED, dispatch_to_ghost, journal, settle, tools_file

PAY = """
flow: pay
tools: {echo: {class: readonly}, charge: {}}
steps:
  - {id: a, call_tool: {tool: echo, input: 1}}
  - {id: b, call_tool: {tool: charge, input: 2}}
  - {id: c, call_tool: {tool: echo, input: 3}}
output: "${ {b: steps.b.output, c: steps.c.output} }"
"""

FIXED = JOURNALED + 'TOOLS = {{"echo": echo, "charge": echo, "slow": echo}}\n'
SLOW = """

import time


def slow(call):
    note(call)
    time.sleep(0.4)
    return "slow"
"""
FAILING_TABLE = 'TOOLS = {{"echo": echo, "charge": down, "slow": slow}}\n'


def run(db: Path | str, body: Any, **options: Any) -> Any:
    async def main() -> Any:
        async with LocalHost(db, **options) as host:
            return await body(host)

    return asyncio.run(main())


def replays(records: list[flowcore.Record], spec: str) -> str:
    return flowcore.replay(records, flowcore.parse_flow(spec)).status


def test_a_failed_run_resumes_from_its_failed_step_with_new_handlers(
    tmp_path: Path, local_db: Path | str
) -> None:
    v1 = tools_file(tmp_path, "v1_tools", JOURNALED + 'TOOLS = {{"echo": echo, "charge": down}}\n')
    v2 = tools_file(tmp_path, "v2_tools", FIXED)

    async def body(host: LocalHost) -> Any:
        rid = await host.start(PAY, {}, "pay", tools=str(v1))
        failed = await settle(host, rid)
        before = await host.records(rid)
        await host.resume(rid, tools=str(v2))
        resumed = await host.run(rid)
        done = await settle(host, rid)
        return (
            failed,
            before,
            resumed,
            done,
            await host.records(rid),
            await host.archived(rid),
            (await host.show(rid)),
        )

    failed, before, resumed, done, records, archived, info = run(local_db, body)
    assert (failed.status, failed.error["type"]) == ("failed", "down")
    assert (resumed.status, resumed.error, resumed.tools) == ("running", None, str(v2.resolve()))
    assert (done.status, done.output) == ("completed", {"b": {"echo": 2}, "c": {"echo": 3}})
    # a ran once; b failed once and ran again with the new handler; c ran once.
    assert journal(tmp_path) == {"pay/a#1": 1, "pay/b#1": 2, "pay/c#1": 1}
    cut = next(r.index for r in before if r.type == "event.reported" and "error" in r.data)
    assert [r.index for r in records] == list(range(len(records)))  # one sequence, no gap
    assert records[:cut] == before[:cut]
    assert records[cut].data["kind"] == "effect-succeeded"
    assert [(n, r.index, r.type) for n, r in archived] == [
        (1, cut, "event.reported"),
        (1, cut + 1, "effect.emitted"),
        (1, cut + 2, "run.settled"),
    ]
    assert archived[0][1].data["error"]["type"] == "down"
    assert replays(records, PAY) == "completed"
    (resume,) = info["resumes"]
    assert (resume["n"], resume["fromIndex"], resume["key"]) == (1, cut, "pay/b#1")
    assert resume["error"]["type"] == "down"
    assert (resume["toolsBefore"], resume["toolsAfter"]) == (str(v1.resolve()), str(v2.resolve()))


def test_a_run_failed_by_its_tools_module_resumes_once_the_module_loads(
    tmp_path: Path, local_db: Path | str
) -> None:
    broken = tools_file(tmp_path, "broken_tools", "raise ImportError('missing dependency')\n")
    fixed = tools_file(tmp_path, "fixed_tools", FIXED)

    async def body(host: LocalHost) -> Any:
        rid = await host.start(PAY, {}, "t", tools=str(broken))  # cannot be checked here
        failed = await settle(host, rid)
        with pytest.raises(HostError) as still_broken:
            await host.resume(rid)  # the stored module still does not import
        await host.resume(rid, tools=str(fixed))
        return failed, str(still_broken.value), await settle(host, rid), await host.records(rid)

    failed, refused, row, records = run(local_db, body)
    assert failed.error["type"] == "tools-module-error"
    assert refused == (
        f"cannot resume run 't': cannot import tools module '{broken.resolve()}':"
        " ImportError: missing dependency"
    )
    assert row.status == "completed"
    assert journal(tmp_path) == {"t/a#1": 1, "t/b#1": 1, "t/c#1": 1}
    assert replays(records, PAY) == "completed"


def test_readonly_work_in_flight_when_the_run_failed_runs_again(
    tmp_path: Path, local_db: Path | str
) -> None:
    spec = """
flow: both
tools: {charge: {}, slow: {class: readonly}}
steps:
  - id: all
    parallel:
      branches:
        x: [{id: x, call_tool: {tool: charge}}]
        y: [{id: y, call_tool: {tool: slow}}]
output: "${steps.all.output}"
"""
    v1 = tools_file(tmp_path, "v1_tools", JOURNALED + SLOW + FAILING_TABLE)
    v2 = tools_file(tmp_path, "v2_tools", FIXED)

    async def body(host: LocalHost) -> Any:
        rid = await host.start(spec, {}, "b", tools=str(v1))
        failed = await settle(host, rid)
        await host.resume(rid, tools=str(v2))
        return failed, await settle(host, rid), await host.records(rid)

    failed, row, records = run(local_db, body)
    assert failed.error["type"] == "down"
    assert (row.status, row.output) == ("completed", {"x": {"echo": None}, "y": {"echo": None}})
    assert journal(tmp_path) == {"b/x#1": 2, "b/y#1": 2}  # both ran again: y is readonly
    assert replays(records, spec) == "completed"


def test_a_failed_child_run_is_resumed_with_its_parent(
    tmp_path: Path, local_db: Path | str
) -> None:
    v1 = tools_file(tmp_path, "v1_tools", JOURNALED + 'TOOLS = {{"echo": echo, "charge": down}}\n')
    v2 = tools_file(tmp_path, "v2_tools", FIXED)
    child = tmp_path / "pay.yaml"
    child.write_text(PAY)
    parent = """
flow: parent
tools: {echo: {class: readonly}}
steps:
  - {id: first, call_tool: {tool: echo, input: 0}}
  - {id: k, run_subflow: {flow: pay}}
output: "${steps.k.output}"
"""

    async def body(host: LocalHost) -> Any:
        rid = await host.start(parent, {}, "p", tools=str(v1), flows=[child])
        failed = await settle(host, rid)
        kid_failed = await host.run("p/k#1")
        with pytest.raises(HostError) as not_the_root:
            await host.resume("p/k#1", tools=str(v2))
        await host.resume(rid, tools=str(v2))
        row = await settle(host, rid)
        return (
            failed,
            kid_failed,
            str(not_the_root.value),
            row,
            await host.run("p/k#1"),
            await host.records(rid),
            await host.records("p/k#1"),
            await host.archived("p/k#1"),
        )

    failed, kid_failed, refused, row, kid, records, kid_records, kid_archived = run(local_db, body)
    assert (failed.status, kid_failed.status) == ("failed", "failed")
    assert refused == (
        "cannot resume run 'p/k#1': it is a child run of 'p'; resume the root run 'p',"
        " which resumes the failed child runs it failed with"
    )
    assert (row.status, row.output) == ("completed", {"b": {"echo": 2}, "c": {"echo": 3}})
    assert kid.status == "completed"
    assert journal(tmp_path) == {"p/first#1": 1, "p/k#1/a#1": 1, "p/k#1/b#1": 2, "p/k#1/c#1": 1}
    assert replays(records, parent) == "completed"
    assert replays(kid_records, PAY) == "completed"
    assert [r.type for _, r in kid_archived] == ["event.reported", "effect.emitted", "run.settled"]


def test_what_cannot_be_rewound_faithfully_is_refused_and_left_as_it_was(
    tmp_path: Path, local_db: Path | str
) -> None:
    v1 = tools_file(tmp_path, "v1_tools", JOURNALED + SLOW + FAILING_TABLE)
    v2 = tools_file(tmp_path, "v2_tools", FIXED)
    lacking = tools_file(tmp_path, "lacking_tools", JOURNALED + 'TOOLS = {{"echo": echo}}\n')
    saga = """
flow: saga
tools: {echo: {class: idempotent}, charge: {}}
steps:
  - id: a
    call_tool: {tool: echo, input: 1}
    compensate: [{id: undo, call_tool: {tool: echo, input: undo}}]
  - {id: b, call_tool: {tool: charge}}
"""
    uncertain_sibling = """
flow: sib
tools: {charge: {}, slow: {}}
steps:
  - id: all
    parallel:
      branches:
        x: [{id: x, call_tool: {tool: charge}}]
        y: [{id: y, call_tool: {tool: slow}}]
"""
    expression = """
flow: expr
tools: {echo: {class: readonly}}
steps:
  - {id: a, call_tool: {tool: echo, input: soon}}
  - {id: nap, sleep: {until: "${steps.a.output.echo}"}}
"""
    timed = """
flow: timed
tools: {charge: {}}
steps:
  - {id: b, call_tool: {tool: charge}, timeout_ms: 100}
"""

    async def body(host: LocalHost) -> Any:
        out: dict[str, str] = {}
        ok = "flow: ok\ntools: {echo: {}}\nsteps:\n  - {id: a, call_tool: {tool: echo}}\n"
        await settle(host, await host.start(ok, {}, "done", tools=str(v1)))
        for rid, spec in (
            ("saga", saga),
            ("sib", uncertain_sibling),
            ("expr", expression),
            ("timed", timed),
            ("pay", PAY),
        ):
            await host.start(spec, {}, rid, tools=str(v1))
            await settle(host, rid)
        await asyncio.sleep(0.15)  # the timed step's timeout falls due
        before = {rid: await host.records(rid) for rid in ("saga", "sib", "expr", "timed", "pay")}
        for rid, tools in (
            ("done", str(v2)),
            ("saga", str(v2)),
            ("sib", str(v2)),
            ("expr", str(v2)),
            ("timed", str(v2)),
            ("pay", str(lacking)),
            ("pay", str(tmp_path / "no_such_tools.py")),
            ("nope", str(v2)),
        ):
            with pytest.raises(HostError) as refused:
                await host.resume(rid, tools=tools)
            out[f"{rid} {Path(tools).name}"] = str(refused.value)
        after = {rid: await host.records(rid) for rid in before}
        statuses = {rid: (await host.run(rid)).status for rid in before}
        return out, before == after, statuses

    errors, unchanged, statuses = run(local_db, body)
    assert unchanged and set(statuses.values()) == {"failed"}
    assert errors["done v2_tools.py"] == (
        "cannot resume run 'done': it is completed; only a failed run resumes"
    )
    assert errors["saga v2_tools.py"] == (
        "cannot resume run 'saga' from its failed step: compensations ran when it failed"
        " (step 'undo', saga/undo#1); they undid completed steps, which a rewind cannot put back"
    )
    assert errors["sib v2_tools.py"] == (
        "cannot resume run 'sib' from its failed step: call-tool slow sib/y#1 was in flight when"
        " it failed and may have run; it is not readonly or idempotent, so running it again could"
        " run it twice"
    )
    assert errors["expr v2_tools.py"].startswith(
        "cannot resume run 'expr' from its failed step: the flow itself failed after"
        " effect-succeeded expr/a#1 (expression-error: "
    )
    assert errors["timed v2_tools.py"].startswith(
        "cannot resume run 'timed' from its failed step: its timeout timer timed/b/timeout fell"
        " due at "
    )
    assert errors["pay lacking_tools.py"] == (
        f"cannot resume run 'pay': tools module '{lacking.resolve()}' has no handler for"
        " tool 'charge'"
    )
    assert errors["pay no_such_tools.py"].startswith(
        f"cannot resume run 'pay': cannot import tools module '{tmp_path / 'no_such_tools.py'}':"
    )
    assert errors["nope v2_tools.py"] == "no run 'nope' in the database"


def test_work_whose_outcome_is_unknown_is_not_run_again(
    tmp_path: Path, local_db: Path | str
) -> None:
    """An uncertain call lost with its worker fails with outcome-unknown: it may have run."""
    v2 = tools_file(tmp_path, "v2_tools", FIXED)
    spec = "flow: u\ntools: {charge: {}}\nsteps:\n  - {id: b, call_tool: {tool: charge}}\n"
    db = local_db
    run(db, lambda host: host.start(spec, {}, "u", tools=str(v2)))
    assert dispatch_to_ghost(db) == ["u/b#1"]

    async def body(host: LocalHost) -> Any:
        failed = await settle(host, "u")
        with pytest.raises(HostError) as refused:
            await host.resume("u")
        return failed, str(refused.value)

    failed, refused = run(db, body)
    assert failed.error["type"] == "outcome-unknown"
    assert refused == (
        "cannot resume run 'u' from its failed step: call-tool charge u/b#1 failed with"
        " outcome-unknown: it may have run, and it is not readonly or idempotent, so running it"
        " again could run it twice"
    )
    assert journal(tmp_path) == {}  # the ghost never ran it, and nobody ran it since


# SQLite only: it reads or doctors the SQLite file itself.
def test_a_resume_is_one_transaction_and_the_database_holds_the_archive(tmp_path: Path) -> None:
    v1 = tools_file(tmp_path, "v1_tools", JOURNALED + 'TOOLS = {{"echo": echo, "charge": down}}\n')
    v2 = tools_file(tmp_path, "v2_tools", FIXED)
    db = tmp_path / "d.db"

    async def failing(host: LocalHost) -> None:
        await settle(host, await host.start(PAY, {}, "pay", tools=str(v1)))

    run(db, failing)
    run(db, lambda host: host.resume("pay", tools=str(v2)))  # no worker in this process
    with sqlite3.connect(db) as conn:
        outbox = list(conn.execute("SELECT key, status, dispatches FROM outbox"))
        archive = conn.execute("SELECT count(*) FROM log_archive").fetchone()[0]
        (next_index,) = conn.execute("SELECT next_index FROM runs").fetchone()
        (last,) = conn.execute("SELECT max(idx) FROM log").fetchone()
    assert outbox == [("pay/b#1", "ready", 0)]  # any worker claims it
    assert (archive, next_index) == (3, last + 1)
    row = run(db, lambda host: settle(host, "pay"))  # another process works it
    assert row.status == "completed"
