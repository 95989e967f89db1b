"""The code-shape limits the tests hold packages to (as benchmarks/code_shape.py
prints them): a module at most 800 lines, a function at most 120, a class at
most 40 methods."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

MAX_MODULE = 800
MAX_FUNCTION = 120
MAX_METHODS = 40


def long_functions(path: Path, limit: int = MAX_FUNCTION) -> list[str]:
    """``FILE:NAME: N lines`` for each function of ``path`` over ``limit`` lines."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            size = (node.end_lineno or node.lineno) - node.lineno + 1
            if size > limit:
                found.append(f"{path.name}:{node.name}: {size} lines")
    return found


def over_limits(paths: Iterable[Path]) -> list[str]:
    """What in ``paths`` is over a limit: modules, functions, classes' methods."""
    over: list[str] = []
    for path in paths:
        text = path.read_text(encoding="utf-8")
        if (lines := text.count("\n")) > MAX_MODULE:
            over.append(f"{path.name}: {lines} lines")
        over += long_functions(path)
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef):
                methods = sum(
                    isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) for n in node.body
                )
                if methods > MAX_METHODS:
                    over.append(f"{path.name}:{node.name}: {methods} methods")
    return over
