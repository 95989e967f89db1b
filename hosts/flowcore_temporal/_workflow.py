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
import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Final

from temporalio import workflow
from temporalio.common import RawValue, RetryPolicy, SearchAttributeKey
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
    BudgetRemaining,
    CallTool,
    CancelRequested,
    Decision,
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
    SignalRun,
    Sleep,
    State,
    SubflowSettled,
    TimerFired,
    Usage,
    Waits,
)
from flowcore.schedules import input_for
from flowcore_temporal import _flows, _registry
from flowcore_temporal._payloads import quick_event, work_args

from ._types import (
    ACTIVITY_NAME,
    ANSWER_UPDATE,
    LOG_QUERY,
    NOT_PENDING_ERROR,
    QUESTIONS_QUERY,
    RUN_STATUS_ACTIVITY,
    SCHEDULED_QUERY,
    SCHEDULED_UPDATE,
    SIGNAL_KEYS_ATTRIBUTE,
    STATUS_QUERY,
    SWITCHING_ERROR,
    UPGRADE_UPDATE,
    WAITS_QUERY,
    WORKFLOW_NAME,
    RunArgs,
    RunArgsError,
    check_run_args,
    clip,
    metadata_updates,
    pack_state,
    run_args_from_wire,
    unpack_state,
)

__all__ = ["FlowcoreWorkflow", "budget_to_args"]

_ONE_ATTEMPT = RetryPolicy(maximum_attempts=1)
# Set by Temporal on the runs a Schedule starts: the slot, before its jitter.
_SCHEDULED_START = SearchAttributeKey.for_datetime("TemporalScheduledStartTime")
# "name:key" per signal the run waits for with a key: what routes a keyed signal.
_SIGNAL_KEYS = SearchAttributeKey.for_keyword_list(SIGNAL_KEYS_ATTRIBUTE)

# Temporal decodes a workflow's argument by the annotation of ``run``; a
# payload that does not decode as a RunArgs would fail every workflow task,
# for ever. So at run time the annotation is RawValue (Temporal hands the
# payload over untouched, and ``_run_args`` decodes and checks it), while type
# checkers see RunArgs, which is what every caller passes.
if TYPE_CHECKING:
    _Args = RunArgs
else:
    _Args = RawValue

_REASON_CHARS: Final = 4096  # a cancel reason is a note, not data
_MESSAGE_CHARS: Final = 4096  # error text from outside (a foreign activity, a bad start)
_KEPT_REFUSALS: Final = 100  # refused signals listed by the status query
# The ended incarnation's records a continue-as-new carries, at most (as JSON):
# well under Temporal's payload limit (2 MB), with the spec and input beside them.
_CARRIED_LOG_BYTES: Final = 512 * 1024
# Temporal timers (and timedelta) have a ceiling, while a flow may sleep until
# any instant flowcore can hold: longer sleeps are taken in pieces.
_LONGEST_TIMER_S: Final = 100 * 365 * 24 * 3600.0
# A run carried over by the workflow (its history is long): the next Temporal
# run's argument, the state included, at most (Temporal refuses payloads over
# 2 MB by default).
_LARGEST_CARRY_BYTES: Final = 1_800_000
# The settled report in the workflow's result, at most (as JSON): a run of
# tens of thousands of work effects has a report of megabytes.
_LARGEST_REPORT_BYTES: Final = 1_000_000
# Marks histories whose runs may carry themselves over (see _check_switch).
_SWITCH_PATCH: Final = "flowcore-continue-as-new"


class _Refused(Exception):
    """A value from outside that flowcore cannot take; the message says why."""


_SCHEDULED_KINDS = (
    "scheduled-cancel-requested",
    "scheduled-run-now-requested",
    "scheduled-add-requested",
)


