"""``flowcore temporal ...``: the Temporal host's commands.

worker, run, signal, answer, cancel, show, export. Every failure a user can
cause (a server that cannot be reached, an unknown run, bad JSON, a bad spec,
a rejected answer) prints one line on stderr and exits 2. JSON options, names
and answers are read and checked by ``flowcore_cli._common`` (shared with the
local host's commands) before anything is sent: a signal is not answered, so
a value the workflow would refuse must never leave this process.

temporalio is imported only when a command runs, so the rest of ``flowcore``
neither pays for it nor needs the ``temporal`` extra. A process that used a
Temporal client ends with ``os._exit`` once its output is flushed: temporalio's
native runtime can abort the interpreter while it finalizes (DESIGN section 7,
temporalio/sdk-python#300).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal as signals
import sys
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

import flowcore
from flowcore_cli._common import (
    CliError,
    answer_value,
    checked_name,
    internal_error,
    invoke,
    json_value,
    problem_line,
    say,
)

if TYPE_CHECKING:
    from temporalio.client import Client

    from ._host import TemporalHost

__all__ = ["GROUP", "main"]

T = TypeVar("T")
ADDRESS_ENV = "FLOWCORE_TEMPORAL_ADDRESS"
QUEUE_ENV = "FLOWCORE_TEMPORAL_TASK_QUEUE"
NAMESPACE_ENV = "FLOWCORE_TEMPORAL_NAMESPACE"


FROM_FILE = " @FILE reads it from a file, - from standard input."


def _finish(code: int) -> NoReturn:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _connection_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    fn = click.option(
        "--namespace",
        envvar=NAMESPACE_ENV,
        default="default",
        show_default=True,
        help=f"Temporal namespace (or ${NAMESPACE_ENV}).",
    )(fn)
    fn = click.option(
        "--task-queue",
        envvar=QUEUE_ENV,
        default="flowcore",
        show_default=True,
        help=f"Task queue of the flowcore workers (or ${QUEUE_ENV}).",
    )(fn)
    fn = click.option(
        "--address",
        envvar=ADDRESS_ENV,
        default="localhost:7233",
        show_default=True,
        help=f"HOST:PORT of the Temporal frontend (or ${ADDRESS_ENV}).",
    )(fn)
    return fn


def _with_host(
    address: str,
    namespace: str,
    task_queue: str,
    body: Callable[[TemporalHost], Awaitable[T]],
    after: Callable[[T], int],
) -> NoReturn:
    """Connect, run ``body``, print through ``after`` (its exit code), and end the process.

    Every path ends in ``os._exit`` once a client may exist; a known error is
    one line on stderr and exit 2.
    """
    try:
        from temporalio.service import RPCError

        import flowcore_temporal as ft
        from flowcore_handlers import RegistryError
    except ImportError as exc:
        raise CliError(
            f"the Temporal host needs the temporal extra (pip install 'flowcore[temporal]'): {exc}"
        ) from None

    async def main() -> T:
        host = await ft.TemporalHost.connect(address, namespace, task_queue)
        return await body(host)

    code = 2
    try:
        result = asyncio.run(main())
        code = after(result)
    except click.ClickException as exc:
        say(exc.format_message())
        code = 2 if exc.exit_code == 1 else exc.exit_code
    except flowcore.SpecError as exc:
        for problem in exc.problems:
            say(problem_line(problem))
    except (ft.TemporalHostError, flowcore.InputError, RegistryError, OSError) as exc:
        say(" ".join(str(exc).split()))
    except RPCError as exc:
        say(f"Temporal said: {exc.message}")
    except KeyboardInterrupt:
        say("interrupted")
        code = 130
    except Exception as exc:  # the last line of defence: never a traceback
        say(internal_error(exc))
    _finish(code)


# --- worker -----------------------------------------------------------------------------


@click.command()
@click.option("--tools", help="Tools module: a dotted module name or a .py file.")
@click.option(
    "--max-concurrent-activities",
    default=100,
    show_default=True,
    help="Handlers this worker runs at once.",
)
@_connection_options
def worker(
    tools: str | None,
    max_concurrent_activities: int,
    address: str,
    task_queue: str,
    namespace: str,
) -> None:
    """Run flowcore workflows and their handlers (from --tools) until stopped."""

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
        )
        async with w:
            click.echo(
                f"flowcore: worker polling task queue {task_queue!r} at {address}"
                f" (tools: {tools or 'none'})",
                err=True,
            )
            await stop.wait()

    _with_host(address, namespace, task_queue, body, lambda _: 0)


# --- run --------------------------------------------------------------------------------


def _line(record: flowcore.Record) -> str | None:
    data = record.data if isinstance(record.data, dict) else {}
    kind = data.get("kind")
    key = data.get("idempotencyKey", "")
    if record.type == "effect.emitted":
        if kind == "call-tool":
            return f"→ call-tool {data.get('tool')} {key}"
        if kind == "run-agent":
            member = f" ({data['member']})" if data.get("member") else ""
            return f"→ run-agent {data.get('agentId')}{member} {key}"
        if kind == "run-team":
            return f"→ run-team {data.get('teamId')} {key}"
        if kind == "ask-human":
            return f"? {data.get('question')} {data.get('options') or ''} {key}"
        if kind == "await-signal":
            return f"… waiting for signal {data.get('signal')} {key}"
        if kind == "run-subflow":
            return f"→ run-subflow {data.get('flowId')} {key}"
        if kind == "settled":
            return f"■ {record.run_id} settled {data.get('status')}"
    if record.type == "event.reported":
        if kind == "effect-succeeded":
            return f"✓ {key}"
        if kind == "effect-failed":
            error = data.get("error", {})
            return f"✗ {key} {error.get('type')}: {error.get('message')}"
        if kind == "effect-outcome-unknown":
            return f"? {key} outcome unknown"
        if kind == "human-answered":
            return f"! {key} answered {data.get('answer')!r}"
        if kind == "signal-received":
            return f"! signal {data.get('signal')} received"
        if kind == "subflow-settled":
            return f"✓ {key} subflow {data.get('status')}"
        if kind == "cancel-requested":
            return f"■ cancel requested: {data.get('reason')}"
    return None


def _in_daemon_thread(fn: Callable[[], T]) -> asyncio.Future[T]:
    """Run ``fn`` in a daemon thread: a prompt blocked on stdin must not keep
    ``asyncio.run`` from returning (its default executor would wait for it)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def deliver(result: T | None, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)  # type: ignore[arg-type]

    def target() -> None:
        try:
            result, error = fn(), None
        except BaseException as exc:  # handed to the waiting coroutine
            result, error = None, exc
        try:
            loop.call_soon_threadsafe(deliver, result, error)
        except RuntimeError:
            pass  # the loop is gone: nobody waits any more

    threading.Thread(target=target, daemon=True).start()
    return future


