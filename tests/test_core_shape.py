"""flowcore/ stays readable: its top holds at most 20 entries (the public faces,
the shared foundations and one folder per part), no module is over 800 lines,
and no function is over 120 lines (specs/architecture.md, the module map)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .shape import long_functions

CORE = Path(__file__).resolve().parent.parent / "flowcore"
MAX_ENTRIES = 20
MAX_MODULE_LINES = 800
MAX_FUNCTION_LINES = 120
MODULES = sorted(CORE.rglob("*.py"))


def _name(path: Path) -> str:
    return str(path.relative_to(CORE))


def test_the_top_of_flowcore_holds_at_most_20_entries() -> None:
    entries = sorted(p.name for p in CORE.iterdir() if p.name != "__pycache__")
    assert len(entries) <= MAX_ENTRIES, entries


def test_the_spec_is_split_by_concern() -> None:
    language = {p.stem for p in (CORE / "language").glob("*.py")}
    assert {"spec", "model", "hooks", "converter", "refs", "positions"} <= language


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_module_is_at_most_800_lines(path: Path) -> None:
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_MODULE_LINES, f"{_name(path)} has {lines} lines"


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_module_has_no_function_over_120_lines(path: Path) -> None:
    long = long_functions(path, MAX_FUNCTION_LINES)
    assert not long, f"{_name(path)}: {long}"
