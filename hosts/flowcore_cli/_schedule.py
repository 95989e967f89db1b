"""``flowcore schedule add|list|show|pause|resume|trigger|backfill|delete``: the
local host's schedules (``flowcore.schedules``; ``LocalHost.add_schedules`` and
the others).

A schedule is declared in a spec's ``schedules:`` and registered with
``schedule add --spec FILE``; ``flowcore worker`` starts its runs when they
are due (a ``run``'s own worker does not). Bad input prints one line and
exits 2, as every command does.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from rich.table import Table
from rich.text import Text

from flowcore_local import LocalHost

from ._common import CliError, checked_name, iso
from ._history import short_json, tables
from ._local import _print, _run, db_option
from ._options import json_option

__all__ = ["schedule"]

name_argument = click.argument("name", callback=checked_name)


def _emit_json(value: Any) -> None:
    import json

    click.echo(json.dumps(value, indent=2, ensure_ascii=False))


def _instant(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    """An ISO-8601 time with its zone (``2026-12-01T07:00:00Z``) as epoch ms."""
    if value is None:
        return None
    what = param.opts[0] if isinstance(param, click.Option) else param.human_readable_name
    try:
        moment = dt.datetime.fromisoformat(value)
    except ValueError:
        raise CliError(
            f"{what}: {value[:60]!r} is not an ISO-8601 time like 2026-12-01T07:00:00Z"
        ) from None
    if moment.tzinfo is None:
        raise CliError(f"{what}: {value[:60]!r} has no time zone (end it with Z for UTC)")
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    ms = (moment - epoch) // dt.timedelta(milliseconds=1)
    if ms < 0:
        raise CliError(f"{what}: {value[:60]!r} is before 1970")
    return ms


def cadence(info: dict[str, Any]) -> str:
    """``cron 0 7 * * * (Europe/Paris)``, ``every 1h +15m``, or both."""
    d = info["definition"]
    parts = []
    if "cron" in d:
        parts.append(f"cron {d['cron']}" + (f" ({d['timezone']})" if "timezone" in d else ""))
    if "every" in d:
        parts.append(
            f"every {_ms(d['every'])}" + (f" +{_ms(d['offset'])}" if "offset" in d else "")
        )
    return " and ".join(parts)


def _ms(ms: int) -> str:
    """A duration as a spec writes it: ``1h``, ``15m``, ``1d12h``, ``250ms``."""
    out = ""
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms >= size:
            out += f"{ms // size}{unit}"
            ms %= size
    if ms:
        out += f"{ms}ms"
    return out or "0s"


def state_text(info: dict[str, Any]) -> str:
    """A schedule's state for people: active, paused (with its note), limit reached."""
    if info["paused"]:
        return "paused" + (f": {info['note']}" if info["note"] else "")
    if info["remaining"] == 0:
        return "limit reached"
    return "active"


def schedules_table(
    found: list[dict[str, Any]],
    cadence_of: Callable[[dict[str, Any]], str] = cadence,
    flow: bool = True,
) -> Table:
    """Schedules as ``schedule list`` shows them (``flow``: with the flow's id)."""
    table = Table(header_style="bold")
    columns = ["schedule", "flow", "cadence", "overlap", "state", "next (UTC)", "running"]
    for column in columns if flow else [c for c in columns if c != "flow"]:
        table.add_column(column, no_wrap=column != "cadence", overflow="fold")
    for info in found:
        nxt = info["nextSlotsMs"]
        cells = [
            info["name"],
            cadence_of(info),
            info["definition"]["overlap"],
            state_text(info),
            iso(nxt[0], "seconds") if nxt else "",
            str(len(info["running"])),
        ]
        if flow:
            cells.insert(1, info["flowId"])
        table.add_row(*(Text(cell) for cell in cells))
    return table


@click.group()
def schedule() -> None:
    """Start runs on a cadence: schedules declared in a spec's `schedules:`.

    `flowcore worker` starts their runs when they are due, each slot once,
    with the run id NAME@SLOT (2026-12-02T07:00:00Z, in UTC).
    """


@schedule.command()
@click.option(
    "--spec",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="The spec whose `schedules:` to register (again: their new definition).",
)
@click.option("--tools", help="The tools module of the runs they start.")
@json_option
@db_option
def add(spec: Path, tools: str | None, as_json: bool, db: Path) -> None:
    """Register the schedules SPEC declares; a schedule already there keeps its history."""

    async def body(host: LocalHost) -> list[dict[str, Any]]:
        names = await host.add_schedules(spec, tools=tools)
        return [await host.schedule(name, 1) for name in names]

    added = _run(db, body, tools, must_exist=False)
    if as_json:
        _emit_json(added)
        return
    for info in added:
        nxt = info["nextSlotsMs"]
        _print(
            f"schedule {info['name']} ({info['flowId']}): {cadence(info)}; {state_text(info)}"
            + (f"; next {iso(nxt[0], 'seconds')}" if nxt else "")
        )


@schedule.command("list")
@json_option
@db_option
def list_(as_json: bool, db: Path) -> None:
    """List the schedules: cadence, policy, state and next slot."""

    async def body(host: LocalHost) -> list[dict[str, Any]]:
        return await host.schedules()

    found = _run(db, body)
    if as_json:
        _emit_json(found)
        return
    if not found:
        _print("no schedules (flowcore schedule add --spec FILE)")
        return
    tables().print(schedules_table(found))


