"""specs/operations.md's tables, from the catalogue (``flowcore_ops.CATALOGUE``).

Usage: ``python scripts/gen_operations.py`` rewrites the part of
specs/operations.md between its ``<!-- catalogue -->`` markers and prints how
many files it wrote (0: the document was current);
``tests/ops/test_catalogue_declarations.py`` fails when it is stale.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for _path in (ROOT, ROOT / "hosts"):  # run as a plain script, without an installed flowcore
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from flowcore_ops import CATALOGUE, FAILURES  # noqa: E402

BEGIN, END = "<!-- catalogue -->", "<!-- /catalogue -->"


def tables() -> str:
    lines = [
        "| Operation | Access | Command | HTTP | What it does | Failures |",
        "|---|---|---|---|---|---|",
    ]
    for op in CATALOGUE:
        command = "—" if op.command is None else "`flowcore " + " ".join(op.command) + "`"
        routes = (
            "<br>".join(
                f"`{r.method} {r.path}` {r.status}"
                + ("" if r.running is None else f" ({r.running} while running)")
                for r in op.http
            )
            or "—"
        )
        failures = ", ".join(f"`{code}`" for code in op.failures) or "—"
        lines.append(
            f"| `{op.name}` | {op.access} | {command} | {routes} | {op.summary} | {failures} |"
        )
    lines += [
        "",
        "| Failure | HTTP status | Exit code | Meaning |",
        "|---|---|---|---|",
    ]
    for code, failure in FAILURES.items():
        shown = code if failure.type is None else f"{code}` (type `{failure.type}`)"
        shown = f"`{shown}`" if failure.type is None else f"`{shown}"
        lines.append(f"| {shown} | {failure.status} | {failure.exit} | {failure.meaning} |")
    return "\n".join(lines)


def render(text: str) -> str:
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return f"{head}{BEGIN}\n{tables()}\n{END}{tail}"


def main() -> int:
    path = ROOT / "specs" / "operations.md"
    old = path.read_text(encoding="utf-8")
    new = render(old)
    if new != old:
        path.write_text(new, encoding="utf-8")
    print(f"{int(new != old)} files written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
