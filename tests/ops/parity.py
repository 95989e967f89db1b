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
from dataclasses import dataclass
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
updates:
  note:
    description: Answered at once with its input
    input_schema: {type: object}
    examples: [{n: 1}]
    reply: "${update.input}"
queries:
  stage:
    description: The run's status
    value: "${status}"
"""

FLOW_V2 = FLOW.replace("flow: parity\n", "flow: parity\nversion: 2\n")

FAILING = """
flow: parity-fail
tools: {down: {class: idempotent}}
steps:
  - {id: call, call_tool: {tool: down, input: 1}, retry: {max_attempts: 1}}
"""

TOOLS = """
from flowcore_handlers import HandlerError, publish


def remind(call):
    return "sent"


def down(call):
    publish("calling the service")  # the run's progress stream
    raise HandlerError("down", "the service is down", retryable=False)


TOOLS = {"remind": remind, "down": down}
"""

# Runs the world starts (name -> (flow file, input)), all asking "Ship it?" at
# first but p-fail, which fails. The input's key is the signal key its run waits
# with once answered; ``prefix`` keeps it apart from another world's on one server.
RUN_NAMES = ("p-main", "p-answer", "p-cancel", "p-delete", "p-upgrade", "p-fail")
# Runs the scenarios make themselves (start, fork, update-with-start, signal-with-start).
NEW_RUNS = ("p-new", "p-fork", "p-uws", "p-sws")


def runs(prefix: str = "") -> dict[str, tuple[str, Any]]:
    made: dict[str, tuple[str, Any]] = {
        name: ("parity.yaml", {"key": f"{prefix}k-{name}"}) for name in RUN_NAMES
    }
    made["p-fail"] = ("failing.yaml", None)
    return made


@dataclass
class Scenario:
    input: Callable[[dict[str, Any]], dict[str, Any]]  # facts of the world -> the input
    expect: Callable[[Any], bool] = lambda out: True  # what the output must satisfy
    # What later scenarios read from this one's output (merged into the facts).
    remember: Callable[[Any], dict[str, Any]] = lambda out: {}


def f_any(runs: list[str], name: str) -> bool:
    return any(r.endswith(name) for r in runs)


def _new_run(facts: dict[str, Any], name: str) -> str:
    """The id of a run a scenario makes (``NEW_RUNS``), as the world names it."""
    return str(facts["runs"].get(name, facts["prefix"] + name))


def _call_id(facts: dict[str, Any]) -> str:
    return str(facts["call_id"])


SCENARIOS: dict[str, Scenario] = {
    "whoami": Scenario(lambda f: {}),
    # (the flows of the surface's registry folder: none given on some surfaces)
    "flows": Scenario(lambda f: {}, lambda out: isinstance(out.flows, list)),
    "runs": Scenario(lambda f: {"limit": 50}, lambda out: len(out.runs) >= len(RUN_NAMES)),
    "run-counts": Scenario(
        lambda f: {"idPrefix": f["prefix"] + "p-"},
        lambda out: out.total >= len(RUN_NAMES) and sum(out.counts.values()) == out.total,
    ),
    "show": Scenario(
        lambda f: {"runId": f["runs"]["p-main"]},
        # with the tools its flow lets scheduled.add call
        lambda out: out.run.run_id.endswith("p-main") and out.schedulable == ["remind"],
    ),
    "events": Scenario(
        lambda f: {"runId": f["runs"]["p-main"], "start": 0}, lambda out: len(out) > 0
    ),
    # A settled run's: the follow ends with its last record.
    "follow": Scenario(
        lambda f: {"runId": f["runs"]["p-fail"], "start": 0},
        lambda out: out[-1].type == "run.settled",
    ),
    "export": Scenario(lambda f: {"runId": f["runs"]["p-main"]}, lambda out: b"run.started" in out),
    # What p-fail's handler published (on a host that keeps progress streams).
    "progress": Scenario(
        lambda f: {"runId": f["runs"]["p-fail"], "start": 0},
        lambda out: [r.data["data"] for r in out] == ["calling the service"],
    ),
    "progress-follow": Scenario(
        lambda f: {"runId": f["runs"]["p-fail"], "start": 0},
        lambda out: [(r.index, r.data["step"]) for r in out] == [(0, "call")],
    ),
    "questions": Scenario(
        lambda f: {"runId": f["runs"]["p-main"]},
        lambda out: [q.question for q in out.questions] == ["Ship it?"],
    ),
    "waits": Scenario(
        lambda f: {"runId": f["runs"]["p-main"]}, lambda out: len(out["questions"]) == 1
    ),
    "graph": Scenario(
        lambda f: {"runId": f["runs"]["p-main"]}, lambda out: "flowchart" in out.mermaid
    ),
    "start": Scenario(
        lambda f: {
            "flow": f["flow"],
            "input": {"key": f["prefix"] + "k-new"},
            "runId": f["runs"]["p-new"],
        },
        lambda out: out.run_id.endswith("p-new"),
    ),
    "signal": Scenario(
        lambda f: {
            "runId": f["runs"]["p-main"],
            "name": "go",
            "payload": 1,
            "key": f["prefix"] + "k-p-main",
        },
        lambda out: out.run_id.endswith("p-main"),
    ),
    "signal-key": Scenario(
        lambda f: {"name": "go", "key": f["prefix"] + "k-p-answer", "payload": 2},
        lambda out: len(out.runs) == 1 and out.runs[0].endswith("p-answer"),
    ),
    "answer": Scenario(
        lambda f: {"runId": f["runs"]["p-answer"], "key": "decide", "answer": "yes"},
        lambda out: out.run_id.endswith("p-answer"),
    ),
    "update": Scenario(
        lambda f: {
            "runId": f["runs"]["p-main"],
            "name": "note",
            "input": {"n": 1},
            "updateId": f["prefix"] + "u-1",
        },
        lambda out: out.status == "completed" and out.output == {"n": 1},
    ),
    "update-result": Scenario(
        lambda f: {"runId": f["runs"]["p-main"], "updateId": f["prefix"] + "u-1"},
        lambda out: out.status == "completed" and out.output == {"n": 1},
    ),
    "updates": Scenario(
        lambda f: {"runId": f["runs"]["p-main"]},
        lambda out: [(u.name, u.status) for u in out] == [("note", "completed")],
    ),
    "query": Scenario(
        lambda f: {"runId": f["runs"]["p-main"], "name": "stage"},
        lambda out: out.value == "running",
    ),
    "update-with-start": Scenario(
        lambda f: {
            "flow": f["flow"],
            "runId": _new_run(f, "p-uws"),
            "name": "note",
            "input": {"key": f["prefix"] + "k-uws"},
            "updateInput": {"n": 2},
            "updateId": f["prefix"] + "u-2",
        },
        lambda out: out.run_id.endswith("p-uws") and out.output == {"n": 2},
    ),
    "signal-with-start": Scenario(
        lambda f: {
            "flow": f["flow"],
            "runId": _new_run(f, "p-sws"),
            "name": "go",
            "input": {"key": f["prefix"] + "k-sws"},
            "payload": 3,
            "key": f["prefix"] + "k-sws",
        },
        lambda out: out.run_id.endswith("p-sws"),
    ),
    "scheduled.add": Scenario(
        lambda f: {
            "runId": f["runs"]["p-main"],
            "tool": "remind",
            "input": {"to": "ann"},
            "delayMs": 3_600_000,
            "everyMs": 3_600_000,
            "count": 2,
        },
        lambda out: (
            out.tool == "remind"
            and out.status == "pending"
            and (out.every_ms, out.count, out.fires) == (3_600_000, 2, 0)
        ),
    ),
    "scheduled.list": Scenario(
        lambda f: {"runId": f["runs"]["p-main"]}, lambda out: len(out.calls) >= 1
    ),
    "scheduled.run-now": Scenario(lambda f: {"runId": f["runs"]["p-main"], "callId": _call_id(f)}),
    "scheduled.cancel": Scenario(
        lambda f: {"runId": f["runs"]["p-main"], "callId": f["call_id_2"]}
    ),
    # A call the world ran to its end, replayed under a request (a retry replays once).
    "scheduled.replay": Scenario(
        lambda f: {"runId": f["runs"]["p-main"], "callId": f["call_id_done"], "request": "r-1"},
        lambda out: out.replays == 1 and out.status in ("running", "completed"),
    ),
    "schedule.add": Scenario(
        lambda f: {"flow": f["flow"]},
        lambda out: len(out.names) == 1 and out.names[0].endswith("nightly"),
        remember=lambda out: {"schedule": out.names[0]},
    ),
    # (Temporal lists schedules through visibility: the one added may not show yet.)
    "schedule.list": Scenario(lambda f: {}, lambda out: isinstance(out.schedules, list)),
    "schedule.show": Scenario(lambda f: {"name": f["schedule"]}),
    "schedule.pause": Scenario(lambda f: {"name": f["schedule"], "note": "parity"}),
    "schedule.resume": Scenario(lambda f: {"name": f["schedule"]}),
    "schedule.trigger": Scenario(lambda f: {"name": f["schedule"]}),
    "schedule.backfill": Scenario(
        lambda f: {"name": f["schedule"], "start": f["past_start"], "end": f["past_end"]}
    ),
    "schedule.delete": Scenario(lambda f: {"name": f["schedule"]}),
    "fork": Scenario(
        lambda f: {
            "runId": f["runs"]["p-main"],
            "fromStep": "decide",
            "newRunId": f["runs"]["p-fork"],
        },
        lambda out: out.run_id.endswith("p-fork"),
    ),
    # A run and its fork: the same up to the decision the fork was made before.
    "compare": Scenario(
        lambda f: {"a": f["runs"]["p-main"], "b": f["runs"]["p-fork"]},
        lambda out: out.first_difference is not None and out.same == out.first_difference > 1,
    ),
    "upgrade": Scenario(
        lambda f: {"runId": f["runs"]["p-upgrade"], "flow": f["flow_v2"], "dryRun": True}
    ),
    "resume": Scenario(lambda f: {"runId": f["runs"]["p-fail"]}),
    "cancel": Scenario(
        lambda f: {"runId": f["runs"]["p-cancel"], "reason": "parity"},
        lambda out: out.run_id.endswith("p-cancel"),
    ),
    "delete": Scenario(
        lambda f: {"runId": f["runs"]["p-delete"], "force": True},
        lambda out: f_any(out.runs, "p-delete"),
    ),
    "prune": Scenario(
        lambda f: {"settledBefore": "2000-01-01T00:00:00Z", "dryRun": True},
        lambda out: out.dry_run,
    ),
}

# Reads first, then what changes runs, then what ends or removes them.
ORDER = [
    "whoami",
    "flows",
    "runs",
    "run-counts",
    "show",
    "events",
    "export",
    "progress",
    "progress-follow",
    "questions",
    "waits",
    "graph",
    "start",
    "update",
    "update-result",
    "updates",
    "query",
    "update-with-start",
    "signal-with-start",
    "scheduled.add",
    "scheduled.list",
    "scheduled.run-now",
    "scheduled.cancel",
    "scheduled.replay",
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
    "compare",
    "upgrade",
    "resume",
    "cancel",
    "delete",
    "prune",
]

# Per host: the operations it refuses (``host-refuses``), as specs/hosts.md lists them.
REFUSED: dict[str, set[str]] = {
    "local": set(),
    "temporal": {"prune", "delete", "resume", "run-counts"},
}
