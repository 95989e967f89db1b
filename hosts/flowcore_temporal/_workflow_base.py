"""The state of the one flowcore workflow, its clock and its result, and the helpers
every part of it shares (``FlowcoreWorkflow`` in ``_workflow`` says how the parts fit).

``WorkflowBase`` holds what one workflow instance keeps (the run's state, its
log records, its tasks); the parts built on it (``_workflow_effects``,
``_workflow_carry``, ``_workflow_handlers``) and ``FlowcoreWorkflow`` read and
change it. The values from outside are decoded and checked here (``_decode``,
``_run_args``).

This module runs inside Temporal's workflow sandbox: it must never do I/O,
read the system clock or draw a random number.
"""

from __future__ import annotations

import asyncio
import collections
from typing import TYPE_CHECKING, Any, Final

from temporalio import workflow
from temporalio.common import RawValue, RetryPolicy, SearchAttributeKey

with workflow.unsafe.imports_passed_through():
    import msgspec

import flowcore
from flowcore import (
    BudgetRemaining,
    Effect,
    EffectFailed,
    ErrorInfo,
    Event,
    Record,
    Recorder,
    Settled,
    SignalReceived,
    State,
    Usage,
    Waits,
)
from flowcore_temporal import _flows

from ._types import (
    SIGNAL_KEYS_ATTRIBUTE,
    RunArgs,
    RunArgsError,
    check_run_args,
    clip,
    run_args_from_wire,
)

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
    "scheduled-replay-requested",
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


class WorkflowBase:
    """What one run's workflow keeps, its clock and its result."""

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
        # The run's progress stream (PROGRESS_SIGNAL): its newest items, each
        # (index, at, key, step, data, size), their total size, the next index.
        self._progress: collections.deque[tuple[int, int, str, str | None, Any, int]] = (
            collections.deque()
        )
        self._progress_bytes = 0
        self._progress_next = args.progress_next

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


def _failed(key: str, kind: str, message: str, now: int) -> EffectFailed:
    error = ErrorInfo(type=kind, message=clip(message, _MESSAGE_CHARS))
    return EffectFailed(idempotency_key=key, error=error, at_ms=now)
