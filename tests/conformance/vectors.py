"""The conformance vectors, and what any host must do to play one again.

A vector (``specs/conformance/<case>/``) is a flow, the log of one run of it
and what replaying that log must find. A host *plays* a vector when it runs
the flow again and every recorded event reaches the run the way that host
gets events: a handler's result, a timer, an answer, a signal, a cancel,
a child run that settles. The run must then emit the recorded effects.

This module is the part every host shares:

- ``plan_vector``: what a run would have to be told, in which order, to
  record the same log — the *turns* (one per reported event), what each
  handler answers on each issue of its key, the timers, the children (a small
  child spec per flow id that ends the way the recorded child did). A log no
  host can produce (divergent, torn, cut, corrupt) raises ``Unplayable``;
  facts only some hosts can produce (an event that arrives after a timer was
  due, an unknown outcome, a start with a parent's budget) are left in the
  plan for each player to judge.
- ``Script``: scripted handlers (a ``flowcore_handlers.Registry``) that answer
  each issue of a key as the log did, once the controller opens its turn.
- ``Player``: what each host's player offers (``play_*.py``).
- ``check_outcome``: what a played run must show: the recorded start, the
  recorded effects in order, the recorded events. Hosts with a real clock
  (Temporal) are compared without the fields that read it (``untilMs``,
  ``budgetRemaining.wallClockMs``, the events' ``atMs``).
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import msgspec

import flowcore
import flowcore_handlers
from flowcore import Budget, BudgetRemaining, Sleep, Usage
from flowcore_handlers import HandlerError, Registry, Result

ROOT = Path(__file__).resolve().parents[2]
VECTORS = ROOT / "specs" / "conformance"
CHILD_TOOL = "conformance.child"
RELEASE = "conformance-release"  # the signal a "signal"-shaped child waits for

WORK_KINDS = ("call-tool", "run-agent", "run-team")
SCHEDULED_KINDS = (
    "scheduled-cancel-requested",
    "scheduled-run-now-requested",
    "scheduled-add-requested",
    "scheduled-replay-requested",
)
API_KINDS = ("human-answered", "signal-received", "cancel-requested", *SCHEDULED_KINDS)
UPDATE = "update-requested"  # a caller's update: sent as it is (turn action "update")


class Unplayable(Exception):
    """No host could record this log again (the reason says why)."""


@dataclass
class Step:
    """What a handler does on one issue of its key: ``what`` once turn ``turn`` comes."""

    what: str  # succeed | fail | unknown | hang
    turn: int | None = None
    output: Any = None
    usage: dict[str, int] | None = None
    error: dict[str, Any] | None = None


@dataclass
class Turn:
    """One reported event of the log and how a host gets it."""

    index: int
    event: dict[str, Any]
    action: str  # release | timer | signal | answer | cancel | child-signal | terminate | host
    # | started (a detached child's start, which the host reports itself)
    # | a scheduled-call event's kind (scheduled-cancel-requested, ...): sent as it is
    # | update (an update-requested event: a caller's update, sent as it is)
    key: str = ""


@dataclass
class Timer:
    """A sleep effect of the run (a sleep, timeout, backoff, deadline, tick...)."""

    key: str
    until: int
    turn: int  # the turn whose decision emitted it (-1: the start)
    at: int  # when it was emitted
    end: int | None = None  # the turn after which the run no longer waited for it
    fired: bool = False


@dataclass
class Plan:
    """One vector, and what its run must be told to record the same log again."""

    name: str
    spec: str
    source_name: str
    flow: flowcore.Flow
    run_id: str
    started: dict[str, Any]  # the run.started record's data
    origin: int  # the run's start time
    turns: list[Turn]
    work: dict[str, list[Step]]  # work key -> what each issue does
    issues: dict[str, list[int]]  # work or run-subflow key -> emitting turn of each issue
    kinds: dict[str, str]  # key -> effect kind
    timers: dict[str, Timer]
    pending: list[frozenset[str]]  # keys pending after each decision: [start, turn 0, ...]
    subflows: dict[str, str]  # run-subflow key -> flow id
    flows: dict[str, str]  # child flow id -> the child spec
    names: dict[str, set[str]]  # tools, agents, teams the handlers answer for
    effects: list[dict[str, Any]]
    events: list[dict[str, Any]]
    rejected: list[tuple[int, dict[str, Any]]]  # (turns before it, event) per event.rejected
    settles: bool  # False: an in-flight run's log ends before run.settled
    late: str | None  # the first event that arrives after a pending timer was due
    # The first work result the log reports after the run stopped waiting for
    # the work (a host that cancels such work may never produce it); work of
    # cancellation: abandon is never cancelled, so its late result is not one.
    late_work: str | None = None
    # The run's metadata as it ended (expect.json; empty: none set).
    final_metadata: dict[str, Any] = field(default_factory=dict)
    # run-subflow keys of detached children: the host answers each once it has started
    # the child (turn action "started"), and nothing more comes of it.
    detached: set[str] = field(default_factory=set)

    @property
    def input(self) -> Any:
        return self.started.get("input")

    @property
    def budget(self) -> dict[str, int] | None:
        budget: dict[str, int] | None = self.started.get("budget")
        return budget

    @property
    def depth(self) -> int:
        depth: int = self.started.get("depth", 0)
        return depth

    @property
    def metadata(self) -> dict[str, Any] | None:
        """The metadata the run was started with (None: none)."""
        metadata: dict[str, Any] | None = self.started.get("metadata")
        return metadata

    def pending_after(self, turn: int) -> frozenset[str]:
        """Keys the run waits for after the decision of ``turn`` (-1: the start)."""
        return self.pending[turn + 1]


@dataclass
class Outcome:
    """What a host recorded for the run (its own log) and whatever went wrong."""

    records: list[flowcore.Record] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0
    # The run's metadata as the host indexes it once the run ended (None: not read).
    metadata: dict[str, Any] | None = None


class Player(Protocol):
    """What each host's player module (``play_sim``, ``play_local``, ``play_temporal``) offers."""

    NAME: str  # the host, as test ids name it
    CLOCK: bool  # the host reads a real clock: compare without its readings

    def refuse(self, plan: Plan) -> str | None:
        """Why the host cannot record this log again (None: it can)."""

    async def play(self, plan: Plan, workdir: Path, server: str | None = None) -> Outcome:
        """Run the plan's flow on the host, each event produced as the host produces events.

        ``workdir`` is the player's own directory; ``server`` the address of the
        host's server, for a host that needs one (Temporal).
        """


