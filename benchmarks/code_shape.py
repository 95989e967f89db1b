"""The shape of the core: module sizes and the longest functions.

    python benchmarks/code_shape.py [--top N] [DIR]

Prints every module under DIR (default ``flowcore/``) with its line count,
the largest class bodies, and the N longest functions or methods, so a
reshape can be compared before and after (run it in a checkout of each).
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", nargs="?", default="flowcore")
    parser.add_argument("--top", type=int, default=10)
    args = parser.parse_args()
    root = Path(args.dir)
    functions: list[tuple[int, str]] = []
    classes: list[tuple[int, str, int]] = []
    total = 0
    print(f"modules under {root}/ (lines):")
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        lines = text.count("\n")
        total += lines
        print(f"  {lines:6d}  {path.relative_to(root)}")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                size = (node.end_lineno or node.lineno) - node.lineno + 1
                functions.append((size, f"{path.relative_to(root)}:{node.name}"))
            elif isinstance(node, ast.ClassDef):
                size = (node.end_lineno or node.lineno) - node.lineno + 1
                methods = sum(isinstance(n, ast.FunctionDef) for n in node.body)
                classes.append((size, f"{path.relative_to(root)}:{node.name}", methods))
    print(f"  {total:6d}  in all")
    print("largest classes (lines, methods):")
    for size, name, methods in sorted(classes, reverse=True)[:5]:
        print(f"  {size:6d}  {methods:3d}  {name}")
    print(f"longest {args.top} functions (lines):")
    for size, name in sorted(functions, reverse=True)[: args.top]:
        print(f"  {size:6d}  {name}")


if __name__ == "__main__":
    main()
