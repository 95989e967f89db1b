"""``flowcore replay LOG``: re-derive a run's effects from its log and compare.

Exit 0 when the log replays (a torn last record is reported, not an error),
1 on divergence, 2 on bad input: a missing or unreadable file, bytes that are
not a flowcore log, corruption anywhere in a log (bytes that do not decode, an
``at`` that contradicts its record, a record type this reader does not know
unless ``--allow-unknown-types``), a spec that is invalid or belongs to
another flow. Without ``--spec`` the spec is looked up by the hash the log's ``run.started``
records: among the spec files under ``--specs DIR``, then in the local-host
database ``--db``; then next to the log: ``flow.yaml`` (``.yml``, ``.json``),
then any spec file there whose flow id is the log's; then by hash in the
default database (``$FLOWCORE_DB`` or ``flowcore.db``) when that file exists.
Found nowhere, the error says what to pass.

Everything printed that comes from the log (ids, inputs, outputs, error
texts) is escaped for rich's markup and cut to a bounded length: a log is
untrusted input, and a ``[/]`` in a tool's output must print as itself.
"""

from __future__ import annotations

import io
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

import click
import msgspec
from rich.markup import escape
from rich.table import Table
from rich.text import Text

import flowcore
from flowcore import (
    Flow,
    FlowcoreError,
    LogCorrupt,
    Record,
    ReplayError,
    ReplayReport,
    SpecError,
    TrajectoryEntry,
    Usage,
    iter_records,
)

from ._common import DATABASE, CliError, iso, load_spec, read_bytes
from ._progress import Printer

__all__ = ["replay", "report_to_json", "trajectory_table", "usage_text"]

_SPEC_NAMES = ("flow.yaml", "flow.yml", "flow.json")


class _StartedData(msgspec.Struct, rename="camel"):
    flow_id: str = ""
    spec_hash: str = ""


def _log_flow(data: bytes, path: str) -> tuple[str, str]:
    """The flow id and spec hash a log records (for finding its spec).

    Only the first record is read: the replay that follows reads the rest, and
    says what is wrong with it, as ``PATH: why``."""
    try:
        first = next(iter_records(data), None)
    except LogCorrupt as exc:
        raise CliError(f"{path}: {exc}") from None
    if not isinstance(first, Record) or first.type != "run.started":
        raise CliError(f"{path}: not a flowcore log (it does not begin with run.started)")
    try:
        started = msgspec.convert(first.data, type=_StartedData)
    except msgspec.ValidationError as exc:
        raise CliError(f"{path}: run.started is not valid: {exc}") from None
    return started.flow_id, started.spec_hash


def _find_spec(
    log_path: str, data: bytes, specs_dir: Path | None = None, db: Path | str | None = None
) -> Flow:
    """The spec to replay a log file against, when no ``--spec`` names it.

    First by the hash the log records, in the places the user named (the spec files
    under ``--specs DIR``, the specs the local-host database ``--db`` stores), then
    next to the log, then by hash in the default database (``$FLOWCORE_DB`` or
    ``flowcore.db``) when that file exists.
    """
    from flowcore_local import default_db_path

    flow_id, spec_hash = _log_flow(data, log_path)
    searched: list[str] = []
    if specs_dir is not None:
        found = _spec_in_folder(specs_dir, spec_hash)
        if found is not None:
            return found
        searched.append(f"the spec files under {specs_dir}")
    if db is not None:
        found = _spec_in_database(db, spec_hash)
        if found is not None:
            return found
        searched.append(f"the database {db}")
    folder = Path(log_path).resolve().parent
    for name in _SPEC_NAMES:
        candidate = folder / name
        if candidate.is_file():
            return load_spec(str(candidate))
    matches: list[Flow] = []
    for candidate in sorted(folder.iterdir()):
        if candidate.suffix not in (".yaml", ".yml", ".json") or not candidate.is_file():
            continue
        try:
            flow = flowcore.parse_flow(candidate.read_bytes(), source_name=str(candidate))
        except (SpecError, OSError):
            continue
        if flow.id == flow_id:
            matches.append(flow)
    for flow in matches:
        if flow.spec_hash == spec_hash:
            return flow
    if matches:
        return matches[0]
    searched.append("next to the log")
    default = default_db_path()
    if db is None and default.is_file():
        # The database commands use when none is named: only when nothing else
        # was found, and one that cannot be read is passed over.
        try:
            found = _spec_in_database(default, spec_hash)
        except CliError:
            found = None
        if found is not None:
            return found
        searched.append(f"the database {default}")
    raise CliError(
        f"{log_path}: no spec for flow {flow_id!r} (spec hash {spec_hash[:12]}) found "
        f"(searched {', '.join(searched)}); pass --spec SPEC (the flow's spec file), --specs "
        "DIR (a folder holding it) or --db DB (the local-host database that ran the run)"
    )