# --- loading and planning ------------------------------------------------------------------


def cases() -> list[str]:
    return sorted(p.name for p in VECTORS.iterdir() if p.is_dir()) if VECTORS.exists() else []


def budget_of(data: dict[str, int] | None) -> Budget | BudgetRemaining | None:
    """The budget a run.started record shows, as ``flowcore.start`` takes it."""
    if data is None:
        return None
    cost, wall = data.get("costMinorUnits"), data.get("wallClockMs")
    if "steps" in data:
        return BudgetRemaining(steps=data["steps"], cost_minor_units=cost, wall_clock_ms=wall)
    budget: Any = Budget(cost_minor_units=cost, wall_clock_ms=wall)  # type: ignore[arg-type]
    return budget  # type: ignore[no-any-return]


def child_spec(flow_id: str, shape: str) -> str:
    """A child flow that ends as a recorded child did: on a signal, or after one or two calls."""
    if shape == "signal":
        steps = f"  - id: answer\n    await_signal: {{signal: {RELEASE}}}\n"
        tools = ""
    else:
        steps = f"  - id: answer\n    call_tool: {{tool: {CHILD_TOOL}}}\n"
        if shape == "call-fail":
            steps = f"  - id: first\n    call_tool: {{tool: {CHILD_TOOL}}}\n" + steps
        tools = f"tools: {{{CHILD_TOOL}: {{class: readonly}}}}\n"
    return f"flow: {flow_id}\n{tools}steps:\n{steps}output: '${{steps.answer.output}}'\n"


