"""The operations that read runs: a page of runs, one run, its events (and a
follow of them), its export, its open questions, what it waits for, its
diagram; and who asks."""

from __future__ import annotations

import base64
import binascii
from collections.abc import AsyncIterator
from typing import Annotated, Any

import msgspec

import flowcore
from flowcore.diagram import build_graph, node_id, to_mermaid
from flowcore_handlers import Registry, RunQuery, missing_handlers

from ._common import epoch_ms, guard, owned, summary_of
from ._declare import Context, OperationError
from ._types import (
    EventsInput,
    FlowList,
    FlowSummary,
    Graph,
    Nothing,
    ProgressInput,
    QuestionList,
    QuestionView,
    RunCounts,
    RunCountsQuery,
    RunInput,
    RunPage,
    RunsQuery,
    RunView,
    Whoami,
)

__all__ = [
    "events",
    "export",
    "flows",
    "follow",
    "graph",
    "progress",
    "progress_follow",
    "questions",
    "run_counts",
    "runs",
    "show",
    "waits",
    "whoami",
]

_Int64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]


def _cursor(host_cursor: str | None) -> str | None:
    """The host's cursor as the wire carries it (opaque, URL-safe)."""
    if host_cursor is None:
        return None
    return base64.urlsafe_b64encode(host_cursor.encode()).decode().rstrip("=")


def _uncursor(text: str) -> str:
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        return raw.decode()
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise OperationError("invalid-cursor", "cursor: not a cursor this server gave") from None


async def runs(ctx: Context, given: RunsQuery) -> RunPage:
    """A page of runs, newest first, of the principal (every run for an admin)."""
    try:
        flowcore.metadata_filters(given.where)
    except flowcore.MetadataFilterError as exc:
        raise OperationError("invalid-request", f"where: {exc}") from None
    query = RunQuery(
        status=given.status,
        flow=given.flow,
        where=list(given.where),
        started_from_ms=epoch_ms(given.created_from),
        started_to_ms=epoch_ms(given.created_to),
        limit=given.limit,
        cursor=None if given.cursor is None else _uncursor(given.cursor),
        principal=None if ctx.principal.admin else ctx.principal.name,
        parent=given.parent,
        id_prefix=given.id_prefix,
    )
    page = await guard(ctx.host.find_runs(query), "invalid-cursor" if given.cursor else "rejected")
    now = ctx.host.now()
    return RunPage(
        runs=[summary_of(found, now) for found in page.runs], next_cursor=_cursor(page.cursor)
    )


async def run_counts(ctx: Context, given: RunCountsQuery) -> RunCounts:
    """How many runs of the principal (every run for an admin) the filters find, by status."""
    try:
        flowcore.metadata_filters(given.where)
    except flowcore.MetadataFilterError as exc:
        raise OperationError("invalid-request", f"where: {exc}") from None
    query = RunQuery(
        flow=given.flow,
        where=list(given.where),
        started_from_ms=epoch_ms(given.created_from),
        started_to_ms=epoch_ms(given.created_to),
        principal=None if ctx.principal.admin else ctx.principal.name,
        parent=given.parent,
        id_prefix=given.id_prefix,
    )
    counts = await guard(ctx.host.count_runs(query))
    return RunCounts(counts=dict(sorted(counts.items())), total=sum(counts.values()))


async def show(ctx: Context, given: RunInput) -> RunView:
    """The run: its summary, what it waits for, its budget, and once settled its
    output or error and the settled report."""
    found = await owned(ctx, given.run_id)
    shown = await guard(ctx.host.show(given.run_id))
    waits = await guard(ctx.host.waits(given.run_id))
    view = RunView(
        run=summary_of(found, ctx.host.now()),
        waits=msgspec.to_builtins(waits),
        budget=shown.get("budget") or {},
        output=shown.get("output"),
        error=shown.get("error"),
        dead_letters=list(shown.get("deadLetters") or []),
        children=list(shown.get("children") or []),
    )
    if found.status != "running":
        # The ``settled`` effect carries the report (left out when no work ran),
        # the ``run.settled`` record after it does not; records about scheduled
        # calls may follow both.
        start = 0 if found.next_index is None else max(0, found.next_index - 64)
        for record in await guard(ctx.host.records(given.run_id, start)):
            if not isinstance(record.data, dict):
                continue
            if record.type == "effect.emitted" and record.data.get("kind") == "settled":
                view.report = record.data.get("report", [])
            elif record.type == "run.settled":
                view.exhausted = record.data.get("exhausted")
    return view


