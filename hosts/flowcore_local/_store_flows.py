"""The local store's flows: specs stored by hash, parsed once per process.

A run names its flow by ``Flow.spec_hash``; ``register_flow`` stores a spec
(every version stays), ``flow_by_hash`` reads one back and ``flow_by_id`` the
newest version of a flow id (what a ``run_subflow`` starts).
"""

from __future__ import annotations

import flowcore
from flowcore import Flow

from ._store_base import HostError, StoreBase


class FlowStore(StoreBase):
    """Flow specs by hash (see ``Store``)."""

    # --- flows ------------------------------------------------------------------------

    def register_flow(self, spec: str, source: str, now: int) -> Flow:
        flow = self._parsed.get(spec)
        if flow is None:
            flow = flowcore.parse_flow(spec, source_name=source)
            self._parsed[spec] = flow
        self.conn.execute(
            "INSERT INTO flows (spec_hash, flow_id, version, source, spec, added_ms)"
            " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            (flow.spec_hash, flow.id, flow.version, source, spec, now),
        )
        self._flows[flow.spec_hash] = flow
        return flow

    def flow_by_hash(self, spec_hash: str) -> Flow:
        flow = self._flows.get(spec_hash)
        if flow is None:
            row = self.conn.execute(
                "SELECT spec, source FROM flows WHERE spec_hash = ?", (spec_hash,)
            ).fetchone()
            if row is None:
                raise HostError(f"no flow spec with hash {spec_hash[:12]} in the database")
            flow = flowcore.parse_flow(row[0], source_name=row[1])
            self._flows[spec_hash] = flow
        return flow

    def flow_by_id(self, flow_id: str) -> Flow | None:
        row = self.conn.execute(
            "SELECT spec_hash FROM flows WHERE flow_id = ? ORDER BY added_ms DESC, version DESC"
            " LIMIT 1",
            (flow_id,),
        ).fetchone()
        return None if row is None else self.flow_by_hash(row[0])
