"""The operations of updates and queries: ask a run (and wait for its reply),
read an update's outcome, list a run's updates, query a run, and start a run
and deliver an update or a signal in one write (specs/language.md §16)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

import flowcore
from flowcore_handlers import UpdateOutcome as HostOutcome

from ._common import failures, guard, not_anothers, owned
from ._declare import Context, OperationError
from ._runs import start_module, summarize
from ._types import (
    QueryInput,
    QueryValue,
    RunInput,
    RunSummary,
    SignalWithStartInput,
    UpdateInput,
    UpdateOutcome,
    UpdateResultInput,
    UpdateWithStartInput,
)

__all__ = [
    "outcome_of",
    "query",
    "signal_with_start",
    "update",
    "update_result",
    "update_with_start",
    "updates",
]


def outcome_of(found: HostOutcome) -> UpdateOutcome:
    """A host's outcome of an update in the wire's shape."""
    return UpdateOutcome(
        run_id=found.run_id,
        update_id=found.update_id,
        name=found.name,
        status=found.status,
        output=found.output,
        error=None if found.error is None else msgspec.to_builtins(found.error),
    )


async def update(ctx: Context, given: UpdateInput) -> UpdateOutcome:
    """Ask a run for an update; its outcome (``running`` when the wait ended first)."""
    await owned(ctx, given.run_id)
    found = await guard(
        ctx.host.update(
            given.run_id,
            given.name,
            given.input,
            given.update_id,
            wait=given.wait,
            timeout_s=given.timeout_s,
            principal=ctx.principal.name,
        )
    )
    return outcome_of(found)


async def update_result(ctx: Context, given: UpdateResultInput) -> UpdateOutcome:
    await owned(ctx, given.run_id)
    found = await guard(
        ctx.host.update_result(
            given.run_id, given.update_id, wait=given.wait, timeout_s=given.timeout_s
        )
    )
    return outcome_of(found)


async def updates(ctx: Context, given: RunInput) -> list[UpdateOutcome]:
    """The run's updates, in the order requested, as its current incarnation
    knows them (an id from before a continue-as-new is left out)."""
    await owned(ctx, given.run_id)
    return [outcome_of(found) for found in await guard(ctx.host.updates(given.run_id))]


async def query(ctx: Context, given: QueryInput) -> QueryValue:
    """A query's value; nothing is written. The run may have settled."""
    await owned(ctx, given.run_id)
    return QueryValue(value=await guard(ctx.host.query(given.run_id, given.name, given.args)))


def _start_options(
    ctx: Context, given: UpdateWithStartInput | SignalWithStartInput
) -> tuple[dict[str, Any], Path]:
    """The start's options as the host takes them, and the flow's spec file."""
    path = ctx.flows(given.flow)
    return {
        "tools": start_module(ctx, given.tools, path),
        "flows": ctx.flow_folders,
        "budget": flowcore.budget_from_wire(msgspec.to_builtins(given.budget)),
        "metadata": given.metadata,
        "priority": given.priority,
        "on_conflict": given.on_conflict,
        "principal": ctx.principal.name,
    }, path


def _started_failure(exc: OperationError) -> OperationError:
    if exc.code == "rejected" and "already exists" in exc.detail:
        return OperationError("run-exists", exc.detail)
    if exc.code == "rejected" and exc.detail.startswith("cannot start"):
        return OperationError("cannot-start", exc.detail)
    return exc


async def update_with_start(ctx: Context, given: UpdateWithStartInput) -> UpdateOutcome:
    """Start the run unless one holds the id, and ask it for the update, in one write."""
    options, path = _start_options(ctx, given)
    await not_anothers(ctx, given.run_id)  # the principal's own run takes the event
    try:
        with failures():
            found = await ctx.host.update_with_start(
                path,
                given.input,
                given.run_id,
                given.name,
                given.update_input,
                given.update_id,
                wait=given.wait,
                timeout_s=given.timeout_s,
                **options,
            )
    except OperationError as exc:
        raise _started_failure(exc) from None
    return outcome_of(found)


async def signal_with_start(ctx: Context, given: SignalWithStartInput) -> RunSummary:
    """Start the run unless one holds the id, and send it the signal, in one write."""
    options, path = _start_options(ctx, given)
    await not_anothers(ctx, given.run_id)  # the principal's own run takes the event
    try:
        with failures():
            run_id = await ctx.host.signal_with_start(
                path,
                given.input,
                given.run_id,
                given.name,
                given.payload,
                given.key,
                **options,
            )
    except OperationError as exc:
        raise _started_failure(exc) from None
    return await summarize(ctx, run_id)
