"""The local host's commands: run, worker, runs, show, events, export, signal,
answer, cancel, on ``flowcore_local.LocalHost``.

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
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

import flowcore
from flowcore_handlers import RegistryError
from flowcore_local import (
    DB_ENV,
    Deleted,
    Durability,
    HostError,
    LocalHost,
    NotAFlowcoreDatabase,
    NothingToCancel,
    RunRow,
    ScheduledRetention,
)

from ._common import (
    CliError,
    answer_value,
    budget_value,
    checked_name,
    duration,
    duration_value,
    iso,
    json_value,
    load_spec,
    meta_text,
    meta_values,
    problem_line,
    say,
)
from ._history import event_line, short_json, tables, timeline, work_report
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
from ._replay import figures_text, report_to_json, usage_text
from ._upgrade import upgrade_done, upgrade_refused

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
    type=click.Path(dir_okay=False, path_type=Path),
    envvar=DB_ENV,
    default="flowcore.db",
    show_default=True,
    help=f"The SQLite database file (or ${DB_ENV}).",
)


def _run(
    db: Path,
    body: Callable[[LocalHost], Awaitable[T]],
    tools: str | None = None,
    must_exist: bool = True,
    **options: Any,
) -> T:
    if must_exist and not db.exists():
        others = sorted(str(f) for f in db.parent.glob("*.db") if f.is_file())[:3]
        hint = f"; here: {', '.join(others)} (pass --db FILE)" if others else ""
        raise CliError(f"no database at {db} (start a run first, or pass --db){hint}")

    async def main() -> T:
        async with LocalHost(db, tools, **options) as host:
            return await body(host)

    try:
        return asyncio.run(main())
    except (HostError, NotAFlowcoreDatabase, RegistryError, flowcore.RunIdError) as exc:
        raise CliError(str(exc)) from None
    except flowcore.SpecError as exc:
        # One line per problem, as `validate` prints them.
        for problem in exc.problems[:-1]:
            say(problem_line(problem))
        raise CliError(problem_line(exc.problems[-1])) from None
    except flowcore.InputError as exc:
        head = str(exc).splitlines()[0].rstrip(":")
        for text in exc.problems[:-1]:
            say(f"{head}: {text}")
        raise CliError(f"{head}: {exc.problems[-1]}" if exc.problems else head) from None
    except BrokenPipeError:
        raise  # the reader went away: the command ends quietly (_errors.invoke)
    except OSError as exc:
        raise CliError(str(exc)) from None


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
    db: Path,
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
    if input_ == "-" and budget == "-":
        raise CliError("--input and --budget cannot both read standard input (-)")
    data = json_value(input_, "--input")
    caps = flowcore.budget_from_wire(budget_value(budget))
    limits = tool_limits_value(tool_limits)
    if priority is not None and not 1 <= priority <= 5:
        raise CliError(f"--priority must be from 1 (first) to 5 (last), not {priority}")

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
    db: Path,
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


def plural(n: int, word: str) -> str:
    """``1 run``, ``2 runs``, ``1,000 rows``."""
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def rows_text(deleted: Deleted) -> str:
    """``57 rows (log 40, results 6, ...)``: the rows, and per table those that had some."""
    tables = ", ".join(f"{table} {n:,}" for table, n in deleted.rows.items())
    return plural(deleted.total_rows, "row") + (f" ({tables})" if tables else "")


RUN_STATUSES = ("running", "completed", "failed", "cancelled", "budget-exhausted")


def _now_ms() -> int:
    return int(time.time() * 1000)


def _ended(r: RunRow) -> str:
    """How long the run took (settled) or has been going (running)."""
    if r.status == "running":
        return f"{duration(max(0, _now_ms() - r.created_ms))} so far"
    return duration(max(0, r.updated_ms - r.created_ms))


def _outcome(r: RunRow) -> str:
    if isinstance(r.error, dict):
        return error_line(r.error)[:80]
    return "" if r.output is None else short_json(r.output)


@click.command()
@click.option(
    "--status",
    type=click.Choice(RUN_STATUSES),
    help="Only runs with this status.",
)
@click.option("--tree", is_flag=True, help="Show subflows under their parents.")
@where_option
@click.option(
    "--limit", default=50, show_default=True, type=click.IntRange(min=1), help="Runs per page."
)
@click.option(
    "--page", default=1, show_default=True, type=click.IntRange(min=1), help="Which page."
)
@json_option
@db_option
def runs(
    status: str | None,
    tree: bool,
    where: tuple[flowcore.MetadataFilter, ...],
    limit: int,
    page: int,
    as_json: bool,
    db: Path,
) -> None:
    """List the runs in the database, oldest first, a page at a time.

    Each run shows when it started, how long it took (or has been running),
    what it waits for now, its output or error, and its metadata.
    """

    async def body(
        host: LocalHost,
    ) -> tuple[int, list[tuple[RunRow, list[str]]], dict[str, dict[str, Any]]]:
        rows = await host.runs(status, where=list(where))
        shown = rows[(page - 1) * limit : page * limit]
        listed = []
        for r in shown:
            waits: list[str] = []
            if r.status == "running":
                waits = _waits(await host.show(r.run_id))
            listed.append((r, waits))
        metadata = await host.metadata_of([r.run_id for r in shown])
        return len(rows), listed, metadata

    total, listed, metadata = _run(db, body)
    if as_json:
        click.echo(
            json.dumps(
                [
                    {
                        "runId": r.run_id,
                        "flowId": r.flow_id,
                        "status": r.status,
                        "parent": r.parent_run,
                        "depth": r.depth,
                        "startedMs": r.created_ms,
                        "updatedMs": r.updated_ms,
                        "waitingFor": waits,
                        "output": r.output,
                        "error": r.error,
                        "metadata": metadata.get(r.run_id, {}),
                    }
                    for r, waits in listed
                ]
            )
        )
        return
    table = Table(header_style="bold")
    for name in ("run", "flow", "status", "started (UTC)", "took"):
        table.add_column(name, no_wrap=True)
    table.add_column("waiting for", overflow="fold")
    table.add_column("output / error", overflow="ellipsis", no_wrap=True, max_width=40)
    if metadata:
        table.add_column("metadata", overflow="fold")

    def add_row(r: RunRow, waits: list[str], run: str) -> None:
        # Text cells: ids and values are shown as they are, never read as markup.
        cells = [
            run,
            r.flow_id,
            r.status,
            iso(r.created_ms, "seconds"),
            _ended(r),
            ", ".join(waits),
            _outcome(r),
        ]
        if metadata:
            cells.append(meta_text(metadata.get(r.run_id, {})))
        table.add_row(*(Text(cell) for cell in cells))

    if tree:
        by_parent: dict[str | None, list[tuple[RunRow, list[str]]]] = {}
        known = {r.run_id for r, _ in listed}
        for r, waits in listed:
            parent = r.parent_run if r.parent_run in known else None
            by_parent.setdefault(parent, []).append((r, waits))

        def add(parent: str | None, depth: int) -> None:
            for r, waits in by_parent.get(parent, []):
                add_row(r, waits, "  " * depth + ("└ " if depth else "") + r.run_id)
                add(r.run_id, depth + 1)

        add(None, 0)
    else:
        for r, waits in listed:
            add_row(r, waits, r.run_id)
    tables().print(table)
    pages = max(1, -(-total // limit))
    if pages > 1 or page > 1:
        _print(f"page {page} of {pages} ({total} runs; --page N for another)")


def _waits(info: dict[str, Any]) -> list[str]:
    """What a running run waits for, in a few words each (from ``LocalHost.show``)."""
    waits = [f"question {q['key'].split('/', 1)[-1]}" for q in info["questions"]]
    waits += [f"signal {name}" for name in info["waitingFor"]]
    for item in info["pending"]:
        kind = item["kind"]
        if kind in ("call-tool", "run-agent", "run-team", "run-subflow", "signal-run"):
            waits.append(f"{kind} {item['key'].split('/', 1)[-1]}")
        elif kind == "sleep" and item.get("dueMs") is not None:
            waits.append(f"timer {iso(item['dueMs'])}")
    return waits


@click.command()
@run_id_argument
@json_option
@click.option("--no-history", is_flag=True, help="Only the current state, not the timeline.")
@db_option
def show(run_id: str, as_json: bool, no_history: bool, db: Path) -> None:
    """Show RUN: its state now, a timeline of what happened, and every work effect.

    The state: status, budget, pending work, questions, signals awaited and
    buffered, dead letters, child runs, handler failures with tracebacks.
    """

    async def body(host: LocalHost) -> tuple[dict[str, Any], list[flowcore.Record], Any]:
        info = await host.show(run_id)
        records = await host.records(run_id)
        trajectory = None
        try:
            flow = await host.flow(run_id)
            report = flowcore.replay(records, flow, raise_on_divergence=False)
            trajectory = report
        except flowcore.FlowcoreError:
            trajectory = None  # a log that no longer replays: the timeline still shows it
        return info, records, trajectory

    info, records, report = _run(db, body)
    replayed = report_to_json(report) if report is not None else None
    if as_json:
        info["history"] = [json.loads(flowcore.encode_record(r)) for r in records]
        if replayed is not None:
            info["report"] = replayed["trajectory"]
            info["usage"] = {
                "reported": replayed["usage"],
                "byMember": replayed["usageByMember"],
                "delegated": replayed["usageDelegated"],
            }
        click.echo(json.dumps(info))
        return

    _print((info["runId"], "bold"), f"  flow {info['flowId']}  ", (info["status"], "bold"))
    if "incarnation" in info:
        _print(f"incarnation {info['incarnation']} (continued as new)")
    _print(f"budget: {figures_text(info['budget'])}")
    none = flowcore.Usage()
    if report is not None and (report.usage_by_member or report.usage_delegated != none):
        parts = [f"{m} {usage_text(u)}" for m, u in report.usage_by_member.items()]
        if report.usage_delegated != none:
            parts.append(f"child runs {usage_text(report.usage_delegated)}")
        _print(f"usage by member: {'; '.join(parts)}")
    if records:
        span = records[-1].at - records[0].at
        _print(
            f"started {iso(records[0].at)}, last record {iso(records[-1].at)} ({duration(span)})"
        )
    if info.get("metadata"):
        _print(f"metadata: {meta_text(info['metadata'])}")
    if "forkedFrom" in info:
        forked = info["forkedFrom"]
        _print(f"forked from {forked['runId']} at index {forked['index']}")
    if info["output"] is not None:
        _print(f"output: {json.dumps(info['output'])}")
    if info["error"]:
        _print(f"error: {json.dumps(info['error'])}")
    for item in info["pending"]:
        _print(f"pending: {item['kind']} {item['key']} ({item['status']})")
    for q in info["questions"]:
        _print(f"question: {q['key']}: {q['question']} {q['options'] or ''}")
    for name in info["waitingFor"]:
        _print(f"waiting for signal: {name}")
    for buffered in info.get("buffered", []):
        _print(f"buffered signal: {buffered['signal']} {short_json(buffered.get('payload'))}")
    for dead in info["deadLetters"]:
        _print(("dead letter", "red"), f": {dead['kind']} {dead['key']}: {dead['note']}")
    for child in info["children"]:
        _print(f"child run: {child}")
    if info.get("startedBy"):
        _print(f"started by: {info['startedBy']} (detached)")
    for run in info.get("detached", []):
        _print(f"detached run: {run}")
    for failure in info.get("failures", []):
        _print(
            ("handler failed", "red"), f": {failure['key']} {failure['type']}: {failure['message']}"
        )
        if failure.get("traceback"):
            out.print(Text(failure["traceback"].rstrip(), style="dim"))
    if no_history:
        return
    _print(("history", "bold"))
    for line in timeline(records):
        out.print(line)
    if report is not None and report.trajectory:
        _print(("work effects", "bold"))
        tables().print(work_report(report))


@click.command()
@run_id_argument
@click.option("--start-index", default=0, show_default=True)
@click.option("--follow", is_flag=True, help="Keep printing until the run settles.")
@click.option(
    "--json", "as_json", is_flag=True, help="Print the raw records as NDJSON envelopes (at in ms)."
)
@db_option
def events(run_id: str, start_index: int, follow: bool, as_json: bool, db: Path) -> None:
    """The log records of RUN: a table, or NDJSON envelopes with --json."""

    async def body(host: LocalHost) -> None:
        async for record in host.events(run_id, start_index, follow):
            if as_json:
                sys.stdout.buffer.write(flowcore.encode_record(record))
                sys.stdout.flush()
            else:
                out.print(event_line(record))

    _run(db, body)


@click.command()
@run_id_argument
@output_option
@db_option
def export(run_id: str, output: Path | None, db: Path) -> None:
    """Write RUN's log (what `flowcore replay` reads)."""
    data = _run(db, lambda host: host.export(run_id))
    if output is None:
        sys.stdout.buffer.write(data)
    else:
        output.write_bytes(data)