async def _ask(host: TemporalHost, run_id: str, key: str, question: str, options: Any) -> None:
    import flowcore_temporal as ft

    def prompt() -> str | None:
        if sys.stdin.isatty():
            answer: str = click.prompt(
                question, type=click.Choice(options) if options else str, err=True
            )
            return answer
        line = sys.stdin.readline()
        return line.strip() if line else None

    while True:
        answer = await _in_daemon_thread(prompt)
        if answer is None:
            return  # no terminal input: answer with `flowcore temporal answer`
        try:
            await host.answer(run_id, key, answer)
            return
        except ft.TemporalHostError as exc:
            say(str(exc))  # and ask again (next line of stdin)


async def _watch(host: TemporalHost, root: str, stop: asyncio.Event) -> None:
    """Print the run tree's log records as they are written; ask its questions."""
    import flowcore_temporal as ft

    seen: dict[str, int] = {root: 0}
    asked: set[str] = set()
    questions: list[asyncio.Task[None]] = []
    while True:
        for run_id in list(seen):
            try:
                records = await host.records(run_id, seen[run_id])
            except ft.TemporalHostError:
                continue  # a child that has not started yet, or has ended
            for record in records:
                seen[run_id] = record.index + 1
                text = _line(record)
                if text is not None:
                    click.echo(text)
                data = record.data if isinstance(record.data, dict) else {}
                if record.type != "effect.emitted":
                    continue
                if data.get("kind") == "run-subflow":
                    child = _child_id(run_id, data["idempotencyKey"])
                    seen.setdefault(child, 0)
                elif data.get("kind") == "ask-human" and data["idempotencyKey"] not in asked:
                    asked.add(data["idempotencyKey"])
                    questions.append(
                        asyncio.create_task(
                            _ask(
                                host,
                                run_id,
                                data["idempotencyKey"],
                                data["question"],
                                data.get("options"),
                            )
                        )
                    )
        if stop.is_set():
            for task in questions:
                task.cancel()
            return
        await asyncio.sleep(0.2)


def _child_id(workflow_id: str, key: str) -> str:
    # Runs started here have workflow id == run id, so a child's is its key.
    return key if key.startswith(workflow_id + "/") else f"{workflow_id}/{key}"


