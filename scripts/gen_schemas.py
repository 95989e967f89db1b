"""Write the wire protocol's JSON Schemas to ``specs/schema/``.

Usage: ``python scripts/gen_schemas.py`` from anywhere. The files are derived
from ``flowcore._schema.wire_schemas()``; ``tests/test_wire.py`` fails when the
committed copies go stale.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a plain script, without an installed flowcore
    sys.path.insert(0, str(ROOT))

from flowcore._schema import render_schema, wire_schemas  # noqa: E402

OUT_DIR = ROOT / "specs" / "schema"


def main() -> int:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    for name, schema in sorted(wire_schemas().items()):
        path = OUT_DIR / f"{name}.json"
        text = render_schema(schema)
        old = path.read_text(encoding="utf-8") if path.exists() else None
        if old == text:
            print(f"unchanged {path.relative_to(ROOT)}")
            continue
        path.write_text(text, encoding="utf-8", newline="\n")
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
