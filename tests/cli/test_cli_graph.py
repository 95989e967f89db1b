"""The diagram builder behind ``flowcore graph``, in process, over every conformance flow."""

from __future__ import annotations

from pathlib import Path

import pytest

import flowcore
from flowcore.diagram import build_graph, to_dot, to_mermaid

REPO = Path(__file__).resolve().parents[2]
FLOWS = [
    *sorted((REPO / "specs" / "conformance").glob("*/flow.yaml")),
    REPO / "specs" / "examples" / "triage.yaml",
]


@pytest.mark.parametrize("path", FLOWS, ids=lambda p: p.parent.name)
def test_every_step_is_a_node_and_every_edge_joins_two_nodes(path: Path) -> None:
    flow = flowcore.parse_flow(path.read_bytes())
    g = build_graph(flow)
    ids = [n.id for n in g.nodes]
    assert len(ids) == len(set(ids))
    assert {f"s_{step}" for step in flow.by_id} <= set(ids)
    assert {"flow_start", "flow_end"} <= set(ids)
    for edge in g.edges:
        assert edge.src in ids and edge.dst in ids, edge
    reachable = {"flow_start"}
    for _ in range(len(g.edges)):
        reachable |= {e.dst for e in g.edges if e.src in reachable}
    assert set(ids) <= reachable, set(ids) - reachable
    mermaid = to_mermaid(g)
    assert mermaid.count("\n    ") == len(g.nodes) + len(g.edges)
    dot = to_dot(g)
    assert dot.count(" -> ") == len(g.edges)


def test_labels_are_escaped_for_both_renderers() -> None:
    flow = flowcore.parse_flow(
        'flow: q\nsteps:\n  - id: ask\n    ask_human: {question: "Say \\"hi\\" <b>|&"}\n'
    )
    g = build_graph(flow)
    mermaid = to_mermaid(g)
    assert "Say #quot;hi#quot; #lt;b#gt;#124;#amp;" in mermaid
    assert 'Say \\"hi\\" <b>|&' in to_dot(g)


def test_switch_without_else_has_a_no_match_edge_and_loops_go_back() -> None:
    spec = """
flow: g
tools: {t: {}}
steps:
  - id: pick
    switch:
      - if: "input.a"
        steps: [{id: a, call_tool: {tool: t}}]
  - id: again
    repeat:
      every_ms: 60000
      max_fires: 2
      steps: [{id: b, call_tool: {tool: t}}]
"""
    g = build_graph(flowcore.parse_flow(spec))
    labels = {(e.src, e.dst, e.label, e.style) for e in g.edges}
    assert ("s_pick", "s_again", "no match", "solid") in labels
    assert ("s_a", "s_again", "", "solid") in labels
    assert ("s_b", "s_again", "next fire", "dashed") in labels
    assert ("s_again", "flow_end", "done", "solid") in labels
