"""The driving loop of a simulation: the agenda of due events in virtual time,
the runs it drives (a root run and its children), and how each effect is
executed by asking the script. ``simulator`` describes the simulator.

This module must never do I/O, read a clock or draw a random number: the only
nondeterminism is what the caller passes in.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeAlias, assert_never

import msgspec

from .._data import DataError, check_data, quick_json
from .._errors import UpdateRefused
from ..decision.interp import Decision, InputError, start, validate_update
from ..decision.keys import parse_key
from ..decision.outcome import NO_USAGE, effect_tag
from ..decision.plan import plan
from ..decision.state import State
from ..decision.transitions import HEARTBEAT_TIMEOUT
from ..decision.updates import update_of
from ..decision.waiting import waiting_for, work_place
from ..decision.wire import (
    AskHuman,
    AwaitSignal,
    BudgetRemaining,
    CallTool,
    CancelRequested,
    ContinueAsNew,
    EffectFailed,
    EffectOutcomeUnknown,
    EffectSucceeded,
    ErrorInfo,
    Event,
    HumanAnswered,
    RunAgent,
    RunSubflow,
    RunTeam,
    Settled,
    SignalReceived,
    SignalRun,
    Sleep,
    SubflowSettled,
    TimerFired,
    UpdateRequested,
    Usage,
    result_event,
)
from ..language.spec import Budget, Flow
from ..log.fork import Fork
from ..log.records import Record, Recorder, budget_from_wire
from .asking import Asking
from .history import Entry, RunHistory, Stop, Trajectory, Turn, UsageLine, UsageReport
from .script import (
    Call,
    Fail,
    Fault,
    Hang,
    HeartbeatTimeout,
    Ok,
    Refusal,
    Response,
    Responses,
    SimulationError,
    Unknown,
)

if TYPE_CHECKING:
    from .simulator import Simulator


class _Slot:
    """A run inside a simulation, and what its host knows about it."""

    __slots__ = (
        "awaiting",
        "children",
        "detached",
        "flow",
        "history",
        "key",
        "parent",
        "recorder",
        "run_id",
        "timers",
    )

    def __init__(
        self, flow: Flow, run_id: str, history: RunHistory, parent: str | None, key: str | None
    ) -> None:
        self.flow = flow
        self.run_id = run_id
        self.history = history
        self.recorder = Recorder(run_id)
        self.parent = parent
        self.key = key
        # run-subflow keys whose child's settlement this run waits for, and
        # the fault (if any) that shapes that answer.
        self.awaiting: dict[str, Fault | None] = {}
        self.children: list[str] = []
        self.detached: set[str] = set()  # children left to run on (parent_close: abandon)
        self.timers: set[str] = set()  # keys of the timers armed and not fired or dropped

    @property
    def state(self) -> State:
        return self.history.state


class _Due:
    __slots__ = ("at", "event", "reorder", "run_id", "seq")

    def __init__(self, at: int, seq: int, run_id: str, event: Event, reorder: bool) -> None:
        self.at = at
        self.seq = seq
        self.run_id = run_id
        self.event = event
        self.reorder = reorder


# The agenda is a heap of (at, seq, due): ordered by its key alone (seq is
# unique), compared as tuples without calling back into Python.
_Agenda: TypeAlias = list[tuple[int, int, _Due]]


class _Simulation:
    def __init__(self, sim: Simulator, now_ms: int) -> None:
        self.sim = sim
        self.now = now_ms
        self.agenda: _Agenda = []
        self.seq = 0
        self.runs: dict[str, _Slot] = {}
        self.entries: list[Entry] = []
        self.log: list[Record] = []
        self.count = 0
        self.calls: dict[str, int] = {}
        self.choices = 0
        self.agent_effects: dict[str, RunAgent] = {}
        self.by_member: dict[str, list[int]] = {}
        self.by_agent: dict[str, list[int]] = {}
        self.delivered: set[str] = set()  # signal-run keys delivered
        # Work of cancellation wait-cancellation-completed that never answers
        # (Hang), by (run, key): cancelled, it reports that it stopped.
        self.hung: dict[tuple[str, str], CallTool | RunAgent | RunTeam] = {}
        self.asking = Asking(self)  # what handlers ask of their runs through their Call
        self.refused: list[Refusal] = []  # update requests a run refused

    # --- the loop ---------------------------------------------------------------------------

    def run(
        self,
        flow: Flow,
        input: Any,
        run_id: str,
        budget: Budget | BudgetRemaining | None,
        metadata: Mapping[str, Any] | None = None,
        forked: Fork | None = None,
    ) -> Trajectory:
        sim = self.sim
        if forked is None:
            root = self.start_run(flow, input, run_id, budget, 0, None, None, metadata)
        else:
            root = self.start_fork(flow, forked)
        for signal in sim.signals:
            target = signal.run_id or run_id
            event = SignalReceived(
                signal=signal.name,
                payload=signal.payload,
                at_ms=max(signal.at_ms, self.now),
                key=signal.key,
            )
            self.push(event.at_ms, target, event)
        if sim.cancel_at_ms is not None:
            at = max(sim.cancel_at_ms, self.now)
            self.push(at, run_id, CancelRequested(reason="cancel requested", at_ms=at))
        for outside in sim.events:
            at = max(outside.at_ms, self.now)
            self.push(at, run_id, msgspec.structs.replace(outside, at_ms=at))
        for n, update in enumerate(sim.updates, 1):
            at = max(update.at_ms, self.now)
            request = UpdateRequested(
                update_id=update.update_id or f"u{n}",
                name=update.name,
                input=_copy(update.input, f"the input of update {update.name!r}"),
                principal=update.principal,
                at_ms=at,
            )
            self.push(at, update.run_id or run_id, request)
        stop = self.drain()
        root_state = root.state
        if root_state.settled is not None and stop == "idle":
            stop = "settled"
        used = waiting_for(root_state)
        return Trajectory(
            run_id=run_id,
            status=root_state.status,
            settled=root_state.settled,
            stop=stop,
            end_ms=self.now,
            entries=tuple(self.entries),
            log=tuple(self.log),
            usage=UsageReport(
                steps=used.used_steps,
                cost_minor_units=used.used_cost_minor_units,
                by_member={k: UsageLine(*v) for k, v in sorted(self.by_member.items())},
                by_agent={k: UsageLine(*v) for k, v in sorted(self.by_agent.items())},
            ),
            histories={rid: slot.history for rid, slot in self.runs.items()},
            progress={rid: tuple(items) for rid, items in self.asking.progress.items()},
            refused=tuple(self.refused),
        )

    def drain(self) -> Stop:
        """Deliver what is due, in order, until nothing is (or a bound is reached)."""
        sim = self.sim
        stop: Stop = "idle"
        while self.agenda:
            if self.count >= sim.max_events:
                stop = "max-events"
                break
            due = self.pop()
            if sim.until_ms is not None and due.at > sim.until_ms:
                stop = "horizon"
                break
            if due.reorder:
                # Out of order: let the next delivery overtake this one.
                due.reorder = False
                if self.agenda:
                    nxt_at = self.agenda[0][0]
                    self.seq += 1
                    due.seq = self.seq
                    if nxt_at > due.at:
                        due.at = nxt_at
                        due.event = msgspec.structs.replace(due.event, at_ms=nxt_at)
                heapq.heappush(self.agenda, (due.at, due.seq, due))
                continue
            slot = self.runs.get(due.run_id)
            if slot is None:
                raise SimulationError(
                    f"{due.event.__struct_config__.tag} at t={due.at} is addressed to run "
                    f"{due.run_id!r}, which has not started"
                )
            if isinstance(due.event, TimerFired):
                key = due.event.idempotency_key
                if key not in slot.timers:
                    continue  # disarmed
                slot.timers.discard(key)
            self.now = max(self.now, due.at)
            if isinstance(due.event, UpdateRequested):
                self.request_update(slot, due.event)
                continue
            self.deliver(slot, due.event)
        return stop

    def push(self, at: int, run_id: str, event: Event, reorder: bool = False) -> None:
        self.seq += 1
        heapq.heappush(self.agenda, (at, self.seq, _Due(at, self.seq, run_id, event, reorder)))

    def pop(self) -> _Due:
        order = self.sim.order
        first = heapq.heappop(self.agenda)[2]
        if order is None or not self.agenda or self.agenda[0][0] != first.at:
            return first
        ties = [first]
        while self.agenda and self.agenda[0][0] == first.at:
            ties.append(heapq.heappop(self.agenda)[2])
        if callable(order):
            pick = order(len(ties))
        elif self.choices < len(order):
            pick = order[self.choices]
        else:
            pick = 0
        self.choices += 1
        chosen = ties.pop(pick % len(ties))
        for other in ties:
            heapq.heappush(self.agenda, (other.at, other.seq, other))
        return chosen

    # --- runs -------------------------------------------------------------------------------

    def start_run(
        self,
        flow: Flow,
        input: Any,
        run_id: str,
        budget: Budget | BudgetRemaining | None,
        depth: int,
        parent: str | None,
        key: str | None,
        metadata: Mapping[str, Any] | None = None,
    ) -> _Slot:
        d = start(
            flow,
            input,
            run_id=run_id,
            now_ms=self.now,
            budget=budget,
            depth=depth,
            metadata=metadata,
        )
        history = RunHistory(flow, input, run_id, self.now, budget, depth, metadata=metadata)
        history.turns.append(Turn(None, d.effects, d.state))
        history.continued(self.now)
        slot = _Slot(flow, run_id, history, parent, key)
        self.runs[run_id] = slot
        self.log.extend(slot.recorder.started(flow, input, self.now, d, budget, depth, metadata))
        self.execute(slot, d)
        return slot

    def start_fork(self, flow: Flow, forked: Fork) -> _Slot:
        """A fork's root run: its carried log, then only what is open at its end."""
        first = forked.records[0]
        data = first.data if isinstance(first.data, dict) else {}
        budget = budget_from_wire(data.get("budget"))
        depth = data.get("depth", 0)
        history = RunHistory(flow, data.get("input"), forked.run_id, first.at, budget, depth)
        history.turns.append(Turn(None, forked.pending, forked.state))
        slot = _Slot(flow, forked.run_id, history, None, None)
        slot.recorder = Recorder(forked.run_id, len(forked.records))
        self.runs[forked.run_id] = slot
        self.log.extend(forked.records)
        self.execute(slot, Decision(forked.state, forked.pending))
        return slot

    def deliver(self, slot: _Slot, event: Event, asked: bool = False) -> Turn:
        """Report ``event`` to the run and carry its decision out. ``asked``: a
        handler's request, of which a rejected one leaves nothing (its turn is
        returned for ``Asking`` to refuse)."""
        turn = slot.history.record(event, self.sim.paranoid, keep_rejected=not asked)
        if turn.rejected is not None and asked:
            return turn
        self.count += 1
        if turn.rejected is not None:
            self.entries.append(
                Entry(event.at_ms, slot.run_id, "rejected", event=event, reason=turn.rejected)
            )
            self.log.extend(slot.recorder.rejected(event, turn.rejected))
            return turn
        self.entries.append(Entry(event.at_ms, slot.run_id, "event", event=event))
        decision = Decision(turn.state, turn.effects)
        self.log.extend(slot.recorder.applied(event, decision))
        if isinstance(event, (EffectSucceeded, EffectFailed)):
            self.charge_agent(event)
        self.execute(slot, decision)
        return turn

    def request_update(self, slot: _Slot, event: UpdateRequested) -> None:
        """As a host does: an id the run holds is answered from it (nothing is
        reported); a request the run refuses leaves nothing but a ``Refusal``."""
        state = slot.state
        if update_of(state, event.update_id) is not None:
            return
        try:
            validate_update(state, event.name, event.input, event.principal)
        except UpdateRefused as exc:
            self.refuse(slot, event, exc.code, exc.reason)
            return
        turn = self.deliver(slot, event, asked=True)
        if turn.rejected is not None:
            self.refuse(slot, event, None, turn.rejected)

    def refuse(self, slot: _Slot, event: UpdateRequested, code: str | None, reason: str) -> None:
        self.refused.append(
            Refusal(event.update_id, event.name, code, reason, slot.run_id, event.at_ms)
        )

    def execute(self, slot: _Slot, decision: Decision) -> None:
        todo = plan(decision)
        slot.detached.update(todo.detach)
        for key in todo.cancel:  # a hung handler told to stop stops, as on every host
            hung = self.hung.pop((slot.run_id, key), None)
            if hung is not None:
                message = f"{effect_tag(hung)} {key} stopped when cancelled"
                error = ErrorInfo(type="cancelled", message=message)
                self.push(
                    self.now,
                    slot.run_id,
                    EffectFailed(idempotency_key=key, error=error, at_ms=self.now),
                )
        slot.timers.difference_update(todo.drop)
        slot.timers.update(sleep.idempotency_key for sleep in todo.arm)
        effects = decision.effects
        for effect in effects:
            self.entries.append(Entry(self.now, slot.run_id, "effect", effect=effect))
        # In the order emitted, not grouped as in the plan: what is due at one
        # instant arrives in that order. Abandoned work runs on (see above).
        for effect in effects:
            match effect:
                case Sleep():
                    at = max(effect.until_ms, self.now)
                    self.push(
                        at,
                        slot.run_id,
                        TimerFired(idempotency_key=effect.idempotency_key, at_ms=at),
                    )
                case AwaitSignal():
                    pass  # signals come from the script's schedule
                case AskHuman():
                    self.ask(slot, effect)
                case CallTool() | RunAgent() | RunTeam():
                    self.work(slot, effect)
                case RunSubflow():
                    self.subflow(slot, effect)
                case SignalRun():
                    self.signal_run(slot, effect)
                case Settled():
                    self.settled(slot, effect)
                case ContinueAsNew():
                    self.continued(slot, effect)
                case _:
                    assert_never(effect)

    # --- answering work -----------------------------------------------------------------------

    def next_call(self, target: str) -> int:
        n = self.calls.get(target, 0) + 1
        self.calls[target] = n
        return n

    def fault_for(self, target: str, n: int) -> Fault | None:
        for fault in self.sim.faults:
            if fault.matches(target, n):
                return fault
        return None

    def work(self, slot: _Slot, effect: CallTool | RunAgent | RunTeam) -> None:
        sim = self.sim
        if isinstance(effect, CallTool):
            target, table, what, payload = effect.tool, sim.tools, "tool", effect.input
        elif isinstance(effect, RunAgent):
            target, table, what, payload = effect.agent_id, sim.agents, "agent", effect.prompt
            self.agent_effects[effect.idempotency_key] = effect
            self.charge_line(effect, 1, 1, 0)
        else:
            target, table, what, payload = effect.team_id, sim.teams, "team", effect.prompt
        n = self.next_call(target)
        fault = self.fault_for(target, n)
        if fault is not None and fault.kind in ("fail", "fail-retryable"):
            response: Response = Fail(
                fault.error_type,
                f"injected fault on call {n} of {target}",
                retryable=fault.kind == "fail-retryable",
            )
        else:
            handler = table.get(target, sim.default)
            if handler is None:
                raise SimulationError(
                    f"no {what} {target!r} in the script (for {effect.idempotency_key}); "
                    f"script it with {what}s={{{target!r}: ...}} or pass default="
                )
            if isinstance(handler, Responses):
                handler = handler.pick(n)
            if _asks(handler):
                key = effect.idempotency_key
                place = work_place(slot.history.state, key)
                call = Call(
                    effect,
                    slot.run_id,
                    key,
                    target,
                    _copy(payload),
                    n,
                    self.now,
                    place,
                    world=self.asking,
                )
                response = self.respond(handler, call)
            else:  # an answer given in advance reads no call: none is made
                _check(payload)
                response = handler if isinstance(handler, _RESPONSES) else Ok(handler)
            if fault is not None and fault.kind == "unknown":
                response = Unknown()
            elif fault is not None and fault.kind == "hang":
                response = Hang()
            elif fault is not None and fault.kind == "heartbeat-timeout":
                response = HeartbeatTimeout({"call": n})
        if isinstance(response, HeartbeatTimeout):
            response = _stalled(effect, response, self.now)
        if isinstance(response, Hang) and effect.cancellation == "wait-cancellation-completed":
            self.hung[(slot.run_id, effect.idempotency_key)] = effect
        self.answer(slot.run_id, effect.idempotency_key, response, fault)

    def respond(self, handler: Any, call: Call) -> Response:
        if isinstance(handler, Responses):
            handler = handler.pick(call.n)
        if _asks(handler):
            try:
                handler = handler(call)
            except (AssertionError, SimulationError):
                raise
            except Exception as exc:
                return Fail(type(exc).__name__, str(exc))
        if isinstance(handler, _RESPONSES):
            return handler
        return Ok(handler)

    def answer(self, run_id: str, key: str, response: Response, fault: Fault | None) -> None:
        if isinstance(response, (Hang, HeartbeatTimeout)):  # work() turned the latter into others
            return
        delay = self.sim.latency_ms if response.delay_ms is None else response.delay_ms
        if fault is not None and fault.kind == "late":
            delay += fault.delay_ms
        at = self.now + delay
        event: Event
        if isinstance(response, Ok):
            usage: Usage | None = Usage(
                steps=response.steps,
                cost_minor_units=response.cost,
                tokens=response.tokens,
                tool_calls=response.tool_calls,
                turns=response.turns,
            )
            if usage == NO_USAGE:
                usage = None
            # What every host does with a handler's unstorable value. The
            # output is checked there, once: a succeeded event holds data,
            # of which the run gets a fresh copy.
            event = result_event(key, response.output, usage, at_ms=at)
            if isinstance(event, EffectSucceeded):
                event = msgspec.structs.replace(event, output=_fresh(response.output))
        elif isinstance(response, Fail):
            error = ErrorInfo(
                type=response.type,
                message=response.message,
                retryable=response.retryable,
                details=_copy(response.details, f"the details for {key}"),
            )
            event = EffectFailed(idempotency_key=key, error=error, usage=response.usage, at_ms=at)
        else:
            event = EffectOutcomeUnknown(idempotency_key=key, at_ms=at)
        self.deliver_later(run_id, event, fault)

    def deliver_later(self, run_id: str, event: Event, fault: Fault | None) -> None:
        kind = fault.kind if fault is not None else None
        self.push(event.at_ms, run_id, event, reorder=kind == "reorder")
        if kind == "duplicate":
            self.push(event.at_ms, run_id, event)

    def ask(self, slot: _Slot, effect: AskHuman) -> None:
        key = effect.idempotency_key
        step = parse_key(key, slot.run_id).step
        assert step is not None
        n = self.next_call(f"human:{step}")
        humans = self.sim.humans
        if humans is None:
            raise SimulationError(
                f"no human is scripted to answer {key} ({effect.question!r}); pass humans="
            )
        call = Call(effect, slot.run_id, key, step, effect.question, n, self.now)
        if isinstance(humans, Mapping):
            if step in humans:
                handler = humans[step]
            elif "*" in humans:
                handler = humans["*"]
            else:
                raise SimulationError(f"humans= has no answer for step {step!r} ({key})")
        else:
            handler = humans
        response = self.respond(handler, call)
        if isinstance(response, Hang):
            return
        if not isinstance(response, Ok):
            raise SimulationError(f"a human answers with a value or Hang(), not {response!r}")
        delay = self.sim.latency_ms if response.delay_ms is None else response.delay_ms
        answer = _copy(response.output, f"the answer for {key}")
        self.push(
            self.now + delay,
            slot.run_id,
            HumanAnswered(idempotency_key=key, answer=answer, at_ms=self.now + delay),
        )

    # --- signals to other runs -----------------------------------------------------------------

    def signal_run(self, slot: _Slot, effect: SignalRun) -> None:
        """Deliver the signal to a run of this simulation (the root or a child), once
        per idempotency key: a re-issue after an unknown outcome is not delivered
        again."""
        key = effect.idempotency_key
        target = self.runs.get(effect.run_id)
        response: Response
        # A host delivers it itself: the signal and the answer come at once.
        if key in self.delivered:
            response = Ok({"run_id": effect.run_id}, delay_ms=0)
        elif target is None:
            response = Fail("unknown-run", f"no run {effect.run_id!r} to signal", delay_ms=0)
        elif target.state.settled is not None:
            message = f"run {effect.run_id!r} has already settled"
            response = Fail("run-settled", message, delay_ms=0)
        else:
            self.delivered.add(key)
            event = SignalReceived(
                signal=effect.signal, payload=_copy(effect.payload), at_ms=self.now, key=effect.key
            )
            self.push(self.now, effect.run_id, event)
            response = Ok({"run_id": effect.run_id}, delay_ms=0)
        n = self.next_call(effect.signal)
        fault = self.fault_for(effect.signal, n)
        if fault is not None and fault.kind == "unknown":
            response = Unknown()
        self.answer(slot.run_id, key, response, None)

    # --- subflows -------------------------------------------------------------------------------

    def subflow(self, slot: _Slot, effect: RunSubflow) -> None:
        key = effect.idempotency_key
        n = self.next_call(effect.flow_id)
        fault = self.fault_for(effect.flow_id, n)
        kind = fault.kind if fault is not None else None
        if kind in ("fail", "fail-retryable"):
            assert fault is not None
            error = Fail(
                fault.error_type,
                f"injected fault on call {n} of {effect.flow_id}",
                retryable=kind == "fail-retryable",
            )
            self.answer(slot.run_id, key, error, fault)
            return
        if effect.detached:
            self.detached(slot, effect, kind)
            return
        slot.awaiting.pop(key, None)
        if kind not in ("unknown", "hang"):
            slot.awaiting[key] = fault
        child = self.runs.get(key)
        if child is None:
            flow = self.sim.subflows.get(effect.flow_id)
            if flow is None:
                raise SimulationError(
                    f"run-subflow {key} asks for flow {effect.flow_id!r}, which is not in "
                    f"subflows= ({sorted(self.sim.subflows)})"
                )
            try:
                self.start_run(
                    flow,
                    _copy(effect.input),
                    key,
                    effect.budget_remaining,
                    effect.depth,
                    slot.run_id,
                    key,
                )
            except InputError as exc:
                slot.awaiting.pop(key, None)
                self.answer(slot.run_id, key, Fail("input-rejected", str(exc)), None)
                return
            slot.children.append(key)
        elif child.state.settled is not None and key in slot.awaiting:
            self.report_child(child)
        if kind == "unknown":
            self.answer(slot.run_id, key, Unknown(), None)

    def detached(self, slot: _Slot, effect: RunSubflow, kind: str | None) -> None:
        """Start a detached child as a root run; its parent only hears that it started."""
        key = effect.idempotency_key
        if key not in self.runs:
            flow = self.sim.subflows.get(effect.flow_id)
            if flow is None:
                raise SimulationError(
                    f"run-subflow {key} asks for flow {effect.flow_id!r}, which is not in "
                    f"subflows= ({sorted(self.sim.subflows)})"
                )
            try:
                self.start_run(flow, _copy(effect.input), key, None, 0, None, None)
            except InputError as exc:
                self.answer(slot.run_id, key, Fail("input-rejected", str(exc)), None)
                return
        if kind == "unknown":
            self.answer(slot.run_id, key, Unknown(), None)
        elif kind != "hang":
            self.answer(slot.run_id, key, Ok({"run_id": key}), None)

    def settled(self, slot: _Slot, effect: Settled) -> None:
        if slot.key is not None:
            self.report_child(slot)
        for child_id in slot.children:
            child = self.runs[child_id]
            if child.state.settled is None and child_id not in slot.detached:
                event = CancelRequested(reason=f"parent run {slot.run_id} settled", at_ms=self.now)
                self.push(self.now, child_id, event)

    def continued(self, slot: _Slot, effect: ContinueAsNew) -> None:
        """Start the run's next incarnation at once, as every host does: no
        event can fall between the two. Children still running are cancelled."""
        for child_id in slot.children:
            child = self.runs[child_id]
            if child.state.settled is None:
                reason = f"parent run {slot.run_id} continued as new"
                self.push(self.now, child_id, CancelRequested(reason=reason, at_ms=self.now))
        slot.children = []
        slot.awaiting.clear()
        history = slot.history
        # The next incarnation's turn, which ``RunHistory.record`` appended.
        turn = next(
            t
            for t in reversed(history.turns)
            if t.event is None and t.state.incarnation == effect.incarnation
        )
        d = Decision(turn.state, turn.effects)
        self.log.extend(
            slot.recorder.started(
                slot.flow, effect.input, self.now, d, depth=history.depth, continued=effect
            )
        )
        self.execute(slot, d)

    def report_child(self, child: _Slot) -> None:
        assert child.parent is not None and child.key is not None
        parent = self.runs[child.parent]
        if child.key not in parent.awaiting or parent.state.settled is not None:
            return
        fault = parent.awaiting.pop(child.key)
        state = child.state
        assert state.settled is not None
        used = waiting_for(state)
        delay = self.sim.latency_ms
        if fault is not None and fault.kind == "late":
            delay += fault.delay_ms
        event = SubflowSettled(
            idempotency_key=child.key,
            status=state.settled.status,
            output=state.settled.output,
            usage=used.usage(),
            error=state.settled.error,
            at_ms=self.now + delay,
        )
        self.deliver_later(parent.run_id, event, fault)

    # --- usage ----------------------------------------------------------------------------------

    def charge_line(self, effect: RunAgent, effects: int, steps: int, cost: int) -> None:
        lines = [self.by_agent.setdefault(effect.agent_id, [0, 0, 0])]
        if effect.member is not None:
            lines.append(self.by_member.setdefault(effect.member, [0, 0, 0]))
        for line in lines:
            line[0] += effects
            line[1] += steps
            line[2] += cost

    def charge_agent(self, event: EffectSucceeded | EffectFailed) -> None:
        effect = self.agent_effects.get(event.idempotency_key)
        if effect is not None and event.usage is not None:
            self.charge_line(effect, 0, event.usage.steps, event.usage.cost_minor_units)


