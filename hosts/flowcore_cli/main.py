"""Entry point of the ``flowcore`` console script."""

from __future__ import annotations

import click


@click.group()
def cli() -> None:
    """flowcore: a durable workflow interpreter."""


def _add_local_host_commands() -> None:
    # The local host's commands (run, worker, runs, show, events, export,
    # signal, answer, cancel) live with the host.
    from flowcore_local._cli import COMMANDS

    for command in COMMANDS:
        cli.add_command(command)


_add_local_host_commands()


def main() -> None:
    cli()
