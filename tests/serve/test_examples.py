"""The request/response examples of specs/serve.md are what a real server answers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_examples_in_specs_serve_md_are_current() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_serve_examples.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
