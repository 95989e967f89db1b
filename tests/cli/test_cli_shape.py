"""The command package's modules stay small (specs/cli.md).

No module of ``hosts/flowcore_cli/`` is over 800 lines and no function over
120 (``python benchmarks/code_shape.py hosts`` prints the same measures). A
run's progress is three modules by concern (the lines, the questions, the
watch loop) and every name the other modules use is importable from
``_progress``; ``flowcore replay``'s report is printed by named parts.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import flowcore_cli
from flowcore_cli import _progress, _progress_ask, _progress_lines

from ..shape import long_functions

PACKAGE = Path(flowcore_cli.__file__).parent

# The limits of benchmarks/code_shape.py.
MAX_MODULE = 800
MAX_FUNCTION = 120


def _modules() -> list[object]:
    return [pytest.param(path, id=path.name) for path in sorted(PACKAGE.glob("*.py"))]


@pytest.mark.parametrize("path", _modules())
def test_no_module_of_the_command_package_is_over_800_lines(path: Path) -> None:
    lines = path.read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_MODULE, f"{path.name}: {lines} lines"


def test_no_function_of_the_command_package_is_over_120_lines() -> None:
    over = [line for path in sorted(PACKAGE.glob("*.py")) for line in long_functions(path)]
    assert over == []


def test_the_progress_modules_are_split_by_concern_and_progress_exports_them_all() -> None:
    where = {
        "progress_line": _progress_lines,
        "describe": _progress_lines,
        "Printer": _progress_lines,
        "RunTree": _progress_ask,
        "ask": _progress_ask,
        "prompt": _progress_ask,
        "positions": _progress,
        "watch": _progress,
    }
    for name, module in where.items():
        assert getattr(_progress, name).__module__ == module.__name__, name
    for module in (_progress_lines, _progress_ask):
        assert set(module.__all__) <= set(_progress.__all__), module.__name__
    assert all(hasattr(_progress, name) for name in _progress.__all__)
