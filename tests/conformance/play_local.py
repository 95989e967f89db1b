"""The local host plays a vector: ``flowcore_local.LocalHost`` on a SQLite file.

The host reads time only through ``LocalHost.now`` (the wall clock by
default); the player drives it. Before each event it sets the clock to the
event's recorded time and waits until the host has applied it, so the host
stamps every event as the log did, and the effects (which read the clock only
through the events) must equal the recorded ones exactly, ``untilMs`` and
``budgetRemaining.wallClockMs`` included.

How each event reaches the run, as on any local host:

- ``effect-succeeded`` / ``effect-failed``: the host's worker runs the
  scripted handler of the call (a ``flowcore_handlers.Registry`` passed as
  ``LocalHost(registry=...)``), which answers, or raises ``HandlerError``,
  once the player opens its turn; the host stamps and commits the result.
- ``effect-outcome-unknown`` (uncertain work only): the worker running the
  call dies. This process stops working, a second worker process on the same
  database (``doomed_worker.py``) applies the event that issues the call (a
  timer; or the call is left ready by ``start``, an answer, a signal or a
  cancel) and runs the call until it is SIGKILLed; when this process works
  again it finds the call dispatched to a dead worker and reports the
  unknown outcome (specs/local.md §5).
- ``timer-fired``: the clock reaches the timer; the worker loop fires it.
- ``human-answered``, ``signal-received``, ``cancel-requested``:
  ``LocalHost.answer``, ``signal``, ``cancel``; the scheduled-call events
  from outside: ``LocalHost.cancel_scheduled``, ``run_scheduled_now``,
  ``add_scheduled``.
- ``update-requested``: ``LocalHost.update`` (not waiting for its reply).
- ``subflow-settled``: the child is a run in the same database, started by
  the worker from the registered child spec; it ends on a signal
  (``LocalHost.signal`` to the child) or when its call's handler answers, and
  the host reports it to the parent in the same transaction.

The log's rejected answers, signals and cancels are sent through the same
API and must raise ``HostError`` and log nothing; its rejected updates too
(``flowcore.UpdateRefused``, or for an update id the run holds, its outcome),
logging nothing (the local host writes no
``event.rejected`` records). Rejected work results (a duplicate, an unknown
key) are not produced: a handler answers once.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import flowcore
from flowcore_local import HostError, LocalHost

from .vectors import (
    API_KINDS,
    RELEASE,
    SCHEDULED_KINDS,
    UPDATE,
    Outcome,
    Plan,
    Script,
    Turn,
    same_event,
)

NAME = "local"
CLOCK = False  # the player drives the host's clock: nothing to mask
DOOMED = Path(__file__).with_name("doomed_worker.py")
POLL_MS = 5  # the worker loop's longest sleep: how soon a timer fires once due
POLL_S = 0.002  # how often the player looks at the log while it waits for the host
TURN_TIMEOUT_S = 30.0  # a host that stops answering; never reached by a healthy run
SAFE = ("readonly", "idempotent")


class Refused(Exception):
    pass


def _exec_class(plan: Plan, effect: dict[str, Any]) -> str:
    if effect["kind"] != "call-tool":
        return "uncertain"  # agents and teams
    decl = plan.flow.tools.get(effect["tool"])
    return decl.exec_class if decl is not None else "uncertain"


def _in_flight(plan: Plan, turn: int) -> set[str]:
    """Work and children the host is still running after the decision of ``turn``."""
    busy = set()
    pending = plan.pending_after(turn)
    for key, emitted in plan.issues.items():
        steps = plan.work.get(key, [])
        for n, issued in enumerate(emitted):
            if issued > turn:
                continue
            step = steps[n] if n < len(steps) else None
            answered_later = step is not None and step.turn is not None and step.turn > turn
            if key in pending or answered_later:
                busy.add(key)
    return busy


def prepare(plan: Plan) -> dict[int, str]:
    """Where a worker must die: the turn (-1: the start) that issues each call that goes
    unknown, and its key. ``Refused`` when the local host cannot record the log."""
    if plan.late is not None:
        raise Refused(
            f"{plan.late}; the local host's worker fires a timer as soon as its clock"
            " reaches it, so nothing later can come first"
        )
    if plan.budget is not None or plan.depth:
        raise Refused(
            f"the run starts with a parent's budget {plan.budget} at depth {plan.depth}:"
            " LocalHost.start takes neither (a local run gets them only as a child run)"
        )
    effects = {e["idempotencyKey"]: e for e in plan.effects if "idempotencyKey" in e}
    crashes: dict[int, str] = {}
    for turn in plan.turns:
        if turn.event["kind"] != "effect-outcome-unknown":
            continue
        key = turn.key
        if turn.action == "terminate":
            raise Refused(
                f"effect-outcome-unknown for the run-subflow {key}: the local host's children"
                " are runs in its own database, so it always knows how one ended"
            )
        exec_class = _exec_class(plan, effects[key])
        if exec_class in SAFE:
            raise Refused(
                f"effect-outcome-unknown for {key}, whose tool is {exec_class}: the local host"
                f" runs {exec_class} work again under the same key after a crash and reports"
                " nothing (specs/local.md §5)"
            )
        n = next(i for i, s in enumerate(plan.work[key]) if s.turn == turn.index)
        issued = plan.issues[key][n]
        if issued != turn.index - 1:
            raise Refused(
                f"{key} goes unknown {turn.index - issued - 1} events after it was issued: the"
                " worker running it would have to die while the run's other events go on"
            )
        if issued >= 0 and plan.turns[issued].action not in ("timer", "answer", "signal", "cancel"):
            raise Refused(
                f"{key} is issued on a {plan.turns[issued].event['kind']}, which the worker that"
                " is to die running it cannot be made to apply"
            )
        others = _in_flight(plan, issued) - {key}
        if others:
            raise Refused(
                f"when {key} goes unknown the host also runs {sorted(others)}: a dead worker's"
                " uncertain work all goes unknown at once"
            )
        crashes[issued] = key
    return crashes


async def _update(host: LocalHost, run_id: str, event: dict[str, Any]) -> None:
    await host.update(
        run_id,
        event["name"],
        event.get("input"),
        event["updateId"],
        wait=False,
        principal=event.get("principal"),
    )


def refuse(plan: Plan) -> str | None:
    try:
        prepare(plan)
    except Refused as exc:
        return str(exc)
    return None


async def _scheduled(host: LocalHost, run_id: str, event: dict[str, Any]) -> None:
    """A scheduled-call event from outside, sent as a person would send it."""
    kind = event["kind"]
    if kind == "scheduled-cancel-requested":
        await host.cancel_scheduled(run_id, event["scheduleId"])
    elif kind == "scheduled-run-now-requested":
        await host.run_scheduled_now(run_id, event["scheduleId"])
    elif kind == "scheduled-replay-requested":
        await host.replay_scheduled(run_id, event["scheduleId"], request=event.get("request"))
    else:
        recurrence = {
            name: event[field]
            for name, field in (
                ("every_ms", "everyMs"),
                ("cron", "cron"),
                ("timezone", "timezone"),
                ("count", "count"),
                ("until_ms", "untilMs"),
            )
            if field in event
        }
        await host.add_scheduled(
            run_id, event["tool"], event.get("input"), event.get("delayMs", 0), **recurrence
        )


class Clock:
    """The host's clock: it moves only when the player moves it."""

    def __init__(self, at: int) -> None:
        self.at = at

    def now(self) -> int:
        return self.at

    def set(self, at: int) -> None:
        assert at >= self.at, f"the log goes back in time, from {self.at} to {at}"
        self.at = at


