"""What ``LocalHost`` checks before it writes: handlers, reruns, answers, signals, budgets.

Real SQLite files and real tools modules written to ``tmp_path``; every
refusal is one ``HostError`` line naming what is wrong and where, and leaves
the database as it was.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import flowcore
from flowcore_local import HostError, LocalHost

from ..local_helpers import JOURNALED, query, settle, tools_file

ECHO_ONLY = """
def echo(call):
    return {{"echo": call.input}}


TOOLS = {{"echo": echo}}
"""

CALLS_TWO = """
flow: two
tools: {echo: {class: readonly}, lookup: {class: readonly}}
steps:
  - {id: a, call_tool: {tool: echo, input: 1}}
  - {id: b, call_tool: {tool: lookup, input: 2}}
output: "${steps.b.output}"
"""


def budget(**limits: Any) -> flowcore.Budget:
    return flowcore.Budget(**limits)


def run(db: Path | str, body: Any, **options: Any) -> Any:
    async def main() -> Any:
        async with LocalHost(db, **options) as host:
            return await body(host)

    return asyncio.run(main())


def tables(db: Path | str) -> dict[str, int]:
    return {
        table: query(db, f"SELECT count(*) FROM {table}")[0][0]
        for table in ("flows", "runs", "log", "outbox")
    }


# --- 1. handlers are checked before the first dispatch ----------------------------------


def test_a_run_calling_a_tool_without_a_handler_is_refused_and_nothing_is_written(
    tmp_path: Path,
    local_db: Path | str,
) -> None:
    tools = tools_file(tmp_path, "echo_tools", ECHO_ONLY)
    db = local_db

    async def body(host: LocalHost) -> Any:
        with pytest.raises(HostError) as refused:
            await host.start(CALLS_TWO, {}, "r1", tools=str(tools))
        counts = tables(db)
        fitting = CALLS_TWO.replace("lookup", "echo").replace("echo: {class: readonly}, ", "")
        rid = await host.start(fitting, {}, "r1", tools=str(tools))  # the id stayed free
        return str(refused.value), counts, (await settle(host, rid)).status

    message, counts, status = run(db, body)
    assert message == (
        f"cannot start run 'r1': tools module '{tools.resolve()}' has no handler for tool 'lookup'"
    )
    assert counts == {"flows": 0, "runs": 0, "log": 0, "outbox": 0}
    assert status == "completed"


def test_the_subflows_a_run_can_start_are_checked_too(tmp_path: Path, local_db: Path | str) -> None:
    tools = tools_file(tmp_path, "echo_tools", ECHO_ONLY)
    parent = """
flow: parent
tools: {echo: {class: readonly}}
steps:
  - {id: a, call_tool: {tool: echo}}
  - {id: kid, run_subflow: {flow: child}}
  - {id: gone, run_subflow: {flow: nowhere}}
