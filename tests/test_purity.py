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
# flowcore/ is in folders for its parts (specs/architecture.md, the module
# map). Each part may import only the parts below it: the language never
# imports the decision function, the decision function never imports the
# tools over it (log and replay, the test kit, exploration), and no part
# imports the public faces at the top (``flowcore``, ``flowcore.testing``, …)
# or a host. Every file under flowcore/ belongs to a part or is a face.

FOUNDATION = frozenset({"_errors", "_data", "_jsontext"})
ALLOWED: dict[str, frozenset[str]] = {
    "foundation": FOUNDATION,
    "language": FOUNDATION | {"language"},
    "decision": FOUNDATION | {"language", "decision"},
    "log": FOUNDATION | {"language", "decision", "log"},
    "testkit": FOUNDATION | {"language", "decision", "log", "testkit"},
    "explore": FOUNDATION | {"language", "decision", "log", "testkit", "explore"},
}
FACES = frozenset({"__init__", "testing", "schedules", "diagram", "persist"})


def part_of(path: Path) -> str:
    """The part a file under flowcore/ belongs to: a folder, ``foundation``, or ``face``."""
    top = path.relative_to(CORE).parts[0].removesuffix(".py")
    if top in FOUNDATION:
        return "foundation"
    if top in FACES:
        return "face"
    assert top in ALLOWED, f"{path.relative_to(CORE)} is in no part of the module map"
    return top


def _core_imports(path: Path, text: str | None = None) -> set[str]:
    """What ``path`` (or ``text`` as if it were there) imports: flowcore modules by
    their first name under flowcore/, ``__init__`` for the package itself, ``host``
    for any host package."""
    rel = path.relative_to(CORE).with_suffix("").parts
    found: set[str] = set()
    source = path.read_text(encoding="utf-8") if text is None else text
    for node in ast.walk(ast.parse(source)):
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


@pytest.mark.parametrize("path", core_files(), ids=lambda p: str(p.relative_to(CORE)))
def test_each_part_imports_only_the_parts_below_it(path: Path) -> None:
    part = part_of(path)
    imported = _core_imports(path)
    if part == "face":
        assert "host" not in imported, f"{path.relative_to(CORE)} imports a host"
        return
    bad = imported - ALLOWED[part]
    assert not bad, f"{path.relative_to(CORE)} ({part}) imports {sorted(bad)}"


def test_the_layering_scan_sees_each_kind_of_import() -> None:
    assert "decision" in _core_imports(CORE / "decision" / "constructs" / "leaf.py")
    assert "language" in _core_imports(CORE / "decision" / "transitions.py")
    assert "log" in _core_imports(CORE / "log" / "replay.py")
    assert _core_imports(CORE / "language" / "spec.py") <= ALLOWED["language"]
    # and a made-up file of the language that reaches into the interpreter is caught
    probe = CORE / "language" / "probe.py"
    text = "from ..decision.interp import start\nfrom . import expr\n"
    assert _core_imports(probe, text) - ALLOWED["language"] == {"decision"}


def test_every_part_is_looked_at() -> None:
    parts = {part_of(path) for path in core_files()}
    assert parts == {*ALLOWED, "face"}
