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
    nothing to do: the queries read the questions from the state
    (``flowcore.waiting_for``); the ``answer`` update is validated against
    the interpreter first, so a wrong answer is rejected to its caller and
    never reaches the history.
``run-subflow``
    a child workflow running the child's spec (from ``RunArgs.flows``) with
    the parent's remaining budget; its result is ``subflow-settled``.
``settled``
    the workflow's result (status, output, error, usage, report).
``continue-as-new``
    Temporal's continue-as-new: once the run's update handlers are done, the
    workflow continues as a new Temporal run (same workflow id) whose
    argument carries the effect, the log's next index and the signals that
    came after the effect; that run starts the next incarnation with
    ``flowcore.continue_run`` and reports those signals first.

A run whose history grows long (``RunArgs.continue_after_events``, or
Temporal's suggestion) is carried into a new Temporal run by the workflow
itself: new work is held while the work out finishes, then it continues as
new with the state (``RunArgs.snapshot``) and the log's next index, and the
new run starts what the state waits for (``_check_switch``, ``_switch``,
``_go_on``). The ``upgrade`` update moves the run to another version of its
flow once the client has checked its log replays against it; a run pinned by
hash alone finds its spec in the worker's registry (``_registry``).

A flow's own updates and queries are Temporal's, by their names: a dynamic
update handler whose validator is ``flowcore.validate_update`` feeds
``update-requested`` (Temporal's update id) and answers the update's reply,
and a dynamic query handler answers ``flowcore.query`` (``_workflow_updates``).

Workflow cancellation is reported as ``cancel-requested``; the workflow keeps
running while compensations run and returns the settled result. Temporal
cancels only the workflow's main coroutine, which merely waits for the run to
settle; every piece of work runs in a task of its own, so compensations need
no ``asyncio.shield``.

Effects emitted together run concurrently, as asyncio tasks on the workflow's
deterministic event loop; the interpreter itself holds back work beyond the
flow's ``max_concurrency``, so everything it emits may start at once. Each
decision's effects are started in emission order and Temporal orders the
answers, so a replay of the history makes the same decisions. What to stop
after a decision (timers dropped, children cancelled) is ``flowcore.plan``'s.

Everything that comes from outside is data someone else wrote: the
workflow's argument (any client can start a run), signal payloads, answers,
the cancel reason, activity and child results. Each is decoded here, from the
raw payload, and checked as flowcore data before it can reach the state, so a
hostile value is refused (the start fails, the update is rejected, the signal
is dropped and listed by the ``status`` query) and never fails a workflow
task, which Temporal would retry forever. See "Values from outside" in
``specs/temporal.md``.

The only clock is the workflow clock (``workflow.time_ns``), handed to the
interpreter as ``atMs``. flowcore's own log records are kept as the run goes
(the ``log`` query), so ``flowcore replay`` works on a run that executed here.

This module runs inside Temporal's workflow sandbox: it must never do I/O,
read the system clock or draw a random number.
"""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError

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
from flowcore import CancelRequested, Record, Recorder, SignalReceived
from flowcore.schedules import input_for
from flowcore_temporal import _registry

from ._types import STATUS_MEMO, WORKFLOW_NAME, RunArgsError, clip
from ._workflow_base import _MESSAGE_CHARS, _REASON_CHARS, _Args, _forked, _parse, budget_to_args
from ._workflow_updates import WorkflowUpdates

__all__ = ["FlowcoreWorkflow", "budget_to_args"]


# The interpreter's decision levels, each with the patch id that marks the
# histories of workflows started at that level or later (flowcore.SEMANTICS).
_SEMANTICS_PATCHES = ((2, "flowcore-semantics-2"), (3, "flowcore-semantics-3"))
# Marks the histories whose workflow writes its settled status to its memo
# (``STATUS_MEMO``); one recorded before replays without that command.
_STATUS_MEMO_PATCH = "flowcore-status-memo"


def _semantics() -> int:
    """The decision level of this workflow: a history started before a level
    existed replays at the level it was started with (``workflow.patched`` is
    false there), so a deploy of a newer flowcore never makes it diverge."""
    level = 1
    for semantics, patch in _SEMANTICS_PATCHES:
        if not workflow.patched(patch):
            break
        level = semantics
    return level


@workflow.defn(name=WORKFLOW_NAME)
class FlowcoreWorkflow(WorkflowUpdates):
    """Runs one flowcore run; see the module docstring for the mapping.

    Its parts, each a class of its own module: the state, clock and result
    (``WorkflowBase``), events in and effects out (``WorkflowEffects``),
    carrying a long run over (``WorkflowCarrying``), the signal, update
    and query handlers (``WorkflowHandlers``) and the flow's own updates and
    queries (``WorkflowUpdates``); the run itself is here."""

    @workflow.init
    def __init__(self, args: _Args) -> None:
        super().__init__(args)

    # --- the run -------------------------------------------------------------------------

    @workflow.run
    async def run(self, args: _Args) -> dict[str, Any]:
        # ``args`` is the raw payload __init__ has decoded and checked already.
        if self._refusal is not None:
            raise ApplicationError(self._refusal, type="RunArgsError", non_retryable=True)
        args = self._args
        budget = flowcore.budget_from_wire(args.budget)
        now = self._now()
        self._semantics = _semantics()
        continued: flowcore.ContinueAsNew | None = None
        # A run pinned by hash alone takes its spec from the worker's registry.
        # A worker that lacks it fails this workflow task (SpecNotDeployed says
        # which spec), and Temporal retries it until a worker has it.
        text = args.spec or _registry.lookup(args.spec_hash or "", args.flow_id or "?")
        try:
            flow = _parse(text, args.source_name)
            if args.spec_hash is not None and flow.spec_hash != args.spec_hash:
                raise RunArgsError(
                    f"bad RunArgs: spec: not the pinned spec {args.spec_hash[:12]}"
                    f" (its hash is {flow.spec_hash[:12]})"
                )
            if args.snapshot is not None:  # the same run, carried over: go on from its state
                self._go_on(flow, args.snapshot, args.log_index)
            elif args.continued is not None:  # checked with the argument
                effect = flowcore.effect_from_wire(args.continued)
                assert isinstance(effect, flowcore.ContinueAsNew)
                continued = effect
                decision = flowcore.continue_run(
                    flow, continued, self._run_id, now, args.depth, self._semantics
                )
            elif args.fork is not None:
                made = _forked(flow, self._run_id, args.fork)
            else:
                if args.schedule is not None:
                    args.input = input_for(args.schedule, args.input, self._scheduled_ms())
                decision = flowcore.start(
                    flow,
                    args.input,
                    self._run_id,
                    now_ms=now,
                    budget=budget,
                    depth=args.depth,
                    semantics=self._semantics,
                    metadata=args.metadata,
                )
        except (flowcore.SpecError, flowcore.InputError, flowcore.FlowcoreError, ValueError) as exc:
            # The message may quote the client's text: keep it valid and short.
            # (A ForkError, a LogCorrupt, a ReplayDivergence of a fork's
            # records are ValueErrors or turned into one by _forked.)
            message = clip(" ".join(str(exc).split()), _MESSAGE_CHARS)
            raise ApplicationError(message, type=type(exc).__name__, non_retryable=True) from None
        if args.snapshot is not None:
            pass  # _go_on has started what the run waits for
        elif continued is not None:
            self._recorder.index = args.log_index
            self._records.extend(msgspec.convert(r, Record) for r in args.previous)
            self._records.extend(
                self._recorder.started(
                    flow, continued.input, now, decision, depth=args.depth, continued=continued
                )
            )
            self._follow(decision)
        elif args.fork is not None:
            # The source's history up to the point, applied again: nothing in
            # it is dispatched but what is still open at the end of it.
            self._semantics = made.state.run.semantics
            self._records.extend(made.records)
            self._recorder = Recorder(self._run_id, len(made.records))
            self._state = made.state
            self._index_metadata(made.state)
            for effect in made.pending:
                self._start_effect(effect)
            self._upsert_signal_keys()
        else:
            self._records.extend(
                self._recorder.started(
                    flow, args.input, now, decision, budget, args.depth, args.metadata
                )
            )
            self._follow(decision)
        late = [  # signals the last incarnation received after it had ended
            SignalReceived(
                signal=s["signal"], payload=s.get("payload"), at_ms=now, key=s.get("key")
            )
            for s in args.signals
        ]
        early, self._early = [*late, *self._early], []
        for event in early:
            if self._continued is not None:
                self._carry_signal(event)
            else:
                self._offer(event)
        while self._settled is None and self._continued is None:
            try:
                await workflow.wait_condition(
                    lambda: (
                        self._settled is not None
                        or self._continued is not None
                        or self._crash is not None
                        or self._drained()
                    )
                )
            except asyncio.CancelledError as exc:
                self._cancel_requested(exc)
            self._raise_crash()
            if self._drained() and self._settled is None and self._continued is None:
                await self._switch()  # returns only if the run cannot be carried over
        try:
            await workflow.wait_condition(workflow.all_handlers_finished)
        except asyncio.CancelledError:
            pass  # a cancel that came after the run settled changes nothing
        if self._continued is not None:
            self._continue_as_new(self._continued)
        result = self._result()
        if workflow.patched(_STATUS_MEMO_PATCH):
            workflow.upsert_memo({STATUS_MEMO: result["status"]})
        return result

    def _cancel_requested(self, exc: asyncio.CancelledError) -> None:
        """Temporal cancellation is flowcore's cancel-requested: pending work is
        abandoned and compensations run; the run goes on until it settles, and
        that is the workflow's result. The reason is a note from any client:
        cut, so the cancel always applies (an event over MAX_EVENT_BYTES would
        be rejected).

        A cancellation without a request (``cancellation_reason`` is None) is
        the worker dropping this instance: the end of a replayed history, a
        cache eviction. It is not the run's: it ends the coroutine, and
        nothing is recorded."""
        reason = workflow.cancellation_reason()
        if reason is None:
            raise exc
        reason = reason or "cancelled through Temporal"
        self._offer(CancelRequested(reason=clip(reason, _REASON_CHARS), at_ms=self._now()))

    def _raise_crash(self) -> None:
        """A bug in this module (hostile values never get here): fail the
        workflow task, which Temporal shows and retries once a fixed worker
        runs, rather than lose the work in a task."""
        if self._crash is not None:
            where, bug = self._crash
            raise RuntimeError(
                f"flowcore workflow bug in the {where}:"
                f" {type(bug).__name__}: {clip(str(bug), _MESSAGE_CHARS)}"
            ) from bug
