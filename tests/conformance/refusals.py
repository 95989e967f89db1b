"""What each host refuses to play among the conformance vectors, and why: pinned.

``test_hosts.py::test_each_host_refuses_exactly_the_pinned_vectors`` compares these
maps for equality with what the players refuse (``vectors.plans()`` for logs no host
could record, each player's ``refuse`` for the rest). A player that starts refusing
a vector fails it, and so does one that starts playing a vector listed here.

This is the one place to edit: a new vector that a host cannot play is added to
that host's map below with the reason its player gives; a vector every host plays
(the usual case) needs nothing here.
"""

from __future__ import annotations

from typing import Final

__all__ = ["REFUSED", "UNPLAYABLE"]

# Logs no host can produce (divergent, torn, cut, corrupt, forked, upgraded): no host
# plays them; test_vectors.py replays them.
UNPLAYABLE: Final[dict[str, str]] = {
    "corrupt-middle": "a corrupt log: nothing for a host to produce",
    "diverge-applied-now-rejected": "a divergent log: nothing for a host to produce",
    "diverge-effect-edited": "a divergent log: nothing for a host to produce",
    "diverge-effect-missing": "a divergent log: nothing for a host to produce",
    "diverge-effect-order": "a divergent log: nothing for a host to produce",
    "diverge-event-edited": "a divergent log: nothing for a host to produce",
    "diverge-extra-effect": "a divergent log: nothing for a host to produce",
    "diverge-log-ends-early": "a divergent log: nothing for a host to produce",
    "diverge-rejected-now-applies": "a divergent log: nothing for a host to produce",
    "diverge-settled-edited": "a divergent log: nothing for a host to produce",
    "fork": (
        "a fork's log: a host makes one from its source run's log (LocalHost.fork, "
        "TemporalHost.fork, Simulator.fork; tests/log/test_fork.py and the hosts' fork tests)"
    ),
    "log-ends-inside-decision": (
        "a cut log (it ends inside a decision): the run it records is incomplete"
    ),
    "torn-tail": "a torn log: the run it records is incomplete",
    "version-divergent": "a divergent log: nothing for a host to produce",
    "version-upgraded": (
        "an upgraded run's log: recorded with recorded.yaml, then flow.yaml; a host moves a run "
        "with its own upgrade (LocalHost.upgrade: tests/local/client/test_local_upgrade.py)"
    ),
}

# Per host, the vectors its player refuses beyond UNPLAYABLE: events that host never
# produces (see each player's ``refuse``).
# Until a host's player sends updates (its host's ``update``), it refuses the update vectors.
_UPDATES = "an update-requested event: this player does not send updates yet"
_UPDATE_CASES: Final = (
    "update-abandoned",
    "update-continue-as-new",
    "update-reply",
    "update-waits",
)

REFUSED: Final[dict[str, dict[str, str]]] = {
    "sim": {
        "budget-from-parent": (
            "the run starts at depth 1 (a child's): Simulator.run starts every root run at depth 0"
        ),
        "budget-wall-clock-late-event": (
            "event 0 (effect-succeeded at 70000) arrives after timer r-1/$deadline was due at "
            "60000; the simulator fires every timer when it is due"
        ),
        "cancel": (
            "a cancel with reason 'operator stop': Simulator(cancel_at_ms=...) always sends "
            "'cancel requested'"
        ),
        "compensation-on-cancel": (
            "a cancel with reason 'customer changed their mind': Simulator(cancel_at_ms=...) "
            "always sends 'cancel requested'"
        ),
        "subflow-depth": (
            "the run starts at depth 2 (a child's): Simulator.run starts every root run at depth 0"
        ),
    },
    "local": {
        "budget-from-parent": (
            "the run starts with a parent's budget {'steps': 2} at depth 1: LocalHost.start takes "
            "neither (a local run gets them only as a child run)"
        ),
        "budget-wall-clock-late-event": (
            "event 0 (effect-succeeded at 70000) arrives after timer r-1/$deadline was due at "
            "60000; the local host's worker fires a timer as soon as its clock reaches it, so "
            "nothing later can come first"
        ),
        "subflow-depth": (
            "the run starts with a parent's budget {'steps': 5, 'costMinorUnits': 100} at depth 2: "
            "LocalHost.start takes neither (a local run gets them only as a child run)"
        ),
        "unknown-idempotent": (
            "effect-outcome-unknown for r-1/call#1, whose tool is idempotent: the local host runs "
            "idempotent work again under the same key after a crash and reports nothing "
            "(specs/local.md §5)"
        ),
        "unknown-readonly": (
            "effect-outcome-unknown for r-1/call#1, whose tool is readonly: the local host runs "
            "readonly work again under the same key after a crash and reports nothing "
            "(specs/local.md §5)"
        ),
        "unknown-subflow": (
            "effect-outcome-unknown for the run-subflow r-1/child#1: the local host's children are "
            "runs in its own database, so it always knows how one ended"
        ),
    },
    "temporal": {
        "attempt-timeout": (
            "event 1 is a late result of r-1/call#1; Temporal cancels the activity of work a run "
            "at decision level 2 stops waiting for, so no late result reaches the run"
        ),
        "budget-wall-clock-late-event": (
            "event 0 (effect-succeeded at 70000) arrives after timer r-1/$deadline was due at "
            "60000; Temporal fires timers on time"
        ),
        "parallel-race": (
            "event 1 is a late result of r-1/l#1; Temporal cancels the activity of work a run at "
            "decision level 2 stops waiting for, so no late result reaches the run"
        ),
        "step-timeout": (
            "event 1 is a late result of r-1/call#1; Temporal cancels the activity of work a run "
            "at decision level 2 stops waiting for, so no late result reaches the run"
        ),
    },
}
# The local host refuses the same on either of its stores.
REFUSED["local-postgres"] = REFUSED["local"]
