"""Progress streams on Temporal (specs/temporal.md, "Progress streams"): the work
activity sends what its handler publishes to the run's workflow as signals,
the workflow keeps the newest items in a bounded buffer, and the host reads
them by a query, following by polling it. The buffer's cap and its
``progress.dropped`` gap are checked on the workflow's handlers alone (no
server); a handler's three items, followed from index 0 and from index 2,
on a real dev server."""

from __future__ import annotations

import asyncio
import collections
from typing import Any

import pytest

pytest.importorskip("temporalio")

import flowcore
from flowcore import CallTool
from flowcore_handlers import Registry, publish
from flowcore_temporal import _workflow_handlers
from flowcore_temporal._types import RunArgs
from flowcore_temporal._workflow import FlowcoreWorkflow

from .support import running_host, unique, waiting_for

SPEC = """
flow: talk
tools: {talk: {class: readonly}}
steps:
  - {id: talk, call_tool: {tool: talk}}
  - {id: done, await_signal: {signal: done}}
output: "${steps.talk.output}"
"""


def test_a_handlers_items_followed_from_0_and_read_from_2(temporal_address: str) -> None:
    def talk(call: CallTool) -> str:
        publish("one")
        publish({"n": 2})
        publish("three")
        return "said"

    async def main() -> tuple[str, list[list[flowcore.Record]], list[flowcore.Record]]:
        async with running_host(
            temporal_address, None, registry=Registry(tools={"talk": talk})
        ) as host:
            rid = await host.start(SPEC, None, unique("talk"))

            async def follow(start: int) -> list[flowcore.Record]:
                return [record async for record in host.progress(rid, start, follow=True)]

            followers = [asyncio.create_task(follow(start)) for start in (0, 2)]
            await waiting_for(host, rid, "done")  # the items came before the result
            await host.signal(rid, "done")
            assert (await host.result(rid))["status"] == "completed"
            # Each follower ends once the run has closed and it has read every item.
            followed = await asyncio.wait_for(asyncio.gather(*followers), timeout=60)
            return rid, followed, await host.progress_records(rid, 2)

    rid, (from_zero, followed_from_two), read_from_two = asyncio.run(main())
    key = f"{rid}/talk#1"
    assert [(r.type, r.index, r.run_id, r.data) for r in from_zero] == [
        ("progress", 0, rid, {"key": key, "step": "talk", "data": "one"}),
        ("progress", 1, rid, {"key": key, "step": "talk", "data": {"n": 2}}),
        ("progress", 2, rid, {"key": key, "step": "talk", "data": "three"}),
    ]
    assert followed_from_two == read_from_two == from_zero[2:]


def _workflow(progress_next: int = 0) -> Any:
    """The workflow's progress handlers on their own (no Temporal worker needed)."""
    wf: Any = object.__new__(FlowcoreWorkflow)
    wf._run_id = "r"
    wf._progress = collections.deque()
    wf._progress_bytes = 0
    wf._progress_next = progress_next
    return wf


def _batch(*items: tuple[int, str]) -> dict[str, Any]:
    return {"key": "r/s#1", "step": "s", "items": [list(i) for i in items]}


def test_the_buffer_keeps_the_newest_and_says_what_was_dropped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_workflow_handlers, "PROGRESS_ITEMS", 3)
    monkeypatch.setattr(_workflow_handlers, "PROGRESS_BYTES", 12)
    wf = _workflow()
    wf._on_progress(_batch((1, '"a"'), (2, '"b"')))
    wf._on_progress(_batch((3, '"c"'), (4, '"d"')))  # over 3 items: index 0 goes
    assert [(r["type"], r["index"], r["data"]) for r in wf.progress(0)] == [
        ("progress.dropped", 0, {"from": 0, "count": 1}),
        ("progress", 1, {"key": "r/s#1", "step": "s", "data": "b"}),
        ("progress", 2, {"key": "r/s#1", "step": "s", "data": "c"}),
        ("progress", 3, {"key": "r/s#1", "step": "s", "data": "d"}),
    ]
    assert [r["index"] for r in wf.progress(2)] == [2, 3]  # nothing dropped from 2 on
    # Over 12 bytes: the oldest go, the newest is kept even alone over.
    wf._on_progress(_batch((5, '"' + "x" * 20 + '"')))
    assert [(r["type"], r["index"], r["data"]) for r in wf.progress(1)] == [
        ("progress.dropped", 3, {"from": 1, "count": 3}),
        ("progress", 4, {"key": "r/s#1", "step": "s", "data": "x" * 20}),
    ]
    assert wf.progress(5) == []


def test_a_run_carried_over_goes_on_counting() -> None:
    wf = _workflow(progress_next=7)
    wf._args = RunArgs(spec="flow: f", run_id="r", progress_next=7)
    wf._on_progress(_batch((1, "1"), (2, "2")))
    # Indexes 0-6 were the Temporal run before's: a reader from 0 is told they are gone.
    assert [(r["type"], r["index"]) for r in wf.progress(0)] == [
        ("progress.dropped", 6),
        ("progress", 7),
        ("progress", 8),
    ]
    assert wf._next_args().progress_next == 9


def test_the_activity_sends_items_in_batches_and_all_before_its_result() -> None:
    from flowcore_temporal._activities import _PROGRESS_BATCH_BYTES, _Progress

    sent: list[dict[str, Any]] = []

    class Handle:
        async def signal(self, name: str, body: dict[str, Any]) -> None:
            assert name == "flowcore.progress"
            sent.append(body)

    big = '"' + "x" * (_PROGRESS_BATCH_BYTES // 2) + '"'

    async def main() -> None:
        progress = _Progress(Handle(), "r/s#1", "s")  # type: ignore[arg-type]
        progress.sink(b'"a"')  # on the loop
        await asyncio.to_thread(progress.sink, big.encode())  # from a handler's thread
        for _ in range(2):
            progress.sink(big.encode())
        await progress.close()
        progress.sink(b'"late"')  # after the activity's end: dropped
        await asyncio.sleep(0)

    asyncio.run(main())
    items = [text for body in sent for _, text in body["items"]]
    assert items == ['"a"', big, big, big]
    assert all(body["key"] == "r/s#1" and body["step"] == "s" for body in sent)
    for body in sent:  # each batch within the cap (a single item may be alone over)
        sizes = [len(text) for _, text in body["items"]]
        assert len(sizes) == 1 or sum(sizes) <= _PROGRESS_BATCH_BYTES
