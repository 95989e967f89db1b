"""A run tree's questions at the terminal: how ``watch`` (``_progress``) and
``ask`` ask them, one at a time and only while they are open, at the terminal
or as one answer per line of standard input (read by the event loop when it is
readable); and ``RunTree``, how a host's run tree is read and answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import sys
import threading
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import click
from rich.console import Console
from rich.text import Text

from flowcore import AskHuman, HumanAnswered, Record, Settled, TimerFired

from ._common import iso, say
from ._progress_lines import Item, err

__all__ = ["RunTree", "ask", "prompt"]

T = TypeVar("T")


# --- questions ---------------------------------------------------------------------------


def prompt(question: str, options: Sequence[str] | None) -> str | None:
    """One answer: asked at the terminal, else the next line of standard input.

    ``None`` when standard input has nothing more to give (answer with the
    ``answer`` command instead). This one blocks: ``watch`` uses it only where
    the event loop cannot watch standard input (no file descriptor, or a loop
    without ``add_reader``).
    """
    if sys.stdin.isatty():
        answer: str = click.prompt(
            question, type=click.Choice(list(options)) if options else str, err=True
        )
        return answer
    line = sys.stdin.readline()
    return line.strip() if line else None


def _in_daemon_thread(fn: Callable[[], T]) -> asyncio.Future[T]:
    """Run ``fn`` in a daemon thread: a prompt blocked on stdin must not keep
    ``asyncio.run`` from returning (its default executor would wait for it)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def deliver(result: T | None, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)  # type: ignore[arg-type]

    def target() -> None:
        try:
            result, error = fn(), None
        except BaseException as exc:  # handed to the waiting coroutine
            result, error = None, exc
        try:
            loop.call_soon_threadsafe(deliver, result, error)
        except RuntimeError:
            pass  # the loop is gone: nobody waits any more

    threading.Thread(target=target, daemon=True).start()
    return future


@dataclass(frozen=True)
class RunTree:
    """How ``watch`` reads one host's run tree and answers its questions."""

    # The records of a run from an index on (empty if it cannot be read yet).
    records: Callable[[str, int], Awaitable[Sequence[Record]]]
    # The child runs of a run, given the effects and events just read from it.
    children: Callable[[str, Sequence[Item]], Awaitable[Iterable[str]]]
    # Answer a run's question; raises ``refused`` (its message is shown) if refused.
    answer: Callable[[str, str, str], Awaitable[None]]
    refused: type[Exception]
    # Seconds between two reads of the tree.
    interval: float
    # The keys of a run's open questions, as the host's state has them now: a
    # question the run stopped waiting for without a record saying so (its
    # branch lost a race, its ``try`` failed) stops being asked. ``None``: only
    # the records close questions.
    questions: Callable[[str], Awaitable[Iterable[str]]] | None = None
    # Only where the event loop cannot watch standard input (see ``prompt``):
    # prompts in daemon threads, for a process that ends with ``os._exit`` (the
    # Temporal command), so that a prompt blocked on stdin does not delay the end;
    # otherwise the default executor.
    daemon_prompts: bool = False
    # How a person answers question ``key`` of run ``run_id`` without this
    # command (the command to type, and where else), for the line said when
    # standard input ends with the question open. ``None``: ``flowcore answer``.
    answer_elsewhere: Callable[[str, str], str] | None = None


def _answer_command(run_id: str, key: str) -> str:
    return f"`flowcore answer {shlex.quote(run_id)} {shlex.quote(key)} ANSWER`"


