"""What ``flowcore scheduled list|cancel|run-now|add`` add to the catalogue's
scheduled-call operations: their help, ``--run``, ``--delay DURATION``, and
what each prints (a table; ``true``/``false`` and exit 1 when the call was not
pending; the new call's id)."""

from __future__ import annotations

import json
from typing import Any, Final

import click
import msgspec

import flowcore
from flowcore_handlers import Host
from flowcore_ops import Operation, OperationError

from ._common import CliError, checked_name, duration_value
from ._derive import View
from ._history import scheduled_answer, scheduled_table, tables
from ._progress import out

__all__ = ["SCHEDULED_HELP", "SCHEDULED_VIEWS"]

SCHEDULED_HELP: Final = (
    "The scheduled calls of runs: list, cancel, run now, add.\n\n"
    "A `schedule` step (or `scheduled add`) creates a call that fires after a"
    " delay; its failure never fails the run. Ids are the run's own"
    " (`RUN/nudge#1`, `RUN/~scheduled-1`); the commands also take them without"
    " the `RUN/` prefix."
)
STATUSES: Final = ("pending", "running", "completed", "failed", "cancelled", "uncertain")


class _Row(msgspec.Struct, kw_only=True):
    """A listed call as ``scheduled_table`` reads it."""

    id: str
    run_id: str
    tool: str
    input: Any
    status: str
    created_ms: int
    due_ms: int
    attempts: int
    error: flowcore.ErrorInfo | None = None
    finished_ms: int | None = None
    outside: bool = False
    every_ms: int | None = None
    cron: str | None = None
    timezone: str | None = None
    count: int | None = None
    until_ms: int | None = None
    fires: int = 0
    replays: int = 0


async def _listed(host: Host, output: Any, values: dict[str, Any]) -> int | None:
    if not output.calls:
        filtered = values["run_id"] or values["tool"] or values["status"]
        out.print("no scheduled calls" + (" match" if filtered else ""))
        return None
    rows = [
        _Row(
            id=c.id,
            run_id=c.run_id,
            tool=c.tool,
            input=c.input,
            status=c.status,
            created_ms=c.created_ms,
            due_ms=c.due_ms,
            attempts=c.attempts,
            error=None if c.error is None else msgspec.convert(c.error, flowcore.ErrorInfo),
            every_ms=c.every_ms,
            cron=c.cron,
            timezone=c.timezone,
            count=c.count,
            until_ms=c.until_ms,
            fires=c.fires,
            replays=c.replays,
        )
        for c in output.calls
    ]
    tables().print(scheduled_table(rows))
    return None


async def _listed_json(host: Host, output: Any, values: dict[str, Any]) -> int | None:
    click.echo(json.dumps([msgspec.to_builtins(c) for c in output.calls], ensure_ascii=False))
    return None


def _answered(verb: str) -> Any:
    """``true`` (or ``{runId, id, done}``): the call was pending."""

    async def render(host: Host, output: Any, values: dict[str, Any]) -> int | None:
        return scheduled_answer(True, values["call_id"], values["run_id"], values["as_json"], verb)

    return render


def _not_pending(verb: str) -> Any:
    """``false`` and exit 1: the call was not pending, or the run has settled."""

    def fail(exc: Exception, values: dict[str, Any]) -> int | None:
        if isinstance(exc, OperationError) and exc.code in ("not-pending", "settled"):
            return scheduled_answer(
                False, values["call_id"], values["run_id"], values["as_json"], verb
            )
        return None

    return fail


def _list_prepare(op: Operation, values: dict[str, Any]) -> tuple[Operation, dict[str, Any]]:
    """``list RUN`` is ``list --run RUN``."""
    if values["run"] is not None:
        if values["run_id"] is not None and values["run_id"] != values["run"]:
            raise CliError("give the run as RUN or --run, not both")
        values["run_id"] = values["run"]
    return op, values


