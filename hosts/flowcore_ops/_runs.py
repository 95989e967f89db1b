"""The operations that change runs: start, signal, answer, cancel, resume,
fork, upgrade, delete, prune."""

from __future__ import annotations

from pathlib import Path

import msgspec

import flowcore
from flowcore_handlers import Deleted, missing_handlers, tools_module_name

from ._common import epoch_ms, failures, guard, not_anothers, owned, running, summary_of
from ._declare import Context, OperationError
from ._types import (
    AnswerInput,
    CancelInput,
    DeletedView,
    DeleteInput,
    ForkInput,
    PruneInput,
    ResumeInput,
    RunSummary,
    SignalInput,
    SignalKeyInput,
    SignalledRuns,
    SpecVersion,
    StartInput,
    UpgradeInput,
    UpgradeView,
)

__all__ = [
    "answer",
    "cancel",
    "delete",
    "fork",
    "prune",
    "resume",
    "signal",
    "signal_key",
    "start",
    "start_module",
    "summarize",
    "upgrade",
]


async def summarize(ctx: Context, run_id: str) -> RunSummary:
    """The run's summary now, in the wire's shape."""
    found = await guard(ctx.host.summary(run_id))
    return summary_of(found, ctx.host.now())


def _server_module(ctx: Context, asked: str) -> str:
    """``asked`` as the server names it, if it is one of its handler modules."""
    name = tools_module_name(asked) or asked
    if ctx.tools_modules is not None and name not in ctx.tools_modules:
        known = ", ".join(ctx.tools_modules) or "none"
        raise OperationError(
            "invalid-request", f"tools: {asked!r} is not a handler module of this server ({known})"
        )
    return name


def runnable_by(ctx: Context, flow: flowcore.Flow) -> dict[str, list[str]]:
    """What each of the server's handler modules lacks to run ``flow`` (empty: it
    runs it), in the server's order (``flowcore_handlers.missing_handlers``)."""
    return {
        name: missing_handlers(registry, [flow])
        for name, registry in (ctx.tools_modules or {}).items()
    }


def start_module(ctx: Context, tools: str | None, path: Path) -> str | None:
    """The handler module a run starts with: ``tools`` if asked for, else on a server
    the first of its modules that has a handler for everything the flow calls."""
    if tools is not None:
        return _server_module(ctx, tools)
    if not ctx.tools_modules:
        return None  # the host's default
    try:
        flow = flowcore.parse_flow(path.read_text(encoding="utf-8"), str(path))
    except (OSError, UnicodeDecodeError, flowcore.SpecError):
        return None  # the host says what is wrong with the spec
    lacking = runnable_by(ctx, flow)
    for name, missing in lacking.items():
        if not missing:
            return name
    least = min(lacking.values(), key=len)
    raise OperationError(
        "cannot-start",
        f"no handler module of this server runs flow {flow.id!r}: "
        + ", ".join(f"no handler for {what}" for what in least),
    )


async def start(ctx: Context, given: StartInput) -> RunSummary:
    """Start a run; the existing run's summary where ``useExisting`` finds one.
    An id another principal's run holds is taken, as any id is: nothing says whose."""
    path = ctx.flows(given.flow)
    tools = start_module(ctx, given.tools, path)
    if given.run_id is not None:
        await not_anothers(ctx, given.run_id)
    budget = flowcore.budget_from_wire(msgspec.to_builtins(given.budget))
    try:
        with failures("cannot-start"):
            run_id = await ctx.host.start(
                path,
                given.input,
                given.run_id,
                flows=ctx.flow_folders,
                budget=budget,
                metadata=given.metadata,
                priority=given.priority,
                dedup_key=given.dedup_key,
                on_conflict=given.on_conflict,
                principal=ctx.principal.name,
                tools=tools,
            )
    except OperationError as exc:
        if exc.code == "cannot-start" and "already exists" in exc.detail:
            raise OperationError("run-exists", exc.detail) from None
        raise
    return await summarize(ctx, run_id)


async def signal(ctx: Context, given: SignalInput) -> RunSummary:
    found = await owned(ctx, given.run_id)
    running(found)
    await _event(
        ctx, given.run_id, ctx.host.signal(given.run_id, given.name, given.payload, given.key)
    )
    return await summarize(ctx, given.run_id)


async def signal_key(ctx: Context, given: SignalKeyInput) -> SignalledRuns:
    runs = await guard(ctx.host.signal_key(given.name, given.key, given.payload))
    return SignalledRuns(runs=list(runs))


