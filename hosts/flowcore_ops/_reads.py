"""The operations that read runs: a page of runs, one run, its events (and a
follow of them), its export, its open questions, what it waits for, its
diagram, two runs compared; and who asks."""

from __future__ import annotations

import base64
import binascii
from collections.abc import AsyncIterator
from typing import Annotated, Any

import msgspec

import flowcore
from flowcore.diagram import build_graph, node_id, step_outcomes, to_mermaid
from flowcore_handlers import Registry, RunQuery, missing_handlers

from ._common import declared, epoch_ms, guard, owned, summary_of
from ._declare import Context, OperationError
from ._types import (
    CompareInput,
    Comparison,
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
    "compare",
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


def _forked_from(records: list[flowcore.Record]) -> str | None:
    """The run a fork was forked from: its first record, ``run.started``, says."""
    data = records[0].data if records and records[0].type == "run.started" else None
    source = data.get("forkedFrom") if isinstance(data, dict) else None
    found = source.get("runId") if isinstance(source, dict) else None
    return found if isinstance(found, str) else None


async def show(ctx: Context, given: RunInput) -> RunView:
    """The run: its summary, what it waits for, its budget, and once settled its
    output or error and the settled report."""
    found = await owned(ctx, given.run_id)
    shown = await guard(ctx.host.show(given.run_id))
    waits = await guard(ctx.host.waits(given.run_id))
    records = await guard(ctx.host.records(given.run_id))
    children = shown.get("children")
    if children is None:  # a host that does not list them: a child run is named by its key
        children = [
            r.data["idempotencyKey"]
            for r in records
            if r.type == "effect.emitted"
            and isinstance(r.data, dict)
            and r.data.get("kind") == "run-subflow"
            and not r.data.get("detached")
            and isinstance(r.data.get("idempotencyKey"), str)
        ]
    view = RunView(
        run=summary_of(found, ctx.host.now()),
        waits=msgspec.to_builtins(waits),
        budget=shown.get("budget") or {},
        output=shown.get("output"),
        error=shown.get("error"),
        dead_letters=list(shown.get("deadLetters") or []),
        children=list(children),
        failures=list(shown.get("failures") or []),
    )
    view.usage_by_member, view.usage_by_child = _usage_split(records)
    view.forked_from = _forked_from(records)
    try:
        flow = await guard(ctx.host.flow(given.run_id))
    except OperationError:
        pass  # a spec the host cannot give back (Temporal, pinned elsewhere): none listed
    else:
        view.schedulable = sorted(name for name, decl in flow.tools.items() if decl.schedulable)
        view.updates, view.queries = declared(flow)
    if found.status != "running":
        # The ``settled`` effect carries the report (left out when no work ran),
        # the ``run.settled`` record after it does not; records about scheduled
        # calls may follow both.
        for record in records[-64:]:
            if not isinstance(record.data, dict):
                continue
            if record.type == "effect.emitted" and record.data.get("kind") == "settled":
                view.report = record.data.get("report", [])
            elif record.type == "run.settled":
                view.exhausted = record.data.get("exhausted")
    return view


def _usage_split(
    records: list[flowcore.Record],
) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, int]]]:
    """The usage the log's answers report, by team member (the ``member`` of the
    run-agent effect answered) and by child run (``subflow-settled``)."""
    member_of: dict[str, str] = {}
    by_member: dict[str, dict[str, int]] = {}
    by_child: dict[str, dict[str, int]] = {}
    for record in records:
        data = record.data
        if not isinstance(data, dict) or not isinstance(data.get("idempotencyKey"), str):
            continue
        key = data["idempotencyKey"]
        if record.type == "effect.emitted":
            if data.get("kind") == "run-agent" and isinstance(data.get("member"), str):
                member_of[key] = data["member"]
            continue
        usage = data.get("usage")
        if record.type != "event.reported" or not isinstance(usage, dict):
            continue
        if data.get("kind") == "subflow-settled":
            into = by_child.setdefault(key, {})
        elif key in member_of:
            into = by_member.setdefault(member_of[key], {})
        else:
            continue
        for field, amount in usage.items():
            if isinstance(amount, int):
                into[field] = into.get(field, 0) + amount
    return by_member, by_child


async def events(ctx: Context, given: EventsInput) -> list[flowcore.Record]:
    """The run's log records from index ``start``."""
    await owned(ctx, given.run_id)
    return await guard(ctx.host.records(given.run_id, given.start))


async def follow(ctx: Context, given: EventsInput) -> AsyncIterator[flowcore.Record]:
    """The run's log records from index ``start``, following until it settles."""
    await owned(ctx, given.run_id)
    return ctx.host.events(given.run_id, given.start, follow=True)


# Instants in a record's data: they differ between any two runs, whatever they did.
_INSTANTS = frozenset({"atMs", "untilMs", "createdMs", "dueMs", "bufferedMs"})


def _plain(value: Any, run_id: str) -> Any:
    """``value`` with what always differs between two runs left out: instants,
    and the run's own id (alone, or leading a key or a child run's id)."""
    if isinstance(value, dict):
        return {k: _plain(v, run_id) for k, v in value.items() if k not in _INSTANTS}
    if isinstance(value, list):
        return [_plain(v, run_id) for v in value]
    if isinstance(value, str):
        if value == run_id:
            return "{run}"
        if value.startswith(run_id + "/"):
            return "{run}" + value[len(run_id) :]
    return value