def _decode(value: Any, what: str) -> Any:
    """A payload Temporal handed over raw, decoded by the workflow's converter.

    Values that arrive already decoded (Temporal does that when a client sent
    a different number of arguments than declared) are taken as they are.
    """
    if not isinstance(value, RawValue):
        return value
    try:
        return workflow.payload_converter().from_payload(value.payload)
    except Exception as exc:  # a foreign payload can fail in any way: bad JSON, too deep, ...
        for _ in range(8):  # the converter wraps the error that says what is wrong
            if not isinstance(exc.__cause__, Exception):
                break
            exc = exc.__cause__
        encoding = value.payload.metadata.get("encoding", b"no encoding")
        raise _Refused(
            f"{what} cannot be decoded ({encoding.decode('utf-8', 'replace')}):"
            f" {type(exc).__name__}: {clip(str(exc), 200)}"
        ) from None


def _run_args(value: Any) -> RunArgs:
    """The workflow's argument, decoded and checked; ``RunArgsError`` says what is wrong."""
    if isinstance(value, RunArgs):  # a subclass or a test decoded it already
        return check_run_args(value)
    try:
        data = _decode(value, "the workflow's argument")
    except _Refused as exc:
        raise RunArgsError(str(exc)) from None
    return run_args_from_wire(data)


def _forked(flow: flowcore.Flow, run_id: str, fork: dict[str, Any]) -> flowcore.Fork:
    """The run a fork's ``RunArgs.fork`` describes (``flowcore.fork`` of the records).

    Anything wrong in them (records that are not a log, a point that is not
    one, a log of another flow) is a ``ValueError`` saying so.
    """
    try:
        records = msgspec.convert(fork["records"], list[Record])
    except msgspec.ValidationError as exc:
        raise ValueError(f"the fork's records are not log records: {exc}") from None
    if records and records[0].run_id != fork["runId"]:
        raise ValueError(f"the fork's records are not those of run {fork['runId']!r}")
    try:
        return flowcore.fork(records, flow, run_id, at=fork["index"])
    except flowcore.ForkError:
        raise
    except flowcore.FlowcoreError as exc:
        raise ValueError(f"the fork's records do not replay: {exc}") from None


def budget_to_args(budget: BudgetRemaining | None) -> dict[str, int] | None:
    """A remaining budget in the wire form ``RunArgs.budget`` takes."""
    return flowcore.budget_to_wire(budget)


def _usage_json(usage: Usage) -> dict[str, int]:
    """A run's usage in its result, every limit named (0 included); the split of
    its tokens (``inputTokens``, ...) only where agents reported it."""
    return {
        f.encode_name: getattr(usage, f.name)
        for f in msgspec.structs.fields(usage)
        if f.name not in _TOKEN_SPLIT or getattr(usage, f.name)
    }


_TOKEN_SPLIT: Final = frozenset({"input_tokens", "output_tokens", "cache_read_tokens"})


