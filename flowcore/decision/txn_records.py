"""A transaction's records: what ``Txn`` holds of a ``State``, and how it reads them.

``TxnRecords`` starts from a ``State``, holds references to its records (see
``state``) and replaces a record whenever it changes one; ``freeze`` builds
the next ``State`` from them. It reads steps, keys and durations, keeps
frames and results, and builds the expression context of a frame
(``Resolver``). ``TxnWaits`` (``txn_waits``) adds what a transaction waits
for, and ``Txn`` (``txn``) the life of lists and steps.

This module must never do I/O, read a clock or draw a random number.
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any

import immutables
import msgspec

from .._data import short_json
from ..language.expr import TemplateError
from ..language.spec import Duration, Flow, Step
from ..language.times import DurationError, parse_duration
from . import keys
from .halt import Halt
from .outcome import (
    InvalidDuration,
)
from .results import ResultStore
from .state import (
    CompLink,
    Env,
    Frame,
    Journal,
    Ledger,
    Pending,
    ReportLink,
    Run,
    Sched,
    ScheduledAnswer,
    SeqFrame,
    State,
    StepFrame,
    Tree,
    Waiting,
)
from .update_wire import UpdateReply
from .wire import (
    Effect,
    Settled,
)

if TYPE_CHECKING:
    from .txn import Above

__all__ = ["RECORDS", "Resolver", "TxnRecords"]


_EMPTY: immutables.Map[Any, Any] = immutables.Map()
_NO_JOURNAL = Journal()
_replace = msgspec.structs.replace


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
    "replies",
)
"""What one decision collects: its effects and its journal."""
_SAVED = ("now_ms", *SCRATCH)
_get_saved = operator.attrgetter(*_SAVED)


class TxnRecords:
    """Scratch space for one transition: the records it holds, reading, frames and results.

    ``Txn`` (``txn``) is this, with ``TxnWaits`` and the life of lists and steps."""

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
        "halt",
        "idle",
        "in_flight",
        "key_run",
        "ledger",
        "metadata",
        "now_ms",
        "opening",
        "pending",
        "replies",
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
        # Lists begun in this decision, stored only once a step of theirs waits:
        # where work issued meanwhile finds its lane (``shares.lane``).
        self.opening: dict[str, SeqFrame] = {}
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
        self.replies: list[UpdateReply] = []  # the updates this decision ended
        # In ``start``: the signals buffered when the flow's steps began (an
        # incarnation's carried ones); None in ``advance``.
        self.starting: int | None = None
        # In ``start``: the incarnations in a row before this one that continued
        # without waiting for anything (``ContinueAsNew.idle_incarnations``).
        self.idle = 0
        # What stopped this transition (``stop``) until it is handled; None
        # while it runs.
        self.halt: Halt | None = None

    def stop(self, halt: Halt) -> None:
        """Stop the transition: ``halt`` is handled where it began (``ending.halted``).

        The caller returns at once, and so does every caller on the way back:
        each checks ``halt`` after a call that may stop and does nothing more."""
        self.halt = halt

    def take_halt(self) -> Halt | None:
        """The halt to handle, if the transition stopped; the transaction runs on."""
        halt = self.halt
        self.halt = None
        return halt

    def checkpoint(self) -> tuple[Any, ...]:
        """What a rejected event must leave as it was (``rollback`` returns to it).

        A transition checks everything before it writes anything
        (``transitions``), so a rejection changes no record: only the clock,
        which ``transitions.apply`` moves first, and the scratch of the
        decision (``next_decision``) need saving. tests/decision/test_state_machine.py
        rejects every kind of event in generated runs and compares.
        """
        return _get_saved(self)

    def rollback(self, saved: tuple[Any, ...]) -> None:
        for name, value in zip(_SAVED, saved, strict=True):
            setattr(self, name, value)

    def next_decision(self) -> None:
        """Start another decision on these records (``interp.Batch``)."""
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
        self.replies = []

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


class Resolver:
    """The expression context of one frame: see ``expr.Resolver``."""

    __slots__ = ("attempt", "env", "extra", "t")

    def __init__(self, t: TxnRecords, env: str, attempt: int, extra: dict[str, Any] | None) -> None:
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
