"""The interpreter: ``start`` and ``advance``, the only place transitions live.

Theory of operation
-------------------

A run is a tree of *frames*. A ``SeqFrame`` runs a list of steps one after
another; a ``StepFrame`` is one running step. Composite steps (switch,
parallel, for_each, repeat, try, declared teams) own child ``SeqFrame``s.
Every frame has a deterministic id built from step ids and loop indices
(``per_service[2]/triage``), so ids, idempotency keys and effects are the same
on every replay.

Everything the run waits for is in ``pending``, by idempotency key: work
effects, human questions, signals and timers. An event names a key (or, for
signals, a signal name); ``advance`` looks the key up (O(1)), lets the frame
that owns it react, and when a step finishes its outcome travels up the
parent chain until some frame starts new work or the root list ends. The cost
of an event is therefore proportional to the depth of the tree and the number
of branches the event touches, never to the length of the history.

One ``advance`` works on a ``_Txn``: a scratch copy of the state's fields
whose persistent maps are updated by path copying. The input state is never
touched; if the event is rejected the scratch copy is dropped.

Order of effects within one decision is fixed: the order in which the
interpreter reaches them, depth first, branches and members in declared
order; a step's timeout timer comes before the step's own effect; at start
the wall-clock deadline timer comes first. A decision that settles the run
holds exactly one effect, ``settled``: work emitted earlier in the same
decision never reaches the host and is reported as not-started.

Results that arrive for abandoned work (timed out, lost a race, cancelled)
are accepted once, recorded in the report and otherwise ignored.

This module must never do I/O, read a clock or draw a random number.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import operator
from typing import Any, NoReturn, assert_never

import immutables
import msgspec

from ._data import (
    MAX_EVENT_BYTES,
    MAX_NAME_CHARS,
    DataError,
    check_data,
    json_size,
    short,
    short_json,
    text_ok,
)
from ._errors import EventRejected, InputError, ReportNeeded
from ._expr import TemplateError
from ._spec import (
    AskHumanStep,
    AwaitSignalStep,
    Budget,
    CallToolStep,
    CancelScheduledStep,
    Flow,
    ForEachStep,
    ParallelStep,
    RepeatStep,
    RunAgentStep,
    RunSubflowStep,
    RunTeamStep,
    ScheduleStep,
    SleepStep,
    Step,
    SwitchStep,
    TryStep,
)
from ._state import (
    GONE,
    CompLink,
    Decision,
    Ending,
    Env,
    ForEachProgress,
    Frame,
    Held,
    Journal,
    Ledger,
    ParallelProgress,
    Pending,
    RepeatProgress,
    ReportRow,
    Sched,
    SeqFrame,
    State,
    Status,
    StepFrame,
    TeamProgress,
    TryProgress,
    add_report_row,
    find_result,
    iter_report,
    merge_results,
    oldest_first,
)
from ._wire import (
    AskHuman,
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
    ReportEntry,
    RunAgent,
    RunSubflow,
    RunTeam,
    Settled,
    SignalReceived,
    Sleep,
    SubflowSettled,
    TimerFired,
    Usage,
    check_event,
)

__all__ = ["DEFAULT_STEP_BUDGET", "Decision", "InputError", "advance", "start"]

DEFAULT_STEP_BUDGET = 1000
"""Steps a run may spend when neither the spec nor the caller sets a budget."""

DEFAULT_UNKNOWN_REISSUES = 3
"""Issues of a readonly/idempotent call after unknown outcomes, without a retry policy."""

_EMPTY: immutables.Map[Any, Any] = immutables.Map()
_NO_ANSWER = object()
_RECENT_BATCH = 64  # see _state: results are merged into the big map in batches
_OK = True
_FAIL = False
_SCOPED: dict[tuple[str, str], tuple[str, ...]] = {}
_NO_JOURNAL = Journal()
_BY_SEQ = operator.attrgetter("seq")


def _scoped_ids(flow: Flow, loop: Step) -> tuple[str, ...]:
    """Ids of the steps whose results land in one iteration (or fire) of ``loop``.

    Nested loops open scopes of their own and are not entered; the ids of
    compensation steps are included (they run in the scope of their step).
    """
    key = (flow.spec_hash, loop.id)
    ids = _SCOPED.get(key)
    if ids is None:
        found: list[str] = []

        def walk(steps: tuple[Step, ...]) -> None:
            for step in steps:
                found.append(step.id)
                walk(step.compensate)
                body = step.body
                if isinstance(body, SwitchStep):
                    for case in body.cases:
                        walk(case.steps)
                elif isinstance(body, ParallelStep):
                    for branch in body.branches.values():
                        walk(branch)
                elif isinstance(body, TryStep):
                    walk(body.steps)
                    for clause in body.catch:
                        walk(clause.steps)

        body = loop.body
        assert isinstance(body, ForEachStep | RepeatStep)
        walk(body.steps)
        ids = tuple(found)
        if len(_SCOPED) > 4096:
            _SCOPED.clear()
        _SCOPED[key] = ids
    return ids


# Outcome of a step or list: (ok, value) where value is the output on success
# and an ErrorInfo on failure. A plain tuple: this is the hottest value here.
Outcome = tuple[bool, Any]


class _Exhausted(Exception):
    def __init__(self, limit: str) -> None:
        self.limit = limit


def _err(kind: str, message: str, retryable: bool = False) -> ErrorInfo:
    return ErrorInfo(type=kind, message=message, retryable=retryable)


def _error_dict(error: ErrorInfo) -> dict[str, Any]:
    return {"type": error.type, "message": error.message, "retryable": error.retryable}


def _ms_to_dt(ms: int) -> _dt.datetime:
    return _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC) + _dt.timedelta(milliseconds=ms)


def _dt_to_ms(value: _dt.datetime) -> int:
    delta = value - _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
    return delta // _dt.timedelta(milliseconds=1)


def _unit_fraction(key: str) -> float:
    """A number in [0, 1) derived from a key: jitter that replays agree on."""
    digest = hashlib.sha256(key.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


class _Resolver:
    """The expression context of one frame: see ``_expr.Resolver``."""

    __slots__ = ("attempt", "env", "extra", "t")

    def __init__(self, t: _Txn, env: str, attempt: int, extra: dict[str, Any] | None) -> None:
        self.t = t
        self.env = env
        self.attempt = attempt
        self.extra = extra

    def root(self, name: str) -> Any:
        t = self.t
        if name == "input":
            return t.input
        if name == "run":
            flow = t.flow
            return {
                "id": t.run_id,
                "flow": flow.id,
                "version": flow.version,
                "depth": t.depth,
                "attempt": self.attempt,
            }
        if name == "$all_steps":
            return self._all_steps()
        if name == "$locals":
            return self._locals()
        if self.extra is not None and name in self.extra:
            return self.extra[name]
        env_id: str | None = self.env
        envs = t.envs
        while env_id is not None:
            env = envs[env_id]
            if name in env.vars:
                return env.vars[name]
            env_id = env.parent
        return None

    def step(self, step_id: str) -> Any:
        env_id: str | None = self.env
        envs = self.t.envs
        results = self.t.results
        recent = self.t.recent
        while env_id is not None:
            env = envs[env_id]
            record = find_result(recent, results, env.scope + step_id)
            if record is not None:
                return record
            env_id = env.parent
        return None

    def _scopes(self) -> list[str]:
        scopes: list[str] = []
        env_id: str | None = self.env
        while env_id is not None:
            env = self.t.envs[env_id]
            if env.scope not in scopes:
                scopes.append(env.scope)
            env_id = env.parent
        return scopes

    def _all_steps(self) -> dict[str, Any]:
        # Reading ``steps`` wholesale costs O(steps in the flow); only
        # expressions that do so pay it.
        out: dict[str, Any] = {}
        for step_id in self.t.flow.by_id:
            record = self.step(step_id)
            if record is not None:
                out[step_id] = record
        return out

    def _locals(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        chain: list[Env] = []
        env_id: str | None = self.env
        while env_id is not None:
            env = self.t.envs[env_id]
            chain.append(env)
            env_id = env.parent
        for env in reversed(chain):
            out.update(env.vars)
        if self.extra:
            out.update(self.extra)
        return out


class _Txn:
    """Scratch space for one transition. See the module docstring."""

    __slots__ = (
        "compensating",
        "compensations",
        "depth",
        "effects",
        "emitted",
        "emitted_now",
        "envs",
        "error",
        "flow",
        "frames",
        "in_flight",
        "input",
        "ledger",
        "now",
        "pending",
        "queue",
        "queue_head",
        "queue_tail",
        "recent",
        "report",
        "report_loaded",
        "resolved",
        "resolved_now",
        "results",
        "rewrites",
        "rows",
        "run_id",
        "scheduled",
        "seq",
        "settled",
        "signals",
        "source",
        "started_ms",
        "status",
        "waiters",
        "written",
    )

    def __init__(self, s: State) -> None:
        self.source = s
        self.flow = s.flow
        self.run_id = s.run_id
        self.depth = s.depth
        self.input = s.input
        self.status: Status = s.status
        self.started_ms = s.started_ms
        self.now = s.now_ms
        self.ledger = s.ledger
        self.seq = s.seq
        self.frames = s.frames
        self.envs = s.envs
        self.pending = s.pending
        self.results = s.results
        self.recent = s.recent
        self.report = s.report
        self.report_loaded = s.report_loaded
        self.rewrites = s.rewrites
        self.resolved = s.resolved
        self.signals = s.signals
        self.waiters = s.waiters
        self.queue = s.queue
        self.queue_head = s.queue_head
        self.queue_tail = s.queue_tail
        self.in_flight = s.in_flight
        self.compensations = s.compensations
        self.compensating = s.compensating
        self.scheduled = s.scheduled
        self.settled = s.settled
        self.error = s.error
        self.effects: list[Effect] = []
        self.emitted_now: set[str] = set()  # keys of every effect emitted in this decision
        self.written: list[str] = []  # result names written: the journal
        self.resolved_now: list[str] = []  # resolved keys written: the journal
        self.rows = 0  # report rows added: the journal
        self.emitted: list[str] = []  # work keys emitted in this decision

    def next_decision(self) -> None:
        """Start another decision on this scratch state (``Fold``).

        The journal's containers are emptied and reused (``freeze`` copies
        them); the effects list was handed out, so it is a new one.
        """
        self.effects = []
        self.emitted_now.clear()
        self.written.clear()
        self.resolved_now.clear()
        self.rows = 0
        self.emitted.clear()

    def apply(self, event: Event) -> None:
        """Apply one event (the body of ``advance``)."""
        if event.at_ms > self.now:
            self.now = event.at_ms
        try:
            match event:
                case EffectSucceeded():
                    self.on_succeeded(event)
                case EffectFailed():
                    self.on_failed(event)
                case EffectOutcomeUnknown():
                    self.on_unknown(event)
                case HumanAnswered():
                    self.on_answered(event)
                case TimerFired():
                    self.on_timer(event)
                case SignalReceived():
                    self.on_signal(event)
                case SubflowSettled():
                    self.on_subflow(event)
                case CancelRequested():
                    self.on_cancel(event)
                case _:
                    assert_never(event)
            if self.settled is None and self.queue_head < self.queue_tail:
                self.drain_queue()
        except _Exhausted as exc:
            self.exhaust(exc.limit)

    def freeze(self) -> State:
        # Fields that change on most events are always given; the others only
        # when they did change (``replace`` copies the rest in C).
        s = self.source
        changed: dict[str, Any] = {}
        if self.status is not s.status:
            changed["status"] = self.status
        if self.envs is not s.envs:
            changed["envs"] = self.envs
        if self.results is not s.results:
            changed["results"] = self.results
        if self.resolved is not s.resolved:
            changed["resolved"] = self.resolved
        if self.signals is not s.signals:
            changed["signals"] = self.signals
        if self.waiters is not s.waiters:
            changed["waiters"] = self.waiters
        if self.queue is not s.queue:
            changed["queue"] = self.queue
        if self.queue_head != s.queue_head:
            changed["queue_head"] = self.queue_head
        if self.queue_tail != s.queue_tail:
            changed["queue_tail"] = self.queue_tail
        if self.compensations is not s.compensations:
            changed["compensations"] = self.compensations
        if self.compensating is not s.compensating:
            changed["compensating"] = self.compensating
        if self.scheduled is not s.scheduled:
            changed["scheduled"] = self.scheduled
        if self.settled is not s.settled:
            changed["settled"] = self.settled
        if self.error is not s.error:
            changed["error"] = self.error
        if self.report_loaded is not s.report_loaded:
            changed["report_loaded"] = self.report_loaded
        if self.rewrites is not s.rewrites:
            changed["rewrites"] = self.rewrites
        return msgspec.structs.replace(
            s,
            now_ms=self.now,
            ledger=self.ledger,
            seq=self.seq,
            frames=self.frames,
            pending=self.pending,
            recent=self.recent,
            report=self.report,
            in_flight=self.in_flight,
            journal=Journal(tuple(self.written), self.rows, tuple(self.resolved_now))
            if self.written or self.rows or self.resolved_now
            else _NO_JOURNAL,
            **changed,
        )

    # --- helpers ------------------------------------------------------------------

    def key(self, frame_id: str, attempt: int) -> str:
        return f"{self.run_id}/{frame_id}#{attempt}"

    def resolver(
        self, env: str, attempt: int = 1, extra: dict[str, Any] | None = None
    ) -> _Resolver:
        return _Resolver(self, env, attempt, extra)

    def budget_remaining(self) -> BudgetRemaining:
        led = self.ledger
        wall = None
        if led.wall_clock_ms is not None:
            wall = max(0, self.started_ms + led.wall_clock_ms - self.now)
        return BudgetRemaining(
            steps=max(0, (led.steps or 0) - led.used_steps),
            cost_minor_units=None if led.cost is None else max(0, led.cost - led.used_cost),
            wall_clock_ms=wall,
        )

    def timer(self, key: str, until_ms: int, kind: str, frame: str) -> None:
        self.effects.append(Sleep(until_ms=until_ms, idempotency_key=key))
        self.emitted_now.add(key)
        self.pending = self.pending.set(key, Pending(kind, frame))

    def drop_key(self, key: str, how: str = "abandoned") -> None:
        """Stop waiting for ``key``; a late answer is then recorded and ignored.

        What the key waited for is remembered (``abandoned <kind> <step>``) so
        that a late answer of the wrong kind, or not among the options, is
        still rejected. An effect emitted in this very decision never reaches
        the host: it is taken back (and its step refunded).
        """
        entry = self.pending.get(key)
        if entry is None:
            return
        self.pending = self.pending.delete(key)
        step = ""
        if entry.kind == "ask":
            frame = self.frames.get(entry.frame)
            step = frame.step if isinstance(frame, StepFrame) else ""
        taken_back = key in self.emitted_now and self.take_back(key)
        self.resolve(key, "taken back" if taken_back else f"{how} {entry.kind} {step}".rstrip())
        if entry.kind in ("work", "sched-call"):
            self.in_flight -= 1
            status = "not-started" if taken_back else "uncertain"
            self.add_row(ReportRow(key, entry.seq, entry.effect, entry.target, status))
            if taken_back:
                led = self.ledger
                self.ledger = Ledger(
                    led.steps, led.cost, led.wall_clock_ms, led.used_steps - 1, led.used_cost
                )
        elif entry.kind == "signal":
            self.unwait(key)

    def resolve(self, key: str, how: str) -> None:
        self.resolved = self.resolved.set(key, how)
        self.resolved_now.append(key)

    def take_back(self, key: str) -> bool:
        for i, effect in enumerate(self.effects):
            if getattr(effect, "idempotency_key", None) == key:
                del self.effects[i]
                return True
        return False

    def unwait(self, key: str) -> None:
        for name, keys in self.waiters.items():
            if key in keys:
                rest = tuple(k for k in keys if k != key)
                self.waiters = self.waiters.set(name, rest) if rest else self.waiters.delete(name)
                return

    def step_of(self, frame: StepFrame) -> Step:
        return self.flow.by_id[frame.step]

    def child_prefix(self, frame: StepFrame) -> str:
        # Children of a retried composite get their own keys per attempt.
        if frame.attempt == 1:
            return frame.prefix
        return f"{frame.prefix}{frame.step}#{frame.attempt}/"

    def scope_of(self, env: str) -> str:
        return self.envs[env].scope

    # --- budget ---------------------------------------------------------------------

    def charge_usage(self, usage: Usage | None) -> None:
        if usage is None or (usage.steps == 0 and usage.cost_minor_units == 0):
            return
        led = self.ledger
        led = Ledger(
            led.steps,
            led.cost,
            led.wall_clock_ms,
            led.used_steps + usage.steps,
            led.used_cost + usage.cost_minor_units,
        )
        self.ledger = led
        if led.steps is not None and led.used_steps > led.steps:
            raise _Exhausted("steps")
        if led.cost is not None and led.used_cost > led.cost:
            raise _Exhausted("cost")

    def check_clock(self) -> None:
        wall = self.ledger.wall_clock_ms
        if wall is not None and self.now >= self.started_ms + wall:
            raise _Exhausted("wall-clock")

    # --- emitting work ----------------------------------------------------------------

    def emit_work(
        self,
        frame: str,
        effect: RunAgent | RunTeam | CallTool | RunSubflow,
        target: str,
        member: str = "",
        tag: str = "",
    ) -> None:
        self.seq += 1
        cap = self.flow.limits.max_concurrency
        if cap is not None and (self.in_flight >= cap or self.queue_head < self.queue_tail):
            # Held work goes first: new work queues behind it, in request order.
            held = Held(frame, effect, self.seq, target, member)
            self.queue = self.queue.set(self.queue_tail, held)
            self.queue_tail += 1
            return
        self.issue(frame, effect, member, self.seq, target, tag)

    def issue(
        self,
        frame: str,
        effect: RunAgent | RunTeam | CallTool | RunSubflow,
        member: str,
        seq: int,
        target: str,
        tag: str = "",
    ) -> None:
        # Report rows are written when work stops being pending (answered or
        # abandoned); pending work is reported from ``pending`` at settlement.
        # That keeps the big, growing report map to one update per effect.
        led = self.ledger
        if led.steps is not None and led.used_steps + 1 > led.steps:
            raise _Exhausted("steps")
        if led.cost is not None and led.used_cost >= led.cost:
            raise _Exhausted("cost")
        self.ledger = Ledger(
            led.steps, led.cost, led.wall_clock_ms, led.used_steps + 1, led.used_cost
        )
        if not tag:
            tag = _tag(effect)
            if tag == "run-agent" or tag == "run-subflow":
                effect = msgspec.structs.replace(effect, budget_remaining=self.budget_remaining())
        key = effect.idempotency_key
        self.effects.append(effect)
        self.emitted.append(key)
        self.emitted_now.add(key)
        kind = "sched-call" if self.scheduled and frame in self.scheduled else "work"
        self.pending = self.pending.set(key, Pending(kind, frame, tag, member, seq, target))
        self.in_flight += 1

    def drain_queue(self) -> None:
        cap = self.flow.limits.max_concurrency
        while self.queue_head < self.queue_tail and (cap is None or self.in_flight < cap):
            held = self.queue[self.queue_head]
            self.queue = self.queue.delete(self.queue_head)
            self.queue_head += 1
            frame = self.frames.get(held.frame)
            key = held.effect.idempotency_key
            if (frame is None and held.frame not in self.scheduled) or not self.still_wanted(
                frame, held
            ):
                self.add_row(
                    ReportRow(key, held.seq, _tag(held.effect), held.target, "not-started")
                )
                continue
            self.issue(held.frame, held.effect, held.member, held.seq, held.target)

    def still_wanted(self, frame: Any, held: Held) -> bool:
        key = held.effect.idempotency_key
        sched = self.scheduled.get(held.frame)
        if sched is not None:
            return sched.status == "called"
        if isinstance(frame, StepFrame):
            if frame.key == key:
                return True
            prog = frame.progress
            return isinstance(prog, TeamProgress) and key in prog.running
        return False

    # --- lists --------------------------------------------------------------------

    def step_list(self, owner: str, label: str) -> tuple[Step, ...]:
        if not owner:
            return self.flow.steps
        step = self.flow.by_id[owner]
        body = step.body
        if label == "comp":
            return step.compensate
        if label == "body":
            assert isinstance(body, (ForEachStep, RepeatStep))
            return body.steps
        if label == "try":
            assert isinstance(body, TryStep)
            return body.steps
        head, _, arg = label.partition(":")
        if head == "b":
            assert isinstance(body, ParallelStep)
            return body.branches[arg]
        if head == "c":
            assert isinstance(body, SwitchStep)
            return body.cases[int(arg)].steps
        if head == "k":
            assert isinstance(body, TryStep)
            return body.catch[int(arg)].steps
        raise AssertionError(f"unknown step list {owner}/{label}")

    def start_list(
        self, seq_id: str, parent: str | None, env: str, prefix: str, owner: str, label: str
    ) -> Outcome | None:
        frame = SeqFrame(id=seq_id, parent=parent, env=env, prefix=prefix, owner=owner, label=label)
        return self.run_seq(frame, self.step_list(owner, label))

    def run_seq(
        self, frame: SeqFrame, steps: tuple[Step, ...], i: int = 0, last: Any = None
    ) -> Outcome | None:
        """Run ``steps`` from ``i``; ``last`` is the output of the step before.

        The list's frame never changes once stored: which step runs is its
        child's step (``Step.index``), and the list's
        output is the output its last step hands up.
        """
        n = len(steps)
        while i < n:
            out = self.start_step(steps[i], frame.id, frame.env, frame.prefix)
            if out is None:
                if self.frames.get(frame.id) is not frame:
                    self.frames = self.frames.set(frame.id, frame)
                return None
            if not out[0]:
                self.frames = (
                    self.frames.delete(frame.id) if frame.id in self.frames else self.frames
                )
                return out
            last = out[1]
            i += 1
        if frame.id in self.frames:
            self.frames = self.frames.delete(frame.id)
        return (_OK, last)

    # --- steps ----------------------------------------------------------------------

    def start_step(self, step: Step, parent: str, env: str, prefix: str) -> Outcome | None:
        fid = prefix + step.id
        # A tool call's first attempt knows its key now: one frame, not two.
        # (Keys are spelled inline on this path, as ``key`` spells them.)
        key = f"{self.run_id}/{fid}#1" if type(step.body) is CallToolStep else None
        frame = StepFrame(id=fid, parent=parent, env=env, prefix=prefix, step=step.id, key=key)
        if step.timeout_ms is not None:
            timer = f"{self.run_id}/{fid}/timeout"
            self.timer(timer, self.now + step.timeout_ms, "timeout", fid)
            frame = msgspec.structs.replace(frame, timer=timer)
        return self.begin(frame, step)

    def begin(self, frame: StepFrame, step: Step) -> Outcome | None:
        """Start (an attempt of) ``step``; returns its outcome if it ends at once."""
        try:
            out = self.begin_body(frame, step)
        except TemplateError as exc:
            out = (_FAIL, _err("expression-error", f"step {step.id!r}: {exc}"))
        if out is None:
            return None
        if frame.id not in self.frames:
            self.frames = self.frames.set(frame.id, frame)  # it ended before it waited
        return self.finish_step(frame.id, out)

    def begin_body(self, frame: StepFrame, step: Step) -> Outcome | None:
        body = step.body
        fid = frame.id
        if isinstance(body, CallToolStep):
            key = f"{self.run_id}/{fid}#{frame.attempt}"
            if frame.key != key:
                frame = msgspec.structs.replace(frame, key=key)
            self.frames = self.frames.set(fid, frame)
            template = body.input
            value = (
                template.source
                if template.constant
                else template.evaluate(_Resolver(self, frame.env, frame.attempt, None))
            )
            effect = CallTool(tool=body.tool, input=value, idempotency_key=key)
            self.emit_work(fid, effect, body.tool, tag="call-tool")
            return None
        if isinstance(body, RunAgentStep):
            r = self.resolver(frame.env, frame.attempt)
            key = self.key(fid, frame.attempt)
            self.set_frame(frame, key=key)
            self.emit_work(
                fid,
                RunAgent(
                    agent_id=body.agent,
                    prompt=_as_text(body.prompt.evaluate(r)),
                    instructions=None
                    if body.instructions is None
                    else _as_text(body.instructions.evaluate(r)),
                    member=body.member,
                    idempotency_key=key,
                    budget_remaining=_NO_BUDGET,
                ),
                body.agent,
            )
            return None
        if isinstance(body, RunTeamStep):
            return self.begin_team(frame, body)
        if isinstance(body, RunSubflowStep):
            if self.depth + 1 > self.flow.limits.max_subflow_depth:
                return (
                    _FAIL,
                    _err(
                        "depth-exceeded",
                        f"subflow {body.flow!r} at depth {self.depth + 1} exceeds "
                        f"max_subflow_depth {self.flow.limits.max_subflow_depth}",
                    ),
                )
            r = self.resolver(frame.env, frame.attempt)
            key = self.key(fid, frame.attempt)
            self.set_frame(frame, key=key)
            self.emit_work(
                fid,
                RunSubflow(
                    flow_id=body.flow,
                    depth=self.depth + 1,
                    idempotency_key=key,
                    input=body.input.evaluate(r),
                    budget_remaining=_NO_BUDGET,
                ),
                body.flow,
            )
            return None
        if isinstance(body, AskHumanStep):
            r = self.resolver(frame.env, frame.attempt)
            key = self.key(fid, frame.attempt)
            self.set_frame(frame, key=key)
            self.effects.append(
                AskHuman(
                    question=_as_text(body.question.evaluate(r)),
                    options=body.options,
                    idempotency_key=key,
                )
            )
            self.emitted_now.add(key)
            self.pending = self.pending.set(key, Pending("ask", fid))
            if body.timeout_ms is not None:
                self.timer(f"{key}/timeout", self.now + body.timeout_ms, "ask-timeout", fid)
            return None
        if isinstance(body, SleepStep):
            if body.for_ms is not None:
                until = self.now + body.for_ms
            else:
                assert body.until is not None
                until = _instant(body.until.evaluate(self.resolver(frame.env, frame.attempt)))
            if until <= self.now:
                return (_OK, None)
            key = self.key(fid, frame.attempt)
            self.set_frame(frame, key=key)
            self.timer(key, until, "wait", fid)
            return None
        if isinstance(body, AwaitSignalStep):
            buffered = self.signals.get(body.signal)
            if buffered:
                rest = buffered[1:]
                self.signals = (
                    self.signals.set(body.signal, rest)
                    if rest
                    else self.signals.delete(body.signal)
                )
                return (_OK, buffered[0])
            key = self.key(fid, frame.attempt)
            self.set_frame(frame, key=key)
            self.effects.append(AwaitSignal(signal=body.signal, idempotency_key=key))
            self.emitted_now.add(key)
            self.pending = self.pending.set(key, Pending("signal", fid))
            self.waiters = self.waiters.set(body.signal, (*self.waiters.get(body.signal, ()), key))
            if body.timeout_ms is not None:
                self.timer(f"{key}/timeout", self.now + body.timeout_ms, "signal-timeout", fid)
            return None
        if isinstance(body, SwitchStep):
            r = self.resolver(frame.env, frame.attempt)
            for i, case in enumerate(body.cases):
                if case.cond is None or case.cond.test(r):
                    self.set_frame(frame)
                    return self.start_list(
                        f"{fid}:c{i}", fid, frame.env, self.child_prefix(frame), step.id, f"c:{i}"
                    )
            return (_OK, None)
        if isinstance(body, TryStep):
            self.set_frame(frame, progress=TryProgress())
            return self.child_outcome(
                fid,
                self.start_list(
                    f"{fid}:try", fid, frame.env, self.child_prefix(frame), step.id, "try"
                ),
            )
        if isinstance(body, ParallelStep):
            return self.begin_parallel(frame, step, body)
        if isinstance(body, ForEachStep):
            return self.begin_for_each(frame, step, body)
        if isinstance(body, RepeatStep):
            self.set_frame(frame, progress=RepeatProgress(due_ms=self.now))
            self.arm_tick(fid, body, 1, self.now)
            return None
        if isinstance(body, ScheduleStep):
            r = self.resolver(frame.env, frame.attempt)
            sid = f"{self.run_id}/{fid}#{frame.attempt}"
            self.scheduled = self.scheduled.set(
                sid,
                Sched("pending", body.tool, body.input.evaluate(r), body.outlive_run),
            )
            self.timer(f"{sid}/delay", self.now + body.delay_ms, "sched-delay", sid)
            return (_OK, sid)
        if isinstance(body, CancelScheduledStep):
            sid = body.id.evaluate(self.resolver(frame.env, frame.attempt))
            sched = self.scheduled.get(sid) if isinstance(sid, str) else None
            if sched is None or sched.status != "pending":
                return (_OK, False)
            self.scheduled = self.scheduled.set(
                sid, msgspec.structs.replace(sched, status="cancelled")
            )
            self.drop_key(f"{sid}/delay")
            return (_OK, True)
        assert_never(body)

    def set_frame(self, frame: StepFrame, **changes: Any) -> StepFrame:
        if changes:
            frame = msgspec.structs.replace(frame, **changes)
        self.frames = self.frames.set(frame.id, frame)
        return frame

    # --- finishing steps --------------------------------------------------------------

    def finish_step(
        self, fid: str, out: Outcome, frame: Frame | None = None, step: Step | None = None
    ) -> Outcome | None:
        """A step's attempt ended: retry it, or record it and hand the outcome up.

        ``frame`` is the step's frame when the caller holds it already: it
        must be the current one (no ``set_frame`` since it was read).
        """
        if frame is None:
            frame = self.frames[fid]
        assert isinstance(frame, StepFrame)
        if step is None:
            step = self.flow.by_id[frame.step]
        if not out[0] and self.should_retry(step, frame, out[1]):
            self.abandon_children(fid)
            retry = step.retry
            assert retry is not None
            delay = min(
                retry.initial_interval_ms * retry.backoff ** (frame.attempt - 1),
                retry.max_interval_ms,
            )
            key = f"{self.key(fid, frame.attempt)}/backoff"
            if retry.jitter:
                delay *= 1.0 - retry.jitter * _unit_fraction(key)
            self.set_frame(frame, key=None, backoff=key, progress=None, unknowns=0)  # fresh attempt
            self.timer(key, self.now + int(delay), "backoff", fid)
            return None
        if frame.timer is not None:
            self.drop_key(frame.timer)
        self.frames = self.frames.delete(fid)
        scope = self.envs[frame.env].scope
        if out[0]:
            record: dict[str, Any] = {"status": "succeeded", "output": out[1]}
            if isinstance(step.body, AskHumanStep):
                record["answer"] = out[1]
            if step.compensate:
                below = self.compensations
                depth = 1 + (below.depth if below is not None else 0)
                self.compensations = CompLink(step.id, frame.env, frame.prefix, depth, below)
        else:
            record = {"status": "failed", "output": None, "error": _error_dict(out[1])}
        name = scope + step.id
        if name != fid:
            # Only the children of a retried composite have a frame id other
            # than their result's name; they may write it a second time.
            self.rewrites = True
        self.record(name, record)
        return out

    def record(self, name: str, record: Any) -> None:
        self.written.append(name)
        recent = self.recent.set(name, record)
        if len(recent) >= _RECENT_BATCH:
            self.results = merge_results(recent, self.results)
            recent = _EMPTY
        self.recent = recent

    def forget(self, name: str) -> None:
        """Delete a result (its loop scope is finished with)."""
        # Written once (no ``rewrites``), a result in ``recent`` has no older
        # value in the dicts; otherwise look (about log2(n/64) dicts, each a
        # likely cache miss in a long run).
        if name in self.recent and not (self.rewrites and self.in_dicts(name)):
            self.written.append(name)
            self.recent = self.recent.delete(name)
            return
        if find_result(self.recent, self.results, name) is not None:
            self.record(name, GONE)

    def in_dicts(self, name: str) -> bool:
        """Whether an older value of ``name`` sits in the result dicts (behind ``recent``)."""
        for segment in self.results:
            if name in segment:
                return True
        return False

    def end_scope(self, scope: str, loop: Step, uncompensated: bool = False) -> None:
        """An iteration or fire ended: drop its results and variables.

        A run that loops for ever then keeps a bounded state, and a host
        restores it without reading the history. A scope that a recorded
        compensation will run in is kept; ``uncompensated`` says the caller
        knows none was recorded in it (no need to walk the stack).
        """
        link = None if uncompensated else self.compensations
        while link is not None:
            env = self.envs.get(link.env)
            if env is None or env.scope.startswith(scope):
                return
            link = link.rest
        for step_id in _scoped_ids(self.flow, loop):
            self.forget(scope + step_id)
        if scope in self.envs:
            self.envs = self.envs.delete(scope)

    def take_results(self, names: list[str]) -> list[Any]:
        """Read and delete these results (a finished for_each's outputs).

        When they are a good part of all results, the store is rebuilt as one
        dict without them: one pass, instead of a lookup and a deletion mark
        per name, each walking and merging the dicts.
        """
        size = len(self.recent) + sum(len(segment) for segment in self.results)
        if len(names) * 4 < size:
            records = [self.lookup(name) for name in names]
            for name in names:
                self.forget(name)
            return records
        merged: dict[str, Any] = {}
        for segment in reversed(self.results):
            merged.update(segment)  # newer values win
        merged.update(self.recent.items())
        # A for_each output is deleted only here, never marked GONE one by one.
        records = list(map(merged.pop, names))
        self.written.extend(names)
        self.recent = _EMPTY
        live = {name: record for name, record in merged.items() if record is not GONE}
        self.results = (live,) if live else ()
        return records

    def lookup(self, name: str) -> Any:
        record = find_result(self.recent, self.results, name)
        if record is None:
            raise KeyError(name)
        return record

    def should_retry(self, step: Step, frame: StepFrame, error: ErrorInfo) -> bool:
        retry = step.retry
        if retry is None or frame.attempt >= retry.max_attempts:
            return False
        if error.type == "outcome-unknown":
            # Re-running it under a new key could do the unsafe thing twice;
            # safe re-issues (same key) already happened. Catch it instead.
            return False
        if error.type == "timeout" and frame.timer is not None and frame.timer not in self.pending:
            return False  # the step's own deadline passed: no time left to retry in
        if retry.errors is None:
            return error.retryable
        return "*" in retry.errors or error.type in retry.errors

    def propagate(self, child: str, parent: str | None, out: Outcome, index: int = -1) -> None:
        """Hand a finished child's outcome up the tree until something waits.

        ``index``: the finished child step's index in its list, if known.
        """
        while True:
            if parent is None:
                self.root_done(child, out)
                return
            frame = self.frames.get(parent)
            if frame is None:
                return  # the parent was abandoned meanwhile
            if isinstance(frame, SeqFrame):
                if out[0]:
                    steps = self.step_list(frame.owner, frame.label)
                    if index < 0:
                        index = self.flow.by_id[child[len(frame.prefix) :]].index
                    res = self.run_seq(frame, steps, index + 1, out[1])
                else:
                    self.frames = self.frames.delete(frame.id)
                    res = out
                if res is None:
                    return
                child, parent, out, index = frame.id, frame.parent, res, -1
                continue
            res = self.child_done(frame, child, out)
            if res is None:
                return
            res = self.finish_step(frame.id, res)
            if res is None:
                return
            child, parent, out, index = frame.id, frame.parent, res, -1

    def child_outcome(self, fid: str, out: Outcome | None) -> Outcome | None:
        """A child list of ``fid`` ended at once: let ``fid`` react to it."""
        if out is None:
            return None
        frame = self.frames[fid]
        assert isinstance(frame, StepFrame)
        return self.child_done(frame, "", out, sync=True)

    def child_done(
        self, frame: StepFrame, child: str, out: Outcome, sync: bool = False
    ) -> Outcome | None:
        """A child list of a composite step ended. Returns the step's outcome, if any."""
        step = self.step_of(frame)
        body = step.body
        if isinstance(body, SwitchStep):
            return out
        if isinstance(body, TryStep):
            return self.try_child_done(frame, step, body, out)
        if isinstance(body, ParallelStep):
            name = child.rsplit(":b:", 1)[1] if child else ""
            return self.parallel_child_done(frame, body, name, out)
        if isinstance(body, ForEachStep):
            index = int(child.rsplit("[", 1)[1].rstrip("]:")) if child else -1
            return self.for_each_child_done(frame, step, body, index, out)
        if isinstance(body, RepeatStep):
            return self.repeat_child_done(frame, body, out)
        raise AssertionError(f"step {step.id} has no children")

    # --- try / catch -------------------------------------------------------------------

    def try_child_done(
        self, frame: StepFrame, step: Step, body: TryStep, out: Outcome
    ) -> Outcome | None:
        prog = frame.progress
        assert isinstance(prog, TryProgress)
        if out[0] or prog.phase == "catch":
            return out
        error: ErrorInfo = out[1]
        for i, clause in enumerate(body.catch):
            if "*" in clause.errors or error.type in clause.errors:
                env_id = f"{frame.id}!catch"
                self.envs = self.envs.set(
                    env_id,
                    Env(
                        parent=frame.env,
                        scope=self.scope_of(frame.env),
                        vars={"error": _error_dict(error)},
                    ),
                )
                self.set_frame(frame, progress=TryProgress(phase="catch"))
                res = self.start_list(
                    f"{frame.id}:k{i}",
                    frame.id,
                    env_id,
                    self.child_prefix(frame),
                    step.id,
                    f"k:{i}",
                )
                return res
        return out

    # --- parallel --------------------------------------------------------------------------

    def begin_parallel(self, frame: StepFrame, step: Step, body: ParallelStep) -> Outcome | None:
        names = tuple(body.branches)
        if not names:
            return (_OK, {})
        self.set_frame(frame, progress=ParallelProgress(waiting=names))
        return self.fill_parallel(frame.id, step, body)

    def fill_parallel(self, fid: str, step: Step, body: ParallelStep) -> Outcome | None:
        """Start waiting branches, in declared order, up to max_concurrency."""
        width = body.max_concurrency or len(body.branches)
        while True:
            frame = self.frames.get(fid)
            if not isinstance(frame, StepFrame):
                return None
            prog = frame.progress
            assert isinstance(prog, ParallelProgress)
            if not prog.waiting or len(prog.running) >= width:
                return None
            name = prog.waiting[0]
            frame = self.set_frame(
                frame,
                progress=msgspec.structs.replace(
                    prog, waiting=prog.waiting[1:], running=(*prog.running, name)
                ),
            )
            res = self.start_branch(frame, step, name)
            if res is not None:
                out = self.parallel_child_done(
                    self.frames[fid],  # type: ignore[arg-type]
                    body,
                    name,
                    res,
                    refill=False,
                )
                if out is not None:
                    return out

    def start_branch(self, frame: StepFrame, step: Step, name: str) -> Outcome | None:
        return self.start_list(
            f"{frame.id}:b:{name}",
            frame.id,
            frame.env,
            self.child_prefix(frame),
            step.id,
            f"b:{name}",
        )

    def parallel_child_done(
        self,
        frame: StepFrame,
        body: ParallelStep,
        name: str,
        out: Outcome,
        refill: bool = True,
    ) -> Outcome | None:
        prog = frame.progress
        assert isinstance(prog, ParallelProgress)
        mode = body.mode
        record: dict[str, Any] = (
            {"status": "succeeded", "output": out[1]}
            if out[0]
            else {"status": "failed", "error": _error_dict(out[1])}
        )
        outcomes = {**prog.outcomes, name: record}
        running = tuple(n for n in prog.running if n != name)
        decided: Outcome | None = None
        if mode == "race":
            decided = (_OK, {name: out[1]}) if out[0] else out
        elif mode == "any" and out[0]:
            decided = (_OK, {name: out[1]})
        elif mode == "all" and not out[0]:
            decided = out
        if decided is not None:
            for other in running:
                self.abandon_frame(f"{frame.id}:b:{other}")
            self.set_frame(frame, progress=ParallelProgress(outcomes=outcomes))
            return decided
        self.set_frame(
            frame,
            progress=ParallelProgress(waiting=prog.waiting, running=running, outcomes=outcomes),
        )
        if refill and prog.waiting:
            res = self.fill_parallel(frame.id, self.step_of(frame), body)
            if res is not None:
                return res
            current = self.frames.get(frame.id)
            if not isinstance(current, StepFrame):
                return None
            prog = current.progress
            assert isinstance(prog, ParallelProgress)
            running, outcomes = prog.running, prog.outcomes
            if prog.waiting:
                return None
        elif prog.waiting:
            return None
        if running:
            return None
        # Every branch has ended.
        if mode == "all":
            return (_OK, {n: outcomes[n]["output"] for n in body.branches})
        if mode == "all_settled":
            return (_OK, {n: outcomes[n] for n in body.branches})
        failures = "; ".join(f"{n}: {outcomes[n]['error']['type']}" for n in body.branches)
        return (_FAIL, _err("all-branches-failed", f"every branch failed ({failures})"))

    # --- for_each ------------------------------------------------------------------------------

    def begin_for_each(self, frame: StepFrame, step: Step, body: ForEachStep) -> Outcome | None:
        items = body.items.evaluate(self.resolver(frame.env, frame.attempt))
        if not isinstance(items, list):
            return (
                _FAIL,
                _err(
                    "expression-error",
                    f"for_each {step.id!r}: items is not a list: {short_json(items)}",
                ),
            )
        if not items:
            return (_OK, [])
        frame = self.set_frame(frame, progress=ForEachProgress(items=tuple(items)))
        return self.fill_for_each(frame, step, body)

    def fill_for_each(
        self,
        frame: StepFrame,
        step: Step,
        body: ForEachStep,
        prog: ForEachProgress | None = None,
    ) -> Outcome | None:
        """Start iterations while there are items and room.

        ``prog``: a progress of ``frame`` not stored yet (an iteration just
        ended); it is stored together with the next start, in one write.
        """
        width = body.max_concurrency or 1_000_000_000
        if prog is None:
            stored = frame.progress
            assert isinstance(stored, ForEachProgress)
            prog = stored
        while True:
            if prog.next >= len(prog.items) or prog.running >= width:
                if prog is not frame.progress:
                    self.set_frame(frame, progress=prog)
                return None
            i = prog.next
            frame = self.set_frame(
                frame, progress=msgspec.structs.replace(prog, next=i + 1, running=prog.running + 1)
            )
            scope = f"{self.child_prefix(frame)}{step.id}[{i}]/"
            self.envs = self.envs.set(
                scope,
                Env(parent=frame.env, scope=scope, vars={body.as_: prog.items[i], body.index: i}),
            )
            res = self.start_list(f"{frame.id}[{i}]:", frame.id, scope, scope, step.id, "body")
            if res is not None:
                out = self.for_each_child_done(frame, step, body, i, res, refill=False)
                if out is not None:
                    return out
            current = self.frames.get(frame.id)
            if not isinstance(current, StepFrame):
                return None
            frame = current
            progress = frame.progress
            assert isinstance(progress, ForEachProgress)
            prog = progress

    def for_each_child_done(
        self,
        frame: StepFrame,
        step: Step,
        body: ForEachStep,
        index: int,
        out: Outcome,
        refill: bool = True,
    ) -> Outcome | None:
        frame_now = self.frames[frame.id]
        assert isinstance(frame_now, StepFrame)
        prog = frame_now.progress
        assert isinstance(prog, ForEachProgress)
        if not out[0]:
            for j in range(prog.next):
                if j != index and f"{frame.id}[{j}]:" in self.frames:
                    self.abandon_frame(f"{frame.id}[{j}]:")
            return out
        # Each iteration's output is kept with the step results (not in the
        # progress record, which would then be copied whole on every event).
        base = f"{self.child_prefix(frame_now)}{step.id}"
        self.end_scope(f"{base}[{index}]/", step)
        self.record(f"{base}[{index}]/$output", {"output": out[1]})
        prog = msgspec.structs.replace(prog, running=prog.running - 1, done=prog.done + 1)
        if refill and prog.done < len(prog.items):
            return self.fill_for_each(frame_now, step, body, prog)  # stores prog
        frame_now = self.set_frame(frame_now, progress=prog)
        if prog.done == len(prog.items):
            names = [f"{base}[{i}]/$output" for i in range(prog.done)]
            return (_OK, [record["output"] for record in self.take_results(names)])
        return None

    # --- repeat --------------------------------------------------------------------------------

    def arm_tick(self, fid: str, body: RepeatStep, fire: int, after_ms: int) -> None:
        if body.every_ms is not None:
            due = after_ms + body.every_ms
            if due <= self.now:
                # Fires that were missed (the body overran) are skipped: the
                # next tick is the next point on the cadence after now.
                due += ((self.now - due) // body.every_ms + 1) * body.every_ms
        else:
            assert body.cron is not None
            from cronsim import CronSim

            due = _dt_to_ms(next(CronSim(body.cron, _ms_to_dt(max(after_ms, self.now)))))
        frame = self.frames[fid]
        assert isinstance(frame, StepFrame)
        prog = frame.progress
        assert isinstance(prog, RepeatProgress)
        self.set_frame(frame, progress=msgspec.structs.replace(prog, due_ms=due))
        self.timer(
            f"{self.run_id}/{self.child_prefix(frame)}{frame.step}[{fire}]/tick", due, "tick", fid
        )

    def fire_repeat(self, frame: StepFrame) -> Outcome | None:
        step = self.step_of(frame)
        body = step.body
        assert isinstance(body, RepeatStep)
        prog = frame.progress
        assert isinstance(prog, RepeatProgress)
        fire = prog.fires + 1
        marks = self.compensations.depth if self.compensations is not None else 0
        frame = self.set_frame(
            frame, progress=msgspec.structs.replace(prog, fires=fire, comp_depth=marks)
        )
        scope = f"{self.child_prefix(frame)}{step.id}[{fire}]/"
        self.envs = self.envs.set(
            scope, Env(parent=frame.env, scope=scope, vars={"fire_count": fire})
        )
        res = self.start_list(f"{frame.id}[{fire}]:", frame.id, scope, scope, step.id, "body")
        if res is None:
            return None
        return self.repeat_child_done(frame, body, res)

    def repeat_child_done(self, frame: StepFrame, body: RepeatStep, out: Outcome) -> Outcome | None:
        frame_now = self.frames[frame.id]
        assert isinstance(frame_now, StepFrame)
        prog = frame_now.progress
        assert isinstance(prog, RepeatProgress)
        if not out[0]:
            return out
        fire = prog.fires
        scope = f"{self.child_prefix(frame_now)}{frame_now.step}[{fire}]/"
        done = body.max_fires is not None and fire >= body.max_fires
        if not done and body.until is not None:
            try:
                done = body.until.test(self.resolver(scope, frame_now.attempt))
            except TemplateError as exc:
                return (_FAIL, _err("expression-error", f"repeat {frame_now.step!r} until: {exc}"))
        # The fire's loop scope is finished with: drop it so that a repeat
        # that fires for ever keeps a bounded state, unless a compensation
        # recorded during the fire will need it later.
        depth = self.compensations.depth if self.compensations is not None else 0
        if depth == prog.comp_depth:
            self.end_scope(scope, self.step_of(frame_now), uncompensated=True)
        self.set_frame(frame_now, progress=msgspec.structs.replace(prog, last=out[1]))
        if done:
            return (_OK, out[1])
        step = self.step_of(frame_now)
        assert isinstance(step.body, RepeatStep)
        self.arm_tick(frame_now.id, body, fire + 1, prog.due_ms)
        return None

    # --- teams ------------------------------------------------------------------------------

    def begin_team(self, frame: StepFrame, body: RunTeamStep) -> Outcome | None:
        team = self.flow.teams.get(body.team)
        fid = frame.id
        if team is None:
            r = self.resolver(frame.env, frame.attempt)
            key = self.key(fid, frame.attempt)
            self.set_frame(frame, key=key)
            self.emit_work(
                fid,
                RunTeam(
                    team_id=body.team, prompt=_as_text(body.prompt.evaluate(r)), idempotency_key=key
                ),
                body.team,
            )
            return None
        frame = self.set_frame(frame, progress=TeamProgress())
        if team.mode == "parallel":
            for i in range(len(team.members)):
                frame = self.emit_member(frame, body, i)
        else:
            self.emit_member(frame, body, 0)
        return None

    def member_key(self, frame: StepFrame, member: str) -> str:
        return f"{self.run_id}/{frame.id}/{member}#{frame.attempt}"

    def emit_member(self, frame: StepFrame, body: RunTeamStep, index: int) -> StepFrame:
        team = self.flow.teams[body.team]
        member = team.members[index]
        prog = frame.progress
        assert isinstance(prog, TeamProgress)
        key = self.member_key(frame, member.member)
        frame = self.set_frame(
            frame,
            progress=msgspec.structs.replace(prog, next=index + 1, running=(*prog.running, key)),
        )
        r = self.resolver(frame.env, frame.attempt, {"members": dict(prog.outputs)})
        self.emit_work(
            frame.id,
            RunAgent(
                agent_id=member.agent,
                prompt=_as_text(body.prompt.evaluate(r)),
                instructions=None
                if member.instructions is None
                else _as_text(member.instructions.evaluate(r)),
                member=member.member,
                idempotency_key=key,
                budget_remaining=_NO_BUDGET,
            ),
            member.agent,
            member.member,
        )
        return frame

    def member_done(
        self, frame: StepFrame, entry: Pending, key: str, out: Outcome
    ) -> Outcome | None:
        step = self.step_of(frame)
        body = step.body
        assert isinstance(body, RunTeamStep)
        team = self.flow.teams[body.team]
        prog = frame.progress
        assert isinstance(prog, TeamProgress)
        running = tuple(k for k in prog.running if k != key)
        if not out[0]:
            for other in running:
                self.drop_key(other)
            self.set_frame(frame, progress=msgspec.structs.replace(prog, running=()))
            return out
        outputs = {**prog.outputs, entry.member: out[1]}
        frame = self.set_frame(
            frame, progress=msgspec.structs.replace(prog, running=running, outputs=outputs)
        )
        if len(outputs) == len(team.members):
            return (_OK, {m.member: outputs[m.member] for m in team.members})
        if team.mode == "sequential" and not running:
            try:
                self.emit_member(frame, body, prog.next)
            except TemplateError as exc:
                return (_FAIL, _err("expression-error", f"team {body.team!r}: {exc}"))
        return None

    # --- abandoning ---------------------------------------------------------------------------

    def descendants(self, root: str) -> set[str]:
        """Frame ids at or under ``root``: O(active frames x depth)."""
        frames = self.frames
        out = {root} if root in frames else set()
        for fid, frame in frames.items():
            parent = frame.parent
            while parent is not None:
                if parent == root or parent in out:
                    out.add(fid)
                    break
                above = frames.get(parent)
                parent = above.parent if above is not None else None
        return out

    def abandon_frame(self, root: str) -> None:
        self.abandon(self.descendants(root))

    def abandon_children(self, fid: str) -> None:
        """Stop everything ``fid`` waits for, but its own timeout, and drop its children."""
        gone = self.descendants(fid)
        frame = self.frames.get(fid)
        own_timer = frame.timer if isinstance(frame, StepFrame) else None
        for key, entry in list(self.pending.items()):
            if entry.frame in gone and key != own_timer:
                self.drop_key(key)
        gone.discard(fid)
        frames = self.frames
        for child in gone:
            frames = frames.delete(child)
        self.frames = frames

    def abandon_all(self) -> None:
        """The run is ending: stop waiting for anything but scheduled calls and the deadline."""
        for key, entry in list(self.pending.items()):
            if entry.kind not in ("sched-delay", "sched-call", "deadline"):
                self.drop_key(key)
        self.frames = _EMPTY

    def abandon(self, gone: set[str]) -> None:
        if not gone:
            return
        for key, entry in list(self.pending.items()):
            if entry.frame in gone:
                self.drop_key(key)
        frames = self.frames
        for fid in gone:
            if fid in frames:
                frames = frames.delete(fid)
        self.frames = frames

    # --- events ---------------------------------------------------------------------------------

    def take(
        self, key: str, event_kind: str, accepts: tuple[str, ...], answer: Any = _NO_ANSWER
    ) -> Pending | None:
        """The pending entry an event answers, or None for an accepted late answer.

        The caller checks the wall clock once the answer has been recorded.
        """
        entry = self.pending.get(key)
        if entry is None:
            how = self.resolved.get(key)
            if how is not None and how.startswith("abandoned"):
                _, kind, *step = how.split(" ")
                if kind not in accepts:
                    raise EventRejected(
                        f"{event_kind} cannot answer {_describe_pending(Pending(kind, ''))} {key}",
                        key,
                    )
                if answer is not _NO_ANSWER and step:
                    self.check_answer(key, step[0], answer)
                self.resolve(key, "late")
                return None
            if how is not None:
                raise EventRejected(f"duplicate {event_kind}: {key} is already {how}", key)
            # Answered work keys are not remembered one by one (that would
            # cost a second map update per event): unknown and duplicate
            # read the same here.
            raise EventRejected(
                f"{event_kind} for {key}: no such effect is pending "
                "(an unknown key, or one already answered)",
                key,
            )
        if entry.kind not in accepts:
            raise EventRejected(f"{event_kind} cannot answer {_describe_pending(entry)} {key}", key)
        return entry

    def check_answer(self, key: str, step_id: str, answer: Any) -> None:
        body = self.flow.by_id[step_id].body
        assert isinstance(body, AskHumanStep)
        if body.options is not None and (not isinstance(answer, str) or answer not in body.options):
            raise EventRejected(
                f"answer {short(answer)} is not one of {list(body.options)} for {key}", key
            )

    def add_row(self, row: ReportRow) -> None:
        self.report = add_report_row(self.report, row)
        self.rows += 1

    def late_work(self, key: str, entry_status: str) -> None:
        """A late answer for abandoned work: the report shows how it really ended."""
        found = next((row for row in iter_report(self.report) if row.key == key), None)
        if found is None and not self.report_loaded:
            raise ReportNeeded(f"a late answer for {key} needs the report rows")
        if found is not None:
            self.add_row(msgspec.structs.replace(found, status=entry_status))

    def resolve_work(self, key: str, entry: Pending, status: str) -> None:
        self.pending = self.pending.delete(key)
        self.in_flight -= 1
        self.add_row(ReportRow(key, entry.seq, entry.effect, entry.target, status))

    def on_succeeded(self, ev: EffectSucceeded) -> None:
        key = ev.idempotency_key
        entry = self.pending.get(key)
        if entry is not None and entry.kind == "work" and entry.effect != "run-subflow":
            # The common case: pending work answered. resolve_work and
            # check_clock, inline: their calls cost about 4% of a replay.
            self.pending = self.pending.delete(key)
            self.in_flight -= 1
            self.report = add_report_row(
                self.report, ReportRow(key, entry.seq, entry.effect, entry.target, "succeeded")
            )
            self.rows += 1
            if ev.usage is not None:
                self.charge_usage(ev.usage)
            wall = self.ledger.wall_clock_ms
            if wall is not None and self.now >= self.started_ms + wall:
                raise _Exhausted("wall-clock")
            self.work_done(key, entry, (_OK, ev.output))
            return
        entry = self.take(key, "effect-succeeded", ("work", "sched-call"))
        if entry is None:
            self.late_work(key, "succeeded")
            self.charge_usage(ev.usage)
            return
        if entry.effect == "run-subflow":
            raise EventRejected(
                f"a subflow answers with subflow-settled, not effect-succeeded: {key}", key
            )
        self.resolve_work(key, entry, "succeeded")
        self.charge_usage(ev.usage)
        self.check_clock()
        self.work_done(key, entry, (_OK, ev.output))

    def on_failed(self, ev: EffectFailed) -> None:
        key = ev.idempotency_key
        entry = self.take(key, "effect-failed", ("work", "sched-call"))
        if entry is None:
            self.late_work(key, "failed")
            return
        self.resolve_work(key, entry, "failed")
        self.check_clock()
        self.work_done(key, entry, (_FAIL, ev.error))

    def on_unknown(self, ev: EffectOutcomeUnknown) -> None:
        key = ev.idempotency_key
        entry = self.take(key, "effect-outcome-unknown", ("work", "sched-call"))
        if entry is None:
            return
        self.check_clock()
        if entry.kind == "sched-call":
            self.resolve_work(key, entry, "uncertain")
            self.work_done(key, entry, (_FAIL, _err("outcome-unknown", key)))
            return
        frame = self.frames[entry.frame]
        assert isinstance(frame, StepFrame)
        step = self.step_of(frame)
        if self.may_reissue(step, entry, frame):
            # Same key: the tool can deduplicate. Counts as an issue of the step.
            # The row stands in the report should the re-issue exhaust the budget.
            self.add_row(ReportRow(key, entry.seq, entry.effect, entry.target, "uncertain"))
            self.pending = self.pending.delete(key)
            self.in_flight -= 1
            self.set_frame(frame, unknowns=frame.unknowns + 1)
            effect = self.rebuild(frame, step, key, entry)
            self.issue(entry.frame, effect, entry.member, entry.seq, entry.target)
            return
        self.resolve_work(key, entry, "uncertain")
        why = (
            f"was issued {frame.attempt + frame.unknowns} times without an answer"
            if self.may_reissue_class(step)
            else "is not safe to repeat"
        )
        error = _err(
            "outcome-unknown", f"{entry.effect} {key} may or may not have happened and {why}"
        )
        self.work_done(key, entry, (_FAIL, error))

    def may_reissue_class(self, step: Step) -> bool:
        body = step.body
        if isinstance(body, CallToolStep):
            decl = self.flow.tools.get(body.tool)
            return decl is not None and decl.exec_class in ("readonly", "idempotent")
        return isinstance(body, RunSubflowStep)  # the key names the child run

    def may_reissue(self, step: Step, entry: Pending, frame: StepFrame) -> bool:
        if entry.member or not self.may_reissue_class(step):
            return False
        limit = step.retry.max_attempts if step.retry else DEFAULT_UNKNOWN_REISSUES
        return frame.attempt + frame.unknowns < limit

    def rebuild(self, frame: StepFrame, step: Step, key: str, entry: Pending) -> Any:
        """The effect behind ``key``, exactly as first emitted (inputs re-derived)."""
        body = step.body
        r = self.resolver(frame.env, frame.attempt)
        if isinstance(body, CallToolStep):
            return CallTool(tool=body.tool, input=body.input.evaluate(r), idempotency_key=key)
        assert isinstance(body, RunSubflowStep)
        return RunSubflow(
            flow_id=body.flow,
            depth=self.depth + 1,
            idempotency_key=key,
            input=body.input.evaluate(r),
            budget_remaining=_NO_BUDGET,
        )

    def work_done(self, key: str, entry: Pending, out: Outcome) -> None:
        if entry.kind == "sched-call":
            sched = self.scheduled[entry.frame]
            status = (
                "succeeded"
                if out[0]
                else ("uncertain" if out[1].type == "outcome-unknown" else "failed")
            )
            self.scheduled = self.scheduled.set(
                entry.frame, msgspec.structs.replace(sched, status=status)
            )
            self.maybe_finish_draining()
            return
        frame = self.frames[entry.frame]
        assert isinstance(frame, StepFrame)
        if not entry.member:
            self.step_ended(frame.id, out, frame)
            return
        res = self.member_done(frame, entry, key, out)
        if res is not None:
            self.step_ended(frame.id, res)  # re-read: member_done updated the frame

    def step_ended(self, fid: str, out: Outcome, frame: Frame | None = None) -> None:
        """``frame``: the current frame of ``fid``, when the caller holds it."""
        if frame is None:
            frame = self.frames[fid]
        assert isinstance(frame, StepFrame)
        step = self.flow.by_id[frame.step]
        res = self.finish_step(fid, out, frame, step)
        if res is not None:
            self.propagate(fid, frame.parent, res, step.index)

    def on_answered(self, ev: HumanAnswered) -> None:
        key = ev.idempotency_key
        entry = self.take(key, "human-answered", ("ask",), ev.answer)
        if entry is None:
            return
        frame = self.frames[entry.frame]
        assert isinstance(frame, StepFrame)
        body = self.step_of(frame).body
        assert isinstance(body, AskHumanStep)
        self.check_answer(key, frame.step, ev.answer)
        self.check_clock()
        self.pending = self.pending.delete(key)
        # Answered, signalled and fired keys are not remembered: a repeat is
        # rejected as "no such effect is pending". Only keys whose late answer
        # must still be accepted (abandoned) are kept, so the state does not
        # grow with every timer of a long-running run.
        if body.timeout_ms is not None:
            self.drop_key(f"{key}/timeout")
        self.set_frame(frame, key=None)
        self.step_ended(frame.id, (_OK, ev.answer))

    def on_signal(self, ev: SignalReceived) -> None:
        self.check_clock()
        keys = self.waiters.get(ev.signal)
        if not keys:
            limit = self.flow.limits.max_buffered_signals
            total = sum(len(v) for v in self.signals.values())
            if total >= limit:
                raise EventRejected(
                    f"signal {short(ev.signal)} rejected: {total} signals already buffered "
                    f"(limit {limit})"
                )
            self.signals = self.signals.set(
                ev.signal, (*self.signals.get(ev.signal, ()), ev.payload)
            )
            return
        key = keys[0]
        entry = self.pending[key]
        self.pending = self.pending.delete(key)
        self.waiters = (
            self.waiters.set(ev.signal, keys[1:])
            if len(keys) > 1
            else self.waiters.delete(ev.signal)
        )
        frame = self.frames[entry.frame]
        assert isinstance(frame, StepFrame)
        body = self.step_of(frame).body
        assert isinstance(body, AwaitSignalStep)
        if body.timeout_ms is not None:
            self.drop_key(f"{key}/timeout")
        self.set_frame(frame, key=None)
        self.step_ended(frame.id, (_OK, ev.payload))

    def on_timer(self, ev: TimerFired) -> None:
        key = ev.idempotency_key
        entry = self.take(
            key,
            "timer-fired",
            (
                "wait",
                "timeout",
                "backoff",
                "deadline",
                "tick",
                "ask-timeout",
                "signal-timeout",
                "sched-delay",
            ),
        )
        if entry is None:
            return
        self.check_clock()
        self.pending = self.pending.delete(key)
        kind = entry.kind
        if kind == "deadline":
            raise _Exhausted("wall-clock")
        if kind == "sched-delay":
            self.fire_scheduled(entry.frame)
            return
        frame = self.frames[entry.frame]
        assert isinstance(frame, StepFrame)
        if kind == "wait":
            self.set_frame(frame, key=None)
            self.step_ended(frame.id, (_OK, None))
        elif kind == "timeout":
            self.abandon_children(frame.id)
            step = self.step_of(frame)
            error = _err("timeout", f"step {step.id!r} timed out after {step.timeout_ms} ms")
            self.step_ended(frame.id, (_FAIL, error))
        elif kind == "backoff":
            step = self.step_of(frame)
            frame = self.set_frame(frame, attempt=frame.attempt + 1, backoff=None)
            out = self.begin(frame, step)
            if out is not None:
                self.propagate(frame.id, frame.parent, out)
        elif kind == "tick":
            out = self.fire_repeat(frame)
            if out is not None:
                self.step_ended(frame.id, out)
        elif kind == "ask-timeout":
            body = self.step_of(frame).body
            assert isinstance(body, AskHumanStep) and frame.key is not None
            self.drop_key(frame.key)
            self.set_frame(frame, key=None)
            if body.default is not None:
                self.step_ended(frame.id, (_OK, body.default))
            else:
                error = _err("timeout", f"no answer to {frame.key} within {body.timeout_ms} ms")
                self.step_ended(frame.id, (_FAIL, error))
        elif kind == "signal-timeout":
            body = self.step_of(frame).body
            assert isinstance(body, AwaitSignalStep) and frame.key is not None
            self.drop_key(frame.key)
            self.set_frame(frame, key=None)
            error = _err(
                "timeout", f"signal {body.signal!r} not received within {body.timeout_ms} ms"
            )
            self.step_ended(frame.id, (_FAIL, error))
        else:
            raise AssertionError(kind)

    def fire_scheduled(self, sid: str) -> None:
        """A scheduled call's delay is over: issue it like any work (budget, limits)."""
        sched = self.scheduled[sid]
        self.scheduled = self.scheduled.set(sid, msgspec.structs.replace(sched, status="called"))
        effect = CallTool(tool=sched.tool, input=sched.input, idempotency_key=f"{sid}/call")
        self.emit_work(sid, effect, sched.tool)

    def on_subflow(self, ev: SubflowSettled) -> None:
        key = ev.idempotency_key
        entry = self.take(key, "subflow-settled", ("work",))
        if entry is None:
            self.late_work(key, "succeeded" if ev.status == "completed" else "failed")
            self.charge_usage(ev.usage)
            return
        if entry.effect != "run-subflow":
            raise EventRejected(f"subflow-settled cannot answer {entry.effect} {key}", key)
        ok = ev.status == "completed"
        self.resolve_work(key, entry, "succeeded" if ok else "failed")
        self.charge_usage(ev.usage)
        self.check_clock()
        if ok:
            self.work_done(key, entry, (_OK, ev.output))
        else:
            error = _err(f"subflow-{ev.status}", f"subflow {key} settled {ev.status}")
            self.work_done(key, entry, (_FAIL, error))

    def on_cancel(self, ev: CancelRequested) -> None:
        if self.compensating is not None and not self.frames:
            # Only outliving scheduled calls are left: cancel them and settle.
            self.check_clock()
            for sid, sched in list(self.scheduled.items()):
                if sched.status == "pending":
                    self.scheduled = self.scheduled.set(
                        sid, msgspec.structs.replace(sched, status="cancelled")
                    )
                    self.drop_key(f"{sid}/delay")
            error = _err("cancelled", ev.reason or "cancel requested")
            self.settle("cancelled", None, error, None)
            return
        if self.compensating is not None:
            raise EventRejected("the run is already compensating; it settles when they finish")
        self.check_clock()
        error = _err("cancelled", ev.reason or "cancel requested")
        self.abandon_all()
        self.cancel_scheduled_calls(everything=True)
        self.wind_down(Ending("cancelled", None, error))

    # --- the end ---------------------------------------------------------------------------------

    def root_done(self, child: str, out: Outcome) -> None:
        if child.startswith("!comp"):
            self.next_compensation()
            return
        if not out[0]:
            self.abandon_all()
            self.wind_down(Ending("failed", None, out[1]))
            return
        output = None
        if self.flow.output is not None:
            try:
                output = self.flow.output.evaluate(self.resolver(""))
            except TemplateError as exc:
                self.wind_down(Ending("failed", None, _err("expression-error", f"output: {exc}")))
                return
            # A parent receives the output in a subflow-settled event, which
            # has the size limit of every event: a larger output fails here,
            # where the flow author can see why, not in the parent.
            size = json_size(output)
            if size > MAX_EVENT_BYTES:
                error = _err(
                    "output-too-large",
                    f"output: {size:,} bytes as JSON, over the limit of {MAX_EVENT_BYTES:,}",
                )
                self.wind_down(Ending("failed", None, error))
                return
        self.wind_down(Ending("completed", output, None))

    def wind_down(self, ending: Ending) -> None:
        """Run compensations (on failure or cancel), wait for outliving calls, settle."""
        self.compensating = ending
        if ending.status in ("failed", "cancelled") and self.compensations is not None:
            self.next_compensation()
            return
        self.cancel_scheduled_calls()
        self.maybe_finish_draining()

    def next_compensation(self) -> None:
        while self.compensations is not None:
            link = self.compensations
            self.compensations = link.rest
            out = self.start_list(
                f"!comp:{link.prefix}{link.step}", None, link.env, link.prefix, link.step, "comp"
            )
            if out is None:
                return
        self.cancel_scheduled_calls()
        self.maybe_finish_draining()

    def cancel_scheduled_calls(self, everything: bool = False) -> None:
        """Cancel scheduled calls not yet due (``everything``: outliving ones too)."""
        for sid, sched in list(self.scheduled.items()):
            if sched.status == "pending" and (everything or not sched.outlive):
                self.scheduled = self.scheduled.set(
                    sid, msgspec.structs.replace(sched, status="cancelled")
                )
                self.drop_key(f"{sid}/delay")

    def maybe_finish_draining(self) -> None:
        ending = self.compensating
        if ending is None or self.frames:
            return
        for sched in self.scheduled.values():
            if ending.status == "cancelled":
                break  # a cancelled run waits for nothing
            if sched.outlive and sched.status in ("pending", "called"):
                return  # an outliving scheduled call is still due
        self.settle(ending.status, ending.output, ending.error, None)

    def settle(
        self, status: str, output: Any, error: ErrorInfo | None, exhausted: str | None
    ) -> None:
        if not self.report_loaded:
            raise ReportNeeded("settling the run needs the report rows")
        # A work key keeps its seq for life (a re-issue or a late answer
        # rewrites its row), so a stable sort by seq puts each key's rows
        # together, oldest first, and the last of them is how it ended.
        rows = oldest_first(self.report)
        fresh: dict[str, ReportRow] = {}  # rows settling writes: what was still open
        for key, entry in self.pending.items():
            if entry.kind in ("work", "sched-call"):
                fresh[key] = ReportRow(key, entry.seq, entry.effect, entry.target, "uncertain")
        for i in range(self.queue_head, self.queue_tail):
            held = self.queue[i]
            key = held.effect.idempotency_key
            fresh[key] = ReportRow(key, held.seq, _tag(held.effect), held.target, "not-started")
        # Work emitted in this very decision never reaches the host.
        emitted = set(self.emitted)
        if emitted:
            last: dict[str, ReportRow] = {row.key: row for row in rows if row.key in emitted}
            last.update(fresh)
            for key in emitted:
                row = last.get(key)
                if row is not None and row.status == "uncertain":
                    fresh[key] = msgspec.structs.replace(row, status="not-started")
        rows.extend(fresh.values())
        rows.sort(key=_BY_SEQ)
        entries: list[ReportEntry] = []
        n = len(rows)
        for i, r in enumerate(rows):
            if i + 1 < n and rows[i + 1].key == r.key:
                continue  # a later row of the same key wins
            entries.append(
                ReportEntry(
                    idempotency_key=r.key,
                    effect=r.effect,  # type: ignore[arg-type]
                    target=r.target,
                    status=r.status,  # type: ignore[arg-type]
                )
            )
        settled = Settled(
            status=status,  # type: ignore[arg-type]
            output=output,
            error=error,
            exhausted=exhausted,  # type: ignore[arg-type]
            report=tuple(entries),
        )
        self.status = settled.status
        self.settled = settled
        self.error = error
        self.compensating = None
        for row in sorted(fresh.values(), key=_BY_SEQ):
            self.add_row(row)  # the rows already in the report stand as they are
        self.pending = _EMPTY  # after settlement every event is rejected anyway
        self.in_flight = 0
        self.frames = _EMPTY
        self.queue = _EMPTY
        self.queue_head = self.queue_tail
        self.effects = [settled]

    def exhaust(self, limit: str) -> None:
        self.abandon_all()
        message = {
            "steps": "step budget exhausted",
            "cost": "cost budget exhausted",
            "wall-clock": "wall-clock budget exhausted",
        }[limit]
        self.settle("budget-exhausted", None, _err("budget-exhausted", message), limit)


_NO_BUDGET = BudgetRemaining(steps=0)


def _tag(effect: Effect) -> str:
    tag = effect.__struct_config__.tag
    assert isinstance(tag, str)
    return tag


def _as_text(value: Any) -> str:
    # Same text as interpolation gives (_expr._text): compact, keys sorted.
    if isinstance(value, str):
        return value
    return msgspec.json.encode(value, order="sorted").decode()


def _instant(value: Any) -> int:
    if isinstance(value, bool):
        raise TemplateError(
            f"sleep until: expected epoch milliseconds or ISO 8601, got {short(value)}"
        )
    if isinstance(value, (int, float)):
        return int(value)
    if isinstance(value, str):
        try:
            moment = _dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise TemplateError(f"sleep until: {short(value)} is not an ISO 8601 instant") from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=_dt.UTC)
        return _dt_to_ms(moment)
    raise TemplateError(f"sleep until: expected epoch milliseconds or ISO 8601, got {short(value)}")


def _describe_pending(entry: Pending) -> str:
    """What a pending entry waits for, in wire words."""
    return {
        "work": entry.effect,
        "sched-call": "scheduled call-tool",
        "ask": "ask-human",
        "signal": "await-signal",
        "wait": "sleep",
    }.get(entry.kind, f"{entry.kind} timer")


def _settled_reject(state: State, key: str | None) -> NoReturn:
    assert state.settled is not None
    raise EventRejected(
        f"run {state.run_id} has already settled ({state.settled.status}); no event applies",
        key,
    )


def _tighter(own: int | None, given: int | None) -> int | None:
    if own is None:
        return given
    return own if given is None else min(own, given)


# --- the public entry points -------------------------------------------------------------


def start(
    flow: Flow,
    input: Any = None,
    run_id: str = "run",
    now_ms: int = 0,
    budget: Budget | BudgetRemaining | None = None,
    depth: int = 0,
) -> Decision:
    """Begin a run of ``flow``. Raises ``InputError`` if the input fails the schema.

    ``budget`` caps the run below the spec's own budget: a child run gets the
    parent's remaining budget from its ``run-subflow`` effect.
    """
    if not isinstance(run_id, str) or not run_id:
        raise ValueError("run_id must be a non-empty string")
    if isinstance(now_ms, bool) or not isinstance(now_ms, int) or now_ms < 0:
        raise ValueError(f"now_ms must be a non-negative integer, got {now_ms!r}")
    try:
        check_data(input, "$", "input")
    except DataError as exc:
        raise InputError(flow.id, [str(exc)]) from None
    size = json_size(input)
    if size > MAX_EVENT_BYTES:
        raise InputError(
            flow.id, [f"the input is {size:,} bytes as JSON, over {MAX_EVENT_BYTES:,}"]
        )
    if flow.input_schema is not None:
        from ._validate import input_problems

        problems = input_problems(flow.input_schema, input)
        if problems:
            raise InputError(flow.id, problems)
    steps: int | None = flow.budget.steps
    cost: int | None = flow.budget.cost_minor_units
    wall: int | None = flow.budget.wall_clock_ms
    if budget is not None:
        steps = _tighter(steps, budget.steps)
        cost = _tighter(cost, budget.cost_minor_units)
        wall = _tighter(wall, budget.wall_clock_ms)
    if steps is None:
        steps = DEFAULT_STEP_BUDGET
    root_env = Env(parent=None, scope="")
    state = State(
        flow=flow,
        run_id=run_id,
        depth=depth,
        input=input,
        status="running",
        started_ms=now_ms,
        now_ms=now_ms,
        ledger=Ledger(steps, cost, wall),
        seq=0,
        frames=_EMPTY,
        envs=immutables.Map({"": root_env}),
        pending=_EMPTY,
        results=(),
        recent=_EMPTY,
        report=None,
        resolved=_EMPTY,
        signals=_EMPTY,
        waiters=_EMPTY,
        queue=_EMPTY,
        queue_head=0,
        queue_tail=0,
        in_flight=0,
        compensations=None,
        compensating=None,
        scheduled=_EMPTY,
        settled=None,
        error=None,
    )
    t = _Txn(state)
    try:
        if depth > flow.limits.max_subflow_depth:
            error = _err(
                "depth-exceeded",
                f"run at depth {depth} exceeds max_subflow_depth {flow.limits.max_subflow_depth}",
            )
            t.settle("failed", None, error, None)
        else:
            if wall is not None:
                t.timer(f"{run_id}/$deadline", now_ms + wall, "deadline", "")
            out = t.start_list("", None, "", "", "", "")
            if out is not None:
                t.root_done("", out)
            t.drain_queue()
    except _Exhausted as exc:
        t.exhaust(exc.limit)
    return Decision(t.freeze(), tuple(t.effects))


def _checked(event: object) -> None:
    try:
        check_event(event)
    except DataError as exc:
        key = getattr(event, "idempotency_key", None)
        if not isinstance(key, str) or len(key) > MAX_NAME_CHARS or not text_ok(key):
            key = None  # the key itself may be what is wrong
        raise EventRejected(str(exc), key) from None


def advance(state: State, event: Event) -> Decision:
    """Apply one reported event. Raises ``EventRejected`` (state untouched) if it cannot apply.

    An event that is not well-formed flowcore data (``check_event``) is
    rejected too, before it can reach the state: every state ``advance``
    returns can be encoded.
    """
    _checked(event)
    if state.settled is not None:
        _settled_reject(state, getattr(event, "idempotency_key", None))
    t = _Txn(state)
    t.apply(event)
    return Decision(t.freeze(), tuple(t.effects))


# --- folding in place (replay) ----------------------------------------------------------


class Fold:
    """Events applied one after another to one scratch state, for replay.

    ``advance`` copies the state into a ``_Txn`` and freezes a new ``State``
    for every event; a replay only needs the effects of each event and the
    state at the end. ``answered`` applies the commonest event, pending work
    answered with success, to the same scratch copy and returns the effects
    ``advance`` would have returned; ``state`` freezes the result (the same
    ``State``, journal included, that ``advance`` would have returned for the
    last event). Any other event goes through ``state`` and ``advance``.
    """

    __slots__ = ("t",)

    def __init__(self, state: State) -> None:
        self.t = _Txn(state)

    def answered(self, event: EffectSucceeded) -> list[Effect] | None:
        """The effects of ``event``, applied in place; None (nothing touched) if not this case.

        The case: the run is not settled and ``event`` answers pending work
        other than a subflow, without usage. ``advance`` cannot reject it.
        """
        t = self.t
        if t.settled is not None or event.usage is not None:
            return None
        _checked(event)
        entry = t.pending.get(event.idempotency_key)
        if entry is None or entry.kind != "work" or entry.effect == "run-subflow":
            return None
        t.next_decision()
        t.apply(event)
        return t.effects

    def state(self) -> State:
        return self.t.freeze()