@click.command("signal")
@signal_arguments
@db_option
def signal_(run_id: str, name: str | None, data: str | None, key: str | None, db: Path) -> None:
    """Send signal NAME to RUN (buffered if the run does not wait for it yet).

    With only NAME and --key KEY, send it to every running run that waits for
    NAME with that key, and print their ids; none waiting is an error.
    """
    run, name = signal_target(run_id, name, key)
    payload = json_value(data, "--data")
    if run is not None:
        _run(db, lambda host: host.signal(run, name, payload, key))
        return
    assert key is not None
    for got in _run(db, lambda host: host.signal_key(name, key, payload)):
        _print(got)


@click.command()
@answer_arguments
@db_option
def answer(run_id: str, key: str, answer: str | None, data: str | None, db: Path) -> None:
    """Answer RUN's question KEY with ANSWER (text, as typed) or --data (JSON)."""
    value = answer_value(answer, data)
    _run(db, lambda host: host.answer(run_id, key, value))


@click.command()
@run_id_argument
@click.option("--tools", help="The tools module to use from now on (default: the run's own).")
@click.option("--detach", is_flag=True, help="Only reopen the run; a worker runs it.")
@db_option
def resume(run_id: str, tools: str | None, detach: bool, db: Path) -> None:
    """Retry the failed RUN from its failed step, with new handlers if --tools is given.

    The run is rewound to just before the event that failed it (the records
    from there on are archived, not lost), steps that succeeded keep their
    results, and the failed work is dispatched again; then, unless --detach,
    the run is processed to the end as `run` does. Refused, saying why, where
    a rewind would not be faithful (specs/local.md §10).
    """

    async def body(host: LocalHost) -> dict[str, Any]:
        await host.resume(run_id, tools)
        if detach:
            return {}
        kept = (await host.run(run_id)).next_index
        return await _follow(host, run_id, kept, out)

    result = _run(db, body)
    if detach:
        _print(f"resumed {run_id}: a worker runs it")
        return
    _settled(result)