@click.command()
@click.argument("spec", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--input",
    "input_",
    help="The run's input as JSON;"
    + FROM_FILE
    + " (With -, questions are not answered from standard input.)",
)
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
@click.option("--detach", is_flag=True, help="Start the run, print its id, do not wait.")
@click.option("--json", "as_json", is_flag=True, help="Print the final result as JSON.")
@_connection_options
def run(
    spec: Path,
    input_: str | None,
    run_id: str | None,
    flows: tuple[Path, ...],
    tools: str | None,
    budget: str | None,
    activity_timeout_ms: int,
    heartbeat_timeout_ms: int,
    detach: bool,
    as_json: bool,
    address: str,
    task_queue: str,
    namespace: str,
) -> None:
    """Start a run of SPEC on Temporal (a worker runs it) and follow it to the end."""
    if input_ == "-" and budget == "-":
        raise CliError("--input and --budget cannot both read standard input (-)")
    data = json_value(input_, "--input")
    caps = json_value(budget, "--budget")
    if caps is not None and not (
        isinstance(caps, dict)
        and all(isinstance(v, int) and not isinstance(v, bool) for v in caps.values())
    ):
        raise CliError('--budget must be a JSON object of integers, e.g. {"steps": 10}')

    async def body(host: TemporalHost) -> dict[str, Any]:
        rid = await host.start(
            spec,
            data,
            run_id,
            flows=flows,
            tools=tools,
            budget=caps,
            activity_timeout_ms=activity_timeout_ms,
            heartbeat_timeout_ms=heartbeat_timeout_ms or None,
        )
        if detach:
            return {"runId": rid}
        stop = asyncio.Event()
        watcher = asyncio.create_task(_watch(host, rid, stop))
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

    _with_host(address, namespace, task_queue, body, after)


# --- talking to runs --------------------------------------------------------------------


@click.command("signal")
@click.argument("run_id", callback=checked_name)
@click.argument("name", callback=checked_name)
@click.option("--data", help="The signal's payload as JSON;" + FROM_FILE)
@_connection_options
def signal_(
    run_id: str, name: str, data: str | None, address: str, task_queue: str, namespace: str
) -> None:
    """Send signal NAME to RUN (buffered if the run does not wait for it yet)."""
    payload = json_value(data, "--data")
    _with_host(
        address, namespace, task_queue, lambda h: h.signal(run_id, name, payload), lambda _: 0
    )


@click.command()
@click.argument("run_id", callback=checked_name)
@click.argument("key", callback=checked_name)
@click.argument("answer", required=False)
@click.option(
    "--data",
    help="The answer as JSON instead of ANSWER (any value, for a question without options);"
    + FROM_FILE,
)
@_connection_options
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
    _with_host(address, namespace, task_queue, lambda h: h.answer(run_id, key, value), lambda _: 0)


@click.command()
@click.argument("run_id", callback=checked_name)
@click.option("--reason", default="", help="Why (recorded in the log).")
@_connection_options
def cancel(run_id: str, reason: str, address: str, task_queue: str, namespace: str) -> None:
    """Cancel RUN: pending work is abandoned, compensations run, it settles cancelled."""
    _with_host(address, namespace, task_queue, lambda h: h.cancel(run_id, reason), lambda _: 0)


@click.command()
@click.argument("run_id", callback=checked_name)
@click.option("--json", "as_json", is_flag=True)
@_connection_options
def show(run_id: str, as_json: bool, address: str, task_queue: str, namespace: str) -> None:
    """Status, budget, pending work, questions and awaited signals of RUN."""

    def after(info: dict[str, Any]) -> int:
        if as_json:
            click.echo(json.dumps(info))
            return 0
        click.echo(
            f"{info.get('runId')}  flow {info.get('flowId', '?')}  {info.get('status')}"
            f"  (Temporal: {info.get('temporal')})"
        )
        budget = info.get("budget")
        if budget:
            click.echo(
                f"budget: {budget['stepsUsed']} steps used, {budget['stepsLeft']} left;"
                f" cost {budget['costUsed']} used, {budget['costLeft']} left"
            )
        usage = info.get("usage")
        if usage:
            click.echo(f"usage: {usage['steps']} steps, cost {usage['costMinorUnits']}")
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

    _with_host(address, namespace, task_queue, lambda h: h.status(run_id), after)


@click.command()
@click.argument("run_id", callback=checked_name)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--live",
    is_flag=True,
    help="Ask the running workflow (the log query) instead of replaying its history.",
)
@_connection_options
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
        if live:
            return flowcore.encode_records(await host.records(run_id))
        return await host.export(run_id)

    def after(data: bytes) -> int:
        if output is None:
            sys.stdout.buffer.write(data)
        else:
            output.write_bytes(data)
        return 0

    _with_host(address, namespace, task_queue, body, after)


@click.group("temporal")
def GROUP() -> None:
    """Run flows on a Temporal cluster (needs the temporal extra)."""


for _command in (worker, run, signal_, answer, cancel, show, export):
    GROUP.add_command(_command)


def main() -> None:
    """``python -m flowcore_temporal``: the group on its own, same checks and exit codes."""
    _finish(invoke(GROUP, None, "flowcore temporal"))