class _Worker:
    """``LocalHost.work`` as a task that can be stopped and started again."""

    def __init__(self, host: LocalHost) -> None:
        self.host = host
        self.task: asyncio.Task[None] | None = None
        self.stop_event = asyncio.Event()

    def start(self) -> None:
        if self.task is None:
            self.stop_event = asyncio.Event()
            self.task = asyncio.create_task(self.host.work(self.stop_event))

    async def stop(self, script: Script) -> None:
        """Stop working, ending the handlers that wait for a turn (``Script.abandon``):
        those waiting now, and any the worker begins before it stops (a call
        dispatched at its last commit whose handler had not started yet). The
        worker's stop waits for its handlers, and such a handler would wait
        for its turn for ever."""
        script.abandon()
        if self.task is not None:
            self.stop_event.set()
            task, self.task = self.task, None
            while not task.done():
                await asyncio.wait([task], timeout=POLL_S)
                script.abandon()
            await task


class _Player:
    def __init__(
        self,
        plan: Plan,
        host: LocalHost,
        clock: Clock,
        script: Script,
        db: Path | str,
        flows: list[Path],
    ) -> None:
        self.plan = plan
        self.host = host
        self.clock = clock
        self.script = script
        self.db = db
        self.flows = flows
        self.worker = _Worker(host)
        self.next_index = 0
        self.types: list[str] = []  # the types of the run's log records read so far
        self.reported: list[dict[str, Any]] = []

    async def play(self) -> None:
        plan, host = self.plan, self.host
        crashes = prepare(plan)
        await host.start(
            plan.spec, plan.input, plan.run_id, flows=self.flows, metadata=plan.metadata
        )
        if -1 not in crashes:
            self.worker.start()
        await self.reject(0)
        if -1 in crashes:
            await self.crash(None, crashes[-1])
        for turn in plan.turns:
            await self.children_started(turn.index - 1)
            await self.work_started(turn.index - 1)
            self.clock.set(turn.event["atMs"])
            if turn.index in crashes:
                await self.crash(turn, crashes[turn.index])
            elif turn.event["kind"] == "effect-outcome-unknown":
                self.worker.start()  # it recovers the dead worker's call at once
            else:
                await self.produce(turn)
            ours = await self.next_event(turn.index)
            if not same_event(ours, turn.event, clock=False):
                raise AssertionError(
                    f"event {turn.index}: the host applied {ours}, the log has {turn.event}"
                )
            await self.reject(turn.index + 1)
        if plan.settles:
            await host.wait(plan.run_id, timeout=TURN_TIMEOUT_S)
        else:  # an in-flight run: wait for its last effect
            await self.until(lambda r: r.count("effect.emitted") >= len(plan.effects), "effects")

    async def produce(self, turn: Turn) -> None:
        host, run_id, event = self.host, self.plan.run_id, turn.event
        if turn.action == "release":
            self.script.open(turn.index)
        elif turn.action == "timer":
            pass  # the clock has reached it: the worker fires it
        elif turn.action == "signal":
            await host.signal(run_id, event["signal"], event.get("payload"), event.get("key"))
        elif turn.action == "host":
            pass  # a signal-run: the worker delivers it and answers it itself
        elif turn.action == "answer":
            await host.answer(run_id, event["idempotencyKey"], event["answer"])
        elif turn.action == "cancel":
            await host.cancel(run_id, event.get("reason", ""))
        elif turn.action == "child-signal":
            await host.signal(turn.key, RELEASE, event.get("output"))
        elif turn.action in SCHEDULED_KINDS:
            await _scheduled(host, run_id, event)
        elif turn.action == "started":
            pass  # the worker reports a detached child's start once it has started it
        elif turn.action == "update":
            await _update(host, run_id, event)
        else:
            raise AssertionError(f"event {turn.index}: no way to produce {turn.action}")

    async def reject(self, after: int) -> None:
        """Send the log's rejected API events that come after ``after`` reported ones.

        The clock stays where it is: whether an event is refused never depends on
        the time, and moving it might let a timer fire before the next event.
        """
        host, run_id = self.host, self.plan.run_id
        for position, event in self.plan.rejected:
            if position != after or event["kind"] not in (*API_KINDS, UPDATE):
                continue
            before = (await host.run(run_id)).next_index
            if event["kind"] == UPDATE:  # refused, or (a known id) answered: nothing logged
                try:
                    await _update(host, run_id, event)
                except flowcore.UpdateRefused:
                    pass
                assert (await host.run(run_id)).next_index == before, f"{event} logged"
                continue
            try:
                if event["kind"] == "human-answered":
                    await host.answer(run_id, event["idempotencyKey"], event["answer"])
                elif event["kind"] == "signal-received":
                    payload = event.get("payload")
                    await host.signal(run_id, event["signal"], payload, event.get("key"))
                elif event["kind"] in SCHEDULED_KINDS:
                    await _scheduled(host, run_id, event)
                else:
                    await host.cancel(run_id, event.get("reason", ""))
            except HostError:
                pass
            else:
                raise AssertionError(f"the host applied {event}, which the log has rejected")
            assert (await host.run(run_id)).next_index == before, f"{event} rejected and logged"

    async def crash(self, turn: Turn | None, key: str) -> None:
        """Let ``turn`` (None: the start) issue ``key`` to a worker that dies running it."""
        # Handlers the log never answers (the run waits for none) end, and
        # this process stops working, so that it does not take the call itself.
        await self.worker.stop(self.script)
        if turn is not None and turn.action != "timer":
            await self.produce(turn)  # applied by a host that is not working: the call is ready
        names = {kind: sorted(names) for kind, names in self.plan.names.items()}
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(DOOMED),
            str(self.db),
            str(self.clock.at),
            json.dumps(names),
            stdout=asyncio.subprocess.PIPE,
        )
        try:
            assert proc.stdout is not None
            line = await asyncio.wait_for(proc.stdout.readline(), TURN_TIMEOUT_S)
            assert line.decode().strip() == key, f"the dying worker ran {line!r}, not {key}"
        finally:
            proc.kill()
            await proc.wait()  # reaped: its pid is gone, so the next worker knows it is dead

    async def children_started(self, turn: int) -> None:
        """Wait until the worker has started the children the run waits for (so that each
        child starts at its parent's time, before the clock moves on)."""
        wanted = {
            k
            for k in self.plan.pending_after(turn)
            if self.plan.kinds.get(k) == "run-subflow" and k not in self.plan.detached
        }
        if wanted:

            async def started() -> bool:
                return wanted <= set(await self.host.children(self.plan.run_id))

            await self.until_async(started, f"children {sorted(wanted)}")

    async def work_started(self, turn: int) -> None:
        """Wait until the worker has called the handlers of the work in flight that the
        log answers later: the log says that work ran. A host stops work the run no
        longer waits for, and never begins it when it stops waiting first; the
        clock must not move on (a timeout firing, a race decided) before it began."""
        plan = self.plan
        wanted: dict[str, int] = {}
        for key, emitted in plan.issues.items():
            steps = plan.work.get(key, [])
            issued = [n for n, at in enumerate(emitted) if at <= turn]
            if not issued or issued[-1] >= len(steps):
                continue
            step = steps[issued[-1]]
            if step.what in ("succeed", "fail") and step.turn is not None and step.turn > turn:
                wanted[key] = len(issued)
        if wanted:

            async def called() -> bool:
                return all(self.script.issued[key] >= n for key, n in wanted.items())

            await self.until_async(called, f"handlers of {sorted(wanted)}")

    async def read(self) -> list[str]:
        fresh = await self.host.records(self.plan.run_id, self.next_index)
        for record in fresh:
            self.next_index = record.index + 1
            if record.type == "event.reported":
                self.reported.append(record.data)
        self.types.extend(r.type for r in fresh)
        return self.types

    async def next_event(self, n: int) -> dict[str, Any]:
        await self.until(lambda _: len(self.reported) > n, f"event {n}")
        return self.reported[n]

    async def until(self, check: Callable[[list[str]], bool], what: str) -> None:
        async def ready() -> bool:
            return bool(check(await self.read()))

        await self.until_async(ready, what)

    async def until_async(self, check: Callable[[], Awaitable[bool]], what: str) -> None:
        deadline = time.monotonic() + TURN_TIMEOUT_S
        while not await check():
            if time.monotonic() > deadline:
                raise AssertionError(f"no {what} from the host within {TURN_TIMEOUT_S} s")
            await asyncio.sleep(POLL_S)


