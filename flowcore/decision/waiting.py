"""What a run waits for now: a public, read-only view of a state.

``waiting_for(state)`` lists everything a host, a web view or a person needs
to show or serve a run: the work out at the host (in wire form) and the work
held back by ``max_concurrency``, the questions with their text, options,
default and deadline, the signal waits with theirs, every timer with its due
time and role, the signals buffered before any step waited for them, the
scheduled calls with their status, and the remaining budget. A host needs no
store of its own and no private attribute to show a run.

``scheduled_calls(state)`` lists every scheduled call of the run, pending
or finished, with what a person needs to know about it: the tool and its
input, when it was created and is (or was) due, how many times it was
issued, its status in words for people (``STATUS``) and how it ended.

Lists are in a fixed order (by key), so two hosts show a run the same way.

This module must never do I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from ..language.spec import AskHumanStep
from . import keys
from .state import Pending, PendingKind, Sched, SchedStatus, State, Status, StepFrame
from .wire import (
    AskHuman,
    AwaitSignal,
    BudgetRemaining,
    ErrorInfo,
    Sleep,
    Usage,
    effect_to_wire,
)

__all__ = [
    "OpenWork",
    "Question",
    "STATUS",
    "Scheduled",
    "ScheduledCall",
    "SignalWait",
    "Timer",
    "UsageFigures",
    "Waits",
    "WorkPlace",
    "scheduled_calls",
    "scheduled_status",
    "usage_figures",
    "waiting_for",
    "work_place",
]


class _View(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """Base of the view records: JSON-ready with ``msgspec.json.encode`` (camelCase)."""


class OpenWork(_View, frozen=True):
    key: str
    step: str | None  # None for a scheduled call
    effect: dict[str, Any]  # the effect in wire form (``effect_to_wire``)
    held: bool = False  # held back by max_concurrency: not at the host yet


class Question(_View, frozen=True):
    key: str
    step: str
    question: str
    options: tuple[str, ...] | None
    default: str | None
    deadline_ms: int | None  # when the question times out, if it does


class SignalWait(_View, frozen=True, omit_defaults=True):
    key: str
    step: str
    signal: str
    deadline_ms: int | None
    signal_key: str | None = None  # the wait takes only signals sent with this key


class Timer(_View, frozen=True):
    key: str
    role: str  # sleep, timeout, backoff, deadline, tick, ask-timeout, signal-timeout, sched-delay
    due_ms: int
    step: str | None  # the step it belongs to; None for the run's deadline and schedules


class Scheduled(_View, frozen=True):
    id: str
    tool: str
    status: str  # pending | called | succeeded | failed | uncertain | cancelled
    outlive_run: bool
    due_ms: int | None  # when its delay fires, while pending


STATUS: dict[SchedStatus, str] = {
    SchedStatus.PENDING: "pending",
    SchedStatus.CALLED: "running",
    SchedStatus.SUCCEEDED: "completed",
    SchedStatus.FAILED: "failed",
    SchedStatus.CANCELLED: "cancelled",
    SchedStatus.UNCERTAIN: "uncertain",
}
"""A scheduled call's status in words for people: pending, running (its call
is out, or held by max_concurrency), completed, failed, cancelled, uncertain
(its outcome is unknown and it was not, or no longer, safe to issue again)."""


def scheduled_status(sched: Sched) -> str:
    """``sched``'s status for people (``STATUS``)."""
    return STATUS[sched.status]


class ScheduledCall(_View, frozen=True):
    """One scheduled call of a run, as a person sees it (``scheduled_calls``)."""

    id: str
    run_id: str
    tool: str
    input: Any
    status: str  # pending | running | completed | failed | cancelled | uncertain
    created_ms: int
    due_ms: int  # when its delay fires (fired), or when run-now issued it
    attempts: int  # times its call-tool was issued
    finished_ms: int | None
    error: ErrorInfo | None
    outlive_run: bool
    outside: bool  # added from outside the run (scheduled-add-requested), not by a step
    # A recurring call: its recurrence (``due_ms`` is then its next firing
    # while pending) and its firings so far; ``replays``: replays of a finished call.
    every_ms: int | None = None
    cron: str | None = None
    timezone: str | None = None
    count: int | None = None
    until_ms: int | None = None
    fires: int = 0
    replays: int = 0


