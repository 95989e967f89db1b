"""``flowcore serve``: the HTTP API and the web view on a host: a local-host
database (with its worker in the process) or a Temporal namespace (chosen as
every command chooses its host, ``_derive.host_choice``)."""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import click

from flowcore_handlers import RegistryError
from flowcore_local import Durability, HostError, NotAFlowcoreDatabase, db_label

from ._common import CliError, say
from ._derive import HostChoice, host_choice, host_options, open_host
from ._local import db_option, durability_option, trace_option
from ._options import tool_limit_option, tool_limits_value
from ._temporal_session import finish

if TYPE_CHECKING:
    from flowcore_serve import Tokens

__all__ = ["serve"]


@click.command()
@click.pass_context
@click.option("--host", default="127.0.0.1", show_default=True, help="The address to listen on.")
@click.option(
    "--port",
    default=8080,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="The port (0: any free one).",
)
@click.option(
    "--tools",
    multiple=True,
    help="A handler module runs start and resume with (repeatable: a run starts with the"
    " first that has a handler for everything its flow calls, or the one asked for); the"
    " first is the default of runs that recorded none.",
)
@click.option(
    "--flows",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    help="The registry folder: the flow specs POST /api/runs may start, by flow id.",
)
@click.option(
    "--tokens",
    type=click.Path(dir_okay=False, exists=True),
    help="The token file (YAML: tokens: [{token, principal, access}]); else $FLOWCORE_TOKENS;"
    " else one admin token is made for the session and printed in the address.",
)
@click.option(
    "--max-body",
    default=1 << 20,
    show_default=True,
    type=click.IntRange(1024, 1 << 26),
    help="The largest request body, in bytes (413 above it).",
)
@click.option(
    "--body-timeout",
    default=30.0,
    show_default=True,
    type=click.FloatRange(0.1, 3600),
    metavar="SECONDS",
    help="How long a request body may take to arrive (408 after).",
)
@click.option(
    "--max-streams",
    default=32,
    show_default=True,
    type=click.IntRange(1, 100_000),
    help="Event streams (follow, SSE) one token may hold open at once (429 above).",
)
@tool_limit_option
@durability_option
@trace_option
@db_option
def serve(
    ctx: click.Context,
    host: str,
    port: int,
    tools: tuple[str, ...],
    flows: Path | None,
    tokens: str | None,
    max_body: int,
    body_timeout: float,
    max_streams: int,
    tool_limits: tuple[str, ...],
    durability: Durability,
    trace: bool,
    db: Path | str,
    temporal: bool,
    address: str,
    namespace: str,
    task_queue: str,
) -> None:
    """Serve the database over HTTP: the JSON API, its event streams and the web view.

    Runs a worker on the database in the same process, so the runs it starts
    (and every other run of the database) make progress. Prints the address
    to open once it listens; stops on Ctrl-C or SIGTERM, once the worker's
    running handlers have finished. If the worker stops on an error, the
    server stops too, saying why (exit 1). With --temporal (or --address, or
    $FLOWCORE_TEMPORAL_ADDRESS without --db) it serves a Temporal namespace
    instead, with no worker: the runs' workers are Temporal workers.
    """
    values = {
        "temporal": temporal,
        "db": db,
        "address": address,
        "namespace": namespace,
        "task_queue": task_queue,
    }
    choice = host_choice(ctx, values, temporal=False)
    try:
        from flowcore_serve import TokenError, WorkerStopped, load_tokens
        from flowcore_serve import serve as run_server
    except ImportError as exc:  # the extra is not installed
        raise CliError(
            f"flowcore serve needs the serve extra (pip install 'flowcore[serve]'): {exc}"
        ) from None
    limits = tool_limits_value(tool_limits)
    try:
        found = load_tokens(tokens)
    except TokenError as exc:
        raise CliError(str(exc)) from None

    def ready(bound_host: str, bound_port: int) -> None:
        shown = f"[{bound_host}]" if ":" in bound_host else bound_host  # IPv6
        where = f"http://{shown}:{bound_port}/"
        if not ipaddress.ip_address(bound_host).is_loopback:
            say(
                f"listening on {bound_host}, not loopback: tokens cross the network in clear"
                " over plain HTTP; put TLS in front (a reverse proxy)"
            )
        what = f"Temporal namespace {namespace} at {address}" if choice.temporal else db_label(db)
        if found.generated is not None:
            click.echo(f"serving {what} at {where} — open {where}?token={found.generated}")
        else:
            click.echo(f"serving {what} at {where}")

    if choice.temporal:
        _serve_temporal(
            choice, found, ready, host, port, flows, max_body, body_timeout, max_streams
        )

    try:
        asyncio.run(
            run_server(
                db,
                found,
                host=host,
                port=port,
                tools=tools,
                flows=flows,
                body_limit=max_body,
                body_timeout=body_timeout,
                max_streams=max_streams,
                on_ready=ready,
                tracing=trace,
                durability=durability,
                tool_limits=limits,
            )
        )
    except WorkerStopped as exc:
        say(str(exc))
        sys.exit(1)
    except (NotAFlowcoreDatabase, RegistryError, HostError) as exc:
        raise CliError(str(exc)) from None
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise CliError(f"cannot listen on {host}:{port}: the address is in use") from None
        raise CliError(str(exc)) from None
    except KeyboardInterrupt:
        pass


def _serve_temporal(
    choice: HostChoice,
    tokens: Tokens,
    ready: Callable[[str, int], None],
    host: str,
    port: int,
    flows: Path | None,
    body_limit: int,
    body_timeout: float,
    max_streams: int,
) -> NoReturn:
    """Serve the Temporal namespace ``choice`` names (no worker: the runs' workers
    are Temporal's), and end the process as every Temporal command does."""
    from flowcore_serve import serve_host

    async def main() -> None:
        async with open_host(choice) as served:
            await serve_host(
                served,
                tokens,
                host=host,
                port=port,
                flows=flows,
                body_limit=body_limit,
                body_timeout=body_timeout,
                max_streams=max_streams,
                on_ready=ready,
            )

    code = 0
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
    except Exception as exc:  # one line, never a traceback; then os._exit
        say(" ".join(str(exc).split()) or type(exc).__name__)
        code = 2
    finish(code)


# --temporal, --address, --namespace, --task-queue: as every command chooses its host.
serve.params.extend(p for p in host_options(False) if p.name != "db")
