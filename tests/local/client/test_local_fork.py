"""``LocalHost.fork``: a new run with a run's history up to a point, on a real SQLite file.

The journal of real tools modules counts every handler call, so the tests see
that work answered before the point is never run again, and that the work
after it runs again under the fork's keys.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import flowcore
from flowcore_local import HostError, LocalHost

from ..local_helpers import JOURNALED, dispatch_to_ghost, journal, settle, tools_file, work_until
from .test_local_recovery_resume import FIXED, PAY, replays

BROKEN = JOURNALED + 'TOOLS = {{"echo": echo, "charge": down}}\n'


def run(db: Path | str, body: Any, **options: Any) -> Any:
    async def main() -> Any:
        async with LocalHost(db, **options) as host:
            return await body(host)

    return asyncio.run(main())


def test_a_failed_run_forked_from_its_failing_step_completes_without_redoing_earlier_steps(
    tmp_path: Path,
    local_db: Path | str,
) -> None:
    v1 = tools_file(tmp_path, "v1_tools", BROKEN)
    v2 = tools_file(tmp_path, "v2_tools", FIXED)

    async def body(host: LocalHost) -> Any:
        await host.start(PAY, {}, "pay", tools=str(v1))
        failed = await settle(host, "pay")
        source = await host.records("pay")
        rid = await host.fork("pay", from_step="b", tools=str(v2))
        again = await host.fork("pay", from_step="b", tools=str(v2))  # the same fork
        done = await settle(host, rid)
        return failed, source, rid, again, done, await host.records(rid), await host.run("pay")

    failed, source, rid, again, done, records, after = run(local_db, body)
    assert failed.status == "failed"
    point = records[0].data["forkedFrom"]["index"]
    assert rid == again == f"pay-fork-{point}"
    assert records[0].data["forkedFrom"] == {"runId": "pay", "index": point}
    # The point is the end of the decision that started b: a's result is carried.
    assert source[point - 1].data == {**source[point - 1].data, "idempotencyKey": "pay/b#1"}
    assert (done.status, done.output) == ("completed", {"b": {"echo": 2}, "c": {"echo": 3}})
    assert done.tools == str(v2.resolve())
    # a ran once (in the source); b failed in the source and ran in the fork; c only there.
    assert journal(tmp_path) == {"pay/a#1": 1, "pay/b#1": 1, f"{rid}/b#1": 1, f"{rid}/c#1": 1}
    assert replays(records, PAY) == "completed"
    assert (after.status, await_records_unchanged(local_db, source)) == ("failed", True)


def await_records_unchanged(db: Path | str, source: list[flowcore.Record]) -> bool:
    async def body(host: LocalHost) -> list[flowcore.Record]:
        return await host.records("pay")

    return bool(run(db, body) == source)


def test_a_fork_at_an_index_of_a_waiting_run_and_a_reset_that_cancels_the_source(
    tmp_path: Path,
    local_db: Path | str,
) -> None:
    spec = """
flow: wait
tools: {echo: {class: readonly}}
steps:
  - {id: a, call_tool: {tool: echo, input: 1}}
  - {id: go, await_signal: {signal: go}}
  - {id: c, call_tool: {tool: echo, input: "${steps.go.output}"}}
output: "${steps.c.output}"
"""
    tools = tools_file(tmp_path, "tools", FIXED)

    async def body(host: LocalHost) -> Any:
        await host.start(spec, {}, "w", tools=str(tools))

        async def waiting() -> bool:
            return bool((await host.waits("w")).signals)

        await work_until(host, waiting)
        records = await host.records("w")
        end = len(records)
        rid = await host.fork("w", at=end, new_run_id="w2", cancel_source=True)
        source = await host.run("w")
        waits = await host.waits(rid)
        await host.signal(rid, "go", "x")
        done = await settle(host, rid)
        return end, rid, source, waits, done, await host.records(rid)

    end, rid, source, waits, done, records = run(local_db, body)
    assert rid == "w2"
    assert records[0].data["forkedFrom"] == {"runId": "w", "index": end}
    assert source.status == "cancelled"  # a reset: the source is cancelled
    assert [s.key for s in waits.signals] == ["w2/go#1"]
    assert (done.status, done.output) == ("completed", {"echo": "x"})
    assert journal(tmp_path) == {"w/a#1": 1, "w2/c#1": 1}
    assert replays(records, spec) == "completed"


def test_bad_forks_are_refused_and_write_nothing(tmp_path: Path, local_db: Path | str) -> None:
    v1 = tools_file(tmp_path, "v1_tools", BROKEN)

    async def body(host: LocalHost) -> Any:
        await host.start(PAY, {}, "pay", tools=str(v1))
        await settle(host, "pay")
        refused = []
        for kw in ({"at": 1}, {"at": 0}, {"at": 10_000}, {"from_step": "zz"}, {"from_step": "c"}):
            with pytest.raises(flowcore.ForkError) as info:
                await host.fork("pay", **kw)
            refused.append(str(info.value))
        with pytest.raises(HostError, match="already exists"):
            await host.fork("pay", from_step="b", new_run_id="pay")
        with pytest.raises(HostError, match="no run 'nope'"):
            await host.fork("nope", at=2)
        return refused, [r.run_id for r in await host.runs()]

    refused, runs = run(local_db, body)
    assert "index 1 (effect.emitted) is inside the decision of record 0" in refused[0]
    assert "index 0 is not after run.started" in refused[1]
    assert "index 10000 is past the end of the log" in refused[2]
    assert "flow 'pay' has no step 'zz'" in refused[3]
    assert "step 'c' emitted no effect in run 'pay'" in refused[4]
    assert runs == ["pay"]


def test_a_child_completed_before_the_point_is_reused_and_one_running_starts_again(
    tmp_path: Path,
    local_db: Path | str,
) -> None:
    child = tmp_path / "kid.yaml"
    child.write_text(
        """
