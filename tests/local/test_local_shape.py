"""The local host is split by role, and its parts stay small (specs/local.md §18).

``LocalHost`` is made of a client (its commands and reads), administration
(schedules, retention) and a worker (the loop and recovery, over execution and
the group commit), each its own class in its own module; its ``Store`` of
layers by concern. No module of the package is over 800 lines, no function
over 120, no class with more than 40 methods (``benchmarks/code_shape.py
hosts`` prints the same measures). The public API is the one it always had.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import flowcore_local
from flowcore_local import LocalHost
from flowcore_local._store import Store

from ..shape import over_limits

PACKAGE = Path(flowcore_local.__file__).parent


def test_no_module_function_or_class_of_the_local_host_is_over_its_limit() -> None:
    assert over_limits(sorted(PACKAGE.glob("*.py"))) == []


def test_each_role_of_the_local_host_is_its_own_class_and_module() -> None:
    where = {
        "start": "_client",
        "signal": "_client",
        "fork": "_client",
        "add_scheduled": "_client",
        "update": "_updates",
        "query": "_updates",
        "show": "_reads",
        "events": "_reads",
        "progress": "_reads",
        "work": "_worker",
        "_recover": "_worker",
        "_execute": "_execution",
        "_commit": "_execution",
        "add_schedule": "_admin",
        "prune": "_admin",
        "open": "_base",
    }
    for name, module in where.items():
        assert getattr(LocalHost, name).__module__ == f"flowcore_local.{module}", name
    roles = {cls.__name__: cls.__module__ for cls in LocalHost.__mro__[1:-1]}
    assert roles == {
        "LocalUpdates": "flowcore_local._updates",
        "LocalClient": "flowcore_local._client",
        "LocalReads": "flowcore_local._reads",
        "LocalAdmin": "flowcore_local._admin",
        "LocalWorker": "flowcore_local._worker",
        "Execution": "flowcore_local._execution",
        "HostBase": "flowcore_local._base",
    }
    # What the host class itself adds is nothing but its roles.
    assert [n for n in vars(LocalHost) if not n.startswith("__")] == []


def test_the_store_is_layered_by_concern() -> None:
    where = {
        "tx": "_store_base",
        "savepoint": "_store_base",
        "flow_by_hash": "_store_flows",
        "register_flow": "_store_flows",
        "apply": "_store_runs",
        "start_run": "_store_runs",
        "claim_ready_work": "_store_outbox",
        "extend_leases": "_store_outbox",
        "rewind": "_store_rewind",
        "fork_run": "_store_rewind",
    }
    for name, module in where.items():
        assert getattr(Store, name).__module__ == f"flowcore_local.{module}", name


# Every public method of LocalHost, as users call it (pinned: the split keeps them all).
PUBLIC = (
    "add_schedule add_scheduled add_schedules answer archived backfill_schedule cancel"
    " cancel_scheduled children close deduplicated delete delete_schedule events export"
    " count_runs find_runs flow flow_by_hash fork idle metadata metadata_of open open_questions"
    " page_runs pause_schedule progress progress_records prune query questions records"
    " replay_scheduled"
    " resume"
    " resume_schedule run"
    " run_scheduled_now runs schedule schedule_names scheduled schedules show signal"
    " signal_key signal_with_start start store summary trigger_schedule"
    " trim_scheduled update update_result update_with_start updates upgrade vacuum wait waits work"
).split()


def test_the_public_api_of_the_local_host_is_kept() -> None:
    public = sorted(n for n in dir(LocalHost) if not n.startswith("_"))
    assert public == sorted(PUBLIC)
    start = inspect.signature(LocalHost.start)
    assert list(start.parameters) == [
        "self",
        "spec",
        "input",
        "run_id",
        "tools",
        "flows",
        "budget",
        "principal",
        "metadata",
        "priority",
        "dedup_key",
        "on_conflict",
    ]
    init = inspect.signature(LocalHost)
    assert list(init.parameters) == [
        "db",
        "tools",
        "durability",
        "concurrency",
        "lease_ms",
        "max_recoveries",
        "poll_ms",
        "registry",
        "scheduled_retention",
        "clock",
        "retention_ms",
        "tracing",
        "tool_limits",
        "authorize",
        "ids",
    ]
