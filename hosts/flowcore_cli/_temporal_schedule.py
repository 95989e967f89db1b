"""``flowcore temporal schedule add|list|show|pause|resume|trigger|backfill|delete``:
flowcore schedules as Temporal Schedules (``TemporalHost.add_schedules`` and
the others; the mapping is ``flowcore_temporal._schedules``).

The same subcommands as ``flowcore schedule``; Temporal runs the schedules
itself, so no flowcore process has to be up for a slot to start (a
``flowcore temporal worker`` runs the workflows they start).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.text import Text

from ._common import checked_name, iso
from ._history import short_json, tables
from ._progress import out
from ._schedule import _instant, _ms, cadence, schedules_table, state_text
from ._temporal_session import connection_options, with_host

if TYPE_CHECKING:
    from flowcore_temporal import TemporalHost

__all__ = ["schedule"]

name_argument = click.argument("name", callback=checked_name)
json_flag = click.option("--json", "as_json", is_flag=True, help="Print JSON (times in epoch ms).")


def _line(text: str) -> None:
    out.print(Text(text))


def _emit(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, ensure_ascii=False))


def _cadence(info: dict[str, Any]) -> str:
    return cadence(info) or ", ".join(info["definition"].get("calendars", []))


@click.group()
def schedule() -> None:
    """Start runs on a cadence with Temporal Schedules: a spec's `schedules:`.

    Each slot's run is workflow NAME-SLOT (Temporal's id: the schedule's name
    and the slot in RFC 3339, to the second).
    """


@schedule.command()
@click.option(
    "--spec",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="The spec whose `schedules:` to create (or update) on Temporal.",
)
@click.option("--tools", help="Tools module of the runs' handlers (default: the worker's).")
@click.option(
    "--flows",
    multiple=True,
    type=click.Path(exists=True, path_type=Path),
    help="More spec files or directories that run_subflow may name (repeatable).",
)
@json_flag
@connection_options
def add(
    spec: Path,
    tools: str | None,
    flows: tuple[Path, ...],
    as_json: bool,
    address: str,
    task_queue: str,
    namespace: str,
) -> None:
    """Create a Temporal Schedule for each schedule SPEC declares (update one that exists)."""

    async def body(host: TemporalHost) -> list[dict[str, Any]]:
        names = await host.add_schedules(spec, flows=flows, tools=tools)
        return [await host.schedule(name) for name in names]

    def after(added: list[dict[str, Any]]) -> int:
        if as_json:
            _emit(added)
            return 0
        for info in added:
            nxt = info["nextSlotsMs"]
            _line(
                f"schedule {info['name']}: {_cadence(info)}; {state_text(info)}"
                + (f"; next {iso(nxt[0], 'seconds')}" if nxt else "")
            )
        return 0

    with_host(address, namespace, task_queue, body, after)


@schedule.command("list")
@json_flag
@connection_options
def list_(as_json: bool, address: str, task_queue: str, namespace: str) -> None:
    """List the Temporal Schedules that start flowcore runs."""

    async def body(host: TemporalHost) -> list[dict[str, Any]]:
        return [await host.schedule(name) for name in await host.schedules()]

    def after(found: list[dict[str, Any]]) -> int:
        if as_json:
            _emit(found)
            return 0
        if not found:
            _line("no flowcore schedules on Temporal (flowcore temporal schedule add --spec FILE)")
            return 0
        tables().print(schedules_table(found, _cadence, flow=False))
        return 0

    with_host(address, namespace, task_queue, body, after)


@schedule.command()
@name_argument
@json_flag
@connection_options
def show(name: str, as_json: bool, address: str, task_queue: str, namespace: str) -> None:
    """Show schedule NAME: its cadence, policy, state, next 5 slots and recent runs."""

    async def body(host: TemporalHost) -> dict[str, Any]:
        return await host.schedule(name)

    def after(info: dict[str, Any]) -> int:
        if as_json:
            _emit(info)
            return 0
        d = info["definition"]
        _line(f"schedule {name}: {state_text(info)}")
        _line(f"  cadence     {_cadence(info)}")
        policy = f"overlap {d['overlap']}"
        if "catchup_window" in d:
            policy += f", catch-up window {_ms(d['catchup_window'])}"
        if "jitter" in d:
            policy += f", jitter {_ms(d['jitter'])} (random)"
        if info["remaining"] is not None:
            policy += f", {info['remaining']} run(s) left"
        _line(f"  policy      {policy}")
        if "input" in d:
            _line(f"  input       {short_json(d['input'])}")
        if info["running"]:
            _line(f"  running     {', '.join(info['running'])}")
        nxt = info["nextSlotsMs"]
        _line("  next slots  " + (", ".join(iso(ms, "seconds") for ms in nxt) if nxt else "none"))
        _line(
            f"  actions     {info['numActions']} taken, {info['skippedOverlap']} skipped"
            f" (overlap), {info['missedCatchupWindow']} missed (catch-up window)"
        )
        for action in info["actions"]:
            _line(
                f"  {iso(action['slotMs'], 'seconds')}  started {action['runId'] or ''}"
                f" at {iso(action['atMs'], 'seconds')}"
            )
        return 0

    with_host(address, namespace, task_queue, body, after)


def _change(
    name: str,
    as_json: bool,
    connection: tuple[str, str, str],
    done: str,
    change: Callable[[TemporalHost], Awaitable[None]],
) -> None:
    address, task_queue, namespace = connection

    def after(_: None) -> int:
        if as_json:
            _emit({"name": name, done: True})
        else:
            _line(f"schedule {name} {done}")
        return 0

    with_host(address, namespace, task_queue, change, after)


note_option = click.option("--note", default="", help="Why (Temporal keeps it with the state).")


@schedule.command()
@name_argument
@note_option
@json_flag
@connection_options
def pause(
    name: str, note: str, as_json: bool, address: str, task_queue: str, namespace: str
) -> None:
    """Pause schedule NAME: Temporal starts nothing until it is resumed."""
    connection = (address, task_queue, namespace)
    _change(name, as_json, connection, "paused", lambda host: host.pause_schedule(name, note))


@schedule.command()
@name_argument
@note_option
@json_flag
@connection_options
def resume(
    name: str, note: str, as_json: bool, address: str, task_queue: str, namespace: str
) -> None:
    """Resume schedule NAME."""
    connection = (address, task_queue, namespace)
    _change(name, as_json, connection, "resumed", lambda host: host.resume_schedule(name, note))


@schedule.command()
@name_argument
@json_flag
@connection_options
def delete(name: str, as_json: bool, address: str, task_queue: str, namespace: str) -> None:
    """Delete schedule NAME; the runs it started stay."""
    connection = (address, task_queue, namespace)
    _change(name, as_json, connection, "deleted", lambda host: host.delete_schedule(name))


@schedule.command()
@name_argument
@json_flag
@connection_options
def trigger(name: str, as_json: bool, address: str, task_queue: str, namespace: str) -> None:
    """Start a run of schedule NAME now, outside its cadence, whatever runs."""
    connection = (address, task_queue, namespace)
    _change(name, as_json, connection, "triggered", lambda host: host.trigger_schedule(name))


@schedule.command()
@name_argument
@click.option("--start", required=True, callback=_instant, help="First time (ISO-8601, a zone).")
@click.option("--end", required=True, callback=_instant, help="Last time (included).")
@json_flag
@connection_options
def backfill(
    name: str,
    start: int,
    end: int,
    as_json: bool,
    address: str,
    task_queue: str,
    namespace: str,
) -> None:
    """Start the slots of schedule NAME from --start through --end under its overlap policy."""
    connection = (address, task_queue, namespace)
    _change(
        name,
        as_json,
        connection,
        "backfilled",
        lambda host: host.backfill_schedule(name, start, end),
    )
