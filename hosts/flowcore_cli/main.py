"""Entry point of the ``flowcore`` console script.

Every command returns its exit code: 0 success, 1 a finding (a replay that
diverges), 2 bad input. ``main`` runs click without its standalone mode so
that every error path ends the same way: one line on stderr starting with
``flowcore:``, exit 2, never a traceback.
"""

from __future__ import annotations

import sys
from importlib.metadata import PackageNotFoundError, version

import click

from ._graph import graph
from ._replay import replay
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


def _add_local_host_commands() -> None:
    # The local host's commands (run, worker, runs, show, events, export,
    # signal, answer, cancel) live with the host.
    from flowcore_local._cli import COMMANDS

    for command in COMMANDS:
        cli.add_command(command)


_add_local_host_commands()


def _add_temporal_host_commands() -> None:
    # `flowcore temporal ...`; temporalio is imported only when one of them runs.
    from flowcore_temporal._cli import GROUP

    cli.add_command(GROUP)


_add_temporal_host_commands()


def run(args: list[str] | None = None) -> int:
    """Run the command line ``args``; return the exit code."""
    try:
        result = cli.main(args, prog_name="flowcore", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.UsageError as exc:
        hint = ""
        if exc.ctx is not None:
            hint = f" (see '{exc.ctx.command_path} --help')"
        click.echo(f"flowcore: {exc.format_message()}{hint}", err=True)
        return 2
    except click.ClickException as exc:
        exc.show()
        return 2 if exc.exit_code == 1 else exc.exit_code
    except click.Abort:
        click.echo("flowcore: aborted", err=True)
        return 130
    except KeyboardInterrupt:
        click.echo("flowcore: interrupted", err=True)
        return 130
    except BrokenPipeError:
        return 0  # e.g. `flowcore graph x | head`
    except Exception as exc:  # the last line of defence: never a traceback
        click.echo(f"flowcore: internal error: {type(exc).__name__}: {exc}", err=True)
        return 2
    return result if isinstance(result, int) else 0


def main() -> None:
    sys.exit(run())
