"""The simulator: a synchronous host with a virtual clock, for tests.

Theory of operation
-------------------

A simulation plays every part a real host plays for one root run and every
child run it starts: it executes each effect by asking a *script* (tools,
agents and teams are plain Python callables or canned responses, humans are
scripted answers, signals are scheduled at virtual times, subflows come from a
registry of flows) and reports the results back with ``advance``.

Time is virtual. An *agenda* holds every event that is due, ordered by
(virtual time, arrival order); the clock jumps straight to the next one. So
sleeps, timeouts, retry backoffs, repeats and wall-clock deadlines complete
at once, in the order their times say. A host may disarm a timer it knows the
run no longer waits for; the simulator does (a timer the driver, ``plan``,
says to drop, because its step ended another way or its run settled, is
dropped unfired). Everything else that is due is delivered, including
answers for work the run abandoned (recorded and ignored by the core) and
answers that arrive after the run settled (rejected, and logged as
``event.rejected``). Work of ``cancellation: wait_cancellation_completed``
that never answers (``Hang``) reports, once cancelled, that it stopped
(``effect-failed`` of type ``cancelled``), as a host's handler would.

Child runs are started with the ``run-subflow`` effect's idempotency key as
their run id, its depth and its remaining budget, in the same virtual clock;
when a child settles its parent gets ``subflow-settled`` with the child's
usage (steps, including its own work effects, and cost). A re-issued
``run-subflow`` (after an unknown outcome) attaches to the child that already
runs under that key instead of starting a second one. When a run settles, its
children that are still running are cancelled, but those ``plan`` says to
detach (``parent_close: abandon``), which run on. A ``detached`` child is
started as a root run (its own flow's budget, depth 0) and its parent gets
``effect-succeeded`` with ``{"run_id": <key>}`` at once; nothing more.

Faults (``Fault``) change how one target's calls are answered: fail, fail
retryably, outcome unknown, never answer, answer twice, answer late, answer
after the next delivery (out of order). When several events are due at the
same virtual instant, ``order`` may pick which goes first (hypothesis draws
it); otherwise they go in arrival order.

A handler asks its run through its ``Call`` what a host's handler asks
through its context (``asking``): it schedules a call, cancels one, lists
them, signals a run (its own included) and publishes progress. Each request
is reported to its run at once, at the handler's virtual time, before the
handler's own result (due later): on a host too the request is applied while
the handler runs. A scheduled call's request is ``<key>#<n>``, so a re-issued
call under the same key schedules nothing twice. Published items are kept per
run in the trajectory (``progress``); they are not events of the run.

Every run's log is recorded with ``Recorder``, so the records are exactly the
event log format; the result is a ``Trajectory``: every effect and event in
order, the log, usage (total and per agent member), final status.

This module holds ``Simulator`` and ``simulate``; ``script`` what a script is
made of (responses, calls, faults, signals), ``history`` what a simulation
leaves (run histories, ``drive``, the ``Trajectory``) and ``simulation`` the
driving loop. None of them may do I/O, read a clock or draw a random number:
the only nondeterminism is what the caller passes in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeAlias

from ..decision.wire import BudgetRemaining, Event
from ..language.spec import Budget, Flow
from ..log.fork import fork
from ..log.records import Record
from .history import (
    Entry,
    ProgressItem,
    RunHistory,
    Trajectory,
    Turn,
    UsageLine,
    UsageReport,
    drive,
)
from .history import as_flow as as_flow
from .script import (
    FAULT_KINDS,
    Call,
    CallError,
    Fail,
    Fault,
    Hang,
    HeartbeatTimeout,
    Ok,
    Refusal,
    Responses,
    Signal,
    SimulationError,
    Unknown,
    Update,
)
from .script import Spec as Spec
from .simulation import _Simulation

__all__ = [
    "FAULT_KINDS",
    "Call",
    "CallError",
    "Entry",
    "Fail",
    "Fault",
    "Hang",
    "HeartbeatTimeout",
    "Ok",
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
    "drive",
    "simulate",
]


# --- the simulator --------------------------------------------------------------------------

Handler: TypeAlias = Callable[[Call], Any]


class Simulator:
    """A scripted world that runs flows in virtual time. Reusable: ``run`` is pure.

    ``tools``, ``agents``, ``teams`` map a tool, agent or team id to a handler:
    a callable taking a ``Call``, a ``Responses`` sequence, a response
    (``Ok``, ``Fail``, ``Unknown``, ``Hang``) or any other value (the output).
    A callable may return any of those; an exception it raises becomes
    ``effect-failed`` (type: the exception's class name), except
    ``AssertionError``, which propagates. ``default`` answers anything not
    scripted; without it an unscripted call raises ``SimulationError``.

    ``humans`` answers ``ask-human``: a mapping from step id (or ``*``) to an
    answer, a callable taking a ``Call``, or one answer for every question.
    ``signals`` are sent at their virtual times, ``cancel_at_ms`` requests
    cancellation of the root run. ``updates`` are update requests (``Update``),
    each sent at its ``at_ms`` as a host sends one: a known id runs nothing, a
    refused request writes nothing (``Trajectory.refused``); the replies are
    on ``Trajectory.replies``. ``events`` are other events from outside the
    root run (``scheduled-cancel-requested``, ``scheduled-run-now-requested``,
    ``scheduled-add-requested``, ``scheduled-replay-requested``), each delivered
    at its ``at_ms``. ``subflows``
    is the registry of flows that ``run-subflow`` may start (a mapping by id,
    or flows). ``latency_ms`` is how long every answer takes unless the
    response says otherwise.

    ``order`` breaks ties between events due at the same instant: a sequence
    of choices (each taken modulo the number of ties; FIFO once used up) or a
    callable ``n -> index``. ``max_events`` and ``until_ms`` bound the
    simulation. ``paranoid`` snapshots the state around every ``advance`` so
    that ``flowcore.testing`` can check it was never mutated.
    """

    def __init__(
        self,
        *,
        tools: Mapping[str, Any] | None = None,
        agents: Mapping[str, Any] | None = None,
        teams: Mapping[str, Any] | None = None,
        humans: Any = None,
        signals: Iterable[Signal] = (),
        subflows: Mapping[str, Spec] | Iterable[Flow] | None = None,
        faults: Iterable[Fault] = (),
        cancel_at_ms: int | None = None,
        events: Iterable[Event] = (),
        updates: Iterable[Update] = (),
        latency_ms: int = 1,
        default: Any = None,
        order: Sequence[int] | Callable[[int], int] | None = None,
        max_events: int = 100_000,
        until_ms: int | None = None,
        paranoid: bool = False,
    ) -> None:
        if latency_ms < 0:
            raise ValueError(f"latency_ms must not be negative, got {latency_ms}")
        self.tools = dict(tools or {})
        self.agents = dict(agents or {})
        self.teams = dict(teams or {})
        self.humans = humans
        self.signals = tuple(signals)
        registry: dict[str, Flow] = {}
        if isinstance(subflows, Mapping):
            for name, spec in subflows.items():
                registry[name] = as_flow(spec)
        elif subflows is not None:
            for flow in subflows:
                registry[flow.id] = flow
        self.subflows = registry
        self.faults = tuple(faults)
        self.cancel_at_ms = cancel_at_ms
        self.events = tuple(events)
        self.updates = tuple(updates)
        for update in self.updates:
            if not isinstance(update, Update):
                raise TypeError(f"Simulator: updates= takes Update values, got {update!r}")
        self.latency_ms = latency_ms
        self.default = default
        self.order = order
        self.max_events = max_events
        self.until_ms = until_ms
        self.paranoid = paranoid

    def run(
        self,
        flow: Spec,
        input: Any = None,
        *,
        run_id: str = "run",
        now_ms: int = 0,
        budget: Budget | BudgetRemaining | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Trajectory:
        """Simulate one root run of ``flow`` (and its children) to the end.

        ``run_id``, ``now_ms``, ``budget`` and ``metadata`` go to ``flowcore.start``.
        """
        return _Simulation(self, now_ms).run(as_flow(flow), input, run_id, budget, metadata)

    def fork(
        self,
        flow: Spec,
        records: Iterable[Record],
        run_id: str,
        *,
        at: int | None = None,
        from_step: str | None = None,
    ) -> Trajectory:
        """Simulate a fork of the run whose log is ``records`` to the end (``flowcore.fork``).

        The fork begins with the source's history up to the point (its log
        holds the carried records); what is open there is answered by this
        simulator's world, from the time of the last carried record on.
        """
        parsed = as_flow(flow)
        forked = fork(records, parsed, run_id, at=at, from_step=from_step)
        return _Simulation(self, forked.records[-1].at).run(
            parsed, None, run_id, None, forked=forked
        )


def simulate(flow: Spec, input: Any = None, **world: Any) -> Trajectory:
    """``Simulator(**world).run(flow, input)``, for one-off runs."""
    names = ("run_id", "now_ms", "budget", "metadata")
    run_args = {k: world.pop(k) for k in names if k in world}
    return Simulator(**world).run(flow, input, **run_args)
