"""A run's progress at the terminal: what ``flowcore run`` and ``flowcore
temporal run`` print while they follow a run tree, and how they ask its
questions.

``progress_line`` turns one log record into its progress line (or ``None``:
not every record is shown); ``watch`` follows a run tree's records, prints
their lines and asks the tree's questions; ``ask`` asks one question, at the
terminal or as one answer per line of standard input. Both hosts use all three;
what differs between them (how the tree is read, how often) is a ``RunTree``.

``watch`` prints the records of the whole tree in the order they were written
(a child run's records before the parent's records that follow them), and can
start where a run already is (``start``, see ``positions``): a command that
attaches to a run with a history prints one ``resumed`` line, then only what is
new.

A question is asked while it is open and no longer: when it is answered
elsewhere (``flowcore answer``), times out, or its run settles, its prompt goes
away with a line saying why. Standard input is read by the event loop when it
is readable (``add_reader``), never by a thread blocked on it, so a prompt that
goes away leaves nothing waiting for Enter; the terminal's settings are never
changed, and what was typed at a prompt that went away is discarded. When
standard input has no answer (closed, at its end, Ctrl-D), a question is not
asked again: one line says that the run waits for an answer given elsewhere
(``RunTree.answer_elsewhere``) and until when (the question's own timeout timer).

The line is a ``rich`` ``Text``: names, questions and messages from the run are
shown as they are, never read as markup.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import sys
import threading
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeAlias, TypeVar

import click
from rich.console import Console
from rich.text import Text

import flowcore
from flowcore import (
    AskHuman,
    AwaitSignal,
    CallTool,
    CancelRequested,
    ContinueAsNew,
    EffectFailed,
    EffectOutcomeUnknown,
    EffectSucceeded,
    HumanAnswered,
    Record,
    RunAgent,
    RunSubflow,
    RunTeam,
    ScheduledAddRequested,
    ScheduledCancelRequested,
    ScheduledRunNowRequested,
    Settled,
    SignalReceived,
    SignalRun,
    Sleep,
    SubflowSettled,
    TimerFired,
)

from ._common import duration, iso, say

__all__ = [
    "REDISPATCHED",
    "SCHEDULED_CHANGED",
    "Item",
    "Printer",
    "RunTree",
    "ask",
    "describe",
    "err",
    "error_line",
    "out",
    "positions",
    "progress_item",
    "print_lines",
    "progress_line",
    "prompt",
    "scheduled_changed",
    "watch",
]

T = TypeVar("T")
Item: TypeAlias = flowcore.Effect | flowcore.Event


class Printer(Console):
    """A rich console whose reader may go away (``flowcore events RUN | head -1``):
    the broken pipe ends the command quietly (``_errors.invoke``), where rich
    would exit 1 on its own."""

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError


# Where the commands print: rich markup only where the command writes it,
# no highlighting of numbers and strings, no wrapping of long lines.
out = Printer(highlight=False, soft_wrap=True)
err = Printer(stderr=True, highlight=False, soft_wrap=True)


def print_lines(lines: list[Text]) -> None:
    """Print lines to ``out`` in one write: a worker prints one per record.

    Without colours (a pipe, a file) the lines are written as plain text;
    rich's rendering of each line would cost more than the record's step.
    """
    if not lines:
        return
    if out.color_system is None and not out.is_terminal:
        out.file.write("".join(f"{line.plain}\n" for line in lines))
        out.file.flush()
    else:
        out.print(Text("\n").join(lines))


REDISPATCHED = "effect.redispatched"
"""The record a host writes when it runs an effect again after a recovery: its
data holds the effect's ``idempotencyKey`` and the count of recoveries of that
key (``recovery``, 1 for the first). Compared as a string, and its data read
leniently: a flowcore that does not define the type still shows it."""


# --- one record, one line ----------------------------------------------------------------


def error_line(error: Mapping[str, object]) -> str:
    """An error as one line: ``type: message``, then each cause in its chain
    (``<- type: message``) and how many attempts a retried step made. Read
    leniently, as a record's data: any field may be missing or odd."""
    parts: list[str] = []
    current: object = error
    while isinstance(current, Mapping) and len(parts) < 8:
        parts.append(f"{current.get('type', '')}: {current.get('message', '')}")
        current = current.get("cause")
    text = " <- ".join(parts)
    attempts = error.get("attempts")
    if isinstance(attempts, list) and attempts:
        text += f" (after {len(attempts)} attempts)"
    return text


