"""``flowcore temporal ...``: the Temporal host's commands, on
``flowcore_temporal.TemporalHost``.

worker, run, signal, answer, cancel, fork, show, export, and the groups schedule
(``_temporal_schedule``) and scheduled (``_temporal_scheduled``); how each
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
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

import flowcore

from ._common import (
    CliError,
    answer_value,
    budget_value,
    checked_name,
    invoke,
    json_value,
    load_spec,
    meta_text,
    meta_values,
)
from ._history import event_line
from ._options import (
    FROM_FILE,
    answer_arguments,
    fork_options,
    input_option,
    json_option,
    meta_option,
    on_conflict_option,
    output_option,
    reason_option,
    run_id_argument,
    signal_arguments,
    signal_target,
    spec_argument,
    tool_limit_option,
    tool_limits_value,
    upgrade_options,
    where_option,
)
from ._progress import Item, RunTree, out, watch
from ._replay import figures_text
from ._temporal_schedule import schedule
from ._temporal_scheduled import scheduled
from ._temporal_session import connection_options, finish, specs_option, with_host
from ._upgrade import upgrade_done, upgrade_refused

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
    if input_ == "-" and budget == "-":
        raise CliError("--input and --budget cannot both read standard input (-)")
    data = json_value(input_, "--input")
    caps = budget_value(budget)
    metadata = meta_values(spec, meta) if meta else None
    limits = tool_limits_value(tool_limits)
    if priority is not None and not 1 <= priority <= 5:
        raise CliError(f"--priority must be from 1 (first) to 5 (last), not {priority}")

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


# --- talking to runs --------------------------------------------------------------------


@click.command("signal")
@signal_arguments
@connection_options
def signal_(
    run_id: str,
    name: str | None,
    data: str | None,
    key: str | None,
    address: str,
    task_queue: str,
    namespace: str,
) -> None:
    """Send signal NAME to RUN (buffered if the run does not wait for it yet).

    With only NAME and --key KEY, send it to every running run that waits for
    NAME with that key (found by the FlowcoreSignalKeys search attribute), and
    print their ids; none waiting is an error.
    """
    run, name = signal_target(run_id, name, key)
    payload = json_value(data, "--data")
    if run is not None:
        with_host(
            address,
            namespace,
            task_queue,
            lambda h: h.signal(run, name, payload, key),
            lambda _: 0,
        )
        return
    assert key is not None

    def printed(runs: list[str]) -> int:
        for got in runs:
            click.echo(got)
        return 0

    with_host(address, namespace, task_queue, lambda h: h.signal_key(name, key, payload), printed)


@click.command()
@answer_arguments
@connection_options
def answer(
    run_id: str,
    key: str,
    answer: str | None,
    data: str | None,
    address: str,
    task_queue: str,
    namespace: str,
) -> None:
    """Answer RUN's question KEY with ANSWER (text, as typed) or --data (JSON).

    A wrong answer is rejected and changes nothing.
    """
    value = answer_value(answer, data)
    with_host(address, namespace, task_queue, lambda h: h.answer(run_id, key, value), lambda _: 0)


@click.command()
@run_id_argument
@reason_option
@connection_options
def cancel(run_id: str, reason: str, address: str, task_queue: str, namespace: str) -> None:
    """Cancel RUN: pending work is abandoned, compensations run, it settles cancelled."""
    with_host(address, namespace, task_queue, lambda h: h.cancel(run_id, reason), lambda _: 0)


@click.command()
@run_id_argument
@fork_options
@json_option
@specs_option
@connection_options
def fork(
    run_id: str,
    at: int | None,
    from_step: str | None,
    new_run_id: str | None,
    tools: str | None,
    cancel_source: bool,
    as_json: bool,
    address: str,
    task_queue: str,
    namespace: str,
) -> None:
    """Fork RUN as a new run with its history up to a point; print the new run's id.

    As `flowcore fork` (--at INDEX or --from-step ID): the source's log is
    read from its history, and a new workflow starts with it up to the point
    and runs on from there; a worker runs it. --cancel-source then cancels
    RUN if it is still running (a reset).
    """
    if (at is None) == (from_step is None):
        raise CliError("give exactly one of --at INDEX and --from-step STEP_ID")

    async def body(host: TemporalHost) -> dict[str, Any]:
        try:
            rid = await host.fork(
                run_id,
                at=at,
                from_step=from_step,
                new_run_id=new_run_id,
                tools=tools,
                cancel_source=cancel_source,
            )
        except flowcore.ForkError as exc:
            raise CliError(f"cannot fork run {run_id!r}: {exc}") from None
        return {"runId": rid, "forkedFrom": await host.forked_from(rid)}

    def after(info: dict[str, Any]) -> int:
        click.echo(json.dumps(info) if as_json else info["runId"])
        return 0

    with_host(address, namespace, task_queue, body, after)


@click.command()
@run_id_argument
@json_option
@connection_options
def show(run_id: str, as_json: bool, address: str, task_queue: str, namespace: str) -> None:
    """Status, budget, pending work, questions and awaited signals of RUN."""

    def after(info: dict[str, Any]) -> int:
        if as_json:
            click.echo(json.dumps(info))
            return 0
        version = (
            f" version {info['version']} (spec {info['specHash'][:12]})"
            if "version" in info and "specHash" in info
            else ""
        )
        click.echo(
            f"{info.get('runId')}  flow {info.get('flowId', '?')}{version}  {info.get('status')}"
            f"  (Temporal: {info.get('temporal')})"
        )
        execution = info.get("execution")
        if execution:
            click.echo(
                f"Temporal run {execution} of the run (it continued as new {execution - 1}"
                f" time{'s' if execution > 2 else ''}); log: {info.get('records', '?')} records"
            )
        if info.get("continuing"):
            click.echo("continuing as new: new work waits for the work out to finish")
        forked = info.get("forkedFrom")
        if forked:
            click.echo(f"forked from {forked['runId']} at index {forked['index']}")
        budget = info.get("budget")
        if budget:
            click.echo(f"budget: {figures_text(budget)}")
        usage = info.get("usage")
        if usage:
            more = "".join(
                f", {usage[key]} {word}"
                for key, word in (
                    ("tokens", "tokens"),
                    ("toolCalls", "tool calls"),
                    ("turns", "turns"),
                )
                if usage.get(key)
            )
            click.echo(f"usage: {usage['steps']} steps, cost {usage['costMinorUnits']}{more}")
        if info.get("metadata"):
            click.echo(f"metadata: {meta_text(info['metadata'])}")
        if info.get("output") is not None:
            click.echo(f"output: {json.dumps(info['output'])}")
        if info.get("error"):
            click.echo(f"error: {json.dumps(info['error'])}")
        for item in info.get("pending", []):
            click.echo(f"pending: {item['kind']} {item['key']}")
        for q in info.get("questions", []):
            click.echo(f"question: {q['key']}: {q['question']} {q['options'] or ''}")
        for name in info.get("waitingFor", []):
            click.echo(f"waiting for signal: {name}")
        return 0

    with_host(address, namespace, task_queue, lambda h: h.status(run_id), after)


@click.command()
@run_id_argument
@output_option
@click.option(
    "--live",
    is_flag=True,
    help="Ask the running workflow (the log query) instead of replaying its latest history.",
)
@specs_option
@connection_options
def export(
    run_id: str,
    output: Path | None,
    live: bool,
    address: str,
    task_queue: str,
    namespace: str,
) -> None:
    """Write RUN's flowcore log as NDJSON (what `flowcore replay` reads)."""

    async def body(host: TemporalHost) -> bytes:
        return await host.export(run_id, live=live)

    def after(data: bytes) -> int:
        if output is None:
            sys.stdout.buffer.write(data)
        else:
            output.write_bytes(data)
        return 0

    with_host(address, namespace, task_queue, body, after)


