"""The hosts and the command use only flowcore's public API, and no host uses the command.

Every ``.py`` under ``hosts/`` is read with ``ast``. Refused: a private core
module or name, in any spelling (``import flowcore._x``, ``from flowcore._x
import y``, ``from flowcore import _x``, ``flowcore._x``, ``import_module(
"flowcore._x")``), a core module that is not one of the public ones, and any
import of the command package (``flowcore_cli``) outside it. Each finding
names its file and line. specs/architecture.md states the rule.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HOSTS = ROOT / "hosts"

# flowcore's public modules: the package itself and these; everything else
# under flowcore/ (the ``_`` modules and the folders of its parts) is the core's own.
PUBLIC_MODULES = frozenset(
    {"flowcore", "flowcore.diagram", "flowcore.persist", "flowcore.schedules", "flowcore.testing"}
)
# ``from flowcore import decision`` names a part that is not public either.
_PRIVATE_SUBS = frozenset(
    f"flowcore.{part}" for part in ("decision", "explore", "language", "log", "testkit")
)
COMMAND = "flowcore_cli"
_IMPORTERS = frozenset({"import_module", "__import__"})


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _module_problem(module: str, package: str) -> str | None:
    """Why the module named ``module`` may not be imported from ``package``, or None."""
    top = module.partition(".")[0]
    if top == COMMAND and package != COMMAND:
        return f"imports the command package ({module}); hosts never use the command"
    if top == "flowcore" and module not in PUBLIC_MODULES:
        return f"imports {module}, not part of flowcore's public API"
    return None


def violations(source: str, filename: str, package: str) -> list[str]:
    """Every use of a private flowcore name or of the command in ``source``, as
    ``FILE:LINE: why``; ``package`` is the host package the file belongs to."""
    tree = ast.parse(source, filename=filename)
    aliases = {"flowcore"}  # names bound to the flowcore package
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            aliases.update(a.asname for a in node.names if a.name == "flowcore" and a.asname)
    found: list[str] = []

    def say(node: ast.AST, why: str) -> None:
        found.append(f"{filename}:{getattr(node, 'lineno', '?')}: {why}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                problem = _module_problem(alias.name, package)
                if problem is not None:
                    say(node, problem)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None:
            problem = _module_problem(node.module, package)
            if problem is not None:
                say(node, problem)
            elif node.module.partition(".")[0] == "flowcore":
                for alias in node.names:
                    if _private(alias.name) or f"{node.module}.{alias.name}" in _PRIVATE_SUBS:
                        say(node, f"imports {alias.name} from {node.module}: a private name")
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            # ``flowcore.x``: x private, or one of the folders of the core's parts
            if node.value.id in aliases and (
                _private(node.attr) or f"flowcore.{node.attr}" in _PRIVATE_SUBS
            ):
                say(node, f"uses {ast.unparse(node)}: a private name of flowcore")
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            chain = node.value
            while isinstance(chain, ast.Attribute):
                chain = chain.value
            if isinstance(chain, ast.Name) and chain.id in aliases:
                say(node, f"uses {ast.unparse(node)}: a private name of flowcore")
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            first = node.args[0]
            if (
                name in _IMPORTERS
                and isinstance(first, ast.Constant)
                and isinstance(first.value, str)
            ):
                problem = _module_problem(first.value, package)
                if problem is not None:
                    say(node, problem)
    return found


def host_files() -> list[Path]:
    files = sorted(p for p in HOSTS.rglob("*.py") if "node_modules" not in p.parts)
    assert len(files) > 50, "no host sources found"
    return files


def test_no_host_uses_a_private_core_name_or_the_command() -> None:
    found: list[str] = []
    for path in host_files():
        package = path.relative_to(HOSTS).parts[0]
        found += violations(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)), package)
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    "source",
    [
        "import flowcore.language.spec",
        "import flowcore.language.spec as spec",
        "from flowcore.language.times import parse_duration",
        "from flowcore import _interp",
        "from flowcore import Flow, _spec",
        "from flowcore import decision",
        "from flowcore.decision.constructs import leaf",
        "from flowcore.persist import _EMPTY_MAP",
        "import flowcore\nflowcore.language.spec.MAX_MS",
        "import flowcore as fc\nx = fc._log.RUN_STARTED",
        "import flowcore.persist\nflowcore.persist._EMPTY_MAP",
        "import importlib\nimportlib.import_module('flowcore.log.replay')",
        "__import__('flowcore.log.records')",
        "def f():\n    from flowcore.language.metadata import values_from_text",
        "import typing\nif typing.TYPE_CHECKING:\n    from flowcore.decision.state import Sched",
        "from flowcore_cli._temporal import main",
        "import flowcore_cli.main",
        "import importlib\nimportlib.import_module('flowcore_cli')",
    ],
)
def test_each_spelling_is_caught_with_its_line(source: str) -> None:
    found = violations(source, "hosts/flowcore_x/mod.py", "flowcore_x")
    line = source.count("\n") + 1
    assert [f.partition(": ")[0] for f in found] == [f"hosts/flowcore_x/mod.py:{line}"]


@pytest.mark.parametrize(
    "source",
    [
        "import flowcore",
        "from flowcore import Flow, parse_duration, flow_references",
        "from flowcore.schedules import input_for",
        "from flowcore import persist, schedules, diagram, testing",
        "import flowcore\nflowcore.__version__ if hasattr(flowcore, '__version__') else None",
        "from flowcore_handlers._limits import ToolLimit",
        "from ._common import CliError",
    ],
)
def test_the_public_api_is_allowed(source: str) -> None:
    assert violations(source, "hosts/flowcore_x/mod.py", "flowcore_x") == []


def test_the_command_package_may_use_itself() -> None:
    assert violations("from flowcore_cli._errors import invoke", "m.py", COMMAND) == []


def test_python_m_flowcore_temporal_is_flowcore_temporal(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The alias runs the installed `flowcore` command without importing it:
    # the same output and exit code as `flowcore temporal ...`.
    from flowcore_cli.main import run
    from flowcore_temporal.__main__ import main

    def alias(*args: str) -> tuple[int, str, str]:
        monkeypatch.setattr(sys, "argv", ["flowcore_temporal", *args])
        with pytest.raises(SystemExit) as exited:
            main()
        out = capsys.readouterr()
        return int(exited.value.code or 0), out.out, out.err

    def command(*args: str) -> tuple[int, str, str]:
        code = run(["temporal", *args])
        out = capsys.readouterr()
        return code, out.out, out.err

    for args in (("bogus",), ("--help",), ("show",), ("signal", "--help")):
        assert alias(*args) == command(*args), args
    code, _, err = alias("bogus")
    assert code == 2
    assert "No such command 'bogus'. (see 'flowcore temporal --help')" in err
    code, out, _ = alias("--help")
    assert code == 0
    assert out.startswith("Usage: flowcore temporal [OPTIONS] COMMAND")
