"""The one generic Temporal workflow that runs any flowcore flow.

Theory of operation
-------------------

The workflow holds a flowcore ``State`` and feeds it events; each decision's
effects become Temporal work, and Temporal's answers become the next events:

``call-tool`` / ``run-agent`` / ``run-team``
    the ``flowcore_work`` activity, its activity id the idempotency key (a
    re-issue after an unknown outcome gets ``key~2``, ``key~3``: Temporal ids
    must not repeat while the earlier one is open). One attempt only
    (``maximum_attempts=1``): retrying is flowcore's job, with the flow's own
    retry policy, so the two never both retry. A timeout (start-to-close, or
    the heartbeat of a worker that died) means nobody knows whether the
    handler ran: ``effect-outcome-unknown``, and flowcore re-issues readonly
    and idempotent calls with the same key.
``sleep``
    a durable timer; ``timer-fired`` when it fires. A timer the run no longer
    waits for (an answered question's timeout) is cancelled.
``await-signal``
    nothing to do: every Temporal signal, whatever its name, is reported as
    ``signal-received`` the moment it arrives, and the interpreter buffers
    the ones that come early.
``ask-human``
    remembered for the ``pending_questions`` query; the ``answer`` update is
    validated against the interpreter first, so a wrong answer is rejected to
    its caller and never reaches the history.
``run-subflow``
    a child workflow running the child's spec (from ``RunArgs.flows``) with
    the parent's remaining budget; its result is ``subflow-settled``.
``settled``
    the workflow's result (status, output, error, usage, report).

Workflow cancellation is reported as ``cancel-requested``; the workflow keeps
running while compensations run and returns the settled result. Temporal
cancels only the workflow's main coroutine, which merely waits for the run to
settle; every piece of work runs in a task of its own, so compensations need
no ``asyncio.shield``.

Effects emitted together run concurrently, as asyncio tasks on the workflow's
deterministic event loop; the interpreter itself holds back work beyond the
flow's ``max_concurrency``, so everything it emits may start at once. Each
decision's effects are started in emission order and Temporal orders the
answers, so a replay of the history makes the same decisions.

The only clock is the workflow clock (``workflow.time_ns``), handed to the
interpreter as ``atMs``. flowcore's own log records are kept as the run goes
(the ``log`` query), so ``flowcore replay`` works on a run that executed here.

This module runs inside Temporal's workflow sandbox: it must never do I/O,
read the system clock or draw a random number.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any, assert_never

from temporalio import workflow
from temporalio.common import RawValue, RetryPolicy
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    ChildWorkflowError,
    WorkflowAlreadyStartedError,
)

with workflow.unsafe.imports_passed_through():
    # The libraries flowcore uses are always forwarded from outside the
    # sandbox (PyYAML breaks when re-imported there). flowcore itself is
    # passed through by the worker's restrictions (``PASSTHROUGH_MODULES``);
    # the tests also run it re-imported under the sandbox, to show it touches
    # nothing nondeterministic.
    import attrs  # noqa: F401
    import cattrs  # noqa: F401
    import immutables  # noqa: F401
    import jmespath  # noqa: F401
    import msgspec
    import yaml  # noqa: F401

import flowcore
from flowcore import (
    AskHuman,
    AwaitSignal,
    Budget,
    BudgetRemaining,
    CallTool,
    CancelRequested,
    Effect,
    EffectFailed,
    EffectOutcomeUnknown,
    EffectSucceeded,
    ErrorInfo,
    Event,
    EventRejected,
    HumanAnswered,
    Record,
    Recorder,
    RunAgent,
    RunSubflow,
    RunTeam,
    Settled,
    SignalReceived,
    Sleep,
    State,
    SubflowSettled,
    TimerFired,
    Usage,
)
from flowcore_temporal import _flows

from ._types import (
    ACTIVITY_NAME,
    ANSWER_UPDATE,
    LOG_QUERY,
    QUESTIONS_QUERY,
    STATUS_QUERY,
    WORKFLOW_NAME,
    RunArgs,
)

__all__ = ["FlowcoreWorkflow", "budget_to_args"]

_ONE_ATTEMPT = RetryPolicy(maximum_attempts=1)


def budget_to_args(budget: BudgetRemaining | None) -> dict[str, int] | None:
    """A remaining budget in the wire form ``RunArgs.budget`` takes."""
    if budget is None:
        return None
    out = {"steps": budget.steps}
    if budget.cost_minor_units is not None:
        out["costMinorUnits"] = budget.cost_minor_units
    if budget.wall_clock_ms is not None:
        out["wallClockMs"] = budget.wall_clock_ms
    return out


def _budget_from_args(data: dict[str, int] | None) -> Budget | BudgetRemaining | None:
    if data is None:
        return None
    cost = data.get("costMinorUnits")
    wall = data.get("wallClockMs")
    if "steps" in data:
        return BudgetRemaining(steps=data["steps"], cost_minor_units=cost, wall_clock_ms=wall)
    budget: Any = Budget(cost_minor_units=cost, wall_clock_ms=wall)  # type: ignore[arg-type]
    return budget  # type: ignore[no-any-return]


@workflow.defn(name=WORKFLOW_NAME)
class FlowcoreWorkflow:
    """Runs one flowcore run; see the module docstring for the mapping."""

    @workflow.init
    def __init__(self, args: RunArgs) -> None:
        info = workflow.info()
        self._args = args
        self._run_id = args.run_id or info.workflow_id
        real = workflow.time_ns() // 1_000_000
        self._clock_started = args.clock_started_ms if args.clock_started_ms is not None else real
        self._state: State | None = None
        self._settled: Settled | None = None
        self._recorder = Recorder(self._run_id)
        self._records: list[Record] = []
        self._early: list[Event] = []  # signals that came before the run started
        self._tasks: dict[str, tuple[str, asyncio.Task[None]]] = {}  # key -> (kind, task)
        self._issues: dict[str, int] = {}  # work key -> times issued (activity ids)
        self._questions: dict[str, AskHuman] = {}
        self._waiting: dict[str, str] = {}  # await-signal key -> signal name

    @property
    def records(self) -> list[Record]:
        """flowcore's log records of this run so far (read them; do not change them)."""
        return self._records

    # --- the clock ---------------------------------------------------------------------

    def _now(self) -> int:
        real = workflow.time_ns() // 1_000_000
        origin = self._args.clock_origin_ms
        if origin is None:
            return real
        return origin + int((real - self._clock_started) * self._args.clock_scale)

    def _real_delay(self, until_ms: int) -> float:
        """Seconds of workflow time until flowcore's clock reads ``until_ms``."""
        scale = self._args.clock_scale if self._args.clock_origin_ms is not None else 1.0
        return max(0.0, (until_ms - self._now()) / scale / 1000)

    # --- the run -------------------------------------------------------------------------

    @workflow.run
    async def run(self, args: RunArgs) -> dict[str, Any]:
        budget = _budget_from_args(args.budget)
        now = self._now()
        try:
            flow = _parse(args.spec, args.source_name)
            decision = flowcore.start(
                flow, args.input, self._run_id, now_ms=now, budget=budget, depth=args.depth
            )
        except (flowcore.SpecError, flowcore.InputError, ValueError) as exc:
            raise ApplicationError(
                " ".join(str(exc).split()), type=type(exc).__name__, non_retryable=True
            ) from None
        self._state = decision.state
        self._records.extend(
            self._recorder.started(flow, args.input, now, decision, budget, args.depth)
        )
        self._dispatch(decision.effects)
        early, self._early = self._early, []
        for event in early:
            self._offer(event)
        while self._settled is None:
            try:
                await workflow.wait_condition(lambda: self._settled is not None)
            except asyncio.CancelledError:
                # Temporal cancellation is flowcore's cancel-requested: pending
                # work is abandoned and compensations run; the run goes on
                # until it settles, and that is the workflow's result.
                reason = workflow.cancellation_reason() or "cancelled through Temporal"
                self._offer(CancelRequested(reason=reason, at_ms=self._now()))
        try:
            await workflow.wait_condition(workflow.all_handlers_finished)
        except asyncio.CancelledError:
            pass  # a cancel that came after the run settled changes nothing
        return self._result()

    def _result(self) -> dict[str, Any]:
        assert self._settled is not None and self._state is not None
        wire = flowcore.effect_to_wire(self._settled)
        ledger = self._state.ledger
        return {
            "runId": self._run_id,
            "flowId": self._state.flow.id,
            "status": wire["status"],
            "output": wire.get("output"),
            "error": wire.get("error"),
            "exhausted": wire.get("exhausted"),
            "usage": {"steps": ledger.used_steps, "costMinorUnits": ledger.used_cost},
            "report": wire.get("report", []),
        }

    # --- events in -----------------------------------------------------------------------

    def _apply(self, event: Event) -> None:
        """Advance the run by one event; ``EventRejected`` leaves it untouched (and logged)."""
        assert self._state is not None
        try:
            decision = flowcore.advance(self._state, event)
        except EventRejected as exc:
            self._records.extend(self._recorder.rejected(event, str(exc)))
            raise
        self._state = decision.state
        self._records.extend(self._recorder.applied(event, decision))
        self._dispatch(decision.effects)
        self._disarm()

    def _offer(self, event: Event) -> bool:
        """Apply an event whose sender is not waiting for a verdict."""
        try:
            self._apply(event)
        except EventRejected:
            return False
        return True

    @workflow.signal(dynamic=True)
    def _on_signal(self, name: str, args: Sequence[RawValue]) -> None:
        payload = workflow.payload_converter().from_payload(args[0].payload) if args else None
        event = SignalReceived(signal=name, payload=payload, at_ms=self._now())
        if self._state is None:
            self._early.append(event)
        else:
            self._offer(event)

    @workflow.update(name=ANSWER_UPDATE)
    def answer(self, key: str, answer: Any) -> dict[str, Any]:
        """Answer the question ``key``; the validator has checked it applies."""
        try:
            self._apply(HumanAnswered(idempotency_key=key, answer=answer, at_ms=self._now()))
        except EventRejected as exc:
            raise ApplicationError(str(exc), type="answer-rejected", non_retryable=True) from None
        return {"key": key, "answer": answer}

    @answer.validator
    def _check_answer(self, key: str, answer: Any) -> None:
        # Ask the interpreter itself (advance is pure; the result is dropped),
        # so the rule is exactly the one that would apply: pending key, an
        # answer among the options, a run that has not settled.
        state = self._state
        if state is None or key not in self._questions or key not in state.pending:
            pending = sorted(k for k in self._questions if state and k in state.pending)
            raise ApplicationError(
                f"no pending question {key!r} in run {self._run_id}"
                + (f" (pending: {', '.join(pending)})" if pending else " (none pending)"),
                type="answer-rejected",
                non_retryable=True,
            )
        try:
            flowcore.advance(
                state, HumanAnswered(idempotency_key=key, answer=answer, at_ms=self._now())
            )
        except EventRejected as exc:
            raise ApplicationError(str(exc), type="answer-rejected", non_retryable=True) from None

    # --- queries -------------------------------------------------------------------------

    @workflow.query(name=QUESTIONS_QUERY)
    def pending_questions(self) -> list[dict[str, Any]]:
        state = self._state
        if state is None:
            return []
        return [
            {"key": key, "question": q.question, "options": list(q.options or ()) or None}
            for key, q in self._questions.items()
            if key in state.pending
        ]

    @workflow.query(name=LOG_QUERY)
    def log(self, start: int = 0) -> list[dict[str, Any]]:
        """flowcore's log records of this run from index ``start``, as wire dicts."""
        out: list[dict[str, Any]] = msgspec.to_builtins(self._records[max(0, start) :])
        return out

    @workflow.query(name=STATUS_QUERY)
    def status(self) -> dict[str, Any]:
        state = self._state
        if state is None:
            return {"runId": self._run_id, "status": "starting"}
        ledger = state.ledger
        out: dict[str, Any] = {
            "runId": self._run_id,
            "flowId": state.flow.id,
            "status": state.settled.status if state.settled is not None else state.status,
            "budget": {
                "stepsUsed": ledger.used_steps,
                "stepsLeft": None if ledger.steps is None else ledger.steps - ledger.used_steps,
                "costUsed": ledger.used_cost,
                "costLeft": None if ledger.cost is None else ledger.cost - ledger.used_cost,
            },
            "pending": [
                {"key": key, "kind": entry.effect or entry.kind}
                for key, entry in sorted(state.pending.items())
            ],
            "questions": self.pending_questions(),
            "waitingFor": sorted(
                {name for key, name in self._waiting.items() if key in state.pending}
            ),
            "records": len(self._records),
        }
        if self._settled is not None:
            out["result"] = self._result()
        return out

    # --- effects out ---------------------------------------------------------------------

    def _dispatch(self, effects: tuple[Effect, ...]) -> None:
        for effect in effects:
            match effect:
                case CallTool() | RunAgent() | RunTeam():
                    self._spawn("work", effect.idempotency_key, self._work, effect)
                case Sleep():
                    self._spawn("timer", effect.idempotency_key, self._timer, effect)
                case RunSubflow():
                    self._spawn("subflow", effect.idempotency_key, self._subflow, effect)
                case AskHuman():
                    self._questions[effect.idempotency_key] = effect
                case AwaitSignal():
                    self._waiting[effect.idempotency_key] = effect.signal
                case Settled():
                    self._settled = effect
                case _:
                    assert_never(effect)

    def _spawn(
        self, kind: str, key: str, body: Callable[[Any], Awaitable[None]], effect: Effect
    ) -> None:
        async def running() -> None:
            try:
                await body(effect)
            finally:
                if self._tasks.get(key, ("", None))[1] is task:
                    del self._tasks[key]

        task = asyncio.create_task(running())
        self._tasks[key] = (kind, task)

    def _disarm(self) -> None:
        """Cancel timers and child runs the run no longer waits for.

        Work already handed to an activity is left to finish: its late result
        is recorded and ignored by the interpreter, as the protocol says.
        """
        state = self._state
        assert state is not None
        settled = state.settled is not None
        for key, (kind, task) in list(self._tasks.items()):
            if kind != "work" and (settled or key not in state.pending):
                del self._tasks[key]
                task.cancel()
        for table in (self._questions, self._waiting):
            for key in [k for k in table if k not in state.pending]:
                del table[key]

    def _report(self, event: Event) -> None:
        if self._settled is None:
            self._offer(event)

    async def _work(self, effect: CallTool | RunAgent | RunTeam) -> None:
        key = effect.idempotency_key
        issued = self._issues.get(key, 0) + 1
        self._issues[key] = issued
        args = self._args
        target = (
            effect.tool
            if isinstance(effect, CallTool)
            else effect.agent_id
            if isinstance(effect, RunAgent)
            else effect.team_id
        )
        try:
            wire = await workflow.execute_activity(
                ACTIVITY_NAME,
                args=[flowcore.effect_to_wire(effect), args.tools],
                result_type=dict,
                activity_id=key if issued == 1 else f"{key}~{issued}",
                start_to_close_timeout=timedelta(milliseconds=args.activity_timeout_ms),
                heartbeat_timeout=(
                    timedelta(milliseconds=args.heartbeat_timeout_ms)
                    if args.heartbeat_timeout_ms
                    else None
                ),
                retry_policy=_ONE_ATTEMPT,
                summary=f"{_tag(effect)} {target}",
            )
        except ActivityError as exc:
            self._report(_activity_failure(key, exc, self._now()))
            return
        event = _work_event(key, wire, self._now())
        self._report(event)

    async def _timer(self, effect: Sleep) -> None:
        delay = self._real_delay(effect.until_ms)
        if delay > 0:
            await workflow.sleep(timedelta(seconds=delay), summary=effect.idempotency_key)
        now = self._now()
        self._report(
            TimerFired(idempotency_key=effect.idempotency_key, at_ms=max(now, effect.until_ms))
        )

    async def _subflow(self, effect: RunSubflow) -> None:
        key = effect.idempotency_key
        spec = self._args.flows.get(effect.flow_id)
        if spec is None:
            known = ", ".join(sorted(self._args.flows)) or "none"
            error = ErrorInfo(
                type="unknown-flow",
                message=f"no flow {effect.flow_id!r} was registered with this run (known: {known})",
            )
            self._report(EffectFailed(idempotency_key=key, error=error, at_ms=self._now()))
            return
        args = self._args
        child = RunArgs(
            spec=spec,
            input=effect.input,
            run_id=key,
            budget=budget_to_args(effect.budget_remaining),
            depth=effect.depth,
            flows=args.flows,
            tools=args.tools,
            source_name=f"flow {effect.flow_id}",
            activity_timeout_ms=args.activity_timeout_ms,
            heartbeat_timeout_ms=args.heartbeat_timeout_ms,
            clock_origin_ms=args.clock_origin_ms,
            clock_scale=args.clock_scale,
            clock_started_ms=self._clock_started,
        )
        try:
            result = await workflow.execute_child_workflow(
                FlowcoreWorkflow.run,
                child,
                id=self.child_workflow_id(key),
                task_queue=workflow.info().task_queue,
                parent_close_policy=workflow.ParentClosePolicy.REQUEST_CANCEL,
                cancellation_type=workflow.ChildWorkflowCancellationType.TRY_CANCEL,
                static_summary=f"flowcore subflow {effect.flow_id}",
            )
        except WorkflowAlreadyStartedError:
            error = ErrorInfo(
                type="subflow-already-running",
                message=f"a workflow {self.child_workflow_id(key)!r} is already running",
            )
            self._report(EffectFailed(idempotency_key=key, error=error, at_ms=self._now()))
            return
        except ChildWorkflowError:
            # Terminated, timed out or failed at Temporal's level: the child's
            # flowcore outcome is unknown (flowcore may start it again).
            self._report(EffectOutcomeUnknown(idempotency_key=key, at_ms=self._now()))
            return
        usage = result.get("usage") or {}
        self._report(
            SubflowSettled(
                idempotency_key=key,
                status=result["status"],
                output=result.get("output"),
                usage=Usage(
                    steps=int(usage.get("steps", 0)),
                    cost_minor_units=int(usage.get("costMinorUnits", 0)),
                ),
                at_ms=self._now(),
            )
        )

    def child_workflow_id(self, key: str) -> str:
        """The child's workflow id: the key, under this workflow's id when that differs."""
        parent = workflow.info().workflow_id
        if key.startswith(self._run_id + "/"):
            return parent + key[len(self._run_id) :]
        return f"{parent}/{key}"