@click.command()
@run_id_argument
@fork_options
@click.option("--follow", is_flag=True, help="Then process the new run to the end, as `run` does.")
@click.option("--json", "as_json", is_flag=True, help="Print {runId, forkedFrom} as JSON.")
@db_option
def fork(
    run_id: str,
    at: int | None,
    from_step: str | None,
    new_run_id: str | None,
    tools: str | None,
    cancel_source: bool,
    follow: bool,
    as_json: bool,
    db: Path,
) -> None:
    """Fork RUN as a new run with its history up to a point; print the new run's id.

    The point is --at INDEX (the new run takes RUN's records before INDEX;
    it must be the index of an event record, or the end of an unsettled
    log) or --from-step ID (the step and everything after it run again).
    Work answered before the point keeps its result and is not run again;
    work open at the point runs again under the new run's keys. With
    --cancel-source RUN is cancelled in the same transaction (a reset).
    A worker (`flowcore worker`) runs the new run, or --follow here.
    """
    if (at is None) == (from_step is None):
        raise CliError("give exactly one of --at INDEX and --from-step STEP_ID")

    async def body(host: LocalHost) -> dict[str, Any] | None:
        rid = await host.fork(
            run_id,
            at=at,
            from_step=from_step,
            new_run_id=new_run_id,
            tools=tools,
            cancel_source=cancel_source,
        )
        if as_json:
            forked = (await host.show(rid)).get("forkedFrom")
            click.echo(json.dumps({"runId": rid, "forkedFrom": forked}))
        else:
            click.echo(rid)
        if not follow:
            return None
        return await _follow(host, rid, (await host.run(rid)).next_index, out)

    try:
        result = _run(db, body)
    except flowcore.ForkError as exc:
        raise CliError(f"cannot fork run {run_id!r}: {exc}") from None
    if result is not None:
        _settled(result)


