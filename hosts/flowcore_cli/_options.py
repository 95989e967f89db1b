"""The arguments and options that the commands of both hosts share.

``flowcore signal|answer|cancel|show|export`` and their ``flowcore temporal``
twins take the same arguments with the same help; each decorator here lists its
parameters in the order ``--help`` shows them. Values are checked by
``_common`` (``checked_name``, ``json_value``, ``answer_value``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

import flowcore
from flowcore_handlers import LimitError, ToolLimit, parse_tool_limits

from ._common import CliError, budget_value, checked_name, json_value

__all__ = [
    "fork_options",
    "upgrade_options",
    "FROM_FILE",
    "answer_arguments",
    "input_option",
    "json_option",
    "meta_option",
    "on_conflict_option",
    "output_option",
    "reason_option",
    "run_id_argument",
    "signal_arguments",
    "signal_target",
    "spec_argument",
    "start_values",
    "where_option",
    "tool_limit_option",
    "tool_limits_value",
]

F = TypeVar("F", bound=Callable[..., Any])

FROM_FILE = " @FILE reads it from a file, - from standard input."


def _each(*decorators: Callable[[Any], Any]) -> Callable[[F], F]:
    """One decorator applying ``decorators`` as if written one above the other."""

    def decorate(fn: F) -> F:
        for decorator in reversed(decorators):
            fn = decorator(fn)
        return fn

    return decorate


spec_argument = click.argument("spec", type=click.Path(exists=True, dir_okay=False, path_type=Path))
run_id_argument = click.argument("run_id", callback=checked_name)
json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print JSON on stdout instead (times in epoch ms)."
)
output_option = click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path))
reason_option = click.option("--reason", default="", help="Why (recorded in the log).")

input_option = click.option(
    "--input",
    "input_",
    help="The run's input as JSON;"
    + FROM_FILE
    + " (With -, questions are not answered from standard input.)",
)

# `signal [RUN_ID] NAME [--data JSON] [--key KEY]`: without RUN_ID, --key is
# required and the signal goes to the runs that wait for NAME with KEY.
signal_arguments = _each(
    click.argument("run_id", callback=checked_name),
    click.argument("name", callback=checked_name, required=False),
    click.option("--data", help="The signal's payload as JSON;" + FROM_FILE),
    click.option(
        "--key",
        callback=checked_name,
        help="The signal's key: only a wait with this key takes it. Without RUN_ID, the "
        "signal goes to every run that waits for NAME with KEY.",
    ),
)


def signal_target(run_id: str, name: str | None, key: str | None) -> tuple[str | None, str]:
    """``(run id or None, name)`` from ``signal``'s arguments: one argument is NAME,
    which needs ``--key`` (the runs that wait for it are found by it)."""
    if key == "":
        raise CliError("--key: a signal key must not be empty")
    if name is not None:
        return run_id, name
    if key is None:
        raise CliError("missing NAME: give RUN_ID NAME, or NAME --key KEY for the runs waiting")
    return None, run_id


# `answer RUN_ID KEY [ANSWER] [--data JSON]`: exactly one of the two (`answer_value`).
answer_arguments = _each(
    run_id_argument,
    click.argument("key", callback=checked_name),
    click.argument("answer", required=False),
    click.option(
        "--data",
        help="The answer as JSON instead of ANSWER (any value, for a question without options);"
        + FROM_FILE,
    ),
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


def fork_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The options of ``fork`` and ``temporal fork``: the point, the new run's id
    and tools, and whether the source is cancelled (a reset)."""
    for option in reversed(
        (
            click.option(
                "--at", "at", type=int, help="The log index to fork at: records before it are kept."
            ),
            click.option(
                "--from-step", help="Fork just before step ID: it, and all after it, run again."
            ),
            click.option(
                "--run-id", "new_run_id", help="The new run's id (default: RUN-fork-INDEX)."
            ),
            click.option("--tools", help="The new run's tools module (default: RUN's own)."),
            click.option(
                "--cancel-source", is_flag=True, help="Cancel RUN too if it is running (a reset)."
            ),
        )
    ):
        command = option(command)
    return command


def upgrade_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The options of ``upgrade`` and ``temporal upgrade``: the new version's spec,
    a dry run, JSON."""
    for option in reversed(
        (
            click.option(
                "--to",
                "to",
                required=True,
                type=click.Path(dir_okay=False, path_type=Path),
                help="The new version's spec file (the same flow id).",
            ),
            click.option("--dry-run", is_flag=True, help="Check only: change nothing."),
            click.option("--json", "as_json", is_flag=True, help="Print what happened as JSON."),
        )
    ):
        command = option(command)
    return command
