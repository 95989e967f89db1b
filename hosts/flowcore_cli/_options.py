"""The options that the hosts' own commands share (``flowcore run`` and
``flowcore temporal run``, ``schedule``); the catalogue's commands take theirs
from the operations' inputs (``_derive``). Values are checked by ``_common``
(``checked_name``, ``json_value``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

import flowcore
from flowcore_handlers import LimitError, ToolLimit, parse_tool_limits

from ._common import CliError, budget_value, json_value

__all__ = [
    "FROM_FILE",
    "input_option",
    "json_option",
    "meta_option",
    "on_conflict_option",
    "spec_argument",
    "start_values",
    "where_option",
    "tool_limit_option",
    "tool_limits_value",
]

FROM_FILE = " @FILE reads it from a file, - from standard input."


spec_argument = click.argument("spec", type=click.Path(exists=True, dir_okay=False, path_type=Path))
json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print JSON on stdout instead (times in epoch ms)."
)

input_option = click.option(
    "--input",
    "input_",
    help="The run's input as JSON;"
    + FROM_FILE
    + " (With -, questions are not answered from standard input.)",
)

meta_option = click.option(
    "--meta",
    multiple=True,
    metavar="FIELD=VALUE",
    help="A metadata field the flow declares, read as its declared type (repeatable).",
)


def _filters(
    ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
) -> tuple[flowcore.MetadataFilter, ...]:
    try:
        return tuple(flowcore.parse_metadata_filter(v) for v in values)
    except flowcore.MetadataFilterError as exc:
        raise click.BadParameter(str(exc)) from None


where_option = click.option(
    "--where",
    multiple=True,
    callback=_filters,
    metavar="FIELD<OP>VALUE",
    help="Only runs whose metadata matches, e.g. customer=acme or 'amount>100'"
    " (= != < <= > >=; repeatable: all must hold).",
)


TOOL_LIMITS_ENV = "FLOWCORE_TOOL_LIMITS"

# `--tool-limit TOOL=concurrency:N,rate:K/DURATION` (repeatable; or the env var,
# its values separated by spaces): limits of a tool across every run of the
# database (specs/local.md §16).
tool_limit_option = click.option(
    "--tool-limit",
    "tool_limits",
    multiple=True,
    metavar="TOOL=LIMITS",
    envvar=TOOL_LIMITS_ENV,
    help="Limit a tool across every run: concurrency:N (calls at once), rate:K/DURATION"
    " (calls started per period), e.g. charge=concurrency:2,rate:10/1s (repeatable; or"
    f" ${TOOL_LIMITS_ENV}, space-separated). Give every process of the database the same.",
)


# `--on-conflict refuse|use-existing`: what `run --run-id ID` does when ID is
# taken by a run started with other options (the hosts' ``on_conflict``).
on_conflict_option = click.option(
    "--on-conflict",
    type=click.Choice(["refuse", "use-existing"]),
    default="refuse",
    show_default=True,
    help="When --run-id names a run started with another input or spec: refuse (exit 2),"
    " or use that run (its id and status; nothing is written). The same options again"
    " always give that run.",
)


def start_values(
    input_: str | None, budget: str | None, priority: int | None, tool_limits: tuple[str, ...]
) -> tuple[Any, dict[str, int] | None, dict[str, ToolLimit]]:
    """What ``run`` on either host starts with: the input, the budget's caps (wire
    form) and the tools' limits, each checked (one line and exit 2 if bad)."""
    if input_ == "-" and budget == "-":
        raise CliError("--input and --budget cannot both read standard input (-)")
    data = json_value(input_, "--input")
    caps = budget_value(budget)
    limits = tool_limits_value(tool_limits)
    if priority is not None and not 1 <= priority <= 5:
        raise CliError(f"--priority must be from 1 (first) to 5 (last), not {priority}")
    return data, caps, limits


def tool_limits_value(values: tuple[str, ...]) -> dict[str, ToolLimit]:
    """The ``--tool-limit`` values as ``ToolLimit``s, or the one-line error (exit 2)."""
    try:
        return parse_tool_limits(values)
    except LimitError as exc:
        raise CliError(str(exc)) from None