flow: kid
tools: {echo: {class: readonly}}
steps:
  - {id: k, call_tool: {tool: echo, input: "${input.n}"}}
  - {id: hold, await_signal: {signal: "go"}}
output: "${steps.k.output}"
"""
    )
    parent = """
flow: parent
steps:
  - {id: one, run_subflow: {flow: kid, input: {n: 1}}}
  - {id: two, run_subflow: {flow: kid, input: {n: 2}}}
output: "${ {one: steps.one.output, two: steps.two.output} }"
"""
    tools = tools_file(tmp_path, "tools", FIXED)

    async def body(host: LocalHost) -> Any:
        await host.start(parent, {}, "p", tools=str(tools), flows=[child])

        async def child_waits(rid: str) -> bool:
            try:
                return bool((await host.waits(rid)).signals)
            except HostError:
                return False

        async def until(rid: str) -> None:
            await work_until(host, lambda: child_waits(rid))

        await until("p/one#1")
        await host.signal("p/one#1", "go")
        await until("p/two#1")  # one completed; two is running and waits
        rid = await host.fork("p", from_step="two")
        await until(f"{rid}/two#1")
        await host.signal(f"{rid}/two#1", "go")
        done = await settle(host, rid)
        return rid, done, await host.children(rid), await host.run("p/two#1")

    rid, done, children, source_child = run(local_db, body)
    assert (done.status, done.output) == ("completed", {"one": {"echo": 1}, "two": {"echo": 2}})
    assert children == [f"{rid}/two#1"]  # one's result came from the log
    assert source_child.status == "running"  # the source's child is the source's
    assert journal(tmp_path) == {"p/one#1/k#1": 1, "p/two#1/k#1": 1, f"{rid}/two#1/k#1": 1}


def test_a_dead_lettered_effect_is_retried_in_place_by_resume_or_anew_by_a_fork(
    tmp_path: Path,
    local_db: Path | str,
) -> None:
    """The two ways back from a dead letter once its cause is fixed (local.md §10, §15)."""
    spec = """
flow: dl
tools: {echo: {class: readonly}}
steps:
  - {id: a, call_tool: {tool: echo, input: 1}}
  - {id: b, call_tool: {tool: echo, input: 2}}
output: "${steps.b.output}"
"""
    tools = tools_file(tmp_path, "tools", FIXED)
    db = local_db

    async def starting(host: LocalHost) -> None:
        await host.start(spec, {}, "in-place", tools=str(tools))
        await host.start(spec, {}, "forked", tools=str(tools))

    run(db, starting)
    assert sorted(dispatch_to_ghost(db)) == ["forked/a#1", "in-place/a#1"]  # lost with a worker

    async def body(host: LocalHost) -> Any:
        dead = [await settle(host, rid) for rid in ("in-place", "forked")]
        await host.resume("in-place")
        fid = await host.fork("forked", from_step="a")
        done = [await settle(host, rid) for rid in ("in-place", fid)]
        return dead, fid, done, await host.show("in-place")

    dead, fid, done, info = run(db, body, max_recoveries=0)
    assert [(r.status, r.error["type"]) for r in dead] == [("failed", "dead-letter")] * 2
    assert [(r.status, r.output) for r in done] == [("completed", {"echo": 2})] * 2
    assert info["deadLetters"] == [] and info["resumes"][0]["key"] == "in-place/a#1"
    assert journal(tmp_path) == {
        "in-place/a#1": 1,  # again under its own key
        "in-place/b#1": 1,
        f"{fid}/a#1": 1,  # anew under the fork's
        f"{fid}/b#1": 1,
    }
