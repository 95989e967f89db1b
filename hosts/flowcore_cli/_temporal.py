"""``flowcore temporal ...``: the Temporal host's commands, on
``flowcore_temporal.TemporalHost``.

worker, run and runs are its own; the catalogue's commands (signal, answer,
cancel, fork, show, export, ..., and the groups schedule and scheduled) are
``_derive``'s with Temporal chosen. How each
reaches Temporal is ``_temporal_session``. Every failure a user can
cause (a server that cannot be reached, an unknown run, bad JSON, a bad spec,
a rejected answer) prints one line on stderr and exits 2. JSON options, names
and answers are read and checked by ``_common`` (shared with the local host's
commands) before anything is sent: a signal is not answered, so a value the
workflow would refuse must never leave this process. What the run tree does
is shown by ``_progress``, as on the local host.

temporalio is imported only when a command runs, so the rest of ``flowcore``
neither pays for it nor needs the ``temporal`` extra: this module imports
neither temporalio nor ``flowcore_temporal`` before then. A process that used a
Temporal client ends with ``os._exit`` once its output is flushed: temporalio's
native runtime can abort the interpreter while it finalizes (DESIGN section 7,
temporalio/sdk-python#300).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shlex
import signal as signals
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

import flowcore

from ._common import (
    CliError,
    checked_name,
    invoke,
    meta_text,
    meta_values,
)
from ._derive import command, group, words
from ._options import (
    FROM_FILE,
    input_option,
    json_option,
    meta_option,
    on_conflict_option,
    spec_argument,
    start_values,
    tool_limit_option,
    tool_limits_value,
    where_option,
)
from ._progress import Item, RunTree, out, watch
from ._temporal_session import connection_options, finish, with_host

if TYPE_CHECKING:
    from temporalio.client import Client

    from flowcore_temporal import TemporalHost

__all__ = ["GROUP", "main"]

# --- worker -----------------------------------------------------------------------------


@click.command()
@click.option("--tools", help="Tools module: a dotted module name or a .py file.")
@click.option(
    "--max-concurrent-activities",
    default=100,
    show_default=True,
    help="Handlers this worker runs at once.",
)
@tool_limit_option
@click.option(
    "--specs",
    "specs_dir",
    type=click.Path(path_type=Path),
    help="Folder of flow specs, every version side by side (searched recursively); runs"
    " find their pinned spec there by hash, and a version added later is found too.",
)
@click.option(
    "--sandboxed",
    is_flag=True,
    help="Run the workflow inside Temporal's workflow sandbox (slower; see specs/temporal.md).",
)
@connection_options
def worker(
    tools: str | None,
    max_concurrent_activities: int,
    tool_limits: tuple[str, ...],
    specs_dir: Path | None,
    sandboxed: bool,
    address: str,
    task_queue: str,
    namespace: str,
) -> None:
    """Run flowcore workflows and their handlers (from --tools) until stopped.

    With --tool-limit, also one worker per limited tool on that tool's own
    task queue, where runs started with the same --tool-limit send its calls.
    With --specs, runs find the spec they are pinned to by hash in that folder.
    """
    limits = tool_limits_value(tool_limits)
    from flowcore_temporal._registry import SpecRegistry

    specs = None
    if specs_dir is not None:
        if not specs_dir.is_dir():
            raise CliError(f"--specs {specs_dir}: not a folder")
        specs = SpecRegistry(specs_dir)
        for problem in specs.problems:
            click.echo(f"flowcore: skipped {problem}", err=True)

    async def body(host: TemporalHost) -> None:
        import flowcore_temporal as ft
        from flowcore_handlers import load_registry

        registry = load_registry(tools)  # fail now, not at the first call
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signals.SIGINT, signals.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        client: Client = host.client
        w = ft.new_worker(
            client,
            task_queue=task_queue,
            tools=tools,
            registry=registry,
            max_concurrent_activities=max_concurrent_activities,
            specs=specs,
            sandboxed=sandboxed,
        )
        limited = ft.tool_workers(
            client,
            limits,
            task_queue=task_queue,
            tools=tools,
            registry=registry,
            max_concurrent_activities=max_concurrent_activities,
        )
        async with contextlib.AsyncExitStack() as stack:
            for each in (w, *limited):
                await stack.enter_async_context(each)
            click.echo(
                f"flowcore: worker polling task queue {task_queue!r} at {address}"
                f" (tools: {tools or 'none'})"
                + ("" if specs is None else f"; {len(specs)} spec(s) from {specs_dir}")
                + "".join(
                    f"; tool {tool} {limit.text()} on {ft.tool_queue(task_queue, tool)!r}"
                    for tool, limit in limits.items()
                ),
                err=True,
            )
            await stop.wait()

    with_host(address, namespace, task_queue, body, lambda _: 0)


# --- run --------------------------------------------------------------------------------


def _tree(host: TemporalHost) -> RunTree:
    """The run tree as its workflows' ``log`` queries show it."""
    import flowcore_temporal as ft

    async def records(run_id: str, start: int) -> list[flowcore.Record]:
        try:
            return await host.records(run_id, start)
        except ft.TemporalHostError:
            return []  # a child that has not started yet, or has ended

    async def children(run_id: str, items: Sequence[Item]) -> list[str]:
        # A child is known from the run-subflow effect that starts it.
        return [
            host.child_run_id(run_id, item.idempotency_key)
            for item in items
            if isinstance(item, flowcore.RunSubflow)
        ]

    async def questions(run_id: str) -> list[str]:
        return [str(q["key"]) for q in await host.questions(run_id)]

    return RunTree(
        records=records,
        children=children,
        answer=host.answer,
        refused=ft.TemporalHostError,
        questions=questions,
        interval=0.2,  # each read is a query, which a worker answers by replaying the workflow
        daemon_prompts=True,  # the process ends with os._exit (_finish)
        answer_elsewhere=lambda run_id, key: (
            f"`flowcore temporal answer {shlex.quote(run_id)} {shlex.quote(key)} ANSWER`"
        ),
    )


