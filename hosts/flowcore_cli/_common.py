"""What the commands share: one-line errors, the command line's own check,
reading files, loading specs, and JSON values given on the command line.

Every command of every host (``flowcore ...`` and ``flowcore temporal ...``)
reports bad input the same way: one line on stderr starting with
``flowcore:``, exit 2, never a traceback, nothing recorded. That line is
bounded and always printable: it quotes at most a short prefix of what the
user gave, with control characters and undecodable bytes escaped, so that an
error about a bad value can never itself fail or flood the terminal.

The limits and rules here are documented in ``specs/cli.md`` ("Values on the
command line"); what counts as data is the core's rule (``flowcore/_data.py``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any, Final

import click
import msgspec

import flowcore
from flowcore import Flow, Problem, SpecError

__all__ = [
    "MAX_JSON_TEXT_BYTES",
    "MAX_LINE_CHARS",
    "MAX_VALUE_BYTES",
    "CliError",
    "answer_value",
    "check_argv",
    "checked_name",
    "error_line",
    "internal_error",
    "invoke",
    "json_value",
    "load_spec",
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
# No error line is longer than this; longer messages lose their middle.
MAX_LINE_CHARS: Final = 400

# Control characters (C0, DEL and C1: a terminal acts on some of them) are
# escaped as Python would, so that an error is one inert line.
_CONTROLS: Final = {c: repr(chr(c))[1:-1] for c in (*range(0x20), *range(0x7F, 0xA0))}


class CliError(click.ClickException):
    """Bad input: one clear line on stderr (``flowcore: ...``), exit 2."""

    exit_code = 2

    def show(self, file: IO[Any] | None = None) -> None:
        say(self.message)


def _printable(text: str) -> str:
    """``text`` with control characters and lone surrogates escaped (printable anywhere)."""
    text = text.translate(_CONTROLS)
    # A lone surrogate (an undecodable byte of an argument or a file name)
    # cannot be encoded as UTF-8: printing it would raise.
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _cut(text: str, limit: int) -> str:
    """At most about ``limit`` characters of ``text``: its start and its end, which
    hold where and why, around a note of how much was cut."""
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    tail = limit - head - 40
    return f"{text[:head]} …[{len(text) - head - tail:,} characters cut]… {text[-tail:]}"


def error_line(message: str) -> str:
    """The line ``message`` is reported as: ``flowcore: ...``, printable and bounded."""
    return _cut(_printable(f"flowcore: {message}"), MAX_LINE_CHARS)


def say(message: str) -> None:
    """Print ``message`` as one error line on stderr."""
    click.echo(error_line(message), err=True)


# --- the command line itself -------------------------------------------------------------


def _is_text(arg: str) -> bool:
    """Whether ``arg`` is valid text (no lone surrogate from an undecodable byte)."""
    try:
        arg.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _json_size(value: Any) -> int:
    return len(msgspec.json.encode(value))


def _shown_argument(arg: str, limit: int = 60) -> str:
    """An argument quoted for an error: the bytes as given, undecodable ones as ``\\xff``."""
    try:
        # Python hands undecodable bytes of argv over as surrogates
        # (surrogateescape); encoding them back gives the bytes the user typed.
        text = arg.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a lone surrogate that did not come from a byte
        text = arg.encode("utf-8", "backslashreplace").decode("utf-8")
    if len(text) > limit:
        return f"'{text[:limit]}…' ({len(arg):,} characters)"
    return f"'{text}'"


def check_argv(args: Sequence[str]) -> None:
    """Refuse a command line that is not UTF-8 text, before anything reads it.

    Run ids, names, keys, answers and paths end up in logs, databases and
    Temporal, which hold text: an argument with undecodable bytes would fail
    somewhere deep (or be rewritten), so it is refused at the door, by position.
    """
    for number, arg in enumerate(args, 1):
        if _is_text(arg):
            continue
        before = args[number - 2] if number > 1 else ""
        after = f" (after {before})" if before.startswith("-") and _is_text(before) else ""
        raise CliError(
            f"argument {number} {_shown_argument(arg)}{after} is not valid UTF-8;"
            " every argument must be UTF-8 text"
        )


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
            f"{what}: {_shown_argument(value)} is longer than"
            f" {flowcore.MAX_NAME_CHARS:,} characters"
        )
    return value


def internal_error(exc: BaseException) -> str:
    """The message for an unexpected exception: its type and a bounded prefix of its text."""
    try:
        text = str(exc)
    except Exception:  # a foreign exception's __str__ may fail in any way
        text = "(its message cannot be shown)"
    return f"internal error: {type(exc).__name__}: {_cut(text, 200)}"


# Click 8.2+ raises this for a bare group (`flowcore`): its message is the
# help text, which is shown as it is, not as an error line. (8.1 exits 0.)
_NO_ARGS_IS_HELP: Any = getattr(click.exceptions, "NoArgsIsHelpError", ())


def invoke(command: click.Command, args: Sequence[str] | None, prog_name: str) -> int:
    """Run ``command`` on ``args`` (default: ``sys.argv[1:]``); return the exit code.

    Click runs without its standalone mode so that every error path ends the
    same way: one line on stderr starting with ``flowcore:``, exit 2.
    """
    argv = list(sys.argv[1:] if args is None else args)
    try:
        check_argv(argv)
        result = command.main(argv, prog_name=prog_name, standalone_mode=False)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except _NO_ARGS_IS_HELP as exc:
        exc.show()
        return 2
    except click.UsageError as exc:
        hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
        say(f"{exc.format_message()}{hint}")
        return 2
    except click.ClickException as exc:
        say(exc.format_message())
        return 2 if exc.exit_code == 1 else exc.exit_code
    except click.Abort:
        say("aborted")
        return 130
    except KeyboardInterrupt:
        say("interrupted")
        return 130
    except BrokenPipeError:
        return 0  # e.g. `flowcore graph x | head`
    except Exception as exc:  # the last line of defence: never a traceback
        say(internal_error(exc))
        return 2
    return result if isinstance(result, int) else 0


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
    return _decode(data, source, limit)


def _decode(data: bytes, source: str, limit: int) -> Any:
    if len(data) > MAX_JSON_TEXT_BYTES:
        raise CliError(
            f"{source}: more than {MAX_JSON_TEXT_BYTES:,} bytes of JSON text (the limit;"
            f" the value may be at most {limit:,} bytes as compact JSON)"
        )
    if not data.strip():
        raise CliError(f"{source} is empty: expected a JSON value")
    try:
        # msgspec, strictly: no NaN or infinities, no lone surrogates, valid
        # UTF-8. Its recursion is bounded by a RecursionError, caught below.
        value = msgspec.json.decode(data)
    except RecursionError:
        raise CliError(
            f"{source} is nested too deeply (flowcore data is at most"
            f" {flowcore.MAX_DEPTH} levels deep)"
        ) from None
    except msgspec.DecodeError as exc:
        _explain(data, source)
        raise CliError(f"{source} is not valid JSON: {exc}") from None
    try:
        flowcore.check_data(value, "$", source)
    except flowcore.DataError as exc:
        raise CliError(str(exc)) from None
    size = _json_size(value)
    if size > limit:
        raise CliError(
            f"{source}: the value is {size:,} bytes as JSON, over the limit of {limit:,}"
        )
    _refuse_repeated_keys(data, source)
    return value


def _explain(data: bytes, source: str) -> None:
    """Say precisely why msgspec refused text that Python's parser reads.

    msgspec's messages are terse, and one is wrong: a lone surrogate escape
    ``"\\ud800"`` is "Input data was truncated". Python's parser accepts NaN,
    1e999 (as inf) and lone surrogates; when it reads the text, the core's
    ``check_data`` names the bad part and its path. msgspec still decides: a
    text it refused is refused, with its own message if this finds nothing.
    """
    try:
        value = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError):
        return  # malformed for both parsers: msgspec's message (with its offset) stands
    try:
        flowcore.check_data(value, "$", source)
    except flowcore.DataError as exc:
        raise CliError(str(exc)) from None


class _RepeatedKey(Exception):
    def __init__(self, key: str) -> None:
        self.key = key


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _RepeatedKey(key)
            seen.add(key)
    return result


def _refuse_repeated_keys(data: bytes, source: str) -> None:
    """Refuse an object that gives a key twice.

    msgspec (like most parsers) keeps the last value and drops the others
    without a word: that is a silent rewrite, and spec files refuse it too.
    Python's parser reports the pairs as written; the text is known to be
    valid and shallow by now.
    """
    if b"{" not in data:
        return
    try:
        json.loads(data.decode("utf-8"), object_pairs_hook=_unique_pairs)
    except _RepeatedKey as exc:
        raise CliError(
            f"{source}: key {_shown_argument(exc.key)} appears twice in one object;"
            " give each key once (only one of the values could be kept)"
        ) from None


def text_value(text: str, what: str, limit: int = MAX_VALUE_BYTES) -> str:
    """A text argument that becomes a value (an answer): valid text within ``limit``."""
    try:
        flowcore.check_data(text, "$", what)
    except flowcore.DataError as exc:
        raise CliError(str(exc)) from None
    size = _json_size(text)
    if size > limit:
        raise CliError(
            f"{what}: {_shown_argument(text)} is {size:,} bytes as JSON,"
            f" over the limit of {limit:,}"
        )
    return text


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
