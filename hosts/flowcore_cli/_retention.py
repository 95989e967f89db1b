"""The local host's commands that end runs for good: ``delete`` and ``prune``.

Both remove whole run trees (a run with its child runs) from the database,
every row of them, through ``LocalHost.delete`` and ``LocalHost.prune``
(``flowcore_local._prune``); ``flowcore worker --retention`` prunes as it
works (``_local``). Durations are read by ``flowcore.parse_duration``,
times come from the host's clock. A run still running is refused unless
``--force`` (which cancels it and deletes it once it has settled); bad input
is one ``flowcore:`` line and exit 2, before anything is deleted.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from flowcore_local import Deleted, LocalHost

from ._common import CliError, duration_value, iso
from ._local import _print, _run, db_option, plural, rows_text
from ._options import json_option, run_id_argument

__all__ = ["COMMANDS", "delete", "prune"]

SETTLED = ("completed", "failed", "cancelled", "budget-exhausted")


def _deleted_json(deleted: Deleted) -> dict[str, Any]:
    return {
        "runs": deleted.runs,
        "rows": deleted.rows,
        "rowsTotal": deleted.total_rows,
    }


async def _active(host: LocalHost, run_id: str) -> list[str]:
    """The runs of ``run_id``'s tree still running, parents first."""
    found, todo = [], [run_id]
    while todo:
        current = todo.pop(0)
        if (await host.run(current)).status == "running":
            found.append(current)
        todo.extend(await host.children(current))
    return found


@click.command()
@run_id_argument
@click.option(
    "--force",
    is_flag=True,
    help="If runs of the tree are running: cancel them (compensations run, here if no worker"
    " takes them) and delete the tree once it has settled.",
)
@click.option(
    "--timeout",
    "timeout_",
    metavar="DURATION",
    help="With --force: the longest wait for the tree to settle (90s, 5m, PT1H); by default"
    " as long as it takes.",
)
@json_option
@db_option
def delete(run_id: str, force: bool, timeout_: str | None, as_json: bool, db: Path) -> None:
    """Delete RUN and its child runs from the database, every row of them.

    One transaction: a crash leaves the runs whole. A run still running is
    refused (naming the runs of its tree that are), unless --force; so is a
    child run whose parent is running (delete the parent's tree). The stored
    spec goes with the last run that refers to it. The file does not shrink:
    `flowcore prune --vacuum` gives the space back.
    """
    if timeout_ is not None and not force:
        raise CliError("--timeout is the wait of --force: give --force with it")
    seconds = None if timeout_ is None else duration_value(timeout_, "--timeout") / 1000

    async def body(host: LocalHost) -> Deleted:
        if force:
            active = await _active(host, run_id)
            if active:
                click.echo(
                    f"cancelling {', '.join(active)}: deleted once settled (Ctrl-C leaves"
                    " a run that is still compensating cancelled, not deleted)",
                    err=True,
                )
        return await host.delete(run_id, force, timeout=seconds)

    deleted = _run(db, body)
    if as_json:
        document = {"runId": run_id, "cancelled": deleted.cancelled, **_deleted_json(deleted)}
        click.echo(json.dumps(document))
        return
    children = len(deleted.runs) - 1
    tree = f" and {plural(children, 'child run')}" if children else ""
    first = f" (cancelled first: {', '.join(deleted.cancelled)})" if deleted.cancelled else ""
    _print(f"deleted run {run_id}{tree}{first}: {rows_text(deleted)}")


@click.command()
@click.option(
    "--settled-before",
    "age",
    required=True,
    metavar="DURATION",
    help="Delete the root runs that settled longer ago than this (30d, 12h, PT1H; 0s: all).",
)
@click.option(
    "--status",
    "statuses",
    multiple=True,
    type=click.Choice(SETTLED),
    help="Only root runs that settled so (repeatable; default: every settled status).",
)
@click.option("--dry-run", is_flag=True, help="Delete nothing; print what would go.")
@click.option(
    "--vacuum",
    is_flag=True,
    help="Then VACUUM the file to give the space back (it rewrites the file; writers wait).",
)
@json_option
@db_option
def prune(
    age: str, statuses: tuple[str, ...], dry_run: bool, vacuum: bool, as_json: bool, db: Path
) -> None:
    """Delete the runs that settled longer ago than --settled-before, with their child runs.

    A root run goes with its whole tree, and only when every run of the tree
    has settled before that time; runs still running are never pruned. Trees
    are deleted a batch per transaction, never one split in two. Deleting
    frees pages inside the file; --vacuum gives them back to the disk.
    """
    if vacuum and dry_run:
        raise CliError("--vacuum and --dry-run go against each other: a dry run changes nothing")
    age_ms = duration_value(age, "--settled-before", allow_zero=True)

    async def body(host: LocalHost) -> tuple[int, Deleted, tuple[int, int] | None]:
        cutoff = host.now() - age_ms
        deleted = await host.prune(cutoff, statuses or None, dry_run=dry_run)
        sizes = await host.vacuum() if vacuum else None
        return cutoff, deleted, sizes

    cutoff, deleted, sizes = _run(db, body)
    if as_json:
        document = {
            "settledBeforeMs": cutoff,
            "statuses": list(statuses or SETTLED),
            "dryRun": dry_run,
            "roots": deleted.roots,
            **_deleted_json(deleted),
            "vacuum": None if sizes is None else {"beforeBytes": sizes[0], "afterBytes": sizes[1]},
        }
        click.echo(json.dumps(document))
        return
    verb = "would delete" if dry_run else "deleted"
    how = f" ({' or '.join(statuses)})" if statuses else ""
    roots = plural(len(deleted.roots), "root run")
    children = len(deleted.runs) - len(deleted.roots)
    tail = f" and {plural(children, 'child run')}" if children else ""
    _print(
        f"{verb} {plural(len(deleted.runs), 'run')}: {roots}{how} settled before"
        f" {iso(cutoff)}{tail}; {rows_text(deleted)}"
    )
    if sizes is not None:
        _print(f"vacuumed {db}: {sizes[0]:,} bytes before, {sizes[1]:,} after")


COMMANDS = [delete, prune]
