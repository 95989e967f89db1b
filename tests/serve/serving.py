"""Running a real ``flowcore serve`` in a subprocess for tests.

``start_serve(tmp_path, *args)`` starts ``flowcore serve --db tmp_path/serve.db
--port 0 *args`` (``--db`` only when ``args`` has none), waits for the line it
prints once it listens, and returns a ``Served`` with the address, the
session token (when the server made one) and the process; ``stop()`` ends it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Final

import attrs
import httpx

__all__ = ["FLOWCORE", "FLOWS", "READY_TIMEOUT_S", "Served", "ServeFailed", "start_serve"]

FLOWCORE: Final = str(Path(sys.executable).with_name("flowcore"))  # the installed command
FLOWS: Final = Path(__file__).with_name("flows")  # the serve tests' registry folder
READY_TIMEOUT_S: Final = 60.0
_READY = re.compile(r"serving .* at (http://\S+?/)(?: — open \S+\?token=(\S+))?$")


class ServeFailed(AssertionError):
    """The server did not come up (the message holds its output)."""


@attrs.define
class Served:
    url: str  # http://127.0.0.1:PORT/ (with the trailing slash)
    token: str | None  # the session token, when the server made one
    proc: subprocess.Popen[bytes]
    db: Path
    log: Path  # where its stdout and stderr go

    def client(self, token: str | None = None, **kwargs: Any) -> httpx.Client:
        """An HTTP client on the server's address with ``token`` (default: the
        session token) as its bearer token."""
        kwargs.setdefault("timeout", 30.0)
        token = token or self.token
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        return httpx.Client(base_url=self.url.rstrip("/"), headers=headers, **kwargs)

    def output(self) -> str:
        return self.log.read_text("utf-8", "replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)

    def __enter__(self) -> Served:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_serve(tmp_path: Path, *args: str | Path, env: dict[str, str] | None = None) -> Served:
    """Start ``flowcore serve`` on a free port and wait until it listens."""
    argv = [str(a) for a in args]
    db = tmp_path / "serve.db"
    if "--db" in argv:
        db = Path(argv[argv.index("--db") + 1])
    elif "--temporal" not in argv:  # (a Temporal namespace has no database)
        argv = ["--db", str(db), *argv]
    if "--port" not in argv:
        argv += ["--port", "0"]
    log = tmp_path / f"serve-{len(list(tmp_path.glob('serve-*.log')))}.log"
    environ = {k: v for k, v in os.environ.items() if k != "FLOWCORE_TOKENS"}
    environ.update(env or {})
    environ["PYTHONUNBUFFERED"] = "1"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "flowcore_cli", "serve", *argv],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=environ,
        )
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        text = log.read_text("utf-8", "replace")
        for line in text.splitlines():
            found = _READY.search(line.strip())
            if found:
                return Served(found.group(1), found.group(2), proc, db, log)
        if proc.poll() is not None:
            raise ServeFailed(f"flowcore serve exited with {proc.returncode}:\n{text}")
        if time.monotonic() > deadline:
            proc.kill()
            proc.wait(timeout=30)
            raise ServeFailed(f"flowcore serve did not listen in {READY_TIMEOUT_S} s:\n{text}")
        time.sleep(0.05)
