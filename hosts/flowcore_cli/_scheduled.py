"""``flowcore scheduled``: the scheduled calls of runs, listed and managed by a person.

``list`` reads the local host's table of scheduled calls (one query across
runs, ``flowcore_local._scheduled``); ``cancel``, ``run-now`` and ``add`` send
the run the scheduled-call events from outside (``specs/protocol.md``), so
what they do is in the run's log and ``flowcore replay`` reproduces it.
``cancel`` and ``run-now`` print ``true`` when the call was still pending;
when it was not (an unknown id, or one already issued or finished) they write
nothing, print ``false`` and exit 1, as the HTTP API answers 409.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click
import msgspec

from flowcore_local import LocalHost, ScheduledRow

from ._common import checked_name, duration_value, json_value
from ._history import scheduled_answer, scheduled_table, tables
from ._local import _print, _run, db_option
from ._options import json_option, run_id_argument

__all__ = ["scheduled"]

STATUSES = ("pending", "running", "completed", "failed", "cancelled", "uncertain")


def _row_json(row: ScheduledRow) -> dict[str, Any]:
    out: dict[str, Any] = msgspec.to_builtins(row)
    return out


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def scheduled() -> None:
    """The scheduled calls of runs: list, cancel, run now, add.

    A `schedule` step (or `scheduled add`) creates a call that fires after a
    delay; its failure never fails the run. Ids are the run's own
    (`RUN/nudge#1`, `RUN/~scheduled-1`); the commands also take them without
    the `RUN/` prefix.
    """


@scheduled.command("list")
@click.option("--run", "run_id", callback=checked_name, help="Only the calls of this run.")
@click.option("--tool", help="Only the calls to this tool.")
@click.option("--status", type=click.Choice(STATUSES), help="Only calls with this status.")
@json_option
@db_option
def list_(
    run_id: str | None, tool: str | None, status: str | None, as_json: bool, db: Path
) -> None:
    """List scheduled calls across runs, the soonest due first.

    Each shows its id, run, tool, arguments, when it was created and is (or
    was) due, how many times it was issued, its status (pending, running,
    completed, failed, cancelled, uncertain) and its error. Finished calls
    stay listed for as long as the worker's retention keeps them.
    """

    async def body(host: LocalHost) -> list[ScheduledRow]:
        return await host.scheduled(run_id, tool, status)

    rows = _run(db, body)
    if as_json:
        click.echo(json.dumps([_row_json(r) for r in rows], ensure_ascii=False))
        return
    if not rows:
        _print("no scheduled calls" + (" match" if run_id or tool or status else ""))
        return
    tables().print(scheduled_table(rows))


@scheduled.command()
@run_id_argument
@click.argument("schedule_id", metavar="ID")
@json_option
@db_option
def cancel(run_id: str, schedule_id: str, as_json: bool, db: Path) -> None:
    """Cancel RUN's scheduled call ID before it runs.

    Prints true if it was pending (it is now cancelled and stays listed).
    If it was not (an unknown id, or a call already issued or finished),
    nothing is written: prints false, says so on stderr, exits 1.
    """

    async def body(host: LocalHost) -> bool:
        return await host.cancel_scheduled(run_id, schedule_id)

    sys.exit(scheduled_answer(_run(db, body), schedule_id, run_id, as_json))


@scheduled.command("run-now")
@run_id_argument
@click.argument("schedule_id", metavar="ID")
@json_option
@db_option
def run_now(run_id: str, schedule_id: str, as_json: bool, db: Path) -> None:
    """Issue RUN's pending scheduled call ID now instead of at its due time.

    Prints true if it was pending (a worker runs it); if it was not, nothing
    is written: prints false, says so on stderr, exits 1.
    """

    async def body(host: LocalHost) -> bool:
        return await host.run_scheduled_now(run_id, schedule_id)

    sys.exit(scheduled_answer(_run(db, body), schedule_id, run_id, as_json, "run now"))


@scheduled.command()
@run_id_argument
@click.argument("tool")
@click.option("--input", "input_", help="The call's input, as JSON (inline, @FILE or -).")
@click.option(
    "--delay", default="0s", show_default=True, help="When it fires: 90s, 2h30m, PT2H, or ms."
)
@json_option
@db_option
def add(run_id: str, tool: str, input_: str | None, delay: str, as_json: bool, db: Path) -> None:
    """Schedule a call to TOOL in RUN, after --delay; prints its id.

    Only tools the run's flow declares `schedulable: true` under `tools:` are
    accepted; the error lists them.
    """
    value = json_value(input_, "--input")
    delay_ms = duration_value(delay, "--delay", allow_zero=True)

    async def body(host: LocalHost) -> str:
        return await host.add_scheduled(run_id, tool, value, delay_ms)

    sid = _run(db, body)
    if as_json:
        click.echo(json.dumps({"runId": run_id, "id": sid, "delayMs": delay_ms}))
    else:
        click.echo(sid)
