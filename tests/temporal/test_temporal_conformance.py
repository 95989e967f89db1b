"""The conformance vectors on Temporal: the same events give the same effects.

For every vector in ``specs/conformance/`` whose events a Temporal run can
produce, the recorded run is played again through the real Temporal host, its
events coming from where a Temporal run gets them:

- work results from the ``flowcore_work`` activity, whose scripted handlers
  answer from the recorded log (an unknown outcome is an activity that
  outlives its start-to-close timeout);
- answers through the ``answer`` update, signals as Temporal signals, cancel
  as workflow cancellation;
- ``timer-fired`` from durable timers;
- ``subflow-settled`` from a child workflow (a small child spec that ends the
  way the recorded child did), and an unknown subflow outcome from
  terminating that child.

A controller releases each event in the recorded order and checks that the
workflow applied exactly it before releasing the next. The run's clock starts
at the recorded start and, for vectors with long timers, runs faster than
real time (``RunArgs.clock_scale``), so timers fire in about a second. The
recorded and the Temporal-produced effects must then be identical, except
for the two fields that are readings of the host's clock: ``untilMs`` of
``sleep`` and ``budgetRemaining.wallClockMs``.

Skipped, each with its reason: divergent, torn, cut, corrupt and newer-spec logs
(nothing to produce), events that a Temporal host never produces (rejected
ones are not sent at all; an event that arrives after a timer was due, while
Temporal fires timers on time; a late result for a timer or child the host
has cancelled), and timers too close together to order reliably in real time.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("temporalio", reason="the Temporal host tests need temporalio (.[dev])")

from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

import flowcore
import flowcore_temporal as ft
from flowcore import Budget, BudgetRemaining, Sleep, Usage
from flowcore_handlers import HandlerError, Registry, Result

from .support import ROOT, unique

VECTORS = ROOT / "specs" / "conformance"
CHILD_TOOL = "conformance.child"
RELEASE = "conformance-release"
EVENT_S = 0.4  # real seconds one recorded event may take to reproduce
UNKNOWN_S = 2.6  # an unknown outcome waits out the activity timeout
UNKNOWN_TIMEOUT_MS = 2000
FIRED_TARGET_MS = 1000  # a timer that fires should take about this long
SLOWEST_FIRE_MS = 8000
PARALLEL = 4
TURN_TIMEOUT_S = 30.0

WORK_KINDS = ("call-tool", "run-agent", "run-team")
TIMER_KINDS = (
    "wait",
    "timeout",
    "backoff",
    "deadline",
    "tick",
    "ask-timeout",
    "signal-timeout",
    "sched-delay",
)


class Unproducible(Exception):
    """The vector's events are not what a Temporal run produces; the reason says why."""


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
    index: int
    event: dict[str, Any]
    action: str  # release | timer | signal | answer | cancel | child-signal | terminate
    key: str = ""


@dataclass
class Plan:
    name: str
    spec: str
    run_id: str
    input: Any
    budget: dict[str, int] | None
    depth: int
    origin: int
    scale: float
    activity_timeout_ms: int
    flows: dict[str, str]
    turns: list[Turn]
    work: dict[str, list[Step]]
    names: dict[str, set[str]]
    effects: list[dict[str, Any]]
    events: list[dict[str, Any]]
    settles: bool  # an in-flight run's log ends before run.settled


@dataclass
class Outcome:
    records: list[flowcore.Record] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0


# --- planning: what would a Temporal run have to do to produce this log? -------------------


def _budget(data: dict[str, int] | None) -> Budget | BudgetRemaining | None:
    if data is None:
        return None
    cost, wall = data.get("costMinorUnits"), data.get("wallClockMs")
    if "steps" in data:
        return BudgetRemaining(steps=data["steps"], cost_minor_units=cost, wall_clock_ms=wall)
    budget: Any = Budget(cost_minor_units=cost, wall_clock_ms=wall)  # type: ignore[arg-type]
    return budget  # type: ignore[no-any-return]


def _child_spec(flow_id: str, shape: str) -> str:
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