def _spec_in_folder(folder: Path, spec_hash: str) -> Flow | None:
    """The spec file under ``folder`` (recursively) whose flow has ``spec_hash``."""
    if not folder.is_dir():
        raise CliError(f"--specs {folder}: no such folder")
    for candidate in sorted(folder.rglob("*")):
        if candidate.suffix not in (".yaml", ".yml", ".json") or not candidate.is_file():
            continue
        try:
            flow = flowcore.parse_flow(candidate.read_bytes(), source_name=str(candidate))
        except (SpecError, OSError):
            continue  # not a spec (or not readable): not the one looked for
        if flow.spec_hash == spec_hash:
            return flow
    return None


def _spec_in_database(db: Path | str, spec_hash: str) -> Flow | None:
    """The spec with ``spec_hash`` that the local-host database ``db`` stores."""
    import asyncio

    from flowcore_local import HostError, LocalHost, NotAFlowcoreDatabase

    if isinstance(db, Path) and not db.is_file():
        raise CliError(f"no database at {db}")

    async def read() -> Flow | None:
        async with LocalHost(db) as host:
            return await host.flow_by_hash(spec_hash)

    try:
        return asyncio.run(read())
    except (HostError, NotAFlowcoreDatabase, OSError) as exc:
        raise CliError(str(exc)) from None


# --- output ------------------------------------------------------------------------------


def _from_database(db: Path | str, run_id: str) -> tuple[bytes, Flow]:
    """Run ``run_id``'s log as bytes and its flow, as the local-host database ``db`` stores them."""
    import asyncio

    from flowcore_local import HostError, LocalHost, NotAFlowcoreDatabase

    if isinstance(db, Path) and not db.exists():
        raise CliError(f"no database at {db}")

    async def read() -> tuple[bytes, Flow]:
        async with LocalHost(db) as host:
            return await host.export(run_id), await host.flow(run_id)

    try:
        return asyncio.run(read())
    except (HostError, NotAFlowcoreDatabase, OSError) as exc:
        raise CliError(str(exc)) from None


def _jsonable(value: Any) -> Any:
    """For values JSON has no type for (MessagePack bytes, say): their repr."""
    if isinstance(value, (bytes, bytearray)):
        return value.decode("utf-8", "replace")
    return repr(value)


def _compact(value: Any, width: int = 60) -> str:
    if value is None:
        return ""
    text = (
        value
        if isinstance(value, str)
        else json.dumps(value, ensure_ascii=False, default=_jsonable)
    )
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _clip(text: str, width: int) -> str:
    """At most ``width`` characters of ``text``, saying how long the whole was."""
    return text if len(text) <= width else f"{text[:width]}… ({len(text):,} characters)"


def _shown(text: str, width: int = 80) -> str:
    """Text from the log, for a markup string: cut short and with markup escaped."""
    return escape(_clip(text, width))


def _last_decision(data: bytes, last_index: int) -> tuple[int, str] | None:
    """The index and type of the decision record (run.started or event.reported) that
    the log's last replayed record belongs to: the decision the log ends inside."""
    found = None
    try:
        for record in iter_records(data):
            if not isinstance(record, Record) or record.index > last_index:
                break
            if record.type in ("run.started", "event.reported"):
                found = (record.index, record.type)
    except LogCorrupt:  # cannot happen after a replay that read it; say nothing then
        return None
    return found


def _until_command(
    log_path: str, spec_path: str | None, until: int, db: Path | str | None = None
) -> str:
    """The command that replays the same log only up to ``until`` (a cut)."""
    spec = "" if spec_path is None else f" --spec {shlex.quote(spec_path)}"
    where = "" if db is None else f" --db {shlex.quote(str(db))}"
    return f"flowcore replay {shlex.quote(log_path)}{where}{spec} --until {until}"


