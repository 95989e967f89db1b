"""Entry point of the ``flowcore`` console script."""

from __future__ import annotations

import click


@click.group()
def cli() -> None:
    """flowcore: a durable workflow interpreter."""


def main() -> None:
    cli()
