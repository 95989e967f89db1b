"""The progress lines both hosts' ``run`` commands print (``flowcore_cli._progress``)."""

from __future__ import annotations

import asyncio
import io
import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

import flowcore
from flowcore_cli._progress import Item, RunTree, positions, progress_line, watch
from flowcore_local import HostError, LocalHost


def line(kind: str, data: Any, run_id: str = "r") -> str | None:
    text = progress_line(flowcore.Record(kind, 3, run_id, 5, data))
    return None if text is None else text.plain


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"kind": "call-tool", "tool": "t", "idempotencyKey": "r/a#1"}, "→ call-tool t r/a#1"),
        (
            {
                "kind": "run-agent",
                "agentId": "w",
                "prompt": "p",
                "member": "sre",
                "idempotencyKey": "r/b#1",
                "budgetRemaining": {"steps": 7, "costMinorUnits": 90},
            },
            "→ run-agent w (sre) r/b#1  budget left: 7 steps, 90 cost",
        ),
        (
            {
                "kind": "run-agent",
                "agentId": "w",
                "prompt": "p",
                "idempotencyKey": "r/b#1",
                "budgetRemaining": {"steps": 7},
            },
            "→ run-agent w r/b#1  budget left: 7 steps",
        ),
        (
            {"kind": "ask-human", "question": "ok?", "options": ["y", "n"], "idempotencyKey": "k"},
            "? ok? ['y', 'n'] k",
        ),
        ({"kind": "ask-human", "question": "why?", "idempotencyKey": "k"}, "? why?  k"),
        (
            {"kind": "await-signal", "signal": "go", "idempotencyKey": "k"},
            "… waiting for signal go k",
        ),
        ({"kind": "sleep", "untilMs": 9, "idempotencyKey": "k"}, None),
        ({"kind": "settled", "status": "failed"}, "■ r settled failed"),
    ],
)
def test_effect_lines(data: dict[str, Any], expected: str | None) -> None:
    assert line("effect.emitted", data) == expected


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"kind": "effect-succeeded", "idempotencyKey": "k", "atMs": 1}, "✓ k"),
        (
            {"kind": "effect-failed", "idempotencyKey": "k", "atMs": 1, "error": {"type": "x"}},
            "✗ k x: ",
        ),
        (
            {"kind": "human-answered", "idempotencyKey": "k", "answer": "y", "atMs": 1},
            "! k answered 'y'",
        ),
        ({"kind": "signal-received", "signal": "go", "atMs": 1}, "! signal go received"),
        ({"kind": "timer-fired", "idempotencyKey": "r/a#1/backoff", "atMs": 1}, "⏲ r/a#1/backoff"),
        ({"kind": "timer-fired", "idempotencyKey": "r/$deadline", "atMs": 1}, None),
        ({"kind": "cancel-requested", "reason": "[bold]", "atMs": 1}, "■ cancel requested: [bold]"),
    ],
)
def test_event_lines(data: dict[str, Any], expected: str | None) -> None:
    assert line("event.reported", data) == expected


def test_other_records_and_unreadable_data_show_nothing() -> None:
    assert line("run.started", {"flowId": "f"}) is None
    assert line("effect.emitted", {"kind": "call-tool"}) is None  # not an effect
    assert line("event.reported", {"kind": "no-such-event"}) is None


def test_a_redispatch_after_recovery_has_a_line() -> None:
    """``effect.redispatched`` (written by hosts that re-run an effect after a
    recovery) is recognised by its type string, whatever flowcore defines."""
    data = {"idempotencyKey": "r/fetch#1", "recovery": 2, "worker": "h:1:ab"}
    assert line("effect.redispatched", data) == "↻ r/fetch#1 re-dispatched after recovery (2)"
    assert line("effect.redispatched", {"idempotencyKey": "r/a#1"}) == (
        "↻ r/a#1 re-dispatched after recovery"
    )
    assert line("effect.redispatched", "junk") == "↻ ? re-dispatched after recovery"