_MORE_USAGE = (
    ("tokens", "tokens", "tokens"),
    ("tool_calls", "toolCalls", "tool calls"),
    ("turns", "turns", "turns"),
    ("input_tokens", "inputTokens", "input tokens"),
    ("output_tokens", "outputTokens", "output tokens"),
    ("cache_read_tokens", "cacheReadTokens", "cache read tokens"),
)
# The split of a token total, in words.
_SPLIT = ("input", "output", "cache reads")


def _usage(usage: Usage) -> dict[str, int]:
    """Steps and cost always; tokens (and their split), tool calls and turns when some
    were reported."""
    out = {"steps": usage.steps, "costMinorUnits": usage.cost_minor_units}
    for attr, key, _ in _MORE_USAGE:
        if getattr(usage, attr):
            out[key] = getattr(usage, attr)
    return out


def _split_text(split: tuple[int, int, int]) -> str:
    """`` (900 input, 150 output, 300 cache reads)``, or nothing when none was reported."""
    if not any(split):
        return ""
    return " (" + ", ".join(f"{n} {words}" for n, words in zip(split, _SPLIT, strict=True)) + ")"


def usage_text(usage: Usage) -> str:
    """``2 steps, 30 cost, 1200 tokens (900 input, 300 output, 0 cache reads)``: the
    parts reported."""
    split = _split_text((usage.input_tokens, usage.output_tokens, usage.cache_read_tokens))
    more = "".join(
        f", {getattr(usage, attr)} {words}" + (split if attr == "tokens" else "")
        for attr, _, words in _MORE_USAGE[:3]
        if getattr(usage, attr)
    )
    return f"{usage.steps} steps, {usage.cost_minor_units} cost{more}"


def figures_json(state: flowcore.State | None) -> dict[str, Any]:
    """A run's figures (``flowcore.usage_figures``) as JSON: ``flowcore show``'s
    ``budget`` and ``flowcore replay``'s ``ledger``. Zeros when nothing started."""
    figures = flowcore.UsageFigures() if state is None else flowcore.usage_figures(state)
    out: dict[str, Any] = msgspec.to_builtins(figures)
    return out


def figures_text(figures: dict[str, Any]) -> str:
    """``3 steps used, 9 left; cost 3 used, 47 left; 2490 tokens used (2490 input, ...),
    unlimited left``: a run's figures (``figures_json``, or ``LocalHost.show``'s
    ``budget``) in words, the same on every command. Steps and cost always;
    tokens, tool calls and turns when used or limited."""

    def left(key: str) -> str:
        value = figures.get(f"{key}Left")
        return "unlimited" if value is None else str(value)

    text = f"{figures['stepsUsed']} steps used, {left('steps')} left;"
    text += f" cost {figures['costUsed']} used, {left('cost')} left"
    for key, words in (("tokens", "tokens"), ("toolCalls", "tool calls"), ("turns", "turns")):
        if figures.get(f"{key}Used") or figures.get(f"{key}Left") is not None:
            split = ""
            if key == "tokens":
                split = _split_text(
                    (
                        figures.get("inputTokensUsed", 0),
                        figures.get("outputTokensUsed", 0),
                        figures.get("cacheReadTokensUsed", 0),
                    )
                )
            text += f"; {figures[f'{key}Used']} {words} used{split}, {left(key)} left"
    return text


def _entry_to_json(entry: TrajectoryEntry) -> dict[str, Any]:
    out: dict[str, Any] = {
        "index": entry.index,
        "kind": entry.kind,
        "key": entry.key,
        "target": entry.target,
        "member": entry.member,
        "input": entry.input,
        "status": entry.status,
        "output": entry.output,
        "error": None if entry.error is None else msgspec.to_builtins(entry.error),
        "usage": None if entry.usage is None else _usage(entry.usage),
        "at": entry.at,
        "endedAt": entry.ended_at,
        "issues": entry.issues,
        "note": entry.note,
    }
    return out


