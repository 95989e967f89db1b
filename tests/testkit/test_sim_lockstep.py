"""The simulator's work done once (``simulation``, ``recorder``, ``checks``) in
lockstep with the plain path it replaced: the same trajectory, the same log,
the same histories, byte for byte; and counts of what is no longer done twice.

``_PlainSimulation`` is the driving loop as it was written before: an agenda
of comparable entries, a ``Call`` for every handler, a handler's output
checked again after ``result_event`` and copied in a second pass, each effect
and event turned into wire form on its own (``_PlainRecorder``). Only what
changed is kept here; the rest of the loop is shared.
"""

from __future__ import annotations

import gc
import heapq
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import flowcore
from flowcore._data import DataError, check_data, quick_json
from flowcore.decision.interp import Decision
from flowcore.decision.outcome import NO_USAGE
from flowcore.decision.snapshot import encode_state
from flowcore.decision.waiting import work_place
from flowcore.decision.wire import (
    CallTool,
    CancelRequested,
    Effect,
    EffectFailed,
    EffectOutcomeUnknown,
    EffectSucceeded,
    ErrorInfo,
    Event,
    RunAgent,
    RunTeam,
    Settled,
    TimerFired,
    UpdateRequested,
    Usage,
    effect_to_wire,
    event_to_wire,
    result_event,
)
from flowcore.log import recorder as recorder_module
from flowcore.log.record_types import EFFECT_EMITTED, EVENT_REPORTED, RUN_SETTLED, Record
from flowcore.log.recorder import Recorder, settled_record_data
from flowcore.testing import (
    Call,
    Fail,
    Fault,
    Hang,
    HeartbeatTimeout,
    Ok,
    Responses,
    Simulator,
    Trajectory,
    Unknown,
    check_trajectory,
    faults,
    flow_inputs,
    flows,
)
from flowcore.testkit import checks as checks_module
from flowcore.testkit import history as history_module
from flowcore.testkit import simulation
from flowcore.testkit.history import Stop
from flowcore.testkit.script import Response, SimulationError
from flowcore.testkit.simulation import _RESPONSES, _Simulation, _Slot, _stalled
from flowcore.testkit.vocabulary import CHILD_SPEC

# --- the plain path, as it was ------------------------------------------------------------


class _PlainDue:
    __slots__ = ("at", "event", "reorder", "run_id", "seq")

    def __init__(self, at: int, seq: int, run_id: str, event: Event, reorder: bool) -> None:
        self.at = at
        self.seq = seq
        self.run_id = run_id
        self.event = event
        self.reorder = reorder

    def __lt__(self, other: _PlainDue) -> bool:
        return (self.at, self.seq) < (other.at, other.seq)


def _plain_copy(value: Any, what: str = "a value") -> Any:
    try:
        check_data(value, "$", what)
    except DataError as exc:
        raise SimulationError(f"{what} is not flowcore data: {exc}") from None
    return msgspec.json.decode(msgspec.json.encode(value))


class _PlainRecorder(Recorder):
    """Each effect and event turned into wire form on its own."""

    def applied(self, event: Event, decision: Decision) -> list[Record]:
        at = event.at_ms
        out = [self._make(EVENT_REPORTED, at, event_to_wire(event))]
        out.extend(self._scheduled(decision, at))
        out.extend(self._effects(decision.effects, at, []))
        return out

    def _effects(
        self, effects: tuple[Effect, ...], at: int, wire: list[dict[str, Any]]
    ) -> list[Record]:
        out = [self._make(EFFECT_EMITTED, at, effect_to_wire(e)) for e in effects]
        for effect in effects:
            if isinstance(effect, Settled):
                out.append(self._make(RUN_SETTLED, at, settled_record_data(effect)))
        return out


