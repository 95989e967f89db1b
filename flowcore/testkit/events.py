"""Single events for a state, and event streams: a host that makes up its reports."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from .._errors import EventRejected
from ..decision.interp import Decision, advance
from ..decision.state import State
from ..decision.updates import updates_of
from ..decision.waiting import Waits, waiting_for
from ..decision.wire import (
    AwaitSignal,
    BudgetRemaining,
    CallTool,
    CancelRequested,
    Effect,
    EffectFailed,
    EffectOutcomeUnknown,
    EffectSucceeded,
    ErrorInfo,
    Event,
    HumanAnswered,
    RunAgent,
    RunSubflow,
    RunTeam,
    ScheduledAddRequested,
    ScheduledCancelRequested,
    ScheduledReplayRequested,
    ScheduledRunNowRequested,
    SignalReceived,
    SignalRun,
    SubflowSettled,
    TimerFired,
    UpdateRequested,
    Usage,
)
from ..language.spec import Budget
from .simulator import (
    RunHistory,
    Spec,
    Turn,
    drive,
)
from .vocabulary import ERROR_TYPES, SIGNAL_KEY, SIGNALS

# --- single events for a state (kept for the exhaustive state x event test) --------------


def _answered_by(waits: Waits) -> dict[str, str]:
    """Every key the run waits for, in order, and what answers it: ``work``,
    ``subflow``, ``ask``, ``signal`` or ``timer`` (work held back is not out yet)."""
    found = {
        # A detached child's start is answered as work is: effect-succeeded.
        w.key: "subflow"
        if w.effect["kind"] == "run-subflow" and not w.effect.get("detached")
        else "work"
        for w in waits.work
        if not w.held
    }
    found.update((q.key, "ask") for q in waits.questions)
    found.update((s.key, "signal") for s in waits.signals)
    found.update((t.key, "timer") for t in waits.timers)
    return dict(sorted(found.items()))


def pending_events(state: State) -> list[Event]:
    """Events a well-behaved host could report now, one or more per pending key."""
    out: list[Event] = []
    at = state.now_ms + 1
    for key, what in _answered_by(waiting_for(state)).items():
        if what in ("work", "subflow"):
            if what == "subflow":
                out.append(SubflowSettled(idempotency_key=key, status="completed", at_ms=at))
                out.append(SubflowSettled(idempotency_key=key, status="failed", at_ms=at))
            else:
                out.append(
                    EffectSucceeded(
                        idempotency_key=key,
                        output={"k": key},
                        usage=Usage(steps=0, cost_minor_units=10),
                        at_ms=at,
                    )
                )
            out.append(
                EffectFailed(
                    idempotency_key=key, error=ErrorInfo(type="boom", retryable=True), at_ms=at
                )
            )
            out.append(EffectOutcomeUnknown(idempotency_key=key, at_ms=at))
        elif what == "ask":
            out.append(HumanAnswered(idempotency_key=key, answer="yes", at_ms=at))
        elif what == "signal":
            pass  # answered by a signal, below
        else:
            out.append(TimerFired(idempotency_key=key, at_ms=at))
    for name in SIGNALS:
        out.append(SignalReceived(signal=name, payload={"from": name}, at_ms=at))
    for sid, sched in sorted(state.schedules.items()):
        if sched.status == "pending":
            out.append(ScheduledCancelRequested(schedule_id=sid, at_ms=at))
            out.append(ScheduledRunNowRequested(schedule_id=sid, at_ms=at))
        elif sched.status in ("succeeded", "failed", "uncertain"):
            out.append(ScheduledReplayRequested(schedule_id=sid, at_ms=at))
    for tool, decl in sorted(state.flow.tools.items()):
        if decl.schedulable:
            out.append(ScheduledAddRequested(tool=tool, input={"k": tool}, delay_ms=50, at_ms=at))
    uid = f"p{len(updates_of(state)) + 1}"  # a fresh id
    for name, value in _update_requests(state):
        out.append(UpdateRequested(update_id=uid, name=name, input=value, at_ms=at))
    out.append(CancelRequested(reason="test", at_ms=at))
    return out


def _update_requests(state: State) -> list[tuple[str, Any]]:
    """Each declared update with each of its examples (null when it has none)."""
    decls = state.flow.updates
    return [(name, v) for name in sorted(decls) for v in tuple(decls[name].examples) or (None,)]


def hostile_events(state: State, sent: Sequence[Event] = ()) -> list[Event]:
    """Events a broken host might send: unknown keys, wrong kinds, bad answers, time
    travel, oversize payloads, values that are not flowcore data, and duplicates
    of the events in ``sent``."""
    at = state.now_ms
    keys = list(_answered_by(waiting_for(state))) or ["nobody/none#1"]
    key = keys[0]
    out: list[Event] = [
        EffectSucceeded(idempotency_key=f"{key}-ghost", at_ms=at),
        EffectFailed(idempotency_key="???", error=ErrorInfo(type="x"), at_ms=at),
        HumanAnswered(idempotency_key=key, answer="maybe", at_ms=at),
        HumanAnswered(idempotency_key=key, answer=["not", "a", "string"], at_ms=at),
        TimerFired(idempotency_key=key, at_ms=at),
        SubflowSettled(idempotency_key=key, status="cancelled", at_ms=at),
        EffectSucceeded(idempotency_key=key, output="x" * 10_000, at_ms=0),
        SignalReceived(signal="nobody-waits", payload=list(range(100)), at_ms=at),
        # Values flowcore refuses as data (see specs/protocol.md §3.1).
        EffectSucceeded(idempotency_key=key, output={"n": 10**20}, at_ms=at),
        SignalReceived(signal="nobody-waits", payload="\ud800", at_ms=at),
        HumanAnswered(idempotency_key=key, answer=float("nan"), at_ms=at),
        UpdateRequested(update_id="u-ghost", name="no-such-update", at_ms=at),
        UpdateRequested(update_id="\ud800", name="x", input={"n": 10**20}, at_ms=at),
    ]
    out.extend(sent[-3:])
    return out


def event_of_kind(kind: str, state: State, choice: int) -> Event:
    """An event of ``kind``, aimed at a pending key when one fits (``choice`` picks)."""
    keys = list(_answered_by(waiting_for(state)))
    key = keys[choice % len(keys)] if keys else f"{state.run_id}/none#1"
    at = state.now_ms + choice % 7
    if kind == "effect-succeeded":
        return EffectSucceeded(idempotency_key=key, output=choice, at_ms=at)
    if kind == "effect-failed":
        return EffectFailed(
            idempotency_key=key,
            error=ErrorInfo(type=ERROR_TYPES[choice % len(ERROR_TYPES)], retryable=choice % 2 == 0),
            at_ms=at,
        )
    if kind == "effect-outcome-unknown":
        return EffectOutcomeUnknown(idempotency_key=key, at_ms=at)
    if kind == "human-answered":
        return HumanAnswered(
            idempotency_key=key, answer=("yes", "no", "maybe")[choice % 3], at_ms=at
        )
    if kind == "timer-fired":
        return TimerFired(idempotency_key=key, at_ms=at)
    if kind == "signal-received":
        return SignalReceived(signal=SIGNALS[choice % 2], payload=choice, at_ms=at)
    if kind == "subflow-settled":
        status = ("completed", "failed", "cancelled", "budget-exhausted")[choice % 4]
        return SubflowSettled(idempotency_key=key, status=status, at_ms=at)  # type: ignore[arg-type]
    if kind == "cancel-requested":
        return CancelRequested(reason="because", at_ms=at)
    if kind in (
        "scheduled-cancel-requested",
        "scheduled-run-now-requested",
        "scheduled-replay-requested",
    ):
        ids = [*sorted(state.schedules), f"{state.run_id}/~scheduled-99"]
        sid = ids[choice % len(ids)]
        if kind == "scheduled-cancel-requested":
            return ScheduledCancelRequested(schedule_id=sid, at_ms=at)
        if kind == "scheduled-replay-requested":
            return ScheduledReplayRequested(schedule_id=sid, at_ms=at, request=f"q{choice % 2}")
        return ScheduledRunNowRequested(schedule_id=sid, at_ms=at)
    if kind == "update-requested":
        names = [name for name, _ in _update_requests(state)] + ["nope"]
        inputs = [value for _, value in _update_requests(state)] + [None]
        pick = choice % len(names)
        return UpdateRequested(
            update_id=f"u{choice % 3}", name=names[pick], input=inputs[pick], at_ms=at
        )
    if kind == "scheduled-add-requested":
        tools = [*sorted(state.flow.tools), "nowhere"]
        tool = tools[choice % len(tools)]
        if choice % 3 == 2:  # a recurring call
            return ScheduledAddRequested(
                tool=tool, input=choice, every_ms=100 * choice, count=2, at_ms=at
            )
        return ScheduledAddRequested(tool=tool, input=choice, delay_ms=100 * choice, at_ms=at)
    raise ValueError(f"unknown event kind {kind!r}")


def apply(state: State, event: Event) -> Decision | None:
    """``advance``, or None when the event is rejected (the state is then unchanged)."""
    try:
        return advance(state, event)
    except EventRejected:
        return None


# --- event streams: a host that makes up its reports --------------------------------------

MOVES: tuple[tuple[str, int], ...] = (
    # A move is (op, choice); the op is drawn from 0..99 and these are the
    # ops' shares. Well-behaved ops come first so that streams shrink
    # towards plain successes.
    ("succeed", 24),
    ("fire", 10),
    ("answer", 8),
    ("fail", 8),
    ("unknown", 6),
    ("subflow", 6),
    ("signal", 5),
    ("stale", 3),
    ("update", 6),
    ("cancel", 2),
    # hostile
    ("duplicate", 4),
    ("ghost", 2),
    ("bad-answer", 2),
    ("wrong-kind", 3),
    ("time-travel", 2),
    ("oversize", 3),
    ("flood", 3),
    ("early-timer", 3),
)
_OPS: tuple[str, ...] = tuple(name for name, share in MOVES for _ in range(share))
_FRIENDLY = 78  # ops below this index are what a well-behaved host sends
assert len(_OPS) == 100 and _OPS[_FRIENDLY - 1] == "cancel" and _OPS[_FRIENDLY] == "duplicate"
_WORK = ("work", "subflow")  # what answers a work key (``_answered_by``)
_WORK_EFFECTS = (CallTool, RunAgent, RunTeam, RunSubflow, SignalRun)


def _output(choice: int) -> Any:
    shape = choice % 5
    if shape == 0:
        return {"v": choice, "green": choice % 2 == 0, "items": [choice % 3]}
    if shape == 1:
        return choice
    if shape == 2:
        return None
    if shape == 3:
        return f"text {choice}"
    return [choice, {"k": "v"}]


def _oversize(choice: int) -> Any:
    shape = choice % 3
    if shape == 0:
        return "x" * 100_000
    if shape == 1:
        return list(range(5_000))
    nested: Any = choice
    for _ in range(100):
        nested = {"n": nested}
    return nested


_ANSWERS = (EffectSucceeded, EffectFailed, EffectOutcomeUnknown, SubflowSettled)


class _Host:
    """What a host knows about one run while it makes up events to report."""

    def __init__(
        self,
        history: RunHistory,
        paranoid: bool = True,
        outputs: Callable[[Effect, int], Any] | None = None,
    ) -> None:
        self.h = history
        self.paranoid = paranoid
        self.outputs = outputs
        self.work: dict[str, Effect] = {}
        self.signal_names: set[str] = set(SIGNALS)
        self.sent: list[Event] = []
        self.answered: set[str] = set()  # work keys an accepted event answered
        self.update_ids: list[str] = []  # the update ids requested, in order
        self.clock = history.state.now_ms
        for turn in history.turns:
            self.learn(turn.effects)
        self.look()

    def look(self) -> None:
        """What the run waits for now (``waiting_for``), and what answers each key."""
        self.waits = waiting_for(self.h.state)
        self.keys = _answered_by(self.waits)

    def learn(self, effects: Iterable[Effect]) -> None:
        for effect in effects:
            if isinstance(effect, _WORK_EFFECTS):
                self.work[effect.idempotency_key] = effect
            elif isinstance(effect, AwaitSignal):
                self.signal_names.add(effect.signal)

    def send(self, event: Event) -> Turn:
        before = len(self.h.turns)
        turn = self.h.record(event, self.paranoid)
        self.sent.append(event)
        if turn.rejected is None and isinstance(event, _ANSWERS):
            self.answered.add(event.idempotency_key)
        for recorded in self.h.turns[before:]:  # with the next incarnation's, if it continued
            self.clock = max(self.clock, recorded.state.now_ms)
            self.learn(recorded.effects)
        self.look()
        return turn

    # --- what is pending ------------------------------------------------------------------

    def pending(self, *whats: str) -> list[str]:
        """The keys answered by ``whats`` (see ``_answered_by``), in order."""
        return [k for k, what in self.keys.items() if what in whats]

    def has(self, what: str) -> bool:
        if what == "sent":
            return bool(self.sent)
        if what not in ("work", "subflow", "ask", "timer"):
            raise ValueError(what)
        return bool(self.pending(*_WORK) if what == "work" else self.pending(what))

    def at(self, choice: int) -> int:
        return self.clock + choice % 3

    # --- making events ------------------------------------------------------------------------

    def make(self, op: str, choice: int) -> Event:
        """An event for ``op``; when nothing fits the op, one that moves the run on."""
        event = getattr(self, "op_" + op.replace("-", "_"))(choice)
        return event if event is not None else self.progress(choice)

    def succeed_event(self, key: str, choice: int) -> Event:
        effect = self.work.get(key)
        if isinstance(effect, RunSubflow) and effect.detached:  # started: the child's run id
            return EffectSucceeded(
                idempotency_key=key, output={"run_id": key}, at_ms=self.at(choice)
            )
        if isinstance(effect, RunSubflow):
            usage = Usage(steps=choice % 3, cost_minor_units=choice % 40)
            return SubflowSettled(
                idempotency_key=key,
                status="completed",
                output=_output(choice),
                usage=usage,
                at_ms=self.at(choice),
            )
        output = _output(choice)
        if self.outputs is not None and effect is not None:
            output = self.outputs(effect, choice)
        reported: Usage | None = None
        if choice % 4 == 0:
            reported = Usage(steps=choice // 4 % 2, cost_minor_units=choice % 50)
        return EffectSucceeded(
            idempotency_key=key, output=output, usage=reported, at_ms=self.at(choice)
        )

    def op_succeed(self, choice: int) -> Event | None:
        keys = self.pending(*_WORK)
        return self.succeed_event(keys[choice % len(keys)], choice) if keys else None

    def op_fail(self, choice: int) -> Event | None:
        keys = self.pending(*_WORK)
        if not keys:
            return None
        key = keys[choice % len(keys)]
        error = ErrorInfo(
            type=ERROR_TYPES[choice % len(ERROR_TYPES)],
            message=f"failure {choice}",
            retryable=choice // 4 % 2 == 0,
        )
        watched = getattr(self.work.get(key), "heartbeat_timeout_ms", None) is not None
        if watched and choice // 8 % 2 == 0:  # the host stopped it: it went quiet
            details = {"beat": choice} if choice // 16 % 2 else None
            error = ErrorInfo(type="heartbeat-timeout", message="no heartbeat", details=details)
        return EffectFailed(idempotency_key=key, error=error, at_ms=self.at(choice))

    def op_unknown(self, choice: int) -> Event | None:
        keys = self.pending(*_WORK)
        if not keys:
            return None
        return EffectOutcomeUnknown(idempotency_key=keys[choice % len(keys)], at_ms=self.at(choice))

    def op_subflow(self, choice: int) -> Event | None:
        keys = self.pending("subflow")
        if not keys:
            return None
        status = ("completed", "failed", "cancelled", "budget-exhausted")[choice % 4]
        return SubflowSettled(
            idempotency_key=keys[choice % len(keys)],
            status=status,  # type: ignore[arg-type]
            output=_output(choice) if status == "completed" else None,
            usage=Usage(steps=choice % 3, cost_minor_units=choice % 40),
            at_ms=self.at(choice),
        )

    def op_answer(self, choice: int) -> Event | None:
        questions = self.waits.questions
        if not questions:
            return None
        question = questions[choice % len(questions)]
        options = question.options
        answer: Any = options[choice % len(options)] if options else f"answer {choice}"
        return HumanAnswered(idempotency_key=question.key, answer=answer, at_ms=self.at(choice))

    def due_timers(self) -> list[tuple[int, str]]:
        return sorted((t.due_ms, t.key) for t in self.waits.timers)

    def op_fire(self, choice: int) -> Event | None:
        due = self.due_timers()
        if not due:
            return None
        until, key = due[0]
        return TimerFired(idempotency_key=key, at_ms=max(until, self.clock))

    def op_signal(self, choice: int) -> Event | None:
        names = sorted(self.signal_names)
        return SignalReceived(
            signal=names[choice % len(names)],
            payload={"n": choice},
            at_ms=self.at(choice),
            key=SIGNAL_KEY if choice % 5 == 4 else None,
        )

    def op_update(self, choice: int) -> Event | None:
        """A request for a declared update with one of its examples, under a fresh
        id or (one in five) an id requested before: a host that did not look it up."""
        requests = _update_requests(self.h.state)
        if not requests:
            return None
        name, value = requests[choice % len(requests)]
        if self.update_ids and choice % 5 == 4:
            uid = self.update_ids[choice // 5 % len(self.update_ids)]
        else:
            uid = f"u{len(self.update_ids) + 1}"
            self.update_ids.append(uid)
        return UpdateRequested(update_id=uid, name=name, input=value, at_ms=self.at(choice))

    def op_cancel(self, choice: int) -> Event | None:
        return CancelRequested(reason=f"cancel {choice}", at_ms=self.at(choice))

    def op_stale(self, choice: int) -> Event | None:
        """A late result for work the run abandoned (emitted, never answered)."""
        keys = sorted(k for k in self.work if k not in self.keys and k not in self.answered)
        if not keys:
            return None
        key = keys[choice % len(keys)]
        if choice % 2:
            return self.succeed_event(key, choice)
        error = ErrorInfo(type="late", message="too late")
        return EffectFailed(idempotency_key=key, error=error, at_ms=self.at(choice))

    # hostile ---------------------------------------------------------------------------------

    def op_duplicate(self, choice: int) -> Event | None:
        return self.sent[choice % len(self.sent)] if self.sent else None

    def op_ghost(self, choice: int) -> Event | None:
        at = self.at(choice)
        rid = self.h.run_id
        return (
            EffectSucceeded(idempotency_key=f"{rid}/ghost{choice}#1", output=1, at_ms=at),
            EffectFailed(idempotency_key="elsewhere/x#1", error=ErrorInfo(type="boom"), at_ms=at),
            HumanAnswered(idempotency_key=f"{rid}/ghost#1", answer="yes", at_ms=at),
            TimerFired(idempotency_key=f"{rid}/ghost#1/timeout", at_ms=at),
            EffectOutcomeUnknown(idempotency_key="", at_ms=at),
        )[choice % 5]

    def op_bad_answer(self, choice: int) -> Event | None:
        keys = self.pending("ask") or self.pending(*_WORK)
        if not keys:
            return None
        bad: Any = ("maybe", None, ["yes"], {"answer": "yes"}, "YES", "")[choice % 6]
        return HumanAnswered(
            idempotency_key=keys[choice % len(keys)], answer=bad, at_ms=self.at(choice)
        )

    def op_wrong_kind(self, choice: int) -> Event | None:
        pending = list(self.keys.items())
        if not pending:
            return None
        key, what = pending[choice % len(pending)]
        at = self.at(choice)
        if what in _WORK:
            if what == "subflow":
                return EffectSucceeded(idempotency_key=key, output=1, at_ms=at)
            options: tuple[Event, ...] = (
                TimerFired(idempotency_key=key, at_ms=at),
                HumanAnswered(idempotency_key=key, answer="yes", at_ms=at),
                SubflowSettled(idempotency_key=key, status="completed", at_ms=at),
            )
            return options[choice % 3]
        if what in ("ask", "signal"):
            return (
                EffectSucceeded(idempotency_key=key, at_ms=at),
                TimerFired(idempotency_key=key, at_ms=at),
                EffectOutcomeUnknown(idempotency_key=key, at_ms=at),
            )[choice % 3]
        return (
            EffectSucceeded(idempotency_key=key, at_ms=at),
            HumanAnswered(idempotency_key=key, answer="yes", at_ms=at),
            EffectFailed(idempotency_key=key, error=ErrorInfo(type="boom"), at_ms=at),
        )[choice % 3]

    def op_time_travel(self, choice: int) -> Event | None:
        keys = self.pending("work")
        if keys:
            key = keys[choice % len(keys)]
            return EffectSucceeded(idempotency_key=key, output=_output(choice), at_ms=0)
        return SignalReceived(signal=sorted(self.signal_names)[0], payload=choice, at_ms=0)

    def op_oversize(self, choice: int) -> Event | None:
        keys = self.pending("work")
        if keys and choice % 4:
            key = keys[choice % len(keys)]
            return EffectSucceeded(
                idempotency_key=key, output=_oversize(choice), at_ms=self.at(choice)
            )
        names = sorted(self.signal_names)
        return SignalReceived(
            signal=names[choice % len(names)], payload=_oversize(choice), at_ms=self.at(choice)
        )

    def op_flood(self, choice: int) -> Event | None:
        return SignalReceived(signal=f"nobody{choice % 3}", payload=choice, at_ms=self.at(choice))

    def op_early_timer(self, choice: int) -> Event | None:
        keys = self.pending("timer")
        if not keys:
            return None
        return TimerFired(idempotency_key=keys[choice % len(keys)], at_ms=self.clock)

    def progress(self, choice: int) -> Event:
        """Something that moves the run on: answer work, a question, a timer, a wait."""
        for op in ("succeed", "answer", "fire"):
            event = getattr(self, "op_" + op)(choice)
            if event is not None:
                assert isinstance(
                    event, (EffectSucceeded, SubflowSettled, HumanAnswered, TimerFired)
                )
                return event
        waiting = sorted({(s.signal, s.signal_key or "") for s in self.waits.signals})
        if waiting:
            name, key = waiting[choice % len(waiting)]
            return SignalReceived(
                signal=name, payload={"n": choice}, at_ms=self.at(choice), key=key or None
            )
        return CancelRequested(reason="nothing else to do", at_ms=self.at(choice))


def play(
    flow: Spec,
    input: Any = None,
    moves: Iterable[tuple[int, int]] = (),
    *,
    run_id: str = "r",
    now_ms: int = 0,
    budget: Budget | BudgetRemaining | None = None,
    depth: int = 0,
    paranoid: bool = True,
    finish: bool = False,
    max_finish: int = 2_000,
) -> RunHistory:
    """Drive a run with events made up from ``moves``; the run's full history.

    With ``finish``, a well-behaved host then keeps answering whatever the run
    waits for (results, answers, timers, signals) until it settles, at most
    ``max_finish`` more events.
    """
    history = drive(flow, input, run_id=run_id, now_ms=now_ms, budget=budget, depth=depth)
    host = _Host(history, paranoid)
    for op, choice in moves:
        host.send(host.make(_OPS[op % 100], choice))
    if finish:
        for n in range(max_finish):
            if history.state.settled is not None:
                break
            host.send(host.progress(n))
    return history


def events_from_moves(
    flow: Spec,
    input: Any = None,
    moves: Iterable[tuple[int, int]] = (),
    **start: Any,
) -> list[Event]:
    """The events ``play`` reports for ``moves``: replayable with ``check_run``."""
    return play(flow, input, moves, paranoid=False, **start).events()