# --- watch: a fake run tree, read as a host's would be --------------------------------------


def effect(run_id: str, index: int, at: int, data: dict[str, Any]) -> flowcore.Record:
    return flowcore.Record("effect.emitted", index, run_id, at, data)


def event(run_id: str, index: int, at: int, data: dict[str, Any]) -> flowcore.Record:
    return flowcore.Record("event.reported", index, run_id, at, {"atMs": at, **data})


def call(key: str) -> dict[str, Any]:
    return {"kind": "call-tool", "tool": "t", "idempotencyKey": key}


def ok_(key: str) -> dict[str, Any]:
    return {"kind": "effect-succeeded", "idempotencyKey": key}


def subflow(key: str) -> dict[str, Any]:
    return {
        "kind": "run-subflow",
        "flowId": "c",
        "depth": 1,
        "idempotencyKey": key,
        "budgetRemaining": {"steps": 9},
    }


SETTLED = {"kind": "settled", "status": "completed"}


class FakeTree:
    """Runs' logs in memory; a child is known once its parent's records name it."""

    def __init__(self, logs: dict[str, list[flowcore.Record]]) -> None:
        self.logs = logs
        self.answers: list[tuple[str, str, str]] = []

    async def records(self, run_id: str, start: int) -> list[flowcore.Record]:
        return [r for r in self.logs.get(run_id, []) if r.index >= start]

    async def children(self, run_id: str, items: Sequence[Item]) -> list[str]:
        return [i.idempotency_key for i in items if isinstance(i, flowcore.RunSubflow)]

    async def answer(self, run_id: str, key: str, answer: str) -> None:
        if answer not in ("yes", "no"):
            raise LookupError(f"answer {answer!r} is not one of ['yes', 'no'] for {key}")
        self.answers.append((run_id, key, answer))
        log = self.logs[run_id]
        data = {"kind": "human-answered", "idempotencyKey": key, "answer": answer}
        log.append(event(run_id, len(log), log[-1].at + 1, data))

    def tree(self) -> RunTree:
        return RunTree(self.records, self.children, self.answer, LookupError, interval=0.01)


async def wait_until(done: Callable[[], bool], stdin: Pipe | None = None) -> None:
    """Wait (30 s at most) until ``done()``; if it never is, end ``stdin`` first, so
    that nothing is left blocked on it (a thread reading it would hold up the end)."""
    try:
        async with asyncio.timeout(30):
            while not done():
                await asyncio.sleep(0.01)
    except TimeoutError:
        if stdin is not None:
            stdin.end()
        raise


def follow(
    tree: FakeTree,
    root: str,
    start: int | dict[str, int] = 0,
    until: Callable[[], bool] | None = None,
    stdin: Pipe | None = None,
) -> list[str]:
    """What ``watch`` prints of the tree (until ``until()`` is true, else one pass),
    with standard input ``stdin`` (ended once ``until()`` is true)."""
    buffer = io.StringIO()
    console = Console(file=buffer, highlight=False, soft_wrap=True, width=200)

    async def main() -> None:
        stop = asyncio.Event()
        if until is None:
            stop.set()
        # From 0: as a new run's command calls it, without a start.
        where = {"start": start} if start else {}
        watcher = asyncio.create_task(watch(tree.tree(), root, stop, console, **where))
        if until is not None:
            await wait_until(until, stdin)
            if stdin is not None:
                stdin.end()  # nothing more: no question is left waiting for a line
            stop.set()
        await watcher

    asyncio.run(main())
    return buffer.getvalue().splitlines()