def _add_prepare(op: Operation, values: dict[str, Any]) -> tuple[Operation, dict[str, Any]]:
    delay = duration_value(values["delay_ms"], "--delay", allow_zero=True)
    values["delay"] = delay
    every = values.get("every_ms")
    if every is not None:
        every = duration_value(every, "--every", allow_zero=False)
    return op, dict(values, delay_ms=delay, every_ms=every)


async def _added(host: Host, output: Any, values: dict[str, Any]) -> int | None:
    if values["as_json"]:
        click.echo(
            json.dumps({"runId": output.run_id, "id": output.id, "delayMs": values["delay"]})
        )
    else:
        click.echo(output.id)
    return None


_CALL = {"call_id": ("ID",)}

SCHEDULED_VIEWS: Final[dict[str, View]] = {
    "scheduled.list": View(
        "List scheduled calls across runs, the soonest due first.\n\n"
        "Each shows its id, run, tool, arguments, when it was created and is (or"
        " was) due, how many times it was issued, its status (pending, running,"
        " completed, failed, cancelled, uncertain) and its error. Finished calls"
        " stay listed for as long as the worker's retention keeps them.",
        options=(click.Argument(["run"], required=False, callback=checked_name),),
        names={"run_id": ("--run", "--run-id")},
        prepare=_list_prepare,
        types={"status": click.Choice(STATUSES)},
        helps={
            "run_id": "Only the calls of this run.",
            "tool": "Only the calls to this tool.",
            "status": "Only calls with this status.",
        },
        render=_listed,
        document=_listed_json,
        json_help="Print the calls as a JSON list.",
    ),
    "scheduled.cancel": View(
        "Cancel RUN's scheduled call ID before it runs.\n\n"
        "Prints true if it was pending (it is now cancelled and stays listed)."
        " If it was not (an unknown id, or a call already issued or finished),"
        " nothing is written: prints false, says so on stderr, exits 1.",
        metavars=_CALL,
        render=_answered("cancel"),
        document=_answered("cancel"),
        fail=_not_pending("cancel"),
        json_help="Print {runId, id, done} as JSON.",
    ),
    "scheduled.run-now": View(
        "Issue RUN's pending scheduled call ID now instead of at its due time.\n\n"
        "Prints true if it was pending (a worker runs it); if it was not, nothing"
        " is written: prints false, says so on stderr, exits 1.",
        metavars=_CALL,
        render=_answered("run now"),
        document=_answered("run now"),
        fail=_not_pending("run now"),
        json_help="Print {runId, id, done} as JSON.",
    ),
    "scheduled.add": View(
        "Schedule a call to TOOL in RUN, after --delay; prints its id.\n\n"
        "Only tools the run's flow declares `schedulable: true` under `tools:` are"
        " accepted; the error lists them. With --every or --cron the call recurs:"
        " its first firing is one period after the delay, a slot that comes while"
        " a firing is still out is skipped, and it ends after --count firings or"
        " once the next would be after --until-ms.",
        names={"delay_ms": ("--delay",), "every_ms": ("--every",)},
        types={"delay_ms": click.STRING, "every_ms": click.STRING},
        defaults={"delay_ms": "0s"},
        helps={
            "input": "The call's input, as JSON (inline, @FILE or -).",
            "delay_ms": "When it fires: 90s, 2h30m, PT2H, or ms.",
            "every_ms": "Recur every this long: 30m, 1d, PT1H, or ms.",
            "cron": "Recur at each point of this 5-field cron.",
            "timezone": "The IANA time zone the cron is read in (default UTC).",
            "count": "Fire at most this many times.",
            "until_ms": "Fire no more after this instant (epoch ms).",
        },
        prepare=_add_prepare,
        render=_added,
        document=_added,
        json_help="Print {runId, id, delayMs} as JSON.",
    ),
    "scheduled.replay": View(
        "Replay RUN's finished scheduled call ID: issue it again, same tool and"
        " input, as a new attempt.\n\n"
        "Only a completed, failed or uncertain call is replayed; the error says why"
        " not. With --request, sending the same request again replays nothing.",
        metavars=_CALL,
        helps={"request": "Your name for this request: a retry with it replays once."},
    ),
}