def plan_vector(path: Path) -> Plan:
    """The plan for running ``path`` on Temporal; ``Unproducible`` if no run could."""
    expect = (
        json.loads((path / "expect.json").read_text()) if (path / "expect.json").exists() else {}
    )
    if not (path / "log.ndjson").exists():
        raise Unproducible("no log.ndjson")
    if expect.get("error"):
        raise Unproducible(f"a {expect['error']} log: nothing for a host to produce")
    if expect.get("replays") is not True or expect.get("divergenceIndex") is not None:
        raise Unproducible("a divergent log: nothing for a host to produce")
    if expect.get("tornOffset") is not None:
        raise Unproducible("a torn log: the run it records is incomplete")
    if expect.get("unrecorded"):
        raise Unproducible(
            "a cut log (it ends inside a decision): the run it records is incomplete"
        )
    spec_path = path / "recorded.yaml" if (path / "recorded.yaml").exists() else path / "flow.yaml"
    spec = spec_path.read_text()
    flow = flowcore.parse_flow(spec, source_name=str(spec_path))
    log = flowcore.decode_log((path / "log.ndjson").read_bytes())
    records = list(log.records)
    if log.torn is not None or not records or records[0].type != "run.started":
        raise Unproducible("not a complete log")
    if len({r.run_id for r in records}) != 1:
        raise Unproducible("a log of several runs")
    started = records[0].data
    run_id, origin = records[0].run_id, records[0].at
    events = [r.data for r in records if r.type == "event.reported"]
    effects = [r.data for r in records if r.type == "effect.emitted"]

    budget = _budget(started.get("budget"))
    decision = flowcore.start(
        flow, started.get("input"), run_id, now_ms=origin, budget=budget, depth=started["depth"]
    )
    state = decision.state
    timers: dict[str, dict[str, Any]] = {}  # key -> until, emitted (turn, at), end turn, fired
    issues: dict[str, list[int]] = {}  # work key -> emission turn of each issue
    kinds: dict[str, str] = {}  # key -> effect kind
    subflows: dict[str, str] = {}  # run-subflow key -> flow id

    def emitted(effects_: tuple[flowcore.Effect, ...], turn: int, at: int) -> None:
        for effect in effects_:
            wire = flowcore.effect_to_wire(effect)
            key = wire.get("idempotencyKey", "")
            kinds[key] = wire["kind"]
            if isinstance(effect, Sleep):
                timers[key] = {"until": effect.until_ms, "turn": turn, "at": at, "end": None}
            elif wire["kind"] in (*WORK_KINDS, "run-subflow"):
                issues.setdefault(key, []).append(turn)
                if wire["kind"] == "run-subflow":
                    subflows[key] = wire["flowId"]

    emitted(decision.effects, -1, origin)
    turns: list[Turn] = []
    work: dict[str, list[Step]] = {}
    outcomes: dict[str, list[tuple[int, dict[str, Any]]]] = {}  # subflow key -> its outcomes
    for t, event in enumerate(events):
        kind, key, at = event["kind"], event.get("idempotencyKey", ""), event["atMs"]
        for tkey, timer in timers.items():
            if timer["end"] is None and tkey in state.pending and timer["until"] <= at:
                if not (kind == "timer-fired" and key == tkey):
                    raise Unproducible(
                        f"event {t} ({kind} at {at}) arrives after timer {tkey} was due at"
                        f" {timer['until']}; Temporal fires timers on time"
                    )
        entry = state.pending.get(key) if key else None
        if kind == "timer-fired":
            if entry is None:
                raise Unproducible(f"timer-fired for {key}, which the run no longer waits for")
            action = "timer"
        elif kind in ("effect-succeeded", "effect-failed", "effect-outcome-unknown"):
            effect_kind = kinds.get(key)
            if effect_kind in WORK_KINDS:
                step = Step("succeed", t, event.get("output"), event.get("usage"))
                if kind == "effect-failed":
                    step = Step("fail", t, error=event["error"])
                elif kind == "effect-outcome-unknown":
                    step = Step("unknown", t)
                work.setdefault(key, []).append(step)
                action = "release"
            elif effect_kind == "run-subflow" and kind == "effect-outcome-unknown":
                if entry is None:
                    raise Unproducible(f"an unknown outcome for {key}, a child already let go")
                outcomes.setdefault(key, []).append((t, event))
                action = "terminate"
            else:
                raise Unproducible(f"{kind} for {effect_kind or 'an unknown'} {key}")
        elif kind == "subflow-settled":
            if entry is None:
                raise Unproducible(f"subflow-settled for {key}, a child the host cancelled")
            outcomes.setdefault(key, []).append((t, event))
            action = "child"
        elif kind == "human-answered":
            action = "answer"
        elif kind == "signal-received":
            action = "signal"
        elif kind == "cancel-requested":
            action = "cancel"
        else:
            raise Unproducible(f"unexpected event {kind}")
        turns.append(Turn(t, event, action, key))
        before = set(state.pending.keys())
        decision = flowcore.advance(state, flowcore.event_from_wire(event))
        state = decision.state
        for tkey in before - set(state.pending.keys()):
            if tkey in timers and timers[tkey]["end"] is None:
                timers[tkey]["end"] = t
                timers[tkey]["fired"] = kind == "timer-fired" and key == tkey
        emitted(decision.effects, t, at)

    # Children: one small spec per flow id that ends the way the recorded child did.
    flows: dict[str, str] = {}
    shapes: dict[str, str] = {}
    for key, flow_id in subflows.items():
        for _, event in outcomes.get(key, []):
            if event["kind"] != "subflow-settled":
                continue
            shape = _child_shape(event["status"], event.get("usage"))
            if not shape:
                raise Unproducible(f"a child that settles {event['status']} with that usage")
            if shapes.setdefault(flow_id, shape) != shape:
                raise Unproducible(f"children of flow {flow_id} that end in different ways")
    for key, flow_id in subflows.items():
        shape = shapes.setdefault(flow_id, "signal")
        flows[flow_id] = _child_spec(flow_id, shape)
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
                error = {"type": "child-failed", "message": "failed as recorded"}
                work.setdefault(answer, []).append(Step("fail", at_turn, error=error))
            else:
                turns[at_turn].action = "release"
                usage = dict(event.get("usage") or {})
                usage["steps"] = usage.get("steps", 1) - 1
                work.setdefault(answer, []).append(
                    Step("succeed", at_turn, event.get("output"), usage)
                )

    # Real time: fired timers should take about a second; every timer must
    # outlast the events the log delivers before it fires or is let go.
    unknowns = any(s.what == "unknown" for steps in work.values() for s in steps)

    def cost(first: int, last: int) -> float:
        return sum(
            UNKNOWN_S
            if turns[i].action == "release" and turns[i].event["kind"].endswith("unknown")
            else EVENT_S
            for i in range(max(first, 0), min(last, len(turns)))
        )

    cap, fired = float("inf"), 0
    for timer in timers.values():
        end = timer["end"] if timer["end"] is not None else len(turns)
        duration = timer["until"] - timer["at"]
        if timer.get("fired"):
            fired = max(fired, duration)
        need = cost(timer["turn"] + 1, end)
        if need > 0:
            need += 0.8
            cap = min(cap, duration / 1000 / need)
    scale = max(1.0, fired / FIRED_TARGET_MS)
    if scale > cap:
        if cap < 1.0:
            raise Unproducible("timers too close to the events around them to race in real time")
        scale = cap
    if fired / scale > SLOWEST_FIRE_MS:
        raise Unproducible(f"a timer of {fired} ms would take too long in real time")
    if unknowns:
        for key, emissions in issues.items():
            for n, turn in enumerate(emissions):
                steps = work.get(key, [])
                answered = steps[n].turn if n < len(steps) else None
                end = len(turns) if answered is None else answered
                if kinds[key] in WORK_KINDS and cost(turn + 1, end) > 1.2:
                    raise Unproducible(
                        f"{key} would wait longer than the short activity timeout that"
                        " makes unknown outcomes"
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
        run_id=run_id,
        input=started.get("input"),
        budget=started.get("budget"),
        depth=started["depth"],
        origin=origin,
        scale=scale,
        activity_timeout_ms=UNKNOWN_TIMEOUT_MS if unknowns else 120_000,
        flows=flows,
        turns=turns,
        work=work,
        names=names,
        effects=effects,
        events=events,
        settles=any(r.type == "run.settled" for r in records),
    )


