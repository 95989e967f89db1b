"""What the commands share: names, reading files, loading specs, and JSON
values given on the command line (and, re-exported from ``_errors``, the
one-line errors and the command line's own check).

Every command of every host (``flowcore ...`` and ``flowcore temporal ...``)
reports bad input the same way: one line on stderr starting with
``flowcore:``, exit 2, never a traceback, nothing recorded (``_errors``).

The limits and rules here are documented in ``specs/cli.md`` ("Values on the
command line"); what counts as data is the core's rule (``flowcore/_data.py``).
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import click
import msgspec

import flowcore
from flowcore import Flow, Problem, SpecError
from flowcore_local import is_pg_url

from ._errors import (
    MAX_LINE_CHARS,
    CliError,
    check_argv,
    error_line,
    internal_error,
    invoke,
    say,
    shown_argument,
)

__all__ = [
    "DATABASE",
    "duration",
    "iso",
    "duration_value",
    "MAX_JSON_TEXT_BYTES",
    "MAX_LINE_CHARS",
    "MAX_VALUE_BYTES",
    "CliError",
    "answer_value",
    "budget_value",
    "check_argv",
    "checked_name",
    "decode_json",
    "error_line",
    "internal_error",
    "invoke",
    "json_value",
    "load_spec",
    "meta_text",
    "meta_values",
    "problem_line",
    "read_bytes",
    "say",
    "text_value",
]

# The most JSON text one option reads (inline, from a file or from standard
# input) before parsing: room for a value at the limit below written with
# indentation and escapes, while a huge file is refused after reading 4 MiB.
MAX_JSON_TEXT_BYTES: Final = 4 * flowcore.MAX_EVENT_BYTES
# The largest value (a run's input, a signal's payload, an answer) as compact
# JSON. The event that carries it must fit in flowcore.MAX_EVENT_BYTES with
# its other fields: names of at most MAX_NAME_CHARS characters (at most 6
# bytes each as escaped JSON, 24 KiB) and a timestamp. 64 KiB of headroom
# means a value the command accepts is never refused later for its size, which
# matters on Temporal, where a signal is sent and not answered.
MAX_VALUE_BYTES: Final = flowcore.MAX_EVENT_BYTES - 64 * 1024


def _json_size(value: Any) -> int:
    return len(msgspec.json.encode(value))


def checked_name(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A click callback for run ids, signal names and question keys.

    They name things and end up in every key and log record: at most
    ``flowcore.MAX_NAME_CHARS`` characters of valid text, the core's rule for
    names, checked here so that the error names the argument and a Temporal
    signal is never sent only to be refused by the workflow.
    """
    if value is None:
        return None
    what = param.opts[0] if isinstance(param, click.Option) else param.human_readable_name
    try:
        flowcore.check_data(value, "$", what)
    except flowcore.DataError as exc:
        raise CliError(f"{what}: {exc.problem}") from None
    if len(value) > flowcore.MAX_NAME_CHARS:
        raise CliError(
            f"{what}: {shown_argument(value)} is longer than {flowcore.MAX_NAME_CHARS:,} characters"
        )
    return value


# --- times for people