@click.command()
@spec_argument
@input_option
@click.option(
    "--run-id",
    callback=checked_name,
    help="Choose the run id, which is the workflow id (idempotent).",
)
@click.option(
    "--flows",
    multiple=True,
    type=click.Path(exists=True, path_type=Path),
    help="More spec files or directories that subflows may name (repeatable);"
    " the spec's own directory is always searched.",
)
@click.option("--tools", help="Tools module for this run's handlers (default: the worker's).")
@click.option("--budget", help='Cap the spec\'s budget, as JSON: {"steps": 10, ...};' + FROM_FILE)
@click.option(
    "--activity-timeout-ms",
    default=600_000,
    show_default=True,
    help="Longest a handler call may take; past it the outcome is unknown.",
)
@click.option(
    "--heartbeat-timeout-ms",
    default=30_000,
    show_default=True,
    help="How soon a worker that died mid-call is noticed (0: only the activity timeout).",
)
@meta_option
@click.option(
    "--priority",
    type=int,
    help="1 (first) to 5 (last), default 3: the workflow's Temporal priority key.",
)
@click.option(
    "--dedup-key",
    callback=checked_name,
    help="The run id (workflow id): while that run is going, follow it instead of"
    " starting another; once it has closed, start a new one under it.",
)
@click.option(
    "--continue-after-events",
    type=click.IntRange(min=50),
    default=10_000,
    show_default=True,
    help="History length at which the run goes on in a new Temporal run by itself"
    " (it also does when Temporal suggests it).",
)
@click.option(
    "--by-hash",
    is_flag=True,
    help="Send the spec's hash, not its text: the workers take it from their --specs.",
)
@on_conflict_option
@click.option("--detach", is_flag=True, help="Start the run, print its id, do not wait.")
@click.option("--json", "as_json", is_flag=True, help="Print the final result as JSON.")
@tool_limit_option
@connection_options
def run(
    spec: Path,
    input_: str | None,
    run_id: str | None,
    flows: tuple[Path, ...],
    tools: str | None,
    budget: str | None,
    activity_timeout_ms: int,
    heartbeat_timeout_ms: int,
    meta: tuple[str, ...],
    priority: int | None,
    dedup_key: str | None,
    continue_after_events: int,
    by_hash: bool,
    on_conflict: str,
    detach: bool,
    as_json: bool,
    tool_limits: tuple[str, ...],
    address: str,
    task_queue: str,
    namespace: str,
) -> None:
    """Start a run of SPEC on Temporal (a worker runs it) and follow it to the end."""
    data, caps, limits = start_values(input_, budget, priority, tool_limits)
    metadata = meta_values(spec, meta) if meta else None

    async def body(host: TemporalHost) -> dict[str, Any]:
        host.tool_limits = limits
        rid = await host.start(
            spec,
            data,
            run_id,
            flows=flows,
            tools=tools,
            budget=caps,
            activity_timeout_ms=activity_timeout_ms,
            heartbeat_timeout_ms=heartbeat_timeout_ms or None,
            metadata=metadata,
            priority=priority,
            dedup_key=dedup_key,
            continue_after_events=continue_after_events,
            by_hash=by_hash,
            on_conflict=on_conflict,
        )
        if detach:
            return {"runId": rid}
        stop = asyncio.Event()
        # Progress goes to stdout even with --json (the document is the last line).
        watcher = asyncio.create_task(watch(_tree(host), rid, stop, out))
        try:
            result = await host.result(rid)
        finally:
            stop.set()
            await watcher
        return result

    def after(result: dict[str, Any]) -> int:
        if detach:
            click.echo(result["runId"])
            return 0
        if as_json:
            click.echo(json.dumps(result))
        else:
            click.echo(f"output: {json.dumps(result.get('output'))}")
            if result.get("error"):
                click.echo(f"error: {json.dumps(result['error'])}")
        return 0 if result.get("status") == "completed" else 1

    with_host(address, namespace, task_queue, body, after)


