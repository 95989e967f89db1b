"""``flowcore serve --temporal``: the HTTP API and the web view on a Temporal
namespace (a real ``flowcore serve`` subprocess, the real dev server, a worker
in this process)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx

from ..serve.serving import start_serve
from .support import running_host, unique

FLOW = """
flow: {flow}
steps:
  - id: decide
    ask_human: {{question: "Ship it?", options: ["yes", "no"]}}
output: "${{steps.decide.answer}}"
"""

TOKENS = """
tokens:
  - {token: alice-token-0123456789, principal: alice, access: write}
"""


def test_serve_serves_a_temporal_namespace(temporal_address: str, tmp_path: Path) -> None:
    flows = tmp_path / "flows"
    flows.mkdir()
    flow_id = unique("served").replace("-", "_")
    (flows / "ship.yaml").write_text(FLOW.format(flow=flow_id))
    (tmp_path / "tokens.yaml").write_text(TOKENS)

    async def main() -> None:
        async with running_host(temporal_address) as host:
            server = start_serve(
                tmp_path,
                "--temporal",
                "--address",
                temporal_address,
                "--task-queue",
                host.task_queue,
                "--flows",
                flows,
                "--tokens",
                tmp_path / "tokens.yaml",
            )
            try:
                assert f"serving Temporal namespace default at {temporal_address}" in (
                    server.output()
                )
                headers = {"Authorization": "Bearer alice-token-0123456789"}
                async with httpx.AsyncClient(
                    base_url=server.url.rstrip("/"), headers=headers, timeout=30
                ) as c:  # (async: the worker runs in this loop)
                    run_id = unique("web")
                    started = await c.post("/api/runs", json={"flow": flow_id, "runId": run_id})
                    assert started.status_code == 201, started.text
                    assert started.json()["principal"] == "alice"
                    deadline = time.monotonic() + 30
                    while True:  # (until the worker has run the workflow's first task)
                        asked = await c.get(f"/api/runs/{run_id}/questions")
                        if asked.status_code == 200 and asked.json()["questions"]:
                            break
                        assert time.monotonic() < deadline, asked.text
                        await asyncio.sleep(0.1)
                    answered = await c.post(
                        f"/api/runs/{run_id}/answers", json={"key": "decide", "answer": "yes"}
                    )
                    assert answered.status_code == 200, answered.text
                    while (await c.get(f"/api/runs/{run_id}")).json()["run"]["status"] == "running":
                        assert time.monotonic() < deadline
                        await asyncio.sleep(0.1)
                    view = (await c.get(f"/api/runs/{run_id}")).json()
                    assert (view["run"]["status"], view["output"]) == ("completed", "yes")
                    # What Temporal does not do is the refusal, by type, saying why.
                    refused = await c.post(f"/api/runs/{run_id}/resume")
                    assert refused.status_code == 501
                    assert refused.json()["type"] == "/problems/host-refuses"
                    page = await c.get(f"/api/runs/{run_id}/graph")
                    assert page.status_code == 200 and "flowchart" in page.json()["mermaid"]
            finally:
                server.stop()
            assert server.proc.returncode == 0, server.output()

    asyncio.run(main())
