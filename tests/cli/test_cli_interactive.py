"""``flowcore run`` at a real terminal: the run's questions are asked at a
pseudo-terminal, and a question that stops being open (it timed out, was
answered from another terminal, or its run settled) stops being asked at once.

Each test starts the command as a subprocess whose standard input, output and
error are the slave side of a pty (so ``isatty()`` is true, as at a terminal),
reads what it prints from the master side, and types into it. No assertion
depends on timing except one generous deadline per wait: a process that keeps
waiting for Enter fails the test instead of hanging it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs a POSIX pseudo-terminal")

DEADLINE = 60.0  # seconds; the machine may be busy
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

TOOLS = """\
def note(call):
    return {"noted": call.input["answer"]}


TOOLS = {"note": note}
"""


def flow(ask: str) -> str:
    return (
        "flow: asking\n"
        "tools: {note: {class: idempotent}}\n"
        "steps:\n"
        f"  - id: q\n    ask_human: {ask}\n"
        "  - id: n\n"
        '    call_tool: {tool: note, input: {answer: "${steps.q.answer}"}}\n'
        'output: "${steps.n.output.noted}"\n'
    )


class Terminal:
    """A command attached to a pseudo-terminal: what it printed, and a keyboard."""

    def __init__(self, args: list[str], cwd: Path) -> None:
        self.master, slave = os.openpty()
        # The slave stays open here too, so that the terminal's settings can be
        # read after the command ends.
        self.slave = slave
        self.before = termios.tcgetattr(slave)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "flowcore_cli", *args],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            cwd=cwd,
            env={**os.environ, "COLUMNS": "200", "TERM": "xterm"},
            start_new_session=True,
            close_fds=True,
        )
        self._chunks: list[bytes] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self.master, 4096)
            except OSError:
                return
            if not chunk:
                return
            with self._lock:
                self._chunks.append(chunk)

    @property
    def text(self) -> str:
        with self._lock:
            raw = b"".join(self._chunks)
        return ANSI.sub("", raw.decode("utf-8", "replace")).replace("\r", "")

    def expect(self, pattern: str) -> None:
        """Wait until the command has printed ``pattern`` (a plain string)."""
        end = time.monotonic() + DEADLINE
        while pattern not in self.text:
            if self.proc.poll() is not None:
                time.sleep(0.2)  # the last output may still be in flight
                if pattern in self.text:
                    return
                pytest.fail(
                    f"exited {self.proc.returncode} before printing {pattern!r}:\n{self.text}"
                )
            if time.monotonic() > end:
                pytest.fail(f"no {pattern!r} within {DEADLINE} s:\n{self.text}")
            time.sleep(0.05)

    def type(self, keys: str) -> None:
        os.write(self.master, keys.encode())

    def wait(self) -> int:
        """The exit code; fails (and kills the command) if it does not end in time."""
        try:
            code = self.proc.wait(DEADLINE)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"still running after {DEADLINE} s (waiting for Enter?):\n{self.text}")
        time.sleep(0.2)  # let the reader take the last output
        return code

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for fd in (self.slave, self.master):
            try:
                os.close(fd)
            except OSError:
                pass


@pytest.fixture
def terminals() -> Iterator[list[Terminal]]:
    started: list[Terminal] = []
    yield started
    for terminal in started:
        terminal.close()


def run_at_terminal(
    tmp_path: Path, terminals: list[Terminal], ask: str, run_id: str = "r1"
) -> Terminal:
    spec = tmp_path / "asking.yaml"
    spec.write_text(flow(ask))
    (tmp_path / "tools.py").write_text(TOOLS)
    args = ["run", str(spec), "--db", str(tmp_path / "x.db"), "--tools", str(tmp_path / "tools.py")]
    terminal = Terminal([*args, "--run-id", run_id], tmp_path)
    terminals.append(terminal)
    return terminal


def fc(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flowcore_cli", *args],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=DEADLINE,
        cwd=cwd,
        check=False,
    )


def test_a_question_that_times_out_stops_being_asked(
    tmp_path: Path, terminals: list[Terminal]
) -> None:
    """Nothing is typed: the question times out, its default is used, the run
    completes and the command ends without waiting for Enter."""
    ask = "{question: 'ship it?', options: ['yes', 'no'], timeout_ms: 3000, default: 'no'}"
    terminal = run_at_terminal(tmp_path, terminals, ask)
    terminal.expect("ship it? (yes, no): ")
    assert terminal.wait() == 0, terminal.text
    text = terminal.text
    assert "no longer asking r1/q#1: it timed out" in text
    assert "■ r1 settled completed" in text
    assert 'output: "no"' in text
    # The prompt was not shown again after it went away.
    assert text.count("ship it? (yes, no): ") == 1
    # The terminal is as it was: line editing and echo as the command found them.
    assert termios.tcgetattr(terminal.slave) == terminal.before


def test_a_question_answered_elsewhere_stops_being_asked(
    tmp_path: Path, terminals: list[Terminal]
) -> None:
    """While the prompt shows (and half an answer is typed), another process
    answers the question: the prompt goes away and the run completes."""
    ask = "{question: 'ship it?', options: ['yes', 'no']}"
    terminal = run_at_terminal(tmp_path, terminals, ask)
    terminal.expect("ship it? (yes, no): ")
    terminal.type("n")  # typed, never sent: Enter is not pressed
    answered = fc("answer", "r1", "r1/q#1", "yes", "--db", str(tmp_path / "x.db"), cwd=tmp_path)
    assert answered.returncode == 0, answered.stderr
    assert terminal.wait() == 0, terminal.text
    text = terminal.text
    assert "no longer asking r1/q#1: answered elsewhere" in text
    assert "! r1/q#1 answered 'yes'" in text
    assert 'output: "yes"' in text
    assert termios.tcgetattr(terminal.slave) == terminal.before


def test_a_question_answered_at_the_terminal(tmp_path: Path, terminals: list[Terminal]) -> None:
    """The ordinary case still works: an answer that is not an option is refused
    and the question asked again; a good answer is sent and the run completes."""
    ask = "{question: 'ship it?', options: ['yes', 'no']}"
    terminal = run_at_terminal(tmp_path, terminals, ask)
    terminal.expect("ship it? (yes, no): ")
    terminal.type("maybe\n")
    terminal.expect("'maybe' is not one of ['yes', 'no']")
    terminal.type("yes\n")
    assert terminal.wait() == 0, terminal.text
    text = terminal.text
    assert text.count("ship it? (yes, no): ") == 2
    assert "! r1/q#1 answered 'yes'" in text
    assert 'output: "yes"' in text
    assert "no longer asking" not in text


RACE = """\
flow: racing
steps:
  - id: pick
    parallel:
      mode: race
      branches:
        human:
          - id: q
            ask_human: {question: 'ship it?', options: [yes, no]}
        machine:
          - id: go
            await_signal: {signal: go}
  - id: again
    ask_human: {question: 'really?', options: [yes, no]}
