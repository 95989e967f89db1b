"""Run metadata through ``flowcore serve``: started with metadata, listed by filters."""

from __future__ import annotations

from pathlib import Path

from .serving import start_serve
from .test_api import problem

ORDERS = """
flow: orders
metadata: {customer: string, amount: number, urgent: boolean}
steps:
  - id: mark
    set_metadata: {amount: "${input.amount}", urgent: "${input.amount > `100`}"}
  - id: wait
    await_signal: {signal: go}
"""


def test_runs_start_with_metadata_and_list_by_it(tmp_path: Path) -> None:
    flows = tmp_path / "flows"
    flows.mkdir()
    (flows / "orders.yaml").write_text(ORDERS)
    server = start_serve(tmp_path, "--flows", flows)
    try:
        with server.client(server.token, timeout=30) as c:
            for run_id, customer, amount in (
                ("o1", "acme", 50),
                ("o2", "acme", 150),
                ("o3", "zeta", 300),
            ):
                body = {
                    "flow": "orders",
                    "input": {"amount": amount},
                    "runId": run_id,
                    "metadata": {"customer": customer},
                }
                r = c.post("/api/runs", json=body)
                assert r.status_code == 201, r.text
                assert r.json()["metadata"]["customer"] == customer

            def listed(*where: str) -> list[str]:
                r = c.get("/api/runs", params=[("where", w) for w in where])
                assert r.status_code == 200, r.text
                return sorted(run["runId"] for run in r.json()["runs"])

            assert listed("customer=acme") == ["o1", "o2"]
            assert listed("customer=acme", "amount>100") == ["o2"]
            assert listed("urgent=true") == ["o2", "o3"]
            assert listed() == ["o1", "o2", "o3"]
            view = c.get("/api/runs/o3").json()
            assert view["run"]["metadata"] == {"amount": 300, "customer": "zeta", "urgent": True}
            bad = problem(c.get("/api/runs", params={"where": "amount>lots"}), 422)
            assert "> compares numbers, and 'lots' is not one" in bad["detail"]
            refused = c.post(
                "/api/runs",
                json={"flow": "orders", "input": {"amount": 1}, "metadata": {"tier": 1}},
            )
            assert "'tier' is not declared" in problem(refused, 422)["detail"]
    finally:
        server.stop()
