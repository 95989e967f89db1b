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

A record's line is made in ``_progress_lines``, a question is asked in
``_progress_ask``; this module follows the tree, and every name is importable
from here.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from rich.console import Console
from rich.text import Text

from flowcore import AskHuman, Record, Sleep, SubflowSettled

from ._progress_ask import RunTree, _Asker, ask, prompt
from ._progress_lines import (
    REDISPATCHED,
    SCHEDULED_CHANGED,
    Item,
    Printer,
    _redispatched,
    describe,
    err,
    error_line,
    out,
    print_lines,
    progress_item,
    progress_line,
    scheduled_changed,
)

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