class _PlainSimulation(_Simulation):
    agenda: Any

    def drain(self) -> Stop:
        """The agenda loop as it was (entries compared with ``__lt__``)."""
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
                due.reorder = False
                if self.agenda:
                    nxt = min(self.agenda)
                    self.seq += 1
                    due.seq = self.seq
                    if nxt.at > due.at:
                        due.at = nxt.at
                        due.event = msgspec.structs.replace(due.event, at_ms=nxt.at)
                heapq.heappush(self.agenda, due)
                continue
            slot = self.runs.get(due.run_id)
            if slot is None:
                raise SimulationError(f"run {due.run_id!r} has not started")
            if isinstance(due.event, TimerFired):
                key = due.event.idempotency_key
                if key not in slot.timers:
                    continue
                slot.timers.discard(key)
            self.now = max(self.now, due.at)
            if isinstance(due.event, UpdateRequested):
                self.request_update(slot, due.event)
                continue
            self.deliver(slot, due.event)
        return stop

    def push(self, at: int, run_id: str, event: Event, reorder: bool = False) -> None:
        self.seq += 1
        heapq.heappush(self.agenda, _PlainDue(at, self.seq, run_id, event, reorder))

    def pop(self) -> Any:
        order = self.sim.order
        first = heapq.heappop(self.agenda)
        if order is None or not self.agenda or self.agenda[0].at != first.at:
            return first
        ties = [first]
        while self.agenda and self.agenda[0].at == first.at:
            ties.append(heapq.heappop(self.agenda))
        if callable(order):
            pick = order(len(ties))
        elif self.choices < len(order):
            pick = order[self.choices]
        else:
            pick = 0
        self.choices += 1
        chosen = ties.pop(pick % len(ties))
        for other in ties:
            heapq.heappush(self.agenda, other)
        return chosen

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
                raise SimulationError(f"no {what} {target!r}")
            key = effect.idempotency_key
            place = work_place(slot.history.state, key)
            call = Call(
                effect,
                slot.run_id,
                key,
                target,
                _plain_copy(payload),
                n,
                self.now,
                place,
                world=self.asking,
            )
            response = self.respond(handler, call)
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
        if callable(handler) and not isinstance(handler, _RESPONSES):
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
        if isinstance(response, (Hang, HeartbeatTimeout)):
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
            event = result_event(key, response.output, usage, at_ms=at)
            if isinstance(event, EffectSucceeded):
                output = _plain_copy(response.output, f"the output for {key}")
                event = EffectSucceeded(idempotency_key=key, output=output, usage=usage, at_ms=at)
        elif isinstance(response, Fail):
            error = ErrorInfo(
                type=response.type,
                message=response.message,
                retryable=response.retryable,
                details=_plain_copy(response.details, f"the details for {key}"),
            )
            event = EffectFailed(idempotency_key=key, error=error, usage=response.usage, at_ms=at)
        else:
            event = EffectOutcomeUnknown(idempotency_key=key, at_ms=at)
        self.deliver_later(run_id, event, fault)


@contextmanager
def _plain_path() -> Iterator[None]:
    """The simulation module's copy and recorder as they were, for one run."""
    mp = pytest.MonkeyPatch()
    try:
        mp.setattr(simulation, "_copy", _plain_copy)
        mp.setattr(simulation, "Recorder", _PlainRecorder)
        yield
    finally:
        mp.undo()


def _run_plain(world: Simulator, flow: flowcore.Flow, inp: Any) -> Trajectory:
    with _plain_path():
        return _PlainSimulation(world, 0).run(flow, inp, "run", None)


# --- a world with every kind of handler ---------------------------------------------------


def _echo(call: Call) -> Any:
    if call.kind == "run-agent":
        return Ok({"n": call.n, "in": call.input}, steps=call.n % 2, cost=call.n % 3)
    if call.n % 5 == 0:
        raise RuntimeError(f"call {call.n} broke")
    place = call.place
    return {"n": call.n, "input": call.input, "step": None if place is None else place.step}


def _humans(call: Call) -> Any:
    options = call.options
    return options[call.n % len(options)] if options else f"answer {call.n}"


def _world(injected: list[Fault], order: list[int]) -> Simulator:
    """Callables, canned answers, ``Responses`` mixing both, outputs that are data
    only after a walk (a tuple) or not data at all (an integer beyond 64 bits)."""
    return Simulator(
        tools={
            "read": {"v": 1},
            "put": Responses([Ok({"a": [1, 2]}, steps=1), _echo, (1, 2), Fail("boom", "no")]),
            "send": Responses([_echo, {"x": 2**70}, Unknown(), HeartbeatTimeout()]),
        },
        default=_echo,
        humans=_humans,
        subflows={"child": CHILD_SPEC},
        signals=[
            flowcore.testing.Signal("go", {"p": [1]}, at_ms=5),
            flowcore.testing.Signal("stop", at_ms=40_000, key="k"),
        ],
        faults=injected,
        order=order,
        paranoid=True,
        max_events=1_500,
    )