def parent_and_child(at: int) -> FakeTree:
    """A parent that starts a child; the child's settlement and the parent's
    subflow-settled are written at the same time (one transaction)."""
    kid = "p/kid#1"
    return FakeTree(
        {
            "p": [
                effect("p", 0, 10, call("p/a#1")),
                event("p", 1, 11, ok_("p/a#1")),
                effect("p", 2, 11, subflow(kid)),
                event(
                    "p",
                    3,
                    at,
                    {"kind": "subflow-settled", "idempotencyKey": kid, "status": "completed"},
                ),
                effect("p", 4, at, call("p/b#1")),
                event("p", 5, at + 1, ok_("p/b#1")),
                effect("p", 6, at + 1, SETTLED),
            ],
            kid: [
                effect(kid, 0, 11, call(f"{kid}/c#1")),
                event(kid, 1, at, ok_(f"{kid}/c#1")),
                effect(kid, 2, at, SETTLED),
            ],
        }
    )


CHILD_FIRST = [
    "→ call-tool t p/a#1",
    "✓ p/a#1",
    "→ run-subflow c p/kid#1",
    "→ call-tool t p/kid#1/c#1",
    "✓ p/kid#1/c#1",
    "■ p/kid#1 settled completed",
    "✓ p/kid#1 subflow completed",
    "→ call-tool t p/b#1",
    "✓ p/b#1",
    "■ p settled completed",
]


@pytest.mark.parametrize("at", [11, 12, 500])
def test_a_childs_records_come_before_the_parents_later_records(at: int) -> None:
    """Read in one pass, the tree prints in the order it was written: the child's
    records (at the same time as the parent's or not) before the parent's
    subflow-settled and what follows it."""
    assert follow(parent_and_child(at), "p") == CHILD_FIRST


def test_watch_starts_where_the_run_is() -> None:
    """With ``start``, a run's earlier records are not printed again: one line
    says where progress resumes, then only new records."""
    tree = parent_and_child(12)
    lines = follow(tree, "p", start=3)
    assert lines == [
        "resumed p at record 3 (3 records before)",
        # The child's records are new (it starts at 0 when start names only the root).
        "→ call-tool t p/kid#1/c#1",
        "✓ p/kid#1/c#1",
        "■ p/kid#1 settled completed",
        "✓ p/kid#1 subflow completed",
        "→ call-tool t p/b#1",
        "✓ p/b#1",
        "■ p settled completed",
    ]
    at = {"p": 4, "p/kid#1": 2}
    assert follow(tree, "p", start=at) == [
        "resumed p at record 4 (6 records before, in 2 runs)",
        "■ p/kid#1 settled completed",
        "→ call-tool t p/b#1",
        "✓ p/b#1",
        "■ p settled completed",
    ]
    # From 0, every record (no resumed line): what a new run shows.
    assert follow(tree, "p", start=0) == CHILD_FIRST
    assert follow(tree, "p", start={}) == CHILD_FIRST


def test_positions_are_where_each_run_of_the_tree_is() -> None:
    tree = parent_and_child(12)
    assert asyncio.run(positions(tree.tree(), "p")) == {"p": 7, "p/kid#1": 3}
    assert asyncio.run(positions(tree.tree(), "new")) == {"new": 0}  # nothing to skip
    assert follow(tree, "p", start=asyncio.run(positions(tree.tree(), "p"))) == [
        "resumed p at record 7 (10 records before, in 2 runs)"
    ]


def test_a_redispatch_is_shown_in_the_runs_progress() -> None:
    tree = FakeTree(
        {
            "r": [
                effect("r", 0, 1, call("r/a#1")),
                flowcore.Record(
                    "effect.redispatched", 1, "r", 2, {"idempotencyKey": "r/a#1", "recovery": 1}
                ),
                event("r", 2, 3, ok_("r/a#1")),
            ]
        }
    )
    assert follow(tree, "r", start=1) == [
        "resumed r at record 1 (1 record before)",
        "↻ r/a#1 re-dispatched after recovery (1)",
        "✓ r/a#1",
    ]


ASK = {"kind": "ask-human", "question": "ship it?", "options": ["yes", "no"]}