"""
    child = tmp_path / "child.yaml"
    child.write_text(
        "flow: child\nteams: {crew: {members: [{member: m, agent: helper}]}}\n"
        "steps:\n  - {id: w, run_agent: {agent: writer, prompt: hi}}\n"
        "  - {id: t, run_team: {team: crew, prompt: hi}}\n"
        "  - {id: u, run_team: {team: outside, prompt: hi}}\n"
    )

    async def body(host: LocalHost) -> Any:
        with pytest.raises(HostError) as refused:
            await host.start(parent, {}, "p", flows=[child], tools=str(tools))
        return str(refused.value), await host.runs()

    message, runs = run(local_db, body)
    assert message == (
        f"cannot start run 'p': tools module '{tools.resolve()}' has no handler for agent"
        " 'helper' (flow child), agent 'writer' (flow child), team 'outside' (flow child)"
    )
    assert runs == []


def test_without_a_tools_module_a_run_that_calls_tools_is_refused(
    tmp_path: Path, local_db: Path | str
) -> None:
    async def body(host: LocalHost) -> Any:
        with pytest.raises(HostError) as refused:
            await host.start(CALLS_TWO, {}, "r")
        nap = await host.start("flow: nap\nsteps:\n  - {id: s, sleep: {for_ms: 1}}\n", {}, "n")
        return str(refused.value), nap

    message, nap = run(local_db, body)
    assert message == (
        "cannot start run 'r': it calls tool 'echo', tool 'lookup', and no tools module was given"
    )
    assert nap == "n"  # a flow that calls nothing needs no module


# --- 2. the tools module is stored so that it resolves later ----------------------------


def test_a_relative_tools_path_is_stored_absolute_and_a_dotted_name_as_it_is(
    tmp_path: Path, local_db: Path | str, monkeypatch: pytest.MonkeyPatch
) -> None:
    here = tmp_path / "project"
    tools_file(here, "rel_tools", JOURNALED + '\nTOOLS = {{"echo": echo}}\n')
    tools_file(tmp_path / "pkgs", "dotted_tools_for_checks", ECHO_ONLY)
    monkeypatch.syspath_prepend(str(tmp_path / "pkgs"))
    spec = (
        "flow: e\ntools: {echo: {}}\nsteps:\n  - {id: a, call_tool: {tool: echo, input: 3}}\n"
        "output: '${steps.a.output}'\n"
    )
    db = local_db
    monkeypatch.chdir(here)

    async def starting(host: LocalHost) -> Any:
        await host.start(spec, {}, "rel", tools="rel_tools.py")
        await host.start(spec, {}, "dotted", tools="dotted_tools_for_checks")
        # The same relative path again is the same module: idempotent.
        await host.start(spec, {}, "rel", tools="rel_tools.py")
        return (await host.run("rel")).tools, (await host.run("dotted")).tools

    stored = run(db, starting)
    assert stored == (str((here / "rel_tools.py").resolve()), "dotted_tools_for_checks")
    monkeypatch.chdir(tmp_path)  # a worker started elsewhere finds the same file

    async def working(host: LocalHost) -> Any:
        return (await settle(host, "rel")).output, (await settle(host, "dotted")).output

    assert run(db, working) == ({"echo": 3}, {"echo": 3})


# --- 3. a rerun with the same run id ----------------------------------------------------


def test_a_rerun_must_have_the_options_of_the_stored_run(
    tmp_path: Path, local_db: Path | str
) -> None:
    one = tools_file(tmp_path / "a", "tools_one", ECHO_ONLY)
    two = tools_file(tmp_path / "b", "tools_two", ECHO_ONLY)
    spec = "flow: e\ntools: {echo: {}}\nsteps:\n  - {id: a, call_tool: {tool: echo}}\n"
    other = spec.replace("flow: e", "flow: e\nversion: 2")
    capped = budget(steps=5)

    async def body(host: LocalHost) -> Any:
        await host.start(spec, {"x": 1}, "r", tools=str(one), budget=capped)
        same = [
            await host.start(spec, {"x": 1}, "r", tools=str(one), budget=capped),
            await host.start(spec, {"x": 1}, "r"),  # no tools, no budget: not compared
        ]
        errors = []
        for args, options in (
            ((spec, {"x": 2}), {}),
            ((other, {"x": 1}), {}),
            ((spec, {"x": 1}), {"tools": str(two)}),
            ((spec, {"x": 1}), {"budget": budget(steps=6)}),
            ((other, {"x": 2}), {"tools": str(two)}),
        ):
            with pytest.raises(HostError) as refused:
                await host.start(*args, "r", **options)
            errors.append(str(refused.value))
        return same, errors, len(await host.records("r"))

    same, errors, records = run(local_db, body)
    assert same == ["r", "r"]
    assert errors == [
        "run 'r' already exists with a different input",
        "run 'r' already exists with a different flow spec",
        f"run 'r' already exists with a different tools module (it has '{one.resolve()}',"
        f" not '{two.resolve()}')",
        'run \'r\' already exists with a different budget (it has {"steps":5}, not {"steps":6})',
        "run 'r' already exists with a different input and flow spec and tools module"
        f" (it has '{one.resolve()}', not '{two.resolve()}')",
    ]
    assert records == 2  # run.started and its one effect: nothing more was written


# --- 8. answers by relative key or by step ----------------------------------------------

QUESTIONS = """
flow: ask
steps:
  - {id: decide, ask_human: {question: "page?", options: [page, ignore]}}
  - id: each
    for_each:
      items: [1, 2]
      steps: [{id: q, ask_human: {question: "ok ${item}?"}}]
