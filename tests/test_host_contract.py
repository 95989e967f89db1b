"""Both hosts satisfy the ``Host`` contract (``flowcore_handlers.Host``).

mypy checks it statically (the two functions below); the tests check it at
run time: every member of the protocol is a method of both host classes with
parameters a call written against the protocol can use, and a refusal is one
typed error that says which operation and why.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest

import flowcore
import flowcore_handlers as fh
from flowcore_handlers import Host, HostFailure, HostRefusal
from flowcore_local import HostError, LocalHost
from flowcore_temporal import TemporalHost, TemporalHostError, TemporalRefusal


def _local_is_a_host(host: LocalHost) -> Host:
    return host  # mypy: LocalHost satisfies Host


def _temporal_is_a_host(host: TemporalHost) -> Host:
    return host  # mypy: TemporalHost satisfies Host


AREAS = (fh.RunCommands, fh.ScheduledCalls, fh.Schedules, fh.RunReads)


def _members(protocol: type) -> dict[str, Callable[..., Any]]:
    return {
        name: value
        for name, value in vars(protocol).items()
        if not name.startswith("_") and inspect.isfunction(value)
    }


def _mismatches(name: str, wanted: Callable[..., Any], found: Any) -> list[str]:
    """What keeps a call written against ``wanted`` from working on ``found``."""
    if not inspect.isfunction(found):
        return [f"{name}: not a method"]
    out: list[str] = []
    if inspect.iscoroutinefunction(wanted) != inspect.iscoroutinefunction(found):
        out.append(f"{name}: async def on one side only")
    if not inspect.iscoroutinefunction(wanted) and not inspect.isasyncgenfunction(found):
        out.append(f"{name}: should be an async generator")
    want = list(inspect.signature(wanted).parameters.values())[1:]
    have = inspect.signature(found).parameters
    positional = [p.name for p in list(have.values())[1:] if p.kind is p.POSITIONAL_OR_KEYWORD]
    # ``**options`` takes any keyword-only argument (``update_with_start``'s start options).
    takes_any = any(p.kind is p.VAR_KEYWORD for p in have.values())
    for i, param in enumerate(want):
        other = have.get(param.name)
        if other is None and param.kind is param.KEYWORD_ONLY and takes_any:
            continue
        if other is None:
            out.append(f"{name}: no parameter {param.name}")
            continue
        if param.kind is param.POSITIONAL_OR_KEYWORD and positional[i : i + 1] != [param.name]:
            out.append(f"{name}: {param.name} is not positional parameter {i + 1}")
        if param.kind is param.KEYWORD_ONLY and other.kind not in (
            other.KEYWORD_ONLY,
            other.POSITIONAL_OR_KEYWORD,
        ):
            out.append(f"{name}: {param.name} cannot be given by keyword")
        if param.default is not param.empty and other.default != param.default:
            out.append(f"{name}: {param.name} defaults to {other.default!r}, not {param.default!r}")
    named = {p.name for p in want}
    for extra in list(have.values())[1:]:
        if extra.name in named or extra.kind in (extra.VAR_POSITIONAL, extra.VAR_KEYWORD):
            continue
        if extra.default is extra.empty:
            out.append(f"{name}: its own parameter {extra.name} has no default")
    return out


def test_the_contract_covers_every_area() -> None:
    members = {name for area in AREAS for name in _members(area)}
    assert set(_members(Host)) == set()  # Host only combines the areas
    assert {"start", "resume", "delete", "prune", "scheduled", "schedule_names"} <= members
    assert {"find_runs", "show", "events", "export", "open_questions", "waits"} <= members
    assert {"update", "update_result", "updates", "query"} <= members
    assert {"update_with_start", "signal_with_start"} <= members
    assert len(members) == 42


@pytest.mark.parametrize("host", [LocalHost, TemporalHost], ids=["local", "temporal"])
def test_each_host_has_every_member_of_the_contract(host: type) -> None:
    problems = [
        problem
        for area in AREAS
        for name, wanted in _members(area).items()
        for problem in _mismatches(name, wanted, getattr(host, name, None))
    ]
    assert problems == []


def test_the_check_catches_a_host_that_differs() -> None:
    """The run-time check is not vacuous: a method with other parameters is caught."""

    async def cancel(self: Any, run: str, reason: str = "x", *, why: str) -> None:
        """cancel() as it must not be."""

    async def show(self: Any, run_id: str) -> dict[str, Any]:
        return {}

    wanted = _members(fh.RunCommands)["cancel"]
    assert _mismatches("cancel", wanted, cancel) == [
        "cancel: no parameter run_id",
        "cancel: reason defaults to 'x', not ''",
        "cancel: its own parameter run has no default",
        "cancel: its own parameter why has no default",
    ]
    assert _mismatches("events", _members(fh.RunReads)["events"], show) != []
    # ``**options`` takes the keyword-only arguments, never a positional one.
    wanted = _members(fh.RunCommands)["signal_with_start"]

    async def with_options(
        self: Any,
        spec: Any,
        input: Any,
        run_id: str,
        name: str,
        payload: Any = None,
        key: str | None = None,
        *,
        on_conflict: str = "use-existing",
        **start: Any,
    ) -> str:
        return run_id

    async def no_key(
        self: Any, spec: Any, input: Any, run_id: str, name: str, payload: Any = None, **start: Any
    ) -> str:
        return run_id

    assert _mismatches("signal_with_start", wanted, with_options) == []
    assert _mismatches("signal_with_start", wanted, no_key) == [
        "signal_with_start: no parameter key"
    ]


def test_a_refusal_is_one_typed_error_that_says_why() -> None:
    refusal = TemporalRefusal("prune runs", "the namespace's retention period removes them")
    assert isinstance(refusal, HostRefusal)
    assert isinstance(refusal, TemporalHostError)  # what the Temporal command already catches
    assert isinstance(refusal, HostFailure)
    assert (refusal.operation, refusal.why, refusal.host) == (
        "prune runs",
        "the namespace's retention period removes them",
        "Temporal",
    )
    assert str(refusal) == (
        "Temporal host cannot prune runs: the namespace's retention period removes them"
    )
    # Every error either host raises for a request shares the one base.
    assert issubclass(HostError, HostFailure)
    assert issubclass(TemporalHostError, HostFailure)


def _budget(**limits: Any) -> flowcore.Budget:
    return flowcore.Budget(**limits)


def test_a_temporal_start_takes_the_budget_the_contract_gives() -> None:
    """``start(budget=flowcore.Budget(...))`` on Temporal: translated to the run's wire
    budget, or refused when it caps what a Temporal run does not count."""
    from flowcore_temporal._host import _wire_budget

    assert _wire_budget(None) is None
    assert _wire_budget({"steps": 3}) == {"steps": 3}
    budget = _budget(steps=3, cost_minor_units=50, wall_clock_ms=1_000)
    assert _wire_budget(budget) == {"steps": 3, "costMinorUnits": 50, "wallClockMs": 1_000}
    with pytest.raises(TemporalRefusal, match="cannot start a run with a tokens budget"):
        _wire_budget(_budget(steps=3, tokens=10))


def test_each_host_raises_its_own_subclass_of_each_typed_failure() -> None:
    """A surface maps a failure by its contract type; the host's own error class
    still catches it, and the message is the host's own, word for word."""
    import flowcore_local as fl
    import flowcore_temporal._host as th
    from flowcore_temporal._host_base import _NotPending

    cases = [
        (fl.LocalUnknownRun("r", "no run 'r' in the database"), fh.UnknownRun, HostError),
        (fl.LocalRunSettled("r", "failed", "x"), fh.RunSettled, HostError),
        (fl.NothingToCancel("r", "run 'r' has settled"), fh.NothingToCancel, HostError),
        (fl.LocalUnknownSchedule("s", "no schedule 's'"), fh.UnknownSchedule, HostError),
        (th.TemporalUnknownRun("r", "no run 'r' on Temporal"), fh.UnknownRun, TemporalHostError),
        (th.TemporalRunSettled("r", None, "x"), fh.RunSettled, TemporalHostError),
        (th.TemporalUnknownSchedule("s", "no schedule"), fh.UnknownSchedule, TemporalHostError),
        (_NotPending("r/x#1"), fh.NotPending, TemporalHostError),
    ]
    for error, contract, own in cases:
        assert isinstance(error, contract) and isinstance(error, own), error
        assert isinstance(error, HostFailure)
    assert str(cases[0][0]) == "no run 'r' in the database"
    assert (cases[1][0].run_id, cases[1][0].status) == ("r", "failed")  # type: ignore[attr-defined]
    assert str(fh.NotPending("r/x#1")) == "scheduled call 'r/x#1' is not pending"
    assert fh.RUN_STATUSES == (
        "running",
        "completed",
        "failed",
        "cancelled",
        "budget-exhausted",
        "terminated",
        "timed-out",
    )
    assert fh.status_problem("timed-out") is None
    assert fh.status_problem("Completed") == (
        "unknown run status 'Completed': one of running, completed, failed, cancelled,"
        " budget-exhausted, terminated, timed-out"
    )
