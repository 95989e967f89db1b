"""The command line's own check and its errors: one bounded line on stderr.

Every command of every host reports bad input the same way: one line on
stderr starting with ``flowcore:``, exit 2, never a traceback (``invoke``).
That line is bounded and always printable: it quotes at most a short prefix
of what the user gave, with control characters and undecodable bytes
escaped. This module imports no part of flowcore, so that ``flowcore
--help`` and ``--version`` start without loading the interpreter
(``main``); ``_common`` holds what needs it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import IO, Any, Final

import click

__all__ = [
    "MAX_LINE_CHARS",
    "CliError",
    "check_argv",
    "error_line",
    "internal_error",
    "invoke",
    "say",
    "shown_argument",
]

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


def shown_argument(arg: str, limit: int = 60) -> str:
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
            f"argument {number} {shown_argument(arg)}{after} is not valid UTF-8;"
            " every argument must be UTF-8 text"
        )


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


def _quiet_stdout() -> None:
    """Point standard output at the null device: what is still buffered for a
    reader that has gone is dropped when Python exits, not reported."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no real file descriptor (a test's capture)
        pass


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
    except BrokenPipeError:  # e.g. `flowcore events RUN | head -1`: the reader has gone
        _quiet_stdout()
        return 0
    except Exception as exc:  # the last line of defence: never a traceback
        say(internal_error(exc))
        return 2
    return result if isinstance(result, int) else 0
