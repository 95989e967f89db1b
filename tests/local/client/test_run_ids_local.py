"""Run ids on the local host: the child namespace is reserved, and one run's
trouble stays that run's (a real SQLite file).

A child run is named by its parent's key (``X2/child#1``). A top-level id
may not take that shape; a database that holds such a run anyway (written
before ids were checked) must not stop the worker: the parent's
``run-subflow`` fails, saying why, and every other run goes on.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import flowcore
from flowcore_handlers import Registry
from flowcore_local import HostError, LocalHost

from ..local_helpers import dispatch_to_ghost, work_until

KID = """
flow: kid
tools: {echo: {class: readonly}}
steps:
  - {id: e, call_tool: {tool: echo, input: "${input}"}}
output: "${steps.e.output}"
"""

PARENT = """
flow: parent
steps:
  - {id: child, run_subflow: {flow: kid, input: 7}}
output: "${steps.child.output}"
"""

REGISTRY = Registry(tools={"echo": lambda call: {"echo": call.input}})


def files(tmp_path: Path) -> tuple[Path, Path]:
    kid, parent = tmp_path / "kid.yaml", tmp_path / "parent.yaml"
    kid.write_text(KID)
    parent.write_text(PARENT)
    return kid, parent


def in_host(db: Path | str, body: Any) -> Any:
    async def main() -> Any:
        async with LocalHost(db, registry=REGISTRY) as host:
            return await body(host)

    return asyncio.run(main())


@pytest.mark.parametrize("run_id", ["X2/child#1", "a/b", "a#1", "/", "#"])
def test_a_child_shaped_id_is_refused_before_anything_is_written(
    tmp_path: Path, local_db: Path | str, run_id: str
) -> None:
    kid, _ = files(tmp_path)

    async def body(host: LocalHost) -> None:
        with pytest.raises(flowcore.RunIdError) as caught:
            await host.start(kid, 1, run_id)
        assert caught.value.run_id == run_id
        assert repr(run_id) in str(caught.value)
        assert "'/' and '#' are reserved" in str(caught.value)
        assert await host.runs() == []

    in_host(local_db, body)


def test_a_fork_may_not_take_a_child_runs_id_either(tmp_path: Path, local_db: Path | str) -> None:
    kid, _ = files(tmp_path)

    async def body(host: LocalHost) -> None:
        await host.start(kid, 1, "src")
        await host.work(until_settled="src")
        with pytest.raises(flowcore.RunIdError, match="reserved"):
            await host.fork("src", at=1, new_run_id="X2/child#1")
        assert [r.run_id for r in await host.runs()] == ["src"]

    in_host(local_db, body)


def test_an_id_without_them_starts_as_before(tmp_path: Path, local_db: Path | str) -> None:
    kid, _ = files(tmp_path)

    async def body(host: LocalHost) -> None:
        assert await host.start(kid, 1, "X2-child.1@a") == "X2-child.1@a"

    in_host(local_db, body)


def plant(host: LocalHost, kid: Path, run_id: str, input: Any, budget: Any = None) -> None:
    """A run named ``run_id`` written straight into the store (as another process,
    or a flowcore before ids were checked, could have)."""
    store = host.store
    now = host.now()
    with store.tx():
        flow = store.register_flow(kid.read_text(), str(kid), now)
        store.start_run(flow, input, run_id, now, None, budget=budget)


@pytest.mark.parametrize("same_options", [False, True], ids=["other-options", "child-options"])
def test_a_run_holding_a_childs_id_fails_that_parent_and_nothing_else(
    tmp_path: Path, local_db: Path | str, same_options: bool
) -> None:
    """The scenario: bob's run is ``X2/child#1``; alice's parent ``X2`` then wants
    that child. With other options the worker used to die (``already exists with a
    different budget``); with the child's exact options the parent waited for ever
    on a run that is not its child. Now the parent's step fails, and a third run
    completes on the same worker."""
    kid, parent = files(tmp_path)

    async def body(host: LocalHost) -> dict[str, Any]:
        if same_options:  # the budget and input the child would get
            budget = flowcore.BudgetRemaining(steps=flowcore.DEFAULT_STEP_BUDGET - 1)
            plant(host, kid, "X2/child#1", 7, budget)
        else:
            plant(host, kid, "X2/child#1", 7)
        alice = await host.start(parent, None, "X2", flows=[kid], principal="alice")
        other = await host.start(kid, 3, "other")

        async def settled() -> bool:
            rows = [await host.run(r) for r in (alice, other)]
            return all(r.status != "running" for r in rows)

        await work_until(host, settled)
        return {
            "alice": await host.run(alice),
            "other": await host.run(other),
            "planted": await host.run("X2/child#1"),
            "children": await host.children(alice),
        }

    got = in_host(local_db, body)
    assert got["other"].status == "completed"
    assert got["other"].output == {"echo": 3}
    alice = got["alice"]
    assert alice.status == "failed"
    assert alice.error["type"] == "run-id-taken"
    assert "'X2/child#1'" in alice.error["message"]
    assert got["children"] == []  # the planted run was not taken over
    assert got["planted"].parent_run is None


def test_an_error_starting_one_child_fails_that_run_and_the_worker_goes_on(
    tmp_path: Path, local_db: Path | str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Anything unforeseen while starting one run's child (here the store raises)
    fails that effect with ``host-error`` and why; the other runs go on."""
    kid, parent = files(tmp_path)

    async def body(host: LocalHost) -> dict[str, Any]:
        alice = await host.start(parent, None, "X2", flows=[kid])
        other = await host.start(kid, 3, "other")
        real = host.store.start_run

        def start_run(flow: Any, input: Any, run_id: str, *args: Any, **kwargs: Any) -> Any:
            if run_id == "X2/child#1":
                raise RuntimeError("disk on fire")
            return real(flow, input, run_id, *args, **kwargs)

        monkeypatch.setattr(host.store, "start_run", start_run)

        async def settled() -> bool:
            rows = [await host.run(r) for r in (alice, other)]
            return all(r.status != "running" for r in rows)

        await work_until(host, settled)
        return {"alice": await host.run(alice), "other": await host.run(other)}

    got = in_host(local_db, body)
    assert got["other"].status == "completed"
    assert got["alice"].status == "failed"
    assert got["alice"].error["type"] == "host-error"
    assert "RuntimeError: disk on fire" in got["alice"].error["message"]