output: "${steps.again.answer}"
"""


def test_a_question_its_branch_abandons_stops_being_asked(
    tmp_path: Path, terminals: list[Terminal]
) -> None:
    """The question's branch loses a race (a signal from another process ends
    the other branch first): no record answers or times it out, yet its prompt
    goes away while the run goes on, and the next question is asked."""
    spec = tmp_path / "racing.yaml"
    spec.write_text(RACE)
    db = str(tmp_path / "x.db")
    terminal = Terminal(["run", str(spec), "--db", db, "--run-id", "r1"], tmp_path)
    terminals.append(terminal)
    terminal.expect("ship it? (yes, no): ")
    terminal.type("ye")  # typed, never sent: the prompt goes away first
    sent = fc("signal", "r1", "go", "--db", db, cwd=tmp_path)
    assert sent.returncode == 0, sent.stderr
    terminal.expect("really? (yes, no): ")
    text = terminal.text
    closed = "no longer asking r1/q#1: the run no longer waits for it"
    assert closed in text, text
    terminal.type("no\n")
    assert terminal.wait() == 0, terminal.text
    text = terminal.text
    # Not asked again once it went away; what was typed there was not sent.
    assert "ship it? (yes, no): " not in text.split(closed, 1)[1]
    assert "r1/q#1 answered" not in text
    assert "! r1/again#1 answered 'no'" in text
    assert 'output: "no"' in text
    assert termios.tcgetattr(terminal.slave) == terminal.before
