"""One transition's scratch space, and the life of lists and steps.

A ``Txn`` starts from a ``State``, holds references to its records and
replaces a record whenever it changes one; ``freeze`` builds the next
``State`` from them. The input state is never touched: a rejected event drops
the scratch copy. It is three layers, one module each:

- ``txn_records.TxnRecords``: the records, ``freeze``, the halt that
  stops a transition (``stop``, ``take_halt``; see ``halt``), and reading
  (``step_of``, ``resolver``, ``scope_of``, ``duration``), frames
  (``set_frame``, ``put_frame``) and results (``record``, ``end_scope``,
  ``take_results``);
- ``txn_waits.TxnWaits``: the budget, waiting (``wait_for``, ``timer``,
  ``drop_key``, ``stop_waiting``), work (``emit_work``: budget,
  ``max_concurrency``; ``add_row``) and abandoning (``abandon_frame``,
  ``abandon_children``);
- ``Txn``, here: lists and steps (``start_list``, ``finish_step``,
  ``step_ended``, ``propagate``).

Those methods are the small interface every construct is written against.
Lists and steps live here, because every construct shares them: a list runs
its steps one after another; a step begins (its construct's ``begin``), may
wait, and finishes with an ``Outcome`` that is retried, recorded, and handed
up the tree (``propagate``) until some frame starts new work or the root
list ends (``ending.root_done``). The constructs and the ending are the
layers above this one: a transaction reaches them through ``Above``, which
``interp`` wires in.

This module must never do I/O, read a clock or draw a random number.
"""

from __future__ import annotations

from typing import Any, Protocol, assert_never

import msgspec

from ..language.expr import TemplateError
from ..language.spec import AskHumanStep, Step
from . import keys
from .outcome import (
    Failed,
    InvalidDuration,
    Ok,
    Outcome,
    err,
    error_dict,
    matches,
    unit_fraction,
)
from .state import (
    Closing,
    Frame,
    ListKind,
    Pending,
    PendingKind,
    SeqFrame,
    StepFrame,
)
from .txn_records import RECORDS, Resolver
from .txn_waits import TxnWaits
from .wire import (
    ErrorInfo,
)

__all__ = ["RECORDS", "Above", "Resolver", "Txn"]

_replace = msgspec.structs.replace


class Above(Protocol):
    """What a transaction calls in the layers above it: what each construct does
    (``constructs``) and how the run ends (``ending``). ``interp`` wires them in,
    so this module knows neither."""

    def start(self, t: Txn, step: Step, parent: str, env: str, prefix: str) -> bool: ...

    def begin(self, t: Txn, frame: StepFrame, step: Step) -> Outcome | None: ...

    def child_done(
        self, t: Txn, frame: StepFrame, child: SeqFrame | None, out: Outcome
    ) -> Outcome | None: ...

    def steps_of(self, owner: Step, frame: SeqFrame) -> tuple[Step, ...]: ...

    def root_done(self, t: Txn, child: Frame | None, out: Outcome) -> None: ...

    def maybe_finish(self, t: Txn) -> None: ...


class Txn(TxnWaits):
    """Scratch space for one transition. See the module docstring."""

    __slots__ = ()

    # --- lists and steps ------------------------------------------------------------

    def step_list(self, frame: SeqFrame) -> tuple[Step, ...]:
        if not frame.owner:
            if frame.list is ListKind.FINAL:
                final = self.flow.on_exhausted
                assert final is not None
                return final.steps
            if frame.list is ListKind.UPDATE:  # ``branch``: the update's id
                return self.flow.updates[self.tree.updates[frame.branch].name].steps
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
        self.opening[frame.id] = frame
        while i < n:
            out = self.start_step(steps[i], frame.id, frame.env, frame.prefix)
            if out is None:
                if self.halt is not None:
                    return None
                if self.frames.get(frame.id) is not frame:
                    self.put_frame(frame)
                return None
            if type(out) is not Ok:
                self.drop_frame(frame.id)
                return out
            last = out.value
            i += 1
        self.drop_frame(frame.id)
        return Ok(last)

    def start_step(self, step: Step, parent: str, env: str, prefix: str) -> Outcome | None:
        if self.above.start(self, step, parent, env, prefix):
            return None  # a plain step, begun directly (``compiled``: a speed-up)
        fid = prefix + step.id
        frame = StepFrame(id=fid, parent=parent, env=env, prefix=prefix, step=step.id)
        if step.timeout_ms is not None:
            try:
                timeout = self.duration(frame, step.timeout_ms, "timeout_ms", zero=False)
            except InvalidDuration as exc:
                self.put_frame(frame)
                return self.finish_step(fid, Failed(_invalid(step, exc)), frame, step)
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
            out = Failed(_invalid(step, exc))
        except TemplateError as exc:
            out = Failed(err("expression-error", f"step {step.id!r}: {exc}"))
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
        if type(out) is Failed and self.should_retry(step, frame, out.error):
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
                failures = (*failures, _replace(out.error, attempts=()))
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
        if type(out) is Ok:
            record: dict[str, Any] = {"status": "succeeded", "output": out.value}
            if isinstance(step.body, AskHumanStep):  # a question's result also keeps the answer
                record["answer"] = out.value
            if step.compensate:
                self.push_compensation(step, frame)
        else:
            if frame.failures:  # a retried step failed: say how each attempt did
                last = _replace(out.error, attempts=())
                out = Failed(_replace(out.error, attempts=(*frame.failures, last)))
            record = {"status": "failed", "output": None, "error": error_dict(out.error)}
        name = self.envs[frame.env].scope + step.id
        # Only the children of a retried composite have a frame id other than
        # their result's name; they may write it a second time.
        self.record(name, record, rewrite=name != fid)
        return out

    def defer(self, frame: StepFrame, out: Outcome) -> None:
        """``frame`` ends with ``out`` once the work it waits to see cancelled has
        ended (``cancellation_ended``); the first outcome decided stands."""
        if frame.closing is None:
            match out:
                case Ok():
                    closing = Closing(True, out.value)
                case Failed():
                    closing = Closing(False, error=out.error)
                case _:
                    assert_never(out)
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
        if closing.ok:
            self.step_ended(waiter, Ok(closing.output), frame)
        else:
            assert closing.error is not None
            self.step_ended(waiter, Failed(closing.error), frame)

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
                if type(out) is Ok:
                    if index < 0:
                        assert isinstance(child, StepFrame)
                        index = self.flow.by_id[child.step].index
                    res = self.run_seq(frame, self.step_list(frame), index + 1, out.value)
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


def _invalid(step: Step, exc: InvalidDuration) -> ErrorInfo:
    return err("invalid-duration", f"step {step.id!r}: {exc}")