def report_to_json(report: ReplayReport) -> dict[str, Any]:
    """The report as the ``--json`` document (specs/cli.md)."""
    settled = report.settled
    divergence = report.divergence
    out: dict[str, Any] = {
        "ok": report.ok,
        "runId": report.run_id,
        "flowId": report.flow_id,
        "version": report.version,
        "specHash": report.spec_hash,
        "replayedSpecHash": report.replayed_spec_hash,
        "specMatches": report.spec_matches,
        "firstIndex": report.first_index,
        "lastIndex": report.last_index,
        "records": report.records,
        "events": report.events,
        "rejected": report.rejected,
        "effects": report.effects,
        "status": report.status,
        "output": None if settled is None else settled.output,
        "error": None
        if settled is None or settled.error is None
        else msgspec.to_builtins(settled.error),
        "exhausted": None if settled is None else settled.exhausted,
        "usage": _usage(report.usage),
        "usageByMember": {m: _usage(u) for m, u in report.usage_by_member.items()},
        "usageDelegated": _usage(report.usage_delegated),
        "ledger": figures_json(report.state),
        "trajectory": [_entry_to_json(e) for e in report.trajectory],
        "unrecorded": [flowcore.effect_to_wire(e) for e in report.unrecorded],
        "torn": None if report.torn is None else msgspec.to_builtins(report.torn),
        "divergence": None
        if divergence is None
        else {
            "index": divergence.index,
            "message": str(divergence).split(" at index ", 1)[0],
            "expected": divergence.expected,
            "actual": divergence.actual,
        },
    }
    if report.state is not None and report.state.metadata:  # absent: none set
        out["metadata"] = dict(report.state.metadata)
    if report.forked_from is not None:  # (only a fork's document has the key)
        out["forkedFrom"] = msgspec.to_builtins(report.forked_from)
    return out


_STATUS_STYLE = {
    "succeeded": "green",
    "answered": "green",
    "received": "green",
    "delivered": "green",
    "fired": "cyan",
    "completed": "green",
    "failed": "red",
    "uncertain": "yellow",
    "abandoned": "yellow",
    "not-started": "dim",
    "cancelled": "dim",
    "pending": "blue",
    "buffered": "blue",
    "rejected": "magenta",
    "requested": "magenta",
}


def trajectory_table(report: ReplayReport) -> Table:
    """The trajectory as a table: one row per effect, signal, cancel and rejected event."""
    table = Table(title=None, show_lines=False, header_style="bold", expand=False)
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("kind", no_wrap=True)
    table.add_column("key / target", no_wrap=True)
    table.add_column("input", overflow="fold")
    table.add_column("status", no_wrap=True)
    table.add_column("output / error", overflow="fold")
    table.add_column("usage", justify="right", no_wrap=True)
    table.add_column("at (UTC)", justify="right", no_wrap=True)
    for e in report.trajectory:
        who = e.target if not e.member else f"{e.target} ({e.member})"
        key = e.key.split("/", 1)[1] if "/" in e.key else e.key
        key = _clip(key, 80)
        where = f"{key}\n{who}" if key and who else key or who
        result = f"{e.error.type}: {e.error.message}" if e.error is not None else _compact(e.output)
        if e.note:
            result = f"{result}\n[{e.note}]" if result else f"[{e.note}]"
        status = e.status if e.issues == 1 else f"{e.status} x{e.issues}"
        usage = ""
        if e.usage is not None:
            usage = f"{e.usage.steps} st / {e.usage.cost_minor_units}"
            if e.usage.tokens:
                usage += f" / {e.usage.tokens} tok"
        # ISO-8601 for people (``--json`` keeps the log's epoch milliseconds).
        at = iso(e.at) if e.ended_at is None else f"{iso(e.at)}\n→ {iso(e.ended_at)}"
        # Cells hold the log's values: Text, so that rich reads no markup in them.
        table.add_row(
            str(e.index),
            Text(e.kind),
            Text(_clip(where, 200)),
            Text(_compact(e.input)),
            Text(status, style=_STATUS_STYLE.get(e.status, "")),
            Text(_clip(result, 400)),
            usage,
            at,
        )
    return table


def _print_report(
    report: ReplayReport,
    log_path: str,
    data: bytes,
    spec_path: str | None,
    until: int | None,
    db: Path | str | None = None,
) -> None:
    """What ``flowcore replay`` prints of ``report``, the replay of the log at ``log_path``."""
    out = _report_console()
    _print_head(out, report, log_path)
    if report.trajectory:
        out.print(trajectory_table(report))
    _print_usage(out, report)
    _print_status(out, report)
    if report.unrecorded:
        _print_unrecorded(out, report, data, until)
    _print_verdict(out, report, log_path, spec_path, db)


def _report_console() -> Printer:
    """Where the report is printed: standard output, as wide as a terminal
    (160 columns in a pipe or a CI log), escaping what it cannot show."""
    if isinstance(sys.stdout, io.TextIOWrapper):
        # Printing must not fail on a terminal that cannot show a character
        # (an ASCII-only locale, say): the log's text, or the table's own "→",
        # comes out escaped instead of raising UnicodeEncodeError.
        sys.stdout.reconfigure(errors="backslashreplace")
    out = Printer(highlight=False)
    if not out.is_terminal and "COLUMNS" not in os.environ:
        out = Printer(highlight=False, width=160)  # a pipe or a CI log: room for the table
    return out


