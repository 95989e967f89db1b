"""One transition's scratch space, and the life of lists and steps.

A ``Txn`` starts from a ``State``, holds references to its records (see
``_state``) and replaces a record whenever it changes one; ``freeze`` builds
the next ``State`` from them. The input state is never touched: a rejected
event drops the scratch copy.

The methods here are the small interface every construct is written against:

- reading: ``step_of``, ``resolver``, ``scope_of``, ``duration``;
- waiting: ``wait_for``, ``timer``, ``drop_key``, ``stop_waiting``;
- work: ``emit_work`` (budget, ``max_concurrency``), ``add_row``;
- frames: ``set_frame``, ``start_list``, ``finish_step``, ``step_ended``,
  ``abandon_frame``, ``abandon_children``;
- results: ``record``, ``end_scope``, ``take_results``.

Lists and steps live here too, because every construct shares them: a list
runs its steps one after another; a step begins (its construct's ``begin``),
may wait, and finishes with an ``Outcome`` that is retried, recorded, and
handed up the tree (``propagate``) until some frame starts new work or the
root list ends (``_ending.root_done``). The constructs and the ending are the
layers above this one: a transaction reaches them through ``Above``, which
``_interp`` wires in.

This module must never do I/O, read a clock or draw a random number.
"""

from __future__ import annotations

import operator
from typing import Any, Protocol, TypeVar

import immutables
import msgspec

from . import _keys as keys
from ._data import short_json
from ._expr import TemplateError
from ._outcome import (
    FAIL,
    NO_USAGE,
    OK,
    Exhausted,
    InvalidDuration,
    Outcome,
    effect_tag,
    err,
    error_dict,
    matches,
    unit_fraction,
)
from ._results import ResultStore
from ._spec import AskHumanStep, Budget, Duration, Flow, Step
from ._state import (
    Closing,
    CompLink,
    Env,
    Frame,
    Held,
    How,
    Journal,
    Ledger,
    ListKind,
    Pending,
    PendingKind,
    ReportLink,
    ReportRow,
    Resolution,
    Run,
    Sched,
    SchedStatus,
    ScheduledAnswer,
    SeqFrame,
    State,
    StepFrame,
    TeamProgress,
    Tree,
    Waiting,
    add_report_row,
    parent_close,
)
from ._time import DurationError, parse_duration
from ._wire import (
    BudgetRemaining,
    CallTool,
    CancellationType,
    Effect,
    ErrorInfo,
    RunAgent,
    RunSubflow,
    RunTeam,
    Settled,
    SignalRun,
    Sleep,
    Usage,
)

__all__ = ["RECORDS", "Above", "Resolver", "Txn"]

_EMPTY: immutables.Map[Any, Any] = immutables.Map()
_NO_JOURNAL = Journal()
_replace = msgspec.structs.replace
E = TypeVar("E", bound=RunAgent | RunTeam | CallTool)


class Above(Protocol):
    """What a transaction calls in the layers above it: what each construct does
    (``constructs``) and how the run ends (``_ending``). ``_interp`` wires them in,
    so this module knows neither."""

    def begin(self, t: Txn, frame: StepFrame, step: Step) -> Outcome | None: ...

    def child_done(
        self, t: Txn, frame: StepFrame, child: SeqFrame | None, out: Outcome
    ) -> Outcome | None: ...

    def steps_of(self, owner: Step, frame: SeqFrame) -> tuple[Step, ...]: ...

    def root_done(self, t: Txn, child: Frame | None, out: Outcome) -> None: ...

    def maybe_finish(self, t: Txn) -> None: ...


RECORDS = tuple(name for name in State.__struct_fields__ if name not in ("flow", "run", "journal"))
"""The fields of ``State`` a transaction replaces (``flow`` and ``run`` never change)."""
WORKING = ("frames", "envs", "pending", "in_flight", "seq")
"""What changes on most events (the tree's maps, what is waited for and in flight):
worked on apart from the records ``tree`` and ``waiting``, which ``freeze`` rebuilds."""
SCRATCH = (
    "effects",
    "emitted_now",
    "emitted",
    "written",
    "resolved_now",
    "rows",
    "sched_changed",
    "answer",
    "cancelling_now",
)
"""What one decision collects: its effects and its journal."""
_SAVED = ("now_ms", *SCRATCH)
_get_saved = operator.attrgetter(*_SAVED)


