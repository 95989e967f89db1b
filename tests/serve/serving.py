"""Starting a real ``flowcore serve`` process for the serve tests."""

from __future__ import annotations

import os
import re
import selectors
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

FLOWCORE = str(Path(sys.executable).with_name("flowcore"))
FLOWS = Path(__file__).with_name("flows")
_READY = re.compile(r"serving .* at (http://[^/ ]+/)(?: — open \S+\?token=(\S+))?")


@dataclass
class Served:
    url: str  # http://127.0.0.1:PORT/
    token: str | None  # the session's admin token, when serve made one
    proc: subprocess.Popen[str]

    def stop(self) -> str:
        """Stop the server (SIGTERM) and return what it wrote on stderr."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        assert self.proc.stderr is not None
        return self.proc.stderr.read()


def start_serve(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> Served:
    """``flowcore serve --port 0 --db tmp_path/serve.db --flows tests/serve/flows ARGS``,
    once it listens."""
    command = [
        FLOWCORE,
        "serve",
        "--port",
        "0",
        "--db",
        str(tmp_path / "serve.db"),
        "--flows",
        str(FLOWS),
        *args,
    ]
    proc = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=tmp_path,
    )
    assert proc.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if selector.select(0.5):
            line = proc.stdout.readline()
            found = _READY.search(line)
            if found:
                return Served(found.group(1), found.group(2), proc)
            if not line and proc.poll() is not None:
                break
        elif proc.poll() is not None:
            break
    proc.kill()
    _, err = proc.communicate(timeout=30)
    raise AssertionError(f"flowcore serve did not start: {err[-2000:]}")
