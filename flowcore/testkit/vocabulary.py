"""The vocabulary of generated flows: the tools, teams, agents, signals and kinds they use."""

from __future__ import annotations

from typing import Any

# --- the vocabulary of generated flows ---------------------------------------------------

TOOLS = {
    "read": {"class": "readonly"},
    "put": {"class": "idempotent", "schedulable": True},
    "send": {"class": "uncertain"},
    "poke": {},
}
TEAMS = {
    "duo": {
        "mode": "sequential",
        "members": [{"member": "first", "agent": "a1"}, {"member": "second", "agent": "a2"}],
    },
    "pair": {
        "mode": "parallel",
        "members": [
            {"member": "left", "agent": "a3", "instructions": "lean left"},
            {"member": "right", "agent": "a4"},
        ],
    },
}
AGENTS = ("bot", "a1", "a2", "a3", "a4")
SIGNALS = ("go", "stop")
SIGNAL_KEY = "k"  # the key of generated keyed waits and signals
ERROR_TYPES = ("boom", "busy", "timeout", "outcome-unknown")
_TOOL_NAMES = tuple(sorted(TOOLS))

CHILD_SPEC: dict[str, Any] = {
    "flow": "child",
    "tools": {"read": {"class": "readonly"}},
    "limits": {"max_subflow_depth": 3},
    "steps": [
        {"id": "look", "call_tool": {"tool": "read", "input": {"v": "${input.v}"}}},
        {
            "id": "deeper",
            "try": [{"id": "again", "run_subflow": {"flow": "child", "input": {"v": 1}}}],
            "catch": [{"errors": ["*"], "steps": [{"id": "rest", "sleep": {"for_ms": 10}}]}],
        },
    ],
    "output": "${steps.look.output}",
}
"""The flow that generated ``run_subflow`` steps start: it calls a tool, then
itself, until its depth limit fails the innermost call (which it catches)."""

EVENT_KINDS = (
    "effect-succeeded",
    "effect-failed",
    "effect-outcome-unknown",
    "human-answered",
    "timer-fired",
    "signal-received",
    "subflow-settled",
    "cancel-requested",
    "scheduled-cancel-requested",
    "scheduled-run-now-requested",
    "scheduled-add-requested",
    "scheduled-replay-requested",
    "update-requested",
)

STEP_KINDS = (
    "call_tool",
    "run_agent",
    "run_team",
    "ask_human",
    "sleep",
    "await_signal",
    "run_subflow",
    "schedule",
    "cancel_scheduled",
    "switch",
    "parallel",
    "for_each",
    "repeat",
    "try",
    "fail",
    "signal_run",
    "set_metadata",
    "continue_as_new",
)
UPDATE_NAMES = ("approve", "nudge")
"""The updates generated flows declare (``flows(updates=True)``)."""
UPDATE_EXAMPLES = ({"by": "ann"}, {"by": "bob"})
"""The inputs each generated update declares as its ``examples``."""
META_FIELDS = {"n": "number", "caught": "boolean"}
"""The metadata fields generated flows declare when a ``set_metadata`` step sets them."""
_LEAF_KINDS = (
    "call_tool",
    "run_agent",
    "run_team",
    "ask_human",
    "sleep",
    "await_signal",
    "run_subflow",
    "schedule",
    "signal_run",
)
_NEST_KINDS = ("switch", "parallel", "for_each", "repeat", "try")