class Txn:
    """Scratch space for one transition. See the module docstring."""

    __slots__ = (
        "above",
        "answer",
        "cancelling_now",
        "effects",
        "emitted",
        "emitted_now",
        "envs",
        "flow",
        "frames",
        "idle",
        "in_flight",
        "key_run",
        "ledger",
        "metadata",
        "now_ms",
        "pending",
        "report",
        "report_complete",
        "resolved_now",
        "results",
        "rows",
        "run",
        "run_id",
        "sched_changed",
        "scheduled_added",
        "schedules",
        "semantics",
        "seq",
        "settled",
        "signal_taker",
        "source",
        "starting",
        "tree",
        "waiting",
        "written",
    )

    def __init__(self, s: State, above: Above) -> None:
        self.above = above
        self.source = s
        self.flow: Flow = s.flow
        self.run: Run = s.run
        self.run_id = s.run.run_id
        self.key_run = keys.incarnation_base(
            s.run.run_id, s.tree.incarnation
        )  # what keys begin with
        self.semantics = s.run.semantics
        self.now_ms = s.now_ms
        self.ledger: Ledger = s.ledger
        self.tree: Tree = s.tree  # its frames and envs are worked on below, in place of it
        self.frames: immutables.Map[str, Frame] = s.tree.frames
        self.envs: immutables.Map[str, Env] = s.tree.envs
        self.waiting: Waiting = s.waiting  # its counters and pending map are worked on below
        self.pending: immutables.Map[str, Pending] = s.waiting.pending
        self.in_flight = s.waiting.in_flight
        self.seq = s.waiting.seq
        self.results: ResultStore = s.results
        self.report: ReportLink | None = s.report
        self.report_complete = s.report_complete
        self.schedules: immutables.Map[str, Sched] = s.schedules
        self.scheduled_added = s.scheduled_added
        self.metadata: dict[str, Any] | None = s.metadata
        self.settled: Settled | None = s.settled
        self.effects: list[Effect] = []
        self.emitted_now: set[str] = set()  # keys of every effect emitted in this decision
        self.emitted: list[str] = []  # work keys emitted in this decision
        self.written: list[str] = []  # result names written: the journal
        self.resolved_now: list[str] = []  # resolved keys written: the journal
        self.rows = 0  # report rows added: the journal
        self.sched_changed: list[str] = []  # schedule ids changed: the journal
        self.signal_taker: str | None = None  # the wait a signal of this decision went to
        self.answer: ScheduledAnswer | None = None  # to a scheduled-call event from outside
        self.cancelling_now: list[
            str
        ] = []  # work keys the host must cancel and report: the journal
        # In ``start``: the signals buffered when the flow's steps began (an
        # incarnation's carried ones); None in ``advance``.
        self.starting: int | None = None
        # In ``start``: the incarnations in a row before this one that continued
        # without waiting for anything (``ContinueAsNew.idle_incarnations``).
        self.idle = 0

    def checkpoint(self) -> tuple[Any, ...]:
        """What a rejected event must leave as it was (``rollback`` returns to it).

        A transition checks everything before it writes anything
        (``_transitions``), so a rejection changes no record: only the clock,
        which ``_transitions.apply`` moves first, and the scratch of the
        decision (``next_decision``) need saving. tests/test_state_machine.py
        rejects every kind of event in generated runs and compares.
        """
        return _get_saved(self)

    def rollback(self, saved: tuple[Any, ...]) -> None:
        for name, value in zip(_SAVED, saved, strict=True):
            setattr(self, name, value)

    def next_decision(self) -> None:
        """Start another decision on these records (``_interp.Batch``)."""
        self.effects = []
        self.emitted_now = set()
        self.emitted = []
        self.written = []
        self.resolved_now = []
        self.rows = 0
        self.sched_changed = []
        self.signal_taker = None
        self.answer = None
        self.cancelling_now = []

    def freeze(self) -> State:
        journal = (
            Journal(
                tuple(self.written),
                self.rows,
                tuple(self.resolved_now),
                tuple(dict.fromkeys(self.sched_changed)),
                tuple(self.cancelling_now),
            )
            if self.written
            or self.rows
            or self.resolved_now
            or self.sched_changed
            or self.cancelling_now
            else _NO_JOURNAL
        )
        tree = self.tree
        if self.frames is not tree.frames or self.envs is not tree.envs:
            tree = _replace(tree, frames=self.frames, envs=self.envs)
        waiting = self.waiting
        if (
            self.pending is not waiting.pending
            or self.in_flight != waiting.in_flight
            or self.seq != waiting.seq
        ):
            waiting = _replace(
                waiting, pending=self.pending, in_flight=self.in_flight, seq=self.seq
            )
        return State(
            flow=self.flow,
            run=self.run,
            now_ms=self.now_ms,
            ledger=self.ledger,
            tree=tree,
            waiting=waiting,
            results=self.results,
            report=self.report,
            schedules=self.schedules,
            settled=self.settled,
            journal=journal,
            report_complete=self.report_complete,
            scheduled_added=self.scheduled_added,
            metadata=self.metadata,
        )

    # --- reading ------------------------------------------------------------------

    def step_of(self, frame: StepFrame) -> Step:
        return self.flow.by_id[frame.step]

    def resolver(self, env: str, attempt: int = 1, extra: dict[str, Any] | None = None) -> Resolver:
        return Resolver(self, env, attempt, extra)

    def duration(self, frame: StepFrame, value: Duration, field: str, *, zero: bool) -> int:
        """Milliseconds of a duration field as the step ``frame`` begins.

        A literal was checked when the flow was parsed; an expression is
        evaluated in the step's context and its value read by
        ``parse_duration`` (``zero``: whether zero is allowed). Anything else
        raises ``InvalidDuration`` naming ``field`` and the value."""
        if isinstance(value, int):
            return value
        try:
            got = value.template.evaluate(self.resolver(frame.env, frame.attempt))
        except TemplateError as exc:
            raise InvalidDuration(f"{field} {value.source!r}: {exc}") from None
        try:
            return parse_duration(got, allow_zero=zero)
        except DurationError as exc:
            raise InvalidDuration(
                f"{field} {value.source!r} gave {short_json(got)}: {exc}"
            ) from None

    def scope_of(self, env: str) -> str:
        return self.envs[env].scope

    def frame(self, fid: str) -> StepFrame:
        frame = self.frames[fid]
        assert isinstance(frame, StepFrame)
        return frame

    def key(self, frame: StepFrame) -> str:
        return keys.step_key(self.key_run, frame.id, frame.attempt)

    # --- budget ---------------------------------------------------------------------

    def budget_remaining(self) -> BudgetRemaining:
        return self.ledger.remaining(self.run.started_ms, self.now_ms)

    def charge_usage(self, usage: Usage | None) -> None:
        if usage is None or usage == NO_USAGE:
            return
        led = self.ledger
        led = _replace(
            led,
            used_steps=led.used_steps + usage.steps,
            used_cost=led.used_cost + usage.cost_minor_units,
            used_tokens=led.used_tokens + usage.tokens,
            used_tool_calls=led.used_tool_calls + usage.tool_calls,
            used_turns=led.used_turns + usage.turns,
            used_input_tokens=led.used_input_tokens + usage.input_tokens,
            used_output_tokens=led.used_output_tokens + usage.output_tokens,
            used_cache_read_tokens=led.used_cache_read_tokens + usage.cache_read_tokens,
        )
        self.ledger = led
        over = led.over()
        if over is not None:
            raise Exhausted(over)

    def release_reserve(self, reserve: Budget) -> None:
        """Add ``reserve`` back to the limits the main work ran within (``on_budget_exhausted``);
        a reserved wall clock moves the deadline."""
        led = self.ledger
        widened: dict[str, int] = {}
        for name, extra in (
            ("steps", reserve.steps),
            ("cost", reserve.cost_minor_units),
            ("tokens", reserve.tokens),
            ("tool_calls", reserve.tool_calls),
            ("turns", reserve.turns),
            ("wall_clock_ms", reserve.wall_clock_ms),
        ):
            limit = getattr(led, name)
            if limit is not None and extra:
                widened[name] = limit + extra
        self.ledger = _replace(led, **widened)
        if "wall_clock_ms" in widened:
            self.drop_key(keys.deadline_key(self.key_run))
            due = self.run.started_ms + widened["wall_clock_ms"]
            self.timer(keys.reserve_deadline_key(self.key_run), due, PendingKind.DEADLINE, "")

    def check_clock(self) -> None:
        wall = self.ledger.wall_clock_ms
        if wall is not None and self.now_ms >= self.run.started_ms + wall:
            raise Exhausted("wall-clock")

    # --- waiting --------------------------------------------------------------------

    def wait_for(self, key: str, kind: PendingKind, frame: str, effect: Effect) -> None:
        """Emit ``effect`` and wait for ``key`` (a question, a signal wait or a timer)."""
        self.effects.append(effect)
        self.emitted_now.add(key)
        self.pending = self.pending.set(key, Pending(kind, frame, effect))

    def timer(self, key: str, until_ms: int, kind: PendingKind, frame: str) -> None:
        self.wait_for(key, kind, frame, Sleep(until_ms=until_ms, idempotency_key=key))

    def stop_waiting(self, key: str) -> None:
        """``key`` was answered: forget it (answered keys are not remembered)."""
        self.pending = self.pending.delete(key)

    def drop_key(self, key: str, waiter: str | None = None) -> None:
        """Stop waiting for ``key``; a late answer is then recorded and ignored.

        What the key waited for is remembered, so that a late answer of the
        wrong kind, or not among the options, is still rejected. An effect
        emitted in this very decision never reaches the host: it is taken
        back (and its step refunded).

        Work of ``cancellation: wait_cancellation_completed`` is not dropped:
        the host cancels it and the run waits for its end (``CANCELLING``), on
        behalf of ``waiter`` (the step frame whose end waits for it; "": the
        run, which settles only after it; None: the work's own step).
        """
        entry = self.pending.get(key)
        if entry is None or entry.kind is PendingKind.CHILD:
            return  # a child the run waits for outlives its step: only settling stops it
        if entry.kind is PendingKind.CANCELLING:
            self.await_cancel(key, entry, waiter)  # whoever stops waiting hands the wait on
            return
        kind = entry.kind
        taken_back = key in self.emitted_now and self.take_back(key)
        close = parent_close(entry)
        if close == "wait" and not taken_back:
            # The child runs on and the run settles only after it (language.md §4.7).
            child = _replace(entry, kind=PendingKind.CHILD, frame="")
            self.pending = self.pending.set(key, child)
            return
        if (
            kind is PendingKind.WORK
            and not taken_back
            and getattr(entry.sent, "cancellation", "") == "wait-cancellation-completed"
        ):
            # The host cancels it and reports its end, which someone waits for.
            self.cancelling_now.append(key)
            self.await_cancel(key, entry, entry.frame if waiter is None else waiter)
            return
        row = None
        if kind is PendingKind.WORK or kind is PendingKind.SCHEDULED_CALL:
            status = "not-started" if taken_back else "uncertain"
            row = ReportRow(key, entry.seq, entry.effect, entry.target, status)
            self.pending = self.pending.delete(key)
            self.in_flight -= 1
            self.add_row(row)
            if taken_back:  # refunded: what issuing it charged
                led = self.ledger
                calls = 1 if entry.effect == "call-tool" else 0
                self.ledger = _replace(
                    led, used_steps=led.used_steps - 1, used_tool_calls=led.used_tool_calls - calls
                )
        else:
            self.pending = self.pending.delete(key)
            if kind is PendingKind.SIGNAL:
                self.unwait(key)
        if taken_back:
            self.resolve(key, Resolution(How.TAKEN_BACK))
            return
        step = ""
        if kind is PendingKind.QUESTION:
            frame = self.frames.get(entry.frame)
            step = frame.step if isinstance(frame, StepFrame) else ""
        how = How.DETACHED if close == "abandon" else How.ABANDONED
        self.resolve(key, Resolution(how, kind, step, row))

    def await_cancel(self, key: str, entry: Pending, waiter: str | None) -> None:
        """Make ``waiter`` the one that waits for the end of the cancelled work ``key``:
        a step frame (which counts it in ``cancelling``) or "" (the run). A frame
        that is going away hands its waits to whoever stops waiting for it."""
        if waiter is None:
            waiter = entry.frame
        if waiter and not isinstance(self.frames.get(waiter), StepFrame):
            waiter = ""
        if entry.kind is PendingKind.CANCELLING and entry.frame == waiter:
            return
        if waiter:
            frame = self.frames[waiter]
            assert isinstance(frame, StepFrame)
            self.set_frame(frame, cancelling=frame.cancelling + 1)
        moved = _replace(entry, kind=PendingKind.CANCELLING, frame=waiter)
        self.pending = self.pending.set(key, moved)

    def resolve(self, key: str, how: Resolution) -> None:
        w = self.waiting
        self.waiting = _replace(w, resolved=w.resolved.set(key, how))
        self.resolved_now.append(key)

    def take_back(self, key: str) -> bool:
        for i, effect in enumerate(self.effects):
            if getattr(effect, "idempotency_key", None) == key:
                del self.effects[i]
                return True
        return False

    def unwait(self, key: str) -> None:
        """The signal wait ``key`` is no longer open: off every name it waits for."""
        for field in ("waiters", "keyed_waiters"):
            waiters = getattr(self.waiting, field)
            changed = waiters
            for name, waiting in waiters.items():
                if key in waiting:
                    rest = tuple(k for k in waiting if k != key)
                    changed = changed.set(name, rest) if rest else changed.delete(name)
            if changed is not waiters:
                self.waiting = _replace(self.waiting, **{field: changed})

    # --- work ---------------------------------------------------------------------

    def emit_work(
        self,
        frame: str,
        effect: RunAgent | RunTeam | CallTool | RunSubflow | SignalRun,
        target: str,
        member: str = "",
        tag: str = "",
    ) -> None:
        if isinstance(effect, RunAgent | RunTeam | CallTool):
            effect = self.heartbeat(frame, effect)
            effect = self.cancellation(frame, effect)
        w = self.waiting
        seq = self.seq + 1
        cap = self.flow.limits.max_concurrency
        if cap is not None and (self.in_flight >= cap or w.queue_head < w.queue_tail):
            # Held work goes first: new work queues behind it, in request order.
            held = Held(frame, effect, seq, target, member)
            self.seq = seq
            self.waiting = _replace(
                w, queue=w.queue.set(w.queue_tail, held), queue_tail=w.queue_tail + 1
            )
            return
        self.issue(frame, effect, member, seq, target, tag)  # it records seq

    def heartbeat(self, fid: str, effect: E) -> E:
        """``effect`` with its step's heartbeat timeout and the last heartbeat details
        an earlier attempt reported, when the step has a heartbeat_timeout_ms."""
        frame = self.frames.get(fid)
        if not isinstance(frame, StepFrame) or frame.heartbeat_ms is None:
            return effect
        details = frame.heartbeat_details
        return _replace(effect, heartbeat_timeout_ms=frame.heartbeat_ms, heartbeat_details=details)

    def cancellation(self, fid: str, effect: E) -> E:
        """``effect`` with its step's cancellation type, when that is not try_cancel."""
        frame = self.frames.get(fid)
        if not isinstance(frame, StepFrame):
            return effect
        mode = self.flow.cancellation(self.flow.by_id[frame.step])
        if mode == "try_cancel":
            return effect
        return _replace(effect, cancellation=_WIRE_CANCELLATION[mode])

    def issue(
        self,
        frame: str,
        effect: RunAgent | RunTeam | CallTool | RunSubflow | SignalRun,
        member: str,
        seq: int,
        target: str,
        tag: str = "",
    ) -> None:
        # Report rows are written when work stops being pending (answered or
        # abandoned); pending work is reported from ``pending`` at settlement.
        led = self.ledger
        if led.steps is not None and led.used_steps + 1 > led.steps:
            raise Exhausted("steps")
        if led.cost is not None and led.used_cost >= led.cost:
            raise Exhausted("cost")
        calls = 0
        if isinstance(effect, CallTool):
            calls = 1  # a tool call; an agent's own ones come in its usage
            if led.tool_calls is not None and led.used_tool_calls + 1 > led.tool_calls:
                raise Exhausted("tool-calls")
        elif not isinstance(effect, (RunSubflow, SignalRun)):  # an agent or a team: turn, tokens
            if led.turns is not None and led.used_turns >= led.turns:
                raise Exhausted("turns")
            if led.tokens is not None and led.used_tokens >= led.tokens:
                raise Exhausted("tokens")
        self.ledger = _replace(
            led, used_steps=led.used_steps + 1, used_tool_calls=led.used_tool_calls + calls
        )
        if not tag:
            tag = effect_tag(effect)
            if tag == "run-agent" or tag == "run-subflow":
                effect = _replace(effect, budget_remaining=self.budget_remaining())
        key = effect.idempotency_key
        self.effects.append(effect)
        self.emitted.append(key)
        self.emitted_now.add(key)
        kind = (
            PendingKind.SCHEDULED_CALL
            if self.schedules and frame in self.schedules
            else PendingKind.WORK
        )
        self.pending = self.pending.set(key, Pending(kind, frame, effect, tag, member, seq, target))
        self.in_flight += 1
        if seq > self.seq:  # a new request (held or re-issued work was counted before)
            self.seq = seq

    def set_sched(self, sid: str, sched: Sched) -> None:
        """Replace a scheduled call's record; the journal names it (``scheduled.changed``)."""
        self.schedules = self.schedules.set(sid, sched)
        self.sched_changed.append(sid)

    def work_answered(self, key: str, entry: Pending, status: str) -> None:
        """Pending work got its result: it is no longer in flight; the report says how."""
        self.pending = self.pending.delete(key)
        self.in_flight -= 1
        self.add_row(ReportRow(key, entry.seq, entry.effect, entry.target, status))

    def drain_queue(self) -> None:
        cap = self.flow.limits.max_concurrency
        while True:
            w = self.waiting
            if w.queue_head >= w.queue_tail or (cap is not None and self.in_flight >= cap):
                return
            held = w.queue[w.queue_head]
            self.waiting = _replace(
                w, queue=w.queue.delete(w.queue_head), queue_head=w.queue_head + 1
            )
            if not self.still_wanted(held):
                key = held.effect.idempotency_key
                self.add_row(
                    ReportRow(key, held.seq, effect_tag(held.effect), held.target, "not-started")
                )
                continue
            self.issue(held.frame, held.effect, held.member, held.seq, held.target)

    def still_wanted(self, held: Held) -> bool:
        key = held.effect.idempotency_key
        sched = self.schedules.get(held.frame)
        if sched is not None:
            return sched.status is SchedStatus.CALLED
        frame = self.frames.get(held.frame)
        if isinstance(frame, StepFrame):
            if frame.key == key:
                return True
            prog = frame.progress
            return isinstance(prog, TeamProgress) and key in prog.running
        return False

    def add_row(self, row: ReportRow) -> None:
        self.report = add_report_row(self.report, row)
        self.rows += 1

    # --- frames ------------------------------------------------------------------

    def set_frame(self, frame: StepFrame, **changes: Any) -> StepFrame:
        if changes:
            frame = _replace(frame, **changes)
        self.frames = self.frames.set(frame.id, frame)
        return frame

    def put_frame(self, frame: Frame) -> None:
        self.frames = self.frames.set(frame.id, frame)

    def drop_frame(self, fid: str) -> None:
        if fid in self.frames:
            self.frames = self.frames.delete(fid)

    def set_env(self, env_id: str, env: Env) -> None:
        self.envs = self.envs.set(env_id, env)

    def push_compensation(self, step: Step, frame: StepFrame) -> None:
        t = self.tree
        below = t.compensations
        depth = 1 + (below.depth if below is not None else 0)
        link = CompLink(step.id, frame.env, frame.prefix, depth, below)
        self.tree = _replace(t, compensations=link)

    def comp_depth(self) -> int:
        link = self.tree.compensations
        return 0 if link is None else link.depth

    # --- lists and steps ------------------------------------------------------------

    def step_list(self, frame: SeqFrame) -> tuple[Step, ...]:
        if not frame.owner:
            if frame.list is ListKind.FINAL:
                final = self.flow.on_exhausted
                assert final is not None
                return final.steps
            return self.flow.steps
        return self.above.steps_of(self.flow.by_id[frame.owner], frame)

    def start_list(
        self,
        seq_id: str,
        parent: str | None,
        env: str,
        prefix: str,
        owner: str,
        kind: ListKind,
        index: int = 0,
        branch: str = "",
    ) -> Outcome | None:
        frame = SeqFrame(
            id=seq_id,
            parent=parent,
            env=env,
            prefix=prefix,
            owner=owner,
            list=kind,
            index=index,
            branch=branch,
        )
        return self.run_seq(frame, self.step_list(frame))

    def run_seq(
        self, frame: SeqFrame, steps: tuple[Step, ...], i: int = 0, last: Any = None
    ) -> Outcome | None:
        """Run ``steps`` from ``i``; ``last`` is the output of the step before.

        The list's frame never changes once stored: which step runs is its
        child's step (``Step.index``), and the list's output is the output its
        last step hands up.
        """
        n = len(steps)
        while i < n:
            out = self.start_step(steps[i], frame.id, frame.env, frame.prefix)
            if out is None:
                if self.frames.get(frame.id) is not frame:
                    self.put_frame(frame)
                return None
            if not out[0]:
                self.drop_frame(frame.id)
                return out
            last = out[1]
            i += 1
        self.drop_frame(frame.id)
        return (OK, last)

    def start_step(self, step: Step, parent: str, env: str, prefix: str) -> Outcome | None:
        fid = prefix + step.id
        frame = StepFrame(id=fid, parent=parent, env=env, prefix=prefix, step=step.id)
        if step.timeout_ms is not None:
            try:
                timeout = self.duration(frame, step.timeout_ms, "timeout_ms", zero=False)
            except InvalidDuration as exc:
                self.put_frame(frame)
                return self.finish_step(fid, (FAIL, _invalid(step, exc)), frame, step)
            timer = keys.step_timeout_key(self.key_run, fid)
            self.timer(timer, self.now_ms + timeout, PendingKind.STEP_TIMEOUT, fid)
            frame = _replace(frame, timer=timer)
        return self.begin(frame, step)

    def begin(self, frame: StepFrame, step: Step) -> Outcome | None:
        """Start (an attempt of) ``step``; returns its outcome if it ends at once."""
        try:
            if step.attempt_timeout_ms is not None:  # this attempt's own timer
                ms = self.duration(frame, step.attempt_timeout_ms, "attempt_timeout_ms", zero=False)
                timer = keys.attempt_timeout_key(self.key(frame))
                self.timer(timer, self.now_ms + ms, PendingKind.ATTEMPT_TIMEOUT, frame.id)
                frame = _replace(frame, attempt_timer=timer)
                self.put_frame(frame)
            if step.heartbeat_timeout_ms is not None:  # on this attempt's work effects
                ms = self.duration(
                    frame, step.heartbeat_timeout_ms, "heartbeat_timeout_ms", zero=False
                )
                frame = _replace(frame, heartbeat_ms=ms)
                self.put_frame(frame)
            out = self.above.begin(self, frame, step)
        except InvalidDuration as exc:
            out = (FAIL, _invalid(step, exc))
        except TemplateError as exc:
            out = (FAIL, err("expression-error", f"step {step.id!r}: {exc}"))
        if out is None:
            return None
        if frame.id not in self.frames:
            self.put_frame(frame)  # it ended before it waited
        return self.finish_step(frame.id, out)

    def finish_step(
        self, fid: str, out: Outcome, frame: StepFrame | None = None, step: Step | None = None
    ) -> Outcome | None:
        """A step's attempt ended: retry it, or record it and hand the outcome up.

        ``frame`` is the step's frame when the caller holds it already: it
        must be the current one (no ``set_frame`` since it was read).
        """
        if frame is None:
            frame = self.frame(fid)
        if frame.cancelling:  # it ends once the calls it waits to see cancelled have ended
            self.defer(frame, out)
            return None
        if step is None:
            step = self.flow.by_id[frame.step]
        if frame.attempt_timer is not None:  # the attempt ended: its own timer goes
            if frame.attempt_timer in self.pending:
                self.drop_key(frame.attempt_timer)
            frame = self.set_frame(frame, attempt_timer=None)
        if not out[0] and self.should_retry(step, frame, out[1]):
            self.abandon_children(fid)
            frame = self.frame(fid)
            if frame.cancelling:  # the next attempt begins once they have ended
                self.defer(frame, out)
                return None
            retry = step.retry
            assert retry is not None
            delay = min(
                retry.initial_interval_ms * retry.backoff ** (frame.attempt - 1),
                retry.max_interval_ms,
            )
            key = keys.backoff_key(self.key(frame))
            if retry.jitter:
                delay *= 1.0 - retry.jitter * unit_fraction(key)
            failures = frame.failures
            if self.semantics >= 2:
                failures = (*failures, _replace(out[1], attempts=()))
            if int(delay) == 0 and self.semantics >= 2:  # the next attempt begins now
                frame = self.set_frame(
                    frame,
                    key=None,
                    progress=None,
                    unknowns=0,
                    attempt=frame.attempt + 1,
                    failures=failures,
                )
                return self.begin(frame, step)
            # a fresh attempt, after the backoff
            self.set_frame(
                frame, key=None, backoff=key, progress=None, unknowns=0, failures=failures
            )
            self.timer(key, self.now_ms + int(delay), PendingKind.BACKOFF, fid)
            return None
        if frame.timer is not None:
            self.drop_key(frame.timer)
        self.drop_frame(fid)
        if not out[0] and frame.failures:  # a retried step failed: say how each attempt did
            last = _replace(out[1], attempts=())
            out = (FAIL, _replace(out[1], attempts=(*frame.failures, last)))
        if out[0]:
            record: dict[str, Any] = {"status": "succeeded", "output": out[1]}
            if isinstance(step.body, AskHumanStep):  # a question's result also keeps the answer
                record["answer"] = out[1]
            if step.compensate:
                self.push_compensation(step, frame)
        else:
            record = {"status": "failed", "output": None, "error": error_dict(out[1])}
        name = self.envs[frame.env].scope + step.id
        # Only the children of a retried composite have a frame id other than
        # their result's name; they may write it a second time.
        self.record(name, record, rewrite=name != fid)
        return out

    def defer(self, frame: StepFrame, out: Outcome) -> None:
        """``frame`` ends with ``out`` once the work it waits to see cancelled has
        ended (``cancellation_ended``); the first outcome decided stands."""
        if frame.closing is None:
            closing = Closing(True, out[1]) if out[0] else Closing(False, error=out[1])
            self.set_frame(frame, closing=closing)

    def cancellation_ended(self, key: str, entry: Pending) -> None:
        """The cancelled work ``key``, whose end ``entry.frame`` waited for, has ended
        (the caller recorded how): that step ends once nothing else is awaited."""
        waiter = entry.frame
        frame = self.frames.get(waiter) if waiter else None
        if not isinstance(frame, StepFrame):
            self.above.maybe_finish(self)  # the run waited for it before settling
            return
        frame = self.set_frame(frame, cancelling=frame.cancelling - 1)
        closing = frame.closing
        if frame.cancelling or closing is None:
            return
        frame = self.set_frame(frame, closing=None)
        self.step_ended(
            waiter, (OK, closing.output) if closing.ok else (FAIL, closing.error), frame
        )

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
        return matches(retry.errors, error)

    def retry_now(self, frame: StepFrame) -> None:
        """The backoff is over: begin the next attempt."""
        frame = self.set_frame(frame, attempt=frame.attempt + 1, backoff=None)
        out = self.begin(frame, self.step_of(frame))
        if out is not None:
            self.propagate(frame, out)

    def step_ended(self, fid: str, out: Outcome, frame: StepFrame | None = None) -> None:
        """A waiting step has its outcome. ``frame``: its current frame, if the caller holds it."""
        if frame is None:
            frame = self.frame(fid)
        step = self.flow.by_id[frame.step]
        res = self.finish_step(fid, out, frame, step)
        if res is not None:
            self.propagate(frame, res, step.index)

    def propagate(self, child: Frame, out: Outcome, index: int = -1) -> None:
        """Hand a finished frame's outcome up the tree until something waits.

        ``index``: the finished child step's index in its list, if known.
        """
        while True:
            parent = child.parent
            if parent is None:
                self.above.root_done(self, child, out)
                return
            frame = self.frames.get(parent)
            if frame is None:
                return  # the parent was abandoned meanwhile
            if isinstance(frame, SeqFrame):
                if out[0]:
                    if index < 0:
                        assert isinstance(child, StepFrame)
                        index = self.flow.by_id[child.step].index
                    res = self.run_seq(frame, self.step_list(frame), index + 1, out[1])
                else:
                    self.drop_frame(frame.id)
                    res = out
                if res is None:
                    return
                child, out, index = frame, res, -1
                continue
            assert isinstance(child, SeqFrame)
            res = self.above.child_done(self, frame, child, out)
            if res is None:
                return
            res = self.finish_step(frame.id, res)
            if res is None:
                return
            child, out, index = frame, res, -1

    def child_outcome(
        self, fid: str, child: SeqFrame | None, out: Outcome | None
    ) -> Outcome | None:
        """A child list of ``fid`` ended at once: let ``fid`` react to it."""
        if out is None:
            return None
        return self.above.child_done(self, self.frame(fid), child, out)

    # --- results ----------------------------------------------------------------------

    def record(self, name: str, record: Any, rewrite: bool = False) -> None:
        self.written.append(name)
        self.results = self.results.put(name, record, rewrite)

    def lookup(self, env: str, step_id: str) -> Any:
        """A step's result as seen from ``env``: the nearest scope that has it."""
        env_id: str | None = env
        envs = self.envs
        results = self.results
        while env_id is not None:
            e = envs[env_id]
            record = results.get(e.scope + step_id)
            if record is not None:
                return record
            env_id = e.parent
        return None

    def forget(self, name: str) -> None:
        store = self.results.delete(name)
        if store is not self.results:
            self.written.append(name)
            self.results = store

    def take_results(self, names: list[str]) -> list[Any]:
        """Read and delete these results (a finished for_each's outputs)."""
        records, self.results = self.results.take(names)
        self.written.extend(names)
        return records

    def end_scope(self, scope: str, loop: Step, uncompensated: bool = False) -> None:
        """An iteration or fire ended: drop its results and variables.

        A run that loops for ever then keeps a bounded state, and a host
        restores it without reading the history. A scope that a recorded
        compensation will run in is kept; ``uncompensated`` says the caller
        knows none was recorded in it (no need to walk the stack).
        """
        link = None if uncompensated else self.tree.compensations
        envs = self.envs
        while link is not None:
            env = envs.get(link.env)
            if env is None or env.scope.startswith(scope):
                return
            link = link.rest
        for step_id in self.flow.scopes[loop.id]:
            self.forget(scope + step_id)
        if scope in envs:
            self.envs = envs.delete(scope)

    # --- abandoning -------------------------------------------------------------------

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
        """Abandon ``root`` and what runs under it; calls being cancelled that it
        waited for are waited for by the step that owns it."""
        frame = self.frames.get(root)
        self.abandon(self.descendants(root), None if frame is None else frame.parent)

    def abandon_children(self, fid: str) -> None:
        """Stop everything ``fid`` waits for, but its own timeout, and drop its children."""
        gone = self.descendants(fid)
        frame = self.frames.get(fid)
        own_timer = frame.timer if isinstance(frame, StepFrame) else None
        for key, entry in sorted(self.pending.items()):  # in key order in every process
            if entry.frame in gone and key != own_timer:
                self.drop_key(key, fid)
        gone.discard(fid)
        self.cancelled(gone)
        self.drop_frames(gone)

    def abandon(self, gone: set[str], waiter: str | None = None) -> None:
        if not gone:
            return
        for key, entry in sorted(self.pending.items()):  # in key order in every process
            if entry.frame in gone:
                self.drop_key(key, "" if waiter is None else waiter)
        self.cancelled(gone)
        self.drop_frames(gone)

    def cancelled(self, gone: set[str]) -> None:
        """Steps abandoned while they ran read ``{status: cancelled}`` to expressions
        (level 2; language.md §9.2). In order of their frame ids: the journal's
        order must not depend on how a set of strings iterates."""
        if self.semantics < 2:
            return
        frames = self.frames
        for fid in sorted(gone):
            frame = frames.get(fid)
            if isinstance(frame, StepFrame) and frame.env in self.envs:
                name = self.envs[frame.env].scope + frame.step
                self.record(name, {"status": "cancelled", "output": None}, rewrite=True)

    def drop_frames(self, gone: set[str]) -> None:
        frames = self.frames
        for fid in gone:
            if fid in frames:
                frames = frames.delete(fid)
        self.frames = frames

    def abandon_all(self) -> None:
        """The run is ending: stop waiting for anything but scheduled calls and the deadline."""
        for key, entry in sorted(self.pending.items()):  # in key order in every process
            if entry.kind not in _OUTLIVE_THE_STEPS:
                self.drop_key(key, "")  # the run waits for calls being cancelled
        self.frames = _EMPTY


