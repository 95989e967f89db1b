"""A run's progress at the terminal: what ``flowcore run`` and ``flowcore
temporal run`` print while they follow a run tree, and how they ask its
questions.

``progress_line`` turns one log record into its progress line (or ``None``:
not every record is shown); ``watch`` follows a run tree's records, prints
their lines and asks the tree's questions; ``ask`` asks one question, at the
terminal or as one answer per line of standard input. Both hosts use all three;
what differs between them (how the tree is read, how often) is a ``RunTree``.

The line is a ``rich`` ``Text``: names, questions and messages from the run are
shown as they are, never read as markup.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Awaitable, Callable, Iterable, Sequence
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
    EffectFailed,
    EffectOutcomeUnknown,
    EffectSucceeded,
    HumanAnswered,
    Record,
    RunAgent,
    RunSubflow,
    RunTeam,
    Settled,
    SignalReceived,
    SubflowSettled,
    TimerFired,
)

from ._common import say

__all__ = [
    "Item",
    "RunTree",
    "ask",
    "describe",
    "err",
    "out",
    "progress_item",
    "progress_line",
    "prompt",
    "watch",
]

T = TypeVar("T")
Item: TypeAlias = flowcore.Effect | flowcore.Event

# Where the commands print: rich markup only where the command writes it,
# no highlighting of numbers and strings, no wrapping of long lines.
out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


# --- one record, one line ----------------------------------------------------------------


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


def progress_line(record: Record) -> Text | None:
    """The progress line of ``record``, or ``None`` if it is not shown."""
    item = progress_item(record)
    return None if item is None else describe(item, record.run_id)


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
        case Settled(status=status):
            return line((f"■ {run_id} settled {status}", "bold"))
        # --- events: what happened
        case EffectSucceeded(idempotency_key=key):
            return line(("✓", "green"), f" {key}")
        case EffectFailed(idempotency_key=key, error=error):
            return line(("✗", "red"), f" {key} {error.type}: {error.message}")
        case EffectOutcomeUnknown(idempotency_key=key):
            return line(("?", "red"), f" {key} outcome unknown")
        case HumanAnswered(idempotency_key=key, answer=answer):
            return line(("!", "magenta"), f" {key} answered {answer!r}")
        case SignalReceived(signal=signal):
            return line(("!", "yellow"), f" signal {signal} received")
        case SubflowSettled(idempotency_key=key, status=status):
            return line(("✓", "green"), f" {key} subflow {status}")
        case CancelRequested(reason=reason):
            return line(("■", "red"), f" cancel requested: {reason}")
        case TimerFired(idempotency_key=key) if not key.endswith("$deadline"):
            return line((f"⏲ {key}", "dim"))
    return None  # a sleep, a deadline's timer


# --- questions ---------------------------------------------------------------------------


def prompt(question: str, options: Sequence[str] | None) -> str | None:
    """One answer: asked at the terminal, else the next line of standard input.

    ``None`` when standard input has nothing more to give (answer with the
    ``answer`` command instead).
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
    # Prompts in daemon threads, for a process that ends with ``os._exit`` (the
    # Temporal command): a prompt blocked on stdin then does not delay the end.
    # Otherwise (the local command, which ends with interpreter teardown, where a
    # daemon thread blocked on stdin can abort the process) the default executor.
    daemon_prompts: bool = False


async def ask(
    tree: RunTree, run_id: str, key: str, question: str, options: Sequence[str] | None
) -> None:
    """Ask ``question`` until it is answered or there is no more input.

    A refused answer is shown (one line on stderr) and the question asked
    again: at the terminal, or with the next line of standard input.
    """
    while True:
        if tree.daemon_prompts:
            answer = await _in_daemon_thread(lambda: prompt(question, options))
        else:
            answer = await asyncio.to_thread(prompt, question, options)
        if answer is None:
            return  # no more input: answer with the `answer` command
        try:
            await tree.answer(run_id, key, answer)
            return
        except tree.refused as exc:
            say(str(exc))


# --- following a run tree ----------------------------------------------------------------


async def watch(tree: RunTree, root: str, stop: asyncio.Event, console: Console) -> None:
    """Print the progress lines of ``root`` and its child runs as their records are
    written, and ask their questions, until ``stop`` is set (then once more)."""
    runs = [root]  # every run of the tree found so far, parents before children
    seen: dict[str, int] = {root: 0}  # the next index to read of each
    asked: set[str] = set()
    questions: list[asyncio.Task[None]] = []
    while True:
        # A pass that begins once ``stop`` is set is the last: it reads what
        # was written before (a pass under way when it was set may have read
        # a run before its last records).
        last = stop.is_set()
        i = 0
        while i < len(runs):
            run_id = runs[i]
            i += 1
            items: list[Item] = []
            for record in await tree.records(run_id, seen[run_id]):
                seen[run_id] = record.index + 1
                item = progress_item(record)
                if item is None:
                    continue
                items.append(item)
                text = describe(item, record.run_id)
                if text is not None:
                    console.print(text)
                if isinstance(item, AskHuman) and item.idempotency_key not in asked:
                    asked.add(item.idempotency_key)
                    questions.append(
                        asyncio.create_task(
                            ask(tree, run_id, item.idempotency_key, item.question, item.options)
                        )
                    )
            for child in await tree.children(run_id, items):
                if child not in seen:
                    seen[child] = 0
                    runs.append(child)
        if last:
            for task in questions:
                task.cancel()
            return
        if not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), tree.interval)
            except TimeoutError:
                pass
