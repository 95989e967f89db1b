"""Building a Temporal worker that runs flowcore: sandbox settings, activities.

flowcore and the libraries it uses are passed through Temporal's workflow
sandbox: the core is pure (no I/O, no clock, no randomness; a test enforces
it), so re-importing it for every workflow run would only cost time. The
sandbox still applies its runtime restrictions to the workflow code itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from temporalio.client import Client
from temporalio.worker import Interceptor, UnsandboxedWorkflowRunner, Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from flowcore_handlers import Authorize, Registry, ToolLimit
from flowcore_handlers._limits import check_tool_limits

from . import _registry
from ._activities import FlowcoreActivities
from ._registry import SpecRegistry
from ._types import DEFAULT_TASK_QUEUE, tool_queue
from ._workflow import FlowcoreWorkflow

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

__all__ = [
    "LIBRARIES",
    "PASSTHROUGH_MODULES",
    "new_worker",
    "sandbox_restrictions",
    "tool_workers",
    "workflow_runner",
]

LIBRARIES = (
    "msgspec",
    "attr",
    "attrs",
    "cattr",
    "cattrs",
    "jmespath",
    "yaml",
    "immutables",
    "cronsim",
    "jsonschema",
    "jsonschema_specifications",
    "referencing",
    "rpds",
    "typing_extensions",
)
"""The libraries flowcore uses. PyYAML, for one, breaks when re-imported in the
sandbox (its constructors are registered on the outer classes)."""

PASSTHROUGH_MODULES = (
    "flowcore",
    "flowcore_handlers",
    "flowcore_temporal._flows",
    "flowcore_temporal._registry",
    "flowcore_temporal._types",
    "flowcore_temporal._payloads",
    *LIBRARIES,
)
"""Modules the workflow sandbox forwards instead of re-importing per run
(``flowcore_temporal._flows`` keeps parsed flows for every run of the process,
``flowcore_temporal._registry`` the worker's spec versions by hash;
``flowcore_temporal._types``, the run's argument and names, is pure)."""


def sandbox_restrictions(flowcore: bool = True) -> SandboxRestrictions:
    """Temporal's default restrictions with ``PASSTHROUGH_MODULES`` passed through.

    ``flowcore=False`` passes only the libraries through, so that flowcore
    itself is imported and run under the sandbox's eyes (the tests do this to
    show it touches nothing nondeterministic).
    """
    # The registry is the process's, whichever flowcore the workflow runs.
    modules = PASSTHROUGH_MODULES if flowcore else (*LIBRARIES, "flowcore_temporal._registry")
    # The default restricts a few members of zoneinfo.ZoneInfo (clear_cache,
    # from_file, reset_tzpath), which makes the class a proxy whose instances
    # datetime refuses as a tzinfo; flowcore only calls ZoneInfo(key) to read a
    # repeat's cron in its time zone, which the sandbox allows.
    default = SandboxRestrictions.default
    members = default.invalid_module_members.with_child_unrestricted("zoneinfo", "ZoneInfo")
    restrictions = dataclasses.replace(default, invalid_module_members=members)
    return restrictions.with_passthrough_modules(*modules)


def workflow_runner(flowcore: bool = True) -> SandboxedWorkflowRunner:
    return SandboxedWorkflowRunner(restrictions=sandbox_restrictions(flowcore))


def new_worker(
    client: Client,
    *,
    task_queue: str = DEFAULT_TASK_QUEUE,
    tools: str | None = None,
    registry: Registry | None = None,
    max_concurrent_activities: int = 100,
    interceptors: Sequence[Interceptor] = (),
    tracing: bool | TracerProvider = False,
    specs: str | Path | SpecRegistry | None = None,
    sandboxed: bool = False,
    authorize: Authorize | None = None,
    **options: Any,
) -> Worker:
    """A worker that runs the ``flowcore`` workflow and the ``flowcore_work`` activity.

    ``tools`` is the tools module (dotted name or ``.py`` path) handlers come
    from, unless a run names its own; ``registry`` supplies it ready-made.
    Other ``options`` go to ``temporalio.worker.Worker``. The workflow runs
    outside Temporal's sandbox (``specs/temporal.md``, "Determinism and the
    sandbox"); ``sandboxed=True`` runs it in the sandbox with
    ``PASSTHROUGH_MODULES`` (``workflow_runner``), as does a ``workflow_runner``
    given in ``options``. Run it with
    ``async with worker:`` or ``await worker.run()``. ``tracing`` (True: the
    global tracer provider) emits OpenTelemetry spans (``specs/tracing.md``).
    ``specs``: a folder of spec files (every version side by side) or a
    ``SpecRegistry``, installed for the process (``_registry.install``) so
    that workflow code finds a run's pinned spec by hash (``_registry.lookup``).
    ``authorize``: ``fn(principal, effect)``, asked before each handler runs
    with the run's principal (``flowcore_handlers.Authorize``); a refusal fails
    the effect with ``unauthorized`` and the handler never runs.
    """
    if specs is not None:
        _registry.install(specs if isinstance(specs, SpecRegistry) else SpecRegistry(specs))
    if tracing is not False:
        from ._tracing import worker_interceptors

        interceptors = [*interceptors, *worker_interceptors(tracing, client, "new_worker")]
    activities = FlowcoreActivities(tools, registry=registry, authorize=authorize)
    # flowcore's workflow is the only workflow code a worker runs, pure by
    # construction and tested under the full sandbox: the sandbox would only
    # re-import its module for every run and wrap every activation.
    options.setdefault(
        "workflow_runner", workflow_runner() if sandboxed else UnsandboxedWorkflowRunner()
    )
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[FlowcoreWorkflow],
        activities=[activities.work, activities.run_status],
        max_concurrent_activities=max_concurrent_activities,
        interceptors=interceptors,
        **options,
    )


def tool_workers(
    client: Client,
    tool_limits: Mapping[str, ToolLimit],
    *,
    task_queue: str = DEFAULT_TASK_QUEUE,
    tools: str | None = None,
    registry: Registry | None = None,
    max_concurrent_activities: int = 100,
    authorize: Authorize | None = None,
    **options: Any,
) -> list[Worker]:
    """One activity worker per limited tool, on the tool's own task queue.

    Runs started by a ``TemporalHost`` with the same ``tool_limits`` send those
    tools' calls there (``tool_queue``). A tool's ``rate`` becomes the queue's
    ``max_task_queue_activities_per_second`` (``rate`` per ``per_ms``), which
    the server applies to every worker of the queue; its ``concurrency``
    becomes the worker's ``max_concurrent_activities``, which holds for this
    worker alone: run one such worker per tool for a limit across the cluster.
    Run them beside ``new_worker`` (``async with`` each), with the same
    ``authorize`` hook.
    """
    limits = check_tool_limits(tool_limits)
    activities = FlowcoreActivities(tools, registry=registry, authorize=authorize)
    workers = []
    for tool, limit in limits.items():
        per_second = None if limit.rate is None else limit.rate * 1000 / limit.per_ms
        workers.append(
            Worker(
                client,
                task_queue=tool_queue(task_queue, tool),
                activities=[activities.work],
                max_concurrent_activities=limit.concurrency or max_concurrent_activities,
                max_task_queue_activities_per_second=per_second,
                **options,
            )
        )
    return workers
