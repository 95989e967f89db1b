"""What the derived commands (``_derive``) add to the catalogue's run operations:
their help, the options a command has beyond the operation's input, and what
each prints without ``--json`` (``VIEWS``: operation name -> ``View``).

Where a command's ``--json`` document was pinned before the catalogue (``show``,
``fork``, ``upgrade``, ``delete``, ``prune``), it keeps those members and adds
the output's own, so it still decodes as the operation's output type.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import click
import msgspec
from rich.text import Text

import flowcore
from flowcore_handlers import Deleted, Host, RunQuery
from flowcore_ops import BY_NAME, CATALOGUE, Operation, OperationError

from ._common import CliError, answer_value, duration_value, iso, json_value
from ._compare_view import COMPARE_VIEW
from ._derive import View
from ._flows_view import FLOWS_VIEW
from ._history import event_line, short_json, tables, timeline, work_report
from ._options import FROM_FILE
from ._progress import out
from ._replay import figures_text, report_to_json, usage_text
from ._runs_view import RUNS_VIEW
from ._schedule_views import SCHEDULE_HELP, SCHEDULE_VIEWS
from ._scheduled_views import SCHEDULED_HELP, SCHEDULED_VIEWS
from ._stream_views import STREAM_VIEWS
from ._update_views import UPDATE_VIEWS, update_lines
from ._upgrade import upgrade_done, upgrade_refused

__all__ = ["GROUPS", "VIEWS", "plural", "rows_text"]


def _print(*parts: str | tuple[str, str]) -> None:
    """One line on stdout: values from runs are shown as they are, never read as markup."""
    out.print(Text.assemble(*parts))


def plural(n: int, word: str) -> str:
    """``1 run``, ``2 runs``, ``1,000 rows``."""
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def rows_text(deleted: Deleted) -> str:
    """``57 rows (log 40, results 6, ...)``: the rows, and per table those that had some."""
    found = ", ".join(f"{table} {n:,}" for table, n in deleted.rows.items())
    return plural(deleted.total_rows, "row") + (f" ({found})" if found else "")


def _echo(document: Any) -> int | None:
    click.echo(json.dumps(document, ensure_ascii=False))
    return None


async def _nothing(host: Host, output: Any, values: dict[str, Any]) -> int | None:
    return None


class _Tuned:
    """A host whose calls take the command line's own extras (a tools module, a
    wait, what it did before) that the catalogue's input does not carry."""

    def __init__(self, host: Host, values: dict[str, Any]) -> None:
        self._host = host
        self._values = values

    def __getattr__(self, name: str) -> Any:
        return getattr(self._host, name)

    async def records(self, run_id: str, start: int = 0) -> list[flowcore.Record]:
        """On Temporal, the log from the run's histories (no worker needed), or with
        ``--live`` from the running workflow."""
        if not self._values["host_choice"].temporal:
            return await self._host.records(run_id, start)
        inner: Any = self._host
        found: list[flowcore.Record] = await inner.log(run_id, live=self._values.get("live"))
        return [record for record in found if record.index >= start]

    async def export(self, run_id: str) -> bytes:
        if not self._values["host_choice"].temporal:
            return await self._host.export(run_id)
        inner: Any = self._host
        data: bytes = await inner.export(run_id, live=bool(self._values.get("live")))
        return data

    async def resume(self, run_id: str, tools: str | None = None) -> None:
        await self._host.resume(run_id, self._values.get("tools") or tools)

    async def fork(self, run_id: str, **options: Any) -> str:
        options["tools"] = self._values.get("tools") or options.get("tools")
        return await self._host.fork(run_id, **options)

    async def upgrade(self, run_id: str, spec: str | Path, *, dry_run: bool = False) -> Any:
        self._values["before"] = await _version(self._host, run_id)
        try:
            made = await self._host.upgrade(run_id, spec, dry_run=dry_run)
        except flowcore.UpgradeRefused as exc:
            self._values["refused"] = exc  # the divergence, printed as it always was
            raise
        self._values["made"] = made
        return made

    async def delete(
        self, run_id: str, force: bool = False, *, timeout: float | None = None
    ) -> Deleted:
        if force and not self._values["host_choice"].temporal:  # (Temporal deletes none)
            active = await _active(self._host, run_id)
            if active:
                click.echo(
                    f"cancelling {', '.join(active)}: deleted once settled (Ctrl-C leaves"
                    " a run that is still compensating cancelled, not deleted)",
                    err=True,
                )
        done = await self._host.delete(run_id, force, timeout=self._values.get("seconds"))
        self._values["deleted"] = done
        return done

    async def prune(self, before_ms: int, statuses: Any = None, *, dry_run: bool = False) -> Any:
        done = await self._host.prune(before_ms, statuses, dry_run=dry_run)
        self._values["deleted"] = done
        return done