def _recurrence(sched: Sched) -> dict[str, Any]:
    recur = sched.recur
    out: dict[str, Any] = {"fires": sched.fires, "replays": sched.replays}
    if recur is not None:
        out.update(
            every_ms=recur.every_ms,
            cron=recur.cron,
            timezone=recur.timezone,
            count=recur.count,
            until_ms=recur.until_ms,
        )
    return out


def scheduled_calls(state: State, ids: Iterable[str] | None = None) -> tuple[ScheduledCall, ...]:
    """Every scheduled call of ``state``'s run, by id, pending and finished.

    ``ids``: only those (in that order), e.g. ``state.journal.scheduled``, the
    calls the last transition changed.
    """
    schedules = state.schedules
    chosen = sorted(schedules) if ids is None else [sid for sid in ids if sid in schedules]
    return tuple(_call(state.run_id, sid, schedules[sid]) for sid in chosen)


def _call(run_id: str, sid: str, sched: Sched) -> ScheduledCall:
    return ScheduledCall(
        id=sid,
        run_id=run_id,
        tool=sched.tool,
        input=sched.input,
        status=STATUS[sched.status],
        created_ms=sched.created_ms,
        due_ms=sched.due_ms,
        attempts=sched.attempts,
        finished_ms=sched.finished_ms,
        error=sched.error,
        outlive_run=sched.outlive,
        **_recurrence(sched),
        outside=sched.outside,
    )


class Waits(_View, frozen=True):
    """What one run waits for now."""

    run_id: str
    status: Status
    now_ms: int
    work: tuple[OpenWork, ...]
    questions: tuple[Question, ...]
    signals: tuple[SignalWait, ...]
    timers: tuple[Timer, ...]
    buffered: dict[str, tuple[Any, ...]]  # signal -> payloads in arrival order
    scheduled: tuple[Scheduled, ...]
    budget: BudgetRemaining
    used_steps: int
    used_cost_minor_units: int
    used_tokens: int = 0
    used_tool_calls: int = 0
    used_turns: int = 0
    used_input_tokens: int = 0  # the split of used_tokens, where agents reported it
    used_output_tokens: int = 0
    used_cache_read_tokens: int = 0
    metadata: dict[str, Any] = {}  # the run's metadata fields now (language.md §2 metadata)

    def usage(self) -> Usage:
        """What the run has used in all: what a parent's ``subflow-settled`` reports."""
        return Usage(
            steps=self.used_steps,
            cost_minor_units=self.used_cost_minor_units,
            tokens=self.used_tokens,
            tool_calls=self.used_tool_calls,
            turns=self.used_turns,
            input_tokens=self.used_input_tokens,
            output_tokens=self.used_output_tokens,
            cache_read_tokens=self.used_cache_read_tokens,
        )


class UsageFigures(_View, frozen=True, kw_only=True):
    """A run's usage as its ledger counts it (specs/language.md §11.2), and what
    is left of each limit (None: unlimited).

    The ledger charges one step per issue of a work effect and one tool call
    per issue of a ``call-tool``, plus every usage reported: on success, on
    failure (an agent cut off by its limits spent what it reports), on a
    child run's settlement, late results included. ``tokens_used`` is the
    total; ``input_tokens_used`` (cache reads included), ``output_tokens_used``
    and ``cache_read_tokens_used`` split the part of it whose agents reported
    the split. Every surface that shows a run's figures (``flowcore show``,
    ``flowcore replay``, the HTTP API and its web view) takes them from
    ``usage_figures``; encoded (``msgspec.to_builtins``) its keys are
    camelCase (``stepsUsed``, ``tokensLeft``, ``cacheReadTokensUsed``, ...).
    """

    steps_used: int = 0
    steps_left: int | None = None
    cost_used: int = 0
    cost_left: int | None = None
    tokens_used: int = 0
    tokens_left: int | None = None
    input_tokens_used: int = 0
    output_tokens_used: int = 0
    cache_read_tokens_used: int = 0
    tool_calls_used: int = 0
    tool_calls_left: int | None = None
    turns_used: int = 0
    turns_left: int | None = None


