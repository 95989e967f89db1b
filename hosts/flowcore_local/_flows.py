"""What a flow can reach, read from its spec: subflows, handlers, signals, compensations.

The local host checks a run before it writes anything: the handlers every flow
it can start needs (``missing_handlers``), the signal names those flows wait
for (``declared_signals``). A subflow counts when the host can find it: a flow
with that id registered in the database (the newest, as a worker would start
it); one it cannot find fails its step with ``unknown-flow`` when it is
reached, as before.
"""

from __future__ import annotations

from flowcore import Flow, flow_references

from ._store import Store

__all__ = ["compensation_steps", "declared_signals", "reachable_flows"]


def reachable_flows(store: Store, flow: Flow) -> list[Flow]:
    """``flow`` and every flow it can start as a subflow (transitively) that ``store`` holds."""
    found: dict[str, Flow] = {flow.id: flow}
    todo = [flow]
    while todo:
        current = todo.pop()
        for flow_id in flow_references(current).subflows:
            if flow_id not in found:
                child = store.flow_by_id(flow_id)
                if child is not None:
                    found[child.id] = child
                    todo.append(child)
    return list(found.values())


def declared_signals(flows: list[Flow]) -> set[str]:
    """The signal names the ``await_signal`` steps of ``flows`` wait for."""
    return {name for flow in flows for name in flow_references(flow).signals}


def compensation_steps(flow: Flow) -> set[str]:
    """Ids of the steps that run only as compensations (inside a ``compensate`` list)."""
    return {step.id for step in flow.by_id.values() if ".compensate[" in step.path}
