"""The Temporal host plays a vector: the real workflow on a Temporal dev server.

Each event comes from where a Temporal run gets it:

- work results from the ``flowcore_work`` activity, whose scripted handlers
  answer from the recorded log (an unknown outcome is an activity that
  outlives its start-to-close timeout);
- answers through the ``answer`` update, signals as Temporal signals, cancel
  as workflow cancellation, the scheduled-call events from outside through
  the ``scheduled`` update;
- ``timer-fired`` from durable timers;
- ``subflow-settled`` from a child workflow (the small child spec), and an
  unknown subflow outcome from terminating that child.

A controller releases each event in the recorded order and checks that the
workflow applied exactly it before releasing the next. The run's clock starts
at the recorded start and, for vectors with long timers, runs faster than
real time (``RunArgs.clock_scale``), so timers fire in about a second. The
host reads a real clock, so its effects are compared without ``untilMs`` of
``sleep`` and ``budgetRemaining.wallClockMs``, its events without ``atMs``.

Besides what no host can produce, Temporal cannot: an event that arrives
after a timer was due (Temporal fires timers on time), timers too close
together to order reliably in real time, a timer so long that even the
faster clock would take too long, or a call that waits longer than the short
activity timeout that makes unknown outcomes. The clock runs only so fast that
the run would still emit the same effects if the workflow fell ``LATE_S``
behind at any event (on a faster clock a late timer is late by that much
more: a sleep until a fixed instant, or a wall-clock deadline, would then be
passed).

A busy machine can fall further behind than that: a timer that fires on time
is handled by a workflow task that starts late, and the clock reads the
task's start. The events the workflow applied carry the times it read, so
after a play that does not match the log the player asks the interpreter
whether those times alone explain it (the recorded events at the times the
workflow saw them give other effects). If they do, the host did nothing
wrong and the machine was slower than the clock assumed: the vector is
played again, at most ``REPLAYS`` times, on a clock slow enough to absorb
twice the lag seen. An idle machine never pays for this; a real divergence
is never retried. And a run that settles while the player still waits for an
event fails at once instead of after ``TURN_TIMEOUT_S``.

temporalio is imported only to play: planning (``refuse``) needs none.
"""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import flowcore

from .vectors import (
    RELEASE,
    SCHEDULED_KINDS,
    WORK_KINDS,
    Outcome,
    Plan,
    Script,
    budget_of,
    check_outcome,
    mask,
    same_event,
)

if TYPE_CHECKING:
    from temporalio.client import Client, WorkflowHandle

NAME = "temporal"
CLOCK = True  # the workflow reads Temporal's clock: its readings are masked
EVENT_S = 0.4  # real seconds one recorded event may take to reproduce
UNKNOWN_S = 2.6  # an unknown outcome waits out the activity timeout
UNKNOWN_TIMEOUT_MS = 2000
FIRED_TARGET_MS = 1000  # a timer that fires should take about this long
SLOWEST_FIRE_MS = 8000
PARALLEL = 4  # vectors played at once
LATE_S = 2.0  # real seconds the workflow may fall behind (a busy machine) without harm
TURN_TIMEOUT_S = 30.0
REPLAYS = 2  # plays again on a slower clock when the machine fell behind it


UPDATES = "an update-requested event: this player does not send updates yet"


class Refused(Exception):
    pass


@dataclass
class Timing:
    scale: float  # RunArgs.clock_scale
    activity_timeout_ms: int
    late_s: float = LATE_S  # real seconds the run may fall behind at this scale


def _effects_if_late(plan: Plan, turn: int, late_ms: int) -> list[dict[str, Any]] | None:
    """The effects of the run if every event from ``turn`` on came ``late_ms`` later."""
    return _effects_at(plan, [late_ms if t.index >= turn else 0 for t in plan.turns])


def _effects_at(plan: Plan, lateness_ms: list[int]) -> list[dict[str, Any]] | None:
    """The run's effects if event ``i`` of the log came ``lateness_ms[i]`` later.

    None when one of the events would then be rejected (say, a timer that the
    run, reading a later time, never set).
    """
    decision = flowcore.start(
        plan.flow,
        plan.input,
        plan.run_id,
        now_ms=plan.origin,
        budget=budget_of(plan.budget),
        depth=plan.depth,
        metadata=plan.metadata,
    )
    effects = [flowcore.effect_to_wire(e) for e in decision.effects]
    for t, late_ms in zip(plan.turns, lateness_ms, strict=True):
        event = dict(t.event, atMs=t.event["atMs"] + late_ms)
        try:
            decision = flowcore.advance(decision.state, flowcore.event_from_wire(event))
        except flowcore.EventRejected:
            return None
        effects.extend(flowcore.effect_to_wire(e) for e in decision.effects)
        continued = flowcore.plan(decision).continued
        if continued is not None:  # the next incarnation starts at once
            at, depth = event["atMs"], decision.state.run.depth
            decision = flowcore.continue_run(plan.flow, continued, plan.run_id, at, depth)
            effects.extend(flowcore.effect_to_wire(e) for e in decision.effects)
    return effects


