"""A flow as a diagram (Mermaid, Graphviz DOT): the public face of
``flowcore.language.diagram``; and how each step of a run ended
(``step_outcomes``), which a run's diagram is coloured by.
"""

from .decision.step_outcomes import step_outcomes
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
    "step_outcomes",
    "to_dot",
    "to_mermaid",
]
