"""What ``flowcore runs`` prints: the runs of the catalogue's ``runs`` operation,
oldest first, a page of ``--limit`` at a time (``--page N``), each with when it
started, how long it took (or has been running), what it waits for now, its
output or error and its metadata; ``--tree`` puts child runs under their
parents. ``--json`` prints that page as a list of runs. ``--counts`` prints how
many runs the filters find, by status, instead (the ``run-counts`` operation)."""

from __future__ import annotations

import json
from typing import Any, Final

import click
import msgspec
from rich.table import Table
from rich.text import Text

import flowcore
from flowcore_handlers import Host
from flowcore_ops import BY_NAME, Context, Operation, RunCounts

from ._common import CliError, duration, iso, meta_text
from ._derive import View
from ._history import short_json, tables
from ._progress import error_line, out

__all__ = ["RUNS_VIEW"]

RunSummary = Any  # flowcore_ops' RunSummary, as the runs operation gives it

_FETCH: Final = 500  # runs read a page at a time to list them oldest first


def _ms(moment: Any) -> int | None:
    return None if moment is None else int(moment.timestamp() * 1000)


def _waits(info: dict[str, Any]) -> list[str]:
    """What a running run waits for, in a few words each (from ``Host.show``)."""
    waits = [f"question {q['key'].split('/', 1)[-1]}" for q in info.get("questions", [])]
    waits += [f"signal {name}" for name in info.get("waitingFor", [])]
    for item in info.get("pending", []):
        kind = item["kind"]
        if kind in ("call-tool", "run-agent", "run-team", "run-subflow", "signal-run"):
            waits.append(f"{kind} {item['key'].split('/', 1)[-1]}")
        elif kind == "sleep" and item.get("dueMs") is not None:
            waits.append(f"timer {iso(item['dueMs'])}")
    return waits


def _prepare(op: Operation, values: dict[str, Any]) -> tuple[Operation, dict[str, Any]]:
    for text in values["where"]:
        try:
            flowcore.parse_metadata_filter(text)
        except flowcore.MetadataFilterError as exc:
            raise click.BadParameter(
                str(exc), click.get_current_context(), param_hint="'--where'"
            ) from None
    if values.get("counts"):
        for name, flag in (("status", "--status"), ("cursor", "--cursor")):
            if values.get(name) is not None:
                raise CliError(f"{flag}: --counts counts the runs of every status, at once")
        return BY_NAME["run-counts"], dict(values, limit=None)
    return op, dict(values, limit=_FETCH)


def _counts_text(counted: RunCounts) -> None:
    """``failed 3`` a line per status, then ``total 12``."""
    width = max((len(s) for s in counted.counts), default=5)
    for status, n in counted.counts.items():
        out.print(Text(f"{status:<{width}}  {n:,}"))
    out.print(Text(f"{'total':<{width}}  {counted.total:,}"))


async def _listed(host: Host, first: Any, values: dict[str, Any]) -> dict[str, Any]:
    """Every run the filters find, oldest first; the page asked for, with what each
    waits for and its output or error."""
    op: Operation = values["operation"]
    found: list[RunSummary] = list(first.runs)
    cursor = first.next_cursor
    while cursor is not None:
        page = await op.call(Context(host), msgspec.structs.replace(values["input"], cursor=cursor))
        found += page.runs
        cursor = page.next_cursor
    found.reverse()
    limit, number = values["limit"], values["page"]
    shown: list[tuple[RunSummary, list[str], Any, Any]] = []
    temporal = values["host_choice"].temporal
    for summary in found[(number - 1) * limit : number * limit]:
        if temporal and summary.status == "running":
            # What a running Temporal run waits for is a query its worker answers:
            # a listing does not wait on each run's worker (show RUN asks it).
            shown.append((summary, [], None, None))
            continue
        info = await host.show(summary.run_id)
        waits = _waits(info) if summary.status == "running" else []
        shown.append((summary, waits, info.get("output"), info.get("error")))
    return {"total": len(found), "shown": shown}


