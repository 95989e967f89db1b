"""One scenario per catalogue operation, played on any surface and host.

``FLOW`` and ``TOOLS`` make the runs the scenarios act on; ``SCENARIOS`` gives,
per operation, the input (as the wire spells it, camelCase) it is called with
once the world is set up, and ``ORDER`` the order they are played in (the
ones that end or remove runs last). A surface (the operations called
directly, the command line, HTTP) plays ``input`` and hands back either the
output, decoded as the operation's output type, or the failure's code; a
scenario passes when the output comes, or when the host's refusal does where
``REFUSED`` lists it for that host.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

FLOW = """
flow: parity
metadata: {customer: string}
tools:
  remind: {class: idempotent, schedulable: true}
steps:
  - id: decide
    ask_human: {question: "Ship it?", options: ["yes", "no"]}
  - {id: hold, await_signal: {signal: go, key: "${input.key}"}}
output: "${steps.decide.answer}"
schedules:
  nightly:
    every: 1h
"""

FLOW_V2 = FLOW.replace("flow: parity\n", "flow: parity\nversion: 2\n")

FAILING = """
flow: parity-fail
tools: {down: {class: idempotent}}
steps:
  - {id: call, call_tool: {tool: down, input: 1}, retry: {max_attempts: 1}}
"""

TOOLS = """
from flowcore_handlers import HandlerError


def remind(call):
    return "sent"


def down(call):
    raise HandlerError("down", "the service is down", retryable=False)


TOOLS = {"remind": remind, "down": down}
"""

# Runs the world starts (run id -> (flow file, input)), all asking "Ship it?" at first.
RUNS = {
    "p-main": ("parity.yaml", {"key": "k-main"}),
    "p-answer": ("parity.yaml", {"key": "k-answer"}),
    "p-cancel": ("parity.yaml", {"key": "k-cancel"}),
    "p-delete": ("parity.yaml", {"key": "k-delete"}),
    "p-upgrade": ("parity.yaml", {"key": "k-upgrade"}),
    "p-fail": ("failing.yaml", None),
}


@dataclass
class Scenario:
    input: Callable[[dict[str, Any]], dict[str, Any]]  # facts of the world -> the input
    expect: Callable[[Any], bool] = lambda out: True  # what the output must satisfy
    needs: set[str] = field(default_factory=set)


def _call_id(facts: dict[str, Any]) -> str:
    return str(facts["call_id"])


SCENARIOS: dict[str, Scenario] = {
    "whoami": Scenario(lambda f: {}),
    "runs": Scenario(lambda f: {"limit": 50}, lambda out: len(out.runs) >= len(RUNS)),
    "show": Scenario(lambda f: {"runId": "p-main"}, lambda out: out.run.run_id == "p-main"),
    "events": Scenario(lambda f: {"runId": "p-main", "start": 0}, lambda out: len(out) > 0),
    "follow": Scenario(lambda f: {"runId": "p-answer", "start": 0}),
    "export": Scenario(lambda f: {"runId": "p-main"}, lambda out: b"run.started" in out),
    "questions": Scenario(
        lambda f: {"runId": "p-main"},
        lambda out: [q.question for q in out.questions] == ["Ship it?"],
    ),
    "waits": Scenario(lambda f: {"runId": "p-main"}, lambda out: len(out["questions"]) == 1),
    "graph": Scenario(lambda f: {"runId": "p-main"}, lambda out: "flowchart" in out.mermaid),
    "start": Scenario(
        lambda f: {"flow": f["flow"], "input": {"key": "k-new"}, "runId": "p-new"},
        lambda out: out.run_id == "p-new",
    ),
    "signal": Scenario(
        lambda f: {"runId": "p-main", "name": "go", "payload": 1, "key": "k-main"},
        lambda out: out.run_id == "p-main",
    ),
    "signal-key": Scenario(
        lambda f: {"name": "go", "key": "k-answer", "payload": 2},
        lambda out: out.runs == ["p-answer"],
    ),
    "answer": Scenario(
        lambda f: {"runId": "p-answer", "key": "decide", "answer": "yes"},
        lambda out: out.run_id == "p-answer",
    ),
    "scheduled.add": Scenario(
        lambda f: {
            "runId": "p-main",
            "tool": "remind",
            "input": {"to": "ann"},
            "delayMs": 3_600_000,
        },
        lambda out: out.tool == "remind" and out.status == "pending",
    ),
    "scheduled.list": Scenario(lambda f: {"runId": "p-main"}, lambda out: len(out.calls) >= 1),
    "scheduled.run-now": Scenario(lambda f: {"runId": "p-main", "callId": _call_id(f)}),
    "scheduled.cancel": Scenario(lambda f: {"runId": "p-main", "callId": f["call_id_2"]}),
    "schedule.add": Scenario(lambda f: {"flow": f["flow"]}, lambda out: out.names == ["nightly"]),
    "schedule.list": Scenario(lambda f: {}, lambda out: len(out.schedules) == 1),
    "schedule.show": Scenario(lambda f: {"name": "nightly"}),
    "schedule.pause": Scenario(lambda f: {"name": "nightly", "note": "parity"}),
    "schedule.resume": Scenario(lambda f: {"name": "nightly"}),
    "schedule.trigger": Scenario(lambda f: {"name": "nightly"}),
    "schedule.backfill": Scenario(
        lambda f: {"name": "nightly", "start": f["past_start"], "end": f["past_end"]}
    ),
    "schedule.delete": Scenario(lambda f: {"name": "nightly"}),
    "fork": Scenario(
        lambda f: {"runId": "p-main", "fromStep": "decide", "newRunId": "p-fork"},
        lambda out: out.run_id == "p-fork",
    ),
    "upgrade": Scenario(lambda f: {"runId": "p-upgrade", "flow": f["flow_v2"], "dryRun": True}),
    "resume": Scenario(lambda f: {"runId": "p-fail"}),
    "cancel": Scenario(
        lambda f: {"runId": "p-cancel", "reason": "parity"}, lambda out: out.run_id == "p-cancel"
    ),
    "delete": Scenario(
        lambda f: {"runId": "p-delete", "force": True}, lambda out: "p-delete" in out.runs
    ),
    "prune": Scenario(
        lambda f: {"settledBefore": "2000-01-01T00:00:00Z", "dryRun": True},
        lambda out: out.dry_run,
    ),
}

# Reads first, then what changes runs, then what ends or removes them.
ORDER = [
    "whoami",
    "runs",
    "show",
    "events",
    "export",
    "questions",
    "waits",
    "graph",
    "start",
    "scheduled.add",
    "scheduled.list",
    "scheduled.run-now",
    "scheduled.cancel",
    "signal",
    "answer",
    "signal-key",
    "follow",
    "schedule.add",
    "schedule.list",
    "schedule.show",
    "schedule.pause",
    "schedule.resume",
    "schedule.trigger",
    "schedule.backfill",
    "schedule.delete",
    "fork",
    "upgrade",
    "resume",
    "cancel",
    "delete",
    "prune",
]

# Per host: the operations it refuses (``host-refuses``), as specs/hosts.md lists them.
REFUSED: dict[str, set[str]] = {
    "local": set(),
    "temporal": {"prune", "delete", "graph"},
}
