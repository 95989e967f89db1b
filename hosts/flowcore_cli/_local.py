"""The local host's own commands: run and worker, on ``flowcore_local.LocalHost``
(the commands of the catalogue's operations are built by ``_derive``).

Every failure a user can cause (unknown run, bad JSON, a file that is not a
flowcore database, a rejected answer) prints one line on stderr and exits 2,
and is found before the database is written. JSON options, names and answers
are read and checked by ``_common``, shared with the Temporal host's commands
(``specs/cli.md``, "Values on the command line"). What the run tree does is
shown by ``_progress``, as on Temporal.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import signal as signals
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.text import Text

import flowcore
from flowcore_local import (
    DB_ENV,
    Deleted,
    Durability,
    HostError,
    LocalHost,
    RunRow,
    ScheduledRetention,
)

from ._common import (
    DATABASE,
    checked_name,
    duration_value,
    meta_values,
    say,
)
from ._derive import HostChoice, on_host
from ._options import (
    FROM_FILE,
    input_option,
    meta_option,
    on_conflict_option,
    spec_argument,
    start_values,
    tool_limit_option,
    tool_limits_value,
)
from ._progress import (
    Item,
    RunTree,
    err,
    error_line,
    out,
    positions,
    print_lines,
    progress_line,
    watch,
)
from ._views import rows_text

__all__ = ["COMMANDS"]

T = TypeVar("T")

durability_option = click.option(
    "--durability",
    type=click.Choice(["power-loss", "process-crash"]),
    envvar="FLOWCORE_DURABILITY",
    default="power-loss",
    show_default=True,
    help="What each commit survives: power-loss fsyncs every commit; process-crash"
    " survives a killed process, not an OS crash or a power loss (or"
    " $FLOWCORE_DURABILITY; specs/local.md §2).",
)

trace_option = click.option(
    "--trace",
    is_flag=True,
    help="Emit OpenTelemetry spans to the global tracer provider (e.g. under"
    " `opentelemetry-instrument`; the tracing extra; specs/tracing.md).",
)

db_option = click.option(
    "--db",
    type=DATABASE,
    envvar=DB_ENV,
    default="flowcore.db",
    show_default=True,
    help=f"The SQLite database file, or a postgresql:// URL (or ${DB_ENV}).",
)


def _run(
    db: Path | str,
    body: Callable[[LocalHost], Awaitable[T]],
    tools: str | None = None,
    must_exist: bool = True,
    **options: Any,
) -> T:
    choice = HostChoice(temporal=False, db=db, must_exist=must_exist)
    return on_host(choice, body, tools=tools, **options)


def _tree(host: LocalHost) -> RunTree:
    """The run tree as the database holds it."""

    async def children(run_id: str, _items: Sequence[Item]) -> list[str]:
        return await host.children(run_id)

    def elsewhere(run_id: str, key: str) -> str:
        db = shlex.quote(str(host.db_path))
        return (
            f"`flowcore answer {shlex.quote(run_id)} {shlex.quote(key)} ANSWER --db {db}`"
            f" or in the web view (`flowcore serve --db {db}`)"
        )

    return RunTree(
        records=host.records,
        children=children,
        answer=host.answer,
        refused=HostError,
        interval=0.1,  # a read of the local database is cheap
        questions=host.questions,
        answer_elsewhere=elsewhere,
    )


def _print(*parts: str | tuple[str, str]) -> None:
    """One line on stdout: values from runs are shown as they are, never read as markup."""
    out.print(Text.assemble(*parts))


@click.command()
@spec_argument
@input_option
@click.option("--tools", help="Tools module: a dotted module name or a .py file.")
@click.option(
    "--run-id",
    callback=checked_name,
    help="Choose the run id (starting again with it is idempotent).",
)
@click.option(
    "--flows",
    multiple=True,
    type=click.Path(exists=True, path_type=Path),
    help="More spec files or directories that subflows may name (repeatable).",
)
@click.option("--budget", help='Cap the spec\'s budget, as JSON: {"steps": 10, ...};' + FROM_FILE)
@meta_option
@click.option(
    "--priority",
    type=int,
    help="1 (first) to 5 (last), default 3: workers take waiting work of runs of"
    " higher priority first; child runs inherit it.",
)
@click.option(
    "--dedup-key",
    callback=checked_name,
    help="While a run started with this key is running, follow it (--detach: print its"
    " id) instead of starting another.",
)
@on_conflict_option
@click.option("--detach", is_flag=True, help="Start the run and print its id; a worker runs it.")
@click.option("--json", "as_json", is_flag=True, help="Print the final run as JSON.")
@tool_limit_option
@durability_option
@trace_option
@db_option
def run(
    spec: Path,
    input_: str | None,
    tools: str | None,
    run_id: str | None,
    flows: tuple[Path, ...],
    budget: str | None,
    meta: tuple[str, ...],
    priority: int | None,
    dedup_key: str | None,
    on_conflict: str,
    detach: bool,
    as_json: bool,
    tool_limits: tuple[str, ...],
    durability: Durability,
    trace: bool,
    db: Path | str,
) -> None:
    """Start a run of SPEC and process it to the end, showing progress.

    The run's tools module and every handler its flow calls are checked
    before anything is recorded. Attached (without --detach), this command
    works only the run it started and its child runs; other runs in the
    database are left to `flowcore worker`. Starting again with the same
    --run-id and the same options attaches to the run; different options
    are refused, or (--on-conflict use-existing) that run is used as it is:
    a line on stderr gives its status, and nothing is written. A --run-id
    holding / or # (the ids of child runs) is refused.
    """
    data, wire_caps, limits = start_values(input_, budget, priority, tool_limits)
    caps = flowcore.budget_from_wire(wire_caps)

    async def body(host: LocalHost) -> dict[str, Any]:
        # Where the run tree is (a run started again, after a crash): progress goes on from there.
        seen = await positions(_tree(host), run_id) if run_id is not None else {}
        metadata = meta_values(spec, meta) if meta else None
        before = None if dedup_key is None else await host.deduplicated(dedup_key)
        existed = run_id is not None and on_conflict == "use-existing" and seen.get(run_id, 0) > 0
        rid = await host.start(
            spec,
            data,
            run_id,
            tools=tools,
            flows=flows or [spec.parent],
            budget=caps,
            metadata=metadata,
            priority=priority,
            dedup_key=dedup_key,
            on_conflict=on_conflict,
        )
        if rid == before and rid != run_id:
            say(f"run {rid!r} started with dedup key {dedup_key!r} is running: no new run")
        if existed:
            row = await host.run(rid)
            say(f"run {rid!r} exists ({row.status}): using it as it is, nothing written")
        if detach:
            return {"runId": rid}
        # With --json, stdout holds the JSON document alone: progress goes to stderr.
        return await _follow(host, rid, seen, err if as_json else out)

    result = _run(
        db,
        body,
        tools,
        must_exist=False,
        tracing=trace,
        durability=durability,
        tool_limits=limits,
    )
    if detach:
        click.echo(result["runId"])
        return
    if as_json:
        click.echo(json.dumps(result))
        if result["status"] != "completed":
            sys.exit(1)
    else:
        _settled(result)


async def _follow(
    host: LocalHost, run_id: str, start: int | Mapping[str, int], console: Console
) -> dict[str, Any]:
    """Work run ``run_id`` (and its children) to the end, printing its progress from
    ``start`` (``_progress.watch``); its final ``{runId, status, output, error}``."""
    stop = asyncio.Event()
    watcher = asyncio.create_task(watch(_tree(host), run_id, stop, console, start=start))
    try:
        await host.work(until_settled=run_id, only=run_id)
    finally:
        stop.set()
        await watcher
    row = await host.run(run_id)
    return {"runId": run_id, "status": row.status, "output": row.output, "error": row.error}


def _settled(result: dict[str, Any]) -> None:
    """The last lines of an attached command: the output (and error); exit 1 unless completed."""
    _print(f"output: {json.dumps(result['output'])}")
    if result["error"]:
        _print(f"error: {json.dumps(result['error'])}")
    if result["status"] != "completed":
        sys.exit(1)


@click.command()
@click.option("--tools", help="Default tools module for runs that did not record one.")
@click.option("--concurrency", default=64, show_default=True, help="Handlers running at once.")
@click.option("--max-recoveries", default=3, show_default=True, help="Before a dead letter.")
@click.option(
    "--until-idle",
    is_flag=True,
    help="Stop once idle: no run can go on without an answer, a signal or a timer due"
    " later than --idle-horizon (no work is ready or running, no timer is due sooner;"
    " schedules' slots are not waited for).",
)
@click.option(
    "--idle-horizon",
    default="60s",
    show_default=True,
    metavar="DURATION",
    help="With --until-idle: timers due within this are waited for, later ones are not.",
)
@click.option(
    "--retention",
    metavar="DURATION",
    help="Delete runs settled longer ago than this (30d, 12h, PT1H), checked every minute.",
)
@click.option(
    "--keep-completed",
    default="30d",
    show_default=True,
    help="How long completed and cancelled scheduled calls stay listed.",
)
@click.option(
    "--keep-failed",
    default="24h",
    show_default=True,
    help="How long failed and uncertain scheduled calls stay listed.",
)
@click.option(
    "--keep-finished",
    default=1000,
    show_default=True,
    type=click.IntRange(min=0),
    help="The newest finished scheduled calls each run keeps listed.",
)
@tool_limit_option
@durability_option
@trace_option
@db_option
def worker(
    tools: str | None,
    concurrency: int,
    max_recoveries: int,
    until_idle: bool,
    idle_horizon: str,
    retention: str | None,
    keep_completed: str,
    keep_failed: str,
    keep_finished: int,
    tool_limits: tuple[str, ...],
    durability: Durability,
    trace: bool,
    db: Path | str,
) -> None:
    """Resume and process every run in the database until stopped.

    Prints a line when it starts, the progress lines of what it does (as
    `run` does, for the events this worker applies; questions are not asked
    here: answer them with `flowcore answer`), the error of every run it
    settles failed, a line for every prune of its --retention, and a summary
    when it stops. It also starts the runs of the database's schedules as
    their slots come due (`flowcore schedule`), and trims the scheduled calls
    kept listed (--keep-*).
    """
    retention_ms = None if retention is None else duration_value(retention, "--retention")
    horizon_ms = duration_value(idle_horizon, "--idle-horizon", allow_zero=True)
    limits = tool_limits_value(tool_limits)
    settled: list[RunRow] = []

    def on_pruned(deleted: Deleted) -> None:
        _print(
            f"pruned {len(deleted.runs)} run(s) settled more than {retention} ago:"
            f" {rows_text(deleted)}"
        )

    def on_records(records: list[flowcore.Record]) -> None:
        lines = [progress_line(record) for record in records]
        print_lines([line for line in lines if line is not None])

    def on_settled(row: RunRow) -> None:
        settled.append(row)  # after the run's last progress line (``on_records``)
        if isinstance(row.error, dict):
            out.print(Text.assemble(("  error: ", "red"), error_line(row.error)))

    async def body(host: LocalHost) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signals.SIGINT, signals.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        running = await host.runs("running")
        _print(
            f"worker on {db}: {len(running)} run(s) running; concurrency {concurrency}"
            + (f"; default tools {tools}" if tools else "")
            + (f"; retention {retention}" if retention else "")
            + "".join(f"; tool {tool} {limit.text()}" for tool, limit in limits.items())
            + ("; until idle" if until_idle else "; Ctrl-C stops")
        )
        if until_idle:

            async def idle() -> None:
                while not stop.is_set():
                    if await host.idle(horizon_ms):
                        stop.set()
                    await asyncio.sleep(0.2)

            watcher = asyncio.create_task(idle())
        try:
            await host.work(stop, on_settled=on_settled, on_pruned=on_pruned, on_records=on_records)
        finally:
            stop.set()
            if until_idle:
                await watcher
        counts: dict[str, int] = {}
        for row in settled:
            counts[row.status] = counts.get(row.status, 0) + 1
        left = len(await host.runs("running"))
        summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items())) or "none"
        _print(f"worker stopped: {len(settled)} run(s) settled ({summary}); {left} still running")

    scheduled = ScheduledRetention(
        completed_ms=duration_value(keep_completed, "--keep-completed", allow_zero=True),
        failed_ms=duration_value(keep_failed, "--keep-failed", allow_zero=True),
        per_run=keep_finished,
    )
    _run(
        db,
        body,
        tools,
        must_exist=False,
        concurrency=concurrency,
        max_recoveries=max_recoveries,
        retention_ms=retention_ms,
        scheduled_retention=scheduled,
        tracing=trace,
        durability=durability,
        tool_limits=limits,
    )


COMMANDS = [run, worker]
