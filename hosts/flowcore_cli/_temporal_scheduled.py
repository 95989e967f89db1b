"""``flowcore temporal scheduled list|cancel|run-now|add``: a run's scheduled calls on Temporal.

The same subcommands as ``flowcore scheduled``, through the run's workflow:
``list`` is its ``scheduled_calls`` query (one run at a time: Temporal keeps a
run's state in its workflow, not in a table to search across runs), and
``cancel``, ``run-now`` and ``add`` its ``scheduled`` update, so what they do
is in the run's history and log, and the interpreter answers (an add of a tool
that is not ``schedulable`` is refused, saying which are).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click
import msgspec

import flowcore

from ._common import duration_value, json_value
from ._history import scheduled_answer, scheduled_table, tables
from ._options import json_option, run_id_argument
from ._progress import out
from ._temporal_session import connection_options, with_host

if TYPE_CHECKING:
    from flowcore_temporal import TemporalHost

__all__ = ["scheduled"]

STATUSES = ("pending", "running", "completed", "failed", "cancelled", "uncertain")


@click.group()
def scheduled() -> None:
    """A run's scheduled calls on Temporal: list, cancel, run now, add.

    Ids are the run's own (`RUN/nudge#1`, `RUN/~scheduled-1`); the commands
    also take them without the `RUN/` prefix.
    """


@scheduled.command("list")
@run_id_argument
@click.option("--tool", help="Only the calls to this tool.")
@click.option("--status", type=click.Choice(STATUSES), help="Only calls with this status.")
@json_option
@connection_options
def list_(
    run_id: str,
    tool: str | None,
    status: str | None,
    as_json: bool,
    address: str,
    task_queue: str,
    namespace: str,
) -> None:
    """List RUN's scheduled calls, pending and finished, the soonest due first."""

    async def body(host: TemporalHost) -> list[flowcore.ScheduledCall]:
        return [
            call
            for call in await host.scheduled(run_id)
            if (tool is None or call.tool == tool) and (status is None or call.status == status)
        ]

    def after(calls: list[flowcore.ScheduledCall]) -> int:
        if as_json:
            rows: list[dict[str, Any]] = msgspec.to_builtins(calls)
            click.echo(json.dumps(rows, ensure_ascii=False))
        elif not calls:
            out.print("no scheduled calls" + (" match" if tool or status else ""))
        else:
            tables().print(scheduled_table(calls))
        return 0

    with_host(address, namespace, task_queue, body, after)


@scheduled.command()
@run_id_argument
@click.argument("schedule_id", metavar="ID")
@json_option
@connection_options
def cancel(
    run_id: str, schedule_id: str, as_json: bool, address: str, task_queue: str, namespace: str
) -> None:
    """Cancel RUN's scheduled call ID before it runs: true if it was pending, else
    false (on stderr: nothing to cancel; exit 1)."""

    def after(done: bool) -> int:
        return scheduled_answer(done, schedule_id, run_id, as_json)

    with_host(
        address, namespace, task_queue, lambda h: h.cancel_scheduled(run_id, schedule_id), after
    )


@scheduled.command("run-now")
@run_id_argument
@click.argument("schedule_id", metavar="ID")
@json_option
@connection_options
def run_now(
    run_id: str, schedule_id: str, as_json: bool, address: str, task_queue: str, namespace: str
) -> None:
    """Issue RUN's pending scheduled call ID now: true if it was pending, else
    false (on stderr: nothing to run now; exit 1)."""

    def after(done: bool) -> int:
        return scheduled_answer(done, schedule_id, run_id, as_json, "run now")

    with_host(
        address, namespace, task_queue, lambda h: h.run_scheduled_now(run_id, schedule_id), after
    )


@scheduled.command()
@run_id_argument
@click.argument("tool")
@click.option("--input", "input_", help="The call's input, as JSON (inline, @FILE or -).")
@click.option(
    "--delay", default="0s", show_default=True, help="When it fires: 90s, 2h30m, PT2H, or ms."
)
@json_option
@connection_options
def add(
    run_id: str,
    tool: str,
    input_: str | None,
    delay: str,
    as_json: bool,
    address: str,
    task_queue: str,
    namespace: str,
) -> None:
    """Schedule a call to TOOL in RUN after --delay (a tool declared schedulable); prints its id."""
    value = json_value(input_, "--input")
    delay_ms = duration_value(delay, "--delay", allow_zero=True)

    def after(sid: str) -> int:
        if as_json:
            click.echo(json.dumps({"runId": run_id, "id": sid, "delayMs": delay_ms}))
        else:
            click.echo(sid)
        return 0

    with_host(
        address,
        namespace,
        task_queue,
        lambda h: h.add_scheduled(run_id, tool, value, delay_ms),
        after,
    )