def _tolerates(plan: Plan, scale: float, late_s: float = LATE_S) -> bool:
    """Whether falling ``late_s`` behind, on a clock ``scale`` times faster, changes nothing."""
    late_ms = int(late_s * 1000 * scale)
    recorded = [mask(e) for e in plan.effects]
    for turn in range(len(plan.turns)):
        effects = _effects_if_late(plan, turn, late_ms)
        if effects is None or [mask(e) for e in effects] != recorded:
            return False
    return True


def prepare(plan: Plan, late_s: float = LATE_S) -> Timing:
    """How fast the run's clock goes; ``Refused`` when Temporal cannot record the log.

    ``late_s``: the real seconds the workflow may fall behind without changing
    the run's effects (more than ``LATE_S`` after a play that fell further behind;
    the clock then goes no slower than ``SLOWEST_FIRE_MS`` allows, which may absorb
    less than that).
    """
    if any(t.action == "update" for t in plan.turns):
        raise Refused(UPDATES)
    if plan.late is not None:
        raise Refused(f"{plan.late}; Temporal fires timers on time")
    if plan.late_work is not None and plan.started.get("semantics", 1) >= 2:
        raise Refused(
            f"{plan.late_work}; Temporal cancels the activity of work a run at decision"
            " level 2 stops waiting for, so no late result reaches the run"
        )
    turns, work = plan.turns, plan.work
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
    for timer in plan.timers.values():
        end = timer.end if timer.end is not None else len(turns)
        duration = timer.until - timer.at
        if timer.fired:
            fired = max(fired, duration)
        need = cost(timer.turn + 1, end)
        if need > 0:
            need += 0.8
            cap = min(cap, duration / 1000 / need)
    scale = max(1.0, fired / FIRED_TARGET_MS)
    if scale > cap:
        if cap < 1.0:
            raise Refused("timers too close to the events around them to race in real time")
        scale = cap
    if scale > 1.0 and not _tolerates(plan, scale, late_s):
        low, high = 1.0, scale  # the fastest clock that tolerates it lies between
        for _ in range(12):
            middle = (low + high) / 2
            low, high = (middle, high) if _tolerates(plan, middle, late_s) else (low, middle)
        scale = low
    if fired / scale > SLOWEST_FIRE_MS:
        if late_s <= LATE_S:
            raise Refused(f"a timer of {fired} ms would take too long in real time")
        scale = fired / SLOWEST_FIRE_MS  # played again: as slow as a play may be
    if unknowns:
        for key, emissions in plan.issues.items():
            for n, turn in enumerate(emissions):
                steps = work.get(key, [])
                answered = steps[n].turn if n < len(steps) else None
                end = len(turns) if answered is None else answered
                if plan.kinds[key] in WORK_KINDS and cost(turn + 1, end) > 1.2:
                    raise Refused(
                        f"{key} would wait longer than the short activity timeout that"
                        " makes unknown outcomes"
                    )
    return Timing(scale, UNKNOWN_TIMEOUT_MS if unknowns else 120_000, late_s)


def refuse(plan: Plan) -> str | None:
    try:
        prepare(plan)
    except Refused as exc:
        return str(exc)
    return None


