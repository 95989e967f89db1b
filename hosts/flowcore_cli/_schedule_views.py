"""What ``flowcore schedule add|list|show|pause|resume|trigger|backfill|delete``
add to the catalogue's schedule operations, on either host: their help,
``add --spec FILE --tools MODULE --flows PATH``, ``backfill --start/--end``
read as ISO-8601 times with a zone, and what each prints.

A schedule is declared in a spec's ``schedules:`` and registered with
``schedule add --spec FILE``. On the local host ``flowcore worker`` starts its
runs when they are due (run id ``NAME@SLOT``); on Temporal, Temporal runs the
schedules itself (a ``flowcore temporal worker`` runs the workflows they start).
The two hosts print in one form; what one host does not tell (a schedule's
flow, each slot a backfill started) is left out.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any, Final

import click
from rich.table import Table
from rich.text import Text

import flowcore
from flowcore_handlers import Host
from flowcore_ops import OperationError

from ._common import CliError, iso, problem_line, say
from ._derive import View
from ._history import short_json, tables
from ._progress import out

__all__ = ["SCHEDULE_HELP", "SCHEDULE_VIEWS", "cadence", "schedules_table", "state_text"]

SCHEDULE_HELP: Final = (
    "Start runs on a cadence: schedules declared in a spec's `schedules:`.\n\n"
    "On the local host `flowcore worker` starts their runs when they are due,"
    " each slot once, with the run id NAME@SLOT (2026-12-02T07:00:00Z, in UTC);"
    " on Temporal, Temporal starts them (workflow NAME-SLOT)."
)


def _line(text: str) -> None:
    out.print(Text(text))


def _emit(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, ensure_ascii=False))


class Instant(click.ParamType[str]):
    """An ISO-8601 time with its zone (``2026-12-01T07:00:00Z``), kept as text."""

    name = "TIME"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        what = "time"
        if param is not None:
            what = param.opts[0] if isinstance(param, click.Option) else param.human_readable_name
        text = str(value)
        try:
            moment = dt.datetime.fromisoformat(text)
        except ValueError:
            raise CliError(
                f"{what}: {text[:60]!r} is not an ISO-8601 time like 2026-12-01T07:00:00Z"
            ) from None
        if moment.tzinfo is None:
            raise CliError(f"{what}: {text[:60]!r} has no time zone (end it with Z for UTC)")
        if moment < dt.datetime(1970, 1, 1, tzinfo=dt.UTC):
            raise CliError(f"{what}: {text[:60]!r} is before 1970")
        return moment.isoformat()


def _ms(ms: int) -> str:
    """A duration as a spec writes it: ``1h``, ``15m``, ``1d12h``, ``250ms``."""
    text = ""
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms >= size:
            text += f"{ms // size}{unit}"
            ms %= size
    if ms:
        text += f"{ms}ms"
    return text or "0s"


def cadence(info: dict[str, Any]) -> str:
    """``cron 0 7 * * * (Europe/Paris)``, ``every 1h +15m``, or both (else Temporal's
    calendars)."""
    d = info["definition"]
    parts = []
    if "cron" in d:
        parts.append(f"cron {d['cron']}" + (f" ({d['timezone']})" if "timezone" in d else ""))
    if "every" in d:
        parts.append(
            f"every {_ms(d['every'])}" + (f" +{_ms(d['offset'])}" if "offset" in d else "")
        )
    return " and ".join(parts) or ", ".join(d.get("calendars", []))


def state_text(info: dict[str, Any]) -> str:
    """A schedule's state for people: active, paused (with its note), limit reached."""
    if info["paused"]:
        return "paused" + (f": {info['note']}" if info["note"] else "")
    if info["remaining"] == 0:
        return "limit reached"
    return "active"


def _next(info: dict[str, Any], paused: bool = True) -> str:
    """``; next SLOT`` of a schedule that has one (``paused``: and is paused; a
    paused schedule has none on the local host, Temporal's still lists them)."""
    nxt = info.get("nextSlotsMs") or []
    return f"; next {iso(nxt[0], 'seconds')}" if nxt and (paused or not info["paused"]) else ""


def schedules_table(found: list[dict[str, Any]]) -> Table:
    """Schedules as ``schedule list`` shows them."""
    table = Table(header_style="bold")
    for column in ("schedule", "flow", "cadence", "overlap", "state", "next (UTC)", "running"):
        table.add_column(column, no_wrap=column != "cadence", overflow="fold")
    for info in found:
        nxt = info["nextSlotsMs"]
        cells = [
            info["name"],
            info.get("flowId") or "",
            cadence(info),
            info["definition"]["overlap"],
            state_text(info),
            iso(nxt[0], "seconds") if nxt else "",
            str(len(info["running"])),
        ]
        table.add_row(*(Text(cell) for cell in cells))
    return table


