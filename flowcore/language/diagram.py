"""A diagram of a flow, as Mermaid or Graphviz DOT text (``flowcore graph SPEC``, the web view).

The diagram is built from the parsed ``Flow`` into a small graph (nodes with
a shape and label lines, edges with a label and a style) and then rendered;
no external renderer is needed. What is drawn:

- every step as a node labelled with its id, kind and target, plus its retry
  and timeout when it has them;
- the sequence as solid edges, from ``start`` to ``end``;
- ``switch`` as a diamond with one edge per case (its condition, or ``else``;
  ``no match`` when there is no else);
- ``parallel`` as a fork node with one edge per branch into a join node;
- ``for_each`` and ``repeat`` as a loop header with the body and a dashed
  edge back (``next`` / ``next fire``), leaving by ``done``;
- ``try`` as a node whose body follows, with a dashed ``catch: <types>`` edge
  to each handler;
- ``compensate`` as a dotted ``compensate`` edge to the compensation steps,
  which run only when the run later fails or is cancelled;
- ``continue_as_new`` as a node with a dashed ``new incarnation`` edge back
  to ``start``;
- each update (``updates:``) as a node entered from ``start`` by a dashed
  ``update requested`` edge, its handler's steps, and its ``reply``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import attrs

from .spec import (
    AskHumanStep,
    AwaitSignalStep,
    CallToolStep,
    CancelScheduledStep,
    ContinueAsNewStep,
    Duration,
    FailStep,
    Flow,
    ForEachStep,
    ParallelStep,
    RepeatStep,
    RunAgentStep,
    RunSubflowStep,
    RunTeamStep,
    ScheduleStep,
    SetMetadataStep,
    SignalRunStep,
    SleepStep,
    Step,
    SwitchStep,
    TryStep,
)

__all__ = ["Edge", "Graph", "Node", "build_graph", "node_id", "to_dot", "to_mermaid"]

SOLID, DASHED, DOTTED = "solid", "dashed", "dotted"


@dataclass(frozen=True)
class Node:
    id: str
    lines: tuple[str, ...]
    shape: str  # box, round, stadium, subroutine, diamond, hexagon, parallelogram, circle


@dataclass(frozen=True)
class Edge:
    src: str
    dst: str
    label: str = ""
    style: str = SOLID


# An open end of the diagram: an edge still to be drawn from ``node``.
@dataclass(frozen=True)
class _Exit:
    node: str
    label: str = ""
    style: str = SOLID


@dataclass
class Graph:
    title: str
    nodes: list[Node] = field(default_factory=list)
    edges: list[Edge] = field(default_factory=list)

    def node(self, id: str, lines: list[str], shape: str = "box") -> str:
        self.nodes.append(Node(id, tuple(lines), shape))
        return id

    def connect(self, exits: list[_Exit], dst: str) -> None:
        for e in exits:
            self.edges.append(Edge(e.node, dst, e.label, e.style))


def _ms(value: Duration) -> str:
    if not isinstance(value, int):  # decided when the step begins
        return value.source
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if value >= size and value % size == 0:
            return f"{value // size}{unit}"
    return f"{value}ms"


def _source(value: object) -> str:
    source = getattr(value, "source", value)
    return source if isinstance(source, str) else str(source)


def node_id(step: Step) -> str:
    """The diagram's node of ``step`` (``s_`` and its id)."""
    return f"s_{step.id}"