class Pipe:
    """Standard input as a pipe the test writes to."""

    def __init__(self) -> None:
        read, self.write = os.pipe()
        self.stdin = os.fdopen(read, "r")

    def send(self, text: str) -> None:
        os.write(self.write, text.encode())

    def end(self) -> None:
        if self.write >= 0:
            os.close(self.write)
            self.write = -1


@pytest.fixture
def piped_stdin(monkeypatch: pytest.MonkeyPatch) -> Iterator[Pipe]:
    pipe = Pipe()
    monkeypatch.setattr(sys, "stdin", pipe.stdin)
    yield pipe
    pipe.end()
    pipe.stdin.close()


def test_a_question_asked_before_the_start_and_still_open_is_asked(
    piped_stdin: Pipe,
) -> None:
    """Records before ``start`` are read, not printed: an open question among
    them is asked (a run resumed while it waited for an answer), one answered
    since is not."""
    tree = FakeTree(
        {
            "r": [
                effect("r", 0, 1, {**ASK, "idempotencyKey": "r/old#1"}),
                event(
                    "r",
                    1,
                    2,
                    {"kind": "human-answered", "idempotencyKey": "r/old#1", "answer": "no"},
                ),
                effect("r", 2, 3, {**ASK, "idempotencyKey": "r/q#1"}),
            ]
        }
    )
    piped_stdin.send("yes\n")
    lines = follow(tree, "r", start=3, until=lambda: bool(tree.answers), stdin=piped_stdin)
    assert tree.answers == [("r", "r/q#1", "yes")]
    assert lines[0] == "resumed r at record 3 (3 records before)"
    assert "! r/q#1 answered 'yes'" in lines


def test_a_question_closed_while_waiting_for_a_line_leaves_the_line_to_the_next(
    piped_stdin: Pipe,
) -> None:
    """Answers from a pipe: a question that times out while its line has not
    come yet stops waiting; the line, when it comes, answers the next question."""
    log = [effect("r", 0, 1, {**ASK, "idempotencyKey": "r/a#1"})]
    tree = FakeTree({"r": log})
    buffer = io.StringIO()
    console = Console(file=buffer, highlight=False, soft_wrap=True, width=200)

    async def main() -> None:
        stop = asyncio.Event()
        watcher = asyncio.create_task(watch(tree.tree(), "r", stop, console))
        await asyncio.sleep(0.1)  # the first question waits for its line
        log.append(event("r", 1, 2, {"kind": "timer-fired", "idempotencyKey": "r/a#1/timeout"}))
        log.append(effect("r", 2, 3, {**ASK, "idempotencyKey": "r/b#1"}))
        await asyncio.sleep(0.1)
        piped_stdin.send("no\n")
        await wait_until(lambda: bool(tree.answers), piped_stdin)
        piped_stdin.end()  # nothing more: no question is left waiting for a line
        stop.set()
        await watcher

    asyncio.run(main())
    assert tree.answers == [("r", "r/b#1", "no")]


# --- on the local host --------------------------------------------------------------------


PARENT = """\
flow: parent
tools: {t: {class: readonly}}
steps:
  - {id: a, call_tool: {tool: t, input: {}}}
  - {id: kid, run_subflow: {flow: child, input: {}}}
  - {id: b, call_tool: {tool: t, input: {}}}
output: "${steps.kid.output}"
"""
CHILD = """\
flow: child
tools: {t: {class: readonly}}
steps:
  - {id: c1, call_tool: {tool: t, input: {}}}
  - {id: go, await_signal: {signal: go}}
  - {id: c2, call_tool: {tool: t, input: {}}}
output: done
"""
TOOLS = 'def t(call):\n    return {"ok": True}\n\n\nTOOLS = {"t": t}\n'


