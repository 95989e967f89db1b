"""The driver: what a host must do after a decision.

Every host does the same few things with a decision: start the work it
emitted, put the questions to people, arm the timers, and stop whatever the
run no longer waits for (drop its timers, cancel its work, withdraw its
questions), and once the run settled, report the outcome. ``plan`` says
exactly that, from the decision alone (its state's journal says which keys
the transition stopped waiting for), so no host works it out again:

    plan = flowcore.plan(decision)
    for effect in plan.start: ...      # run-agent, run-team, call-tool, run-subflow, signal-run
    for effect in plan.ask: ...        # ask-human
    for effect in plan.arm: ...        # sleep: arm a timer for effect.until_ms
    for key in plan.drop: ...          # timers no longer waited for
    for key in plan.cancel: ...        # work no longer waited for (a child run: cancel it)
    for key in plan.detach: ...        # work and child runs left to run on: do not cancel them
    for key in plan.withdraw: ...      # questions and signal waits no longer open
    if plan.settled: ...
    if plan.continued: ...               # flowcore.continue_run(flow, plan.continued, ...)

Keys the run stopped waiting for because their step ended another way are
in ``drop``/``cancel``/``withdraw``; keys answered by the event itself are
not (the host knows it answered them). A call's effect says what cancelling
it means (``cancellation``): work of ``try-cancel`` is cancelled and
forgotten; work of ``wait-cancellation-completed`` is cancelled and the run
still waits for the host to report how it ended (any answer to its key: the
``cancelled`` failure of a handler that stopped, or a result, which is
recorded and ignored); work of ``abandon`` is in ``detach``: the host leaves
it to run to its end and may report its late result. When the run settles, everything it
still waited for is stopped. Order follows the decision's effects, then keys
in order. The cost is what the transition changed, not what the run holds.
A run that continues as new stops everything as if it settled, and
``continued`` holds the effect that starts its next incarnation.

This module must never do I/O.
"""

from __future__ import annotations

import msgspec

from .state import Decision, How, PendingKind
from .transitions import TIMERS
from .wire import (
    AskHuman,
    AwaitSignal,
    CallTool,
    ContinueAsNew,
    RunAgent,
    RunSubflow,
    RunTeam,
    Settled,
    SignalRun,
    Sleep,
)

__all__ = ["Plan", "plan"]

_WORK = frozenset(
    {PendingKind.WORK, PendingKind.SCHEDULED_CALL, PendingKind.CHILD, PendingKind.CANCELLING}
)
_OPEN = frozenset({PendingKind.QUESTION, PendingKind.SIGNAL})


class Plan(msgspec.Struct, frozen=True, kw_only=True):
    """What a host must do after one decision (``plan``)."""

    start: tuple[RunAgent | RunTeam | CallTool | RunSubflow | SignalRun, ...] = ()
    ask: tuple[AskHuman, ...] = ()
    wait: tuple[AwaitSignal, ...] = ()  # signal waits opened (signals are routed by name)
    arm: tuple[Sleep, ...] = ()
    drop: tuple[str, ...] = ()  # timer keys
    cancel: tuple[str, ...] = ()  # work keys
    withdraw: tuple[str, ...] = ()  # question and signal-wait keys
    settled: Settled | None = None
    continued: ContinueAsNew | None = None  # start the next incarnation (``continue_run``)
    # keys left to run on: run-subflow children (parent_close: abandon, or
    # detached) and work of cancellation: abandon; the host does not cancel them
    detach: tuple[str, ...] = ()


def plan(decision: Decision) -> Plan:
    """What to dispatch, arm, drop and cancel after ``decision`` (of ``start`` or ``advance``)."""
    start: list[RunAgent | RunTeam | CallTool | RunSubflow | SignalRun] = []
    ask: list[AskHuman] = []
    wait: list[AwaitSignal] = []
    arm: list[Sleep] = []
    settled: Settled | None = None
    continued: ContinueAsNew | None = None
    for effect in decision.effects:
        match effect:
            case RunAgent() | RunTeam() | CallTool() | RunSubflow() | SignalRun():
                start.append(effect)
            case AskHuman():
                ask.append(effect)
            case AwaitSignal():
                wait.append(effect)
            case Sleep():
                arm.append(effect)
            case Settled():
                settled = effect
            case ContinueAsNew():
                continued = effect
    drop: list[str] = []
    cancel: list[str] = []
    withdraw: list[str] = []
    detach: list[str] = []

    def stop(key: str, kind: PendingKind) -> None:
        if kind in TIMERS:
            drop.append(key)
        elif kind in _WORK:
            cancel.append(key)
        elif kind in _OPEN:
            withdraw.append(key)

    state = decision.state
    resolved = state.waiting.resolved
    journal = state.journal
    stopped = set(journal.resolved)
    if journal.cancelling:  # work being cancelled that the run still waits for
        stopped.update(journal.cancelling)
    pending = state.waiting.pending
    for key in sorted(stopped):
        if key in pending and key in journal.cancelling:  # cancelled, its end still awaited
            cancel.append(key)
            continue
        how = resolved.get(key)
        if how is not None and how.how is How.ABANDONED and how.waited is not None:
            stop(key, how.waited)
        elif how is not None and how.how is How.DETACHED:
            detach.append(key)
    return Plan(
        start=tuple(start),
        ask=tuple(ask),
        wait=tuple(wait),
        arm=tuple(arm),
        drop=tuple(drop),
        cancel=tuple(cancel),
        withdraw=tuple(withdraw),
        settled=settled,
        continued=continued,
        detach=tuple(detach),
    )
