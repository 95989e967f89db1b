"""What comes into a running flowcore workflow from clients: signals (every name),
the ``answer``, ``upgrade`` and ``scheduled`` updates, with their validators, and
the queries (questions, waits, scheduled calls, the log, the status).

This module runs inside Temporal's workflow sandbox: it must never do I/O,
read the system clock or draw a random number.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    import msgspec

import flowcore
from flowcore import Event, EventRejected, HumanAnswered, Record, SignalReceived, State, persist
from flowcore_temporal import _registry

from ._types import (
    ANSWER_BY_UPDATE,
    ANSWER_UPDATE,
    LOG_QUERY,
    NOT_PENDING_ERROR,
    PROGRESS_BYTES,
    PROGRESS_ITEMS,
    PROGRESS_QUERY,
    PROGRESS_SIGNAL,
    QUESTIONS_QUERY,
    SCHEDULED_QUERY,
    SCHEDULED_UPDATE,
    STATUS_QUERY,
    SWITCHING_ERROR,
    UPGRADE_UPDATE,
    WAITS_QUERY,
    clip,
    unpack_state,
)
from ._workflow_base import (
    _KEPT_REFUSALS,
    _MESSAGE_CHARS,
    _SCHEDULED_KINDS,
    _decode,
    _parse,
    _questions,
    _Refused,
)
from ._workflow_carry import WorkflowCarrying


class WorkflowHandlers(WorkflowCarrying):
    """The workflow's signal, update and query handlers."""

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

    @workflow.signal(name=PROGRESS_SIGNAL)
    def _on_progress(self, batch: RawValue) -> None:
        """Items a handler published (the work activity sends them): kept in the
        run's bounded progress buffer, never applied to the run. A batch that is
        not one is dropped whole, and said so, as a refused signal is."""
        try:
            items = _progress_batch(_decode(batch, "the progress batch"))
        except _Refused as exc:
            self._refuse_signal(PROGRESS_SIGNAL, str(exc), self._now())
            return
        kept = self._progress
        for item in items:
            kept.append((self._progress_next, *item))
            self._progress_next += 1
            self._progress_bytes += item[-1]
        # The newest PROGRESS_ITEMS within PROGRESS_BYTES (the newest kept even alone over).
        while len(kept) > PROGRESS_ITEMS or (
            len(kept) > 1 and self._progress_bytes > PROGRESS_BYTES
        ):
            self._progress_bytes -= kept.popleft()[-1]

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
        return self._take_answer(self._answer_event(key, answer))

    @workflow.update(name=ANSWER_BY_UPDATE)
    def answer_by(self, key: RawValue, answer: RawValue, principal: RawValue) -> dict[str, Any]:
        """``answer``, given by ``principal`` (a denied approval's error names them)."""
        return self._take_answer(self._answer_event(key, answer, principal))

    def _take_answer(self, event: HumanAnswered) -> dict[str, Any]:
        try:
            self._apply(event)
        except EventRejected as exc:
            raise ApplicationError(str(exc), type="answer-rejected", non_retryable=True) from None
        return {"key": event.idempotency_key, "answer": event.answer}

    def _answer_event(self, key: Any, answer: Any, principal: Any = None) -> HumanAnswered:
        """The answer as a checked event, or an ``answer-rejected`` error saying why not."""
        try:
            key = _decode(key, "the key")
            answer = _decode(answer, "the answer")
            who = None if principal is None else _decode(principal, "the principal")
            if not isinstance(key, str):
                raise _Refused(
                    f"the key must be a string (a question's key), got {type(key).__name__}"
                )
            if who is not None and not isinstance(who, str):
                raise _Refused(f"the principal must be a string, got {type(who).__name__}")
            event = HumanAnswered(
                idempotency_key=key, answer=answer, at_ms=self._now(), principal=who
            )
            flowcore.check_event(event)
            return event
        except (_Refused, flowcore.DataError) as exc:
            raise ApplicationError(
                f"answer refused: {exc}", type="answer-rejected", non_retryable=True
            ) from None

    @answer.validator
    def _check_answer(self, key: RawValue, answer: RawValue) -> None:
        self._check_answer_event(self._answer_event(key, answer))

    @answer_by.validator
    def _check_answer_by(self, key: RawValue, answer: RawValue, principal: RawValue) -> None:
        self._check_answer_event(self._answer_event(key, answer, principal))

    def _check_answer_event(self, event: HumanAnswered) -> None:
        # Ask the interpreter itself (advance is pure; the result is dropped),
        # so the rule is exactly the one that would apply: pending key, an
        # answer among the options, a run that has not settled.
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
            persist.advance(state, event)
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
            decision = persist.advance(self._state, checked)
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
            probe = persist.advance(self._state, checked)  # a probe: advance is pure
        except EventRejected as exc:
            raise ApplicationError(
                str(exc), type="scheduled-rejected", non_retryable=True
            ) from None
        repeated = isinstance(checked, flowcore.ScheduledAddRequested)  # (answers its id)
        if probe.scheduled is not None and not probe.scheduled.done and not repeated:
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

    @workflow.query(name=PROGRESS_QUERY)
    def progress(self, start: int = 0) -> list[dict[str, Any]]:
        """The run's progress items from index ``start``, as log envelopes
        (``progress``: ``{key, step, data}``); when items from ``start`` on were
        dropped, a ``progress.dropped`` envelope (``{from, count}``) first."""
        found = [item for item in self._progress if item[0] >= start]
        out: list[Record] = []
        if found and found[0][0] > start:
            first, at = found[0][0], found[0][1]
            gap = {"from": start, "count": first - start}
            out.append(Record("progress.dropped", first - 1, self._run_id, at, gap))
        for index, at, key, step, data, _ in found:
            item = {"key": key, "step": step, "data": data}
            out.append(Record("progress", index, self._run_id, at, item))
        wire: list[dict[str, Any]] = msgspec.to_builtins(out)
        return wire

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


def _progress_batch(data: Any) -> list[tuple[int, str, str | None, Any, int]]:
    """The items of a ``PROGRESS_SIGNAL`` batch, each (at, key, step, data, size);
    else ``_Refused`` saying what is wrong."""
    if not isinstance(data, dict) or not isinstance(data.get("items"), list):
        raise _Refused("a progress batch is an object with a list of items")
    key, step = data.get("key"), data.get("step")
    if not isinstance(key, str) or not (step is None or isinstance(step, str)):
        raise _Refused("a progress batch names its work's key and step as text")
    out = []
    for item in data["items"]:
        if not (
            isinstance(item, list)
            and len(item) == 2
            and type(item[0]) is int
            and isinstance(item[1], str)
        ):
            raise _Refused("a progress item is [at, JSON text]")
        try:
            value = msgspec.json.decode(item[1])
            flowcore.check_data(value)
        except (msgspec.DecodeError, flowcore.DataError) as exc:
            raise _Refused(f"a progress item is not flowcore data: {clip(str(exc), 200)}") from None
        out.append((item[0], key, step, value, len(item[1].encode())))
    return out