def progress_item(record: Record) -> Item | None:
    """The effect (``effect.emitted``) or event (``event.reported``) ``record`` carries.

    ``None`` for every other record, and for data that is not a valid effect
    or event: progress never stops a run from being followed.
    """
    try:
        if record.type == "effect.emitted":
            return flowcore.effect_from_wire(record.data)
        if record.type == "event.reported":
            return flowcore.event_from_wire(record.data)
    except flowcore.WireError:
        return None
    return None


SCHEDULED_CHANGED = "scheduled.changed"
"""The record of a change to a scheduled call: its id, tool, status (pending,
running, completed, failed, cancelled, uncertain), attempts, due time and
error; never its input. Read leniently, like ``effect.redispatched``."""

_SCHEDULED_STYLE = {
    "completed": "green",
    "failed": "red",
    "uncertain": "red",
    "cancelled": "yellow",
    "running": "cyan",
}


def scheduled_changed(record: Record) -> Text:
    """``◷ KEY TOOL STATUS``, with the due time, attempts or error where they say something."""
    data = record.data if isinstance(record.data, dict) else {}
    sid, tool, status = (str(data.get(name, "?")) for name in ("id", "tool", "status"))
    line = Text.assemble(
        ("◷", _SCHEDULED_STYLE.get(status, "dim")),
        f" scheduled {sid} {tool} ",
        (status, _SCHEDULED_STYLE.get(status, "")),
    )
    due, attempts, error = data.get("dueMs"), data.get("attempts"), data.get("error")
    if status == "pending" and isinstance(due, int) and not isinstance(due, bool):
        line.append(f" due {iso(due)}", "dim")
    if isinstance(attempts, int) and not isinstance(attempts, bool) and attempts > 1:
        line.append(f" (attempt {attempts})", "dim")
    if isinstance(error, dict):
        line.append(f" {error.get('type', '')}: {error.get('message', '')}")
    return line


def progress_line(record: Record) -> Text | None:
    """The progress line of ``record``, or ``None`` if it is not shown."""
    if record.type == REDISPATCHED:
        return _redispatched(record)
    if record.type == SCHEDULED_CHANGED:
        return scheduled_changed(record)
    item = progress_item(record)
    return None if item is None else describe(item, record.run_id)


def _redispatched(record: Record) -> Text:
    """``↻ KEY re-dispatched after recovery``: the host runs the effect again."""
    data = record.data if isinstance(record.data, dict) else {}
    key = data.get("idempotencyKey")
    count = data.get("recovery", data.get("recoveries"))
    line = Text.assemble(
        ("↻", "yellow"), f" {key if isinstance(key, str) else '?'} re-dispatched after recovery"
    )
    if isinstance(count, int) and not isinstance(count, bool):
        line.append(f" ({count})", "dim")
    return line


def describe(item: Item, run_id: str) -> Text | None:
    """The progress line of an effect or event of run ``run_id`` (``None``: not shown)."""
    line = Text.assemble
    match item:
        # --- effects: what the run asks for
        case CallTool(tool=tool, idempotency_key=key):
            return line(("→ call-tool", "cyan"), f" {tool} {key}")
        case RunAgent(agent_id=agent, member=member, idempotency_key=key):
            budget = item.budget_remaining
            cost = "" if budget.cost_minor_units is None else f", {budget.cost_minor_units} cost"
            return line(
                ("→ run-agent", "cyan"),
                f" {agent}{f' ({member})' if member else ''} {key}  ",
                (f"budget left: {budget.steps} steps{cost}", "dim"),
            )
        case RunTeam(team_id=team, idempotency_key=key):
            return line(("→ run-team", "cyan"), f" {team} {key}")
        case AskHuman(question=question, options=options, idempotency_key=key):
            return line((f"? {question}", "magenta"), f" {list(options) if options else ''} {key}")
        case AwaitSignal(signal=signal, idempotency_key=key):
            return line(("… waiting for signal", "yellow"), f" {signal} {key}")
        case RunSubflow(flow_id=flow, idempotency_key=key):
            return line(("→ run-subflow", "cyan"), f" {flow} {key}")
        case SignalRun(run_id=target, signal=signal, key=sent_key, idempotency_key=key):
            with_key = "" if sent_key is None else f" (key {sent_key})"
            return line(("→ signal-run", "cyan"), f" {signal}{with_key} to {target} {key}")
        case Settled(status=status):
            return line((f"■ {run_id} settled {status}", "bold"))
        case ContinueAsNew(incarnation=n, signals=signals, scheduled=scheduled):
            carried = f"  (carried: {len(signals)} signal(s), {len(scheduled)} scheduled call(s))"
            return line(
                (f"↻ {run_id} continues as new: incarnation {n}", "bold"),
                (carried if signals or scheduled else "", "dim"),
            )
        # --- events: what happened
        case EffectSucceeded(idempotency_key=key):
            return line(("✓", "green"), f" {key}")
        case EffectFailed(idempotency_key=key, error=error):
            return line(("✗", "red"), f" {key} {error.type}: {error.message}")
        case EffectOutcomeUnknown(idempotency_key=key):
            return line(("?", "red"), f" {key} outcome unknown")
        case HumanAnswered(idempotency_key=key, answer=answer):
            return line(("!", "magenta"), f" {key} answered {answer!r}")
        case SignalReceived(signal=signal, key=sent_key):
            with_key = "" if sent_key is None else f" (key {sent_key})"
            return line(("!", "yellow"), f" signal {signal}{with_key} received")
        case SubflowSettled(idempotency_key=key, status=status):
            return line(("✓", "green"), f" {key} subflow {status}")
        case CancelRequested(reason=reason):
            return line(("■", "red"), f" cancel requested: {reason}")
        case ScheduledCancelRequested(schedule_id=sid):
            return line(("◷", "yellow"), f" cancel of scheduled {sid} requested")
        case ScheduledRunNowRequested(schedule_id=sid):
            return line(("◷", "cyan"), f" run-now of scheduled {sid} requested")
        case ScheduledAddRequested(tool=tool, delay_ms=delay):
            return line(("◷", "cyan"), f" scheduled call to {tool} requested, in {duration(delay)}")
        case TimerFired(idempotency_key=key) if not key.endswith("$deadline"):
            return line((f"⏲ {key}", "dim"))
    return None  # a sleep, a deadline's timer


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


