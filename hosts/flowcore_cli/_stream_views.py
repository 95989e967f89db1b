"""What ``flowcore progress RUN [--from N] [--follow]`` adds to the catalogue's
``progress`` operation: ``--from``, ``--follow`` (the ``progress-follow``
operation), and a line per item; ``--json`` prints the envelopes as NDJSON."""

from __future__ import annotations

import sys
from typing import Any, Final

import click
import msgspec
from rich.text import Text

import flowcore
from flowcore_handlers import Host
from flowcore_ops import BY_NAME, Operation

from ._derive import View
from ._progress import out

__all__ = ["STREAM_VIEWS"]


def _prepare(op: Operation, values: dict[str, Any]) -> tuple[Operation, dict[str, Any]]:
    return (BY_NAME["progress-follow"] if values["follow"] else op), values


async def _lines(host: Host, output: Any, values: dict[str, Any]) -> int | None:
    """One line per item: its index, its step, its text as it is (a chunk) or its
    JSON; a gap says which items the run's cap dropped."""
    for record in output:
        data = record.data if isinstance(record.data, dict) else {}
        if record.type == "progress.dropped":
            first, count = data.get("from"), data.get("count")
            items = "item" if count == 1 else "items"
            text = f"{record.index}: ({count} {items} from {first} dropped by the run's cap)"
            out.print(Text(text, style="dim"))
            continue
        item = data.get("data")
        text = item if isinstance(item, str) else msgspec.json.encode(item).decode()
        line = Text(f"{record.index} ", style="dim")
        line.append(f"{data.get('step') or data.get('key')}: ", style="cyan")
        line.append(text)
        out.print(line)
    return None


async def _envelopes(host: Host, output: Any, values: dict[str, Any]) -> int | None:
    for record in output:
        sys.stdout.buffer.write(flowcore.encode_record(record))
        sys.stdout.flush()
    return None


STREAM_VIEWS: Final = {
    "progress": View(
        "What RUN's handlers published (its progress stream), from an index; --follow it.\n\n"
        "One line per item: its index, its step, the text published (structured"
        " items as JSON). When the run's cap dropped items, a line says which.",
        options=(
            click.Option(
                ["--follow"], is_flag=True, help="Keep printing new items until the run settles."
            ),
        ),
        names={"start": ("--from", "--start")},
        helps={"start": "The index of the first item printed (resume from the last seen + 1)."},
        prepare=_prepare,
        render=_lines,
        document=_envelopes,
        json_help="Print the items as NDJSON envelopes ({type, index, runId, at, data}).",
    ),
}