@workflow.defn(name=WORKFLOW_NAME)
class FlowcoreWorkflow:
    """Runs one flowcore run; see the module docstring for the mapping."""

    @workflow.init
    def __init__(self, args: _Args) -> None:
        info = workflow.info()
        # A bad argument is refused when the run starts (``run``); until then
        # the workflow must still answer signals and queries, so it keeps
        # harmless defaults rather than failing here (a workflow task failure).
        self._refusal: str | None = None
        try:
            self._args = _run_args(args)
        except RunArgsError as exc:
            self._refusal = clip(str(exc), _MESSAGE_CHARS)
            self._args = RunArgs(spec="")
        args = self._args
        self._run_id = args.run_id or info.workflow_id
        real = workflow.time_ns() // 1_000_000
        self._clock_started = args.clock_started_ms if args.clock_started_ms is not None else real
        self._state: State | None = None
        self._settled: Settled | None = None
        self._recorder = Recorder(self._run_id)
        self._records: list[Record] = []
        self._early: list[SignalReceived] = []  # signals that came before the run started
        self._tasks: dict[str, tuple[str, asyncio.Task[None]]] = {}  # key -> (kind, task)
        self._semantics = 1  # the run's decision level, read in run (_semantics)
        self._cancelled: set[str] = set()  # work keys whose activity this workflow cancelled
        # Work keys of cancellation wait-cancellation-completed: once cancelled, the
        # run waits for the activity's end, which is reported.
        self._awaited: set[str] = set()
        self._issues: dict[str, int] = {}  # work key -> times issued (activity ids)
        self._refused: list[dict[str, Any]] = []  # the latest signals that were dropped
        self._refused_count = 0
        self._crash: tuple[str, Exception] | None = None  # a bug in one of the run's tasks
        self._signal_keys: list[str] = []  # the FlowcoreSignalKeys this run last upserted
        self._indexed: dict[str, Any] | None = None  # the metadata its search attributes hold
        # The continue-as-new effect this incarnation ended with, and the signals
        # that came after it (carried to the next Temporal run, never dropped).
        self._continued: flowcore.ContinueAsNew | None = None
        self._late: list[dict[str, Any]] = []
        # Carrying the run into a new Temporal run by itself (its history is
        # long): new work is held while the work out finishes ("draining"),
        # then the state goes over ("switching": updates are refused for a
        # moment, and the client sends them again to the new run).
        self._draining = False
        self._switching = False
        self._may_switch = True  # False once a switch proved impossible here

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

    def _scheduled_ms(self) -> int:
        """The slot a Temporal Schedule started this run for (its search attribute
        ``TemporalScheduledStartTime``, before Temporal's jitter); now when absent."""
        at = workflow.info().typed_search_attributes.get(_SCHEDULED_START)
        if at is None:
            return self._now()
        return int(at.timestamp() * 1000)

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
        return self._result()

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

    # --- carrying a long run into a new Temporal run ------------------------------------

    def _check_switch(self) -> None:
        """Begin to carry the run over when its history is long: Temporal
        suggests it, or it reached ``continue_after_events``. From then on new
        work is held (its effects stay pending in the state) while the work
        out finishes; timers go on."""
        if self._draining or not self._may_switch or self._state is None:
            return
        if self._settled is not None or self._continued is not None:
            return
        info = workflow.info()
        limit = self._args.continue_after_events
        if not info.is_continue_as_new_suggested() and (
            limit is None or info.get_current_history_length() < limit
        ):
            return
        if not workflow.patched(_SWITCH_PATCH):
            # A history recorded before runs carried themselves over replays as
            # it was recorded: such a run never switches.
            self._may_switch = False
            return
        self._draining = True

    def _drained(self) -> bool:
        """Carrying the run over, with no work, child or signal-run left out."""
        return self._draining and all(kind == "timer" for kind, _ in self._tasks.values())

    async def _switch(self) -> None:
        """Continue as new with the run's state: the same run, the same
        incarnation, its log going on at the next index. Updates that come now
        are refused as ``run-switching`` (``TemporalHost`` sends them again,
        to the new Temporal run); signals are applied, and go over in the
        state. Returns only when the state is too large to carry: the run then
        goes on here, and the held work starts."""
        self._switching = True
        try:
            await workflow.wait_condition(workflow.all_handlers_finished)
        except asyncio.CancelledError as exc:
            self._cancel_requested(exc)
        self._switching = False
        if self._settled is not None or self._continued is not None or self._crash is not None:
            return  # the run ended (or broke) meanwhile: nothing to carry
        assert self._state is not None
        snapshot = pack_state(self._state)
        fork = self._args.fork
        args = self._next_args(
            input=None,  # (the state holds all the run needs)
            snapshot=snapshot,
            continued=None,
            log_index=self._recorder.index,
            signals=[],
            previous=[],
            fork=None if fork is None else {**fork, "records": []},
        )
        size = len(msgspec.json.encode(dataclasses.asdict(args)))
        if size > _LARGEST_CARRY_BYTES:
            workflow.logger.warning(
                "flowcore run %s cannot continue as new: its state and arguments take"
                " %d bytes, over %d; it goes on in this Temporal run",
                self._run_id,
                size,
                _LARGEST_CARRY_BYTES,
            )
            self._draining = False
            self._may_switch = False
            self._start_open()
            return
        for _, task in self._tasks.values():  # timers: the next run arms them again
            task.cancel()
        self._tasks.clear()
        workflow.continue_as_new(args)

    def _go_on(self, flow: flowcore.Flow, snapshot: str, log_index: int) -> None:
        """Take over a run carried over from the Temporal run before: its state
        (pinned to ``flow``), its log's next index, what it waits for."""
        state = unpack_state(snapshot, flow)
        self._semantics = state.run.semantics
        self._recorder = Recorder(self._run_id, log_index)
        self._state = state
        # Temporal carries the search attributes over with the run.
        self._indexed = state.metadata
        self._signal_keys = _signal_keys(state)
        self._start_open()

    def _start_open(self) -> None:
        """Start everything the state waits for that is not out yet: work,
        children and signal-runs held while draining, and every timer, at its
        due time (questions and signal waits need nothing)."""
        assert self._state is not None
        for key, entry in sorted(self._state.waiting.pending.items()):
            if key not in self._tasks:
                self._start_effect(entry.sent)

    def _next_args(self, **changes: Any) -> RunArgs:
        """The argument of the next Temporal run of this run."""
        args = self._args
        origin, started = args.clock_origin_ms, args.clock_started_ms
        if origin is not None:  # a scaled clock goes on from where it is
            origin, started = self._now(), workflow.time_ns() // 1_000_000
        return dataclasses.replace(
            args,
            run_id=self._run_id,
            schedule=None,
            clock_origin_ms=origin,
            clock_started_ms=started,
            execution=args.execution + 1,
            **changes,
        )

    def _continue_as_new(self, effect: flowcore.ContinueAsNew) -> None:
        """Carry the run into a new Temporal run: the effect (without its report,
        which only this incarnation needs), the log's next index, late signals."""
        for _, task in self._tasks.values():
            task.cancel()
        self._tasks.clear()
        wire = flowcore.effect_to_wire(effect)
        wire.pop("report", None)
        # This incarnation's records go along (from its run.started), unless
        # they would make the argument too large for Temporal: the log then
        # begins at the new incarnation.
        first = max((i for i, r in enumerate(self._records) if r.type == "run.started"), default=0)
        previous: list[dict[str, Any]] = msgspec.to_builtins(self._records[first:])
        if len(msgspec.json.encode(previous)) > _CARRIED_LOG_BYTES:
            previous = []
        workflow.continue_as_new(
            self._next_args(
                input=effect.input,
                snapshot=None,
                continued=wire,
                log_index=self._recorder.index,
                signals=list(self._late),
                previous=previous,
            )
        )

    def _carry_signal(self, event: SignalReceived) -> None:
        """A signal after the incarnation ended: kept for the next one (up to the
        flow's buffer limit, as the interpreter would; beyond, refused)."""
        assert self._state is not None
        limit = self._state.flow.limits.max_buffered_signals
        if len(self._late) >= limit:
            self._refuse_signal(
                event.signal,
                f"{len(self._late)} signals already carried (limit {limit})",
                event.at_ms,
            )
            return
        carried: dict[str, Any] = {"signal": event.signal, "payload": event.payload}
        if event.key is not None:
            carried["key"] = event.key
        self._late.append(carried)

    def _result(self) -> dict[str, Any]:
        assert self._settled is not None and self._state is not None
        wire = flowcore.effect_to_wire(self._settled)
        used = flowcore.waiting_for(self._state)
        result: dict[str, Any] = {
            "runId": self._run_id,
            "flowId": self._state.flow.id,
            "status": wire["status"],
            "output": wire.get("output"),
            "error": wire.get("error"),
            "exhausted": wire.get("exhausted"),
            "usage": _usage_json(used.usage()),
            "report": wire.get("report", []),
        }
        report = result["report"]
        if len(report) > 1000 and len(msgspec.json.encode(report)) > _LARGEST_REPORT_BYTES:
            # A long run's report would pass Temporal's payload limit: it is in
            # the settled record of the run's log (``TemporalHost.log``).
            result["report"] = []
            result["reportOmitted"] = len(report)
        if self._args.fork is not None:  # (only a fork's result has the key)
            result["forkedFrom"] = self._forked_from()
        return result

    def _forked_from(self) -> dict[str, Any]:
        fork = self._args.fork
        assert fork is not None
        return {"runId": fork["runId"], "index": fork["index"]}

    # --- events in -----------------------------------------------------------------------

    def _apply(self, event: Event) -> None:
        """Advance the run by one event; ``EventRejected`` leaves it untouched (and logged)."""
        assert self._state is not None
        try:
            decision = flowcore.advance(self._state, event)
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

    @workflow.signal(dynamic=True)
    def _on_signal(self, name: str, args: Sequence[RawValue]) -> None:
        now = self._now()
        try:
            if len(args) > 2:
                raise _Refused(
                    f"a signal carries a payload and a key at most, got {len(args)} arguments"
                )
            payload = _decode(args[0], "the payload") if args else None
            key = _decode(args[1], "the key") if len(args) > 1 else None
            if key is not None and not isinstance(key, str):
                raise _Refused(f"a signal's key must be text, got {type(key).__name__}")
            event = SignalReceived(signal=name, payload=payload, at_ms=now, key=key)
            flowcore.check_event(event)
        except (_Refused, flowcore.DataError) as exc:
            # Signals have no reply, and a value flowcore cannot store cannot
            # be logged either (the log holds flowcore data, and replay
            # re-applies every rejected event): drop it, and say so.
            self._refuse_signal(name, str(exc), now)
            return
        if self._state is None:
            self._early.append(event)
        elif self._continued is not None:
            self._carry_signal(event)
        else:
            self._offer(event)

    def _refuse_signal(self, name: str, reason: str, now: int) -> None:
        shown = clip(name, 200)
        workflow.logger.warning(
            "flowcore run %s refused signal %a: %s", self._run_id, shown, reason
        )
        self._refused_count += 1
        self._refused.append({"signal": shown, "atMs": now, "reason": reason})
        del self._refused[:-_KEPT_REFUSALS]

    # The arguments arrive raw (RawValue), decoded by ``_answer_event``: a
    # payload Temporal's converter could not decode as a str would reject the
    # update with nothing but "Failed decoding arguments".

    @workflow.update(name=ANSWER_UPDATE)
    def answer(self, key: RawValue, answer: RawValue) -> dict[str, Any]:
        """Answer the question ``key``; the validator has checked it applies."""
        event = self._answer_event(key, answer)
        try:
            self._apply(event)
        except EventRejected as exc:
            raise ApplicationError(str(exc), type="answer-rejected", non_retryable=True) from None
        return {"key": event.idempotency_key, "answer": event.answer}

    def _answer_event(self, key: Any, answer: Any) -> HumanAnswered:
        """The answer as a checked event, or an ``answer-rejected`` error saying why not."""
        try:
            key = _decode(key, "the key")
            answer = _decode(answer, "the answer")
            if not isinstance(key, str):
                raise _Refused(
                    f"the key must be a string (a question's key), got {type(key).__name__}"
                )
            event = HumanAnswered(idempotency_key=key, answer=answer, at_ms=self._now())
            flowcore.check_event(event)
            return event
        except (_Refused, flowcore.DataError) as exc:
            raise ApplicationError(
                f"answer refused: {exc}", type="answer-rejected", non_retryable=True
            ) from None

    @answer.validator
    def _check_answer(self, key: RawValue, answer: RawValue) -> None:
        # Ask the interpreter itself (advance is pure; the result is dropped),
        # so the rule is exactly the one that would apply: pending key, an
        # answer among the options, a run that has not settled.
        event = self._answer_event(key, answer)
        self._refuse_while_switching()
        asked = event.idempotency_key
        state = self._state
        pending = [q.key for q in flowcore.waiting_for(state).questions] if state else []
        if state is None or asked not in pending:
            raise ApplicationError(
                f"no pending question {asked!r} in run {self._run_id}"
                + (f" (pending: {', '.join(pending)})" if pending else " (none pending)"),
                type="answer-rejected",
                non_retryable=True,
            )
        try:
            flowcore.advance(state, event)
        except EventRejected as exc:
            raise ApplicationError(str(exc), type="answer-rejected", non_retryable=True) from None

    @workflow.update(name=UPGRADE_UPDATE)
    def upgrade(self, request: RawValue) -> dict[str, Any]:
        """Move the run to another version of its flow; the validator has checked it.

        The client replayed the run's whole log against the new spec
        (``flowcore.upgrade``: every recorded effect re-derived the same) and
        sends the state that replay ended in: the same work, timers and
        questions under the same keys, so what is out goes on as it is. From
        here on the run decides by the new spec, and carries it on (a
        continue-as-new takes it along)."""
        text, flow, state = self._upgrade_request(request, validating=False)
        before = self._state
        assert before is not None
        self._state = state
        self._args = dataclasses.replace(
            self._args,
            spec=text,
            spec_hash=flow.spec_hash,
            flow_id=flow.id,
            source_name=f"flow {flow.id} version {flow.version}",
        )
        return {
            "from": {"version": before.flow.version, "specHash": before.flow.spec_hash},
            "to": {"version": flow.version, "specHash": flow.spec_hash},
            "at": self._recorder.index,
        }

    @upgrade.validator
    def _check_upgrade(self, request: RawValue) -> None:
        self._refuse_while_switching()
        self._upgrade_request(request, validating=True)

    def _upgrade_request(self, raw: Any, validating: bool) -> tuple[str, flowcore.Flow, State]:
        """The new spec's text, its flow and the run's state under it, or an
        ``upgrade-rejected`` error saying why not.

        In the handler (``validating`` false: the update is in the history) a
        spec the worker's registry lacks fails the workflow task instead, as a
        run pinned by hash does at its start: Temporal retries it until a
        worker has the spec."""
        state = self._state
        try:
            data = _decode(raw, "the request")
            if not isinstance(data, dict) or set(data) != {"spec", "specHash", "at", "snapshot"}:
                raise _Refused("expected an object of spec, specHash, at and snapshot")
            spec, spec_hash, at, snapshot = (
                data["spec"],
                data["specHash"],
                data["at"],
                data["snapshot"],
            )
            if not all(isinstance(v, str) for v in (spec, spec_hash, snapshot)):
                raise _Refused("spec, specHash and snapshot must be strings")
            if state is None or self._switching or self._settled or self._continued:
                raise _Refused(f"run {self._run_id} is not running here now; send it again")
            if at != self._recorder.index:
                raise _Refused(
                    f"run {self._run_id} has moved on since the check (its log is at index"
                    f" {self._recorder.index}, the check reached {at!r}): check it again"
                )
            try:
                text = spec or _registry.lookup(spec_hash, state.flow.id)
            except _registry.SpecNotDeployed as exc:
                if not validating:
                    raise
                raise _Refused(str(exc)) from None
            flow = _parse(text, f"flow {state.flow.id} (upgrade)")
            if flow.spec_hash != spec_hash:
                raise _Refused(f"the spec text is not spec {spec_hash[:12]}")
            if flow.id != state.flow.id:
                raise _Refused(f"flow {flow.id!r} is not this run's flow {state.flow.id!r}")
            moved = unpack_state(snapshot, flow)
            if moved.run_id != state.run_id or set(moved.waiting.pending) != set(
                state.waiting.pending
            ):
                raise _Refused("the state sent is not this run's as it is now")
            return text, flow, moved
        except (_Refused, flowcore.FlowcoreError, ValueError) as exc:
            raise ApplicationError(
                f"upgrade refused: {clip(str(exc), _MESSAGE_CHARS)}",
                type="upgrade-rejected",
                non_retryable=True,
            ) from None

    def _refuse_while_switching(self) -> None:
        """An update that comes while the run goes over to a new Temporal run
        cannot be taken here: ``run-switching`` (``TemporalHost`` sends it again).
        So is one that comes with the first task of the new Temporal run, before
        it has taken the state over."""
        if self._switching or (self._state is None and self._args.snapshot is not None):
            raise ApplicationError(
                f"run {self._run_id} is continuing as new; send it again",
                type=SWITCHING_ERROR,
                non_retryable=True,
            )

    @workflow.update(name=SCHEDULED_UPDATE)
    async def scheduled(self, event: RawValue) -> dict[str, Any]:
        """A scheduled-call event from outside; the validator has checked it applies.

        One that comes before the run has started waits for it (like an
        early signal). Its answer is the decision's (``Decision.scheduled``):
        a cancel or run-now of an id that is not pending answers ``done: false``.
        """
        await workflow.wait_condition(lambda: self._state is not None)
        checked = self._scheduled_event(event)
        assert self._state is not None
        try:
            decision = flowcore.advance(self._state, checked)
        except EventRejected as exc:
            raise ApplicationError(
                str(exc), type="scheduled-rejected", non_retryable=True
            ) from None
        self._records.extend(self._recorder.applied(checked, decision))
        self._follow(decision)
        answer = decision.scheduled
        assert answer is not None
        return {"id": answer.id, "done": answer.done}

    def _scheduled_event(self, raw: Any) -> Event:
        """The scheduled-call event, stamped now, or a ``scheduled-rejected`` error."""
        try:
            data = _decode(raw, "the event")
            if not isinstance(data, dict) or data.get("kind") not in _SCHEDULED_KINDS:
                raise _Refused(
                    f"expected an object whose kind is one of {', '.join(_SCHEDULED_KINDS)}"
                )
            return flowcore.event_from_wire({**data, "atMs": self._now()})
        except (_Refused, flowcore.DataError, flowcore.WireError) as exc:
            raise ApplicationError(
                f"scheduled-call event refused: {exc}",
                type="scheduled-rejected",
                non_retryable=True,
            ) from None

    @scheduled.validator
    def _check_scheduled(self, event: RawValue) -> None:
        checked = self._scheduled_event(event)
        self._refuse_while_switching()
        if self._state is None:
            return  # checked by the handler once the run has started
        try:
            probe = flowcore.advance(self._state, checked)  # a probe: advance is pure
        except EventRejected as exc:
            raise ApplicationError(
                str(exc), type="scheduled-rejected", non_retryable=True
            ) from None
        if probe.scheduled is not None and not probe.scheduled.done:
            # A cancel or run-now that changes nothing: refused here, before it
            # is accepted, so nothing is written to the run's history.
            raise ApplicationError(
                f"scheduled call {probe.scheduled.id} is not pending",
                type=NOT_PENDING_ERROR,
                non_retryable=True,
            )

    # --- queries -------------------------------------------------------------------------

    @workflow.query(name=QUESTIONS_QUERY)
    def pending_questions(self) -> list[dict[str, Any]]:
        return [] if self._state is None else _questions(flowcore.waiting_for(self._state))

    @workflow.query(name=WAITS_QUERY)
    def waits(self) -> dict[str, Any] | None:
        """What the run waits for now (``flowcore.Waits`` as a wire object); None
        before its first state."""
        if self._state is None:
            return None
        view: dict[str, Any] = msgspec.to_builtins(flowcore.waiting_for(self._state))
        return view

    @workflow.query(name=SCHEDULED_QUERY)
    def scheduled_calls(self) -> list[dict[str, Any]]:
        """The run's scheduled calls, pending and finished, as wire objects."""
        if self._state is None:
            return []
        calls: list[dict[str, Any]] = msgspec.to_builtins(flowcore.scheduled_calls(self._state))
        return calls

    @workflow.query(name=LOG_QUERY)
    def log(self, start: int = 0) -> list[dict[str, Any]]:
        """flowcore's log records of this run from index ``start``, as wire dicts.

        A later incarnation's records begin at its ``run.started``, whose index
        goes on from the incarnation before (kept by the Temporal run before).
        """
        first = self._records[0].index if self._records else 0
        out: list[dict[str, Any]] = msgspec.to_builtins(self._records[max(0, start - first) :])
        return out

    @workflow.query(name=STATUS_QUERY)
    def status(self) -> dict[str, Any]:
        state = self._state
        if state is None:
            return {"runId": self._run_id, "status": "starting"}
        view = flowcore.waiting_for(state)
        pending = [(w.key, w.effect["kind"]) for w in view.work if not w.held]
        pending += [(q.key, "ask") for q in view.questions]
        pending += [(s.key, "signal") for s in view.signals]
        pending += [(t.key, t.role) for t in view.timers]
        out: dict[str, Any] = {
            "runId": self._run_id,
            "flowId": state.flow.id,
            "version": state.flow.version,
            "specHash": state.flow.spec_hash,
            "status": view.status,
            "budget": msgspec.to_builtins(flowcore.usage_figures(state)),
            "pending": [{"key": key, "kind": kind} for key, kind in sorted(pending)],
            "questions": _questions(view),
            "waitingFor": sorted({s.signal for s in view.signals}),
            "records": self._recorder.index,
            "refused": {"count": self._refused_count, "latest": list(self._refused)},
            "metadata": dict(state.metadata or {}),
        }
        if state.incarnation != 1:  # a run that continued as new
            out["incarnation"] = state.incarnation
        if self._args.execution != 1:  # (a run on its second Temporal run or later)
            out["execution"] = self._args.execution
        if self._draining:
            out["continuing"] = True  # carrying itself over: new work waits
        if self._args.fork is not None:  # (only a fork's status has the key)
            out["forkedFrom"] = self._forked_from()
        if self._settled is not None:
            out["result"] = self._result()
        return out

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
                args=work_args(effect, args.tools),
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