def _tuned(host: Host, values: dict[str, Any]) -> Host:
    tuned: Host = _Tuned(host, values)
    return tuned


_LIVE = click.Option(
    ["--live"],
    is_flag=True,
    help="Temporal: ask the running workflow (the log query) instead of replaying its"
    " latest history.",
)


async def _version(host: Host, run_id: str) -> int | None:
    try:
        return (await host.flow(run_id)).version
    except Exception:  # the upgrade itself says what is wrong with the run
        return None


async def _active(host: Host, run_id: str) -> list[str]:
    """The runs of ``run_id``'s tree still running, parents first."""
    found, todo = [], [run_id]
    while todo:
        current = todo.pop(0)
        if (await host.summary(current)).status == "running":
            found.append(current)
        page = await host.find_runs(RunQuery(parent=current, limit=500))
        todo.extend(r.run_id for r in page.runs)
    return found


def _local(host: Host) -> Any:
    """The local host behind ``host`` (None on Temporal): for what only it does."""
    inner = getattr(host, "_host", host)
    return inner if type(inner).__name__ == "LocalHost" else None


# --- talking to runs ----------------------------------------------------------------------


def _signal_prepare(op: Operation, values: dict[str, Any]) -> tuple[Operation, dict[str, Any]]:
    """``signal RUN NAME`` or, with one argument and ``--key``, ``signal-key NAME``."""
    key = values.get("key")
    if key == "":
        raise CliError("--key: a signal key must not be empty")
    if values.get("payload") is not None and values.get("data") is not None:
        raise CliError("give the payload as PAYLOAD or --data, not both")
    payload = values.get("payload") or values.get("data")
    fields = dict(values, payload=json_value(payload, "--data"))
    if values.get("name") is not None:
        return op, fields
    if key is None:
        raise CliError("missing NAME: give RUN_ID NAME, or NAME --key KEY for the runs waiting")
    fields["name"], fields["run_id"] = values["run_id"], None
    return BY_NAME["signal-key"], fields


async def _signalled(host: Host, output: Any, values: dict[str, Any]) -> int | None:
    for run in getattr(output, "runs", []) if not isinstance(output, list) else []:
        _print(run)
    return None


_DATA = click.Option(["--data"], help="The signal's payload as JSON;" + FROM_FILE)


def _answer_prepare(op: Operation, values: dict[str, Any]) -> tuple[Operation, dict[str, Any]]:
    return op, dict(values, answer=answer_value(values.get("answer"), values.get("data")))


def _answer_refused(exc: OperationError, values: dict[str, Any]) -> str:
    """The answer refused as the command line words it: the options, or the open questions."""
    run_id = values["run_id"]
    if exc.code == "not-an-option":
        key = (
            values["key"] if values["key"].startswith(run_id + "/") else f"{run_id}/{values['key']}"
        )
        answer = values["answer"]
        given = ascii(answer)
        if isinstance(answer, str) and len(answer) > 60:  # never echo a 10 MiB answer
            given = f"{ascii(answer[:60])[:-1]}…' ({len(answer):,} characters)"
        elif len(given) > 80:
            given = given[:79] + "…"
        return f"answer {given} is not one of {exc.extra['options']} for {key}"
    if "open_questions" in exc.extra:
        return f"{exc.detail}; open: {', '.join(exc.extra['open_questions']) or 'none'}"
    return exc.detail


async def _questions(host: Host, output: Any, values: dict[str, Any]) -> int | None:
    for q in output.questions:
        _print(f"question: {q.key}: {q.question} {q.options or ''}")
    return None


