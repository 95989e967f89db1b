"""How every ``flowcore temporal ...`` command reaches Temporal: the connection
options (``--address``, ``--task-queue``, ``--namespace`` and their
environment variables), ``with_host`` (connect, run, print, end), and
``finish``, which ends a process that used a Temporal client with
``os._exit`` once its output is flushed: temporalio's native runtime can abort
the interpreter while it finalizes (DESIGN section 7,
temporalio/sdk-python#300).

temporalio is imported only inside ``with_host``, when a command runs.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

import flowcore

from ._common import CliError, internal_error, problem_line, say

if TYPE_CHECKING:
    from flowcore_temporal import TemporalHost

__all__ = [
    "ADDRESS_ENV",
    "NAMESPACE_ENV",
    "QUEUE_ENV",
    "SPECS_ENV",
    "connection_options",
    "finish",
    "specs_option",
    "with_host",
]

T = TypeVar("T")
ADDRESS_ENV = "FLOWCORE_TEMPORAL_ADDRESS"
QUEUE_ENV = "FLOWCORE_TEMPORAL_TASK_QUEUE"
NAMESPACE_ENV = "FLOWCORE_TEMPORAL_NAMESPACE"
SPECS_ENV = "FLOWCORE_TEMPORAL_SPECS"


def finish(code: int) -> NoReturn:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def connection_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    fn = click.option(
        "--namespace",
        envvar=NAMESPACE_ENV,
        default="default",
        show_default=True,
        help=f"Temporal namespace (or ${NAMESPACE_ENV}).",
    )(fn)
    fn = click.option(
        "--task-queue",
        envvar=QUEUE_ENV,
        default="flowcore",
        show_default=True,
        help=f"Task queue of the flowcore workers (or ${QUEUE_ENV}).",
    )(fn)
    fn = click.option(
        "--address",
        envvar=ADDRESS_ENV,
        default="localhost:7233",
        show_default=True,
        help=f"HOST:PORT of the Temporal frontend (or ${ADDRESS_ENV}).",
    )(fn)
    return fn


def _install_specs(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is None:
        return
    if not os.path.isdir(value):
        raise click.BadParameter(f"{value}: not a folder", ctx, param)
    from flowcore_temporal import _registry

    _registry.install(_registry.SpecRegistry(value))


def specs_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--specs DIR``: the spec versions of runs pinned by hash (``run --by-hash``),
    which reading such a run's log from its history needs, as its workers do."""
    return click.option(
        "--specs",
        envvar=SPECS_ENV,
        expose_value=False,
        callback=_install_specs,
        help="Folder of flow specs, every version side by side: for reading the log of a"
        f" run pinned by hash (or ${SPECS_ENV}).",
    )(fn)


def with_host(
    address: str,
    namespace: str,
    task_queue: str,
    body: Callable[[TemporalHost], Awaitable[T]],
    after: Callable[[T], int],
) -> NoReturn:
    """Connect, run ``body``, print through ``after`` (its exit code), and end the process.

    Every path ends in ``os._exit`` once a client may exist; a known error is
    one line on stderr and exit 2.
    """
    try:
        from temporalio.service import RPCError

        import flowcore_temporal as ft
        from flowcore_handlers import RegistryError
    except ImportError as exc:
        raise CliError(
            f"the Temporal host needs the temporal extra (pip install 'flowcore[temporal]'): {exc}"
        ) from None

    async def main() -> T:
        host = await ft.TemporalHost.connect(address, namespace, task_queue)
        return await body(host)

    code = 2
    try:
        result = asyncio.run(main())
        code = after(result)
    except click.ClickException as exc:
        say(exc.format_message())
        code = 2 if exc.exit_code == 1 else exc.exit_code
    except flowcore.SpecError as exc:
        for problem in exc.problems:
            say(problem_line(problem))
    except (
        ft.TemporalHostError,
        flowcore.InputError,
        flowcore.RunIdError,
        flowcore.MetadataFilterError,
        RegistryError,
        OSError,
    ) as exc:
        say(" ".join(str(exc).split()))
    except RPCError as exc:
        say(f"Temporal said: {exc.message}")
    except KeyboardInterrupt:
        say("interrupted")
        code = 130
    except Exception as exc:  # the last line of defence: never a traceback
        say(internal_error(exc))
    finish(code)
