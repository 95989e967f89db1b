"""The shape of the core: module sizes and the longest functions.

    python benchmarks/code_shape.py [--top N] [DIR]

Prints every module under DIR (default ``flowcore/``) with its line count,
the largest class bodies, and the N longest functions or methods, so a
reshape can be compared before and after (run it in a checkout of each).
Then the three measures the hosts are held to (``python
benchmarks/code_shape.py hosts``): no module over 800 lines, no function
over 120, no class with more than 40 methods (sync and async, in its own
body), and what exceeds each.
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

# The limits of the measures (module lines, function lines, methods of a class).
MAX_MODULE = 800
MAX_FUNCTION = 120
MAX_METHODS = 40


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", nargs="?", default="flowcore")
    parser.add_argument("--top", type=int, default=10)
    args = parser.parse_args()
    root = Path(args.dir)
    functions: list[tuple[int, str]] = []
    classes: list[tuple[int, str, int]] = []
    modules: list[tuple[int, str]] = []
    total = 0
    print(f"modules under {root}/ (lines):")
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        lines = text.count("\n")
        total += lines
        modules.append((lines, str(path.relative_to(root))))
        print(f"  {lines:6d}  {path.relative_to(root)}")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                size = (node.end_lineno or node.lineno) - node.lineno + 1
                functions.append((size, f"{path.relative_to(root)}:{node.name}"))
            elif isinstance(node, ast.ClassDef):
                size = (node.end_lineno or node.lineno) - node.lineno + 1
                methods = sum(
                    isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) for n in node.body
                )
                classes.append((size, f"{path.relative_to(root)}:{node.name}", methods))
    print(f"  {total:6d}  in all")
    print("largest classes (lines, methods):")
    for size, name, methods in sorted(classes, reverse=True)[:5]:
        print(f"  {size:6d}  {methods:3d}  {name}")
    print(f"longest {args.top} functions (lines):")
    for size, name in sorted(functions, reverse=True)[: args.top]:
        print(f"  {size:6d}  {name}")
    by_methods = [(methods, name) for _, name, methods in classes]
    print("measures (largest, limit, over the limit):")
    for what, found, limit in (
        ("module lines", modules, MAX_MODULE),
        ("function lines", functions, MAX_FUNCTION),
        ("methods of a class", by_methods, MAX_METHODS),
    ):
        largest = max(found, default=(0, "-"))
        over = sorted((item for item in found if item[0] > limit), reverse=True)
        listed = ", ".join(f"{name} ({n})" for n, name in over) or "none"
        print(f"  {what}: {largest[0]} ({largest[1]}), limit {limit}, over: {listed}")


if __name__ == "__main__":
    main()