# --- running a plan on Temporal --------------------------------------------------------------


class Script:
    """The handlers of one vector: answer each issue of a key as the log did, on its turn."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.gates = [asyncio.Event() for _ in plan.turns]
        self.issued: Counter[str] = Counter()

    def registry(self) -> Registry:
        names = self.plan.names
        return Registry(
            tools={n: self.handle for n in names["tools"]},
            agents={n: self.handle for n in names["agents"]},
            teams={n: self.handle for n in names["teams"]},
        )

    async def handle(self, effect: Any) -> Any:
        key: str = effect.idempotency_key
        n = self.issued[key]
        self.issued[key] += 1
        steps = self.plan.work.get(key, [])
        step = steps[n] if n < len(steps) else Step("hang")
        if step.turn is not None:
            await self.gates[step.turn].wait()
        if step.what == "succeed":
            if step.usage is None:
                return step.output
            usage = Usage(
                steps=step.usage.get("steps", 0),
                cost_minor_units=step.usage.get("costMinorUnits", 0),
            )
            return Result(step.output, usage)
        if step.what == "fail":
            error = step.error or {}
            raise HandlerError(
                error.get("type", "error"), error.get("message", ""), error.get("retryable", False)
            )
        # unknown: outlive the activity's start-to-close timeout; hang: never answer
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


async def _child_running(client: Client, workflow_id: str) -> Any:
    deadline = time.monotonic() + TURN_TIMEOUT_S
    handle = client.get_workflow_handle(workflow_id)
    while True:
        try:
            if (await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
                return handle
        except RPCError:
            pass  # not started yet
        if time.monotonic() > deadline:
            raise AssertionError(f"child workflow {workflow_id} never started")
        await asyncio.sleep(0.05)


async def _asked(handle: Any, key: str) -> None:
    deadline = time.monotonic() + TURN_TIMEOUT_S
    while not any(q["key"] == key for q in await handle.query(ft.QUESTIONS_QUERY)):
        if time.monotonic() > deadline:
            raise AssertionError(f"question {key} was never asked")
        await asyncio.sleep(0.03)


def _same_event(ours: dict[str, Any], recorded: dict[str, Any]) -> bool:
    def essence(event: dict[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in event.items() if k != "atMs"}
        if event["kind"] == "subflow-settled" and not event.get("usage"):
            out.pop("usage", None)
        return out

    a, b = essence(ours), essence(recorded)
    if recorded["kind"] == "subflow-settled" and "usage" not in b:
        a.pop("usage", None)
    return a == b


async def run_plan(address: str, plan: Plan) -> Outcome:
    began = time.monotonic()
    script = Script(plan)
    client = await ft.connect(address)
    queue = unique(f"conf-{plan.name}")
    workflow_id = unique(f"conf-{plan.name}")
    args = ft.RunArgs(
        spec=plan.spec,
        input=plan.input,
        run_id=plan.run_id,
        budget=plan.budget,
        depth=plan.depth,
        flows=plan.flows,
        source_name=f"{plan.name}/flow.yaml",
        activity_timeout_ms=plan.activity_timeout_ms,
        heartbeat_timeout_ms=None,
        clock_origin_ms=plan.origin,
        clock_scale=plan.scale,
    )
    outcome = Outcome()
    async with ft.new_worker(client, task_queue=queue, registry=script.registry()):
        handle = await client.start_workflow(
            ft.FlowcoreWorkflow.run, args, id=workflow_id, task_queue=queue
        )
        records: list[flowcore.Record] = []
        seen = 0  # reported events checked so far

        async def next_event() -> dict[str, Any]:
            nonlocal seen
            deadline = time.monotonic() + TURN_TIMEOUT_S
            while True:
                start = records[-1].index + 1 if records else 0
                fresh = await handle.query(ft.LOG_QUERY, start)
                records.extend(ft.records_from_wire(fresh))
                reported = [r.data for r in records if r.type == "event.reported"]
                if len(reported) > seen:
                    seen += 1
                    event: dict[str, Any] = reported[seen - 1]
                    return event
                if time.monotonic() > deadline:
                    raise AssertionError(f"no event {seen} within {TURN_TIMEOUT_S}s")
                await asyncio.sleep(0.03)

        try:
            for turn in plan.turns:
                event = turn.event
                child_id = workflow_id + turn.key[len(plan.run_id) :]
                if turn.action == "release":
                    script.gates[turn.index].set()
                elif turn.action == "signal":
                    payload = event.get("payload")
                    if payload is None:
                        await handle.signal(event["signal"])
                    else:
                        await handle.signal(event["signal"], payload)
                elif turn.action == "answer":
                    await _asked(handle, turn.key)  # as in the log: asked, then answered
                    await handle.execute_update(
                        ft.ANSWER_UPDATE, args=[event["idempotencyKey"], event["answer"]]
                    )
                elif turn.action == "cancel":
                    await handle.cancel(reason=event.get("reason", ""))
                elif turn.action == "child-signal":
                    child = await _child_running(client, child_id)
                    await child.signal(RELEASE, event.get("output"))
                elif turn.action == "terminate":
                    child = await _child_running(client, child_id)
                    await child.terminate(reason="conformance: the outcome is unknown")
                ours = await next_event()
                if not _same_event(ours, event):
                    raise AssertionError(
                        f"event {turn.index}: the workflow applied {ours}, the log has {event}"
                    )
            if plan.settles:
                await asyncio.wait_for(handle.result(), TURN_TIMEOUT_S)
            deadline = time.monotonic() + TURN_TIMEOUT_S
            while True:  # read the log to its end (an in-flight run: to its last effect)
                start = records[-1].index + 1 if records else 0
                records.extend(ft.records_from_wire(await handle.query(ft.LOG_QUERY, start)))
                emitted = sum(r.type == "effect.emitted" for r in records)
                if plan.settles or emitted >= len(plan.effects) or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.03)
        except (AssertionError, TimeoutError) as exc:
            outcome.error = f"{type(exc).__name__}: {exc}"
        finally:
            for gate in script.gates:
                gate.set()  # nobody waits for the rest; let the handlers go
            try:
                await handle.terminate(reason="conformance test over")
            except RPCError:
                pass  # already ended
    outcome.records = records
    outcome.seconds = time.monotonic() - began
    return outcome


# --- the tests -------------------------------------------------------------------------------


def _cases() -> list[Path]:
    return sorted(p for p in VECTORS.iterdir() if p.is_dir()) if VECTORS.exists() else []


def _plans() -> dict[str, Plan | str]:
    plans: dict[str, Plan | str] = {}
    for path in _cases():
        try:
            plans[path.name] = plan_vector(path)
        except Unproducible as exc:
            plans[path.name] = str(exc)
    return plans


PLANS = _plans()


@pytest.fixture(scope="module")
def outcomes(temporal_address: str) -> Iterator[dict[str, Outcome]]:
    """Every producible vector run on Temporal, a few at a time."""

    async def main() -> dict[str, Outcome]:
        gate = asyncio.Semaphore(PARALLEL)

        async def one(plan: Plan) -> tuple[str, Outcome]:
            async with gate:
                return plan.name, await run_plan(temporal_address, plan)

        done = await asyncio.gather(*(one(p) for p in PLANS.values() if isinstance(p, Plan)))
        return dict(done)

    yield asyncio.run(main())


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


def test_most_vectors_are_producible() -> None:
    runnable = [name for name, plan in PLANS.items() if isinstance(plan, Plan)]
    if not PLANS:
        pytest.skip("no conformance vectors in specs/conformance yet")
    # The divergent, torn and corrupt logs are a minority of the vectors.
    assert len(runnable) >= len(PLANS) // 2, {n: p for n, p in PLANS.items() if isinstance(p, str)}


@pytest.mark.parametrize("case", sorted(PLANS) or ["none"])
def test_a_vector_gives_identical_effects_on_temporal(
    case: str, outcomes: dict[str, Outcome]
) -> None:
    plan = PLANS.get(case)
    if plan is None:
        pytest.skip("no conformance vectors in specs/conformance yet")
    if isinstance(plan, str):
        pytest.skip(f"{case}: {plan}")
    outcome = outcomes[case]
    assert outcome.error is None, outcome.error
    ours = [r.data for r in outcome.records if r.type == "effect.emitted"]
    assert [mask(e) for e in ours] == [mask(e) for e in plan.effects]
    reported = [r.data for r in outcome.records if r.type == "event.reported"]
    assert len(reported) == len(plan.events)
    assert all(_same_event(a, b) for a, b in zip(reported, plan.events, strict=True))
    assert (outcome.records[-1].type == "run.settled") == plan.settles