def usage_figures(state: State) -> UsageFigures:
    """The figures of ``state``'s ledger: the one computation of a run's usage."""
    led = state.ledger
    return UsageFigures(
        steps_used=led.used_steps,
        steps_left=_left(led.steps, led.used_steps),
        cost_used=led.used_cost,
        cost_left=_left(led.cost, led.used_cost),
        tokens_used=led.used_tokens,
        tokens_left=_left(led.tokens, led.used_tokens),
        input_tokens_used=led.used_input_tokens,
        output_tokens_used=led.used_output_tokens,
        cache_read_tokens_used=led.used_cache_read_tokens,
        tool_calls_used=led.used_tool_calls,
        tool_calls_left=_left(led.tool_calls, led.used_tool_calls),
        turns_used=led.used_turns,
        turns_left=_left(led.turns, led.used_turns),
    )


def _left(limit: int | None, used: int) -> int | None:
    return None if limit is None else max(0, limit - used)


_ROLE = {
    PendingKind.SLEEP: "sleep",
    PendingKind.STEP_TIMEOUT: "timeout",
    PendingKind.ATTEMPT_TIMEOUT: "attempt-timeout",
    PendingKind.BACKOFF: "backoff",
    PendingKind.DEADLINE: "deadline",
    PendingKind.TICK: "tick",
    PendingKind.QUESTION_TIMEOUT: "ask-timeout",
    PendingKind.SIGNAL_TIMEOUT: "signal-timeout",
    PendingKind.SCHEDULE_DELAY: "sched-delay",
}


_WORK_KINDS = frozenset(
    (PendingKind.WORK, PendingKind.SCHEDULED_CALL, PendingKind.CHILD, PendingKind.CANCELLING)
)


