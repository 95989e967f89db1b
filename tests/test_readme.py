"""The README's example runs and prints what its comments say it prints."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from flowcore_cli.main import run as run_in_process

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


def test_readme_handlers_run_the_example_on_the_local_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The handlers section: its tools module and its command run the example's spec,
    and the command prints what the README says. Its handlers read ``call.input``:
    a handler is given the effect."""
    text = README.read_text(encoding="utf-8")
    example = re.search(r"```python\n(.*?)```", text, re.S)
    assert example is not None
    spec = re.search(r'parse_flow\("""\n(.*?)"""\)', example.group(1), re.S)
    assert spec is not None
    tools = re.search(r"```python\n(# greet_tools\.py:.*?)```", text, re.S)
    assert tools is not None, "the README shows no handlers (greet_tools.py)"
    assert "def lookup(call: CallTool)" in tools.group(1)
    shell = re.search(r"```sh\n(flowcore run greet\.yaml [^\n]*)\n# \.\.\. ([^\n]*)\n```", text)
    assert shell is not None
    (tmp_path / "greet.yaml").write_text(spec.group(1), encoding="utf-8")
    (tmp_path / "greet_tools.py").write_text(tools.group(1), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FLOWCORE_DB", raising=False)
    args = shlex.split(shell.group(1))
    assert args[0] == "flowcore"
    assert run_in_process([*args[1:], "--db", str(tmp_path / "greet.db")]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == shell.group(2)
