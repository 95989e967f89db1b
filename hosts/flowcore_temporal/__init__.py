"""flowcore on Temporal: one generic workflow runs the pure interpreter.

Start a worker (it runs the workflow and the handlers of a tools module, the
same module the local host uses), then start runs through ``TemporalHost``::

    client = await flowcore_temporal.connect("localhost:7233")
    async with flowcore_temporal.new_worker(client, tools="myapp.tools"):
        host = flowcore_temporal.TemporalHost(client)
        run_id = await host.start(Path("flow.yaml"), {"x": 1})
        print(await host.result(run_id))

``specs/temporal.md`` describes the mapping of effects onto Temporal.

Importing this package is cheap: the names that need temporalio load on first
use, so ``flowcore temporal --help`` (and the workflow sandbox, which imports
the package for the workflow) do not pay for the client and worker modules.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._registry import SpecNotDeployed, SpecProblem, SpecRegistry
from ._types import (
    ACTIVITY_NAME,
    ANSWER_BY_UPDATE,
    ANSWER_UPDATE,
    DEFAULT_TASK_QUEUE,
    LOG_QUERY,
    NOT_PENDING_ERROR,
    QUESTIONS_QUERY,
    RUN_STATUS_ACTIVITY,
    SCHEDULED_QUERY,
    SCHEDULED_UPDATE,
    SIGNAL_KEYS_ATTRIBUTE,
    STATUS_QUERY,
    WAITS_QUERY,
    WORKFLOW_NAME,
    RunArgs,
    RunArgsError,
    check_run_args,
    run_args_from_wire,
    tool_queue,
)

if TYPE_CHECKING:
    from flowcore_handlers import ToolLimit

    from ._activities import FlowcoreActivities
    from ._host import (
        NoSignalWait,
        TemporalHost,
        TemporalHostError,
        TemporalRefusal,
        TemporalRunSettled,
        TemporalUnavailable,
        TemporalUnknownRun,
        TemporalUnknownSchedule,
        collect_flows,
        connect,
        history_to_log,
        records_from_wire,
    )
    from ._worker import (
        LIBRARIES,
        PASSTHROUGH_MODULES,
        new_worker,
        sandbox_restrictions,
        tool_workers,
        workflow_runner,
    )
    from ._workflow import FlowcoreWorkflow

_LAZY = {
    "FlowcoreActivities": "._activities",
    "NoSignalWait": "._host",
    "TemporalHost": "._host",
    "TemporalHostError": "._host",
    "TemporalRefusal": "._host",
    "TemporalRunSettled": "._host",
    "TemporalUnavailable": "._host",
    "TemporalUnknownRun": "._host",
    "TemporalUnknownSchedule": "._host",
    "collect_flows": "._host",
    "connect": "._host",
    "history_to_log": "._host",
    "records_from_wire": "._host",
    "LIBRARIES": "._worker",
    "PASSTHROUGH_MODULES": "._worker",
    "new_worker": "._worker",
    "sandbox_restrictions": "._worker",
    "tool_workers": "._worker",
    "workflow_runner": "._worker",
    "FlowcoreWorkflow": "._workflow",
}


def __getattr__(name: str) -> Any:
    if name == "ToolLimit":  # the host's, shared with the local host
        from flowcore_handlers import ToolLimit

        return ToolLimit
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "ACTIVITY_NAME",
    "ANSWER_BY_UPDATE",
    "ANSWER_UPDATE",
    "DEFAULT_TASK_QUEUE",
    "LIBRARIES",
    "LOG_QUERY",
    "PASSTHROUGH_MODULES",
    "QUESTIONS_QUERY",
    "RUN_STATUS_ACTIVITY",
    "SIGNAL_KEYS_ATTRIBUTE",
    "SCHEDULED_QUERY",
    "NOT_PENDING_ERROR",
    "SCHEDULED_UPDATE",
    "STATUS_QUERY",
    "WAITS_QUERY",
    "WORKFLOW_NAME",
    "FlowcoreActivities",
    "FlowcoreWorkflow",
    "NoSignalWait",
    "RunArgs",
    "RunArgsError",
    "SpecNotDeployed",
    "SpecProblem",
    "SpecRegistry",
    "TemporalHost",
    "TemporalHostError",
    "TemporalRefusal",
    "TemporalRunSettled",
    "TemporalUnavailable",
    "TemporalUnknownRun",
    "TemporalUnknownSchedule",
    "ToolLimit",
    "check_run_args",
    "collect_flows",
    "connect",
    "history_to_log",
    "new_worker",
    "records_from_wire",
    "run_args_from_wire",
    "sandbox_restrictions",
    "tool_queue",
    "tool_workers",
    "workflow_runner",
]
