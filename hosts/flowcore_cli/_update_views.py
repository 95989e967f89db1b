"""What the update and query commands print (the catalogue's ``update``,
``update-result``, ``updates``, ``query``, ``update-with-start`` and
``signal-with-start``).

An update's reply is printed as JSON on stdout; one still running prints how
to fetch its result; one that failed prints its error on stderr and exits 1,
as a refusal does (its reason and code on stderr).
"""

from __future__ import annotations

from typing import Any, Final

import click
import msgspec

from flowcore_handlers import Host
from flowcore_ops import OperationError

from ._common import say
from ._derive import View

__all__ = ["UPDATE_VIEWS", "update_lines"]


def _json(value: Any) -> str:
    return msgspec.json.encode(value).decode()


def update_lines(info: dict[str, Any]) -> list[str]:
    """``show``'s lines of the run's updates (``updates`` of the host's description,
    the local host's: this incarnation's): ``update ID (NAME): STATUS: REPLY``."""
    lines = []
    for update in info.get("updates", []):
        how = update["status"]
        if update["status"] == "completed":
            how += f": {_json(update.get('output'))}"
        elif update.get("error"):
            error = update["error"]
            how += f": {error.get('type')}: {error.get('message', '')}"
        lines.append(f"update {update['updateId']} ({update['name']}): {how}")
    return lines


async def _outcome(host: Host, output: Any, values: dict[str, Any]) -> int | None:
    """The reply as JSON; a line for an update still running; the error (exit 1)."""
    if output.status == "completed":
        click.echo(_json(output.output))
        return None
    if output.status == "running":
        click.echo(
            f"update {output.update_id} of run {output.run_id} is running: `flowcore"
            f" update-result {output.run_id} {output.update_id} --wait` waits for its reply"
        )
        return None
    error = output.error or {}
    say(
        f"update {output.update_id} ({output.name}) of run {output.run_id} failed:"
        f" {error.get('type', 'error')}: {error.get('message', '')}"
    )
    return 1


async def _document(host: Host, output: Any, values: dict[str, Any]) -> int | None:
    """``--json``: the outcome; exit 1 for a failed update."""
    click.echo(_json(output))
    return 1 if output.status == "failed" else None


async def _list(host: Host, output: Any, values: dict[str, Any]) -> int | None:
    for found in output:
        if found.status == "completed":
            tail = _json(found.output)
        elif found.status == "failed":
            error = found.error or {}
            tail = f"{error.get('type', 'error')}: {error.get('message', '')}"
        else:
            tail = ""
        click.echo(f"{found.update_id}  {found.name}  {found.status}  {tail}".rstrip())
    return None


async def _value(host: Host, output: Any, values: dict[str, Any]) -> int | None:
    click.echo(_json(output.value))
    return None


async def _run_id(host: Host, output: Any, values: dict[str, Any]) -> int | None:
    click.echo(output.run_id)
    return None


def _refused(exc: OperationError, values: dict[str, Any]) -> str:
    """A refusal's reason, with its code (``validator``, ``limit``...)."""
    code = exc.extra.get("code")
    return f"{exc.detail} ({code})" if code and code not in exc.detail else exc.detail


_WAIT = "Wait for the update's reply (--no-wait: answer once it is accepted)."
_TIMEOUT = "Wait at most S seconds; the update is then still running."
_ID = "The update's id: the same id again runs nothing and answers the first reply."
_NAMES: Final = {
    "wait": ("--wait/--no-wait",),
    "timeout_s": ("--timeout",),
    "update_id": ("--id",),
}
_HELPS: Final = {"wait": _WAIT, "timeout_s": _TIMEOUT, "update_id": _ID}
_FLOWS = click.Option(
    ["--flows"],
    multiple=True,
    type=click.Path(exists=True),
    help="More spec files or directories that subflows may name (repeatable).",
)

UPDATE_VIEWS: Final[dict[str, View]] = {
    "update": View(
        "Ask RUN for update NAME with --input and print its reply (JSON).\n\n"
        "The update runs inside the run (a worker must run its work); the command"
        " waits for its reply unless --no-wait. A refusal (an unknown update, an"
        " input or validator that says no, a limit, a run ending) prints why and"
        " writes nothing (exit 1; exit 2 for an unknown update or run). A failed"
        " update prints its error (exit 1).",
        names=_NAMES,
        helps={**_HELPS, "input": "The update's input as JSON; @FILE, or - for stdin."},
        render=_outcome,
        document=_document,
        explain=_refused,
    ),
    "update-result": View(
        "Print the outcome of RUN's update ID: its reply (JSON), or that it runs.",
        names={"timeout_s": ("--timeout",)},
        helps={"wait": "Wait until the update ends.", "timeout_s": _TIMEOUT},
        render=_outcome,
        document=_document,
    ),
    "updates": View(
        "RUN's updates in the order requested: id, name, status, reply or error.",
        render=_list,
    ),
    "query": View(
        "Print the value (JSON) of RUN's query NAME with --args; nothing is written.",
        helps={"args": "The query's args as JSON; @FILE, or - for stdin."},
        render=_value,
        explain=_refused,
    ),
    "update-with-start": View(
        "Start a run of FLOW as --run-id unless it exists, and ask it for update NAME;"
        " print the reply.\n\n"
        "The start and the update are one transaction: a refused update starts no run."
        " --on-conflict refuse refuses a run holding the id; use-existing (the"
        " default) asks that run. Then as `update`.",
        options=(_FLOWS,),
        names=_NAMES,
        helps={
            **_HELPS,
            "input": "The run's input as JSON, if it starts.",
            "update_input": "The update's input as JSON.",
        },
        render=_outcome,
        document=_document,
        explain=_refused,
        creates=True,
    ),
    "signal-with-start": View(
        "Start a run of FLOW as --run-id unless it exists, and send it signal NAME;"
        " print the run id.\n\n"
        "The start and the signal are one transaction: a signal the flow never waits for"
        " starts no run.",
        options=(_FLOWS,),
        helps={"input": "The run's input as JSON, if it starts.", "payload": "As JSON."},
        render=_run_id,
        creates=True,
    ),
}
