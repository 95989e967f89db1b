"""``flowcore budget`` and ``validate``'s budget warning, run for real in
subprocesses; and ``for_each.max_items`` on the local host, on a real database
file."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import flowcore
from flowcore_local import LocalHost

from ..harness import SCHEDULES_AT_RUN_TIME
from ..local.local_helpers import JOURNALED, journal, settle, tools_file
from .test_cli import REPO, fc

REFUND = """
flow: refund
budget: {steps: 20, cost_minor_units: 500}
tools:
  orders.get: {class: readonly, max_usage: {}}
  payments.refund: {class: idempotent, max_usage: {cost_minor_units: 30}}
agents:
  checker: {max_usage: {steps: 2, cost_minor_units: 40, tool_calls: 3}}
steps:
  - id: order
    call_tool: {tool: orders.get, input: {id: "${input.order}"}}
  - id: check
    run_agent: {agent: checker, prompt: "May ${input.order} be refunded?"}
  - id: per_line
    for_each:
      items: "${steps.order.output.lines}"
      max_items: 3
      steps:
        - id: refund
          call_tool: {tool: payments.refund, input: "${item}"}
"""

PARENT = """
flow: parent
tools: {t: {max_usage: {}}}
steps:
  - {id: a, call_tool: {tool: t}}
  - {id: kid, run_subflow: {flow: child}}
"""

CHILD = """
flow: child
tools: {t: {max_usage: {}}}
steps:
  - {id: b, call_tool: {tool: t}, retry: {max_attempts: 2}}
"""


def write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text)
    return path


def test_budget_prints_each_steps_worst_case_and_the_totals(tmp_path: Path) -> None:
    spec = write(tmp_path, "refund.yaml", REFUND)
    proc = fc("budget", spec)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # order: readonly, 3 issues; check: 1 + 2 steps; per_line: 3 items x 3 issues
    b = flowcore.budget_bound(flowcore.parse_flow(REFUND))
    assert (b.steps, b.cost_minor_units, b.tool_calls) == (3 + 3 + 9, 40 + 9 * 30, 3 + 3 + 9)
    cells = {
        name: [c.strip() for c in line.split("│")[1:-1]]
        for name, line in (
            (line.split("│")[1].strip(), line) for line in proc.stdout.splitlines() if "│" in line
        )
    }
    assert cells["order"][:6] == ["order", "call_tool", "steps[0]", "3", "0", "3"]
    assert cells["refund"][:6] == [
        "refund",
        "call_tool",
        "steps[2].for_each.steps[0]",
        "3",
        "90",
        "3",
    ]
    assert cells["per_line"][3:6] == ["9", "270", "9"]
    assert cells["run"][3:6] == ["15", "310", "15"]
    assert cells["budget"][3:6] == ["20", "500", "unlimited"]
    assert proc.stdout.rstrip().endswith("bounded: the budget covers the worst case")


def test_budget_exit_codes_and_json(tmp_path: Path) -> None:
    tight = write(tmp_path, "tight.yaml", REFUND.replace("steps: 20,", "steps: 10,"))
    proc = fc("budget", "--json", tight)
    assert proc.returncode == 1
    doc = json.loads(proc.stdout)
    assert doc["bounded"] is True
    assert doc["worst"] == {"steps": 15, "costMinorUnits": 310, "toolCalls": 15}
    assert doc["budget"] == {"steps": 10, "costMinorUnits": 500, "toolCalls": None}
    assert [(b["limit"], b["declared"], b["worst"]) for b in doc["below"]] == [("steps", 10, 15)]
    assert [s["id"] for s in doc["steps"]] == ["order", "check", "per_line", "refund"]
    assert doc["steps"][3]["level"] == 1 and doc["steps"][3]["path"] == (
        "steps[2].for_each.steps[0]"
    )
    text = fc("budget", tight)
    assert "below: budget.steps 10 is below the worst case 15" in text.stdout
    ok = fc("budget", write(tmp_path, "ok.yaml", REFUND))
    assert ok.returncode == 0, ok.stdout


def test_budget_names_what_leaves_a_limit_open(tmp_path: Path) -> None:
    spec = write(tmp_path, "p.yaml", PARENT)
    proc = fc("budget", "--json", spec)
    assert proc.returncode == 1
    doc = json.loads(proc.stdout)
    assert doc["bounded"] is False and doc["worst"]["steps"] is None
    assert {(u["limit"], u["path"], u["why"]) for u in doc["unbounded"]} == {
        (limit, "steps[1].run_subflow", "run_subflow 'kid': flow 'child' not given")
        for limit in ("steps", "cost", "tool_calls")
    }
    text = fc("budget", spec).stdout
    assert (
        "unbounded steps, cost, tool_calls: steps[1].run_subflow: "
        "run_subflow 'kid': flow 'child' not given"
    ) in text
    assert "unbounded" in text.splitlines()[-1]


def test_budget_reads_subflows_from_files_and_directories(tmp_path: Path) -> None:
    spec = write(tmp_path, "p.yaml", PARENT)
    flows = tmp_path / "flows"
    write(flows, "child.yaml", CHILD)
    write(flows, "notes.txt", "not a spec")
    for given in (flows, flows / "child.yaml"):
        proc = fc("budget", "--json", spec, "--subflows", given)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        # a (1) + kid: 3 issues + the child: 2 attempts of b
        assert json.loads(proc.stdout)["worst"] == {
            "steps": 1 + 3 + 2,
            "costMinorUnits": 0,
            "toolCalls": 1 + 2,
        }


def test_budget_bad_input_exits_2_with_one_line(tmp_path: Path) -> None:
    proc = fc("budget", tmp_path / "nope.yaml")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "no such spec file" in proc.stderr
    bad = write(
        tmp_path,
        "bad.yaml",
        "flow: x\nsteps: [{id: a, for_each: {items: [], "
        "max_items: 0, steps: [{id: s, sleep: {for_ms: 1}}]}}]\n",
    )
    proc = fc("budget", bad)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "steps[0].for_each.max_items" in proc.stderr + proc.stdout
    spec = write(tmp_path, "p.yaml", PARENT)
    one = write(tmp_path / "a", "c.yaml", CHILD)
    two = write(tmp_path / "b", "c.yaml", CHILD.replace("max_attempts: 2", "max_attempts: 3"))
    proc = fc("budget", spec, "--subflows", one, "--subflows", two)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"flow 'child' is also given by {one}" in proc.stderr


SAFE_RETRIED = """
flow: retried
tools:
  orders.get: {class: readonly, max_usage: {}}
  slack.post: {max_usage: {cost_minor_units: 2}}