class _Stdin:
    """Standard input a line at a time, read by the event loop when it is readable.

    A read that is no longer wanted is dropped at once (nothing stays blocked
    on the descriptor), and the bytes already read stay for the next question.
    At a terminal, what was typed at a prompt that went away is discarded.
    ``mode`` says how the descriptor is read: ``"poll"`` (a terminal, a pipe,
    a socket: ``add_reader``), ``"file"`` (a regular file or ``/dev/null``,
    which a read never blocks on) or ``"thread"`` (no descriptor, or a loop
    that cannot watch one: the blocking ``prompt``).
    """

    def __init__(self) -> None:
        self.fd: int | None = None
        try:
            if sys.stdin is not None:
                self.fd = sys.stdin.fileno()
        except (AttributeError, OSError, ValueError):  # replaced, closed, or not a file
            self.fd = None
        self.tty = False
        self.mode = "thread"
        if self.fd is not None:
            try:
                self.tty = os.isatty(self.fd)
            except OSError:
                self.fd = None
        self.buffer = bytearray()
        self.eof = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._polling = False

    def open(self) -> None:
        """Find how standard input can be read (in the running event loop)."""
        if self.fd is None:
            return
        loop = asyncio.get_running_loop()
        try:
            loop.add_reader(self.fd, lambda: None)
        except NotImplementedError:
            return  # e.g. a proactor loop: the blocking prompt in a thread
        except PermissionError:
            self.mode = "file"  # epoll refuses regular files: reading them never blocks
            return
        except (OSError, ValueError):
            return
        loop.remove_reader(self.fd)
        self._loop = loop
        self.mode = "poll"

    async def readline(self) -> bytes | None:
        """The next line without its end, or ``None`` at the end of the input
        (at a terminal, Ctrl-D: the next read waits for more again)."""
        while True:
            end = self.buffer.find(b"\n")
            if end >= 0:
                line = bytes(self.buffer[:end])
                del self.buffer[: end + 1]
                return line.removesuffix(b"\r")
            if self.eof:
                self.eof = not self.tty
                if self.buffer:
                    line = bytes(self.buffer)
                    self.buffer.clear()
                    return line
                return None
            await self._fill()

    def _got(self, chunk: bytes) -> None:
        if chunk:
            self.buffer += chunk
        else:
            self.eof = True

    async def _fill(self) -> None:
        """Wait until standard input has more and add it to the buffer (or note
        its end). What is read is kept even when the wait is cancelled."""
        assert self.fd is not None
        fd = self.fd
        if self.mode == "file":
            try:
                self._got(os.read(fd, 65536))
            except OSError:
                self._got(b"")
            return
        loop = self._loop
        assert loop is not None
        future: asyncio.Future[None] = loop.create_future()

        def readable() -> None:
            try:
                chunk = os.read(fd, 65536)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                chunk = b""  # e.g. EIO: the terminal is gone
            self.stop()
            self._got(chunk)
            if not future.done():
                future.set_result(None)

        loop.add_reader(fd, readable)
        self._polling = True
        try:
            await future
        finally:
            self.stop()

    def stop(self) -> None:
        """Stop watching standard input (a read under way returns nothing more)."""
        if self._polling and self._loop is not None and self.fd is not None:
            self._polling = False
            with contextlib.suppress(Exception):
                self._loop.remove_reader(self.fd)

    def discard_typed(self) -> None:
        """At a terminal: forget what was typed and not yet read as a line."""
        if not self.tty or self.fd is None:
            return
        self.buffer.clear()
        if sys.platform != "win32":
            import termios

            with contextlib.suppress(OSError, termios.error):
                termios.tcflush(self.fd, termios.TCIFLUSH)


def _prompt_text(question: str, options: Sequence[str] | None) -> str:
    """The prompt, as ``click.prompt`` writes it: ``ship it? (yes, no): ``."""
    return f"{question} ({', '.join(options)}): " if options else f"{question}: "


def _write_err(text: str) -> None:
    with contextlib.suppress(Exception):
        sys.stderr.write(text)
        sys.stderr.flush()


@dataclass(eq=False)
class _Question:
    run_id: str
    key: str
    question: str
    options: tuple[str, ...] | None
    task: asyncio.Task[None] | None = None
    closed: bool = False  # no longer open: not asked (again)
    sending: bool = False  # an answer given here is on its way to the run