class _Builder:
    def __init__(self, flow: Flow) -> None:
        self.flow = flow
        self.g = Graph(f"{flow.id} v{flow.version}")
        # fail steps: nothing follows them; a dashed edge to the end says the
        # run fails there unless a try around them catches it.
        self.fails: list[_Exit] = []
        self.again: list[_Exit] = []  # continue_as_new steps: back to the start

    def build(self) -> Graph:
        # Not "start"/"end": a lowercase "end" breaks a Mermaid flowchart.
        start = self.g.node("flow_start", ["start"], "circle")
        exits = self.seq(self.flow.steps, [_Exit(start)])
        self.g.connect(self.again, start)
        end_lines = ["end"]
        if self.flow.output is not None:
            end_lines.append(f"output: {_clip(_source(self.flow.output))}")
        end = self.g.node("flow_end", end_lines, "circle")
        self.g.connect(exits, end)
        self.g.connect(self.fails, end)
        final = self.flow.on_exhausted
        if final is not None:
            # Entered from wherever a limit is reached: a dashed edge from start.
            caps = ", ".join(
                f"{name} {value}"
                for name, value in attrs.asdict(final.reserve).items()
                if value is not None
            )
            lines = ["on budget exhausted", f"reserve: {caps or 'none'}"]
            if final.output is not None:
                lines.append(f"output: {_clip(_source(final.output))}")
            head = self.g.node("flow_exhausted", lines, "hexagon")
            self.g.connect([_Exit(start, "limit reached", DASHED)], head)
            self.g.connect(self.seq(final.steps, [_Exit(head)]), end)
        for i, update in enumerate(self.flow.updates.values(), 1):
            # Entered whenever a caller sends it, beside the flow's steps; ends in its reply.
            lines = [f"update {update.name}"]
            if update.validator is not None:
                lines.append(f"validator: {_clip(update.validator.source)}")
            head = self.g.node(f"update_{i}", lines, "hexagon")
            self.g.connect([_Exit(start, "update requested", DASHED)], head)
            exits = self.seq(update.steps, [_Exit(head)])
            reply = ["reply"]
            if update.reply is not None:
                reply.append(_clip(_source(update.reply)))
            self.g.connect(exits, self.g.node(f"update_{i}_reply", reply, "stadium"))
        return self.g

    def seq(self, steps: tuple[Step, ...], entries: list[_Exit]) -> list[_Exit]:
        for step in steps:
            self.g.connect(entries, node_id(step))  # edges in reading order
            entries = self.step(step)
        return entries

    def step(self, step: Step) -> list[_Exit]:
        nid = node_id(step)
        notes = []
        if step.retry is not None:
            notes.append(f"retry x{step.retry.max_attempts}")
        if step.timeout_ms is not None:
            notes.append(f"timeout {_ms(step.timeout_ms)}")
        extra = [" · ".join(notes)] if notes else []
        exits = self.leaf(step, nid, extra)
        if exits is None:
            exits = self.holder(step, nid, extra)
        if step.compensate:
            self.seq(step.compensate, [_Exit(nid, "compensate", DOTTED)])
        return exits

    def leaf(self, step: Step, nid: str, extra: list[str]) -> list[_Exit] | None:
        """The node of a step that holds no steps, and where it goes on; None for
        a step that holds steps."""
        body = step.body
        exits: list[_Exit]
        if isinstance(body, CallToolStep):
            decl = self.flow.tools.get(body.tool)
            cls = decl.exec_class if decl is not None else "uncertain"
            self.g.node(nid, [step.id, f"call_tool {body.tool} ({cls})", *extra], "box")
            exits = [_Exit(nid)]
        elif isinstance(body, RunAgentStep):
            who = f" as {body.member}" if body.member else ""
            self.g.node(nid, [step.id, f"run_agent {body.agent}{who}", *extra], "round")
            exits = [_Exit(nid)]
        elif isinstance(body, RunTeamStep):
            team = self.flow.teams.get(body.team)
            how = (
                f"{team.mode}: " + ", ".join(m.member for m in team.members)
                if team is not None
                else "by the host"
            )
            self.g.node(nid, [step.id, f"run_team {body.team}", how, *extra], "round")
            exits = [_Exit(nid)]
        elif isinstance(body, AskHumanStep):
            lines = [step.id, f"ask_human: {_clip(_source(body.question))}"]
            if body.options:
                lines.append("options: " + " / ".join(body.options))
            if body.timeout_ms is not None:
                default = f" → {body.default}" if body.default is not None else ""
                lines.append(f"timeout {_ms(body.timeout_ms)}{default}")
            self.g.node(nid, [*lines, *extra], "parallelogram")
            exits = [_Exit(nid)]
        elif isinstance(body, SleepStep):
            what = (
                f"sleep {_ms(body.for_ms)}"
                if body.for_ms is not None
                else f"sleep until {_clip(_source(body.until))}"
            )
            self.g.node(nid, [step.id, what, *extra], "hexagon")
            exits = [_Exit(nid)]
        elif isinstance(body, AwaitSignalStep):
            wait = f"await_signal {' | '.join(body.names)}"
            if body.count is not None:
                wait += f" x{body.count}"
            if body.timeout_ms is not None:
                wait += f" (timeout {_ms(body.timeout_ms)})"
            keyed = [] if body.key is None else [f"key {_clip(_source(body.key))}"]
            self.g.node(nid, [step.id, wait, *keyed, *extra], "stadium")
            exits = [_Exit(nid)]
        elif isinstance(body, SignalRunStep):
            lines = [
                step.id,
                f"signal_run {_source(body.signal)}",
                f"to {_clip(_source(body.run))}",
            ]
            if body.key is not None:
                lines.append(f"key {_clip(_source(body.key))}")
            self.g.node(nid, [*lines, *extra], "box")
            exits = [_Exit(nid)]
        elif isinstance(body, RunSubflowStep):
            lines = [step.id, f"run_subflow {body.flow}"]
            if body.detached:
                lines.append("detached")
            elif body.parent_close is not None and body.parent_close != "cancel":
                lines.append(f"parent_close {body.parent_close}")
            self.g.node(nid, [*lines, *extra], "subroutine")
            exits = [_Exit(nid)]
        elif isinstance(body, ScheduleStep):
            lines = [step.id, f"schedule {body.tool} in {_ms(body.delay_ms)}"]
            if body.every_ms is not None:
                lines.append(f"every {_ms(body.every_ms)}")
            elif body.cron is not None:
                lines.append(
                    f"cron {_clip(body.cron)}" + (f" {body.timezone}" if body.timezone else "")
                )
            if body.count is not None:
                lines.append(f"{body.count} times at most")
            if body.outlive_run:
                lines.append("outlives the run")
            self.g.node(nid, [*lines, *extra], "subroutine")
            exits = [_Exit(nid)]
        elif isinstance(body, CancelScheduledStep):
            self.g.node(
                nid, [step.id, f"cancel_scheduled {_clip(_source(body.id))}", *extra], "box"
            )
            exits = [_Exit(nid)]
        elif isinstance(body, FailStep):
            # Nothing follows a fail step: its failure goes to what holds it.
            self.g.node(nid, [step.id, f"fail {_clip(_source(body.type))}", *extra], "box")
            self.fails.append(_Exit(nid, "fails", DASHED))
            exits = []
        elif isinstance(body, SetMetadataStep):
            names = ", ".join(body.fields)
            self.g.node(nid, [step.id, f"set_metadata {_clip(names)}", *extra], "box")
            exits = [_Exit(nid)]
        elif isinstance(body, ContinueAsNewStep):
            # Nothing follows it: the run starts again from its first step.
            self.g.node(nid, [step.id, "continue_as_new", *extra], "box")
            self.again.append(_Exit(nid, "new incarnation", DASHED))
            exits = []
        else:
            return None
        return exits

    def holder(self, step: Step, nid: str, extra: list[str]) -> list[_Exit]:
        """The nodes of a step that holds steps, and where it goes on."""
        body = step.body
        exits: list[_Exit]
        if isinstance(body, SwitchStep):
            self.g.node(nid, [step.id, "switch", *extra], "diamond")
            exits = []
            has_else = False
            for case in body.cases:
                if case.cond is None:
                    has_else = True
                    label = "else"
                else:
                    label = _clip(_source(case.cond))
                exits += self.seq(case.steps, [_Exit(nid, label)])
            if not has_else:
                exits.append(_Exit(nid, "no match"))
        elif isinstance(body, ParallelStep):
            cap = f", {body.max_concurrency} at a time" if body.max_concurrency else ""
            self.g.node(nid, [step.id, f"parallel ({body.mode}{cap})", *extra], "box")
            join = self.g.node(f"j_{step.id}", [f"{step.id}: join"], "circle")
            for name, steps in body.branches.items():
                self.g.connect(self.seq(steps, [_Exit(nid, name)]), join)
            exits = [_Exit(join)]
        elif isinstance(body, ForEachStep):
            cap = f", {body.max_concurrency} at a time" if body.max_concurrency else ""
            lines = [step.id, f"for_each {body.as_} in {_clip(_source(body.items))}{cap}"]
            if body.max_items is not None:
                lines.append(f"max {body.max_items} items")
            self.g.node(nid, [*lines, *extra], "box")
            back = self.seq(body.steps, [_Exit(nid, "each item")])
            self.g.connect([_Exit(e.node, e.label or "next", DASHED) for e in back], nid)
            exits = [_Exit(nid, "done")]
        elif isinstance(body, RepeatStep):
            when = (
                f"every {_ms(body.every_ms)}" if body.every_ms is not None else f"cron {body.cron}"
            )
            if body.timezone is not None:
                when += f" ({body.timezone})"
            lines = [step.id, f"repeat {when}"]
            stops = []
            if body.max_fires is not None:
                stops.append(f"max {body.max_fires} fires")
            if body.until is not None:
                stops.append(f"until {_clip(_source(body.until))}")
            if stops:
                lines.append(", ".join(stops))
            self.g.node(nid, [*lines, *extra], "box")
            back = self.seq(body.steps, [_Exit(nid, "fire")])
            self.g.connect([_Exit(e.node, e.label or "next fire", DASHED) for e in back], nid)
            exits = [_Exit(nid, "done")]
        elif isinstance(body, TryStep):
            self.g.node(nid, [step.id, "try", *extra], "box")
            exits = self.seq(body.steps, [_Exit(nid)])
            for clause in body.catch:
                label = "catch: " + ", ".join(clause.errors)
                exits += self.seq(clause.steps, [_Exit(nid, label, DASHED)])
        else:  # pragma: no cover - the union is closed
            raise AssertionError(f"unknown step kind {step.kind}")
        return exits


