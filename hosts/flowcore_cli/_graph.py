"""``flowcore graph SPEC``: a diagram of a flow (``flowcore.diagram``)."""

from __future__ import annotations

import click

from flowcore.diagram import build_graph, to_dot, to_mermaid

from ._common import load_spec

__all__ = ["graph"]


@click.command()
@click.argument("spec", metavar="SPEC")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["mermaid", "dot"]),
    default="mermaid",
    show_default=True,
    help="Mermaid (renders in GitHub Markdown) or Graphviz DOT.",
)
def graph(spec: str, fmt: str) -> int:
    """Print a diagram of the flow in SPEC: steps, branches, loops, catch and
    compensation edges."""
    g = build_graph(load_spec(spec))
    click.echo(to_mermaid(g) if fmt == "mermaid" else to_dot(g), nl=False)
    return 0