@click.command()
@run_id_argument
@upgrade_options
@specs_option
@connection_options
def upgrade(
    run_id: str,
    to: Path,
    dry_run: bool,
    as_json: bool,
    address: str,
    task_queue: str,
    namespace: str,
) -> None:
    """Move running RUN to the flow version in --to, once its log replays against it.

    The run's whole log (from its Temporal histories) is replayed against the
    new spec: if the new version would have made every recorded decision the
    same way, the workflow takes the new spec and goes on under it (a run
    pinned by hash gets the hash: its workers must have that version).
    Otherwise it stays on its version and the first divergence is printed
    (index, recorded effect, new spec's effect): exit 1. Exit 2 for an
    unknown or settled run or an unreadable spec.
    """
    flow = load_spec(str(to))

    async def body(host: TemporalHost) -> tuple[int, flowcore.Upgrade] | flowcore.UpgradeRefused:
        before = (await host.status(run_id)).get("version", flow.version)
        try:
            return before, await host.upgrade(run_id, to, dry_run=dry_run)
        except flowcore.UpgradeRefused as exc:
            return exc

    def after(found: tuple[int, flowcore.Upgrade] | flowcore.UpgradeRefused) -> int:
        if isinstance(found, flowcore.UpgradeRefused):
            return upgrade_refused(run_id, flow, found, as_json)
        before, made = found
        return upgrade_done(run_id, before, made, dry_run, as_json)

    with_host(address, namespace, task_queue, body, after)


@click.command()
@run_id_argument
@click.option("--start-index", default=0, show_default=True, type=click.IntRange(min=0))
@click.option(
    "--live",
    is_flag=True,
    help="Ask the running workflow (the log query) instead of replaying its latest history.",
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print the raw records as NDJSON envelopes (at in ms)."
)
@specs_option
@connection_options
def events(
    run_id: str,
    start_index: int,
    live: bool,
    as_json: bool,
    address: str,
    task_queue: str,
    namespace: str,
) -> None:
    """The log records of RUN, across its Temporal runs: a table, or NDJSON with --json."""

    async def body(host: TemporalHost) -> list[flowcore.Record]:
        return [r for r in await host.log(run_id, live=live) if r.index >= start_index]

    def after(records: list[flowcore.Record]) -> int:
        for record in records:
            if as_json:
                sys.stdout.buffer.write(flowcore.encode_record(record))
            else:
                out.print(event_line(record))
        sys.stdout.flush()
        return 0

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


for _command in (worker, run, signal_, answer, cancel, fork, upgrade, show, export, events, runs):
    GROUP.add_command(_command)
GROUP.add_command(schedule)
GROUP.add_command(scheduled)


def main() -> None:
    """``python -m flowcore_temporal``: the group on its own, same checks and exit codes."""
    finish(invoke(GROUP, None, "flowcore temporal"))
