"""The flow language's spec modules stay readable: each ``flowcore/_spec*.py``
is at most 800 lines and holds no function over 120 lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from .shape import long_functions

SPEC_MODULES = sorted((Path(__file__).parent.parent / "flowcore").glob("_spec*.py"))
MAX_MODULE_LINES = 800
MAX_FUNCTION_LINES = 120


def test_the_spec_is_split_into_several_modules() -> None:
    assert len(SPEC_MODULES) > 1, [p.name for p in SPEC_MODULES]


@pytest.mark.parametrize("path", SPEC_MODULES, ids=lambda p: p.name)
def test_spec_module_is_at_most_800_lines(path: Path) -> None:
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_MODULE_LINES, f"{path.name} has {lines} lines"


@pytest.mark.parametrize("path", SPEC_MODULES, ids=lambda p: p.name)
def test_spec_module_has_no_function_over_120_lines(path: Path) -> None:
    long = long_functions(path, MAX_FUNCTION_LINES)
    assert not long, f"{path.name}: {long}"