steps:
  - id: fetch
    call_tool: {tool: orders.get, input: {id: 1}}
    retry: {max_attempts: 3}
  - id: tell
    call_tool: {tool: slack.post, input: {text: hi}}
    retry: {max_attempts: 2}
"""


def test_budget_says_why_each_row_counts_what_it_counts(tmp_path: Path) -> None:
    spec = write(tmp_path, "retried.yaml", SAFE_RETRIED)
    doc = json.loads(fc("budget", "--json", spec).stdout)
    fetch, tell = doc["steps"]
    # A safe call with retry 3: each attempt may be re-issued after an unknown outcome.
    assert (fetch["steps"], fetch["toolCalls"]) == (6, 6)
    assert fetch["why"] == (
        "6 issues: 3 attempts + re-issues after an unknown outcome (3+2+1);"
        " per issue 1 step, 1 tool call + max_usage"
    )
    # An uncertain one is never re-issued: one issue per attempt.
    assert (tell["steps"], tell["costMinorUnits"]) == (2, 4)
    assert tell["why"] == "2 issues: 2 attempts (retry); per issue 1 step, 1 tool call + max_usage"
    text = fc("budget", spec)
    assert text.returncode == 0, text.stdout + text.stderr
    header = next(line for line in text.stdout.splitlines() if "tool calls" in line)
    assert header.split("┃")[-2].strip() == "why"
    [row] = [line for line in text.stdout.splitlines() if line.startswith("│ fetch ")]
    assert "│ 6 issues: 3 attempts + re-issues" in row


def test_budget_on_every_shipped_example_is_bounded_and_covered() -> None:
    examples = REPO / "specs" / "examples"
    specs = sorted(examples.glob("*.yaml"))
    assert len(specs) >= 6
    for spec in specs:
        proc = fc("budget", spec, "--subflows", examples)
        if spec.stem in SCHEDULES_AT_RUN_TIME:  # unbounded, and the command says why
            assert proc.returncode == 1, (spec.name, proc.stdout, proc.stderr)
            assert "is schedulable: calls may be added from outside the run" in proc.stdout
            continue
        assert proc.returncode == 0, (spec.name, proc.stdout, proc.stderr)
        assert "bounded: the budget covers the worst case" in proc.stdout, spec.name
        header = next(line for line in proc.stdout.splitlines() if "tool calls" in line)
        assert header.split("┃")[-2].strip() == "why", spec.name


def test_validate_warns_when_a_declared_limit_is_below_the_worst_case(tmp_path: Path) -> None:
    tight = write(tmp_path, "tight.yaml", REFUND.replace("steps: 20,", "steps: 10,"))
    proc = fc("validate", tight, REPO / "specs" / "examples" / "triage.yaml")
    assert proc.returncode == 0  # a warning is not a problem
    assert (
        f"{tight}: warning: budget.steps 10 is below the worst case 15: "
        "a run may be stopped budget-exhausted"
    ) in proc.stdout.splitlines()
    assert "triage.yaml: warning" not in proc.stdout  # its budget covers its worst case
    doc = json.loads(fc("validate", "--json", tight).stdout)
    (warning,) = doc["files"][0]["warnings"]
    assert (warning["limit"], warning["declared"], warning["worst"]) == ("steps", 10, 15)
    # the specs given together are each other's subflows
    parent = write(
        tmp_path, "p.yaml", PARENT.replace("flow: parent", "flow: parent\nbudget: {steps: 3}")
    )
    child = write(tmp_path, "c.yaml", CHILD)
    lines = fc("validate", parent, child).stdout.splitlines()
    assert (
        f"{parent}: warning: budget.steps 3 is below the worst case 6: "
        "a run may be stopped budget-exhausted" in lines
    )


# --- max_items on the local host ---------------------------------------------------------------

CAPPED = """
flow: capped
tools: {echo: {class: readonly}}
steps:
  - id: per
    for_each:
      items: "${input.items}"
      max_items: 2
      steps: [{id: a, call_tool: {tool: echo, input: "${item}"}}]
