"""``flowcore check SPEC``: every ordering of what a run may be told, checked.

The command runs ``flowcore.testing.explore`` over the flow with an input and
a world (``--world MODULE:NAME``, or one made of ``--outcomes``, ``--signal``,
``--cancel``, ``--late-ms`` and ``--updates``), shows a progress bar on a terminal, and
prints a summary table and, for each violation, its trajectory. A violation's
log (what ``flowcore replay`` reads) is written with ``--log-out``.

Exit codes: 0 no violation (the summary says whether the exploration was
complete or cut by a bound), 1 a violation, 2 bad input.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from flowcore import FlowcoreError, event_to_wire
from flowcore.testing import (
    Exploration,
    Fail,
    Hang,
    Ok,
    Signal,
    Unknown,
    Violation,
    World,
    explore,
)
from flowcore.testing import (
    Progress as Explored,
)

from ._common import CliError, decode_json, json_value, load_spec
from ._progress import err, out

__all__ = ["check"]

OUTCOMES: dict[str, Any] = {
    "ok": Ok(),
    "fail": Fail("error", "failed (explored)", retryable=True),
    "fail-final": Fail("error", "failed (explored)", retryable=False),
    "unknown": Unknown(),
    "hang": Hang(),
}
"""What ``--outcomes`` names: the responses any work may get."""

DEFAULT_UPDATES = 1
"""How many update requests the world may make in a run without ``--updates``."""


def _load_attr(text: str, option: str) -> Any:
    from flowcore_handlers import RegistryError, load_module

    module_name, sep, attr = text.rpartition(":")
    if not sep or not module_name or not attr:
        raise CliError(
            f"{option} {text!r}: write MODULE:NAME (a module or a .py file, then a name)"
        )
    try:
        module = load_module(module_name, "module")
    except RegistryError as exc:
        raise CliError(f"{option}: {exc}") from None
    if not hasattr(module, attr):
        raise CliError(f"{option} {text!r}: module {module_name!r} has no {attr!r}")
    return getattr(module, attr)


def _invariants(texts: tuple[str, ...]) -> list[Callable[..., Any]]:
    found: list[Callable[..., Any]] = []
    for text in texts:
        value = _load_attr(text, "--invariant")
        items = list(value) if isinstance(value, list | tuple) else [value]
        for item in items:
            if not callable(item):
                raise CliError(f"--invariant {text!r}: {item!r} is not callable")
            found.append(item)
    return found


def _signal(text: str) -> Signal:
    name, sep, payload = text.partition("=")
    if not name:
        raise CliError(f"--signal {text!r}: name the signal (NAME or NAME=JSON)")
    value = decode_json(payload.encode(), f"--signal {name}") if sep else None
    return Signal(name, value)


def _world(
    world: str | None,
    outcomes: str,
    signals: tuple[str, ...],
    cancel: bool,
    late_ms: int | None,
    updates: int | None = None,
) -> World:
    if world is not None:
        if signals or cancel or late_ms is not None or outcomes != "ok,fail" or updates is not None:
            raise CliError(
                "--world gives the whole world: drop --outcomes, --signal, --cancel, --late-ms, "
                "--updates"
            )
        value = _load_attr(world, "--world")
        if not isinstance(value, World):
            raise CliError(
                f"--world {world!r} is a {type(value).__name__}, not a flowcore.testing.World"
            )
        return value
    chosen = []
    for name in (n.strip() for n in outcomes.split(",")):
        if name not in OUTCOMES:
            raise CliError(f"--outcomes: unknown outcome {name!r} (one of {', '.join(OUTCOMES)})")
        chosen.append(OUTCOMES[name])
    return World(
        default=chosen,
        signals=[_signal(s) for s in signals],
        cancel_at_ms=0 if cancel else None,
        late_ms=late_ms,
        updates=DEFAULT_UPDATES if updates is None else updates,
    )


def _summary(spec: str, x: Exploration, seconds: float) -> Table:
    table = Table(title=f"flowcore check {spec}", show_header=False, expand=False)
    table.add_column("", style="bold", no_wrap=True)
    table.add_column("")
    for name, value in x.summary():
        table.add_row(name, Text(value))
    rate = x.states / seconds if seconds > 0 else 0.0
    table.add_row("time", Text(f"{seconds:.2f} s ({rate:,.0f} distinct states/s)"))
    return table


def _violation_json(v: Violation) -> dict[str, Any]:
    return {
        "invariant": v.invariant,
        "message": v.message,
        "events": [event_to_wire(e) for e in v.events],
        "trajectory": v.describe(),
    }


@click.command()
@click.argument("spec", metavar="SPEC")
@click.option("--input", "input_text", metavar="JSON", help="The run's input (JSON, @FILE or -).")
@click.option(
    "--bound",
    type=click.IntRange(min=0),
    default=30,
    show_default=True,
    help="The most events on one path.",
)
@click.option(
    "--max-states",
    type=click.IntRange(min=1),
    default=200_000,
    show_default=True,
    help="The most distinct states to explore.",
)
@click.option(
    "--settles-within",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="Liveness: every path must settle within N events (raises --bound to N).",
)
@click.option(
    "--invariant",
    "invariants",
    multiple=True,
    metavar="MODULE:NAME",
    help="A predicate over a Point (or a list of them), checked at every transition. Repeatable.",
)
@click.option(
    "--world",
    metavar="MODULE:NAME",
    help="A flowcore.testing.World saying what the world may do (instead of the options below).",
)
@click.option(
    "--outcomes",
    default="ok,fail",
    show_default=True,
    help=f"What any work may get, comma-separated: {', '.join(OUTCOMES)}.",
)
@click.option(
    "--signal",
    "signals",
    multiple=True,
    metavar="NAME[=JSON]",
    help="A signal that may arrive once, at any time. Repeatable.",
)
@click.option("--cancel", is_flag=True, help="A cancel may arrive at any time.")
@click.option(
    "--late-ms",
    type=click.IntRange(min=0),
    default=None,
    help="A result comes at most this long after its effect (default: any time).",
)
@click.option(
    "--updates",
    type=click.IntRange(min=0),
    default=None,
    metavar="N",
    help=(
        "How many update requests may arrive in a run, at any time (ids u1, u2, ...), each "
        f"any declared update with any of its examples [default: {DEFAULT_UPDATES}]."
    ),
)
@click.option("--no-reduce", is_flag=True, help="Explore every order, commuting ones too.")
@click.option("--no-dedup", is_flag=True, help="Do not identify equal states (a tree search).")
@click.option(
    "--log-out",
    type=click.Path(dir_okay=False, writable=True),
    default=None,
    metavar="FILE",
    help="Write the first violation's log here (NDJSON; `flowcore replay FILE` replays it).",
)
@click.option(
    "--progress/--no-progress", default=None, help="A progress bar (default: on a terminal)."
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output on stdout.")
def check(
    spec: str,
    input_text: str | None,
    bound: int,
    max_states: int,
    settles_within: int | None,
    invariants: tuple[str, ...],
    world: str | None,
    outcomes: str,
    signals: tuple[str, ...],
    cancel: bool,
    late_ms: int | None,
    updates: int | None,
    no_reduce: bool,
    no_dedup: bool,
    log_out: str | None,
    progress: bool | None,
    as_json: bool,
) -> int:
    """Check SPEC against every ordering of what a run may be told, up to a bound.

    Explores every state a run can reach breadth-first (equal states once,
    commuting events in one order), checking determinism, unique keys, the
    budget, settlement, typed errors, update replies and the --invariant
    predicates at every transition. Prints a summary and the shortest path to each violation.
    Exit 0 when nothing is violated, 1 when something is, 2 on bad input.
    """
    flow = load_spec(spec)
    value = json_value(input_text, "--input")
    the_world = _world(world, outcomes, signals, cancel, late_ms, updates)
    preds = _invariants(invariants)
    show = (err.is_terminal if progress is None else progress) and not as_json
    began = time.perf_counter()
    with contextlib.ExitStack() as stack:
        tick = _progress_bar(stack, max_states) if show else None
        try:
            x = explore(
                flow,
                value,
                the_world,
                invariants=preds,
                max_depth=bound,
                max_states=max_states,
                settles_within=settles_within,
                reduce=not no_reduce,
                dedup=not no_dedup,
                progress=tick,
            )
        except FlowcoreError as exc:
            raise CliError(f"{spec}: cannot start a run: {exc}") from None
    seconds = time.perf_counter() - began
    if log_out is not None and x.violations:
        try:
            Path(log_out).write_bytes(x.violations[0].ndjson())
        except OSError as exc:
            raise CliError(f"--log-out {log_out}: cannot write: {exc.strerror or exc}") from None
    if as_json:
        summary = {
            "ok": x.ok,
            "states": x.states,
            "explored": x.explored,
            "transitions": x.transitions,
            "revisits": x.revisits,
            "reduced": x.reduced,
            "rejected": x.rejected,
            "settled": dict(x.settled),
            "deadEnds": x.dead_ends,
            "cut": x.cut,
            "depth": x.depth,
            "longest": x.longest,
            "complete": x.complete,
            "stop": x.stop,
            "maxSteps": x.max_steps,
            "maxCost": x.max_cost,
            "invariants": list(x.invariants),
            "seconds": round(seconds, 3),
            "violations": [_violation_json(v) for v in x.violations],
        }
        click.echo(json.dumps(summary, indent=2, ensure_ascii=False))
        return 0 if x.ok else 1
    out.print(_summary(spec, x, seconds))
    for v in x.violations:
        out.print(Text(f"\nviolated: {v.describe()}"))
        if log_out is not None and v is x.violations[0]:
            out.print(Text(f"log written to {log_out} (flowcore replay {log_out} --spec {spec})"))
        elif log_out is None:
            out.print(Text("write its log with --log-out FILE, and replay it with flowcore replay"))
    return 0 if x.ok else 1


def _progress_bar(stack: contextlib.ExitStack, max_states: int) -> Callable[[Explored], None]:
    """A transient progress bar on stderr, towards ``max_states``."""
    bar = stack.enter_context(
        Progress(
            TextColumn("exploring"),
            BarColumn(),
            TextColumn("{task.fields[line]}"),
            TimeElapsedColumn(),
            console=err,
            transient=True,
        )
    )
    task = bar.add_task("explore", total=max_states, line="")

    def tick(p: Explored) -> None:
        line = (
            f"{p.states:,} states, {p.transitions:,} transitions, "
            f"depth {p.depth}, frontier {p.frontier:,}"
        )
        bar.update(task, completed=p.states, line=line)

    return tick
