"""What ``flowcore compare A B`` prints: where the logs of two runs first differ
(the catalogue's ``compare``)."""

from __future__ import annotations

from typing import Any, Final

from rich.text import Text

from flowcore_handlers import Host

from ._derive import View
from ._history import short_json
from ._progress import out

__all__ = ["COMPARE_VIEW"]


def _print(line: str) -> None:
    out.print(Text(line))  # values from runs are shown as they are, never read as markup


def _records(n: int) -> str:
    return f"{n:,} record{'' if n == 1 else 's'}"


async def _compared(host: Host, output: Any, values: dict[str, Any]) -> int | None:
    _print(f"{output.a}: {_records(output.a_count)}")
    _print(f"{output.b}: {_records(output.b_count)}")
    if output.first_difference is None:
        _print("the same, record by record")
        return None
    at = output.first_difference
    indices = "index" if output.differing == 1 else "indices"
    _print(f"the same up to index {at}; {output.differing:,} {indices} of the two differ")
    _print(f"first difference at index {at}: {', '.join(output.fields)}")
    for run_id, record in ((output.a, output.a_record), (output.b, output.b_record)):
        if record is None:
            _print(f"  {run_id}: (no record: its log has ended)")
        else:
            shown = short_json(record.get("data"), 200)
            _print(f"  {run_id}: {record['type']} {shown}")
    return None


COMPARE_VIEW: Final = View(
    "Compare the logs of runs A and B record by record; print where they first differ.\n\n"
    "Records at one index are the same when their type and data are, leaving out"
    " what differs between any two runs: times, each run's own id in keys and"
    " values, and a fork's forkedFrom (specs/serve.md, Compare two runs).",
    metavars={"a": ("A",), "b": ("B",)},
    render=_compared,
    json_help="Print the comparison as JSON (both records there in full).",
)