def _parse(text: str, source_name: str) -> flowcore.Flow:
    # Shared parsed flows only when flowcore itself is passed through: a
    # flowcore re-imported in the sandbox has its own Flow class.
    if _flows.serves(flowcore):
        return _flows.parse_cached(text, source_name)
    return flowcore.parse_flow(text, source_name=source_name)


def _tag(effect: Effect) -> str:
    tag = effect.__struct_config__.tag
    assert isinstance(tag, str)
    return tag


def _work_event(key: str, wire: Any, now: int) -> Event:
    """The activity's answer as an event at workflow time, or effect-failed if garbled."""
    try:
        event = flowcore.event_from_wire(wire)
    except flowcore.WireError as exc:
        error = ErrorInfo(type="bad-activity-result", message=str(exc))
        return EffectFailed(idempotency_key=key, error=error, at_ms=now)
    if not isinstance(event, (EffectSucceeded, EffectFailed)) or event.idempotency_key != key:
        error = ErrorInfo(
            type="bad-activity-result", message=f"the activity for {key} answered {wire!r}"
        )
        return EffectFailed(idempotency_key=key, error=error, at_ms=now)
    return msgspec.structs.replace(event, at_ms=now)


def _activity_failure(key: str, exc: ActivityError, now: int) -> Event:
    """What a failed activity means for flowcore.

    The activity reports handler failures as an effect-failed *result*, so a
    failed activity is the worker's trouble: an application error raised
    outside the handler fails the effect, anything else (timeouts, a dead
    worker, cancellation) leaves the outcome unknown.
    """
    cause = exc.cause
    if isinstance(cause, ApplicationError):
        error = ErrorInfo(
            type=cause.type or "activity-error",
            message=cause.message,
            retryable=not cause.non_retryable,
        )
        return EffectFailed(idempotency_key=key, error=error, at_ms=now)
    return EffectOutcomeUnknown(idempotency_key=key, at_ms=now)