def _clip(text: str, width: int = 48) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def build_graph(flow: Flow) -> Graph:
    """The diagram of ``flow`` as nodes and edges."""
    return _Builder(flow).build()


# --- Mermaid ---------------------------------------------------------------------------

_MERMAID_SHAPES = {
    "box": ('["', '"]'),
    "round": ('("', '")'),
    "stadium": ('(["', '"])'),
    "subroutine": ('[["', '"]]'),
    "diamond": ('{"', '"}'),
    "hexagon": ('{{"', '"}}'),
    "parallelogram": ('[/"', '"/]'),
    "circle": ('(("', '"))'),
}


def _mermaid_text(text: str) -> str:
    return (
        text.replace("&", "#amp;")
        .replace('"', "#quot;")
        .replace("<", "#lt;")
        .replace(">", "#gt;")
        .replace("|", "#124;")
    )


def to_mermaid(g: Graph) -> str:
    out = ["---", f"title: {g.title}", "---", "flowchart TD"]
    for n in g.nodes:
        left, right = _MERMAID_SHAPES[n.shape]
        label = "<br/>".join(_mermaid_text(line) for line in n.lines)
        out.append(f"    {n.id}{left}{label}{right}")
    for e in g.edges:
        arrow = "-->" if e.style == SOLID else "-.->"  # Mermaid has one dotted style
        label = f'|"{_mermaid_text(e.label)}"|' if e.label else ""
        out.append(f"    {e.src} {arrow}{label} {e.dst}")
    return "\n".join(out) + "\n"