async def _waits(host: Host, output: Any, values: dict[str, Any]) -> int | None:
    for kind in ("work", "questions", "signals", "timers"):
        for item in output.get(kind, []):
            what = item.get("key") or item.get("signal") or item.get("name") or ""
            _print(f"{kind}: {what} {short_json(item)}")
    return None


async def _started(host: Host, output: Any, values: dict[str, Any]) -> int | None:
    click.echo(output.run_id)
    return None


# --- show, events, export --------------------------------------------------------------------


async def _shown(host: Host, run_id: str) -> tuple[dict[str, Any], list[flowcore.Record], Any]:
    """``host.show``, the run's records and its replay (None: a log that no longer
    replays, or records this host cannot read now)."""
    info = await host.show(run_id)
    try:
        records = await host.records(run_id)
    except Exception:  # a closed Temporal run without a worker to query
        return info, [], None
    reads: Any = host  # Host.flow: the flow the run runs
    try:
        flow = await reads.flow(run_id)
        report = flowcore.replay(records, flow, raise_on_divergence=False)
    except Exception:  # a log that no longer replays: the timeline still shows it
        report = None
    return info, records, report


async def _show_json(host: Host, output: Any, values: dict[str, Any]) -> int | None:
    info, records, report = await _shown(host, values["run_id"])
    replayed = report_to_json(report) if report is not None else None
    info["history"] = [json.loads(flowcore.encode_record(r)) for r in records]
    if replayed is not None:
        info["report"] = replayed["trajectory"]
        info["usage"] = {
            "reported": replayed["usage"],
            "byMember": replayed["usageByMember"],
            "delegated": replayed["usageDelegated"],
        }
    document = msgspec.to_builtins(output)
    if document["run"]["status"] == "running":
        # What the run recorded only: not a duration that grows while it runs.
        document["run"]["durationMs"] = None
    document.update(info)
    click.echo(json.dumps(document))
    return None


def _state(info: dict[str, Any], report: Any, records: list[flowcore.Record]) -> None:
    """The lines of ``show``'s state: status, budget, usage, times, waits, failures."""
    _print((info["runId"], "bold"), f"  flow {info.get('flowId')}  ", (info["status"], "bold"))
    if "incarnation" in info:
        _print(f"incarnation {info['incarnation']} (continued as new)")
    execution = info.get("execution")  # Temporal: the run's Temporal runs
    if execution:
        _print(
            f"Temporal run {execution} of the run (it continued as new {execution - 1}"
            f" time{'s' if execution > 2 else ''}); log: {info.get('records', '?')} records"
        )
    if info.get("continuing"):
        _print("continuing as new: new work waits for the work out to finish")
    if info.get("budget"):
        _print(f"budget: {figures_text(info['budget'])}")
    none = flowcore.Usage()
    if report is not None and (report.usage_by_member or report.usage_delegated != none):
        parts = [f"{m} {usage_text(u)}" for m, u in report.usage_by_member.items()]
        if report.usage_delegated != none:
            parts.append(f"child runs {usage_text(report.usage_delegated)}")
        _print(f"usage by member: {'; '.join(parts)}")
    if records:
        span = records[-1].at - records[0].at
        from ._common import duration

        _print(
            f"started {iso(records[0].at)}, last record {iso(records[-1].at)} ({duration(span)})"
        )
    if info.get("metadata"):
        from ._common import meta_text

        _print(f"metadata: {meta_text(info['metadata'])}")
    if "forkedFrom" in info:
        forked = info["forkedFrom"]
        _print(f"forked from {forked['runId']} at index {forked['index']}")
    if info.get("output") is not None:
        _print(f"output: {json.dumps(info['output'])}")
    if info.get("error"):
        _print(f"error: {json.dumps(info['error'])}")
    for item in info.get("pending", []):
        status = f" ({item['status']})" if "status" in item else ""
        _print(f"pending: {item['kind']} {item['key']}{status}")
    for q in info.get("questions", []):
        _print(f"question: {q['key']}: {q['question']} {q['options'] or ''}")
    for name in info.get("waitingFor", []):
        _print(f"waiting for signal: {name}")
    for line in update_lines(info):
        _print(line)
    for buffered in info.get("buffered", []):
        _print(f"buffered signal: {buffered['signal']} {short_json(buffered.get('payload'))}")
    for dead in info.get("deadLetters", []):
        _print(("dead letter", "red"), f": {dead['kind']} {dead['key']}: {dead['note']}")
    for child in info.get("children", []):
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