def _child_shape(status: str, usage: dict[str, int] | None) -> str:
    steps = (usage or {}).get("steps", 0)
    cost = (usage or {}).get("costMinorUnits", 0)
    if status == "completed":
        return "call" if steps >= 1 else "signal" if cost == 0 else ""
    if status == "failed":
        return "call" if steps == 1 and cost == 0 else "call-fail" if steps >= 2 else ""
    return ""


def waits(state: flowcore.State) -> frozenset[str]:
    """The keys the run waits for: work out at the host, questions, signal waits, timers."""
    view = flowcore.waiting_for(state)
    keys = {w.key for w in view.work if not w.held}  # held back: not emitted yet
    keys.update(q.key for q in view.questions)
    keys.update(s.key for s in view.signals)
    keys.update(t.key for t in view.timers)
    return frozenset(keys)


def plan_vector(path: Path) -> Plan:
    """What a run of ``path``'s flow must be told to record its log (``Unplayable``: none can)."""
    expect = (
        json.loads((path / "expect.json").read_text()) if (path / "expect.json").exists() else {}
    )
    if not (path / "log.ndjson").exists():
        raise Unplayable("no log.ndjson")
    if expect.get("error"):
        raise Unplayable(f"a {expect['error']} log: nothing for a host to produce")
    if expect.get("replays") is not True or expect.get("divergenceIndex") is not None:
        raise Unplayable("a divergent log: nothing for a host to produce")
    if expect.get("tornOffset") is not None:
        raise Unplayable("a torn log: the run it records is incomplete")
    if expect.get("unrecorded"):
        raise Unplayable("a cut log (it ends inside a decision): the run it records is incomplete")
    if expect.get("upgradedAt") is not None:
        raise Unplayable(
            "an upgraded run's log: recorded with recorded.yaml, then flow.yaml; a host moves"
            " a run with its own upgrade"
            " (LocalHost.upgrade: tests/local/client/test_local_upgrade.py)"
        )
    spec_path = path / "recorded.yaml" if (path / "recorded.yaml").exists() else path / "flow.yaml"
    spec = spec_path.read_text()
    source_name = f"{path.name}/{spec_path.name}"
    flow = flowcore.parse_flow(spec, source_name=source_name)
    log = flowcore.decode_log((path / "log.ndjson").read_bytes())
    records = list(log.records)
    if log.torn is not None or not records or records[0].type != "run.started":
        raise Unplayable("not a complete log")
    if len({r.run_id for r in records}) != 1:
        raise Unplayable("a log of several runs")
    started = records[0].data
    if isinstance(started, dict) and "forkedFrom" in started:
        raise Unplayable(
            "a fork's log: a host makes one from its source run's log (LocalHost.fork,"
            " TemporalHost.fork, Simulator.fork; tests/log/test_fork.py and the hosts' fork tests)"
        )
    run_id, origin = records[0].run_id, records[0].at
    events = [r.data for r in records if r.type == "event.reported"]
    effects = [r.data for r in records if r.type == "effect.emitted"]
    rejected: list[tuple[int, dict[str, Any]]] = []
    seen = 0
    for record in records:
        if record.type == "event.reported":
            seen += 1
        elif record.type == "event.rejected":
            rejected.append((seen, record.data["event"]))

    decision = flowcore.start(
        flow,
        started.get("input"),
        run_id,
        now_ms=origin,
        budget=budget_of(started.get("budget")),
        depth=started["depth"],
        metadata=started.get("metadata"),
    )
    state = decision.state
    timers: dict[str, Timer] = {}
    issues: dict[str, list[int]] = {}
    kinds: dict[str, str] = {}
    subflows: dict[str, str] = {}
    detached: set[str] = set()
    let_go: set[str] = set()  # children of parent_close: abandon, which run on
    runs_on: set[str] = set()  # work of cancellation: abandon, never cancelled by any host
    waiting = waits(state)
    pending = [waiting]

    sends: dict[str, dict[str, Any]] = {}  # signal-run key -> the effect, until answered

    def emitted(effects_: tuple[flowcore.Effect, ...], turn: int, at: int) -> None:
        for effect in effects_:
            wire = flowcore.effect_to_wire(effect)
            key = wire.get("idempotencyKey", "")
            kinds[key] = wire["kind"]
            if wire["kind"] == "signal-run":
                sends[key] = wire
            if isinstance(effect, Sleep):
                timers[key] = Timer(key, effect.until_ms, turn, at)
            elif wire["kind"] in (*WORK_KINDS, "run-subflow"):
                issues.setdefault(key, []).append(turn)
                if wire.get("cancellation") == "abandon":
                    runs_on.add(key)
                if wire["kind"] == "run-subflow":
                    subflows[key] = wire["flowId"]
                    if wire.get("detached"):
                        detached.add(key)
                    if wire.get("parentClose") == "abandon":
                        let_go.add(key)

    emitted(decision.effects, -1, origin)
    while (continued := flowcore.plan(decision).continued) is not None:  # at once, at start
        decision = flowcore.continue_run(flow, continued, run_id, origin, state.run.depth)
        state = decision.state
        emitted(decision.effects, -1, origin)
    waiting = waits(state)
    pending = [waiting]
    turns: list[Turn] = []
    work: dict[str, list[Step]] = {}
    outcomes: dict[str, list[tuple[int, dict[str, Any]]]] = {}  # subflow key -> its outcomes
    late: str | None = None
    late_work: str | None = None
    for t, event in enumerate(events):
        kind, key, at = event["kind"], event.get("idempotencyKey", ""), event["atMs"]
        for tkey, timer in timers.items():
            if late is None and timer.end is None and tkey in waiting and timer.until <= at:
                if not (kind == "timer-fired" and key == tkey):
                    late = (
                        f"event {t} ({kind} at {at}) arrives after timer {tkey} was due at"
                        f" {timer.until}"
                    )
        waited = bool(key) and key in waiting
        if kind == "timer-fired":
            if not waited:
                raise Unplayable(
                    f"timer-fired for {key}, which the run no longer waits for (every host"
                    " disarms such a timer)"
                )
            action = "timer"
        elif kind in ("effect-succeeded", "effect-failed", "effect-outcome-unknown"):
            effect_kind = kinds.get(key)
            if effect_kind in WORK_KINDS:
                if not waited and late_work is None and key not in runs_on:
                    late_work = f"event {t} is a late result of {key}"
                step = Step("succeed", t, event.get("output"), event.get("usage"))
                if kind == "effect-failed":
                    step = Step("fail", t, error=event["error"])
                elif kind == "effect-outcome-unknown":
                    step = Step("unknown", t)
                work.setdefault(key, []).append(step)
                action = "release"
            elif effect_kind == "signal-run" and kind != "effect-outcome-unknown":
                # The host delivers a signal-run itself and answers it: nothing to send.
                sends.pop(key, None)
                action = "host"
            elif effect_kind == "run-subflow" and key in detached and kind == "effect-succeeded":
                if not waited:
                    raise Unplayable(f"a start of {key} reported after the run let it go")
                action = "started"  # the host reports it itself once it started the child
            elif effect_kind == "run-subflow" and kind == "effect-outcome-unknown":
                if not waited:
                    raise Unplayable(f"an unknown outcome for {key}, a child already let go")
                outcomes.setdefault(key, []).append((t, event))
                action = "terminate"
            else:
                raise Unplayable(f"{kind} for {effect_kind or 'an unknown'} {key}")
        elif kind == "subflow-settled":
            if not waited and key not in let_go:
                raise Unplayable(
                    f"subflow-settled for {key}, a child the run no longer waits for (hosts"
                    " cancel such a child)"
                )
            outcomes.setdefault(key, []).append((t, event))
            action = "child"
        elif kind == "human-answered":
            action = "answer"
        elif kind == "signal-received":
            # A signal the run sent itself (signal_run to its own id) is the host's.
            mine = any(
                s["runId"] == run_id
                and s["signal"] == event["signal"]
                and s.get("key") == event.get("key")
                and s.get("payload") == event.get("payload")
                for s in sends.values()
            )
            action = "host" if mine else "signal"
        elif kind == "cancel-requested":
            action = "cancel"
        elif kind in SCHEDULED_KINDS:
            action = kind
        elif kind == UPDATE:
            action = "update"
        else:
            raise Unplayable(f"unexpected event {kind}")
        turns.append(Turn(t, event, action, key))
        before = waiting
        decision = flowcore.advance(state, flowcore.event_from_wire(event))
        state = decision.state
        emitted(decision.effects, t, at)
        # The host starts the next incarnation at once (which may continue at once).
        while (continued := flowcore.plan(decision).continued) is not None:
            decision = flowcore.continue_run(flow, continued, run_id, at, state.run.depth)
            state = decision.state
            emitted(decision.effects, t, at)
        waiting = waits(state)
        for tkey in before - waiting:
            if tkey in timers and timers[tkey].end is None:
                timers[tkey].end = t
                timers[tkey].fired = kind == "timer-fired" and key == tkey
        pending.append(waiting)

    # Children: one small spec per flow id that ends the way the recorded child did.
    flows: dict[str, str] = {}
    shapes: dict[str, str] = {}
    for key, flow_id in subflows.items():
        for _, event in outcomes.get(key, []):
            if event["kind"] != "subflow-settled":
                continue
            shape = _child_shape(event["status"], event.get("usage"))
            if not shape:
                raise Unplayable(f"a child that settles {event['status']} with that usage")
            if shapes.setdefault(flow_id, shape) != shape:
                raise Unplayable(f"children of flow {flow_id} that end in different ways")
    for key, flow_id in subflows.items():
        shape = shapes.setdefault(flow_id, "signal")
        flows[flow_id] = child_spec(flow_id, shape)
        ends = iter(outcomes.get(key, []))
        for _ in issues[key]:
            ended: tuple[int | None, dict[str, Any]] = next(ends, (None, {"kind": "none"}))
            at_turn, event = ended
            if shape == "call-fail":
                usage = dict(event.get("usage") or {})
                usage["steps"] = usage.get("steps", 2) - 2
                work.setdefault(f"{key}/first#1", []).append(Step("succeed", None, None, usage))
            answer = f"{key}/answer#1"
            if event["kind"] != "subflow-settled":
                work.setdefault(answer, []).append(Step("hang"))
                continue
            assert at_turn is not None
            if shape == "signal":
                turns[at_turn].action = "child-signal"
            elif event["status"] == "failed":
                turns[at_turn].action = "release"
                # The child fails with the error the log records as its own
                # (the cause its parent's step fails with).
                recorded = {"type": "child-failed", "message": "failed as recorded"}
                error = event.get("error") or recorded
                work.setdefault(answer, []).append(Step("fail", at_turn, error=error))
            else:
                turns[at_turn].action = "release"
                usage = dict(event.get("usage") or {})
                usage["steps"] = usage.get("steps", 1) - 1
                work.setdefault(answer, []).append(
                    Step("succeed", at_turn, event.get("output"), usage)
                )

    names: dict[str, set[str]] = {"tools": {CHILD_TOOL}, "agents": set(), "teams": set()}
    for effect in effects:
        if effect["kind"] == "call-tool":
            names["tools"].add(effect["tool"])
        elif effect["kind"] == "run-agent":
            names["agents"].add(effect["agentId"])
        elif effect["kind"] == "run-team":
            names["teams"].add(effect["teamId"])
    return Plan(
        name=path.name,
        spec=spec,
        source_name=source_name,
        flow=flow,
        run_id=run_id,
        started=started,
        origin=origin,
        turns=turns,
        work=work,
        issues=issues,
        kinds=kinds,
        timers=timers,
        pending=pending,
        subflows=subflows,
        flows=flows,
        names=names,
        effects=effects,
        events=events,
        rejected=rejected,
        settles=any(r.type == "run.settled" for r in records),
        late=late,
        late_work=late_work,
        final_metadata=expect.get("metadata") or {},
        detached=detached,
    )