def _print_head(out: Printer, report: ReplayReport, log_path: str) -> None:
    """The log and run replayed, the run it was forked from, the spec replayed against."""
    span = f"{report.first_index}-{report.last_index}" if report.records else "none"
    spec = escape(report.replayed_spec_hash[:12])
    head = (
        f"[bold]{escape(log_path)}[/]: run [bold]{_shown(report.run_id)}[/] of flow "
        f"[bold]{_shown(report.flow_id)}[/] v{report.version}, records {span} "
        f"({report.records}: {report.events} events, {report.effects} effects"
        + (f", {report.rejected} rejected" if report.rejected else "")
        + ")"
    )
    out.print(head)
    if report.forked_from is not None:
        source = report.forked_from
        out.print(
            f"forked from run [bold]{_shown(source.run_id)}[/] at index {source.index}: the"
            " events before it are that run's, under this run's keys"
        )
    if report.spec_matches:
        out.print(f"spec {spec} (the one the log recorded)")
    else:
        out.print(
            f"[yellow]spec {spec} differs from the recorded {_shown(report.spec_hash[:12])}[/]: "
            "replaying against another version of the flow"
        )


def _print_usage(out: Printer, report: ReplayReport) -> None:
    """The reported usage (by member, by child runs) and the ledger."""
    parts = [f"reported usage {usage_text(report.usage)}"]
    if report.usage_by_member:
        members = ", ".join(f"{m} {usage_text(u)}" for m, u in report.usage_by_member.items())
        parts.append(f"by member: {members}")
    if report.usage_delegated != Usage():
        parts.append(f"by child runs: {usage_text(report.usage_delegated)}")
    # One line each, never wrapped: the ledger line reads as `flowcore show`'s budget line.
    out.print(escape("; ".join(parts)), soft_wrap=True)
    out.print(escape(f"ledger: {figures_text(figures_json(report.state))}"), soft_wrap=True)


def _print_status(out: Printer, report: ReplayReport) -> None:
    """How the run settled (or that the log ends first), its metadata, a torn last record."""
    settled = report.settled
    if settled is not None:
        line = f"status [bold]{escape(settled.status)}[/]"
        if settled.exhausted:
            line += f" ({escape(settled.exhausted)})"
        if settled.error is not None:
            line += f": {_shown(settled.error.type)}: {_shown(settled.error.message, 200)}"
        if settled.output is not None:
            line += f" · output {escape(_compact(settled.output, 200))}"
        out.print(line)
    else:
        out.print(f"status [bold]{escape(report.status)}[/] (the log ends before the run settles)")
    if report.state is not None and report.state.metadata:
        pairs = (f"{k}={_compact(v, 80)}" for k, v in report.state.metadata.items())
        out.print(f"metadata {escape(' '.join(pairs))}")
    if report.torn is not None:
        out.print(
            f"[yellow]torn last record at byte {report.torn.offset}[/] "
            f"({report.torn.length} bytes: {_shown(report.torn.reason, 200)}); "
            "the complete records before it were replayed"
        )


def _print_unrecorded(out: Printer, report: ReplayReport, data: bytes, until: int | None) -> None:
    """The effects derived for the decision the log ends inside, which it does not hold."""
    # A cut (a torn tail, --until, or a clean end replayed with the log's
    # own spec) inside a decision: its effects were derived but are not in the log.
    decision = _last_decision(data, report.last_index)
    inside = (
        f"the log ends inside the decision of record {decision[0]} ({decision[1]})"
        if decision is not None
        else "the log ends inside a decision"
    )
    why = (
        "a torn last record"
        if report.torn is not None
        else "--until"
        if until is not None
        else "its end: the host writes a decision's records together, so they were lost"
    )
    keys = ", ".join(
        _clip(str(flowcore.effect_to_wire(e).get("idempotencyKey", "settled")), 80)
        for e in report.unrecorded
    )
    out.print(
        f"[yellow]{inside}[/]: {len(report.unrecorded)} effect(s) the interpreter derives "
        f"for it are not recorded (unrecorded: the log was cut by {why}): {escape(keys)}"
    )


