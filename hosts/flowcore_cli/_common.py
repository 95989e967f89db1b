"""What the commands share: one-line errors, reading files, loading specs."""

from __future__ import annotations

from pathlib import Path
from typing import IO, Any

import click

import flowcore
from flowcore import Flow, Problem, SpecError

__all__ = ["CliError", "load_spec", "problem_line", "read_bytes"]


class CliError(click.ClickException):
    """Bad input: one clear line on stderr (``flowcore: ...``), exit 2."""

    exit_code = 2

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"flowcore: {self.message}", err=True)


def read_bytes(path: str, what: str = "file") -> bytes:
    """The file's bytes, or a ``CliError`` naming the file and why it cannot be read."""
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise CliError(f"{path}: no such {what}") from None
    except IsADirectoryError:
        raise CliError(f"{path}: is a directory, not a {what}") from None
    except OSError as exc:
        raise CliError(f"{path}: cannot read: {exc.strerror or exc}") from None


def problem_line(problem: Problem) -> str:
    """``file:line:column: message (at path)``: the form editors and CI jump to."""
    where = problem.location
    path = f" (at {problem.path})" if problem.path and problem.line is not None else ""
    return f"{where}: {problem.message}{path}"


def load_spec(path: str) -> Flow:
    """Parse the spec at ``path``; a bad spec prints every problem and exits 2."""
    data = read_bytes(path, "spec file")
    try:
        return flowcore.parse_flow(data, source_name=path)
    except SpecError as exc:
        # One line per problem, each complete on its own.
        for problem in exc.problems[:-1]:
            click.echo(f"flowcore: {problem_line(problem)}", err=True)
        raise CliError(problem_line(exc.problems[-1])) from None