output: "${steps.per.output}"
"""


def test_too_many_items_fail_the_step_on_the_local_host(tmp_path: Path) -> None:
    tools = tools_file(tmp_path / "tools", "capped_tools", JOURNALED + 'TOOLS = {{"echo": echo}}\n')

    async def main() -> Any:
        async with LocalHost(tmp_path / "runs.db") as host:
            await host.start(CAPPED, {"items": [1, 2, 3]}, "over", tools=str(tools))
            await host.start(CAPPED, {"items": [1, 2]}, "fits", tools=str(tools))
            return await settle(host, "over"), await settle(host, "fits")

    over, fits = asyncio.run(main())
    assert over.status == "failed"
    assert over.error == {
        "type": "too-many-items",
        "message": "for_each 'per': 3 items, over max_items 2",
    }
    assert fits.status == "completed"
    assert fits.output == [{"echo": 1}, {"echo": 2}]
    assert journal(tmp_path / "tools") == {"fits/per[0]/a#1": 1, "fits/per[1]/a#1": 1}


SHARES = """
flow: pair
budget: {steps: 41, cost_minor_units: 100, tokens: 2000}
agents:
  writer: {max_usage: {steps: 2, cost_minor_units: 60}}
  critic: {max_usage: {steps: 2, cost_minor_units: 30}}
steps:
  - id: both
    parallel:
      weights: {draft: 3}
      branches:
        draft: [{id: write, run_agent: {agent: writer, prompt: w}}]
        check:
          - id: review
            run_agent: {agent: critic, prompt: c}
            max_usage: {cost_minor_units: 20}
  - {id: finish, run_agent: {agent: writer, prompt: f}}
"""


def test_budget_shows_the_share_each_member_is_handed(tmp_path: Path) -> None:
    spec = write(tmp_path, "pair.yaml", SHARES)
    doc = json.loads(fc("budget", "--json", spec).stdout)
    shares = {s["id"]: s for s in doc["shares"]}
    assert shares["write"]["share"] == "3/4" and shares["review"]["share"] == "1/4"
    # Of the declared budget, issued first: 3/4 and 1/4 of the 40 steps left
    # after its own, of the cost (review at most its max_usage) and the tokens.
    assert shares["write"]["handed"] == {
        "steps": 30,
        "costMinorUnits": 75,
        "tokens": 1500,
        "toolCalls": None,
        "turns": None,
    }
    assert shares["review"]["handed"]["costMinorUnits"] == 20
    assert shares["finish"]["share"] == "1"
    assert shares["write"]["why"] == "3/4: branch 'draft' of 'both' (weight 3)"
    # The run itself hands the same when both start at once.
    d = flowcore.start(flowcore.parse_flow(SHARES), None, run_id="r")
    costs = {e.idempotency_key: e.budget_remaining.cost_minor_units for e in d.effects}  # type: ignore[union-attr]
    assert costs == {"r/write#1": 75, "r/review#1": 20}
    text = fc("budget", spec).stdout
    rows = {line.split("│")[1].strip(): line for line in text.splitlines() if "│" in line}
    assert [c.strip() for c in rows["review"].split("│")[3:7]] == ["1/4", "10", "20", "500"]


def test_budget_prints_no_shares_when_nothing_runs_at_once(tmp_path: Path) -> None:
    text = fc("budget", write(tmp_path, "refund.yaml", REFUND)).stdout
    assert "shares:" not in text