def plans() -> dict[str, Plan | str]:
    """Every vector's plan, or why no host can play it."""
    out: dict[str, Plan | str] = {}
    for name in cases():
        try:
            out[name] = plan_vector(VECTORS / name)
        except Unplayable as exc:
            out[name] = str(exc)
    return out


# --- scripted handlers -----------------------------------------------------------------------


class Script:
    """The handlers of one vector: answer each issue of a key as the log did, on its turn.

    A handler whose turn has not come waits for the controller to ``open`` it;
    one the log never answers waits for ever (``hang``). ``abandon`` ends every
    handler waiting at that moment without an answer (raising ``CancelledError``,
    as if the host had cancelled it); ``open_all`` lets every one answer.
    """

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.gates = [asyncio.Event() for _ in plan.turns]
        self.abandoned = asyncio.Event()
        self.issued: Counter[str] = Counter()

    def registry(self) -> Registry:
        names = self.plan.names
        return Registry(
            tools={n: self.handle for n in names["tools"]},
            agents={n: self.handle for n in names["agents"]},
            teams={n: self.handle for n in names["teams"]},
        )

    def open(self, turn: int) -> None:
        self.gates[turn].set()

    def open_all(self) -> None:
        for gate in self.gates:
            gate.set()

    def abandon(self) -> None:
        """End the handlers waiting now; handlers called later wait as usual."""
        self.abandoned.set()
        self.abandoned = asyncio.Event()

    async def _wait(self, gate: asyncio.Event | None) -> None:
        waiters = [asyncio.ensure_future(self.abandoned.wait())]
        if gate is not None:
            waiters.append(asyncio.ensure_future(gate.wait()))
        try:
            while True:
                try:
                    await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
                    break
                except asyncio.CancelledError:
                    # The host stopped waiting for the work and cancelled this
                    # handler; the log says it answers later all the same (a
                    # handler that finishes though told to stop): keep to it.
                    if gate is None:
                        raise
        finally:
            for waiter in waiters:
                waiter.cancel()
        if gate is None or not gate.is_set():
            raise asyncio.CancelledError  # abandoned: the host never gets an answer

    async def _alive(self, gate: asyncio.Event, every_ms: int) -> None:
        """Wait for ``gate`` as ``_wait`` does, heartbeating meanwhile: work with a
        heartbeat timeout stays alive until the log's turn for it comes."""
        abandoned = self.abandoned
        while not gate.is_set():
            if abandoned.is_set():
                raise asyncio.CancelledError
            flowcore_handlers.heartbeat()
            waiters = [asyncio.ensure_future(gate.wait()), asyncio.ensure_future(abandoned.wait())]
            try:
                await asyncio.wait(waiters, timeout=every_ms / 4000, return_when="FIRST_COMPLETED")
            except asyncio.CancelledError:
                pass  # as in _wait: the log says it answers later all the same
            finally:
                for waiter in waiters:
                    waiter.cancel()

    async def handle(self, effect: Any) -> Any:
        key: str = effect.idempotency_key
        n = self.issued[key]
        self.issued[key] += 1
        steps = self.plan.work.get(key, [])
        step = steps[n] if n < len(steps) else Step("hang")
        beat = getattr(effect, "heartbeat_timeout_ms", None)
        if step.turn is not None:
            if beat is None:
                await self._wait(self.gates[step.turn])
            else:
                await self._alive(self.gates[step.turn], beat)
        error = step.error or {}
        if beat is not None and error.get("type") == "heartbeat-timeout":
            # The log says the host stopped it: heartbeat its details, go quiet.
            flowcore_handlers.heartbeat(error.get("details"))
            await self._wait(None)
        if step.what in ("unknown", "hang"):
            # unknown: the host must lose track of the call (an activity that outlives
            # its timeout, a worker that dies); hang: the log never answers it
            await self._wait(None)
        if step.what == "succeed":
            if step.usage is None:
                return step.output
            return Result(step.output, msgspec.convert(step.usage, Usage))
        raise HandlerError(
            error.get("type", "error"),
            error.get("message", ""),
            error.get("retryable", False),
            details=error.get("details"),
        )