def _signal_keys(state: State) -> list[str]:
    """The ``FlowcoreSignalKeys`` of a state: ``name:key`` per keyed wait, sorted."""
    return sorted({":".join(msgspec.json.decode(slot)) for slot in state.waiting.keyed_waiters})


def _questions(view: Waits) -> list[dict[str, Any]]:
    return [
        {"key": q.key, "question": q.question, "options": list(q.options or ()) or None}
        for q in view.questions
    ]


def _parse(text: str, source_name: str) -> flowcore.Flow:
    # Shared parsed flows only when flowcore itself is passed through: a
    # flowcore re-imported in the sandbox has its own Flow class.
    if _flows.serves(flowcore):
        return _flows.parse_cached(text, source_name)
    return flowcore.parse_flow(text, source_name=source_name)


def _tag(effect: Effect | Event) -> str:
    tag = effect.__struct_config__.tag
    assert isinstance(tag, str)
    return tag


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


# The interpreter's decision levels, each with the patch id that marks the
# histories of workflows started at that level or later (flowcore.SEMANTICS).
_SEMANTICS_PATCHES = ((2, "flowcore-semantics-2"), (3, "flowcore-semantics-3"))


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


def _failed(key: str, kind: str, message: str, now: int) -> EffectFailed:
    error = ErrorInfo(type=kind, message=clip(message, _MESSAGE_CHARS))
    return EffectFailed(idempotency_key=key, error=error, at_ms=now)


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
