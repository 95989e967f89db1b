"""The effects a flowcore run's decisions emit, as Temporal work, and the answers
that come back as its next events (the "effects out" of ``_workflow``'s theory of
operation): activities for work, timers, child workflows, signals to other runs.

This module runs inside Temporal's workflow sandbox: it must never do I/O,
read the system clock or draw a random number.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Final

from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    ChildWorkflowError,
    FailureError,
    TimeoutError,
    TimeoutType,
    WorkflowAlreadyStartedError,
)

with workflow.unsafe.imports_passed_through():
    import msgspec

import flowcore
from flowcore import (
    CallTool,
    Decision,
    Effect,
    EffectFailed,
    EffectOutcomeUnknown,
    EffectSucceeded,
    ErrorInfo,
    Event,
    EventRejected,
    RunAgent,
    RunSubflow,
    RunTeam,
    SignalReceived,
    SignalRun,
    Sleep,
    SubflowSettled,
    TimerFired,
    Usage,
    persist,
)
from flowcore_temporal._payloads import quick_event, work_args

from ._types import (
    ACTIVITY_NAME,
    RUN_STATUS_ACTIVITY,
    WORKFLOW_NAME,
    RunArgs,
    clip,
    metadata_updates,
)
from ._workflow_base import (
    _LONGEST_TIMER_S,
    _MESSAGE_CHARS,
    _ONE_ATTEMPT,
    _SIGNAL_KEYS,
    WorkflowBase,
    _decode,
    _failed,
    _Refused,
    _signal_keys,
    _tag,
    budget_to_args,
)


class WorkflowEffects(WorkflowBase):
    """Events in, effects out: the decision loop's two halves."""

    if TYPE_CHECKING:  # carrying a long run over (``_workflow_carry``)

        def _check_switch(self) -> None: ...

    # --- events in -----------------------------------------------------------------------

    def _apply(self, event: Event) -> None:
        """Advance the run by one event; ``EventRejected`` leaves it untouched (and logged)."""
        assert self._state is not None
        try:
            decision = persist.advance(self._state, event)
        except EventRejected as exc:
            self._records.extend(self._recorder.rejected(event, str(exc)))
            raise
        self._records.extend(self._recorder.applied(event, decision))
        self._follow(decision)

    def _offer(self, event: Event) -> bool:
        """Apply an event whose sender is not waiting for a verdict."""
        try:
            self._apply(event)
        except EventRejected:
            return False
        return True

    # --- effects out ---------------------------------------------------------------------

    def _follow(self, decision: Decision) -> None:
        """Do what ``flowcore.plan`` says after ``decision``.

        Work, timers and children start in emission order, as a replay will
        start them; questions and signal waits need nothing here. Timers and
        children the run no longer waits for are cancelled, in the order they
        started. Work already handed to an activity is cancelled (decision
        level 2), as its step's ``cancellation`` says: ``try-cancel`` work is
        forgotten, the end of ``wait-cancellation-completed`` work is reported
        (the run waits for it), and ``abandon`` work is never in ``cancel``
        (``plan.detach``): its activity runs to its end and its late result is
        recorded and ignored by the interpreter, as the protocol says.
        """
        self._state = decision.state
        self._index_metadata(decision.state)
        plan = flowcore.plan(decision)
        for effect in decision.effects:
            self._start_effect(effect)
        self._upsert_signal_keys()
        stopped = {*plan.drop, *plan.cancel}
        if stopped:
            # Timers and children stop; work the run no longer waits for is
            # cancelled from decision level 2 on (the activity learns it at its
            # next heartbeat; its handler is told, flowcore_handlers.cancelled).
            # Before, it ran on and its late result was reported.
            cancel_work = self._semantics >= 2
            for key, (kind, task) in list(self._tasks.items()):
                if key in stopped and (kind != "work" or cancel_work):
                    del self._tasks[key]
                    if kind == "work" and key not in self._awaited:
                        self._cancelled.add(key)  # nothing more to report for it
                    task.cancel()
        if plan.settled is not None:
            self._settled = plan.settled
        if plan.continued is not None:
            self._continued = plan.continued
        self._check_switch()

    def _start_effect(self, effect: Effect) -> None:
        """Start the Temporal work of one effect (questions and signal waits need none).

        While the run is being carried over, only timers start: the rest stays
        pending in the state, and the next Temporal run starts it."""
        if self._draining and not isinstance(effect, Sleep):
            return
        match effect:
            case CallTool() | RunAgent() | RunTeam():
                self._spawn("work", effect.idempotency_key, self._work, effect)
            case Sleep():
                self._spawn("timer", effect.idempotency_key, self._timer, effect)
            case RunSubflow():
                self._spawn("subflow", effect.idempotency_key, self._subflow, effect)
            case SignalRun():
                self._spawn("signal", effect.idempotency_key, self._signal_run, effect)

    def _index_metadata(self, state: flowcore.State) -> None:
        """The run's metadata as typed search attributes, for visibility queries
        (``flowcore_<field>``); the same decisions upsert the same values on replay."""
        metadata = state.metadata
        if metadata is not self._indexed:  # replaced only when it changed
            updates = metadata_updates(state.flow.metadata, self._indexed, metadata)
            self._indexed = metadata
            if updates:
                workflow.upsert_search_attributes(updates)

    def _spawn(
        self, kind: str, key: str, body: Callable[[Any], Awaitable[None]], effect: Effect
    ) -> None:
        async def running() -> None:
            try:
                await body(effect)
            except Exception as exc:
                # Nothing from outside raises here (it becomes an event); an
                # exception is a bug. Hand it to the main coroutine, which
                # fails the workflow task, instead of letting it vanish as an
                # unretrieved task exception with the effect pending for ever.
                if self._crash is None:
                    self._crash = (f"{kind} task of {key}", exc)
            finally:
                if self._tasks.get(key, ("", None))[1] is task:
                    del self._tasks[key]

        task = asyncio.create_task(running())
        self._tasks[key] = (kind, task)

    def _report(self, event: Event) -> None:
        if self._settled is None:
            self._offer(event)

    async def _work(self, effect: CallTool | RunAgent | RunTeam) -> None:
        key = effect.idempotency_key
        issued = self._issues.get(key, 0) + 1
        self._issues[key] = issued
        args = self._args
        awaited = effect.cancellation == "wait-cancellation-completed"
        if awaited:
            self._awaited.add(key)
        try:
            # RawValue: the result is decoded and checked by _work_event, where
            # a garbled one fails this effect; a result Temporal's converter
            # failed to decode would fail the workflow task, for ever.
            raw = await workflow.execute_activity(
                ACTIVITY_NAME,
                args=work_args(effect, args.tools, self._work_context(effect)),
                result_type=RawValue,
                activity_id=key if issued == 1 else f"{key}~{issued}",
                start_to_close_timeout=timedelta(milliseconds=args.activity_timeout_ms),
                heartbeat_timeout=(
                    timedelta(milliseconds=effect.heartbeat_timeout_ms)
                    if effect.heartbeat_timeout_ms  # the step's: its handler must heartbeat
                    else timedelta(milliseconds=args.heartbeat_timeout_ms)
                    if args.heartbeat_timeout_ms
                    else None
                ),
                retry_policy=_ONE_ATTEMPT,
                # No summary: the activity id (the idempotency key) names the
                # step, and a summary is a payload of its own, converted in the
                # sandbox: it cost more worker CPU per step than the interpreter.
                # A limited tool's calls go to its own queue, whose worker
                # applies the limits (None: this workflow's queue).
                task_queue=(
                    args.tool_queues.get(effect.tool) if isinstance(effect, CallTool) else None
                ),
                # What a cancel of the activity (the run stopped waiting) does:
                # the step's cancellation (language.md §9.2).
                cancellation_type=_CANCELLATION_TYPES[effect.cancellation],
            )
        except ActivityError as exc:
            if key in self._cancelled:  # the run stopped waiting: say nothing
                return
            if awaited and isinstance(exc.cause, CancelledError):
                # It acknowledged the cancel: the end the run waits for.
                self._report(_cancelled_event(effect, self._now()))
                return
            self._report(_activity_failure(key, exc, self._now(), effect))
            return
        except asyncio.CancelledError:
            # Cancelled as its result came in: for awaited work, its end all the same.
            if awaited:
                self._report(_cancelled_event(effect, self._now()))
            raise
        self._report(_work_event(key, raw, self._now()))

    def _root_run_id(self) -> str | None:
        """The run at the top of this run's tree: its own id for a root run, the
        one its start arguments name for a child (None for a child started
        before they named it)."""
        if self._args.root_run_id is not None:
            return self._args.root_run_id
        return self._run_id if workflow.info().parent is None else None

    def _work_context(self, effect: CallTool | RunAgent | RunTeam) -> dict[str, Any]:
        """What the run knows of ``effect``'s work for its handler's context
        (``flowcore_handlers.context()``), sent with the activity so the handler
        needs no round trip: the root run, the principal, the flow and its
        version, and where the work stands (``flowcore.work_place``: step,
        attempt, class, deadline, the run's remaining budget). Unknown: left out."""
        state = self._state
        facts: dict[str, Any] = {
            "rootRunId": self._root_run_id(),
            "principal": self._args.principal,
        }
        if state is not None:
            facts["flowId"] = state.flow.id
            facts["flowVersion"] = state.flow.spec_hash
            place = flowcore.work_place(state, effect.idempotency_key)
            if place is not None:
                facts["step"] = place.step
                facts["attempt"] = place.attempt
                facts["executionClass"] = place.exec_class
                facts["deadlineMs"] = place.deadline_ms
                facts["budgetRemaining"] = msgspec.to_builtins(place.budget)
        return {name: value for name, value in facts.items() if value is not None}

    async def _timer(self, effect: Sleep) -> None:
        delay = self._real_delay(effect.until_ms)
        while delay > _LONGEST_TIMER_S:
            await workflow.sleep(_LONGEST_TIMER_S, summary=effect.idempotency_key)
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
        detached = effect.detached
        child = RunArgs(
            spec=spec,
            input=effect.input,
            run_id=key,
            # A detached child is a root run: its own flow's budget, at depth 0.
            budget=None if detached else budget_to_args(effect.budget_remaining),
            depth=effect.depth,
            flows=args.flows,
            tools=args.tools,
            source_name=f"flow {effect.flow_id}",
            activity_timeout_ms=args.activity_timeout_ms,
            heartbeat_timeout_ms=args.heartbeat_timeout_ms,
            clock_origin_ms=args.clock_origin_ms,
            clock_scale=args.clock_scale,
            clock_started_ms=self._clock_started,
            tool_queues=args.tool_queues,
            continue_after_events=args.continue_after_events,
            principal=args.principal,
            # A detached child is a root run of its own.
            root_run_id=key if detached else self._root_run_id(),
        )
        # A child the run may leave running (abandon, detached) outlives this
        # workflow and is never cancelled with it; one it waits for, or cancels
        # when it stops waiting (flowcore.plan), is cancelled if it closes first.
        runs_on = detached or effect.parent_close == "abandon"
        try:
            handle = await workflow.start_child_workflow(
                WORKFLOW_NAME,
                child,
                result_type=RawValue,  # decoded and checked below, as an activity's
                id=self.child_workflow_id(key),
                task_queue=workflow.info().task_queue,
                parent_close_policy=(
                    workflow.ParentClosePolicy.ABANDON
                    if runs_on
                    else workflow.ParentClosePolicy.REQUEST_CANCEL
                ),
                cancellation_type=(
                    workflow.ChildWorkflowCancellationType.ABANDON
                    if runs_on
                    else workflow.ChildWorkflowCancellationType.TRY_CANCEL
                ),
                static_summary=f"flowcore {'detached run' if detached else 'subflow'} "
                f"{effect.flow_id}",
            )
            if detached:  # started: the run goes on; the child is its own now
                self._report(
                    EffectSucceeded(idempotency_key=key, output={"run_id": key}, at_ms=self._now())
                )
                return
            raw = await handle
        except WorkflowAlreadyStartedError:
            if detached:  # re-issued after an unknown outcome: it was started
                self._report(
                    EffectSucceeded(idempotency_key=key, output={"run_id": key}, at_ms=self._now())
                )
                return
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
        self._report(_subflow_event(key, raw, self._now()))

    async def _signal_run(self, effect: SignalRun) -> None:
        """Signal another run's workflow (its id is the run id) from this workflow:
        the signal is a command in this run's history, sent once whatever replays.
        When Temporal cannot deliver it (no such workflow, or it has closed), an
        activity reads the target's status to say which."""
        key, target = effect.idempotency_key, effect.run_id
        now = self._now()
        if target in (self._run_id, workflow.info().workflow_id):
            # To itself (Temporal signals only other workflows): received here, at once.
            self._report(
                SignalReceived(
                    signal=effect.signal, payload=effect.payload, at_ms=now, key=effect.key
                )
            )
            self._report(EffectSucceeded(idempotency_key=key, output={"run_id": target}, at_ms=now))
            return
        handle = workflow.get_external_workflow_handle(target)
        args: list[Any] = [effect.payload] if effect.key is None else [effect.payload, effect.key]
        try:
            await handle.signal(effect.signal, args=args)
        except (ApplicationError, FailureError) as exc:
            try:
                status = await workflow.execute_activity(
                    RUN_STATUS_ACTIVITY,
                    target,
                    result_type=str,
                    start_to_close_timeout=timedelta(seconds=60),
                    summary=f"status of {clip(target, 100)}",
                )
            except ActivityError:
                status = None
            if status is None:
                error = ErrorInfo(type="unknown-run", message=f"no run {target!r} to signal")
            elif status == "RUNNING":
                why = clip(str(exc), _MESSAGE_CHARS)
                error = ErrorInfo(type="signal-rejected", message=f"run {target!r}: {why}")
            else:
                error = ErrorInfo(type="run-settled", message=f"run {target!r} has already settled")
            self._report(EffectFailed(idempotency_key=key, error=error, at_ms=self._now()))
            return
        self._report(
            EffectSucceeded(idempotency_key=key, output={"run_id": target}, at_ms=self._now())
        )

    def _upsert_signal_keys(self) -> None:
        """Keep ``FlowcoreSignalKeys`` to the ``name:key`` pairs the run waits for (a
        run that never waits with a key never sets it)."""
        assert self._state is not None
        if not self._state.waiting.keyed_waiters and not self._signal_keys:
            return
        wanted = _signal_keys(self._state)
        if wanted != self._signal_keys:
            workflow.upsert_search_attributes([_SIGNAL_KEYS.value_set(wanted)])
            self._signal_keys = wanted

    def child_workflow_id(self, key: str) -> str:
        """The child's workflow id: the key, under this workflow's id when that differs."""
        parent = workflow.info().workflow_id
        if key.startswith(self._run_id + "/"):
            return parent + key[len(self._run_id) :]
        return f"{parent}/{key}"