def test_flowcore_run_prints_a_childs_progress_before_the_parents_later_progress(
    tmp_path: Path,
) -> None:
    """`make demo`'s postmortem came after the parent's `settled` line."""
    (tmp_path / "parent.yaml").write_text(PARENT)
    (tmp_path / "child.yaml").write_text(
        CHILD.replace("  - {id: go, await_signal: {signal: go}}\n", "")
    )
    (tmp_path / "tools.py").write_text(TOOLS)
    files = ["--db", str(tmp_path / "x.db"), "--tools", str(tmp_path / "tools.py")]
    command = [sys.executable, "-m", "flowcore_cli", "run", str(tmp_path / "parent.yaml")]
    proc = subprocess.run(
        [*command, *files, "--run-id", "p"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines == [
        "→ call-tool t p/a#1",
        "✓ p/a#1",
        "→ run-subflow child p/kid#1",
        "→ call-tool t p/kid#1/c1#1",
        "✓ p/kid#1/c1#1",
        "→ call-tool t p/kid#1/c2#1",
        "✓ p/kid#1/c2#1",
        "■ p/kid#1 settled completed",
        "✓ p/kid#1 subflow completed",
        "→ call-tool t p/b#1",
        "✓ p/b#1",
        "■ p settled completed",
        'output: "done"',
    ]


def local_tree(host: LocalHost) -> RunTree:
    """The run tree as the local command reads it (``flowcore_cli._local``)."""

    async def children(run_id: str, _items: Sequence[Item]) -> list[str]:
        return await host.children(run_id)

    return RunTree(host.records, children, host.answer, HostError, interval=0.05)


async def waiting(host: LocalHost, run_id: str) -> bool:
    """Whether the run waits for a signal (``False`` before it exists)."""
    try:
        return bool((await host.show(run_id))["waitingFor"])
    except HostError:
        return False


def test_a_resumed_local_run_tree_shows_only_what_happens_from_now_on(tmp_path: Path) -> None:
    """A parent waits for its child, which waits for a signal; a command attaches
    to the tree (``positions`` first), the child is signalled: progress starts
    where each run was, the child's lines before the parent's that follow."""
    (tmp_path / "parent.yaml").write_text(PARENT)
    (tmp_path / "child.yaml").write_text(CHILD)
    (tmp_path / "tools.py").write_text(TOOLS)
    buffer = io.StringIO()
    console = Console(file=buffer, highlight=False, soft_wrap=True, width=200)

    async def main() -> dict[str, int]:
        db, tools = tmp_path / "x.db", str(tmp_path / "tools.py")
        async with LocalHost(db, tools) as host:
            await host.start(tmp_path / "parent.yaml", None, "p", flows=[tmp_path])
            stop = asyncio.Event()
            first = asyncio.create_task(host.work(stop))
            async with asyncio.timeout(60):
                while not await waiting(host, "p/kid#1"):
                    await asyncio.sleep(0.05)
            stop.set()
            await first
        async with LocalHost(db, tools) as host:  # another command, later
            tree = local_tree(host)
            assert await positions(tree, "nope") == {"nope": 0}  # no such run: a new one
            at = await positions(tree, "p")
            stop = asyncio.Event()
            watcher = asyncio.create_task(watch(tree, "p", stop, console, start=at))
            await host.signal("p/kid#1", "go")
            try:
                await host.work(until_settled="p")
            finally:
                stop.set()
                await watcher
        return at

    at = asyncio.run(main())
    assert set(at) == {"p", "p/kid#1"}
    before = at["p"] + at["p/kid#1"]
    assert buffer.getvalue().splitlines() == [
        f"resumed p at record {at['p']} ({before} records before, in 2 runs)",
        "! signal go received",
        "→ call-tool t p/kid#1/c2#1",
        "✓ p/kid#1/c2#1",
        "■ p/kid#1 settled completed",
        "✓ p/kid#1 subflow completed",
        "→ call-tool t p/b#1",
        "✓ p/b#1",
        "■ p settled completed",
    ]