@schedule.command()
@name_argument
@json_option
@db_option
def show(name: str, as_json: bool, db: Path) -> None:
    """Show schedule NAME: its definition, state, next 5 slots and recent actions."""

    async def body(host: LocalHost) -> dict[str, Any]:
        return await host.schedule(name)

    info = _run(db, body)
    if as_json:
        _emit_json(info)
        return
    d = info["definition"]
    _print(f"schedule {info['name']}: flow {info['flowId']}, {state_text(info)}")
    _print(f"  cadence     {cadence(info)}")
    _print(
        f"  policy      overlap {d['overlap']}, catch-up window {_ms(d['catchup_window'])}"
        + (f", jitter {_ms(d['jitter'])}" if "jitter" in d else "")
        + (f", {info['remaining']} run(s) left" if info["remaining"] is not None else "")
    )
    if "input" in d:
        _print(f"  input       {short_json(d['input'])}")
    if info["running"]:
        _print(f"  running     {', '.join(info['running'])}")
    if info["bufferedMs"] is not None:
        _print(f"  waiting     slot {iso(info['bufferedMs'], 'seconds')}")
    nxt = info["nextSlotsMs"]
    _print("  next slots  " + (", ".join(iso(ms, "seconds") for ms in nxt) if nxt else "none"))
    if not info["actions"]:
        _print("  no actions yet")
        return
    table = Table(header_style="bold", title="recent actions", title_justify="left")
    for column in ("at (UTC)", "action", "slot (UTC)", "run", "why"):
        table.add_column(column, no_wrap=column != "why", overflow="fold")
    for a in info["actions"][-20:]:
        slot = iso(a["slotMs"], "seconds") if a["slotMs"] is not None else ""
        if a["throughMs"] is not None:
            slot += f" .. {iso(a['throughMs'], 'seconds')}"
        cells = (iso(a["atMs"], "seconds"), a["action"], slot, a["runId"] or "", a["why"] or "")
        table.add_row(*(Text(cell) for cell in cells))
    tables().print(table)


@schedule.command()
@name_argument
@click.option("--note", default="", help="Why (shown by list and show).")
@json_option
@db_option
def pause(name: str, note: str, as_json: bool, db: Path) -> None:
    """Pause schedule NAME: it starts nothing until resumed."""
    _change(db, name, as_json, "paused", lambda host: host.pause_schedule(name, note))


@schedule.command()
@name_argument
@click.option("--note", default="", help="A note to keep (replaces the pause note).")
@json_option
@db_option
def resume(name: str, note: str, as_json: bool, db: Path) -> None:
    """Resume schedule NAME from now: the slots while it was paused are not started."""
    _change(db, name, as_json, "resumed", lambda host: host.resume_schedule(name, note))


@schedule.command()
@name_argument
@json_option
@db_option
def delete(name: str, as_json: bool, db: Path) -> None:
    """Delete schedule NAME and its actions; the runs it started stay."""
    _change(db, name, as_json, "deleted", lambda host: host.delete_schedule(name))


def _change(db: Path, name: str, as_json: bool, done: str, change: Any) -> None:
    async def body(host: LocalHost) -> dict[str, Any]:
        await change(host)
        if done == "deleted":
            return {"name": name, "deleted": True}
        return await host.schedule(name)

    info = _run(db, body)
    if as_json:
        _emit_json(info)
        return
    nxt = info.get("nextSlotsMs") or []
    _print(f"schedule {name} {done}" + (f"; next {iso(nxt[0], 'seconds')}" if nxt else ""))


@schedule.command()
@name_argument
@json_option
@db_option
def trigger(name: str, as_json: bool, db: Path) -> None:
    """Start a run of schedule NAME now, outside its cadence (run id NAME@trigger-N)."""

    async def body(host: LocalHost) -> str:
        return await host.trigger_schedule(name)

    run_id = _run(db, body)
    if as_json:
        _emit_json({"name": name, "runId": run_id})
        return
    _print(f"started {run_id} (a worker runs it)")


@schedule.command()
@name_argument
@click.option(
    "--start", required=True, callback=_instant, help="First time, e.g. 2026-12-01T00:00:00Z."
)
@click.option("--end", required=True, callback=_instant, help="Last time (included).")
@json_option
@db_option
def backfill(name: str, start: int, end: int, as_json: bool, db: Path) -> None:
    """Start the slots of schedule NAME from --start through --end, each once, under its
    overlap policy (a slot whose run exists is skipped)."""

    async def body(host: LocalHost) -> list[dict[str, Any]]:
        return await host.backfill_schedule(name, start, end)

    actions = _run(db, body)
    if as_json:
        _emit_json(actions)
        return
    for a in actions:
        why = f" ({a['why']})" if a["why"] and a["why"] != "backfill" else ""
        _print(f"{a['action']} {iso(a['slotMs'], 'seconds')} {a['runId'] or ''}{why}")
    started = sum(1 for a in actions if a["action"] == "started")
    _print(f"{started} of {len(actions)} slot(s) started (a worker runs them)")
