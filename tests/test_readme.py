"""The README's example runs and prints what its comments say it prints."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import subprocess
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from flowcore_cli.main import run as run_in_process

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


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


def project() -> dict[str, object]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        table: dict[str, object] = tomllib.load(f)["project"]
    return table


def names(requirements: object) -> set[str]:
    """The distributions a list of requirements names (canonical names, no versions)."""
    assert isinstance(requirements, list)
    return {canonicalize_name(Requirement(r).name) for r in requirements}


def test_readme_extras_table_says_what_each_extra_brings() -> None:
    """The Extras section has a row per extra of pyproject.toml (and one for no extra), and
    each row's packages are what the extra brings: the table stays true when an extra
    changes. ``dev`` says it brings the other extras but ``bench``, with tools: so it does."""
    text = README.read_text(encoding="utf-8")
    section = re.search(r"\n## Extras\n(.*?)(?=\n## )", text, re.S)
    assert section is not None, "the README has no Extras section"
    rows = re.findall(r"^\| (\(none\)|`[\w-]+`) \| (.*?) \| .*? \|$", section.group(1), re.M)
    table = {extra.strip("`"): set(re.findall(r"`([^`]+)`", brings)) for extra, brings in rows}
    meta = project()
    extras = meta["optional-dependencies"]
    assert isinstance(extras, dict)
    assert set(table) == {"(none)", *extras}
    assert {canonicalize_name(n) for n in table.pop("(none)")} == names(meta["dependencies"])
    assert "pip install 'flowcore[" in section.group(1)
    table.pop("dev")
    for extra, brought in table.items():
        assert {canonicalize_name(n) for n in brought} == names(extras[extra]), extra
    others = set().union(*(names(extras[e]) for e in extras if e not in ("dev", "bench")))
    assert others <= names(extras["dev"])


BLOCKED_RUN = """
import sys

blocked = set(sys.argv[1:])


class NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in blocked:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, NotInstalled())
import flowcore
import flowcore.testing
from flowcore_cli.main import run

raise SystemExit(run(["--help"]))
"""


def test_flowcore_command_runs_without_any_extra() -> None:
    """What the Extras section promises of ``pip install flowcore``: the command (its
    ``--help``), ``flowcore`` and ``flowcore.testing`` import with no extra's package
    importable (each extra's own distributions made unimportable in a fresh process)."""
    meta = project()
    extras = meta["optional-dependencies"]
    assert isinstance(extras, dict)
    only_extras = set().union(*(names(r) for r in extras.values())) - names(meta["dependencies"])
    modules = {
        module
        for module, dists in packages_distributions().items()
        if any(canonicalize_name(d) in only_extras for d in dists)
    }
    assert {"hypothesis", "temporalio", "litestar"} <= modules  # what dev installs, found
    done = subprocess.run(
        [sys.executable, "-c", BLOCKED_RUN, *sorted(modules)],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Usage: flowcore"), done.stdout