def _print_verdict(
    out: Printer, report: ReplayReport, log_path: str, spec_path: str | None, db: Path | str | None
) -> None:
    """Whether the log replays; where it diverged, and how to replay up to there."""
    divergence = report.divergence
    if divergence is None:
        verdict = "every recorded effect was re-derived identically"
        if not report.spec_matches:
            verdict += ": this run can continue on this version"
        out.print(f"[green]replays[/]: {verdict}")
        return
    message = str(divergence).split(" at index ", 1)[0]
    out.print(f"[red bold]DIVERGED at index {divergence.index}[/]: {_shown(message, 300)}")
    for label, value in (
        ("expected (the log):   ", divergence.expected),
        ("actual (the flow now):", divergence.actual),
    ):
        text = json.dumps(value, ensure_ascii=False, default=_jsonable)
        out.print(f"  {label} {_shown(text, 2000)}")
    if not report.spec_matches:
        out.print(
            f"this run cannot move to this version: it would act differently at index "
            f"{divergence.index}"
        )
    index = divergence.index
    if divergence.expected is None and index == report.last_index + 1:
        # The log ends inside a decision, replayed with another spec (see
        # flowcore.log.replay.fold): a lost record or an effect the new version adds.
        out.print(
            "the log ends inside a decision, and the new spec derives effects the log does not "
            "hold: a new version that emits more there cannot take this run over (specs/log.md "
            "§5). If the log was cut, replay it as a cut, which lists them as unrecorded: "
            f"{escape(_until_command(log_path, spec_path, report.last_index, db))}",
            soft_wrap=True,  # a command to copy: never broken inside it
        )
    elif index > report.first_index:
        out.print(
            "to replay only the records before the divergence: "
            f"{escape(_until_command(log_path, spec_path, index - 1, db))}",
            soft_wrap=True,
        )


@click.command()
@click.argument("log", metavar="LOG")
@click.option("--spec", "spec_path", metavar="SPEC", help="The flow to replay against.")
@click.option(
    "--until",
    type=int,
    metavar="INDEX",
    help="Stop after the record with this index (a cut: effects past it are unrecorded).",
)
@click.option(
    "--allow-unknown-types",
    is_flag=True,
    help="Skip records of types this reader does not know (a newer writer's) instead of "
    "refusing the log.",
)
@click.option(
    "--specs",
    "specs_dir",
    type=click.Path(file_okay=False, path_type=Path),
    metavar="DIR",
    help="Without --spec: replay against the spec file under DIR (searched recursively) "
    "whose hash is the one the log records.",
)
@click.option(
    "--db",
    type=DATABASE,
    help="A local-host database (a file, or a postgresql:// URL). When LOG is not a file,"
    " it is a run id there: its log and stored spec are read from it (no export needed)."
    " When LOG is a log file, the spec whose hash the log records is looked up in it.",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output on stdout.")
def replay(
    log: str,
    spec_path: str | None,
    until: int | None,
    allow_unknown_types: bool,
    specs_dir: Path | None,
    db: Path | str | None,
    as_json: bool,
) -> int:
    """Replay the run recorded in LOG (NDJSON or MessagePack) against its flow.

    Without --spec, the spec is the one whose hash the log records, found
    under --specs DIR or in the database --db, else the spec next to the log,
    else by hash in $FLOWCORE_DB or flowcore.db if it exists. With --db and a
    LOG that is not a file, LOG is a run id in that database: its log and its
    stored spec are read from there (no export needed).

    Prints the trajectory, or the first divergence. Exit 0 when the log
    replays, 1 on divergence, 2 on bad input (including a corrupt log).
    """
    if db is not None and not Path(log).is_file():
        data, stored = _from_database(db, log)
        flow = load_spec(spec_path) if spec_path is not None else stored
    else:
        data = read_bytes(log, "log file")
        flow = (
            load_spec(spec_path) if spec_path is not None else _find_spec(log, data, specs_dir, db)
        )
    try:
        report = flowcore.replay(
            data,
            flow,
            until=until,
            raise_on_divergence=False,
            allow_unknown_types=allow_unknown_types,
        )
    except (LogCorrupt, ReplayError, FlowcoreError) as exc:
        raise CliError(f"{log}: {exc}") from None
    if as_json:
        click.echo(json.dumps(report_to_json(report), ensure_ascii=False, default=_jsonable))
    else:
        _print_report(report, log, data, spec_path, until, db)
    return 0 if report.ok else 1
