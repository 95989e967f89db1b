"""tests/ mirrors flowcore/: each folder of the core has its tests' folder.

``tests/language/``, ``tests/decision/`` (with ``tests/decision/constructs/``),
``tests/log/``, ``tests/testkit/`` and ``tests/explore/`` hold the tests of those
parts, beside each other. A test module at the top of ``tests/`` is about the
whole package (the public API, purity, shape, the hosts' use of the core): one
that imports the internals of exactly one part belongs in that part's folder.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CORE = ROOT / "flowcore"
TESTS = ROOT / "tests"

# Top-level modules about the whole package that read one part's internals to
# check a face against them, with the reason they stay at the top.
WHOLE_PACKAGE = {
    "test_api.py": "pins the public faces, and that their values are the language's own",
}


def core_folders() -> list[Path]:
    """Every package folder under flowcore/, relative to it (``decision/constructs`` too)."""
    return sorted(
        init.parent.relative_to(CORE) for init in CORE.rglob("__init__.py") if init.parent != CORE
    )


def parts_imported(source: str) -> set[str]:
    """The parts of flowcore/ (its folders) whose modules ``source`` imports."""
    parts = {p.parts[0] for p in core_folders()}
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            dotted = name.split(".")
            if len(dotted) > 1 and dotted[0] == "flowcore" and dotted[1] in parts:
                found.add(dotted[1])
    return found


def test_the_core_has_the_parts_the_tests_mirror() -> None:
    top = {p.parts[0] for p in core_folders()}
    assert top == {"language", "decision", "log", "testkit", "explore"}


@pytest.mark.parametrize("folder", [p.as_posix() for p in core_folders()])
def test_every_folder_of_the_core_has_its_tests_folder(folder: str) -> None:
    where = TESTS / folder
    assert (where / "__init__.py").is_file(), (
        f"flowcore/{folder}/ has no tests/{folder}/__init__.py"
    )


def test_no_top_level_test_module_holds_one_parts_tests() -> None:
    misplaced = {
        path.name: part
        for path in sorted(TESTS.glob("test_*.py"))
        if path.name not in WHOLE_PACKAGE
        and len(found := parts_imported(path.read_text(encoding="utf-8"))) == 1
        for part in found
    }
    assert not misplaced, "; ".join(
        f"tests/{name} imports only flowcore/{part}/'s modules: it belongs in tests/{part}/"
        for name, part in misplaced.items()
    )
    assert all((TESTS / name).is_file() for name in WHOLE_PACKAGE), sorted(WHOLE_PACKAGE)


@pytest.mark.parametrize(
    ("source", "parts"),
    [
        ("from flowcore.language.spec import Budget", {"language"}),
        ("import flowcore.decision.wire", {"decision"}),
        ("from flowcore import log", {"log"}),
        ("from flowcore.decision import constructs", {"decision"}),
        (
            "from flowcore.explore.search import x\nfrom flowcore.log.records import y",
            {"explore", "log"},
        ),
        ("import flowcore\nfrom flowcore import testing, persist, parse_flow", set()),
        ("from flowcore.testing import Simulator\nfrom .harness import Run", set()),
    ],
)
def test_the_parts_a_module_imports_are_read_from_its_imports(source: str, parts: set[str]) -> None:
    assert parts_imported(source) == parts