@click.command()
@where_option
@click.option(
    "--status",
    type=click.Choice(
        ["Running", "Completed", "Failed", "Canceled", "Terminated", "ContinuedAsNew", "TimedOut"]
    ),
    help="Only runs whose workflow has this Temporal status.",
)
@click.option(
    "--limit", default=100, show_default=True, type=click.IntRange(min=1), help="Most runs listed."
)
@json_option
@connection_options
def runs(
    where: tuple[flowcore.MetadataFilter, ...],
    status: str | None,
    limit: int,
    as_json: bool,
    address: str,
    task_queue: str,
    namespace: str,
) -> None:
    """List flowcore runs newest first, by their metadata (a visibility query).

    Temporal's visibility is eventually consistent: a run started or a field
    set a moment ago may not be listed yet.
    """

    async def body(host: TemporalHost) -> list[dict[str, Any]]:
        return await host.runs(list(where), status=status, limit=limit)

    def after(listed: list[dict[str, Any]]) -> int:
        if as_json:
            click.echo(json.dumps(listed))
            return 0
        for item in listed:
            line = f"{item['runId']}  {item['status']}"
            if item["metadata"]:
                line += f"  {meta_text(item['metadata'])}"
            click.echo(line)
        return 0

    with_host(address, namespace, task_queue, body, after)


@click.group("temporal")
def GROUP() -> None:
    """Run flows on a Temporal cluster (needs the temporal extra)."""


for _command in (worker, run, runs):
    GROUP.add_command(_command)
# The catalogue's commands, with Temporal chosen: `flowcore temporal show RUN` is
# `flowcore show RUN --temporal` (specs/cli.md).
for _word in words():
    if _word not in GROUP.commands:
        GROUP.add_command(command(_word, temporal=True))
GROUP.add_command(group("schedule", temporal=True))
GROUP.add_command(group("scheduled", temporal=True))


def main() -> None:
    """``python -m flowcore_temporal``: the group on its own, same checks and exit codes."""
    finish(invoke(GROUP, None, "flowcore temporal"))