_WIRE_CANCELLATION: dict[str, CancellationType] = {
    "try_cancel": "try-cancel",
    "wait_cancellation_completed": "wait-cancellation-completed",
    "abandon": "abandon",
}

_OUTLIVE_THE_STEPS = frozenset(
    (
        PendingKind.SCHEDULE_DELAY,
        PendingKind.SCHEDULED_CALL,
        PendingKind.DEADLINE,
        PendingKind.CHILD,
    )
)


class Resolver:
    """The expression context of one frame: see ``_expr.Resolver``."""

    __slots__ = ("attempt", "env", "extra", "t")

    def __init__(self, t: Txn, env: str, attempt: int, extra: dict[str, Any] | None) -> None:
        self.t = t
        self.env = env
        self.attempt = attempt
        self.extra = extra

    def root(self, name: str) -> Any:
        t = self.t
        if name == "input":
            return t.run.input
        if name == "run":
            flow = t.flow
            ctx = {
                "id": t.run_id,
                "flow": flow.id,
                "version": flow.version,
                "depth": t.run.depth,
                "attempt": self.attempt,
            }
            if t.tree.incarnation != 1:  # absent in the first: runs that never continue as before
                ctx["incarnation"] = t.tree.incarnation
            return ctx
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
        return self.t.lookup(self.env, step_id)

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
        envs = self.t.envs
        while env_id is not None:
            env = envs[env_id]
            chain.append(env)
            env_id = env.parent
        for env in reversed(chain):
            out.update(env.vars)
        if self.extra:
            out.update(self.extra)
        return out


def _invalid(step: Step, exc: InvalidDuration) -> ErrorInfo:
    return err("invalid-duration", f"step {step.id!r}: {exc}")
