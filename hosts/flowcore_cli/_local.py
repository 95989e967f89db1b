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
import signal as signals
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.table import Table
from rich.text import Text

import flowcore
from flowcore_handlers import RegistryError
from flowcore_local import DB_ENV, HostError, LocalHost, NotAFlowcoreDatabase, RunRow

from ._common import CliError, answer_value, checked_name, json_value
from ._options import (
    answer_arguments,
    input_option,
    json_option,
    output_option,
    reason_option,
    run_id_argument,
    signal_arguments,
    spec_argument,
)
from ._progress import Item, RunTree, err, out, watch

__all__ = ["COMMANDS"]

T = TypeVar("T")

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
        raise CliError(f"no database at {db} (start a run first, or pass --db)")

    async def main() -> T:
        async with LocalHost(db, tools, **options) as host:
            return await body(host)

    try:
        return asyncio.run(main())
    except (HostError, NotAFlowcoreDatabase, RegistryError) as exc:
        raise CliError(str(exc)) from None
    except (flowcore.InputError, flowcore.SpecError) as exc:
        raise CliError(" ".join(str(exc).split())) from None
    except OSError as exc:
        raise CliError(str(exc)) from None


def _tree(host: LocalHost) -> RunTree:
    """The run tree as the database holds it."""

    async def children(run_id: str, _items: Sequence[Item]) -> list[str]:
        return await host.children(run_id)

    return RunTree(
        records=host.records,
        children=children,
        answer=host.answer,
        refused=HostError,
        interval=0.1,  # a read of the local database is cheap
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
@click.option("--detach", is_flag=True, help="Start the run and print its id; a worker runs it.")
@click.option("--json", "as_json", is_flag=True, help="Print the final run as JSON.")
@db_option
def run(
    spec: Path,
    input_: str | None,
    tools: str | None,
    run_id: str | None,
    flows: tuple[Path, ...],
    detach: bool,
    as_json: bool,
    db: Path,
) -> None:
    """Start a run of SPEC and process it to the end, showing progress."""
    data = json_value(input_, "--input")

    async def body(host: LocalHost) -> dict[str, Any]:
        rid = await host.start(spec, data, run_id, tools=tools, flows=flows or [spec.parent])
        if detach:
            return {"runId": rid}
        stop = asyncio.Event()
        # With --json, stdout holds the JSON document alone: progress goes to stderr.
        watcher = asyncio.create_task(watch(_tree(host), rid, stop, err if as_json else out))
        try:
            await host.work(until_settled=rid)
        finally:
            stop.set()
            await watcher
        row = await host.run(rid)
        return {"runId": rid, "status": row.status, "output": row.output, "error": row.error}

    result = _run(db, body, tools, must_exist=False)
    if detach:
        click.echo(result["runId"])
        return
    if as_json:
        click.echo(json.dumps(result))
    else:
        _print(f"output: {json.dumps(result['output'])}")
        if result["error"]:
            _print(f"error: {json.dumps(result['error'])}")
    if result["status"] != "completed":
        sys.exit(1)


@click.command()
@click.option("--tools", help="Default tools module for runs that did not record one.")
@click.option("--concurrency", default=64, show_default=True, help="Handlers running at once.")
@click.option("--max-recoveries", default=3, show_default=True, help="Before a dead letter.")
@click.option("--until-idle", is_flag=True, help="Stop when no run is left running.")
@db_option
def worker(
    tools: str | None, concurrency: int, max_recoveries: int, until_idle: bool, db: Path
) -> None:
    """Resume and process every run in the database until stopped."""

    async def body(host: LocalHost) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signals.SIGINT, signals.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        if until_idle:

            async def idle() -> None:
                while not stop.is_set():
                    if not await host.runs("running"):
                        stop.set()
                    await asyncio.sleep(0.2)

            watcher = asyncio.create_task(idle())
        await host.work(stop)
        if until_idle:
            await watcher

    _run(db, body, tools, must_exist=False, concurrency=concurrency, max_recoveries=max_recoveries)


@click.command()
@click.option("--status", help="Only runs with this status.")
@click.option("--tree", is_flag=True, help="Show subflows under their parents.")
@json_option
@db_option
def runs(status: str | None, tree: bool, as_json: bool, db: Path) -> None:
    """List the runs in the database."""
    rows = _run(db, lambda host: host.runs(status))
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
                    }
                    for r in rows
                ]
            )
        )
        return
    table = Table("run", "flow", "status", "parent")

    def add_row(r: RunRow, run: str) -> None:
        # Text cells: ids are shown as they are, never read as markup.
        table.add_row(*(Text(cell) for cell in (run, r.flow_id, r.status, r.parent_run or "")))

    if tree:
        by_parent: dict[str | None, list[RunRow]] = {}
        known = {r.run_id for r in rows}
        for r in rows:
            by_parent.setdefault(r.parent_run if r.parent_run in known else None, []).append(r)

        def add(parent: str | None, depth: int) -> None:
            for r in by_parent.get(parent, []):
                add_row(r, "  " * depth + ("└ " if depth else "") + r.run_id)
                add(r.run_id, depth + 1)

        add(None, 0)
    else:
        for r in rows:
            add_row(r, r.run_id)
    out.print(table)


@click.command()
@run_id_argument
@json_option
@db_option
def show(run_id: str, as_json: bool, db: Path) -> None:
    """Status, pending effects and questions, budget, dead letters of RUN."""
    info = _run(db, lambda host: host.show(run_id))
    if as_json:
        click.echo(json.dumps(info))
        return

    _print((info["runId"], "bold"), f"  flow {info['flowId']}  ", (info["status"], "bold"))
    budget = info["budget"]
    steps_left = "unlimited" if budget["stepsLeft"] is None else budget["stepsLeft"]
    cost_left = "unlimited" if budget["costLeft"] is None else budget["costLeft"]
    _print(
        f"budget: {budget['stepsUsed']} steps used, {steps_left} left;"
        f" cost {budget['costUsed']} used, {cost_left} left"
    )
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
    for dead in info["deadLetters"]:
        _print(("dead letter", "red"), f": {dead['kind']} {dead['key']}: {dead['note']}")
    for child in info["children"]:
        _print(f"child run: {child}")


@click.command()
@run_id_argument
@click.option("--start-index", default=0, show_default=True)
@click.option("--follow", is_flag=True, help="Keep printing until the run settles.")
@db_option
def events(run_id: str, start_index: int, follow: bool, db: Path) -> None:
    """The log records of RUN as NDJSON envelopes."""

    async def body(host: LocalHost) -> None:
        async for record in host.events(run_id, start_index, follow):
            sys.stdout.buffer.write(flowcore.encode_record(record))
            sys.stdout.flush()

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
def signal_(run_id: str, name: str, data: str | None, db: Path) -> None:
    """Send signal NAME to RUN (buffered if the run does not wait for it yet)."""
    payload = json_value(data, "--data")
    _run(db, lambda host: host.signal(run_id, name, payload))


@click.command()
@answer_arguments
@db_option
def answer(run_id: str, key: str, answer: str | None, data: str | None, db: Path) -> None:
    """Answer RUN's question KEY with ANSWER (text, as typed) or --data (JSON)."""
    value = answer_value(answer, data)
    _run(db, lambda host: host.answer(run_id, key, value))


@click.command()
@run_id_argument
@reason_option
@db_option
def cancel(run_id: str, reason: str, db: Path) -> None:
    """Cancel RUN: pending work is abandoned, compensations run."""
    _run(db, lambda host: host.cancel(run_id, reason))


COMMANDS = [run, worker, runs, show, events, export, signal_, answer, cancel]