def _comparable(record: flowcore.Record) -> tuple[str, Any]:
    data = record.data
    if record.type == "run.started" and isinstance(data, dict):
        data = {k: v for k, v in data.items() if k != "forkedFrom"}
    return record.type, _plain(data, record.run_id)


def _differs(a: tuple[str, Any], b: tuple[str, Any]) -> list[str]:
    """What differs between two comparable records: ``type``, then the members
    of ``data`` that differ (``data`` itself when either is not an object)."""
    found = ["type"] if a[0] != b[0] else []
    if isinstance(a[1], dict) and isinstance(b[1], dict):
        found += sorted(k for k in a[1].keys() | b[1].keys() if a[1].get(k) != b[1].get(k))
    elif a[1] != b[1]:
        found.append("data")
    return found


async def compare(ctx: Context, given: CompareInput) -> Comparison:
    """Two runs' logs compared record by record (``Comparison`` says what counts
    as a difference), with the first index where they differ."""
    await owned(ctx, given.a)
    await owned(ctx, given.b)
    left = await guard(ctx.host.records(given.a))
    right = await guard(ctx.host.records(given.b))
    first: int | None = None
    fields: list[str] = []
    differing = abs(len(left) - len(right))
    for index, (x, y) in enumerate(zip(left, right, strict=False)):
        found = _differs(_comparable(x), _comparable(y))
        if found:
            differing += 1
            if first is None:
                first, fields = index, found
    if first is None and len(left) != len(right):
        first, fields = min(len(left), len(right)), ["missing"]
    view = Comparison(
        a=given.a,
        b=given.b,
        a_count=len(left),
        b_count=len(right),
        same=min(len(left), len(right)) if first is None else first,
        differing=differing,
        first_difference=first,
        fields=fields,
    )
    if first is not None:
        view.a_record = msgspec.to_builtins(left[first]) if first < len(left) else None
        view.b_record = msgspec.to_builtins(right[first]) if first < len(right) else None
    return view


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
    """The run's flow as Mermaid text, the nodes it is at now and those done, and
    how the run stands at each node (``Graph.outcomes``)."""
    await owned(ctx, given.run_id)
    flow = await guard(ctx.host.flow(given.run_id))
    now = await guard(ctx.host.waits(given.run_id))
    node = {step_id: node_id(step) for step_id, step in flow.by_id.items()}
    current: set[str] = set()
    outcomes: dict[str, str] = {}
    for items, where in (
        (now.work, "running"),
        (now.questions, "waiting"),
        (now.signals, "waiting"),
        (now.timers, "waiting"),
    ):
        for item in items:
            if item.step is not None and item.step in node:
                current.add(node[item.step])
                outcomes.setdefault(node[item.step], where)
    records = await guard(ctx.host.records(given.run_id))
    done: set[str] = set()
    answered: dict[str, str] = {}  # node -> the last answer to its work: done or failed
    for record in records:
        if not isinstance(record.data, dict):
            continue
        key = record.data.get("idempotencyKey")
        if not isinstance(key, str):
            continue
        try:
            step = flowcore.parse_key(key, given.run_id).step
        except ValueError:
            continue
        if step is None or step not in node:
            continue
        if record.type == "effect.emitted":
            done.add(node[step])
        elif record.type == "event.reported":
            kind = record.data.get("kind")
            if kind in ("effect-succeeded", "human-answered", "subflow-settled", "timer-fired"):
                failed = kind == "subflow-settled" and record.data.get("status") != "completed"
                answered[node[step]] = "failed" if failed else "done"
            elif kind == "effect-failed":
                answered[node[step]] = "failed"
    # How each step ended, from the run's state replayed from its log: composite
    # steps and waits met by a buffered signal end without an effect of their own.
    ended: dict[str, str] = {}
    try:
        replayed = flowcore.replay(
            records, flow, raise_on_divergence=False, allow_unknown_types=True
        )
    except flowcore.FlowcoreError:
        replayed = None
    if replayed is not None and replayed.state is not None:
        words = {"succeeded": "done", "failed": "failed", "cancelled": "cancelled"}
        for step_id, how in step_outcomes(replayed.state).items():
            if step_id in node:
                ended[node[step_id]] = words[how]
    # Work the run stopped waiting for when it settled (a question open when it
    # was cancelled) was cancelled with it.
    unanswered = "done" if now.status == "running" else "cancelled"
    for at in sorted(done | set(ended) | set(answered)):
        if at not in current:
            outcomes[at] = ended.get(at) or answered.get(at) or unanswered
    if now.status != "running":
        for at in node.values():
            outcomes.setdefault(at, "skipped")
    return Graph(
        mermaid=to_mermaid(build_graph(flow)),
        current=sorted(current),
        done=sorted(done - current),
        outcomes=dict(sorted(outcomes.items())),
    )


async def flows(ctx: Context, given: Nothing) -> FlowList:
    """The flows this surface can start, each with the handler modules that run it
    (``Context.tools_modules``), or what the module nearest to it lacks."""
    return FlowList(flows=[_flow_summary(ctx, flow, path) for flow, path in ctx.flow_list()])


def _flow_summary(ctx: Context, flow: flowcore.Flow, path: Any) -> FlowSummary:
    updates, queries = declared(flow)
    if ctx.tools_modules is None:
        return FlowSummary(
            flow_id=flow.id,
            version=flow.version,
            source=str(path),
            updates=updates,
            queries=queries,
        )
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
        updates=updates,
        queries=queries,
    )


async def whoami(ctx: Context, given: Nothing) -> Whoami:
    return Whoami(principal=ctx.principal.name, access=ctx.principal.access)
