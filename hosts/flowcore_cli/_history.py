"""What a run did, for people: times, durations, and a timeline of its log.

``show`` prints a run's history as a timeline (one line per log record that
says something: effects asked for, results, answers, timers set and fired,
retries, re-dispatches after a recovery, rejected events, settlement) and
``events`` prints the log as a table; both read times as ISO-8601 in UTC.
``--json`` output keeps epoch milliseconds (``specs/local.md`` §7).

Lines are ``rich`` ``Text``: values from the run are shown as they are, never
read as markup.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

import flowcore
from flowcore import Record, ReplayReport, Settled, Sleep, TimerFired
from flowcore_handlers import ScheduledCallView

from ._common import duration, iso, short_json
from ._errors import say
from ._progress import (
    REDISPATCHED,
    SCHEDULED_CHANGED,
    Printer,
    describe,
    error_line,
    progress_item,
    progress_line,
)

__all__ = [
    "scheduled_answer",
    "scheduled_table",
    "event_line",
    "short_json",
    "tables",
    "timeline",
    "work_report",
]


def tables() -> Console:
    """Where tables print: the terminal, or 160 columns for a pipe or a CI log
    (rich would squeeze them into 80), unless ``COLUMNS`` says."""
    console = Printer(highlight=False, soft_wrap=True)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Printer(highlight=False, soft_wrap=True, width=160)
    return console


def _attempt(key: str) -> int:
    try:
        return flowcore.parse_key(key).attempt or 1
    except ValueError:
        return 1


def _what(record: Record) -> Text | None:
    """What one record says, or ``None`` for records a timeline leaves out."""
    data = record.data if isinstance(record.data, dict) else {}
    kind = record.type
    if kind == "run.started":
        incarnation = data.get("incarnation", 1)
        return Text.assemble(
            ("▶ started" if incarnation == 1 else f"▶ incarnation {incarnation}", "bold"),
            f" flow {data.get('flowId', '?')} v{data.get('version', '?')}"
            f" input {short_json(data.get('input'))}",
        )
    if kind == "run.settled":
        status = str(data.get("status", "?"))
        line = Text.assemble((f"■ settled {status}", "bold"))
        error = data.get("error")
        if isinstance(error, dict):
            line.append(f" {error_line(error)}")
        elif data.get("output") is not None:
            line.append(f" output {short_json(data.get('output'))}")
        return line
    if kind == "event.rejected":
        return Text.assemble(("✗ rejected", "red"), f" {data.get('reason', '')}")
    if kind in (REDISPATCHED, SCHEDULED_CHANGED):
        return progress_line(record)
    item = progress_item(record)
    if item is None:
        return None if kind in ("effect.emitted", "event.reported") else Text(kind)
    if isinstance(item, Sleep):
        if item.idempotency_key.endswith("$deadline"):
            return Text.assemble(("⏲ deadline", "dim"), f" at {iso(item.until_ms)}")
        return Text.assemble(
            ("⏲ timer", "dim"), f" {item.idempotency_key} due {iso(item.until_ms)}"
        )
    if isinstance(item, Settled):
        return None  # run.settled follows it, with the same news
    if isinstance(item, TimerFired):
        if item.idempotency_key.endswith("$deadline"):
            return Text.assemble(("⏲ deadline reached", "red"))
        return Text.assemble(("⏲ fired", "dim"), f" {item.idempotency_key}")
    described = describe(item, record.run_id)
    if described is None:
        return None
    line = described
    key = getattr(item, "idempotency_key", None)
    if record.type == "effect.emitted" and key is not None and _attempt(key) > 1:
        line.append(f"  (retry: attempt {_attempt(key)})", "yellow")
    return line


def timeline(records: Iterable[Record]) -> list[Text]:
    """The run's history: one line per record that says something, time first."""
    lines = []
    for record in records:
        what = _what(record)
        if what is not None:
            lines.append(Text.assemble((iso(record.at), "dim"), f"  #{record.index:<4} ", what))
    return lines


