"""``flowcore run`` whose standard input is closed says, once per question, that the
run waits for an answer from elsewhere, where to give it and until when (specs/cli.md).

Real subprocesses: ``flowcore run`` with standard input at its end from the start,
the first question timing out after a short while (its default answer), the second,
without a timeout, answered with the very command the line prints.
"""

from __future__ import annotations

import asyncio
import os
import queue
import re
import shlex
import subprocess
import sys
import threading
from pathlib import Path

from flowcore.log.records import EFFECT_EMITTED
from flowcore_cli._common import iso
from flowcore_local import LocalHost

SPEC = """\
flow: closed-stdin
steps:
  - id: decide
    ask_human:
      {question: 'Page the owner?', options: [page, ignore], timeout_ms: 1500, default: ignore}
  - id: note
    ask_human: {question: 'Any note?'}
output: "${ {paged: steps.decide.answer, note: steps.note.answer} }"
"""
WAIT_S = 60.0  # only a bound: the lines come at once, the timeout after 1.5 s


def _lines(stream: object, into: queue.Queue[str | None]) -> None:
    for line in stream:  # type: ignore[attr-defined]
        into.put(line.rstrip("\n"))
    into.put(None)


def _next_waiting_line(lines: queue.Queue[str | None], seen: list[str]) -> str:
    while True:
        line = lines.get(timeout=WAIT_S)
        assert line is not None, f"stderr ended without saying the run waits: {seen}"
        seen.append(line)
        if "no answer on standard input" in line:
            return line


def test_a_question_with_stdin_closed_says_where_to_answer_and_until_when(
    tmp_path: Path,
) -> None:
    (tmp_path / "flow.yaml").write_text(SPEC)
    db = tmp_path / "d.db"
    env = {k: v for k, v in os.environ.items() if k != "FLOWCORE_DB"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "flowcore_cli",
            "run",
            "flow.yaml",
            "--db",
            "d.db",  # relative, so that the line stays under the cut whatever tmp_path is
            "--run-id",
            "r1",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=env,
    )
    lines: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=_lines, args=(proc.stderr, lines), daemon=True).start()
    seen: list[str] = []
    try:
        first = _next_waiting_line(lines, seen)
        second = _next_waiting_line(lines, seen)  # the first timed out: the next question
        assert re.fullmatch(
            r"flowcore: no answer on standard input to r1/decide#1 'Page the owner\?' "
            r"\(page, ignore\): the run waits for one until (\S+) \(UTC, its timeout\); "
            r"answer with `flowcore answer r1 'r1/decide#1' ANSWER --db \S+` "
            r"or in the web view \(`flowcore serve --db \S+`\)",
            first,
        ), first
        assert "to r1/note#1 'Any note?': the run waits for one with no deadline" in second
        command = re.search(r"`(flowcore answer [^`]*)`", second)
        assert command is not None, second
        args = ["fine" if a == "ANSWER" else a for a in shlex.split(command.group(1))]
        answered = subprocess.run(
            [sys.executable, "-m", "flowcore_cli", *args[1:]],
            capture_output=True,
            text=True,
            timeout=WAIT_S,
            cwd=tmp_path,
            env=env,
            check=False,
        )
        assert answered.returncode == 0, answered.stderr
        out, _ = proc.communicate(timeout=WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0
    assert out.splitlines()[-1] == 'output: {"paged": "ignore", "note": "fine"}'
    while (line := lines.get(timeout=WAIT_S)) is not None:
        seen.append(line)
    assert sum("no answer on standard input" in line for line in seen) == 2, seen  # once each

    # The deadline said is the question's own timer, as the log records it.
    async def timer_ms() -> int:
        async with LocalHost(db) as host:
            records = await host.records("r1")
        (timer,) = [
            r.data
            for r in records
            if r.type == EFFECT_EMITTED and r.data.get("idempotencyKey") == "r1/decide#1/timeout"
        ]
        return int(timer["untilMs"])

    until = asyncio.run(timer_ms())
    assert f"until {iso(until, 'seconds')} (UTC, its timeout)" in first