class _Asker:
    """A run tree's questions: asked one at a time, while they are open.

    ``console`` is where progress goes: while a prompt waits at the terminal, a
    line printed there ends the prompt's line first, and the prompt is shown
    again after the lines (``resume_prompt``).
    """

    def __init__(self, tree: RunTree, console: Console) -> None:
        self.tree = tree
        self.console = console
        self.stdin = _Stdin()
        self.stdin.open()
        self.turn = asyncio.Lock()  # one question at the terminal at a time
        self.open: dict[tuple[str, str], _Question] = {}
        self.asked: set[tuple[str, str]] = set()
        self.reading: _Question | None = None  # the question standard input is read for
        self.prompt: str | None = None  # the prompt waiting at the terminal, if any
        self.broken = False  # lines were printed after the prompt: show it again
        self.tasks: list[asyncio.Task[None]] = []
        # When each question's own timeout fires (its ``KEY/timeout`` timer), epoch ms.
        self.deadlines: dict[tuple[str, str], int] = {}

    # --- printing around a prompt

    def print(self, text: Text) -> None:
        if self.prompt is not None and not self.broken:
            _write_err("\n")  # end the prompt's line
            self.broken = True
        self.console.print(text)

    def resume_prompt(self) -> None:
        """Show the waiting prompt again below the lines printed after it."""
        if self.prompt is not None and self.broken:
            self.broken = False
            _write_err(self.prompt)

    def _show(self, text: str) -> None:
        self.prompt, self.broken = text, False
        _write_err(text)

    # --- questions open and closed

    def start(self, run_id: str, item: AskHuman) -> None:
        """Ask the question of an ``ask-human`` effect (once per key)."""
        ident = (run_id, item.idempotency_key)
        if ident in self.asked:
            return
        self.asked.add(ident)
        question = _Question(run_id, item.idempotency_key, item.question, item.options)
        self.open[ident] = question
        question.task = asyncio.create_task(self._ask(question))
        self.tasks.append(question.task)

    def close(self, run_id: str, key: str, why: str) -> Text | None:
        """Question ``key`` is no longer open: stop asking it.

        Returns the line that says why, when its prompt was waiting at the
        terminal (the prompt's line is ended; print the line after the record's).
        """
        question = self.open.pop((run_id, key), None)
        if question is None:
            return None
        question.closed = True
        if question.sending or question.task is None or question.task.done():
            return None  # answered here (or being answered): that says what happened
        shown = False
        if self.reading is question:
            self.stdin.stop()
            self.stdin.discard_typed()
            self.reading = None
            if self.prompt is not None:
                if not self.broken:
                    _write_err("\n")
                self.prompt, self.broken, shown = None, False, True
        question.task.cancel()
        if not shown:
            return None
        return Text.assemble(("… no longer asking", "yellow"), f" {key}: {why}")

    def close_run(self, run_id: str, why: str) -> list[Text]:
        """Every question of run ``run_id`` is no longer open (it settled)."""
        keys = [key for rid, key in self.open if rid == run_id]
        return [text for key in keys if (text := self.close(run_id, key, why)) is not None]

    def closing(self, run_id: str, item: Item) -> list[Text]:
        """Close the questions ``item`` (an effect or event of ``run_id``) ends."""
        if isinstance(item, HumanAnswered):
            text = self.close(run_id, item.idempotency_key, "answered elsewhere")
            return [] if text is None else [text]
        if isinstance(item, Settled):
            return self.close_run(run_id, f"{run_id} settled {item.status}")
        if isinstance(item, TimerFired) and item.idempotency_key.endswith("/timeout"):
            key = item.idempotency_key.removesuffix("/timeout")
            if (run_id, key) in self.open:
                why = "it timed out (its default answer is used, if it has one)"
                text = self.close(run_id, key, why)
                return [] if text is None else [text]
            # A step's timeout (``run/path/timeout``): the step's question
            # (``run/path#n``) and any in its loop iterations or attempts
            # (``run/path[i]/...``, ``run/path#n/...``) are abandoned.
            texts = []
            for rid, open_key in list(self.open):
                if rid == run_id and open_key.startswith((key + "#", key + "[")):
                    text = self.close(rid, open_key, "its step timed out")
                    if text is not None:
                        texts.append(text)
            return texts
        return []

    async def finish(self) -> None:
        """Stop asking: the watch is over (the run settled, or the command ends)."""
        for run_id, key in list(self.open):
            text = self.close(run_id, key, "the command is ending")
            if text is not None:
                self.console.print(text)
        self.open.clear()
        self.stdin.stop()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        if self.prompt is not None:  # a question whose answer was on its way
            _write_err("\n")
            self.prompt = None

    def waiting(self, question: _Question) -> None:
        """Standard input has no answer to ``question`` and it is still open: say
        once that the run waits for it, where to answer it and until when."""
        options = f" ({', '.join(question.options)})" if question.options else ""
        how = (self.tree.answer_elsewhere or _answer_command)(question.run_id, question.key)
        until = self.deadlines.get((question.run_id, question.key))
        when = (
            f"until {iso(until, 'seconds')} (UTC, its timeout)"
            if until is not None
            else "with no deadline (the question has no timeout)"
        )
        say(
            f"no answer on standard input to {question.key} {question.question!r}{options}: "
            f"the run waits for one {when}; answer with {how}"
        )

    # --- asking one question

    async def _ask(self, question: _Question) -> None:
        """Ask until answered, closed, or standard input has nothing more.

        A refused answer is shown (one line on stderr) and the question asked
        again: at the terminal, or with the next line of standard input.
        """
        try:
            while True:
                async with self.turn:
                    if question.closed:
                        return
                    answer = await self._answer(question)
                if answer is None and not question.closed:
                    self.waiting(question)  # no more input: answered elsewhere, or times out
                if answer is None or question.closed:
                    return
                question.sending = True
                try:
                    await self.tree.answer(question.run_id, question.key, answer)
                    return
                except self.tree.refused as exc:
                    say(str(exc))
                finally:
                    question.sending = False
        finally:
            self.open.pop((question.run_id, question.key), None)

    async def _answer(self, question: _Question) -> str | None:
        """One answer to ``question`` from standard input (``None``: no more input)."""
        if self.stdin.mode == "thread":

            def ask_it() -> str | None:
                return prompt(question.question, question.options)

            if self.tree.daemon_prompts:
                return await _in_daemon_thread(ask_it)
            return await asyncio.to_thread(ask_it)
        self.reading = question
        try:
            while True:
                if self.stdin.tty:
                    self._show(_prompt_text(question.question, question.options))
                try:
                    line = await self.stdin.readline()
                finally:
                    if self.stdin.tty:
                        self.prompt, self.broken = None, False
                if line is None:
                    if self.stdin.tty:
                        _write_err("\n")
                    return None
                try:
                    text = line.decode("utf-8")
                except UnicodeDecodeError:
                    say(f"the answer to {question.key} is not UTF-8 text")
                    continue
                if not self.stdin.tty:
                    return text.strip()
                if text:  # an empty line at the terminal asks again (as click.prompt)
                    return text
        finally:
            if self.reading is question:
                self.reading = None


async def ask(
    tree: RunTree, run_id: str, key: str, question: str, options: Sequence[str] | None
) -> None:
    """Ask ``question`` until it is answered or there is no more input.

    A refused answer is shown (one line on stderr) and the question asked
    again: at the terminal, or with the next line of standard input.
    """
    asker = _Asker(tree, err)
    asking = _Question(run_id, key, question, tuple(options) if options is not None else None)
    asker.open[(run_id, key)] = asking
    try:
        await asker._ask(asking)
    finally:
        asker.stdin.stop()