def _work_event(key: str, raw: Any, now: int) -> Event:
    """The activity's answer as an event at workflow time, or effect-failed if garbled.

    Our activity only ever returns a checked event; this guards against a
    foreign or older worker serving the activity. A successful result whose
    output is not flowcore data fails the effect as ``unencodable-output``,
    as the handler layer does; anything else garbled is ``bad-activity-result``.
    A JSON result is read straight into the event by flowcore's decoder (one
    decode, no dict in between); whatever that does not take whole goes the
    long way below, which says what is wrong.
    """
    event = quick_event(raw)
    if event is not None and getattr(event, "idempotency_key", None) == key:
        return msgspec.structs.replace(event, at_ms=now)
    try:
        wire = _decode(raw, f"the result of {key}")
        event = flowcore.event_from_wire(wire)
    except _Refused as exc:
        return _failed(key, "bad-activity-result", str(exc), now)
    except flowcore.DataError as exc:
        # An output flowcore cannot store: the same failure, in the same
        # words, as the handler layer reports (``flowcore.result_event``).
        path = exc.path
        if wire.get("kind") == "effect-succeeded" and (path == "$" or path.startswith("$.output")):
            failed = flowcore.result_event(key, wire.get("output"), at_ms=now)
            if isinstance(failed, EffectFailed):
                return failed
        return _failed(key, "bad-activity-result", f"the activity for {key}: {exc}", now)
    except flowcore.WireError as exc:
        return _failed(key, "bad-activity-result", f"the activity for {key}: {exc}", now)
    answered = getattr(event, "idempotency_key", None)
    if (
        not isinstance(event, (EffectSucceeded, EffectFailed, EffectOutcomeUnknown))
        or answered != key
    ):
        message = f"the activity for {key} answered {_tag(event)} for {answered!a}"
        return _failed(key, "bad-activity-result", message, now)
    return msgspec.structs.replace(event, at_ms=now)


