"""What ``show`` and ``graph`` give the run page, on the local host (a real SQLite
file): handler failures with their tracebacks, usage by team member and by child
run, child runs (named from the log where a host lists none), and how the run
stands at each node of its diagram."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from flowcore_local import LocalHost
from flowcore_ops import BY_NAME, Context, Principal, RunInput

from ..local.local_helpers import work_until

PARENT = """
flow: parent
tools: {boom: {class: readonly}}
teams:
  pair:
    members:
      - {member: drafter, agent: writer}
      - {member: checker, agent: writer}
steps:
  - id: review
    run_team: {team: pair, prompt: "Review"}
  - id: kid
    run_subflow: {flow: child}
  - id: pick
    switch:
      - if: "input.go"
        steps: [{id: blow, call_tool: {tool: boom}}]
      - else: [{id: calm, call_tool: {tool: boom}}]
"""

CHILD = """
flow: child
steps:
  - id: help
    run_agent: {agent: writer, prompt: "Help"}
output: "${steps.help.output}"
"""

TOOLS = """
import flowcore
from flowcore_handlers import Result


def writer(run):
    return Result("ok", flowcore.Usage(tokens=10, input_tokens=7, output_tokens=3, turns=1))


def boom(call):
    raise ValueError("no luck")


TOOLS = {"boom": boom}
AGENTS = {"writer": writer}
"""


class _NoChildren:
    """A host whose ``show`` lists no child runs (as a Temporal namespace)."""

    def __init__(self, host: LocalHost) -> None:
        self._host = host

    def __getattr__(self, name: str) -> Any:
        return getattr(self._host, name)

    async def show(self, run_id: str) -> dict[str, Any]:
        shown = dict(await self._host.show(run_id))
        del shown["children"]
        return shown


def test_show_and_graph_give_the_run_page_what_it_shows(tmp_path: Path) -> None:
    (tmp_path / "parent.yaml").write_text(PARENT)
    (tmp_path / "child.yaml").write_text(CHILD)
    (tmp_path / "tools.py").write_text(TOOLS)

    async def main() -> tuple[Any, Any, Any]:
        async with LocalHost(tmp_path / "runs.db", str(tmp_path / "tools.py")) as host:
            await host.start(tmp_path / "parent.yaml", {"go": True}, "p", flows=[tmp_path])

            async def settled() -> bool:
                return (await host.run("p")).status != "running"

            await work_until(host, settled)
            ctx = Context(host, Principal.operator(), flow_folders=(tmp_path,))
            view = await BY_NAME["show"].call(ctx, RunInput(run_id="p"))
            graph = await BY_NAME["graph"].call(ctx, RunInput(run_id="p"))
            bare = Context(_NoChildren(host), Principal.operator())
            listed = await BY_NAME["show"].call(bare, RunInput(run_id="p"))
            return view, graph, listed

    view, graph, listed = asyncio.run(main())
    assert view.run.status == "failed"
    [failure] = view.failures
    assert failure["key"] == "p/blow#1" and failure["type"] == "ValueError"
    assert 'raise ValueError("no luck")' in failure["traceback"]
    usage = {"tokens": 10, "inputTokens": 7, "outputTokens": 3, "turns": 1}
    assert view.usage_by_member == {"drafter": usage, "checker": usage}
    assert view.usage_by_child == {"p/kid#1": {"steps": 1, **usage}}
    assert view.children == ["p/kid#1"] and listed.children == ["p/kid#1"]
    assert graph.outcomes == {
        "s_blow": "failed",
        "s_calm": "skipped",
        "s_kid": "done",
        "s_pick": "failed",
        "s_review": "done",
    }