async def answer(ctx: Context, given: AnswerInput) -> RunSummary:
    """Answer an open question named by its key, its key relative to the run, or its
    step (when that step has one open question)."""
    found = await owned(ctx, given.run_id)
    running(found)
    waits = await guard(ctx.host.waits(given.run_id))
    prefix = given.run_id + "/"
    matches = [
        q for q in waits.questions if given.key in (q.key, q.key.removeprefix(prefix), q.step)
    ]
    if not matches:
        raise OperationError(
            "no-open-question",
            f"run {given.run_id!r} has no open question {given.key!r}",
            open_questions=[q.key.removeprefix(prefix) for q in waits.questions],
        )
    if len(matches) > 1:
        raise OperationError(
            "ambiguous-question",
            f"step {given.key!r} has {len(matches)} open questions: give the key of one",
            open_questions=[q.key.removeprefix(prefix) for q in matches],
        )
    question = matches[0]
    if question.options is not None and given.answer not in question.options:
        raise OperationError(
            "not-an-option",
            f"the answer to {question.key.removeprefix(prefix)!r} must be one of its options",
            options=list(question.options),
        )
    answering = ctx.host.answer(given.run_id, question.key, given.answer, ctx.principal.name)
    await _event(ctx, given.run_id, answering)
    return await summarize(ctx, given.run_id)


async def _event(ctx: Context, run_id: str, call: object) -> None:
    """Deliver an event; a run that settled meanwhile is ``settled``, any other
    refusal ``rejected``."""
    try:
        with failures():
            await call  # type: ignore[misc]
    except OperationError as exc:
        if exc.code == "rejected":
            now = await guard(ctx.host.summary(run_id))
            if now.status != "running":
                raise OperationError(
                    "settled", f"run {run_id!r} has settled ({now.status})"
                ) from None
        raise


async def cancel(ctx: Context, given: CancelInput) -> RunSummary:
    """A cancel that would change nothing (the run has settled, or compensates
    already) writes nothing and is refused."""
    await owned(ctx, given.run_id)
    try:
        with failures():
            await ctx.host.cancel(given.run_id, given.reason)
    except OperationError as exc:
        if exc.code == "nothing-to-cancel":
            now = await guard(ctx.host.summary(given.run_id))
            if now.status != "running":
                raise OperationError("settled", exc.detail) from None
        raise
    return await summarize(ctx, given.run_id)


async def resume(ctx: Context, given: ResumeInput) -> RunSummary:
    tools = None if given.tools is None else _server_module(ctx, given.tools)
    await owned(ctx, given.run_id)
    await guard(ctx.host.resume(given.run_id, tools))
    return await summarize(ctx, given.run_id)


async def fork(ctx: Context, given: ForkInput) -> RunSummary:
    """The new run's summary. The new run belongs to whoever owns the source."""
    await owned(ctx, given.run_id)
    if given.new_run_id is not None:
        await not_anothers(ctx, given.new_run_id)
    # The same fork again gives the run it made; the host refuses another under that id.
    try:
        new_run_id = await guard(
            ctx.host.fork(
                given.run_id,
                at=given.at,
                from_step=given.from_step,
                new_run_id=given.new_run_id,
                cancel_source=given.cancel_source,
            )
        )
    except OperationError as exc:
        if exc.code == "rejected" and "already exists" in exc.detail:
            raise OperationError("run-exists", exc.detail) from None
        raise
    return await summarize(ctx, new_run_id)


async def upgrade(ctx: Context, given: UpgradeInput) -> UpgradeView:
    """Move the run to the flow in ``flow`` once its log replays against it. A log
    that diverges is ``diverged`` (the run stays on its version)."""
    await owned(ctx, given.run_id)
    path = ctx.flows(given.flow)
    before = await guard(ctx.host.flow(given.run_id))
    made = await guard(ctx.host.upgrade(given.run_id, path, dry_run=given.dry_run))
    return UpgradeView(
        run_id=given.run_id,
        flow_id=made.flow_id,
        moved=made.changed and not given.dry_run,
        changed=made.changed,
        dry_run=given.dry_run,
        from_=SpecVersion(version=before.version, spec_hash=made.from_spec_hash),
        to=SpecVersion(version=made.version, spec_hash=made.spec_hash),
        at=made.at,
        pending=[flowcore.effect_to_wire(e) for e in made.pending],
    )


def _deleted(done: Deleted) -> DeletedView:
    return DeletedView(
        roots=list(done.roots),
        runs=list(done.runs),
        rows=dict(done.rows),
        cancelled=list(done.cancelled),
        dry_run=done.dry_run,
    )


async def delete(ctx: Context, given: DeleteInput) -> DeletedView:
    await owned(ctx, given.run_id)
    return _deleted(await guard(ctx.host.delete(given.run_id, given.force)))


async def prune(ctx: Context, given: PruneInput) -> DeletedView:
    before = epoch_ms(given.settled_before)
    assert before is not None
    return _deleted(await guard(ctx.host.prune(before, given.statuses, dry_run=given.dry_run)))
