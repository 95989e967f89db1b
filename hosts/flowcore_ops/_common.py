"""What the operations share: a host's failures read as the catalogue's,
runs read as the principal may see them, and summaries in the wire's shape."""

from __future__ import annotations

from collections.abc import Awaitable
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import flowcore
from flowcore_handlers import (
    HostFailure,
    HostRefusal,
    NothingToCancel,
    RunSettled,
    UnknownRun,
    UnknownSchedule,
    UnknownUpdate,
)
from flowcore_handlers import RunSummary as HostSummary

from ._declare import Context, OperationError
from ._types import QueryDeclView, RunSummary, UpdateDeclView

__all__ = [
    "declared",
    "epoch_ms",
    "failures",
    "guard",
    "moment",
    "not_anothers",
    "owned",
    "running",
    "summary_of",
]

T = TypeVar("T")

# flowcore's own refusals of what a caller gave (a spec, an input, a value, a
# run id, a fork point...): every error flowcore raises for bad input.
_BAD_INPUT = (flowcore.FlowcoreError, flowcore.DurationError, flowcore.JsonTextError)


@contextmanager
def failures(default: str = "rejected") -> Any:
    """Read a host's failures as the catalogue's: an unknown run or schedule, a
    settled run, a cancel that changes nothing, a refusal; any other failure of
    the host (or bad input flowcore refuses) becomes ``default``."""
    try:
        yield
    except OperationError:
        raise
    except UnknownRun as exc:
        raise OperationError("unknown-run", str(exc)) from None
    except UnknownSchedule as exc:
        raise OperationError("unknown-schedule", str(exc)) from None
    except RunSettled as exc:
        raise OperationError("settled", str(exc)) from None
    except NothingToCancel as exc:
        raise OperationError("nothing-to-cancel", str(exc)) from None
    except HostRefusal as exc:
        raise OperationError("host-refuses", str(exc)) from None
    except UnknownUpdate as exc:
        raise OperationError("unknown-update-id", str(exc)) from None
    except flowcore.UpdateRefused as exc:
        if exc.code == "unknown-update":
            raise OperationError("unknown-update", str(exc), code=exc.code) from None
        raise OperationError("update-refused", str(exc), code=exc.code) from None
    except flowcore.QueryError as exc:
        if exc.code == "unknown-query":
            raise OperationError("unknown-query", str(exc), code=exc.code) from None
        raise OperationError("query-failed", str(exc), code=exc.code) from None
    except flowcore.UpgradeRefused as exc:
        if exc.reason != "diverged":
            code = "settled" if exc.reason == "settled" else default
            raise OperationError(code, str(exc)) from None
        divergence = exc.divergence
        text = str(divergence) if divergence is not None else str(exc)
        why = text.partition(f" at index {exc.index}:")[0] if divergence is not None else text
        raise OperationError(
            "diverged", why, index=exc.index, expected=exc.expected, actual=exc.actual
        ) from None
    except (HostFailure, *_BAD_INPUT) as exc:
        raise OperationError(default, str(exc)) from None


async def guard(call: Awaitable[T], default: str = "rejected") -> T:
    """``await call`` with its failures read as the catalogue's (``failures``)."""
    with failures(default):
        return await call


def declared(flow: flowcore.Flow) -> tuple[list[UpdateDeclView], list[QueryDeclView]]:
    """The updates and queries ``flow`` declares, in the order it declares them."""
    updates = [
        UpdateDeclView(
            name=name,
            description=decl.description,
            input_schema=decl.input_schema,
            examples=list(decl.examples),
        )
        for name, decl in flow.updates.items()
    ]
    queries = [
        QueryDeclView(name=name, description=decl.description, args_schema=decl.args_schema)
        for name, decl in flow.queries.items()
    ]
    return updates, queries


def epoch_ms(moment: datetime | None) -> int | None:
    """An instant as epoch milliseconds (no zone: UTC)."""
    if moment is None:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def moment(ms: int) -> datetime:
    return datetime.fromtimestamp(ms // 1000, tz=UTC) + timedelta(milliseconds=ms % 1000)


async def owned(ctx: Context, run_id: str) -> HostSummary:
    """The run ``run_id``, if the principal may see it and act on it. Another
    principal's run is refused exactly as an unknown one, so that no one learns
    which ids exist."""
    try:
        found = await ctx.host.summary(run_id)
    except (UnknownRun, HostFailure, flowcore.RunIdError):
        found = None
    if found is None or not ctx.principal.owns(found.principal):
        raise OperationError("unknown-run", f"no run {run_id[:200]!r}")
    return found


async def not_anothers(ctx: Context, run_id: str) -> None:
    """Refuse ``run_id`` for a new run when another principal's run holds it: it is
    taken, as any id is, and nothing says whose. (An id the principal's own run
    holds is left to the host: starting or forking again is idempotent.)"""
    try:
        held = await ctx.host.summary(run_id)
    except (HostFailure, flowcore.RunIdError):
        return
    if not ctx.principal.owns(held.principal):
        raise OperationError("run-exists", f"run {run_id!r} already exists: choose another id")


def running(found: HostSummary) -> None:
    """Refuse a run that has settled: it takes no more events."""
    if found.status != "running":
        raise OperationError("settled", f"run {found.run_id!r} has settled ({found.status})")


def summary_of(found: HostSummary, now_ms: int | None = None) -> RunSummary:
    """A host's summary of a run in the wire's shape. ``now_ms``: the host's clock,
    for a running run's duration so far (None: not told)."""
    updated = found.updated_ms
    if found.status == "running":
        end = now_ms
    else:
        end = updated
    return RunSummary(
        run_id=found.run_id,
        flow_id=found.flow_id,
        status=found.status,
        parent=found.parent,
        depth=found.depth,
        principal=found.principal,
        created_at=moment(found.started_ms),
        updated_at=None if updated is None else moment(updated),
        duration_ms=None if end is None else max(0, end - found.started_ms),
        next_index=found.next_index,
        metadata=dict(found.metadata),
    )
