"""``flowcore budget SPEC``: the most any run of a flow can spend (``flowcore.budget_bound``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from rich.table import Table
from rich.text import Text

import flowcore
from flowcore import BudgetBound, Flow, Spend, StepShare

from ._common import CliError, load_spec

__all__ = ["budget"]

_SUFFIXES = (".yaml", ".yml", ".json")


def _subflow_files(paths: tuple[str, ...]) -> list[str]:
    """The spec files named by ``--subflows``: files as given, and the specs of
    each directory (``*.yaml``, ``*.yml``, ``*.json``; not recursive), by name."""
    out: list[str] = []
    for given in paths:
        path = Path(given)
        if path.is_dir():
            out.extend(
                str(p) for p in sorted(path.iterdir()) if p.suffix in _SUFFIXES and p.is_file()
            )
        else:
            out.append(given)
    return out


def _subflows(paths: tuple[str, ...], root: Flow) -> dict[str, Flow]:
    found: dict[str, Flow] = {}
    where: dict[str, str] = {}
    for path in _subflow_files(paths):
        flow = load_spec(path)
        if flow.id in found and found[flow.id] != flow:
            raise CliError(f"{path}: flow {flow.id!r} is also given by {where[flow.id]}")
        found[flow.id], where[flow.id] = flow, path
    found.setdefault(root.id, root)  # a flow may start itself
    return found


def _cell(value: int | None) -> str:
    return "unbounded" if value is None else str(value)


def _wire(spend: Spend) -> dict[str, int | None]:
    return {
        "steps": spend.steps,
        "costMinorUnits": spend.cost_minor_units,
        "toolCalls": spend.tool_calls,
    }


def _declared(flow: Flow) -> dict[str, int | None]:
    budget = flow.budget
    steps = budget.steps if budget.steps is not None else flowcore.DEFAULT_STEP_BUDGET
    return {
        "steps": steps,
        "costMinorUnits": budget.cost_minor_units,
        "toolCalls": budget.tool_calls,
    }


_SHARED = (
    ("steps", "steps"),
    ("cost_minor_units", "costMinorUnits"),
    ("tokens", "tokens"),
    ("tool_calls", "toolCalls"),
    ("turns", "turns"),
)


def _fraction(value: Any) -> str | None:
    return None if value is None else str(value)


def _share_json(flow: Flow, share: StepShare) -> dict[str, Any]:
    handed = share.handed(flow.budget)
    return {
        "id": share.id,
        "path": share.path,
        "kind": share.kind,
        "share": _fraction(share.share),
        "evenShare": _fraction(share.even),
        "handed": {wire: handed[name] for name, wire in _SHARED},
        "why": share.why,
    }


def _print_shares(flow: Flow, shares: tuple[StepShare, ...]) -> Table:
    table = Table(
        header_style="bold",
        title="shares: what each step's work is handed of what remains (language.md §11.7)",
    )
    table.add_column("step", no_wrap=True)
    table.add_column("path", overflow="fold")
    table.add_column("share", justify="right", no_wrap=True)
    for name in ("steps", "cost", "tokens"):
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("why", overflow="fold")
    for share in shares:
        handed = share.handed(flow.budget)
        cells = [handed["steps"], handed["cost_minor_units"], handed["tokens"]]
        table.add_row(
            Text(share.id),
            Text(share.path),
            Text(_fraction(share.share) or "1/items"),
            *(Text("unlimited" if c is None else str(c)) for c in cells),
            Text(share.why),
        )
    return table


def _json(flow: Flow, b: BudgetBound) -> dict[str, Any]:
    return {
        "flow": flow.id,
        "version": flow.version,
        "bounded": b.bounded,
        "worst": _wire(b.spend),
        "incarnation": _wire(b.incarnation),
        "budget": _declared(flow),
        "below": [
            {"limit": s.limit, "declared": s.declared, "worst": s.worst, "message": s.message}
            for s in b.below(flow.budget)
        ],
        "unbounded": [
            {"limit": u.limit, "construct": u.construct, "path": u.path, "why": u.why}
            for u in b.unbounded
        ],
        "steps": [
            {
                "id": r.id,
                "path": r.path,
                "kind": r.kind,
                "level": r.level,
                **_wire(r.spend),
                "why": r.why,
            }
            for r in b.breakdown
        ],
        "shares": [_share_json(flow, share) for share in flowcore.budget_shares(flow)],
    }


def _print(flow: Flow, b: BudgetBound) -> None:
    from ._history import tables

    console = tables()
    table = Table(header_style="bold", title=f"flow {flow.id} v{flow.version}: worst case")
    table.add_column("step", no_wrap=True)
    table.add_column("kind", no_wrap=True)
    table.add_column("path", overflow="fold")
    for name in ("steps", "cost", "tool calls"):
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("why", overflow="fold")
    for row in b.breakdown:
        s = row.spend
        cells = [s.steps, s.cost_minor_units, s.tool_calls]
        table.add_row(
            Text("  " * row.level + row.id),
            Text(row.kind),
            Text(row.path),
            *(_cell(c) for c in cells),
            Text(row.why),
        )
    table.add_section()
    totals = (b.steps, b.cost_minor_units, b.tool_calls)
    table.add_row("run", "", "", *(_cell(v) for v in totals), "its top-level steps added")
    if b.incarnation != b.spend:
        inc = b.incarnation
        totals = (inc.steps, inc.cost_minor_units, inc.tool_calls)
        table.add_row(
            "incarnation",
            "",
            "",
            *(_cell(v) for v in totals),
            "one incarnation's (continue_as_new)",
        )
    declared = _declared(flow)
    table.add_row(
        "budget",
        "",
        "",
        *("unlimited" if v is None else str(v) for v in declared.values()),
        "declared (1000 steps by default)",
    )
    console.print(table)
    shares = flowcore.budget_shares(flow)
    if any(share.share != 1 or share.even != 1 or share.cap for share in shares):
        console.print(_print_shares(flow, shares))
    grouped: dict[tuple[str, str, str], list[str]] = {}
    for u in b.unbounded:
        grouped.setdefault((u.path, u.construct, u.why), []).append(u.limit)
    for (path, _construct, why), limits in grouped.items():
        console.print(Text(f"unbounded {', '.join(limits)}: {path}: {why}"))
    for short in b.below(flow.budget):
        console.print(Text(f"below: {short.message}"))
    if b.bounded and not b.below(flow.budget):
        console.print(Text("bounded: the budget covers the worst case"))


@click.command()
@click.argument("spec", metavar="SPEC")
@click.option(
    "--subflows",
    "subflow_paths",
    multiple=True,
    metavar="PATH",
    help="A spec file, or a directory of them, that run_subflow steps may start "
    "(repeatable). SPEC itself is one.",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output on stdout.")
def budget(spec: str, subflow_paths: tuple[str, ...], as_json: bool) -> int:
    """Compute the most any run of SPEC can spend, from the spec alone.

    Prints each step's worst case (steps, cost, tool calls) and why it counts
    that (issues, attempts, re-issues after an unknown outcome, max_usage), the
    run's and the declared budget, what leaves a limit without a bound, and,
    when work runs at once, the share of what remains each agent, team and
    child run is handed (and what that is of the declared budget). Exit 0 when
    every limit is bounded and the budget covers it, 1 when a limit has no
    bound or a declared limit is below the worst case, 2 on bad input.
    """
    flow = load_spec(spec)
    subflows = _subflows(subflow_paths, flow)
    b = flowcore.budget_bound(flow, subflows=subflows)
    if as_json:
        click.echo(json.dumps(_json(flow, b), indent=2, ensure_ascii=False))
    else:
        _print(flow, b)
    return 0 if b.bounded and not b.below(flow.budget) else 1