output: "${ {decide: steps.decide.answer, each: steps.each.output} }"
"""


def test_an_answer_may_name_its_question_relative_to_the_run_or_by_its_step(
    tmp_path: Path,
    local_db: Path | str,
) -> None:
    async def body(host: LocalHost) -> Any:
        first = await host.start(QUESTIONS, {}, "r-1")
        await host.answer(first, "decide#1", "page")  # relative to the run
        second = await host.start(QUESTIONS, {}, "r-2")
        await host.answer(second, "decide", "ignore")  # the step's one open question
        errors = []
        for key in ("q", "nope", "decide"):
            with pytest.raises(HostError) as refused:
                await host.answer(second, key, "x")
            errors.append(str(refused.value))
        await host.answer(second, "each[1]/q#1", "b")
        await host.answer(second, "r-2/each[0]/q#1", "a")  # the full key still works
        return errors, await host.run(second), await host.records(first)

    errors, row, records = run(local_db, body)
    assert errors[0] == (
        "step 'q' of run 'r-2' has 2 open questions (each[0]/q#1, each[1]/q#1):"
        " give the key of the one to answer"
    )
    assert errors[1].startswith("human-answered for nope: no such effect is pending")
    assert errors[1].endswith("(open questions of run 'r-2': each[0]/q#1, each[1]/q#1)")
    assert errors[2].endswith("(open questions of run 'r-2': each[0]/q#1, each[1]/q#1)")
    assert (row.status, row.output) == ("completed", {"decide": "ignore", "each": ["a", "b"]})
    answered = [r.data for r in records if r.type == "event.reported"]
    assert answered[0]["idempotencyKey"] == "r-1/decide#1"


# --- 9. signals a run never waits for ---------------------------------------------------


def test_a_signal_no_step_waits_for_is_refused_and_buffered_ones_are_shown(
    tmp_path: Path,
    local_db: Path | str,
) -> None:
    parent = """
flow: sig
steps:
  - {id: nap, sleep: {for_ms: 60000}}
  - {id: go, await_signal: {signal: go}}
  - {id: kid, run_subflow: {flow: kid}}
"""
    child = tmp_path / "kid.yaml"
    child.write_text("flow: kid\nsteps:\n  - {id: w, await_signal: {signal: child-done}}\n")

    async def body(host: LocalHost) -> Any:
        rid = await host.start(parent, {}, "s", flows=[child])
        with pytest.raises(HostError) as refused:
            await host.signal(rid, "og", {"typo": True})
        await host.signal(rid, "go", {"n": 1})
        await host.signal(rid, "child-done")  # declared by a subflow it can start
        nap = await host.start("flow: n\nsteps:\n  - {id: s, sleep: {for_ms: 1}}\n", {}, "n")
        with pytest.raises(HostError) as none:
            await host.signal(nap, "go")
        return str(refused.value), str(none.value), await host.show(rid)

    refused, none, info = run(local_db, body)
    assert refused == (
        "run 's' never waits for signal 'og': its flow and subflows declare 'child-done', 'go'"
    )
    assert none == "run 'n' never waits for signal 'go': it declares no signals"
    assert info["buffered"] == [
        {"signal": "child-done", "payload": None},
        {"signal": "go", "payload": {"n": 1}},
    ]


# --- 10. a budget that caps the run -----------------------------------------------------


# SQLite only: it reads or doctors the SQLite file itself.
def test_a_start_budget_caps_the_run_is_stored_and_survives_a_restart(tmp_path: Path) -> None:
    tools = tools_file(tmp_path, "echo_tools", ECHO_ONLY)
    spec = """
flow: long
budget: {steps: 50}
tools: {echo: {class: readonly}}
steps:
  - {id: a, call_tool: {tool: echo}}
  - {id: b, call_tool: {tool: echo}}
  - {id: c, call_tool: {tool: echo}}
"""
    db = tmp_path / "b.db"

    async def starting(host: LocalHost) -> Any:
        rid = await host.start(spec, {}, "cap", tools=str(tools), budget=budget(steps=2))
        errors = []
        for bad in (budget(steps=-1), {"steps": 2}, budget(wall_clock_ms=True)):
            with pytest.raises(HostError) as refused:
                await host.start(spec, {}, "other", tools=str(tools), budget=bad)  # type: ignore[arg-type]
            errors.append(str(refused.value))
        return rid, errors, (await host.show(rid))["budget"]

    rid, errors, shown = run(db, starting)
    assert errors == [
        "budget.steps must be an integer from 0 to 1,000,000,000,000,000 or None, not -1",
        "budget must be a flowcore.Budget or None, not dict",
        "budget.wall_clock_ms must be an integer from 0 to 316,224,000,000 or None, not True",
    ]
    assert shown["stepsLeft"] == 1  # the first call is charged: 2 - 1
    with sqlite3.connect(db) as conn:
        (stored,) = conn.execute("SELECT budget FROM runs WHERE run_id = 'cap'").fetchone()
    assert stored == '{"steps":2}'

    async def working(host: LocalHost) -> Any:  # a new process: the cap comes back with the run
        return await settle(host, rid), await host.records(rid)

    row, records = run(db, working)
    assert row.status == "budget-exhausted"
    assert records[0].data["budget"] == {"steps": 2}
    report = flowcore.replay(records, flowcore.parse_flow(spec))
    assert report.status == "budget-exhausted" and report.steps_used == 2