async def events(ctx: Context, given: EventsInput) -> list[flowcore.Record]:
    """The run's log records from index ``start``."""
    await owned(ctx, given.run_id)
    return await guard(ctx.host.records(given.run_id, given.start))


async def follow(ctx: Context, given: EventsInput) -> AsyncIterator[flowcore.Record]:
    """The run's log records from index ``start``, following until it settles."""
    await owned(ctx, given.run_id)
    return ctx.host.events(given.run_id, given.start, follow=True)


async def progress(ctx: Context, given: ProgressInput) -> list[flowcore.Record]:
    """The run's progress stream from index ``start``: what its handlers published."""
    await owned(ctx, given.run_id)
    return await guard(ctx.host.progress_records(given.run_id, given.start))


async def progress_follow(ctx: Context, given: ProgressInput) -> AsyncIterator[flowcore.Record]:
    """The run's progress stream from index ``start``, following until the run settles."""
    await owned(ctx, given.run_id)
    await guard(ctx.host.progress_records(given.run_id, given.start))  # a host that refuses
    return ctx.host.progress(given.run_id, given.start, follow=True)


async def export(ctx: Context, given: RunInput) -> bytes:
    """The run's log as NDJSON (what ``flowcore replay`` reads)."""
    await owned(ctx, given.run_id)
    return await guard(ctx.host.export(given.run_id))


async def questions(ctx: Context, given: RunInput) -> QuestionList:
    await owned(ctx, given.run_id)
    found = await guard(ctx.host.open_questions(given.run_id))
    return QuestionList(
        questions=[
            QuestionView(
                key=q.key,
                question=q.question,
                options=None if q.options is None else list(q.options),
                step=q.step,
            )
            for q in found
        ]
    )


async def waits(ctx: Context, given: RunInput) -> dict[str, Any]:
    """What the run waits for now (``flowcore.Waits``)."""
    await owned(ctx, given.run_id)
    found: dict[str, Any] = msgspec.to_builtins(await guard(ctx.host.waits(given.run_id)))
    return found


async def graph(ctx: Context, given: RunInput) -> Graph:
    """The run's flow as Mermaid text, the nodes it is at now and those done."""
    await owned(ctx, given.run_id)
    flow = await guard(ctx.host.flow(given.run_id))
    now = await guard(ctx.host.waits(given.run_id))
    current: set[str] = set()
    for items in (now.work, now.questions, now.signals, now.timers):
        for item in items:
            if item.step is not None and item.step in flow.by_id:
                current.add(node_id(flow.by_id[item.step]))
    done: set[str] = set()
    for record in await guard(ctx.host.records(given.run_id)):
        if record.type != "effect.emitted" or not isinstance(record.data, dict):
            continue
        key = record.data.get("idempotencyKey")
        if not isinstance(key, str):
            continue
        try:
            step = flowcore.parse_key(key, given.run_id).step
        except ValueError:
            continue
        if step is not None and step in flow.by_id:
            done.add(node_id(flow.by_id[step]))
    return Graph(
        mermaid=to_mermaid(build_graph(flow)), current=sorted(current), done=sorted(done - current)
    )


async def flows(ctx: Context, given: Nothing) -> FlowList:
    """The flows this surface can start, each with the handler modules that run it
    (``Context.tools_modules``), or what the module nearest to it lacks."""
    return FlowList(flows=[_flow_summary(ctx, flow, path) for flow, path in ctx.flow_list()])


def _flow_summary(ctx: Context, flow: flowcore.Flow, path: Any) -> FlowSummary:
    if ctx.tools_modules is None:
        return FlowSummary(flow_id=flow.id, version=flow.version, source=str(path))
    lacking = {
        name: missing_handlers(registry, [flow]) for name, registry in ctx.tools_modules.items()
    }
    modules = [name for name, missing in lacking.items() if not missing]
    if not lacking:  # no module: only a flow that calls nothing runs
        missing = missing_handlers(Registry(), [flow])
    else:
        missing = [] if modules else min(lacking.values(), key=len)
    return FlowSummary(
        flow_id=flow.id,
        version=flow.version,
        source=str(path),
        runnable=not missing,
        missing=missing,
        modules=modules,
    )


async def whoami(ctx: Context, given: Nothing) -> Whoami:
    return Whoami(principal=ctx.principal.name, access=ctx.principal.access)
