"""The core stays pure: nothing under flowcore/ does I/O, reads a clock or
draws a random number. Two checks: a scan of every import and call in the
source, and a fresh interpreter that imports flowcore and runs a flow with the
I/O and randomness modules made unimportable."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parent.parent / "flowcore"

FORBIDDEN_MODULES = {
    "asyncio",
    "concurrent",
    "http",
    "io",
    "logging",
    "multiprocessing",
    "os",
    "pathlib",
    "random",
    "secrets",
    "select",
    "selectors",
    "shutil",
    "signal",
    "socket",
    "sqlite3",
    "ssl",
    "subprocess",
    "sys",
    "tempfile",
    "threading",
    "time",
    "urllib",
    "uuid",
}
FORBIDDEN_CALLS = {"open", "print", "input", "hash", "exec", "eval", "breakpoint", "id"}
FORBIDDEN_ATTRS = {"now", "utcnow", "today", "fromtimestamp", "getrandbits", "urandom"}


def core_files() -> list[Path]:
    files = sorted(CORE.rglob("*.py"))
    assert files, "no core sources found"
    return files


def violations(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[str] = []
    for node in ast.walk(tree):
        where = f"{path.name}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in FORBIDDEN_MODULES:
                    found.append(f"{where}: import {alias.name}")
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and (node.module or "").split(".")[0] in FORBIDDEN_MODULES:
                found.append(f"{where}: from {node.module} import ...")
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in FORBIDDEN_CALLS | {"__import__"}:
                found.append(f"{where}: call to {func.id}()")
            if isinstance(func, ast.Attribute) and func.attr in FORBIDDEN_ATTRS:
                found.append(f"{where}: call to .{func.attr}()")
    return found


@pytest.mark.parametrize("path", core_files(), ids=lambda p: p.name)
def test_core_module_is_pure(path: Path) -> None:
    assert violations(path) == []


def test_the_scan_catches_impurity(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import time\nfrom os import path\nimport datetime\n"
        "x = datetime.datetime.now()\ny = hash('a')\n",
        encoding="utf-8",
    )
    assert violations(bad) == [
        "bad.py:1: import time",
        "bad.py:2: from os import ...",
        "bad.py:4: call to .now()",
        "bad.py:5: call to hash()",
    ]


def test_flowcore_runs_with_io_and_randomness_unimportable() -> None:
    blocked = [
        "asyncio",
        "sqlite3",
        "socket",
        "random",
        "secrets",
        "subprocess",
        "ssl",
        "select",
        "selectors",
        "multiprocessing",
        "tempfile",
    ]
    script = textwrap.dedent(
        f"""
        import sys
        for name in {blocked!r}:
            sys.modules[name] = None  # any import of it now raises ImportError
        import flowcore
        flow = flowcore.parse_flow(
            "flow: f\\ntools: {{t: {{}}}}\\nsteps:\\n  - id: a\\n    call_tool: {{tool: t}}\\n"
        )
        d = flowcore.start(flow, {{}}, run_id="r", now_ms=0)
        d = flowcore.advance(
            d.state, flowcore.EffectSucceeded(idempotency_key="r/a#1", output=1, at_ms=1)
        )
        print(d.effects[0].status)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "completed"


# --- layering --------------------------------------------------------------------------
#
# The decision function (everything ``start`` and ``advance`` run, and the
# views and persistence helpers over a state) never depends on how runs are
# stored or replayed: no module of it imports the log codec, replay, or a host.

DECISION = {
    "_data",
    "_driver",
    "_ending",
    "_errors",
    "_expr",
    "_interp",
    "_keys",
    "_outcome",
    "_query",
    "_results",
    "_spec",
    "_spec_converter",
    "_spec_hooks",
    "_spec_model",
    "_spec_positions",
    "_spec_refs",
    "_state",
    "_transitions",
    "_txn",
    "_validate",
    "_wire",
    "constructs",
    "persist",
}
STORAGE = {"_log", "_replay", "_trajectory", "_report", "_sim", "testing", "_testkit"}


def _core_imports(path: Path) -> set[str]:
    """What ``path`` imports: flowcore modules by their first name under flowcore/,
    ``__init__`` for the package itself, ``host`` for any host package."""
    rel = path.relative_to(CORE).with_suffix("").parts
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.level > 0:
            base = list(rel[: len(rel) - node.level])  # the package it is relative to
            parts = [*base, *(node.module.split(".") if node.module else [])]
            if parts:
                found.add(parts[0])
            else:  # ``from . import x``
                found.update(alias.name for alias in node.names)
            continue
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        for name in names:
            top, _, rest = name.partition(".")
            if top == "flowcore":
                found.add(rest.split(".")[0] if rest else "__init__")
            elif top.startswith("flowcore_"):
                found.add("host")
    return found


def test_the_decision_function_never_imports_storage_replay_or_hosts() -> None:
    seen = 0
    for path in sorted(CORE.rglob("*.py")):
        top = path.relative_to(CORE).parts[0].removesuffix(".py")
        if top not in DECISION:
            continue
        seen += 1
        bad = _core_imports(path) & (STORAGE | {"host", "__init__"})
        assert not bad, f"{path.relative_to(CORE)} imports {sorted(bad)}"
    assert seen >= 25  # every module of the decision function was looked at


def test_the_layering_scan_sees_an_import_of_the_log() -> None:
    probe = CORE / "constructs" / "leaf.py"
    assert "_state" in _core_imports(probe)
    assert "_txn" in _core_imports(CORE / "_transitions.py")
    assert "_log" in _core_imports(CORE / "_replay.py")