def test_an_effect_that_cannot_even_fail_is_parked_with_why(
    tmp_path: Path, local_db: Path | str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the failed effect cannot be applied either, the effect is parked in the
    dead letters with the reason (``show``), and the worker goes on with the others."""
    kid, parent = files(tmp_path)

    async def body(host: LocalHost) -> dict[str, Any]:
        alice = await host.start(parent, None, "X2", flows=[kid])
        other = await host.start(kid, 3, "other")
        store = host.store
        real_start, real_apply = store.start_run, store.apply

        def start_run(flow: Any, input: Any, run_id: str, *args: Any, **kwargs: Any) -> Any:
            if run_id == "X2/child#1":
                raise RuntimeError("disk on fire")
            return real_start(flow, input, run_id, *args, **kwargs)

        def apply(run_id: str, event: Any, now: int) -> Any:
            if run_id == "X2":
                raise RuntimeError("state unreadable")
            return real_apply(run_id, event, now)

        monkeypatch.setattr(store, "start_run", start_run)
        monkeypatch.setattr(store, "apply", apply)

        async def done() -> bool:
            return (await host.run(other)).status != "running"

        await work_until(host, done)
        # Parked: no round takes it up again.
        stop = asyncio.Event()
        worker = asyncio.create_task(host.work(stop))
        await asyncio.sleep(0.3)
        stop.set()
        await worker
        monkeypatch.undo()
        return {"other": await host.run(other), "show": await host.show(alice)}

    got = in_host(local_db, body)
    assert got["other"].status == "completed"
    shown = got["show"]
    assert shown["status"] == "running"
    [parked] = shown["deadLetters"]
    assert parked["key"] == "X2/child#1"
    assert "RuntimeError: disk on fire" in parked["note"]
    assert "state unreadable" in parked["note"]
    assert shown["pending"] == []


def test_a_string_naming_a_spec_file_is_read_as_that_file(
    tmp_path: Path, local_db: Path | str
) -> None:
    kid, _ = files(tmp_path)

    async def body(host: LocalHost) -> None:
        rid = await host.start(str(kid), 1, "by-name")
        assert (await host.run(rid)).flow_id == "kid"
        with pytest.raises(HostError, match=r"no spec file 'reminders.yaml'.*pathlib.Path"):
            await host.start("reminders.yaml", 1)
        assert [r.run_id for r in await host.runs()] == ["by-name"]

    in_host(local_db, body)


SAFE_CALL = """
flow: safe
tools: {echo: {class: readonly}}
steps:
  - {id: e, call_tool: {tool: echo, input: 1}}
output: "${steps.e.output}"
"""

UNSAFE_CALL = """
flow: unsafe
tools: {charge: {}}
steps:
  - {id: c, call_tool: {tool: charge, input: 1}}
"""


def test_a_recovery_that_raises_for_one_run_leaves_the_others_recovered(
    tmp_path: Path, local_db: Path | str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Work of a dead worker: the recovery of one run raising (its events cannot be
    applied) parks that run's effect, with why; the other run's work runs again."""
    registry = Registry(tools={"echo": lambda call: call.input, "charge": lambda call: "ok"})
    db = local_db

    async def begin() -> None:
        async with LocalHost(db, registry=registry) as host:
            await host.start(SAFE_CALL, None, "good")
            await host.start(UNSAFE_CALL, None, "bad")

    asyncio.run(begin())
    assert sorted(dispatch_to_ghost(db)) == ["bad/c#1", "good/e#1"]

    async def recover() -> dict[str, Any]:
        async with LocalHost(db, registry=registry, lease_ms=300) as host:
            store = host.store
            real = store.apply

            def apply(run_id: str, event: Any, now: int) -> Any:
                if run_id == "bad":
                    raise RuntimeError("state unreadable")
                return real(run_id, event, now)

            monkeypatch.setattr(store, "apply", apply)

            async def done() -> bool:
                return (await host.run("good")).status != "running"

            await work_until(host, done)
            monkeypatch.undo()
            return {"good": await host.run("good"), "bad": await host.show("bad")}

    got = asyncio.run(recover())
    assert (got["good"].status, got["good"].output) == ("completed", 1)
    assert got["bad"]["status"] == "running"
    [parked] = got["bad"]["deadLetters"]
    assert parked["key"] == "bad/c#1" and "RuntimeError: state unreadable" in parked["note"]