def _outcome(world: Simulator, flow: flowcore.Flow, inp: Any, plain: bool) -> Any:
    try:
        return _run_plain(world, flow, inp) if plain else world.run(flow, inp)
    except (SimulationError, flowcore.InputError) as exc:
        return (type(exc), str(exc))


def _assert_same(new: Trajectory, old: Trajectory) -> None:
    assert [str(e) for e in new.entries] == [str(e) for e in old.entries]
    assert new.entries == old.entries
    assert flowcore.encode_records(new.log) == flowcore.encode_records(old.log)
    assert new.log == old.log
    assert (new.status, new.stop, new.end_ms, new.settled) == (
        old.status,
        old.stop,
        old.end_ms,
        old.settled,
    )
    assert (new.usage, new.progress, new.refused) == (old.usage, old.progress, old.refused)
    assert list(new.histories) == list(old.histories)
    for run_id, h in new.histories.items():
        o = old.histories[run_id]
        assert len(h.turns) == len(o.turns)
        for a, b in zip(h.turns, o.turns, strict=True):
            assert (a.event, a.effects, a.rejected, a.scheduled, a.replies) == (
                b.event,
                b.effects,
                b.rejected,
                b.scheduled,
                b.replies,
            )
            assert (a.before, a.input_after) == (b.before, b.input_after)
            assert encode_state(a.state) == encode_state(b.state)
        assert h.log() == o.log()


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    spec=flows(),
    inp=flow_inputs(),
    injected=faults(),
    order=st.lists(st.integers(0, 5), max_size=8),
)
def test_the_simulator_gives_what_the_plain_path_gives_byte_for_byte(
    spec: dict[str, Any], inp: dict[str, Any], injected: list[Fault], order: list[int]
) -> None:
    flow = flowcore.parse_flow(spec)
    new = _outcome(_world(injected, order), flow, inp, plain=False)
    old = _outcome(_world(injected, order), flow, inp, plain=True)
    if isinstance(old, tuple) or isinstance(new, tuple):
        assert new == old
        return
    _assert_same(new, old)
    check_trajectory(new)  # every check, against the snapshots the run took


def test_the_plain_path_is_what_it_claims_to_be() -> None:
    """The reference really runs the old pieces (else the property compares the new
    path with itself)."""
    spec = {
        "flow": "f",
        "tools": {"read": {"class": "readonly"}, "put": {"class": "idempotent"}},
        "steps": [
            {"id": "a", "call_tool": {"tool": "read", "input": {"k": 1}}},
            {"id": "b", "call_tool": {"tool": "put", "input": "${steps.a.output}"}},
        ],
        "output": "${steps.b.output}",
    }
    flow = flowcore.parse_flow(spec)
    used: list[str] = []

    class Counting(_PlainSimulation):
        def drain(self) -> Stop:
            used.append("drain")
            return super().drain()

    with _plain_path():
        assert vars(simulation)["Recorder"] is _PlainRecorder
        Counting(_world([], []), 0).run(flow, None, "run", None)
    assert used == ["drain"]
    _assert_same(_world([], []).run(flow), _run_plain(_world([], []), flow, None))


# --- what is no longer done twice ---------------------------------------------------------