# --- Graphviz DOT ----------------------------------------------------------------------

_DOT_SHAPES = {
    "box": "box",
    "round": 'box, style="rounded"',
    "stadium": 'box, style="rounded,bold"',
    "subroutine": "box, peripheries=2",
    "diamond": "diamond",
    "hexagon": "hexagon",
    "parallelogram": "parallelogram",
    "circle": "ellipse",
}


def _dot_text(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def to_dot(g: Graph) -> str:
    out = [
        f'digraph "{_dot_text(g.title)}" {{',
        "    rankdir=TB;",
        '    node [fontname="Helvetica", fontsize=11];',
        '    edge [fontname="Helvetica", fontsize=10];',
    ]
    for n in g.nodes:
        label = "\\n".join(_dot_text(line) for line in n.lines)
        out.append(f'    {n.id} [label="{label}", shape={_DOT_SHAPES[n.shape]}];')
    for e in g.edges:
        attrs = []
        if e.label:
            attrs.append(f'label="{_dot_text(e.label)}"')
        if e.style != SOLID:
            attrs.append(f"style={e.style}")
        if e.style == DOTTED:
            attrs.append("arrowhead=odot")
        suffix = f" [{', '.join(attrs)}]" if attrs else ""
        out.append(f"    {e.src} -> {e.dst}{suffix};")
    out.append("}")
    return "\n".join(out) + "\n"