async def _child_running(client: Client, workflow_id: str) -> WorkflowHandle[Any, Any]:
    from temporalio.client import WorkflowExecutionStatus
    from temporalio.service import RPCError

    deadline = time.monotonic() + TURN_TIMEOUT_S
    handle: WorkflowHandle[Any, Any] = client.get_workflow_handle(workflow_id)
    while True:
        try:
            if (await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
                return handle
        except RPCError:
            pass  # not started yet
        if time.monotonic() > deadline:
            raise AssertionError(f"child workflow {workflow_id} never started")
        await asyncio.sleep(0.05)


async def _asked(handle: WorkflowHandle[Any, Any], key: str) -> None:
    import flowcore_temporal as ft

    deadline = time.monotonic() + TURN_TIMEOUT_S
    while not any(q["key"] == key for q in await handle.query(ft.QUESTIONS_QUERY)):
        if time.monotonic() > deadline:
            raise AssertionError(f"question {key} was never asked")
        await asyncio.sleep(0.03)


def lateness(plan: Plan, outcome: Outcome) -> list[int]:
    """How much later than the log (ms of the run's clock) the workflow applied each event."""
    reported = [r.data for r in outcome.records if r.type == "event.reported"]
    return [
        int(ours["atMs"]) - int(turn.event["atMs"])
        for ours, turn in zip(reported, plan.turns, strict=False)
        if same_event(ours, turn.event) and isinstance(ours.get("atMs"), int)
    ]


def fell_behind(plan: Plan, outcome: Outcome) -> bool:
    """Whether the times the workflow read explain why its run is not the log's.

    The log's events are fed to the interpreter at those times (an event the
    workflow never applied as late as the last one it did): if that gives other
    effects, any host reading that clock would have done what this one did.
    """
    late = lateness(plan, outcome)
    if not late:
        return False
    late += [late[-1]] * (len(plan.turns) - len(late))
    effects = _effects_at(plan, late)
    return effects is None or [mask(e) for e in effects] != [mask(e) for e in plan.effects]


async def play(plan: Plan, workdir: Path, server: str | None = None) -> Outcome:
    """Play ``plan`` on the Temporal server at ``server`` (a fresh task queue and worker).

    Played again on a slower clock, up to ``REPLAYS`` times, when the machine
    fell too far behind the clock for the log's run (see the module's doc).
    """
    began = time.monotonic()
    timing = prepare(plan)
    notes: list[str] = []
    for attempt in range(REPLAYS + 1):
        outcome = await _play_once(plan, server, timing)
        if (
            _matches(plan, outcome)
            or attempt == REPLAYS
            or timing.scale <= 1.0
            or not fell_behind(plan, outcome)
        ):
            break
        behind_s = max(lateness(plan, outcome)) / timing.scale / 1000
        try:
            slower = prepare(plan, late_s=max(2 * timing.late_s, 2 * behind_s))
        except Refused:
            break
        if slower.scale >= timing.scale:
            break
        notes.append(
            f"{plan.name}: play {attempt + 1} fell {behind_s:.1f}s behind its clock"
            f" (x{timing.scale:.1f}, {timing.late_s:.1f}s allowed); played again at"
            f" x{slower.scale:.1f}"
        )
        timing = slower
    if notes:  # shown with the test's report (captured output)
        print("\n".join(notes), file=sys.stderr)
        if outcome.error is not None:
            outcome.error = "\n".join([outcome.error, *notes])
    outcome.seconds = time.monotonic() - began
    return outcome


def _matches(plan: Plan, outcome: Outcome) -> bool:
    try:
        check_outcome(plan, outcome, clock=CLOCK)
    except AssertionError:
        return False
    return True


async def _play_once(plan: Plan, server: str | None, timing: Timing) -> Outcome:
    from temporalio.service import RPCError

    import flowcore_temporal as ft
    from flowcore_temporal._visibility import metadata_of
    from tests.temporal.support import unique

    assert server is not None, "the Temporal player needs the dev server's address"
    began = time.monotonic()
    script = Script(plan)
    client = await ft.connect(server)
    queue = unique(f"conf-{plan.name}")
    workflow_id = unique(f"conf-{plan.name}")
    args = ft.RunArgs(
        spec=plan.spec,
        input=plan.input,
        run_id=plan.run_id,
        budget=plan.budget,
        depth=plan.depth,
        flows=plan.flows,
        source_name=plan.source_name,
        activity_timeout_ms=timing.activity_timeout_ms,
        heartbeat_timeout_ms=None,
        clock_origin_ms=plan.origin,
        clock_scale=timing.scale,
        metadata=plan.metadata,
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
                if any(r.type == "run.settled" for r in records):
                    ended = next(r.data for r in records if r.type == "run.settled")
                    raise AssertionError(f"the run settled before event {seen}: {ended}")
                if time.monotonic() > deadline:
                    raise AssertionError(f"no event {seen} within {TURN_TIMEOUT_S}s")
                await asyncio.sleep(0.03)

        try:
            for turn in plan.turns:
                event = turn.event
                child_id = workflow_id + turn.key[len(plan.run_id) :]
                if turn.action == "release":
                    script.open(turn.index)
                elif turn.action == "signal":
                    payload = event.get("payload")
                    if "key" in event:
                        await handle.signal(event["signal"], args=[payload, event["key"]])
                    elif payload is None:
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
                elif turn.action in SCHEDULED_KINDS:
                    sent = {k: v for k, v in event.items() if k != "atMs"}
                    await handle.execute_update(ft.SCHEDULED_UPDATE, args=[sent])
                elif turn.action == "child-signal":
                    child = await _child_running(client, child_id)
                    await child.signal(RELEASE, event.get("output"))
                elif turn.action == "terminate":
                    child = await _child_running(client, child_id)
                    await child.terminate(reason="conformance: the outcome is unknown")
                ours = await next_event()
                if not same_event(ours, event):
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
            if plan.flow.metadata:  # what the run's search attributes hold now
                desc = await handle.describe()
                outcome.metadata = metadata_of(desc.typed_search_attributes)
        except (AssertionError, TimeoutError) as exc:
            outcome.error = f"{type(exc).__name__}: {exc}"
        finally:
            script.open_all()  # nobody waits for the rest; let the handlers go
            try:
                await handle.terminate(reason="conformance test over")
            except RPCError:
                pass  # already ended
    outcome.records = records
    outcome.seconds = time.monotonic() - began
    return outcome


async def play_all(plans: list[Plan], workdir: Path, server: str) -> dict[str, Outcome]:
    """Play every plan, ``PARALLEL`` at a time (each on its own task queue)."""
    gate = asyncio.Semaphore(PARALLEL)

    async def one(plan: Plan) -> tuple[str, Outcome]:
        async with gate:
            return plan.name, await play(plan, workdir, server)

    return dict(await asyncio.gather(*(one(p) for p in plans)))