def test_each_state_is_snapshot_at_most_twice_by_a_checked_simulation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Paranoid mode snapshots a state before and after each ``advance`` it is
    given; ``check_determinism`` compares against that snapshot rather than
    taking another (the states it builds itself, replaying, once each)."""
    counts: dict[int, list[Any]] = {}

    def counting(state: Any) -> bytes:
        counts.setdefault(id(state), [state, 0])[1] += 1
        return encode_state(state)

    monkeypatch.setattr(history_module, "encode_state", counting)
    monkeypatch.setattr(checks_module, "encode_state", counting)
    flow = flowcore.parse_flow(_SPEC)
    t = _world([], []).run(flow)
    given: dict[int, int] = {}  # state id -> how many advances it was given
    for h in t.histories.values():
        for i, turn in enumerate(h.turns):
            given.setdefault(id(turn.state), 0)
            if turn.event is not None:
                given[id(h.turns[i - 1].state)] += 1
    check_trajectory(t)
    taken = {key: n for key, (_, n) in counts.items() if key in given}
    # Twice per advance; the check snapshots only a state never given to one
    # (the last of a run).
    assert taken == {key: 2 * n if n else 1 for key, n in given.items()}


def test_a_handler_s_output_is_checked_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """``result_event`` checks the output (a host's rule for unstorable values);
    the copy the run gets is not checked again on the way."""
    out = {"big": list(range(50))}
    seen: list[int] = []
    wire_quick = quick_json  # what both modules call
    sim_check = check_data

    def quick(value: Any, *args: Any) -> Any:
        if value is out:
            seen.append(1)
        return wire_quick(value, *args)

    def check(value: Any, *args: Any) -> None:
        if value is out:
            seen.append(1)
        sim_check(value, *args)

    monkeypatch.setattr(flowcore.decision.wire, "quick_json", quick)
    monkeypatch.setattr(simulation, "check_data", check)
    monkeypatch.setattr(simulation, "quick_json", quick, raising=False)
    spec = {"flow": "f", "tools": {"t": {}}, "steps": [{"id": "a", "call_tool": {"tool": "t"}}]}
    t = Simulator(tools={"t": lambda call: out}).run(spec)
    assert t.output is None and t.status == "completed"
    assert t.events()[0] == EffectSucceeded(idempotency_key="run/a#1", output=out, at_ms=1)
    assert len(seen) == 1


def test_an_answer_given_in_advance_is_given_without_a_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only a callable handler reads the ``Call``: for a canned answer none is
    built (nor its copy of the input, nor where the work stands)."""
    made: list[Call] = []

    def counting(*args: Any, **kwargs: Any) -> Call:
        call = Call(*args, **kwargs)
        made.append(call)
        return call

    monkeypatch.setattr(simulation, "Call", counting)
    flow = flowcore.parse_flow(_SPEC)
    t = Simulator(tools={"read": {"v": 1}, "put": Responses([{"w": 2}])}).run(flow)
    assert t.status == "completed"
    assert made == []
    # A callable still gets its call, with the input as a fresh copy.
    t = Simulator(tools={"read": lambda c: c.input, "put": Responses([lambda c: c.n])}).run(flow)
    assert sorted(c.target for c in made) == ["put", "read", "read"]
    assert made[0].input == {"k": 1} and t.output == 1


def test_a_state_replaced_after_its_snapshot_is_snapshot_again() -> None:
    """The snapshot paranoid mode took is used only for the very state it was
    taken of: a history whose turn was replaced is checked against the new state."""
    flow = flowcore.parse_flow(_SPEC)
    h = _world([], []).run(flow).histories["run"]
    turn = h.turns[1]
    edited = msgspec.structs.replace(turn.state, now_ms=turn.state.now_ms + 1)
    h.turns[1] = msgspec.structs.replace(turn, state=edited)
    with pytest.raises(AssertionError, match="state snapshot differs in a second run"):
        checks_module.check_determinism(h)


def test_the_recorder_turns_a_decision_into_wire_form_as_each_item_alone_would() -> None:
    flow = flowcore.parse_flow(_SPEC)
    t = Simulator(tools={"read": {"v": 1}, "put": lambda call: call.input}).run(flow)
    h = t.histories["run"]
    plain = _PlainRecorder("run")
    first = h.turns[0]
    want = plain.started(flow, None, 0, Decision(first.state, first.effects))
    for turn in h.turns[1:]:
        assert turn.event is not None
        want += plain.applied(turn.event, Decision(turn.state, turn.effects))
    assert flowcore.encode_records(t.log) == flowcore.encode_records(want)
    assert recorder_module._wire_forms((CancelRequested(reason="r", at_ms=3),)) == [
        event_to_wire(CancelRequested(reason="r", at_ms=3))
    ]


def test_a_simulation_s_turns_and_records_leave_the_garbage_collector_alone() -> None:
    """A run's turns and log records hold no cycles: the collector does not
    walk them (it ran for every few hundred of them)."""
    t = _world([], []).run(flowcore.parse_flow(_SPEC))
    turns = t.histories["run"].turns
    assert turns and t.log
    assert not any(gc.is_tracked(x) for x in (*turns, *t.log))


_SPEC: dict[str, Any] = {
    "flow": "f",
    "tools": {"read": {"class": "readonly"}, "put": {"class": "idempotent"}},
    "steps": [
        {"id": "a", "call_tool": {"tool": "read", "input": {"k": 1}}},
        {"id": "nap", "sleep": {"for_ms": 10}},
        {
            "id": "both",
            "parallel": {
                "branches": {
                    "x": [{"id": "b", "call_tool": {"tool": "put", "input": "${steps.a.output}"}}],
                    "y": [{"id": "c", "call_tool": {"tool": "read", "input": 2}}],
                }
            },
        },
    ],
    "output": "${steps.b.output}",
}