# --- comparing -------------------------------------------------------------------------------


def mask(effect: dict[str, Any]) -> dict[str, Any]:
    """An effect without the fields that read the host's clock."""
    out = dict(effect)
    if out["kind"] == "sleep":
        out.pop("untilMs", None)
    if "budgetRemaining" in out:
        remaining = dict(out["budgetRemaining"])
        remaining.pop("wallClockMs", None)
        out["budgetRemaining"] = remaining
    return out


def same_event(ours: dict[str, Any], recorded: dict[str, Any], clock: bool = True) -> bool:
    """The same event, apart from its time when ``clock`` (the host reads a real clock).

    A child's usage is compared only when the log records one.
    """

    def essence(event: dict[str, Any]) -> dict[str, Any]:
        out = dict(event) if not clock else {k: v for k, v in event.items() if k != "atMs"}
        if event["kind"] == "subflow-settled" and not event.get("usage"):
            out.pop("usage", None)
        return out

    a, b = essence(ours), essence(recorded)
    if recorded["kind"] == "subflow-settled" and "usage" not in b:
        a.pop("usage", None)
    elif recorded["kind"] == "subflow-settled" and isinstance(a.get("usage"), dict):
        # The child this harness makes for a vector calls a tool, which counts a
        # tool call the scripted child of the log may not have reported.
        a["usage"] = {
            k: v for k, v in a["usage"].items() if k in b["usage"] or k not in _AGENT_USAGE
        }
    return a == b