class _Tuned:
    """A host whose schedule calls take the command line's extras (``--tools``,
    ``--flows``) and keep what they return that the operation's output drops."""

    def __init__(self, host: Host, values: dict[str, Any]) -> None:
        self._host = host
        self._values = values

    def __getattr__(self, name: str) -> Any:
        return getattr(self._host, name)

    async def add_schedules(
        self, spec: str | Path, *, tools: str | None = None, owner: str | None = None
    ) -> list[str]:
        options: dict[str, Any] = {"tools": self._values.get("tools") or tools, "owner": owner}
        flows = self._values.get("flows") or ()
        if flows:
            if not self._values["host_choice"].temporal:
                raise CliError("--flows: only Temporal's schedules take more spec files")
            options["flows"] = tuple(Path(p) for p in flows)
        try:
            names: list[str] = await self._host.add_schedules(spec, **options)
        except flowcore.SpecError as exc:  # one line per problem, as `validate` prints them
            for problem in exc.problems[:-1]:
                say(problem_line(problem))
            raise CliError(problem_line(exc.problems[-1])) from None
        return names

    async def trigger_schedule(self, name: str) -> str | None:
        run_id: str | None = await self._host.trigger_schedule(name)
        self._values["run"] = run_id
        return None  # the run is the command's to print, not to read

    async def backfill_schedule(self, name: str, start_ms: int, end_ms: int) -> Any:
        actions = await self._host.backfill_schedule(name, start_ms, end_ms)
        self._values["actions"] = actions
        return actions


def _tuned(host: Host, values: dict[str, Any]) -> Host:
    tuned: Host = _Tuned(host, values)
    return tuned


def _explain(exc: OperationError, values: dict[str, Any]) -> str:
    if exc.code == "unknown-schedule":
        where = "on Temporal" if values["host_choice"].temporal else "in the database"
        return f"{exc.detail} {where}"
    return exc.detail


async def _infos(host: Host, names: list[str]) -> list[dict[str, Any]]:
    return [await host.schedule(name) for name in names]


async def _added(host: Host, output: Any, values: dict[str, Any]) -> int | None:
    for info in await _infos(host, output.names):
        flow = f" ({info['flowId']})" if info.get("flowId") else ""
        _line(f"schedule {info['name']}{flow}: {cadence(info)}; {state_text(info)}{_next(info)}")
    return None


async def _added_json(host: Host, output: Any, values: dict[str, Any]) -> int | None:
    _emit(await _infos(host, output.names))
    return None


async def _listed(host: Host, output: Any, values: dict[str, Any]) -> int | None:
    if not output.schedules:
        _line("no schedules (flowcore schedule add --spec FILE)")
        return None
    tables().print(schedules_table(output.schedules))
    return None


async def _listed_json(host: Host, output: Any, values: dict[str, Any]) -> int | None:
    """The schedules without their recent actions (``show --json`` has them)."""
    _emit([{k: v for k, v in info.items() if k != "actions"} for info in output.schedules])
    return None


async def _info_json(host: Host, output: Any, values: dict[str, Any]) -> int | None:
    _emit(output)
    return None


def _policy(info: dict[str, Any]) -> str:
    d = info["definition"]
    policy = f"overlap {d['overlap']}"
    if "catchup_window" in d:
        policy += f", catch-up window {_ms(d['catchup_window'])}"
    if "jitter" in d:
        policy += f", jitter {_ms(d['jitter'])}"
    if info["remaining"] is not None:
        policy += f", {info['remaining']} run(s) left"
    return policy


def _actions_table(actions: list[dict[str, Any]]) -> Table:
    table = Table(header_style="bold", title="recent actions", title_justify="left")
    for column in ("at (UTC)", "action", "slot (UTC)", "run", "why"):
        table.add_column(column, no_wrap=column != "why", overflow="fold")
    for a in actions[-20:]:
        slot = iso(a["slotMs"], "seconds") if a.get("slotMs") is not None else ""
        if a.get("throughMs") is not None:
            slot += f" .. {iso(a['throughMs'], 'seconds')}"
        at = iso(a["atMs"], "seconds") if a.get("atMs") is not None else ""
        cells = (at, a["action"], slot, a.get("runId") or "", a.get("why") or "")
        table.add_row(*(Text(cell) for cell in cells))
    return table


async def _shown(host: Host, info: Any, values: dict[str, Any]) -> int | None:
    flow = f"flow {info['flowId']}, " if info.get("flowId") else ""
    _line(f"schedule {info['name']}: {flow}{state_text(info)}")
    _line(f"  cadence     {cadence(info)}")
    _line(f"  policy      {_policy(info)}")
    d = info["definition"]
    if "input" in d:
        _line(f"  input       {short_json(d['input'])}")
    if info.get("owner") is not None:
        _line(f"  owner       {info['owner']} (the runs it starts are theirs)")
    if info["running"]:
        _line(f"  running     {', '.join(info['running'])}")
    if info.get("bufferedMs") is not None:
        _line(f"  waiting     slot {iso(info['bufferedMs'], 'seconds')}")
    nxt = info["nextSlotsMs"]
    _line("  next slots  " + (", ".join(iso(ms, "seconds") for ms in nxt) if nxt else "none"))
    if "numActions" in info:  # Temporal counts what it did
        _line(
            f"  actions     {info['numActions']} taken, {info['skippedOverlap']} skipped"
            f" (overlap), {info['missedCatchupWindow']} missed (catch-up window)"
        )
    if not info["actions"]:
        _line("  no actions yet")
        return None
    tables().print(_actions_table(info["actions"]))
    return None


