"""The local host's part of the ``flowcore`` command.

run, worker, runs, show, events, export, signal, answer, cancel. Every
failure a user can cause (unknown run, bad JSON, a file that is not a flowcore
database, a rejected answer) prints one line on stderr and exits 2, and is
found before the database is written. JSON options, names and answers are
read and checked by ``flowcore_cli._common``, shared with the Temporal host's
commands (``specs/cli.md``, "Values on the command line").
"""

from __future__ import annotations

import asyncio
import json
import signal as signals
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.table import Table

import flowcore
from flowcore_cli._common import CliError, answer_value, checked_name, json_value, say
from flowcore_handlers import RegistryError

from ._db import DB_ENV, NotAFlowcoreDatabase
from ._host import LocalHost
from ._store import HostError

__all__ = ["COMMANDS"]

T = TypeVar("T")
out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

db_option = click.option(
    "--db",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar=DB_ENV,
    default="flowcore.db",
    show_default=True,
    help=f"The SQLite database file (or ${DB_ENV}).",
)


FROM_FILE = " @FILE reads it from a file, - from standard input."


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


def _line(record: flowcore.Record) -> str | None:
    data = record.data if isinstance(record.data, dict) else {}
    who = record.run_id
    if record.type == "effect.emitted":
        kind = data.get("kind")
        key = data.get("idempotencyKey", "")
        if kind == "call-tool":
            return f"[cyan]→ call-tool[/] {data.get('tool')} {key}"
        if kind == "run-agent":
            budget = data.get("budgetRemaining", {})
            member = f" ({data['member']})" if data.get("member") else ""
            return (
                f"[cyan]→ run-agent[/] {data.get('agentId')}{member} {key}"
                f"  [dim]budget left: {budget.get('steps')} steps"
                + (f", {budget['costMinorUnits']} cost" if "costMinorUnits" in budget else "")
                + "[/]"
            )
        if kind == "run-team":
            return f"[cyan]→ run-team[/] {data.get('teamId')} {key}"
        if kind == "ask-human":
            return f"[magenta]? {data.get('question')}[/] {data.get('options') or ''} {key}"
        if kind == "await-signal":
            return f"[yellow]… waiting for signal[/] {data.get('signal')} {key}"
        if kind == "sleep":
            return None
        if kind == "run-subflow":
            return f"[cyan]→ run-subflow[/] {data.get('flowId')} {key}"
        if kind == "settled":
            return f"[bold]■ {who} settled {data.get('status')}[/]"
    if record.type == "event.reported":
        kind = data.get("kind")
        key = data.get("idempotencyKey", "")
        if kind == "effect-succeeded":
            return f"[green]✓[/] {key}"
        if kind == "effect-failed":
            error = data.get("error", {})
            return f"[red]✗[/] {key} {error.get('type')}: {error.get('message')}"
        if kind == "effect-outcome-unknown":
            return f"[red]?[/] {key} outcome unknown"
        if kind == "human-answered":
            return f"[magenta]![/] {key} answered {data.get('answer')!r}"
        if kind == "signal-received":
            return f"[yellow]![/] signal {data.get('signal')} received"
        if kind == "subflow-settled":
            return f"[green]✓[/] {key} subflow {data.get('status')}"
        if kind == "cancel-requested":
            return f"[red]■[/] cancel requested: {data.get('reason')}"
        if kind == "timer-fired" and not key.endswith("$deadline"):
            return f"[dim]⏲ {key}[/]"
    return None


async def _ask(
    host: LocalHost, run_id: str, key: str, question: str, options: list[str] | None
) -> None:
    def prompt() -> str | None:
        if sys.stdin.isatty():
            return click.prompt(
                f"{question}", type=click.Choice(options) if options else str, err=True
            )
        line = sys.stdin.readline()
        return line.strip() if line else None

    while True:
        answer = await asyncio.to_thread(prompt)
        if answer is None:
            return  # no terminal input: answer with `flowcore answer`
        try:
            await host.answer(run_id, key, answer)
            return
        except HostError as exc:
            say(str(exc))  # and ask again
            if not sys.stdin.isatty():
                return


async def _watch(host: LocalHost, root: str, stop: asyncio.Event, console: Console) -> None:
    """Print the run tree's records as they are written; ask its questions."""
    seen: dict[str, int] = {}
    asked: set[str] = set()
    questions: list[asyncio.Task[None]] = []
    while True:
        runs = [root]
        i = 0
        while i < len(runs):
            runs.extend(await host.children(runs[i]))
            i += 1
        for run_id in runs:
            for record in await host.records(run_id, seen.get(run_id, 0)):
                seen[run_id] = record.index + 1
                text = _line(record)
                if text is not None:
                    console.print(text)
                data = record.data if isinstance(record.data, dict) else {}
                if record.type == "effect.emitted" and data.get("kind") == "ask-human":
                    key = data["idempotencyKey"]
                    if key not in asked:
                        asked.add(key)
                        questions.append(
                            asyncio.create_task(
                                _ask(host, run_id, key, data["question"], data.get("options"))
                            )
                        )
        if stop.is_set():
            for task in questions:
                task.cancel()
            return
        await asyncio.sleep(0.1)


