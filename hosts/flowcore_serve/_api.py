"""The operations of the HTTP API, on one open ``LocalHost``.

Every run belongs to the principal that started it (its child runs too);
to another principal it is an unknown run (404, the same answer as for an id
no run has, so that no one learns which ids exist); an admin may act on every
run. The statuses are the ones a client expects: 404 an unknown run or
schedule, 409 a run already settled (or a question no longer open), 422 bad
input (an answer that is not one of the options lists them), 413 a body too
large, 408 a body too slow, 429 one event stream too many.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from collections.abc import AsyncGenerator, AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any
from urllib.parse import quote

import attrs
import msgspec
from litestar import Response
from litestar.response import ServerSentEvent, Stream
from litestar.response.sse import ServerSentEventMessage

import flowcore
from flowcore.diagram import build_graph, node_id, to_mermaid
from flowcore_local import HostError, LocalHost, NothingToCancel, RunRow

from ._flows import FlowFolder
from ._http import ApiError, Context, Encoded, json_response
from ._routes import Operation
from ._types import (
    AnswerBody,
    BackfillBody,
    CancelBody,
    FlowList,
    FlowSummary,
    Graph,
    RunPage,
    RunsQuery,
    RunSummary,
    RunView,
    ScheduleChange,
    ScheduledCallList,
    ScheduleList,
    SignalBody,
    StartBody,
    StreamQuery,
    Whoami,
)

__all__ = ["Api"]

NDJSON = "application/x-ndjson"
# A comment line this often on a quiet Server-Sent Events stream keeps proxies
# from closing it.
PING_S = 15.0


def _epoch_ms(moment: datetime | None) -> int | None:
    if moment is None:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def _moment(ms: int) -> datetime:
    return datetime.fromtimestamp(ms // 1000, tz=UTC) + timedelta(milliseconds=ms % 1000)


def _cursor(row: RunRow) -> str:
    raw = msgspec.json.encode([row.created_ms, row.run_id])
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


# What SQLite's INTEGER holds: a larger number in a cursor is a forged one.
_Int64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]


def _uncursor(text: str) -> tuple[int, str]:
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        created, run_id = msgspec.json.decode(raw, type=tuple[_Int64, str])
    except (binascii.Error, ValueError, msgspec.DecodeError):
        raise ApiError(422, "invalid-cursor", "cursor: not a cursor this server gave") from None
    return created, run_id


@attrs.define
class Api:
    host: LocalHost
    flows: FlowFolder
    closing: asyncio.Event = attrs.field(factory=asyncio.Event)  # set: the server shuts down

    # --- helpers ---------------------------------------------------------------------

    async def summarize(self, row: RunRow) -> RunSummary:
        """``summary`` with the run's metadata read from the database."""
        found = await self.host.metadata_of([row.run_id])
        return self.summary(row, found.get(row.run_id, {}))

    def summary(self, row: RunRow, metadata: dict[str, Any]) -> RunSummary:
        end = row.updated_ms if row.status != "running" else self.host.now()
        return RunSummary(
            run_id=row.run_id,
            flow_id=row.flow_id,
            status=row.status,
            parent=row.parent_run,
            depth=row.depth,
            principal=row.principal,
            created_at=_moment(row.created_ms),
            updated_at=_moment(row.updated_ms),
            duration_ms=max(0, end - row.created_ms),
            next_index=row.next_index,
            metadata=metadata,
        )

    async def owned(self, ctx: Context) -> RunRow:
        """The run named in the path, if the principal may see it and act on it
        (what the token's access allows is checked before, per operation).
        Another principal's run is refused exactly as an unknown one."""
        run_id = ctx.param("run_id")
        try:
            row = await self.host.run(run_id)
        except HostError:
            row = None
        if row is None or not ctx.principal.owns(row.principal):
            raise ApiError(404, "unknown-run", f"no run {run_id[:200]!r}")
        return row

    @staticmethod
    def running(row: RunRow) -> None:
        if row.status != "running":
            raise ApiError(409, "settled", f"run {row.run_id!r} has settled ({row.status})")

    # --- runs ------------------------------------------------------------------------

    async def list_runs(self, ctx: Context) -> Response[Any]:
        q: RunsQuery = ctx.query
        try:
            filters = flowcore.metadata_filters(q.where)
        except flowcore.MetadataFilterError as exc:
            raise ApiError(422, "invalid-request", f"where: {exc}") from None
        rows = await self.host.page_runs(
            flow=q.flow,
            status=q.status,
            parent=q.parent,
            created_from=_epoch_ms(q.created_from),
            created_to=_epoch_ms(q.created_to),
            principal=None if ctx.principal.admin else ctx.principal.name,
            before=None if q.cursor is None else _uncursor(q.cursor),
            limit=q.limit + 1,
            metadata=filters,
        )
        more = len(rows) > q.limit
        rows = rows[: q.limit]
        metadata = await self.host.metadata_of([r.run_id for r in rows])
        page = RunPage(
            runs=[self.summary(r, metadata.get(r.run_id, {})) for r in rows],
            next_cursor=_cursor(rows[-1]) if more else None,
        )
        return json_response(page)

    async def start_run(self, ctx: Context) -> Response[Any]:
        body: StartBody = ctx.body
        path = self.flows.path_of(body.flow)
        if body.run_id is not None:
            try:
                row = await self.host.run(body.run_id)
            except HostError:
                pass
            else:
                if not ctx.principal.owns(row.principal):
                    # Taken, as any id is: nothing says whose run holds it.
                    raise ApiError(
                        409,
                        "cannot-start",
                        f"run {body.run_id!r} already exists: choose another id",
                    )
        budget = flowcore.budget_from_wire(msgspec.to_builtins(body.budget))
        try:
            run_id = await self.host.start(
                path,
                body.input,
                body.run_id,
                flows=[] if self.flows.folder is None else [self.flows.folder],
                budget=budget,
                principal=ctx.principal.name,
                metadata=body.metadata,
                on_conflict=body.on_conflict,
            )
        except (
            HostError,
            flowcore.InputError,
            flowcore.SpecError,
            flowcore.DataError,
            flowcore.RunIdError,
        ) as exc:
            text = str(exc)
            status = 409 if "already exists" in text else 422
            raise ApiError(status, "cannot-start", text) from None
        row = await self.host.run(run_id)
        location = "/api/runs/" + quote(run_id, safe="")
        # As a start again with the same options: the existing run's summary, 201.
        return json_response(await self.summarize(row), 201, {"Location": location})

    async def show_run(self, ctx: Context) -> Response[Any]:
        row = await self.owned(ctx)
        shown = await self.host.show(row.run_id)
        waits = await self.host.waits(row.run_id)
        view = RunView(
            run=await self.summarize(row),
            waits=msgspec.to_builtins(waits),
            budget=shown["budget"],
            output=row.output,
            error=row.error,
            dead_letters=shown["deadLetters"],
            children=shown["children"],
        )
        if row.status != "running":
            # The ``settled`` effect carries the report (left out when no work
            # ran), the ``run.settled`` record after it does not; records about
            # scheduled calls may follow both.
            last = await self.host.records(row.run_id, max(0, row.next_index - 64))
            for record in last:
                if not isinstance(record.data, dict):
                    continue
                if record.type == "effect.emitted" and record.data.get("kind") == "settled":
                    view.report = record.data.get("report", [])
                elif record.type == "run.settled":
                    view.exhausted = record.data.get("exhausted")
        return json_response(view)

    async def cancel_run(self, ctx: Context) -> Response[Any]:
        """A cancel that would change nothing (the run has settled, or compensates
        already) writes nothing and is 409, as ``flowcore cancel`` exits 1."""
        row = await self.owned(ctx)
        body: CancelBody = ctx.body
        try:
            await self.host.cancel(row.run_id, body.reason)
        except NothingToCancel as exc:
            current = await self.host.run(row.run_id)
            code = "settled" if current.status != "running" else "nothing-to-cancel"
            raise ApiError(409, code, str(exc)) from None
        except HostError as exc:
            raise ApiError(422, "rejected", str(exc)) from None
        return json_response(await self.summarize(await self.host.run(row.run_id)), 202)

    async def _event(self, row: RunRow, call: Any) -> None:
        try:
            await call
        except HostError as exc:
            current = await self.host.run(row.run_id)
            if current.status != "running":
                raise ApiError(
                    409, "settled", f"run {row.run_id!r} has settled ({current.status})"
                ) from None
            raise ApiError(422, "rejected", str(exc)) from None

    async def answer(self, ctx: Context) -> Response[Any]:
        row = await self.owned(ctx)
        self.running(row)
        body: AnswerBody = ctx.body
        waits = await self.host.waits(row.run_id)
        prefix = row.run_id + "/"
        matches = [
            q for q in waits.questions if body.key in (q.key, q.key.removeprefix(prefix), q.step)
        ]
        if not matches:
            raise ApiError(
                409,
                "no-open-question",
                f"run {row.run_id!r} has no open question {body.key!r}",
                open_questions=[q.key.removeprefix(prefix) for q in waits.questions],
            )
        if len(matches) > 1:
            raise ApiError(
                422,
                "ambiguous-question",
                f"step {body.key!r} has {len(matches)} open questions: give the key of one",
                open_questions=[q.key.removeprefix(prefix) for q in matches],
            )
        question = matches[0]
        if question.options is not None and body.answer not in question.options:
            raise ApiError(
                422,
                "not-an-option",
                f"the answer to {question.key.removeprefix(prefix)!r} must be one of its options",
                options=list(question.options),
            )
        await self._event(row, self.host.answer(row.run_id, question.key, body.answer))
        return json_response(await self.summarize(await self.host.run(row.run_id)))

    async def signal(self, ctx: Context) -> Response[Any]:
        row = await self.owned(ctx)
        self.running(row)
        body: SignalBody = ctx.body
        await self._event(row, self.host.signal(row.run_id, body.name, body.payload, body.key))
        return json_response(await self.summarize(await self.host.run(row.run_id)), 202)

    # --- the event stream ---------------------------------------------------------------

    async def events(self, ctx: Context) -> Response[Any]:
        row = await self.owned(ctx)
        q: StreamQuery = ctx.query
        records = await self.host.records(row.run_id, q.start)
        return Encoded(flowcore.encode_records(records), 200, NDJSON)

    async def stream(self, ctx: Context) -> Response[Any]:
        """Server-Sent Events: one event per log record (``id`` its index, ``event``
        its type, ``data`` the NDJSON envelope), until the run settles."""
        row = await self.owned(ctx)
        q: StreamQuery = ctx.query
        start = q.start
        last = ctx.request.headers.get("last-event-id")
        if last is not None:
            if not last.isdigit() or len(last) > 18:
                raise ApiError(422, "invalid-request", "Last-Event-ID: not an event index")
            start = max(start, int(last) + 1)

        async def events() -> AsyncIterator[ServerSentEventMessage]:
            async for record in self.follow(row.run_id, start, PING_S):
                if record is None:
                    yield ServerSentEventMessage(comment="ping")
                    continue
                yield ServerSentEventMessage(
                    id=str(record.index),
                    event=record.type,
                    data=flowcore.encode_record(record).decode().rstrip("\n"),
                )
            if not self.closing.is_set():  # at shutdown it ends without: clients resume
                yield ServerSentEventMessage(event="end", data="{}")

        return ServerSentEvent(events())

    async def ndjson_follow(self, ctx: Context) -> Response[Any]:
        row = await self.owned(ctx)
        q: StreamQuery = ctx.query

        async def lines() -> AsyncIterator[bytes]:
            async for record in self.follow(row.run_id, q.start):
                if record is not None:
                    yield flowcore.encode_record(record)

        return Stream(lines(), media_type=NDJSON)

    async def follow(
        self, run_id: str, start: int, ping_s: float | None = None
    ) -> AsyncIterator[flowcore.Record | None]:
        """The run's records from ``start`` as they are committed, until it settles
        or the server shuts down (``closing``); ``None`` after each ``ping_s``
        seconds without one."""
        # Each next record is awaited in a task, raced with the server's
        # shutdown (``closing``), which ends the response at once.
        records = self.host.events(run_id, start, follow=True)
        closing = asyncio.ensure_future(self.closing.wait())
        following: asyncio.Future[flowcore.Record] | None = None
        try:
            while True:
                if following is None:
                    following = asyncio.ensure_future(anext(records))
                await asyncio.wait(
                    (following, closing), timeout=ping_s, return_when=asyncio.FIRST_COMPLETED
                )
                if closing.done():
                    return
                if not following.done():
                    yield None
                    continue
                try:
                    record = following.result()
                except StopAsyncIteration:
                    return
                following = None
                yield record
        finally:
            closing.cancel()
            if following is not None and not following.done():
                following.cancel()  # the records' generator ends in that task
            elif isinstance(records, AsyncGenerator):
                await records.aclose()

    # --- the diagram -------------------------------------------------------------------

    async def graph(self, ctx: Context) -> Response[Any]:
        row = await self.owned(ctx)
        flow = await self.host.flow(row.run_id)
        waits = await self.host.waits(row.run_id)
        current: set[str] = set()
        for items in (waits.work, waits.questions, waits.signals, waits.timers):
            for item in items:
                if item.step is not None and item.step in flow.by_id:
                    current.add(node_id(flow.by_id[item.step]))
        done: set[str] = set()
        for record in await self.host.records(row.run_id):
            if record.type != "effect.emitted" or not isinstance(record.data, dict):
                continue
            key = record.data.get("idempotencyKey")
            if not isinstance(key, str):
                continue
            try:
                step = flowcore.parse_key(key, row.run_id).step
            except ValueError:
                continue
            if step is not None and step in flow.by_id:
                done.add(node_id(flow.by_id[step]))
        return json_response(
            Graph(
                mermaid=to_mermaid(build_graph(flow)),
                current=sorted(current),
                done=sorted(done - current),
            )
        )

    # --- scheduled calls of a run ---------------------------------------------------------

    async def scheduled_calls(self, ctx: Context) -> Response[Any]:
        row = await self.owned(ctx)
        calls = await self.host.scheduled(row.run_id)
        return json_response(ScheduledCallList(calls=[msgspec.to_builtins(c) for c in calls]))

    async def cancel_scheduled(self, ctx: Context) -> Response[Any]:
        row = await self.owned(ctx)
        self.running(row)
        call_id = ctx.param("call_id")
        done = await self.host.cancel_scheduled(row.run_id, call_id)
        if not done:  # nothing was written; `flowcore scheduled cancel` exits 1
            full = call_id if call_id.startswith(row.run_id + "/") else f"{row.run_id}/{call_id}"
            raise ApiError(
                409,
                "not-pending",
                f"no pending scheduled call {full!r} in run {row.run_id!r}: nothing to cancel",
            )
        return json_response(await self.summarize(await self.host.run(row.run_id)))

    async def run_scheduled_now(self, ctx: Context) -> Response[Any]:
        row = await self.owned(ctx)
        self.running(row)
        done = await self.host.run_scheduled_now(row.run_id, ctx.param("call_id"))
        if not done:
            raise ApiError(
                409, "not-pending", f"no pending scheduled call {ctx.param('call_id')!r}"
            )
        return json_response(await self.summarize(await self.host.run(row.run_id)))

    # --- schedules ------------------------------------------------------------------------

    async def _schedule(self, name: str) -> dict[str, Any]:
        try:
            return await self.host.schedule(name)
        except HostError:
            raise ApiError(404, "unknown-schedule", f"no schedule {name[:200]!r}") from None

    async def list_schedules(self, ctx: Context) -> Response[Any]:
        return json_response(ScheduleList(schedules=await self.host.schedules()))

    async def show_schedule(self, ctx: Context) -> Response[Any]:
        return json_response(await self._schedule(ctx.param("name")))

    async def pause_schedule(self, ctx: Context) -> Response[Any]:
        name = ctx.param("name")
        await self._schedule(name)
        body: ScheduleChange = ctx.body
        await self.host.pause_schedule(name, body.note)
        return json_response(await self._schedule(name))

    async def resume_schedule(self, ctx: Context) -> Response[Any]:
        name = ctx.param("name")
        await self._schedule(name)
        body: ScheduleChange = ctx.body
        await self.host.resume_schedule(name, body.note)
        return json_response(await self._schedule(name))

    async def trigger_schedule(self, ctx: Context) -> Response[Any]:
        name = ctx.param("name")
        await self._schedule(name)
        run_id = await self.host.trigger_schedule(name)
        return json_response(await self.summarize(await self.host.run(run_id)), 201)

    async def backfill_schedule(self, ctx: Context) -> Response[Any]:
        name = ctx.param("name")
        await self._schedule(name)
        body: BackfillBody = ctx.body
        start = _epoch_ms(body.start)
        end = _epoch_ms(body.end)
        assert start is not None and end is not None
        try:
            await self.host.backfill_schedule(name, start, end)
        except HostError as exc:
            raise ApiError(422, "cannot-backfill", str(exc)) from None
        return json_response(await self._schedule(name))

    async def delete_schedule(self, ctx: Context) -> Response[Any]:
        name = ctx.param("name")
        await self._schedule(name)
        await self.host.delete_schedule(name)
        return Response(None, status_code=204)

    # --- the rest -------------------------------------------------------------------------

    async def list_flows(self, ctx: Context) -> Response[Any]:
        flows = [
            FlowSummary(flow_id=f.id, version=f.version, source=str(p))
            for f, p in self.flows.flows()
        ]
        return json_response(FlowList(flows=flows))

    async def whoami(self, ctx: Context) -> Response[Any]:
        return json_response(Whoami(principal=ctx.principal.name, access=ctx.principal.access))

    def operations(self) -> list[Operation]:
        run = "/api/runs/{run_id}"
        sched = "/api/schedules/{name}"
        return [
            Operation("GET", "/api/whoami", self.whoami, "Who the token stands for", reply=Whoami),
            Operation(
                "GET",
                "/api/flows",
                self.list_flows,
                "The flows of the registry folder",
                reply=FlowList,
            ),
            Operation(
                "GET",
                "/api/runs",
                self.list_runs,
                "List runs, newest first, a page at a time",
                query=RunsQuery,
                reply=RunPage,
                errors=(422,),
            ),
            Operation(
                "POST",
                "/api/runs",
                self.start_run,
                "Start a run of a flow of the registry folder",
                access="write",
                body=StartBody,
                reply=RunSummary,
                status=201,
                errors=(403, 409, 413, 422),
            ),
            Operation(
                "GET",
                run,
                self.show_run,
                "A run: what it waits for, its budget, output or error, report",
                reply=RunView,
                errors=(404,),
            ),
            Operation(
                "POST",
                run + "/cancel",
                self.cancel_run,
                "Cancel a run",
                access="write",
                body=CancelBody,
                reply=RunSummary,
                status=202,
                errors=(403, 404, 409, 413, 422),
            ),
            Operation(
                "POST",
                run + "/answers",
                self.answer,
                "Answer an open question of a run",
                access="write",
                body=AnswerBody,
                reply=RunSummary,
                errors=(403, 404, 409, 413, 422),
            ),
            Operation(
                "POST",
                run + "/signals",
                self.signal,
                "Send a run a signal",
                access="write",
                body=SignalBody,
                reply=RunSummary,
                status=202,
                errors=(403, 404, 409, 413, 422),
            ),
            Operation(
                "GET",
                run + "/events",
                self.events,
                "The run's log records from an index, as NDJSON",
                query=StreamQuery,
                errors=(404,),
                media_type=NDJSON,
            ),
            Operation(
                "GET",
                run + "/events/follow",
                self.ndjson_follow,
                "The run's log records as NDJSON, following until it settles",
                query=StreamQuery,
                errors=(404, 429),
                media_type=NDJSON,
                stream=True,
            ),
            Operation(
                "GET",
                run + "/events/stream",
                self.stream,
                "The run's log records as Server-Sent Events until it settles"
                " (resumable with Last-Event-ID)",
                query=StreamQuery,
                errors=(404, 429),
                media_type="text/event-stream",
                stream=True,
            ),
            Operation(
                "GET",
                run + "/graph",
                self.graph,
                "The run's flow diagram and where it is",
                reply=Graph,
                errors=(404,),
            ),
            Operation(
                "GET",
                run + "/scheduled",
                self.scheduled_calls,
                "The run's scheduled calls",
                reply=ScheduledCallList,
                errors=(404,),
            ),
            Operation(
                "POST",
                run + "/scheduled/{call_id}/cancel",
                self.cancel_scheduled,
                "Cancel a pending scheduled call",
                access="write",
                reply=RunSummary,
                errors=(403, 404, 409),
            ),
            Operation(
                "POST",
                run + "/scheduled/{call_id}/run-now",
                self.run_scheduled_now,
                "Run a pending scheduled call now",
                access="write",
                reply=RunSummary,
                errors=(403, 404, 409),
            ),
            Operation(
                "GET",
                "/api/schedules",
                self.list_schedules,
                "List the schedules",
                reply=ScheduleList,
            ),
            Operation(
                "GET",
                sched,
                self.show_schedule,
                "A schedule and its next slots",
                reply=dict,
                errors=(404,),
            ),
            Operation(
                "POST",
                sched + "/pause",
                self.pause_schedule,
                "Pause a schedule",
                access="admin",
                body=ScheduleChange,
                reply=dict,
                errors=(403, 404, 413, 422),
            ),
            Operation(
                "POST",
                sched + "/resume",
                self.resume_schedule,
                "Resume a schedule",
                access="admin",
                body=ScheduleChange,
                reply=dict,
                errors=(403, 404, 413, 422),
            ),
            Operation(
                "POST",
                sched + "/trigger",
                self.trigger_schedule,
                "Start a run of a schedule now",
                access="admin",
                reply=RunSummary,
                status=201,
                errors=(403, 404),
            ),
            Operation(
                "POST",
                sched + "/backfill",
                self.backfill_schedule,
                "Start the runs of past slots",
                access="admin",
                body=BackfillBody,
                reply=dict,
                errors=(403, 404, 413, 422),
            ),
            Operation(
                "DELETE",
                sched,
                self.delete_schedule,
                "Delete a schedule",
                access="admin",
                status=204,
                errors=(403, 404),
            ),
        ]