def _changed(done: str) -> Any:
    """``schedule NAME paused; next SLOT`` (pause, resume)."""

    async def render(host: Host, info: Any, values: dict[str, Any]) -> int | None:
        _line(f"schedule {values['name']} {done}{_next(info, paused=False)}")
        return None

    return render


async def _deleted(host: Host, output: Any, values: dict[str, Any]) -> int | None:
    if values["as_json"]:
        _emit({"name": values["name"], "deleted": True})
    else:
        _line(f"schedule {values['name']} deleted")
    return None


async def _triggered(host: Host, output: Any, values: dict[str, Any]) -> int | None:
    run_id = values.get("run")
    if values["as_json"]:
        _emit({"name": values["name"], "runId": run_id})
    elif run_id is None:  # Temporal starts it and names it
        _line(f"schedule {values['name']} triggered")
    else:
        _line(f"started {run_id} (a worker runs it)")
    return None


async def _backfilled(host: Host, output: Any, values: dict[str, Any]) -> int | None:
    actions = values.get("actions")
    if actions is None:  # Temporal starts the slots and does not list them
        if values["as_json"]:
            _emit(output)
        else:
            _line(f"schedule {values['name']} backfilled")
        return None
    if values["as_json"]:
        _emit(actions)
        return None
    for a in actions:
        why = f" ({a['why']})" if a["why"] and a["why"] != "backfill" else ""
        _line(f"{a['action']} {iso(a['slotMs'], 'seconds')} {a['runId'] or ''}{why}")
    started = sum(1 for a in actions if a["action"] == "started")
    _line(f"{started} of {len(actions)} slot(s) started (a worker runs them)")
    return None


_NAME = {"name": ("NAME",)}
_INFO_JSON = "Print the schedule as JSON (times in epoch ms)."

SCHEDULE_VIEWS: Final[dict[str, View]] = {
    "schedule.add": View(
        "Register the schedules SPEC declares; a schedule already there keeps its history.\n\n"
        "On Temporal: a Temporal Schedule for each (one that exists is updated and"
        " keeps its state).",
        options=(
            click.Option(["--tools"], help="The tools module of the runs they start."),
            click.Option(
                ["--flows"],
                multiple=True,
                type=click.Path(exists=True, path_type=Path),
                help="Temporal: more spec files or directories that run_subflow may name"
                " (repeatable).",
            ),
        ),
        names={"flow": ("--spec",)},
        types={"flow": click.Path(exists=True, dir_okay=False)},
        helps={
            "flow": "The spec whose `schedules:` to register (again: their new definition).",
            "owner": "The principal the runs they start belong to (default: none, the admins').",
        },
        tune=_tuned,
        render=_added,
        document=_added_json,
        json_help="Print the schedules added as a JSON list.",
        creates=True,
    ),
    "schedule.list": View(
        "List the schedules: cadence, policy, state and next slot.",
        render=_listed,
        document=_listed_json,
        json_help="Print the schedules as a JSON list (times in epoch ms).",
    ),
    "schedule.show": View(
        "Show schedule NAME: its definition, state, next 5 slots and recent actions.",
        metavars=_NAME,
        explain=_explain,
        render=_shown,
        document=_info_json,
        json_help=_INFO_JSON,
    ),
    "schedule.pause": View(
        "Pause schedule NAME: it starts nothing until resumed.",
        metavars=_NAME,
        helps={"note": "Why (shown by list and show)."},
        explain=_explain,
        render=_changed("paused"),
        document=_info_json,
        json_help=_INFO_JSON,
    ),
    "schedule.resume": View(
        "Resume schedule NAME from now: the slots while it was paused are not started.",
        metavars=_NAME,
        helps={"note": "A note to keep (replaces the pause note)."},
        explain=_explain,
        render=_changed("resumed"),
        document=_info_json,
        json_help=_INFO_JSON,
    ),
    "schedule.trigger": View(
        "Start a run of schedule NAME now, outside its cadence (run id NAME@trigger-N).",
        metavars=_NAME,
        tune=_tuned,
        explain=_explain,
        render=_triggered,
        document=_triggered,
        json_help="Print {name, runId} as JSON (runId null where the host does not tell).",
    ),
    "schedule.backfill": View(
        "Start the slots of schedule NAME from --start through --end, each once, under its"
        " overlap policy (a slot whose run exists is skipped).",
        metavars=_NAME,
        types={"start": Instant(), "end": Instant()},
        helps={
            "start": "First time, e.g. 2026-12-01T00:00:00Z.",
            "end": "Last time (included).",
        },
        tune=_tuned,
        explain=_explain,
        render=_backfilled,
        document=_backfilled,
        json_help="Print the slots' actions as a JSON list.",
    ),
    "schedule.delete": View(
        "Delete schedule NAME and its actions; the runs it started stay.",
        metavars=_NAME,
        explain=_explain,
        render=_deleted,
        document=_deleted,
        json_help="Print {name, deleted} as JSON.",
    ),
}