async def _show(host: Host, output: Any, values: dict[str, Any]) -> int | None:
    info, records, report = await _shown(host, values["run_id"])
    _state(info, report, records)
    if values["no_history"]:
        return None
    _print(("history", "bold"))
    for line in timeline(records):
        out.print(line)
    if report is not None and report.trajectory:
        _print(("work effects", "bold"))
        tables().print(work_report(report))
    return None


def _events_prepare(op: Operation, values: dict[str, Any]) -> tuple[Operation, dict[str, Any]]:
    return (BY_NAME["follow"] if values["follow"] else op), values


async def _events(host: Host, output: Any, values: dict[str, Any]) -> int | None:
    for record in output:
        out.print(event_line(record))
    return None


async def _events_json(host: Host, output: Any, values: dict[str, Any]) -> int | None:
    for record in output:
        sys.stdout.buffer.write(flowcore.encode_record(record))
        sys.stdout.flush()
    return None


async def _export(host: Host, output: Any, values: dict[str, Any]) -> int | None:
    target: Path | None = values["output"]
    if target is None:
        sys.stdout.buffer.write(output)
        sys.stdout.flush()
    else:
        target.write_bytes(output)
    return None


# --- resume, fork, upgrade -------------------------------------------------------------------


async def _follow(host: Host, run_id: str) -> int | None:
    """Process the run to the end here (the local host), as ``run`` does, showing
    its progress from the record it is at now."""
    from ._local import _follow as follow
    from ._local import _settled

    local = _local(host)
    if local is None:
        _print(f"{run_id}: a worker runs it")
        return None
    start = (await local.run(run_id)).next_index
    result = await follow(local, run_id, start, out)
    try:
        _settled(result)
    except SystemExit as exc:
        return int(exc.code or 0)
    return None


async def _resumed(host: Host, output: Any, values: dict[str, Any]) -> int | None:
    if values["detach"]:
        _print(f"resumed {output.run_id}: a worker runs it")
        return None
    return await _follow(host, output.run_id)


def _fork_prepare(op: Operation, values: dict[str, Any]) -> tuple[Operation, dict[str, Any]]:
    if (values.get("at") is None) == (values.get("from_step") is None):
        raise CliError("give exactly one of --at INDEX and --from-step STEP_ID")
    return op, values


async def _forked(host: Host, output: Any, values: dict[str, Any]) -> int | None:
    if values["as_json"]:
        forked = (await host.show(output.run_id)).get("forkedFrom")
        click.echo(json.dumps({"runId": output.run_id, "forkedFrom": forked}))
    else:
        click.echo(output.run_id)
    if not values["follow"]:
        return None
    return await _follow(host, output.run_id)


def _fork_failed(exc: Exception, values: dict[str, Any]) -> int | None:
    if isinstance(exc, flowcore.ForkError):
        raise CliError(f"cannot fork run {values['run_id']!r}: {exc}") from None
    return None


def _upgrade_prepare(op: Operation, values: dict[str, Any]) -> tuple[Operation, dict[str, Any]]:
    from ._common import load_spec

    values["new_flow"] = load_spec(values["flow"])
    return op, values


async def _upgraded(host: Host, output: Any, values: dict[str, Any]) -> int | None:
    made: flowcore.Upgrade = values["made"]
    before = values.get("before") or made.version
    return upgrade_done(output.run_id, before, made, output.dry_run, values["as_json"])


def _upgrade_failed(exc: Exception, values: dict[str, Any]) -> int | None:
    refused = values.get("refused")
    if isinstance(refused, flowcore.UpgradeRefused):
        return upgrade_refused(values["run_id"], values["new_flow"], refused, values["as_json"])
    return None


# --- delete, prune -----------------------------------------------------------------------------

SETTLED: Final = ("completed", "failed", "cancelled", "budget-exhausted")


def _deleted_json(deleted: Deleted) -> dict[str, Any]:
    return {"runs": deleted.runs, "rows": deleted.rows, "rowsTotal": deleted.total_rows}


