"""Entry point of the ``flowcore`` console script.

Every command lives in this package: ``validate``, ``graph``, ``budget``, ``replay``, the
local host's own (``_local``: run, worker), the commands of the catalogue's
operations (``_derive``, on either host) and
``flowcore temporal ...`` (``_temporal``). The hosts expose Python APIs only.

Every command returns its exit code: 0 success, 1 a finding (a replay that
diverges), 2 bad input. ``run`` checks the command line (UTF-8 only) and runs
click without its standalone mode so that every error path ends the same way:
one bounded line on stderr starting with ``flowcore:``, exit 2, never a
traceback (``_errors.invoke``).

A command's module is imported only when that command runs: ``flowcore
--help`` and ``--version`` load neither the interpreter nor a host. The group's
help lists each command with the short help written in ``COMMANDS`` below;
tests/cli/test_cli.py checks it is the command's own.
"""

from __future__ import annotations

import importlib
import sys
from typing import Final

import click

from ._errors import invoke

__all__ = ["COMMANDS", "cli", "main", "run"]

COMMANDS: Final[dict[str, tuple[str, str, str]]] = {
    # name: (module, attribute, short help: the first sentence of the command's help)
    "validate": (
        "_validate",
        "validate",
        "Check flow specs; print every problem as FILE:LINE:COLUMN: MESSAGE.",
    ),
    "graph": (
        "_graph",
        "graph",
        "Print a diagram of the flow in SPEC: steps, branches, loops, catch and "
        "compensation edges.",
    ),
    "budget": (
        "_budget",
        "budget",
        "Compute the most any run of SPEC can spend, from the spec alone.",
    ),
    "replay": (
        "_replay",
        "replay",
        "Replay the run recorded in LOG (NDJSON or MessagePack) against its flow.",
    ),
    "check": (
        "_check",
        "check",
        "Check SPEC against every ordering of what a run may be told, up to a bound.",
    ),
    "run": ("_local", "run", "Start a run of SPEC and process it to the end, showing progress."),
    "resume": (
        "_derive",
        "resume",
        "Retry the failed RUN from its failed step, with new handlers if --tools is given.",
    ),
    "fork": (
        "_derive",
        "fork",
        "Fork RUN as a new run with its history up to a point; print the new run's id.",
    ),
    "upgrade": (
        "_derive",
        "upgrade",
        "Move running RUN to the flow version in --to, once its log replays against it.",
    ),
    "worker": ("_local", "worker", "Resume and process every run in the database until stopped."),
    "runs": ("_derive", "runs", "List the runs, oldest first, a page at a time."),
    "flows": (
        "_derive",
        "flows",
        "The flows of --flows, each with the --tools modules that run it, or what is missing.",
    ),
    "show": (
        "_derive",
        "show",
        "Show RUN: its state now, a timeline of what happened, and every work effect.",
    ),
    "events": (
        "_derive",
        "events",
        "The log records of RUN: a table, or NDJSON envelopes with --json.",
    ),
    "compare": (
        "_derive",
        "compare",
        "Compare the logs of runs A and B record by record; print where they first differ.",
    ),
    "export": ("_derive", "export", "Write RUN's log (what `flowcore replay` reads)."),
    "progress": (
        "_derive",
        "progress",
        "What RUN's handlers published (its progress stream), from an index; --follow it.",
    ),
    "signal": (
        "_derive",
        "signal",
        "Send signal NAME to RUN (buffered if the run does not wait for it yet).",
    ),
    "answer": (
        "_derive",
        "answer",
        "Answer RUN's question KEY with ANSWER (text, as typed) or --data (JSON).",
    ),
    "cancel": ("_derive", "cancel", "Cancel RUN: pending work is abandoned, compensations run."),
    "start": (
        "_derive",
        "start",
        "Start a run of FLOW (a spec file) and print its id; a worker runs it.",
    ),
    "signal-key": (
        "_derive",
        "signal-key",
        "Send signal NAME to every running run that waits for it with KEY; print their ids.",
    ),
    "update": (
        "_derive",
        "update",
        "Ask RUN for update NAME with --input and print its reply (JSON).",
    ),
    "update-result": (
        "_derive",
        "update-result",
        "Print the outcome of RUN's update ID: its reply (JSON), or that it runs.",
    ),
    "updates": (
        "_derive",
        "updates",
        "RUN's updates in the order requested: id, name, status, reply or error.",
    ),
    "query": (
        "_derive",
        "query",
        "Print the value (JSON) of RUN's query NAME with --args; nothing is written.",
    ),
    "update-with-start": (
        "_derive",
        "update-with-start",
        "Start a run of FLOW as --run-id unless it exists, and ask it for update NAME;"
        " print the reply.",
    ),
    "signal-with-start": (
        "_derive",
        "signal-with-start",
        "Start a run of FLOW as --run-id unless it exists, and send it signal NAME;"
        " print the run id.",
    ),
    "questions": (
        "_derive",
        "questions",
        "The open questions of RUN: one line each (key, question, options).",
    ),
    "waits": ("_derive", "waits", "What RUN waits for now: work, questions, signals, timers."),
    "delete": (
        "_derive",
        "delete",
        "Delete RUN and its child runs from the database, every row of them.",
    ),
    "prune": (
        "_derive",
        "prune",
        "Delete the runs that settled longer ago than --settled-before, with their child runs.",
    ),
    "serve": (
        "_serve",
        "serve",
        "Serve the database over HTTP: the JSON API, its event streams and the web view.",
    ),
    "schedule": (
        "_derive",
        "schedule",
        "Start runs on a cadence: schedules declared in a spec's `schedules:`.",
    ),
    "scheduled": (
        "_derive",
        "scheduled",
        "The scheduled calls of runs: list, cancel, run now, add.",
    ),
    "db": ("_db_cmd", "db", "Look after the local host's database: migrate its schema."),
    "decide": (
        "_decide",
        "decide",
        "Serve start and advance as JSON lines on stdin and stdout, for hosts in any language.",
    ),
    # `flowcore temporal ...`; temporalio is imported only when one of them runs.
    "temporal": (
        "_temporal",
        "GROUP",
        "Run flows on a Temporal cluster (needs the temporal extra).",
    ),
}


class _Lazy(click.Group):
    """A group whose commands are imported when one of them is asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        found = COMMANDS.get(cmd_name)
        if found is None:
            return None
        module, attribute, _ = found
        command = getattr(importlib.import_module(f"{__package__}.{module}"), attribute)
        assert isinstance(command, click.Command)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, short) for name, (_, _, short) in COMMANDS.items()])


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("flowcore")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "unknown"


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo(f"flowcore {_version()}")
        ctx.exit()


@click.group(cls=_Lazy, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="Show the version and exit.",
)
def cli() -> None:
    """flowcore: a durable workflow interpreter."""


def run(args: list[str] | None = None) -> int:
    """Run the command line ``args`` (default: ``sys.argv[1:]``); return the exit code."""
    return invoke(cli, args, "flowcore")


def main() -> None:
    sys.exit(run())