_AGENT_USAGE = frozenset(("tokens", "toolCalls", "turns"))


def check_outcome(plan: Plan, outcome: Outcome, clock: bool) -> None:
    """The played run recorded what the vector did: start, effects, events, settlement.

    ``clock``: the host reads a real clock, so the effects are compared without
    ``untilMs`` and ``budgetRemaining.wallClockMs`` and the events without ``atMs``.
    """
    assert outcome.error is None, outcome.error
    assert outcome.records, "the host recorded nothing"
    first = outcome.records[0]
    assert first.type == "run.started" and first.run_id == plan.run_id
    assert first.data == plan.started
    ours = [r.data for r in outcome.records if r.type == "effect.emitted"]
    if clock:
        assert [mask(e) for e in ours] == [mask(e) for e in plan.effects]
    else:
        assert ours == plan.effects
    reported = [r.data for r in outcome.records if r.type == "event.reported"]
    assert len(reported) == len(plan.events)
    for n, (a, b) in enumerate(zip(reported, plan.events, strict=True)):
        assert same_event(a, b, clock), f"event {n}: the host applied {a}, the log has {b}"
    assert (outcome.records[-1].type == "run.settled") == plan.settles
    if plan.final_metadata or outcome.metadata is not None:
        # What the host indexes for listing runs by: the run's metadata as it ended.
        assert outcome.metadata == plan.final_metadata, (outcome.metadata, plan.final_metadata)