async def _document(host: Host, output: Any, values: dict[str, Any]) -> int | None:
    if isinstance(output, RunCounts):
        click.echo(msgspec.json.encode(output).decode())
        return None
    listed = await _listed(host, output, values)
    click.echo(
        json.dumps(
            [
                {
                    "runId": r.run_id,
                    "flowId": r.flow_id,
                    "status": r.status,
                    "parent": r.parent,
                    "depth": r.depth,
                    "startedMs": _ms(r.created_at),
                    "updatedMs": _ms(r.updated_at),
                    "waitingFor": waits,
                    "output": output_,
                    "error": error,
                    "metadata": r.metadata,
                }
                for r, waits, output_, error in listed["shown"]
            ]
        )
    )
    return None


def _took(r: RunSummary) -> str:
    """How long the run took (settled) or has been going (running)."""
    took = duration(r.duration_ms or 0)
    return f"{took} so far" if r.status == "running" else took


def _outcome(output: Any, error: Any) -> str:
    if isinstance(error, dict):
        return error_line(error)[:80]
    return "" if output is None else short_json(output)


async def _render(host: Host, output: Any, values: dict[str, Any]) -> int | None:
    if isinstance(output, RunCounts):
        _counts_text(output)
        return None
    listed = await _listed(host, output, values)
    shown = listed["shown"]
    metadata = any(r.metadata for r, *_ in shown)
    table = Table(header_style="bold")
    for name in ("run", "flow", "status", "started (UTC)", "took"):
        table.add_column(name, no_wrap=True)
    table.add_column("waiting for", overflow="fold")
    table.add_column("output / error", overflow="ellipsis", no_wrap=True, max_width=40)
    if metadata:
        table.add_column("metadata", overflow="fold")

    def add_row(item: tuple[RunSummary, list[str], Any, Any], run: str) -> None:
        r, waits, output_, error = item
        cells = [
            run,
            r.flow_id or "",
            r.status,
            iso(_ms(r.created_at), "seconds"),
            _took(r),
            ", ".join(waits),
            _outcome(output_, error),
        ]
        if metadata:
            cells.append(meta_text(r.metadata))
        # Text cells: ids and values are shown as they are, never read as markup.
        table.add_row(*(Text(cell) for cell in cells))

    if values["tree"]:
        by_parent: dict[str | None, list[Any]] = {}
        known = {item[0].run_id for item in shown}
        for item in shown:
            parent = item[0].parent if item[0].parent in known else None
            by_parent.setdefault(parent, []).append(item)

        def add(parent: str | None, depth: int) -> None:
            for item in by_parent.get(parent, []):
                add_row(item, "  " * depth + ("└ " if depth else "") + item[0].run_id)
                add(item[0].run_id, depth + 1)

        add(None, 0)
    else:
        for item in shown:
            add_row(item, item[0].run_id)
    tables().print(table)
    limit, number, total = values["limit"], values["page"], listed["total"]
    pages = max(1, -(-total // limit))
    if pages > 1 or number > 1:
        out.print(Text(f"page {number} of {pages} ({total} runs; --page N for another)"))
    return None


RUNS_VIEW: Final = View(
    "List the runs, oldest first, a page at a time.\n\n"
    "Each run shows when it started, how long it took (or has been running),"
    " what it waits for now, its output or error, and its metadata.",
    options=(
        click.Option(["--tree"], is_flag=True, help="Show subflows under their parents."),
        click.Option(
            ["--page"],
            default=1,
            show_default=True,
            type=click.IntRange(min=1),
            help="Which page.",
        ),
        click.Option(
            ["--counts"],
            is_flag=True,
            help="Print how many runs the filters find, by status, instead of the runs.",
        ),
    ),
    types={
        "status": click.Choice(
            [
                *("running", "completed", "failed", "cancelled", "budget-exhausted"),
                *("terminated", "timed-out"),  # Temporal's own
            ]
        )
    },
    helps={
        "status": "Only runs with this status.",
        "limit": "Runs per page.",
        "where": "Only runs whose metadata matches, e.g. customer=acme or 'amount>100'"
        " (= != < <= > >=; repeatable: all must hold).",
        "flow": "Only runs of this flow.",
        "parent": "Only the child runs of this run.",
        "created_from": "Only runs started at or after this RFC 3339 instant.",
        "created_to": "Only runs started before this RFC 3339 instant.",
        "cursor": "Where a page of the runs operation ends (its nextCursor).",
        "id_prefix": "Only runs whose id starts with this.",
    },
    prepare=_prepare,
    render=_render,
    document=_document,
    json_help="Print the page as a JSON list of runs (times in epoch ms).",
)
