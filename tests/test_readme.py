"""The README's example runs and prints what its comments say it prints."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def documented_output(code: str) -> list[str]:
    """Each print's documented output: its inline comment, or the comment line after it."""
    lines = code.splitlines()
    out: list[str] = []
    for i, line in enumerate(lines):
        if "print(" not in line:
            continue
        if "# " in line:
            out.append(line.split("# ", 1)[1].strip())
        else:
            follower = lines[i + 1].strip()
            assert follower.startswith("# "), f"print on line {i + 1} is undocumented"
            out.append(follower[2:].strip())
    return out


def test_readme_example_runs_as_documented() -> None:
    match = re.search(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    assert match is not None
    code = match.group(1)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(README), "exec"), {})
    expected = documented_output(code)
    assert len(expected) == 3
    assert out.getvalue().splitlines() == expected
