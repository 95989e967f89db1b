"""The Temporal host's OpenTelemetry spans, against a real dev server (specs/tracing.md)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

from .spans import CHILD, PARENT, REGISTRY, attr, by_name, in_memory, parent_id, span_id, trace_id


def _scope(span: ReadableSpan) -> str | None:
    return None if span.instrumentation_scope is None else span.instrumentation_scope.name


def _ancestors(span: ReadableSpan, index: dict[int, ReadableSpan]) -> list[str]:
    """The names of ``span``'s ancestors, nearest first, as far as they were exported."""
    names = []
    current = span
    while (up := parent_id(current)) is not None and up in index:
        current = index[up]
        names.append(current.name)
    return names


def test_work_spans_carry_the_local_hosts_attributes_and_link_subflows(
    temporal_address: str, tmp_path: Path
) -> None:
    import flowcore_temporal as ft

    from ..temporal.support import unique

    provider, exporter = in_memory()
    child = tmp_path / "fix.yaml"
    child.write_text(CHILD)

    async def main() -> dict[str, Any]:
        client = await ft.connect(temporal_address, tracing=provider)
        queue = unique("q")
        async with ft.new_worker(client, task_queue=queue, registry=REGISTRY, tracing=provider):
            host = ft.TemporalHost(client, queue)
            rid = await host.start(PARENT, {"x": 5}, unique("r"), flows=[child])
            result: dict[str, Any] = await asyncio.wait_for(host.result(rid), timeout=60)
        return result

    result = asyncio.run(main())
    assert result["status"] == "completed", result
    rid = result["runId"]
    finished = exporter.get_finished_spans()
    index = {span_id(s): s for s in finished}
    spans = by_name(s for s in finished if _scope(s) == "flowcore")
    assert sorted(spans) == [
        "call-tool flaky",
        "call-tool lookup",
        "call-tool patch",
        "run fix",
        "run traced",
        "run-agent triager",
    ]
    assert len({trace_id(s) for s in finished}) == 1  # one trace from the client's start

    look, recover = spans["call-tool lookup"]
    assert {k: v for k, v in (look.attributes or {}).items() if "temporal" not in k} == {
        "flowcore.run_id": rid,
        "flowcore.idempotency_key": f"{rid}/look#1",
        "flowcore.effect": "call-tool",
        "flowcore.step": "look",
        "flowcore.attempt": 1,
        "flowcore.tool": "lookup",
        "flowcore.outcome": "succeeded",
    }
    assert attr(look, "flowcore.temporal.activity_id") == f"{rid}/look#1"
    assert _ancestors(look, index)[:2] == [
        "RunActivity:flowcore_work",
        "StartActivity:flowcore_work",
    ]
    assert attr(recover, "flowcore.step") == "recover"

    [agent] = spans["run-agent triager"]
    assert attr(agent, "flowcore.agent") == "triager"
    assert (
        attr(agent, "flowcore.usage.steps"),
        attr(agent, "flowcore.usage.cost_minor_units"),
    ) == (
        2,
        7,
    )
    flakes = spans["call-tool flaky"]
    assert [attr(s, "flowcore.attempt") for s in flakes] == [1, 2]
    for flake in flakes:
        assert attr(flake, "flowcore.outcome") == "failed"
        assert attr(flake, "flowcore.error.type") == "down"
        assert flake.status.status_code is StatusCode.ERROR

    [run] = spans["run traced"]
    assert attr(run, "flowcore.run_id") == rid
    assert attr(run, "flowcore.run.status") == "completed"
    assert attr(run, "flowcore.usage.cost_minor_units") == 7
    assert _ancestors(run, index) == ["StartWorkflow:flowcore"]

    # The subflow: the child run's spans descend from the parent's
    # StartChildWorkflow span, their run id is the parent's run-subflow key.
    [kid] = spans["run fix"]
    [kid_patch] = spans["call-tool patch"]
    child_id = f"{rid}/kid#1"
    assert attr(kid, "flowcore.run_id") == child_id
    assert attr(kid, "flowcore.parent_run_id") == rid
    assert attr(kid, "flowcore.run.status") == "completed"
    assert attr(kid_patch, "flowcore.run_id") == child_id
    assert attr(kid_patch, "flowcore.step") == "patch"
    assert "StartChildWorkflow:flowcore" in _ancestors(kid, index)
    assert "StartChildWorkflow:flowcore" in _ancestors(kid_patch, index)
    assert kid.start_time is not None and run.start_time is not None
    assert run.start_time <= kid.start_time
    assert kid.end_time is not None and run.end_time is not None
    assert kid.end_time <= run.end_time