_RESPONSES = (Ok, Fail, Unknown, Hang, HeartbeatTimeout)


def _stalled(effect: CallTool | RunAgent | RunTeam, r: HeartbeatTimeout, now: int) -> Response:
    """What a host reports for work that stalled after its last heartbeat."""
    if effect.heartbeat_timeout_ms is None:
        return Hang()  # nothing watches it
    details = effect.heartbeat_details if r.details is None else r.details
    after = effect.heartbeat_timeout_ms
    message = f"no heartbeat within {after} ms"
    return Fail(HEARTBEAT_TIMEOUT, message, delay_ms=r.after_ms + after, details=details)


def _asks(handler: Any) -> bool:
    """Whether ``handler`` is called with the ``Call`` (else it is the answer)."""
    return callable(handler) and not isinstance(handler, _RESPONSES)


def _copy(value: Any, what: str = "a value") -> Any:
    """A fresh copy, as a JSON host would see it: handlers never share objects with the core.

    The check and the copy are one pass through JSON where the quick check
    vouches for the value (its bytes are what the copy is decoded from)."""
    data = quick_json(value)
    if data is not None:
        return _json_decode(data)
    _check(value, what)
    return _fresh(value)


def _check(value: Any, what: str = "a value") -> None:
    """Raise ``SimulationError`` unless ``value`` is flowcore data."""
    try:
        check_data(value, "$", what)
    except DataError as exc:
        raise SimulationError(f"{what} is not flowcore data: {exc}") from None


def _fresh(value: Any) -> Any:
    """A fresh copy of ``value``, which is flowcore data (checked where it entered)."""
    return msgspec.json.decode(msgspec.json.encode(value))


_json_decode = msgspec.json.Decoder().decode
