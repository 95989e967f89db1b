"""Entry point of the ``flowcore`` console script.

Every command lives in this package: ``validate``, ``graph``, ``replay``, the
local host's (``_local``) and ``flowcore temporal ...`` (``_temporal``). The
hosts expose Python APIs only.

Every command returns its exit code: 0 success, 1 a finding (a replay that
diverges), 2 bad input. ``run`` checks the command line (UTF-8 only) and runs
click without its standalone mode so that every error path ends the same way:
one bounded line on stderr starting with ``flowcore:``, exit 2, never a
traceback (``_common.invoke``).
"""

from __future__ import annotations

import sys
from importlib.metadata import PackageNotFoundError, version

import click

from ._common import invoke
from ._graph import graph
from ._local import COMMANDS as LOCAL_COMMANDS
from ._replay import replay
from ._temporal import GROUP as TEMPORAL_GROUP
from ._validate import validate


def _version() -> str:
    try:
        return version("flowcore")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "unknown"


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(_version(), "--version", prog_name="flowcore", message="%(prog)s %(version)s")
def cli() -> None:
    """flowcore: a durable workflow interpreter."""


cli.add_command(validate)
cli.add_command(graph)
cli.add_command(replay)
# The local host's commands: run, worker, runs, show, events, export, signal,
# answer, cancel.
for _command in LOCAL_COMMANDS:
    cli.add_command(_command)
# `flowcore temporal ...`; temporalio is imported only when one of them runs.
cli.add_command(TEMPORAL_GROUP)


def run(args: list[str] | None = None) -> int:
    """Run the command line ``args`` (default: ``sys.argv[1:]``); return the exit code."""
    return invoke(cli, args, "flowcore")


def main() -> None:
    sys.exit(run())