def short_json(value: Any, width: int = 60) -> str:
    """``value`` as compact JSON, cut to about ``width`` characters."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    return text if len(text) <= width else text[: width - 1] + "…"


def iso(ms: int | None, timespec: str = "milliseconds") -> str:
    """Epoch milliseconds as ISO-8601 in UTC, to the millisecond (``2026-12-02T04:15:11.123Z``)
    or to what ``timespec`` says (``"seconds"``)."""
    if ms is None:
        return ""
    try:
        moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return f"{ms} ms"  # beyond what a calendar shows: the number itself
    return moment.isoformat(timespec=timespec).replace("+00:00", "Z")


def duration(ms: int) -> str:
    """A span of time as people read it: ``850 ms``, ``12.3 s``, ``4 min 05 s``, ``2 h 07 min``."""
    if ms < 1000:
        return f"{ms} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    seconds = ms // 1000
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    minutes = seconds // 60
    if minutes < 48 * 60:
        return f"{minutes // 60} h {minutes % 60:02d} min"
    return f"{minutes // (24 * 60)} d {minutes // 60 % 24:02d} h"


# --- files and specs ---------------------------------------------------------------------


def read_bytes(path: str, what: str = "file", limit: int | None = None) -> bytes:
    """The file's bytes, or a ``CliError`` naming the file and why it cannot be read.

    With ``limit``, at most ``limit`` bytes are read (the caller sees whether
    the file was longer by asking for one byte more than it accepts).
    """
    try:
        with Path(path).open("rb") as file:
            return file.read() if limit is None else file.read(limit)
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
            say(problem_line(problem))
        raise CliError(problem_line(exc.problems[-1])) from None


# --- JSON values on the command line -----------------------------------------------------


def json_value(text: str | None, option: str, limit: int = MAX_VALUE_BYTES) -> Any:
    """The JSON value given to ``option``: inline, ``@FILE`` or ``-`` (standard input).

    The one parser of every JSON-taking option of every host. ``None`` (the
    option was not given) is ``None``. Anything that is not flowcore data is a
    ``CliError`` naming the option and the bad part: malformed JSON, NaN or an
    infinity (1e999), a lone surrogate, nesting deeper than
    ``flowcore.MAX_DEPTH``, an integer beyond 64 bits, a key given twice, more
    than ``MAX_JSON_TEXT_BYTES`` of text or a value over ``limit`` bytes as
    compact JSON. Nothing is rewritten: a value is accepted as written or refused.
    """
    if text is None:
        return None
    if text == "-":
        # Not valid JSON, so it cannot mean a value: it means standard input.
        source = f"{option} - (standard input)"
        stream = getattr(sys.stdin, "buffer", None)
        if stream is None:
            raise CliError(f"{source}: there is no standard input to read")
        try:
            data: bytes = stream.read(MAX_JSON_TEXT_BYTES + 1)
        except OSError as exc:
            raise CliError(f"{source}: cannot read: {exc.strerror or exc}") from None
    elif text.startswith("@"):
        # JSON never begins with @, so @FILE is unambiguous.
        path = text[1:]
        if not path:
            raise CliError(f"{option} @: name the file after the @ (e.g. {option} @value.json)")
        source = f"{option} @{path}"
        try:
            data = read_bytes(path, "file", MAX_JSON_TEXT_BYTES + 1)
        except CliError as exc:
            raise CliError(f"{option}: {exc.message}") from None
    else:
        source = option
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError:  # only from a caller in Python: argv was checked
            raise CliError(f"{option} is not valid UTF-8") from None
    return decode_json(data, source, limit)


def decode_json(data: bytes, source: str, limit: int = MAX_VALUE_BYTES) -> Any:
    """JSON text as flowcore data (``flowcore.decode_json_text``), or a ``CliError``."""
    if len(data) > MAX_JSON_TEXT_BYTES:
        raise CliError(
            f"{source}: more than {MAX_JSON_TEXT_BYTES:,} bytes of JSON text (the limit;"
            f" the value may be at most {limit:,} bytes as compact JSON)"
        )
    try:
        return flowcore.decode_json_text(data, source, limit)
    except flowcore.JsonTextError as exc:
        raise CliError(str(exc)) from None


def text_value(text: str, what: str, limit: int = MAX_VALUE_BYTES) -> str:
    """A text argument that becomes a value (an answer): valid text within ``limit``."""
    try:
        flowcore.check_data(text, "$", what)
    except flowcore.DataError as exc:
        raise CliError(str(exc)) from None
    size = _json_size(text)
    if size > limit:
        raise CliError(
            f"{what}: {shown_argument(text)} is {size:,} bytes as JSON, over the limit of {limit:,}"
        )
    return text


def duration_value(text: str, option: str, allow_zero: bool = False) -> int:
    """Milliseconds from a duration as people write it (``30d``, ``2h30m``,
    ``PT2H``, or a whole number of milliseconds), or the error naming ``option``."""
    from flowcore import DurationError, parse_duration

    stripped = text.strip()
    try:
        return parse_duration(
            int(stripped) if stripped.isdigit() else stripped, allow_zero=allow_zero
        )
    except DurationError as exc:
        raise CliError(f"{option}: {exc}") from None


def answer_value(text: str | None, data: str | None) -> Any:
    """The answer of ``answer RUN KEY [ANSWER] [--data JSON]``: exactly one of the two.

    ANSWER is text, as typed (``yes`` needs no quotes); ``--data`` takes any
    JSON value (a question without options accepts one), also from a file or
    standard input.
    """
    if (text is None) == (data is None):
        raise click.UsageError(
            "give the answer either as ANSWER (text) or as --data JSON, not both"
            if text is not None
            else "give the answer as ANSWER (text) or as --data JSON",
            click.get_current_context(silent=True),
        )
    if text is not None:
        return text_value(text, "ANSWER")
    return json_value(data, "--data")


BUDGET_KEYS: Final = ("steps", "costMinorUnits", "wallClockMs", "tokens", "toolCalls", "turns")


def budget_value(text: str | None, option: str = "--budget") -> dict[str, int] | None:
    """The budget caps given to ``option`` as JSON (wire names), checked: ``None`` if not given.

    An object of the keys ``BUDGET_KEYS`` (``steps``, ``costMinorUnits``,
    ``wallClockMs``, ``tokens``, ``toolCalls``, ``turns``), each a non-negative
    integer; anything else is a ``CliError`` naming it.
    """
    caps = json_value(text, option)
    if caps is None:
        return None
    example = 'e.g. {"steps": 10, "costMinorUnits": 500, "wallClockMs": 60000}'
    if not isinstance(caps, dict):
        raise CliError(f"{option} must be a JSON object of limits, {example}")
    for key, value in caps.items():
        if key not in BUDGET_KEYS:
            raise CliError(
                f"{option}: unknown limit {shown_argument(key)} (one of {', '.join(BUDGET_KEYS)})"
            )
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise CliError(
                f"{option}: {key} must be an integer >= 0, not {shown_argument(str(value))}"
            )
    return caps


# --- run metadata on the command line --------------------------------------------------


def meta_values(spec: Path | Flow, texts: tuple[str, ...] | list[str]) -> dict[str, Any]:
    """``--meta field=value`` options, each read as the spec's declaration of the field
    says; a field it does not declare or a value of the wrong type exits 2."""
    flow = spec if isinstance(spec, Flow) else load_spec(str(spec))
    values, problems = flowcore.metadata_from_text(flow.metadata, texts)
    if problems:
        for text in problems[:-1]:
            say(f"--meta: {text}")
        raise CliError(f"--meta: {problems[-1]}")
    return values


def meta_text(values: dict[str, Any]) -> str:
    """Metadata as one line: ``customer=acme amount=140 urgent=true``."""
    return " ".join(f"{k}={msgspec.json.encode(v).decode()}" for k, v in values.items())


class _Database(click.ParamType[Path | str]):
    """``--db``: a ``postgresql://`` (or ``postgres://``) URL as it is, else the path of
    the SQLite file (which must not be a directory)."""

    name = "PATH|URL"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> Path | str:
        if isinstance(value, Path):
            return value
        if is_pg_url(value):
            return str(value)
        path = Path(str(value))
        if path.is_dir():
            self.fail(f"{str(value)!r} is a directory, not a database file", param, ctx)
        return path


DATABASE: Final = _Database()