def _subflow_event(key: str, raw: Any, now: int) -> Event:
    """The child workflow's result as subflow-settled, or effect-failed if garbled.

    The child is this same workflow, so its result is sound; the check keeps a
    surprise (another workflow under the child's id) from reaching the state.
    """
    try:
        result = _decode(raw, f"the result of child {key}")
        usage = result.get("usage") or {}
        error = result.get("error")
        return flowcore.check_event(
            SubflowSettled(
                idempotency_key=key,
                status=result["status"],
                output=result.get("output"),
                usage=msgspec.convert(usage, Usage),
                error=None if error is None else msgspec.convert(error, ErrorInfo),
                at_ms=now,
            )
        )
    except (
        _Refused,
        flowcore.DataError,
        msgspec.ValidationError,
        AttributeError,
        KeyError,
        TypeError,
    ) as exc:
        message = f"the child workflow for {key} returned no flowcore result: {clip(str(exc), 200)}"
        return _failed(key, "bad-subflow-result", message, now)


_CANCELLATION_TYPES: Final = {
    "try-cancel": workflow.ActivityCancellationType.TRY_CANCEL,
    "wait-cancellation-completed": workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
    "abandon": workflow.ActivityCancellationType.ABANDON,
}


def _cancelled_event(effect: CallTool | RunAgent | RunTeam, now: int) -> EffectFailed:
    """The end of cancelled ``wait-cancellation-completed`` work whose activity
    acknowledged the cancel; as ``flowcore_handlers.cancelled_event`` (not
    imported in the sandbox)."""
    tag = effect.__struct_config__.tag
    message = f"{tag} {effect.idempotency_key} stopped when cancelled"
    error = ErrorInfo(type="cancelled", message=message)
    return EffectFailed(idempotency_key=effect.idempotency_key, error=error, at_ms=now)