# --- following a run tree ----------------------------------------------------------------


async def positions(tree: RunTree, root: str) -> dict[str, int]:
    """Where each run of the tree of ``root`` is now: the index of its next record.

    Pass it to ``watch`` as ``start`` to show only what happens from now on.
    Read before the run is worked on again, so that what the host does when
    it resumes (recoveries, re-dispatches) is shown. A run that does not exist
    yet (its read is refused, or empty) is at 0: a new run shows everything.
    """
    found: dict[str, int] = {}
    runs = [root]
    while runs:
        run_id = runs.pop(0)
        try:
            records = await tree.records(run_id, 0)
        except tree.refused:
            records = []
        found[run_id] = records[-1].index + 1 if records else 0
        items = [item for record in records if (item := progress_item(record)) is not None]
        runs.extend(c for c in await tree.children(run_id, items) if c not in found)
    return found


@dataclass(eq=False)
class _Read:
    """A record read and not printed yet."""

    record: Record
    item: Item | None


class _Watch:
    """The state of one ``watch``: the runs found, where each is read to, what
    each shows from, and the questions."""

    def __init__(self, tree: RunTree, root: str, start: Mapping[str, int], asker: _Asker) -> None:
        self.tree = tree
        self.asker = asker
        self.runs = [root]  # every run of the tree found so far, parents before children
        self.next: dict[str, int] = {root: 0}  # the next index to read of each
        self.start = start  # a run's records before this index are read, not printed
        self.gone: set[tuple[str, str]] = set()  # open here, not in the host's state

    async def read(self) -> dict[str, deque[_Read]]:
        """Read every run of the tree once, parents before children (a child found
        in a parent's records is read in the same pass)."""
        read: dict[str, deque[_Read]] = {}
        i = 0
        while i < len(self.runs):
            run_id = self.runs[i]
            i += 1
            items: list[Item] = []
            for record in await self.tree.records(run_id, self.next[run_id]):
                self.next[run_id] = record.index + 1
                item = progress_item(record)
                read.setdefault(run_id, deque()).append(_Read(record, item))
                if item is not None:
                    items.append(item)
            for child in await self.tree.children(run_id, items):
                if child not in self.next:
                    self.next[child] = 0
                    self.runs.append(child)
        return read

    def _child(self, run_id: str, key: str) -> str | None:
        """The child run subflow ``key`` of ``run_id`` started, if it is known.

        Both hosts name a child by its key (which begins with its parent's run
        id); a key that does not is prefixed with the run id (Temporal).
        """
        for child in (key, f"{run_id}/{key}"):
            if child != run_id and child in self.next:
                return child
        return None

    def _held(self, run_id: str, head: _Read, read: Mapping[str, deque[_Read]]) -> bool:
        """Whether ``head`` must wait for another run's records read in this pass:
        a parent's ``subflow-settled`` comes after the child's records (the child
        settled first), whatever their times say."""
        if isinstance(head.item, SubflowSettled):
            child = self._child(run_id, head.item.idempotency_key)
            return child is not None and bool(read.get(child))
        return False

    def show(self, read: dict[str, deque[_Read]]) -> None:
        """Print what one pass read, in the order it was written: by time (``at``),
        a parent's record before its child's at the same time, each run's records
        in their order, a child's records before the parent's ``subflow-settled``."""
        order = {run_id: n for n, run_id in enumerate(self.runs)}
        while read:
            best: tuple[tuple[int, int], str] | None = None
            fallback: tuple[tuple[int, int], str] | None = None
            for run_id, queue in read.items():
                rank = (queue[0].record.at, order[run_id])
                if fallback is None or rank < fallback[0]:
                    fallback = (rank, run_id)
                if self._held(run_id, queue[0], read):
                    continue
                if best is None or rank < best[0]:
                    best = (rank, run_id)
            chosen = best or fallback
            assert chosen is not None
            run_id = chosen[1]
            queue = read[run_id]
            head = queue.popleft()
            if not queue:
                del read[run_id]
            self.one(run_id, head)
        self.asker.resume_prompt()

    async def withdrawn(self, runs: Iterable[str]) -> None:
        """Stop asking the questions their run no longer waits for.

        Asked after each pass, of the runs it read new records of and of those
        suspected last time. The host's state is at least as new as the records
        read, so a question it does not list was answered, timed out or
        abandoned (its branch lost a race, its ``try`` failed). It is first only
        suspected: the next pass reads the records written before that state,
        and a record that closes it (an answer from elsewhere, a timeout) says
        how. One still open after that is closed here.
        """
        if self.tree.questions is None:
            return
        suspects, self.gone = self.gone, set()
        for run_id in dict.fromkeys([*runs, *(rid for rid, _ in suspects)]):
            mine = [key for rid, key in self.asker.open if rid == run_id]
            if not mine:
                continue
            try:
                still = set(await self.tree.questions(run_id))
            except Exception:  # progress never stops a run from being followed
                continue
            for key in mine:
                if key in still:
                    continue
                if (run_id, key) not in suspects:
                    self.gone.add((run_id, key))
                    continue
                text = self.asker.close(run_id, key, "the run no longer waits for it")
                if text is not None:
                    self.asker.print(text)
        self.asker.resume_prompt()

    def one(self, run_id: str, read: _Read) -> None:
        """Print one record's line (if it is past ``start``) and follow its questions."""
        record, item = read.record, read.item
        closed = self.asker.closing(run_id, item) if item is not None else []
        if record.index >= self.start.get(run_id, 0):
            text = (
                _redispatched(record)
                if record.type == REDISPATCHED
                else (None if item is None else describe(item, record.run_id))
            )
            if text is not None:
                self.asker.print(text)
        for text in closed:
            self.asker.print(text)
        if isinstance(item, Sleep) and item.idempotency_key.endswith("/timeout"):
            # The timer of a question's own timeout comes with its ask-human effect.
            key = item.idempotency_key.removesuffix("/timeout")
            self.asker.deadlines[(run_id, key)] = item.until_ms
        if isinstance(item, AskHuman):
            self.asker.start(run_id, item)