def _delete_prepare(op: Operation, values: dict[str, Any]) -> tuple[Operation, dict[str, Any]]:
    timeout = values["timeout_"]
    if timeout is not None and not values["force"]:
        raise CliError("--timeout is the wait of --force: give --force with it")
    values["seconds"] = None if timeout is None else duration_value(timeout, "--timeout") / 1000
    return op, values


async def _deleted(host: Host, output: Any, values: dict[str, Any]) -> int | None:
    deleted: Deleted = values["deleted"]
    run_id = values["run_id"]
    if values["as_json"]:
        document = msgspec.to_builtins(output)
        document.update({"runId": run_id, "cancelled": deleted.cancelled})
        document.update(_deleted_json(deleted))
        return _echo(document)
    children = len(deleted.runs) - 1
    tree = f" and {plural(children, 'child run')}" if children else ""
    first = f" (cancelled first: {', '.join(deleted.cancelled)})" if deleted.cancelled else ""
    _print(f"deleted run {run_id}{tree}{first}: {rows_text(deleted)}")
    return None


def _prune_prepare(op: Operation, values: dict[str, Any]) -> tuple[Operation, dict[str, Any]]:
    """``--settled-before`` is an age (30d, 0s) before now, or an RFC 3339 instant."""
    if values["vacuum"] and values["dry_run"]:
        raise CliError("--vacuum and --dry-run go against each other: a dry run changes nothing")
    given = values["settled_before"]
    try:
        age_ms = duration_value(given, "--settled-before", allow_zero=True)
    except CliError as refused:
        try:
            instant = datetime.fromisoformat(given)
        except ValueError:
            raise refused from None
        instant = instant if instant.tzinfo else instant.replace(tzinfo=UTC)
        values["cutoff"] = int(instant.timestamp() * 1000)
        return op, values
    cutoff = int(time.time() * 1000) - age_ms
    values["cutoff"] = cutoff
    moment = datetime.fromtimestamp(cutoff / 1000, tz=UTC)
    return op, dict(values, settled_before=moment.isoformat())


async def _pruned(host: Host, output: Any, values: dict[str, Any]) -> int | None:
    deleted: Deleted = values["deleted"]
    statuses = values["statuses"]
    sizes = None
    local = _local(host)
    if values["vacuum"]:
        if local is None:
            raise CliError("--vacuum: only a local database is vacuumed")
        sizes = await local.vacuum()
    cutoff = values.get("cutoff") or 0
    if values["as_json"]:
        document = msgspec.to_builtins(output)
        document.update(
            {
                "settledBeforeMs": cutoff,
                "statuses": list(statuses or SETTLED),
                "dryRun": output.dry_run,
                "roots": deleted.roots,
                **_deleted_json(deleted),
                "vacuum": None
                if sizes is None
                else {"beforeBytes": sizes[0], "afterBytes": sizes[1]},
            }
        )
        return _echo(document)
    verb = "would delete" if output.dry_run else "deleted"
    how = f" ({' or '.join(statuses)})" if statuses else ""
    roots = plural(len(deleted.roots), "root run")
    children = len(deleted.runs) - len(deleted.roots)
    tail = f" and {plural(children, 'child run')}" if children else ""
    _print(
        f"{verb} {plural(len(deleted.runs), 'run')}: {roots}{how} settled before"
        f" {iso(cutoff)}{tail}; {rows_text(deleted)}"
    )
    if sizes is not None:
        _print(f"vacuumed {values['db']}: {sizes[0]:,} bytes before, {sizes[1]:,} after")
    return None


_TOOLS_HELP = "The tools module to use from now on (default: the run's own)."

