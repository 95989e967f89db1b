"""``flowcore db migrate``: create or bring up to date the schema of a local-host
database (a SQLite file or a ``postgresql://`` URL), as opening it does, without
starting anything: a deployment migrates once, before its workers start."""

from __future__ import annotations

from pathlib import Path

import click

from ._common import CliError
from ._local import db_option

__all__ = ["db"]


@click.group("db")
def db() -> None:
    """Look after the local host's database: migrate its schema."""


@db.command("migrate")
@db_option
def migrate(db: Path | str) -> None:
    """Create or bring up to date the schema of the database (--db: a SQLite file or a
    postgresql:// URL), as opening it does; print the schema it has now."""
    from flowcore_local import NotAFlowcoreDatabase, db_label, schema_version

    try:
        before, after = schema_version(db)
    except NotAFlowcoreDatabase as exc:
        raise CliError(str(exc)) from None
    done = "up to date" if before == after else f"migrated from {before}"
    click.echo(f"{db_label(db)}: flowcore schema {after} ({done})")
