"""The constructs: one module each, dispatched here by the step's body type.

Each construct implements what its steps do against the transaction
interface of ``txn.Txn``:

- ``begin``: start (an attempt of) the step; return its ``Outcome`` if it
  ends at once, or None once it waits (for an effect, a timer, its children);
- ``child_done``, for composites: one of the step's lists ended; return the
  step's outcome if that decides it;
- their timers and answers, which ``transitions`` routes to them.

The step-level machinery every construct shares (lists, retries, timeouts,
results, handing outcomes up) is ``txn``; how the run ends is ``ending``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, assert_never

from ...language.spec import (
    AskHumanStep,
    AwaitSignalStep,
    CallToolStep,
    CancelScheduledStep,
    ContinueAsNewStep,
    FailStep,
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
from ..state import ListKind, SeqFrame, StepFrame
from . import (
    continue_as_new,
    fail,
    for_each,
    leaf,
    metadata,
    parallel,
    repeat,
    schedule,
    subflow,
    switch,
    team,
    try_catch,
)

if TYPE_CHECKING:
    from ..outcome import Outcome
    from ..txn import Txn

__all__ = ["begin", "child_done", "steps_of"]


def begin(t: Txn, frame: StepFrame, step: Step) -> Outcome | None:
    """Start (an attempt of) ``step`` in ``frame``."""
    body = step.body
    match body:
        case CallToolStep():
            return leaf.begin_call_tool(t, frame, body)
        case RunAgentStep():
            return leaf.begin_run_agent(t, frame, body)
        case RunTeamStep():
            return team.begin(t, frame, body)
        case RunSubflowStep():
            return subflow.begin(t, frame, body)
        case AskHumanStep():
            return leaf.begin_ask_human(t, frame, body)
        case SleepStep():
            return leaf.begin_sleep(t, frame, body)
        case AwaitSignalStep():
            return leaf.begin_await_signal(t, frame, body)
        case SignalRunStep():
            return leaf.begin_signal_run(t, frame, body)
        case SwitchStep():
            return switch.begin(t, frame, step, body)
        case TryStep():
            return try_catch.begin(t, frame, step)
        case ParallelStep():
            return parallel.begin(t, frame, step, body)
        case ForEachStep():
            return for_each.begin(t, frame, step, body)
        case RepeatStep():
            return repeat.begin(t, frame, body)
        case ScheduleStep():
            return schedule.begin(t, frame, body)
        case CancelScheduledStep():
            return schedule.begin_cancel(t, frame, body)
        case FailStep():
            return fail.begin(t, frame, body)
        case SetMetadataStep():
            return metadata.begin(t, frame, body)
        case ContinueAsNewStep():
            return continue_as_new.begin(t, frame, body)
        case _:
            assert_never(body)


def child_done(t: Txn, frame: StepFrame, child: SeqFrame | None, out: Outcome) -> Outcome | None:
    """A list of the composite step in ``frame`` ended (``child``: None if it ended at once)."""
    step = t.step_of(frame)
    body = step.body
    match body:
        case SwitchStep():
            return out
        case TryStep():
            return try_catch.child_done(t, frame, step, body, out)
        case ParallelStep():
            assert child is not None
            return parallel.child_done(t, frame, body, child.branch, out)
        case ForEachStep():
            assert child is not None
            return for_each.child_done(t, frame, step, body, child.index, out)
        case RepeatStep():
            return repeat.child_done(t, frame, body, out)
        case (
            CallToolStep()
            | RunAgentStep()
            | RunTeamStep()
            | RunSubflowStep()
            | AskHumanStep()
            | SleepStep()
            | AwaitSignalStep()
            | SignalRunStep()
            | ScheduleStep()
            | CancelScheduledStep()
            | FailStep()
            | SetMetadataStep()
            | ContinueAsNewStep()
        ):
            raise AssertionError(f"step {step.id} has no lists")
        case _:
            assert_never(body)


def steps_of(owner: Step, frame: SeqFrame) -> tuple[Step, ...]:
    """The steps of the list ``frame`` runs, which ``owner`` owns."""
    body = owner.body
    kind = frame.list
    match kind:
        case ListKind.COMPENSATION:
            return owner.compensate
        case ListKind.BODY:
            assert isinstance(body, ForEachStep | RepeatStep)
            return body.steps
        case ListKind.TRY:
            assert isinstance(body, TryStep)
            return body.steps
        case ListKind.CATCH:
            assert isinstance(body, TryStep)
            return body.catch[frame.index].steps
        case ListKind.BRANCH:
            assert isinstance(body, ParallelStep)
            return body.branches[frame.branch]
        case ListKind.CASE:
            assert isinstance(body, SwitchStep)
            return body.cases[frame.index].steps
        case ListKind.FLOW | ListKind.FINAL | ListKind.UPDATE:
            raise AssertionError("the flow's own lists have no owner step")
        case _:
            assert_never(kind)