def _activity_failure(
    key: str, exc: ActivityError, now: int, effect: CallTool | RunAgent | RunTeam | None = None
) -> Event:
    """What a failed activity means for flowcore.

    The activity reports handler failures as an effect-failed *result*, so a
    failed activity is the worker's trouble: an application error raised
    outside the handler fails the effect, anything else (timeouts, a dead
    worker, cancellation) leaves the outcome unknown. But a heartbeat timeout
    of work whose step set ``heartbeat_timeout_ms`` is the fact the step asked
    to be told: ``heartbeat-timeout`` with the last details heartbeated.
    """
    cause = exc.cause
    watched = effect is not None and effect.heartbeat_timeout_ms is not None
    if watched and isinstance(cause, TimeoutError) and cause.type == TimeoutType.HEARTBEAT:
        assert effect is not None
        last = cause.last_heartbeat_details
        details = last[0] if last else effect.heartbeat_details
        try:
            flowcore.check_data(details, "$", "heartbeat details")
        except flowcore.DataError:
            details = effect.heartbeat_details  # not flowcore data: not kept
        # As flowcore_handlers.heartbeat_timeout_event (not imported in the sandbox).
        message = f"no heartbeat within {effect.heartbeat_timeout_ms} ms"
        error = ErrorInfo(type="heartbeat-timeout", message=message, details=details)
        return EffectFailed(idempotency_key=key, error=error, at_ms=now)
    if isinstance(cause, ApplicationError):
        # The failure's text is anyone's (a foreign activity): keep it short.
        error = ErrorInfo(
            type=clip(cause.type or "activity-error", 200),
            message=clip(cause.message, _MESSAGE_CHARS),
            retryable=not cause.non_retryable,
        )
        return EffectFailed(idempotency_key=key, error=error, at_ms=now)
    return EffectOutcomeUnknown(idempotency_key=key, at_ms=now)