def event_line(record: Record) -> Text:
    """One log record as a row of what ``events`` prints: index, time, type, what it says.

    A row per record (not a table drawn at the end), so that ``--follow``
    prints each record as it comes.
    """
    what = _what(record)
    if what is None:
        item = progress_item(record)  # a settled effect: said again by run.settled
        described = None if item is None else describe(item, record.run_id)
        what = described if described is not None else Text(short_json(record.data, 100))
    return Text.assemble(
        (f"{record.index:>5}", "bold"), "  ", (iso(record.at), "dim"), f"  {record.type:<20} ", what
    )


_WORK = ("call-tool", "run-agent", "run-team", "run-subflow", "signal-run")
_STYLE = {"succeeded": "green", "failed": "red", "uncertain": "red", "pending": "yellow"}


def work_report(report: ReplayReport) -> Table:
    """The report of every work effect of a run: what, how it ended, how long it took."""
    table = Table("key", "what", "status", "took", "output / error", header_style="bold")
    for e in report.trajectory:
        if e.kind not in _WORK:
            continue
        key = e.key.split("/", 1)[1] if "/" in e.key else e.key
        what = f"{e.kind} {e.target}" + (f" ({e.member})" if e.member else "")
        status = e.status if e.issues == 1 else f"{e.status} (issued {e.issues} times)"
        took = "" if e.ended_at is None else duration(max(0, e.ended_at - e.at))
        if e.error is not None:
            result = f"{e.error.type}: {e.error.message}"
        else:
            result = "" if e.output is None else short_json(e.output, 80)
        if e.note:
            result = f"{result} [{e.note}]" if result else f"[{e.note}]"
        table.add_row(
            Text(key), Text(what), Text(status, style=_STYLE.get(e.status, "")), took, Text(result)
        )
    return table


def scheduled_table(rows: Iterable[ScheduledCallView]) -> Table:
    """Scheduled calls as ``scheduled list`` shows them, one row each."""
    table = Table(header_style="bold")
    for name in ("id", "run", "tool", "status", "attempts", "created (UTC)", "due (UTC)"):
        table.add_column(name, no_wrap=True)
    table.add_column("arguments", overflow="ellipsis", no_wrap=True, max_width=30)
    table.add_column("error", overflow="ellipsis", no_wrap=True, max_width=40)
    for r in rows:
        prefix = r.run_id + "/"
        error = r.error
        told = "" if error is None else error.type
        if error is not None and error.message:
            told += f": {error.message}"
        cells = (
            r.id[len(prefix) :] if r.id.startswith(prefix) else r.id,
            r.run_id,
            r.tool,
            r.status + _recurrence(r),
            str(r.attempts),
            iso(r.created_ms, "seconds"),
            iso(r.due_ms, "seconds"),
            short_json(r.input, 30),
            told,
        )
        table.add_row(*(Text(cell) for cell in cells))
    return table


def _recurrence(r: ScheduledCallView) -> str:
    """`` (every 1 h 00 min, fired 2/3)``, `` (cron 0 9 * * * Europe/Paris, fired 1)``,
    `` (replayed 1)``: what a recurring or replayed call adds to its status."""
    parts = []
    if r.every_ms is not None:
        parts.append(f"every {duration(r.every_ms)}")
    elif r.cron is not None:
        parts.append(f"cron {r.cron}" + (f" {r.timezone}" if r.timezone else ""))
    if parts:
        parts[0] += f", fired {r.fires}" + ("" if r.count is None else f"/{r.count}")
    if r.replays:
        parts.append(f"replayed {r.replays}")
    return f" ({'; '.join(parts)})" if parts else ""


def scheduled_answer(done: bool, sid: str, run_id: str, as_json: bool, verb: str = "cancel") -> int:
    """What ``scheduled cancel`` and ``run-now`` print, and their exit code:
    ``true`` and 0 when the call was pending; ``false``, a line on stderr saying
    there is nothing to ``verb``, and 1 when it was not (the HTTP API's 409
    ``not-pending``). ``{runId, id, done}`` with ``--json``."""
    full = sid if sid.startswith(run_id + "/") else f"{run_id}/{sid}"
    if as_json:
        click.echo(json.dumps({"runId": run_id, "id": full, "done": done}))
    else:
        click.echo("true" if done else "false")
    if done:
        return 0
    say(f"no pending scheduled call {full!r} in run {run_id!r}: nothing to {verb}")
    return 1
