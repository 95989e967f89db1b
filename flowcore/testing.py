"""Property-test flows with hypothesis, and explore them exhaustively.

Five parts, all usable on your own flows (``specs/testing.md`` walks through
them):

* **The simulator** (``Simulator``, ``simulate``; responses ``Ok``, ``Fail``,
  ``Unknown``, ``Hang``, ``HeartbeatTimeout``, ``Responses``; ``Fault``,
  ``Signal``): a
  synchronous host with a virtual clock that runs a flow, its subflows and a
  scripted world to the end and returns a ``Trajectory``. A handler is given
  a ``Call``, through which it asks its run what a host's handler asks through
  its context (schedule a call, cancel one, list them, signal a run, publish
  progress; ``CallError`` when that cannot be done); the trajectory keeps each
  run's published items (``ProgressItem``: index, key of the work, step, time,
  data) in ``progress``. ``Update`` requests are sent at virtual times; the
  trajectory holds their replies (``replies``, ``reply(id)``), the refused
  ones (``Refusal``) and answers the flow's queries (``query``).
* **Strategies**: ``flows()`` generates valid specs that use every construct
  of the language; ``event_streams(flow, input)`` generates what a host may
  report to a run, hostile reports included (duplicates, unknown keys, wrong
  options, wrong kinds, reordering, clocks going backwards, oversize payloads,
  events after settlement); ``faults()`` generates fault injections for the
  simulator.
* **Invariants**: ``check_run(flow, input, events)`` drives a run and checks
  everything below; each check also exists alone (``check_determinism``,
  ``check_budget``, ``check_keys``, ``check_settlement``,
  ``check_work_accounted``, ``check_rejections``, ``check_updates``) and takes either
  ``(flow, input, events)`` or a ``RunHistory``; ``check_trajectory`` checks a
  simulation, every child run included. They raise ``AssertionError`` with a
  message that names the run, the turn and the event.
* **``FlowMachine``**: a hypothesis ``RuleBasedStateMachine`` that drives one
  run with rules (deliver a result, fail, outcome unknown, duplicate, advance
  the clock, signal, answer, cancel, hostile events) and checks the invariants
  after every rule. Subclass it with ``flow = ...`` and ``input = ...``.
* **Exploration** (``explore``, ``World``, ``Point``, ``Exploration``,
  ``Violation``): every ordering of what a world may report to a run, up to
  a bound, each distinct state once, commuting answers in one order; the
  built-in invariants (``BUILT_IN``), your own and liveness at every
  transition; a violation as the shortest event sequence to it, a log and a
  trajectory.

Like the rest of flowcore this module does no I/O, reads no clock and draws
no random number of its own: every choice comes from hypothesis or from the
caller.

The strategies and ``FlowMachine`` need hypothesis, which comes with the
``testing`` extra (``pip install 'flowcore[testing]'``); everything else here
(the simulator, the invariants, exploration) works without it.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from .explore.search import (
    BUILT_IN,
    Exploration,
    Point,
    Progress,
    Violation,
    World,
    explore,
)
from .testkit.checks import (
    check_budget,
    check_determinism,
    check_history,
    check_keys,
    check_rejections,
    check_run,
    check_settlement,
    check_trajectory,
    check_updates,
    check_work_accounted,
)
from .testkit.events import (
    MOVES,
    apply,
    event_of_kind,
    events_from_moves,
    hostile_events,
    pending_events,
    play,
)
from .testkit.generated import generated_world
from .testkit.script import spend_all
from .testkit.simulator import (
    FAULT_KINDS,
    Call,
    CallError,
    Entry,
    Fail,
    Fault,
    Hang,
    HeartbeatTimeout,
    Ok,
    ProgressItem,
    Refusal,
    Responses,
    RunHistory,
    Signal,
    SimulationError,
    Simulator,
    Trajectory,
    Turn,
    Unknown,
    Update,
    UsageLine,
    UsageReport,
    drive,
    simulate,
)
from .testkit.vocabulary import AGENTS as AGENTS
from .testkit.vocabulary import (
    CHILD_SPEC,
    EVENT_KINDS,
    META_FIELDS,
    SIGNALS,
    TEAMS,
    TOOLS,
    UPDATE_EXAMPLES,
    UPDATE_NAMES,
)
from .testkit.vocabulary import ERROR_TYPES as ERROR_TYPES
from .testkit.vocabulary import SIGNAL_KEY as SIGNAL_KEY
from .testkit.vocabulary import STEP_KINDS as STEP_KINDS

if TYPE_CHECKING:
    from .testkit.machine import FlowMachine
    from .testkit.strategies import (
        event_streams,
        events_for,
        faults,
        flow_inputs,
        flows,
        moves,
    )

__all__ = [
    "BUILT_IN",
    "CHILD_SPEC",
    "EVENT_KINDS",
    "FAULT_KINDS",
    "MOVES",
    "META_FIELDS",
    "SIGNALS",
    "TEAMS",
    "TOOLS",
    "UPDATE_EXAMPLES",
    "UPDATE_NAMES",
    "Call",
    "CallError",
    "Entry",
    "Exploration",
    "Fail",
    "Fault",
    "FlowMachine",
    "Hang",
    "HeartbeatTimeout",
    "Ok",
    "Point",
    "Progress",
    "ProgressItem",
    "Refusal",
    "Responses",
    "RunHistory",
    "Signal",
    "SimulationError",
    "Simulator",
    "Trajectory",
    "Turn",
    "Unknown",
    "Update",
    "UsageLine",
    "UsageReport",
    "Violation",
    "World",
    "apply",
    "check_budget",
    "check_determinism",
    "check_history",
    "check_keys",
    "check_rejections",
    "check_run",
    "check_settlement",
    "check_trajectory",
    "check_updates",
    "check_work_accounted",
    "drive",
    "event_of_kind",
    "event_streams",
    "events_for",
    "events_from_moves",
    "explore",
    "faults",
    "flow_inputs",
    "flows",
    "generated_world",
    "hostile_events",
    "moves",
    "pending_events",
    "play",
    "simulate",
    "spend_all",
]

# The names that need hypothesis, and the private module each comes from: they
# are imported when first asked for, so that the rest works without it.
_NEEDS_HYPOTHESIS = {
    "FlowMachine": "machine",
    "event_streams": "strategies",
    "events_for": "strategies",
    "faults": "strategies",
    "flow_inputs": "strategies",
    "flows": "strategies",
    "moves": "strategies",
}


def __getattr__(name: str) -> Any:
    part = _NEEDS_HYPOTHESIS.get(name)
    if part is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        module = import_module(f".testkit.{part}", __package__)
    except ModuleNotFoundError as e:
        if e.name is None or e.name.partition(".")[0] != "hypothesis":
            raise
        raise ImportError(
            f"flowcore.testing.{name} needs hypothesis, which is not installed: "
            "pip install 'flowcore[testing]'",
            name=__name__,
        ) from None
    value = getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_NEEDS_HYPOTHESIS})