async def play(plan: Plan, workdir: Path, server: str | None = None) -> Outcome:
    """Play ``plan`` on a local host whose database is a new file in ``workdir``, or
    the PostgreSQL database ``server`` names (a URL of an empty schema)."""
    began = time.monotonic()
    clock = Clock(plan.origin)
    script = Script(plan)
    flows: list[Path] = []
    if plan.flows:
        folder = workdir / "flows"
        folder.mkdir()
        for flow_id, spec in plan.flows.items():
            (folder / f"{flow_id}.yaml").write_text(spec)
        flows.append(folder)
    db: Path | str = workdir / "local.db" if server is None else server
    host = LocalHost(db, registry=script.registry(), poll_ms=POLL_MS)
    host.now = clock.now
    outcome = Outcome()
    player = _Player(plan, host, clock, script, db, flows)
    async with host:
        try:
            await player.play()
        except (AssertionError, TimeoutError, HostError) as exc:
            outcome.error = f"{type(exc).__name__}: {exc}"
        finally:
            await player.worker.stop(script)
        try:
            outcome.records = await host.records(plan.run_id)
            outcome.metadata = await host.metadata(plan.run_id)  # the indexed rows
        except HostError as exc:
            outcome.error = outcome.error or f"HostError: {exc}"
    outcome.seconds = time.monotonic() - began
    return outcome