@click.command()
@run_id_argument
@upgrade_options
@db_option
def upgrade(run_id: str, to: Path, dry_run: bool, as_json: bool, db: Path) -> int:
    """Move running RUN to the flow version in --to, once its log replays against it.

    The run's log is replayed against the new spec: if the new version would
    have made every recorded decision the same way, the spec is stored and
    the run pinned to it in one transaction (safe while a worker processes
    the run), and it goes on under the new version. Otherwise it stays on
    its version and the first divergence is printed (index, recorded effect,
    new spec's effect): exit 1. Exit 2 for an unknown or settled run or an
    unreadable spec.
    """
    flow = load_spec(str(to))

    async def body(host: LocalHost) -> tuple[flowcore.Flow, flowcore.Upgrade]:
        before = await host.flow(run_id)
        return before, await host.upgrade(run_id, to, dry_run=dry_run)

    try:
        before, made = _run(db, body)
    except flowcore.UpgradeRefused as exc:
        return upgrade_refused(run_id, flow, exc, as_json)
    return upgrade_done(run_id, before.version, made, dry_run, as_json)


@click.command()
@run_id_argument
@reason_option
@db_option
def cancel(run_id: str, reason: str, db: Path) -> None:
    """Cancel RUN: pending work is abandoned, compensations run.

    A run that has settled, or compensates already, has nothing to cancel:
    nothing is written, a line says so and the exit code is 1 (the HTTP API's 409).
    """

    async def body(host: LocalHost) -> str | None:
        try:
            await host.cancel(run_id, reason)
        except NothingToCancel as exc:
            return str(exc)
        return None

    nothing = _run(db, body)
    if nothing is not None:
        say(nothing)
        sys.exit(1)


COMMANDS = [
    run,
    resume,
    fork,
    upgrade,
    worker,
    runs,
    show,
    events,
    export,
    signal_,
    answer,
    cancel,
]
