"""The simulator plays a vector: ``flowcore.testing.Simulator``, the in-process host.

The simulator runs the flow in virtual time from the recorded start and gets
every event from its own scripted world, each timed to arrive when the log
says:

- work results: the tool, agent and team handlers answer each issue of a key
  as the log did (``Ok`` with the output and usage, ``Fail``, ``Unknown``, or
  ``Hang`` when the log never answers), with ``delay_ms`` set so the answer
  arrives at the recorded time;
- ``human-answered``: the ``humans`` callable answers each question as the
  log did, at the recorded time (``Hang`` for one never answered);
- ``signal-received``: ``Signal`` entries at the recorded times;
  ``cancel-requested``: ``cancel_at_ms``; the scheduled-call events from
  outside: ``events``;
- ``timer-fired``: the simulator fires its own timers when they are due;
- ``subflow-settled``: children run from the small child specs, ending on a
  ``Signal`` sent to the child or when the child's call is answered; an
  unknown subflow outcome is a ``Fault("unknown")`` on that call of the flow,
  the simulator's ``latency_ms`` being its delay.

Its clock is virtual, so the effects and events must equal the recorded ones
exactly, ``untilMs`` and ``atMs`` included.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import flowcore
from flowcore.testing import (
    Call,
    Fail,
    Fault,
    Hang,
    HeartbeatTimeout,
    Ok,
    Signal,
    Simulator,
    Unknown,
)

from .vectors import RELEASE, SCHEDULED_KINDS, Outcome, Plan, Step, budget_of

NAME = "sim"
CLOCK = False  # a virtual clock: nothing to mask
CANCEL_REASON = "cancel requested"  # what Simulator(cancel_at_ms=...) always sends


class Refused(Exception):
    pass


def _issue_time(plan: Plan, turn: int) -> int:
    at: int = plan.origin if turn < 0 else plan.turns[turn].event["atMs"]
    return at


def _latency(plan: Plan) -> int:
    """The simulator's ``latency_ms``: the delay of every unknown subflow outcome."""
    delays = set()
    for turn in plan.turns:
        if turn.action == "terminate":
            ends = [t for t in plan.turns if t.key == turn.key and t.index <= turn.index]
            issued = plan.issues[turn.key][len(ends) - 1]
            delays.add(turn.event["atMs"] - _issue_time(plan, issued))
    if len(delays) > 1:
        raise Refused(
            f"unknown subflow outcomes after different delays ({sorted(delays)} ms): the"
            " simulator's latency_ms is one delay for all"
        )
    return delays.pop() if delays else 0


def prepare(plan: Plan) -> int:
    """The latency to simulate with; ``Refused`` when the simulator cannot record the log."""
    if plan.late is not None:
        raise Refused(f"{plan.late}; the simulator fires every timer when it is due")
    if plan.depth:
        raise Refused(
            f"the run starts at depth {plan.depth} (a child's): Simulator.run starts every"
            " root run at depth 0"
        )
    cancels = [t for t in plan.turns if t.action == "cancel"]
    for turn in cancels:
        reason = turn.event.get("reason", "")
        if reason != CANCEL_REASON:
            raise Refused(
                f"a cancel with reason {reason!r}: Simulator(cancel_at_ms=...) always sends"
                f" {CANCEL_REASON!r}"
            )
    if len(cancels) > 1:
        raise Refused("two cancels: Simulator(cancel_at_ms=...) sends one")
    latency = _latency(plan)
    for turn in plan.turns:
        if turn.event["kind"] == "subflow-settled":
            first = _issue_time(plan, plan.issues[turn.key][0])
            if turn.event["atMs"] - latency < first:
                raise Refused(
                    f"{turn.key} settles {turn.event['atMs'] - first} ms after it started,"
                    f" sooner than the simulator's latency of {latency} ms"
                )
    return latency


def refuse(plan: Plan) -> str | None:
    try:
        prepare(plan)
    except Refused as exc:
        return str(exc)
    return None