def waiting_for(state: State) -> Waits:
    """What ``state`` waits for now (everything is empty once it settled)."""
    pending = state.waiting.pending
    frames = state.tree.frames

    def step_of(entry: Pending) -> str | None:
        frame = frames.get(entry.frame)
        return frame.step if isinstance(frame, StepFrame) else None

    def due(key: str) -> int | None:
        entry = pending.get(key)
        return entry.sent.until_ms if entry is not None and isinstance(entry.sent, Sleep) else None

    work: list[OpenWork] = []
    questions: list[Question] = []
    signals: list[SignalWait] = []
    timers: list[Timer] = []
    for key, entry in sorted(pending.items()):
        kind = entry.kind
        sent = entry.sent
        if (
            kind is PendingKind.WORK
            or kind is PendingKind.SCHEDULED_CALL
            or kind is PendingKind.CHILD
            or kind is PendingKind.CANCELLING
        ):
            work.append(OpenWork(key=key, step=step_of(entry), effect=effect_to_wire(sent)))
        elif kind is PendingKind.QUESTION:
            assert isinstance(sent, AskHuman)
            step = step_of(entry) or ""
            questions.append(
                Question(
                    key=key,
                    step=step,
                    question=sent.question,
                    options=sent.options,
                    default=_default(state, step),
                    deadline_ms=due(keys.wait_timeout_key(key)),
                )
            )
        elif kind is PendingKind.SIGNAL:
            assert isinstance(sent, AwaitSignal)
            # A wait for any of several names is open to each of them.
            signals.extend(
                SignalWait(
                    key=key,
                    step=step_of(entry) or "",
                    signal=name,
                    deadline_ms=due(keys.wait_timeout_key(key)),
                    signal_key=sent.key,
                )
                for name in sent.signals or (sent.signal,)
            )
        else:
            assert isinstance(sent, Sleep)
            timers.append(
                Timer(key=key, role=_ROLE[kind], due_ms=sent.until_ms, step=step_of(entry))
            )
    w = state.waiting
    for i in range(w.queue_head, w.queue_tail):
        held = w.queue[i]
        frame = frames.get(held.frame)
        work.append(
            OpenWork(
                key=held.effect.idempotency_key,
                step=frame.step if isinstance(frame, StepFrame) else None,
                effect=effect_to_wire(held.effect),
                held=True,
            )
        )
    scheduled = tuple(
        Scheduled(
            id=sid,
            tool=sched.tool,
            status=sched.status.value,
            outlive_run=sched.outlive,
            due_ms=due(keys.delay_key(sid)) if sched.status is SchedStatus.PENDING else None,
        )
        for sid, sched in sorted(state.schedules.items())
    )
    led = state.ledger
    budget = led.remaining(state.run.started_ms, state.now_ms)
    return Waits(
        run_id=state.run_id,
        status=state.status,
        now_ms=state.now_ms,
        work=tuple(work),
        questions=tuple(questions),
        signals=tuple(signals),
        timers=tuple(timers),
        buffered=dict(sorted(w.signals.items())),
        scheduled=scheduled,
        budget=budget,
        used_steps=led.used_steps,
        used_cost_minor_units=led.used_cost,
        used_tokens=led.used_tokens,
        used_tool_calls=led.used_tool_calls,
        used_turns=led.used_turns,
        metadata=dict(state.metadata or {}),
        used_input_tokens=led.used_input_tokens,
        used_output_tokens=led.used_output_tokens,
        used_cache_read_tokens=led.used_cache_read_tokens,
    )


def _default(state: State, step: str) -> str | None:
    found = state.flow.by_id.get(step)
    body = found.body if found is not None else None
    return body.default if isinstance(body, AskHumanStep) else None


class WorkPlace(_View, frozen=True, kw_only=True):
    """Where a piece of work the run waits for stands, for its handler's context.

    ``step``: the step that issued it (None for a scheduled call); ``attempt``:
    that step's attempt (1, 2 after a retry, ...); ``exec_class``: the declared
    execution class of a ``call-tool``'s tool (None for other work);
    ``deadline_ms``: when the step's timeout or its attempt's timeout fires,
    the earlier (None: neither is set); ``budget``: what is left of the run's
    budget at the state's time.
    """

    key: str
    step: str | None = None
    attempt: int | None = None
    exec_class: str | None = None
    deadline_ms: int | None = None
    budget: BudgetRemaining


def work_place(state: State, key: str) -> WorkPlace | None:
    """Where the work of idempotency key ``key`` stands in ``state`` (None: the
    run does not wait for it, e.g. it has settled or moved on)."""
    pending = state.waiting.pending
    entry = pending.get(key)
    if entry is None:
        return None
    step: str | None = None
    attempt: int | None = None
    deadline: int | None = None
    frame = state.tree.frames.get(entry.frame)
    if isinstance(frame, StepFrame):
        step, attempt = frame.step, frame.attempt
        for timer in (frame.timer, frame.attempt_timer):
            due = pending.get(timer) if timer is not None else None
            if due is not None and isinstance(due.sent, Sleep):
                at = due.sent.until_ms
                deadline = at if deadline is None else min(deadline, at)
    exec_class: str | None = None
    tool = getattr(entry.sent, "tool", None)
    if entry.effect == "call-tool" and isinstance(tool, str):
        decl = state.flow.tools.get(tool)
        exec_class = decl.exec_class if decl is not None else "uncertain"
    budget = state.ledger.remaining(state.run.started_ms, state.now_ms)
    return WorkPlace(
        key=key,
        step=step,
        attempt=attempt,
        exec_class=exec_class,
        deadline_ms=deadline,
        budget=budget,
    )