async def watch(
    tree: RunTree,
    root: str,
    stop: asyncio.Event,
    console: Console,
    start: int | Mapping[str, int] = 0,
) -> None:
    """Print the progress lines of ``root`` and its child runs as their records are
    written, and ask their questions, until ``stop`` is set (then once more).

    ``start`` is where to begin: the index of ``root``'s first record to print
    (0, the default: everything, for a new run), or a mapping of run ids of the
    tree to theirs (``positions``; runs it does not name start at 0). With a
    start past 0 one ``resumed`` line comes first. Records before it are read
    but not printed: a question asked before and still open is asked, and one
    answered since is not.
    """
    starts = {root: start} if isinstance(start, int) else {root: 0, **start}
    asker = _Asker(tree, console)
    watching = _Watch(tree, root, starts, asker)
    if starts[root] > 0:
        before = sum(starts.values())
        runs = sum(1 for n in starts.values() if n > 0)
        console.print(
            Text(
                f"resumed {root} at record {starts[root]}"
                f" ({before} record{'' if before == 1 else 's'} before"
                f"{f', in {runs} runs' if runs > 1 else ''})",
                style="dim",
            )
        )
    try:
        while True:
            # A pass that begins once ``stop`` is set is the last: it reads what
            # was written before (a pass under way when it was set may have read
            # a run before its last records).
            last = stop.is_set()
            read = await watching.read()
            fresh = list(read)
            watching.show(read)
            await watching.withdrawn(fresh)
            if last:
                return
            if not stop.is_set():
                try:
                    await asyncio.wait_for(stop.wait(), tree.interval)
                except TimeoutError:
                    pass
    finally:
        await asker.finish()