@click.command()
@click.argument("spec", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--input",
    "input_",
    help="The run's input as JSON;"
    + FROM_FILE
    + " (With -, questions are not answered from standard input.)",
)
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
        watcher = asyncio.create_task(_watch(host, rid, stop, err if as_json else out))
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
        out.print(f"output: {json.dumps(result['output'])}")
        if result["error"]:
            out.print(f"error: {json.dumps(result['error'])}")
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
@click.option("--json", "as_json", is_flag=True)
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
    if tree:
        by_parent: dict[str | None, list[Any]] = {}
        known = {r.run_id for r in rows}
        for r in rows:
            by_parent.setdefault(r.parent_run if r.parent_run in known else None, []).append(r)

        def add(parent: str | None, depth: int) -> None:
            for r in by_parent.get(parent, []):
                table.add_row(
                    "  " * depth + ("└ " if depth else "") + r.run_id,
                    r.flow_id,
                    r.status,
                    r.parent_run or "",
                )
                add(r.run_id, depth + 1)

        add(None, 0)
    else:
        for r in rows:
            table.add_row(r.run_id, r.flow_id, r.status, r.parent_run or "")
    out.print(table)


@click.command()
@click.argument("run_id", callback=checked_name)
@click.option("--json", "as_json", is_flag=True)
@db_option
def show(run_id: str, as_json: bool, db: Path) -> None:
    """Status, pending effects and questions, budget, dead letters of RUN."""
    info = _run(db, lambda host: host.show(run_id))
    if as_json:
        click.echo(json.dumps(info))
        return
    out.print(f"[bold]{info['runId']}[/]  flow {info['flowId']}  [bold]{info['status']}[/]")
    budget = info["budget"]
    steps_left = "unlimited" if budget["stepsLeft"] is None else budget["stepsLeft"]
    cost_left = "unlimited" if budget["costLeft"] is None else budget["costLeft"]
    out.print(
        f"budget: {budget['stepsUsed']} steps used, {steps_left} left;"
        f" cost {budget['costUsed']} used, {cost_left} left"
    )
    if info["output"] is not None:
        out.print(f"output: {json.dumps(info['output'])}")
    if info["error"]:
        out.print(f"error: {json.dumps(info['error'])}")
    for item in info["pending"]:
        out.print(f"pending: {item['kind']} {item['key']} ({item['status']})")
    for q in info["questions"]:
        out.print(f"question: {q['key']}: {q['question']} {q['options'] or ''}")
    for name in info["waitingFor"]:
        out.print(f"waiting for signal: {name}")
    for dead in info["deadLetters"]:
        out.print(f"[red]dead letter[/]: {dead['kind']} {dead['key']}: {dead['note']}")
    for child in info["children"]:
        out.print(f"child run: {child}")


@click.command()
@click.argument("run_id", callback=checked_name)
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
@click.argument("run_id", callback=checked_name)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path))
@db_option
def export(run_id: str, output: Path | None, db: Path) -> None:
    """Write RUN's log (what `flowcore replay` reads)."""
    data = _run(db, lambda host: host.export(run_id))
    if output is None:
        sys.stdout.buffer.write(data)
    else:
        output.write_bytes(data)


@click.command("signal")
@click.argument("run_id", callback=checked_name)
@click.argument("name", callback=checked_name)
@click.option("--data", help="The signal's payload as JSON;" + FROM_FILE)
@db_option
def signal_(run_id: str, name: str, data: str | None, db: Path) -> None:
    """Send signal NAME to RUN (buffered if the run does not wait for it yet)."""
    payload = json_value(data, "--data")
    _run(db, lambda host: host.signal(run_id, name, payload))


@click.command()
@click.argument("run_id", callback=checked_name)
@click.argument("key", callback=checked_name)
@click.argument("answer", required=False)
@click.option(
    "--data",
    help="The answer as JSON instead of ANSWER (any value, for a question without options);"
    + FROM_FILE,
)
@db_option
def answer(run_id: str, key: str, answer: str | None, data: str | None, db: Path) -> None:
    """Answer RUN's question KEY with ANSWER (text, as typed) or --data (JSON)."""
    value = answer_value(answer, data)
    _run(db, lambda host: host.answer(run_id, key, value))


@click.command()
@click.argument("run_id", callback=checked_name)
@click.option("--reason", default="", help="Why (recorded in the log).")
@db_option
def cancel(run_id: str, reason: str, db: Path) -> None:
    """Cancel RUN: pending work is abandoned, compensations run."""
    _run(db, lambda host: host.cancel(run_id, reason))


COMMANDS = [run, worker, runs, show, events, export, signal_, answer, cancel]