_VIEWS: Final[dict[str, View]] = {
    "start": View(
        "Start a run of FLOW (a spec file) and print its id; a worker runs it.",
        options=(
            click.Option(
                ["--flows"],
                multiple=True,
                type=click.Path(exists=True, path_type=Path),
                help="More spec files or directories that subflows may name (repeatable).",
            ),
        ),
        helps={"tools": "The run's tools module (default: the worker's)."},
        render=_started,
        creates=True,
    ),
    "signal": View(
        "Send signal NAME to RUN (buffered if the run does not wait for it yet).\n\n"
        "With only NAME and --key KEY, send it to every running run that waits for"
        " NAME with that key, and print their ids; none waiting is an error.",
        options=(_DATA,),
        optional=frozenset({"name"}),
        raw=frozenset({"payload"}),
        helps={
            "key": "The signal's key: only a wait with this key takes it. Without NAME, the"
            " signal goes to every run that waits for RUN_ID's NAME with KEY."
        },
        prepare=_signal_prepare,
        render=_signalled,
    ),
    "signal-key": View(
        "Send signal NAME to every running run that waits for it with KEY; print their ids.",
        options=(_DATA,),
        raw=frozenset({"payload"}),
        prepare=lambda op, v: (
            op,
            dict(v, payload=json_value(v["payload"] or v["data"], "--data")),
        ),
        render=_signalled,
    ),
    "answer": View(
        "Answer RUN's question KEY with ANSWER (text, as typed) or --data (JSON).",
        options=(
            click.Option(
                ["--data"],
                help="The answer as JSON instead of ANSWER (any value, for a question without"
                " options);" + FROM_FILE,
            ),
        ),
        optional=frozenset({"answer"}),
        raw=frozenset({"answer"}),
        prepare=_answer_prepare,
        explain=_answer_refused,
        render=_nothing,
    ),
    "cancel": View(
        "Cancel RUN: pending work is abandoned, compensations run.\n\n"
        "A run that has settled, or compensates already, has nothing to cancel:"
        " nothing is written, a line says so and the exit code is 1 (the HTTP API's 409).",
        helps={"reason": "Why (recorded in the log)."},
        exits={"settled": 1},
        render=_nothing,
    ),
    "resume": View(
        "Retry the failed RUN from its failed step, with new handlers if --tools is given.\n\n"
        "The run is rewound to just before the event that failed it (the records"
        " from there on are archived, not lost), steps that succeeded keep their"
        " results, and the failed work is dispatched again; then, unless --detach,"
        " the run is processed to the end as `run` does. Refused, saying why, where"
        " a rewind would not be faithful (specs/local.md §10).",
        options=(
            click.Option(["--detach"], is_flag=True, help="Only reopen the run; a worker runs it."),
        ),
        helps={"tools": _TOOLS_HELP},
        tune=_tuned,
        render=_resumed,
    ),
    "fork": View(
        "Fork RUN as a new run with its history up to a point; print the new run's id.\n\n"
        "The point is --at INDEX (the new run takes RUN's records before INDEX;"
        " it must be the index of an event record, or the end of an unsettled"
        " log) or --from-step ID (the step and everything after it run again)."
        " Work answered before the point keeps its result and is not run again;"
        " work open at the point runs again under the new run's keys. With"
        " --cancel-source RUN is cancelled too (a reset)."
        " A worker (`flowcore worker`) runs the new run, or --follow here.",
        options=(
            click.Option(["--tools"], help="The new run's tools module (default: RUN's own)."),
            click.Option(
                ["--follow"],
                is_flag=True,
                help="Then process the new run to the end, as `run` does.",
            ),
        ),
        names={"new_run_id": ("--run-id", "--new-run-id")},
        helps={
            "at": "The log index to fork at: records before it are kept.",
            "from_step": "Fork just before step ID: it, and all after it, run again.",
            "new_run_id": "The new run's id (default: RUN-fork-INDEX).",
            "cancel_source": "Cancel RUN too if it is running (a reset).",
        },
        prepare=_fork_prepare,
        tune=_tuned,
        render=_forked,
        document=_forked,
        fail=_fork_failed,
        json_help="Print {runId, forkedFrom} as JSON.",
    ),
    "upgrade": View(
        "Move running RUN to the flow version in --to, once its log replays against it.\n\n"
        "The run's log is replayed against the new spec: if the new version would"
        " have made every recorded decision the same way, the run is pinned to it"
        " and goes on under the new version. Otherwise it stays on its version and"
        " the first divergence is printed (index, recorded effect, new spec's"
        " effect): exit 1. Exit 2 for an unknown or settled run or an unreadable spec.",
        names={"flow": ("--to",)},
        helps={
            "flow": "The new version's spec file (the same flow id).",
            "dry_run": "Check only: change nothing.",
        },
        prepare=_upgrade_prepare,
        tune=_tuned,
        render=_upgraded,
        document=_upgraded,
        fail=_upgrade_failed,
        json_help="Print what happened as JSON.",
    ),
    "delete": View(
        "Delete RUN and its child runs from the database, every row of them.\n\n"
        "One transaction: a crash leaves the runs whole. A run still running is"
        " refused (naming the runs of its tree that are), unless --force; so is a"
        " child run whose parent is running (delete the parent's tree). The stored"
        " spec goes with the last run that refers to it. The file does not shrink:"
        " `flowcore prune --vacuum` gives the space back.",
        options=(
            click.Option(
                ["--timeout", "timeout_"],
                metavar="DURATION",
                help="With --force: the longest wait for the tree to settle (90s, 5m, PT1H); by"
                " default as long as it takes.",
            ),
        ),
        helps={
            "force": "If runs of the tree are running: cancel them (compensations run, here if"
            " no worker takes them) and delete the tree once it has settled."
        },
        prepare=_delete_prepare,
        tune=_tuned,
        render=_deleted,
        document=_deleted,
    ),
    "prune": View(
        "Delete the runs that settled longer ago than --settled-before, with their child runs.\n\n"
        "A root run goes with its whole tree, and only when every run of the tree"
        " has settled before that time; runs still running are never pruned. Trees"
        " are deleted a batch per transaction, never one split in two. Deleting"
        " frees pages inside the file; --vacuum gives them back to the disk.",
        options=(
            click.Option(
                ["--vacuum"],
                is_flag=True,
                help="Then VACUUM the file to give the space back (it rewrites the file;"
                " writers wait).",
            ),
        ),
        names={"statuses": ("--status",)},
        types={"statuses": click.Choice(SETTLED)},
        helps={
            "settled_before": "Delete the root runs that settled longer ago than this (30d,"
            " 12h, PT1H; 0s: all), or before an RFC 3339 instant.",
            "statuses": "Only root runs that settled so (repeatable; default: every settled"
            " status).",
            "dry_run": "Delete nothing; print what would go.",
        },
        prepare=_prune_prepare,
        tune=_tuned,
        render=_pruned,
        document=_pruned,
    ),
    "show": View(
        "Show RUN: its state now, a timeline of what happened, and every work effect.\n\n"
        "The state: status, budget, pending work, questions, signals awaited and"
        " buffered, dead letters, child runs, handler failures with tracebacks.",
        options=(
            click.Option(
                ["--no-history"], is_flag=True, help="Only the current state, not the timeline."
            ),
        ),
        tune=_tuned,
        render=_show,
        document=_show_json,
        json_help="Print JSON on stdout instead (times in epoch ms).",
    ),
    "events": View(
        "The log records of RUN: a table, or NDJSON envelopes with --json.",
        options=(
            click.Option(["--follow"], is_flag=True, help="Keep printing until the run settles."),
            _LIVE,
        ),
        tune=_tuned,
        names={"start": ("--start-index", "--start")},
        helps={"start": "The index of the first record printed."},
        prepare=_events_prepare,
        render=_events,
        document=_events_json,
        json_help="Print the raw records as NDJSON envelopes (at in ms).",
    ),
    "export": View(
        "Write RUN's log (what `flowcore replay` reads).",
        options=(
            click.Option(["-o", "--output"], type=click.Path(dir_okay=False, path_type=Path)),
            _LIVE,
        ),
        tune=_tuned,
        render=_export,
        document=_export,  # the log is NDJSON already: the same bytes
        json_help="The same: the log is NDJSON already.",
    ),
    "questions": View(
        "The open questions of RUN: one line each (key, question, options).",
        render=_questions,
    ),
    "waits": View("What RUN waits for now: work, questions, signals, timers.", render=_waits),
    "compare": COMPARE_VIEW,
    "runs": RUNS_VIEW,
    "flows": FLOWS_VIEW,
    **SCHEDULED_VIEWS,
    **STREAM_VIEWS,
    **SCHEDULE_VIEWS,
    **UPDATE_VIEWS,
}

# The groups of derived commands, and their help.
GROUPS: Final[Mapping[str, str]] = {"schedule": SCHEDULE_HELP, "scheduled": SCHEDULED_HELP}

# An operation without a view of its own prints its output as JSON.
VIEWS: Final[Mapping[str, View]] = {
    op.name: _VIEWS.get(op.name) or View(op.summary + ".") for op in CATALOGUE
}
