"""The Temporal host is split by role, and its parts stay small (specs/temporal.md,
"Module map").

``TemporalHost`` is made of a client (its commands), reads and administration
(schedules, retention), each its own class in its own module, over what they
share (``TemporalBase``); ``FlowcoreWorkflow`` of its parts (the state, clock
and result; events in and effects out; carrying a long run over; the signal,
update and query handlers), the run itself in ``_workflow``. No module of the
package is over 800 lines, no function over 120, no class with more than 40
methods (``benchmarks/code_shape.py hosts`` prints the same measures). The
public names are the ones the package always had. No Temporal server is needed.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

pytest.importorskip("temporalio")

import flowcore_temporal
from flowcore_temporal import FlowcoreWorkflow, TemporalHost

from ..shape import over_limits

PACKAGE = Path(flowcore_temporal.__file__).parent


def test_no_module_function_or_class_of_the_temporal_host_is_over_its_limit() -> None:
    assert over_limits(sorted(PACKAGE.glob("*.py"))) == []


def test_each_role_of_the_temporal_host_is_its_own_class_and_module() -> None:
    where = {
        "start": "_client",
        "signal": "_client",
        "fork": "_client",
        "upgrade": "_client",
        "add_scheduled": "_client",
        "update_with_start": "_client",
        "signal_with_start": "_client",
        "update": "_updates",
        "query": "_updates",
        "find_runs": "_reads",
        "summary": "_reads",
        "show": "_reads",
        "events": "_reads",
        "log": "_reads",
        "add_schedules": "_admin",
        "pause_schedule": "_admin",
        "prune": "_admin",
        "_update": "_host_base",
        "histories": "_host_base",
    }
    for name, module in where.items():
        assert getattr(TemporalHost, name).__module__ == f"flowcore_temporal.{module}", name
    roles = {cls.__name__: cls.__module__ for cls in TemporalHost.__mro__[1:-1]}
    assert roles == {
        "TemporalClient": "flowcore_temporal._client",
        "TemporalUpdates": "flowcore_temporal._updates",
        "TemporalReads": "flowcore_temporal._reads",
        "TemporalAdmin": "flowcore_temporal._admin",
        "TemporalBase": "flowcore_temporal._host_base",
    }
    # What the host class itself adds is nothing but its roles.
    assert [n for n in vars(TemporalHost) if not n.startswith("__")] == []


def test_each_part_of_the_workflow_is_its_own_class_and_module() -> None:
    where = {
        "run": "_workflow",
        "_cancel_requested": "_workflow",
        "_now": "_workflow_base",
        "_result": "_workflow_base",
        "_apply": "_workflow_effects",
        "_follow": "_workflow_effects",
        "_subflow": "_workflow_effects",
        "_switch": "_workflow_carry",
        "_continue_as_new": "_workflow_carry",
        "answer": "_workflow_handlers",
        "status": "_workflow_handlers",
        "_on_update": "_workflow_updates",
        "_on_query": "_workflow_updates",
    }
    for name, module in where.items():
        assert getattr(FlowcoreWorkflow, name).__module__ == f"flowcore_temporal.{module}", name
    parts = {cls.__name__: cls.__module__ for cls in FlowcoreWorkflow.__mro__[1:-1]}
    assert parts == {
        "WorkflowUpdates": "flowcore_temporal._workflow_updates",
        "WorkflowHandlers": "flowcore_temporal._workflow_handlers",
        "WorkflowCarrying": "flowcore_temporal._workflow_carry",
        "WorkflowEffects": "flowcore_temporal._workflow_effects",
        "WorkflowBase": "flowcore_temporal._workflow_base",
    }


# What flowcore_temporal exports, and every public method of TemporalHost, as users
# call them (pinned: the split keeps them all).
EXPORTS = (
    "ACTIVITY_NAME ANSWER_BY_UPDATE ANSWER_UPDATE DEFAULT_TASK_QUEUE"
    " FlowcoreActivities FlowcoreWorkflow"
    " LIBRARIES LOG_QUERY NOT_PENDING_ERROR NoSignalWait PASSTHROUGH_MODULES QUESTIONS_QUERY"
    " RUN_STATUS_ACTIVITY RunArgs RunArgsError SCHEDULED_QUERY SCHEDULED_UPDATE"
    " SIGNAL_KEYS_ATTRIBUTE STATUS_QUERY SpecNotDeployed SpecProblem SpecRegistry"
    " TemporalHost TemporalHostError TemporalRefusal TemporalRunSettled TemporalUnavailable"
    " TemporalUnknownRun TemporalUnknownSchedule ToolLimit WAITS_QUERY WORKFLOW_NAME"
    " check_run_args collect_flows connect history_to_log new_worker records_from_wire"
    " run_args_from_wire sandbox_restrictions tool_queue tool_workers workflow_runner"
).split()

PUBLIC = (
    "add_scheduled add_schedules answer backfill_schedule cancel cancel_scheduled"
    " child_run_id connect count_runs delete delete_schedule events export find_runs flow fork"
    " forked_from"
    " handle histories history log metadata now open_questions pause_schedule progress"
    " progress_records prune query questions"
    " records replay_scheduled result resume resume_schedule run_scheduled_now runs schedule"
    " schedule_names"
    " scheduled schedules show signal signal_key signal_with_start start status summary"
    " trigger_schedule update update_result update_with_start updates upgrade waits"
).split()


def test_the_public_api_of_the_temporal_host_is_kept() -> None:
    assert sorted(flowcore_temporal.__all__) == sorted(EXPORTS)
    for name in EXPORTS:
        assert getattr(flowcore_temporal, name) is not None, name
    public = sorted(n for n in dir(TemporalHost) if not n.startswith("_"))
    assert public == sorted(PUBLIC)
    assert list(inspect.signature(TemporalHost).parameters) == [
        "client",
        "task_queue",
        "tool_limits",
    ]
    assert FlowcoreWorkflow.__module__ == "flowcore_temporal._workflow"
    assert TemporalHost.__module__ == "flowcore_temporal._host"
