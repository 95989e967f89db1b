"""A flow as a diagram (Mermaid, Graphviz DOT): the public face of
``flowcore.language.diagram``.
"""

from .language.diagram import (
    Edge,
    Graph,
    Node,
    build_graph,
    node_id,
    to_dot,
    to_mermaid,
)

__all__ = [
    "Edge",
    "Graph",
    "Node",
    "build_graph",
    "node_id",
    "to_dot",
    "to_mermaid",
]