class _World:
    """The scripted world of one vector, as simulator handlers."""

    def __init__(self, plan: Plan, latency: int) -> None:
        self.plan = plan
        self.latency = latency
        self.issued: Counter[str] = Counter()
        self.asked: Counter[str] = Counter()
        self.children = {f"{key}/{step}#1" for key in plan.subflows for step in ("first", "answer")}

    def _delay(self, call: Call, at: int) -> int:
        delay = at - call.now_ms
        assert delay >= 0, f"{call.key} is answered at {at}, before it was issued at {call.now_ms}"
        return delay

    def work(self, call: Call) -> Any:
        key = call.key
        n = self.issued[key]
        self.issued[key] += 1
        steps = self.plan.work.get(key, [])
        step = steps[n] if n < len(steps) else Step("hang")
        if step.what == "hang":
            return Hang()
        if step.turn is None:
            at = call.now_ms
        else:
            at = self.plan.turns[step.turn].event["atMs"]
            if key in self.children:  # the parent hears of it latency_ms later
                at -= self.latency
        delay = self._delay(call, at)
        if step.what == "succeed":
            usage = step.usage or {}
            return Ok(
                step.output,
                steps=usage.get("steps", 0),
                cost=usage.get("costMinorUnits", 0),
                tokens=usage.get("tokens", 0),
                tool_calls=usage.get("toolCalls", 0),
                turns=usage.get("turns", 0),
                delay_ms=delay,
            )
        if step.what == "fail":
            error = step.error or {}
            beat = getattr(call.effect, "heartbeat_timeout_ms", None)
            if error.get("type") == "heartbeat-timeout" and beat is not None and delay >= beat:
                # The work went quiet: the simulator reports it one timeout later.
                return HeartbeatTimeout(error.get("details"), after_ms=delay - beat)
            return Fail(
                error.get("type", "error"),
                error.get("message", ""),
                error.get("retryable", False),
                delay_ms=delay,
                details=error.get("details"),
            )
        return Unknown(delay)

    def human(self, call: Call) -> Any:
        n = self.asked[call.key]
        self.asked[call.key] += 1
        answers = [t for t in self.plan.turns if t.action == "answer" and t.key == call.key]
        if n >= len(answers):
            return Hang()
        turn = answers[n]
        return Ok(turn.event.get("answer"), delay_ms=self._delay(call, turn.event["atMs"]))

    def signals(self) -> list[Signal]:
        out = []
        for turn in self.plan.turns:
            event = turn.event
            if turn.action == "signal":
                payload, at = event.get("payload"), event["atMs"]
                out.append(Signal(event["signal"], payload, at, key=event.get("key")))
            elif turn.action == "child-signal":
                at = event["atMs"] - self.latency
                out.append(Signal(RELEASE, event.get("output"), at, run_id=turn.key))
        return out

    def faults(self) -> list[Fault]:
        """``Fault("unknown")`` on each call of a flow whose outcome the log has unknown."""
        calls: Counter[str] = Counter()
        number: dict[tuple[str, int], int] = {}  # (key, issue) -> the call of its flow
        seen: Counter[str] = Counter()
        for effect in self.plan.effects:
            if effect["kind"] == "run-subflow":
                calls[effect["flowId"]] += 1
                key = effect["idempotencyKey"]
                number[(key, seen[key])] = calls[effect["flowId"]]
                seen[key] += 1
        out = []
        for turn in self.plan.turns:
            if turn.action == "terminate":
                ends = [t for t in self.plan.turns if t.key == turn.key and t.index <= turn.index]
                flow_id = self.plan.subflows[turn.key]
                out.append(Fault("unknown", flow_id, calls=(number[(turn.key, len(ends) - 1)],)))
        return out


async def play(plan: Plan, workdir: Path, server: str | None = None) -> Outcome:
    began = time.monotonic()
    latency = prepare(plan)
    world = _World(plan, latency)
    names = plan.names
    cancels = [t.event["atMs"] for t in plan.turns if t.action == "cancel"]
    sim = Simulator(
        tools={n: world.work for n in names["tools"]},
        agents={n: world.work for n in names["agents"]},
        teams={n: world.work for n in names["teams"]},
        humans=world.human,
        signals=world.signals(),
        subflows=plan.flows,
        faults=world.faults(),
        cancel_at_ms=cancels[0] if cancels else None,
        events=[
            flowcore.event_from_wire(t.event)
            for t in plan.turns
            if t.action in SCHEDULED_KINDS or t.action == "update"
        ],
        latency_ms=latency,
    )
    outcome = Outcome()
    try:
        trajectory = sim.run(
            plan.flow,
            plan.input,
            run_id=plan.run_id,
            now_ms=plan.origin,
            budget=budget_of(plan.budget),
            metadata=plan.metadata,
        )
    except Exception as exc:
        outcome.error = f"{type(exc).__name__}: {exc}"
    else:
        outcome.records = list(trajectory.log_of(plan.run_id))
        outcome.metadata = trajectory.metadata
    outcome.seconds = time.monotonic() - began
    return outcome
