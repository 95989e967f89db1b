"""What the seed draws: the flows, the handlers, the processes and the outside world.

A ``World`` is one simulated deployment of the local host: real
``LocalHost`` objects (its real worker, store, recovery, leases, outbox,
scheduled calls and schedules) on one real SQLite file, run by ``SimLoop``.
Everything the host does not decide itself comes from ``World.rng``, one
``random.Random(seed)``: the order of ready tasks and the virtual clock
(``loop``), how long each handler takes and how it ends (success, failure,
exception, outcome unknown, a hang, a late result, a result that cannot be
stored), crashes of a worker process between any two callbacks (its
connection closed without a commit: only what it committed survives),
restarts (a fresh ``LocalHost`` on the same file, running its recovery), a
second worker racing the first, and what callers do from outside (start runs,
signal, answer, cancel, update, and the scheduled calls' cancel, run-now and
add; schedules fire on the virtual clock).

The world keeps a journal of what handlers did and what callers were told,
for the invariants (``invariants``). It never reads the real clock, never
uses Python's ``hash()`` and runs no threads (every handler is ``async``).
"""

from __future__ import annotations

import asyncio
import contextvars
import random
import sqlite3
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import flowcore
from flowcore import CallTool, RunAgent
from flowcore_handlers import HandlerError, OutcomeUnknown, Registry, context

from .._host import LocalHost
from .._store import HostError
from .loop import PROCESS, SimLoop

# The simulated clock starts at 2026-01-01T00:00:00Z (epoch ms).
EPOCH_MS = 1_767_225_600_000
LEASE_MS = 2_000

MAIN_FLOW = """\
flow: sim
budget: {steps: 40}
tools:
  look: {class: readonly}
  put: {class: idempotent, schedulable: true}
  send: {schedulable: true}
steps:
  - id: first
    call_tool: {tool: look, input: "${input.n}"}
    timeout_ms: 4000
    retry: {max_attempts: 2, errors: ["*"], initial_interval_ms: 300}
  - id: tell
    try:
      - {id: send1, call_tool: {tool: send, input: "${input.n}"}, timeout_ms: 6000}
    catch:
      - steps: [{id: check, call_tool: {tool: look, input: check}}]
  - id: later
    schedule: {tool: put, input: "${input.n}", delay_ms: 3000}
  - id: fan
    try:
      - id: both
        parallel:
          mode: all
          branches:
            a: [{id: fa, call_tool: {tool: put, input: a}}]
            b: [{id: fb, run_agent: {agent: helper, prompt: "b"}}]
    catch:
      - steps: [{id: fanned, sleep: {for_ms: 200}}]
  - id: gate
    try:
      - {id: go, await_signal: {signal: go}, timeout_ms: 15000}
    catch:
      - steps: [{id: nogo, sleep: {for_ms: 100}}]
  - id: ask
    try:
      - {id: q, ask_human: {question: "ok?", options: ["yes", "no"]}, timeout_ms: 15000}
    catch:
      - steps: [{id: noq, call_tool: {tool: look, input: q}}]
  - id: child
    run_subflow: {flow: simchild, input: "${input.n}"}
  - id: last
    call_tool: {tool: put, input: last}
updates:
  poke:
    steps: [{id: p, call_tool: {tool: put, input: "${update.input}"}}]
    reply: "${steps.p.output}"
output: "${steps.last.output}"
"""

CHILD_FLOW = """\
flow: simchild
tools:
  look: {class: readonly}
  put: {class: idempotent}
steps:
  - {id: c1, call_tool: {tool: put, input: "${input}"}}
  - {id: nap, sleep: {for_ms: 500}}
  - {id: c2, call_tool: {tool: look, input: "${input}"}}
  - id: tellparent
    try:
      - {id: tell, signal_run: {run: "sim-${input}", signal: go, payload: "${run.id}"}}
    catch:
      - steps: [{id: untold, sleep: {for_ms: 10}}]
schedules:
  tick:
    every: 7s
    overlap: allow_all
    catchup_window: 1h
    input: "${schedule.at_ms}"
    limit: 6
"""

# Each tool's execution class, as the flows declare it (agents are uncertain).
CLASSES = {"look": "readonly", "put": "idempotent", "send": "uncertain", "helper": "uncertain"}

# How a handler ends, with its weight: drawn from the seed for every call.
OUTCOMES: tuple[tuple[str, int], ...] = (
    ("success", 70),
    ("failure", 7),
    ("exception", 4),
    ("unknown", 4),
    ("slow", 6),  # longer than a lease: its heartbeats must keep it
    ("late", 4),  # past its step's timeout
    ("hang", 2),  # far past every timeout; it ends in the end
    ("too-large", 1),
    ("not-json", 2),
)
_NAMES = [name for name, _ in OUTCOMES]
_WEIGHTS = [weight for _, weight in OUTCOMES]

# Outside operations, with their weight.
ACTIONS: tuple[tuple[str, int], ...] = (
    ("start", 10),
    ("signal", 8),
    ("answer", 8),
    ("update", 4),
    ("cancel", 2),
    ("scheduled-cancel", 2),
    ("scheduled-now", 3),
    ("scheduled-add", 2),
    ("trigger", 1),
    ("second-worker", 2),
)
_ACTIONS = [name for name, _ in ACTIONS]
_ACTION_WEIGHTS = [weight for _, weight in ACTIONS]


@dataclass(frozen=True)
class Config:
    """How much happens in one seed."""

    actions: int = 40  # outside operations
    crash_per_step: float = 1 / 1500  # chance a live worker crashes before a callback
    mean_gap_ms: int = 700  # mean virtual time between outside operations
    quiesce_ms: int = 400_000  # after the last fault: long past every hang and lease
    max_steps: int = 400_000  # a seed that runs longer than this is a failure


@dataclass
class HandlerRun:
    """One start of a handler: which process ran it, and how it ended."""

    key: str
    run_id: str
    tool: str
    exec_class: str
    process: str
    outcome: str
    ended: bool = False


@dataclass
class Ack:
    """What a caller was told happened (checked at the end: nothing acknowledged is lost)."""

    what: str
    run_id: str
    detail: str = ""


@dataclass
class Broken:
    """An invariant broken: its name, and what shows it."""

    name: str
    detail: str
    step: int
    at_ms: int


@dataclass
class Process:
    """A simulated worker process: one ``LocalHost`` working, until it crashes or stops."""

    name: str
    host: LocalHost
    stop: asyncio.Event
    task: asyncio.Task[None] | None = None
    alive: bool = True


@dataclass
class World:
    """One seed's deployment: the loop, the database, the processes, the journal."""

    seed: int
    directory: Path
    config: Config = field(default_factory=Config)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.loop = SimLoop(self.rng)
        self.db = self.directory / "sim.db"
        self.trace: list[str] = []
        self.broken: list[Broken] = []
        self.handler_runs: dict[tuple[str, str], list[HandlerRun]] = {}
        self.acks: list[Ack] = []
        self.processes: dict[str, Process] = {}
        self.graveyard: list[Any] = []  # crashed processes' objects: never collected mid-run
        self.runs: list[str] = []
        self.crashes = 0
        self.restarts = 0
        self.checks = 0
        self.faults = True  # crashes and outside operations still happen
        self.client: LocalHost | None = None
        self._serial = 0
        self._reported: set[tuple[tuple[str, str], str, str]] = set()
        main = self.directory / "sim.yaml"
        child = self.directory / "simchild.yaml"
        main.write_text(MAIN_FLOW)
        child.write_text(CHILD_FLOW)
        self.main_spec, self.child_spec = main, child
        self.registry = Registry(
            tools={"look": self._handler, "put": self._handler, "send": self._handler},
            agents={"helper": self._handler},
        )
        self.loop.before_step = self._before_step

    # --- what the seed draws ----------------------------------------------------------

    def now_ms(self) -> int:
        return EPOCH_MS + int(self.loop.time() * 1000)

    def hex(self, size: int) -> str:
        return self.rng.getrandbits(size * 8).to_bytes(size, "big").hex()

    def note(self, text: str) -> None:
        self.trace.append(f"{self.loop.steps:>7} {self.now_ms() - EPOCH_MS:>9} {text}")

    def breaks(self, name: str, detail: str) -> None:
        self.broken.append(Broken(name, detail, self.loop.steps, self.now_ms() - EPOCH_MS))
        self.note(f"BROKEN {name}: {detail}")

    def _before_step(self, step: int) -> None:
        if step > self.config.max_steps:
            raise RuntimeError(f"the seed ran past {self.config.max_steps} steps")
        self._held_once()
        if not self.faults or self.rng.random() >= self.config.crash_per_step:
            return
        live = sorted(name for name, process in self.processes.items() if process.alive)
        if live:
            self.crash(self.rng.choice(live))

    def _held_once(self) -> None:
        """After every step: no effect is held (claimed, running) by two live processes."""
        held: dict[tuple[str, str], str] = {}
        self.checks += 1
        for name, process in self.processes.items():
            if not process.alive:
                continue
            for ident in process.host._running:
                other = held.setdefault(ident, name)
                if other != name and (ident, other, name) not in self._reported:
                    self._reported.add((ident, other, name))
                    self.breaks(
                        "two-workers-one-lease", f"{ident[1]} is held by {other} and {name}"
                    )

    # --- handlers ---------------------------------------------------------------------

    async def _handler(self, effect: CallTool | RunAgent) -> Any:
        tool = effect.tool if isinstance(effect, CallTool) else effect.agent_id
        key = effect.idempotency_key
        run_id = context().run_id or ""
        process = PROCESS.get()
        outcome = self.rng.choices(_NAMES, _WEIGHTS)[0]
        record = HandlerRun(key, run_id, tool, CLASSES[tool], process, outcome)
        self._started(record)
        self.note(f"{process} runs {key} ({tool}): {outcome}")
        try:
            seconds = {
                "slow": self.rng.uniform(LEASE_MS / 1000, 3 * LEASE_MS / 1000),
                "late": self.rng.uniform(6.5, 12.0),
                "hang": self.rng.uniform(60.0, 120.0),
            }.get(outcome, self.rng.uniform(0.0, 0.6))
            await asyncio.sleep(seconds)
        finally:
            record.ended = True
        match outcome:
            case "failure":
                raise HandlerError("sim-failed", f"{tool} failed", retryable=True)
            case "exception":
                raise RuntimeError(f"{tool} raised")
            case "unknown":
                raise OutcomeUnknown(f"{tool} lost its connection")
            case "too-large":
                return "x" * (flowcore.MAX_EVENT_BYTES + 1)
            case "not-json":
                return {"not": {1, 2}}
        return {"echo": effect.input if isinstance(effect, CallTool) else effect.prompt}

    def _started(self, record: HandlerRun) -> None:
        """Journal a handler's start, checking the invariants it can break."""
        ident = (record.run_id, record.key)
        before = self.handler_runs.setdefault(ident, [])
        self.checks += 3
        for other in before:
            alive = self.processes.get(other.process)
            if not other.ended and alive is not None and alive.alive:
                self.breaks(
                    "two-workers-one-lease",
                    f"{record.key} runs in {record.process} while {other.process} still runs it",
                )
        if before and record.exec_class == "uncertain" and not _scheduled(record):
            self.breaks(
                "uncertain-call-ran-twice",
                f"{record.key} ({record.tool}) ran again in {record.process}"
                f" after {before[-1].process}",
            )
        if before and record.exec_class != "uncertain":
            last = before[-1]
            crashed = last.process not in self.processes or not self.processes[last.process].alive
            if not crashed and last.outcome != "unknown":
                self.breaks(
                    "safe-call-rerun-without-crash",
                    f"{record.key} ({record.tool}) ran again in {record.process}; its last run"
                    f" in {last.process} ended {last.outcome} with no crash",
                )
        before.append(record)

    # --- processes --------------------------------------------------------------------

    def spawn(self, name: str, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Start ``coro`` as a task of process ``name`` (its callbacks carry the name)."""
        context = contextvars.copy_context()
        context.run(PROCESS.set, name)
        return context.run(self.loop.create_task, coro)

    def start_worker(self, base: str) -> None:
        incarnation = sum(1 for name in self.processes if name.split(".")[0] == base) + 1
        name = f"{base}.{incarnation}"
        host = LocalHost(
            self.db,
            registry=self.registry,
            durability="process-crash",
            lease_ms=LEASE_MS,
            poll_ms=self.rng.choice((50, 250, 1000)),
            concurrency=self.rng.choice((2, 8, 64)),
            clock=self.now_ms,
            ids=self.hex,
        )
        process = Process(name, host, asyncio.Event())
        self.processes[name] = process
        self.note(f"{name} starts")

        async def working() -> None:
            await host.open()
            await host.work(process.stop)

        process.task = self.spawn(name, working())

    def crash(self, name: str) -> None:
        """The process dies between two callbacks: no more of its code runs, and its
        connection goes without committing (SQLite keeps what was committed)."""
        process = self.processes[name]
        process.alive = False
        self.loop.dead.add(name)
        self.crashes += 1
        self.note(f"{name} crashes")
        store = process.host._store
        if store is not None:
            try:
                store.conn.close()
            except sqlite3.Error:
                pass
        self.graveyard.append(process)
        base = name.split(".")[0]
        if self.faults and self.rng.random() < 0.2:
            return  # it stays down a while: the other worker, or the end, restarts it
        delay = self.rng.uniform(0.05, 6.0)

        async def restarting() -> None:
            await asyncio.sleep(delay)
            if not any(p.alive for n, p in self.processes.items() if n.split(".")[0] == base):
                self.restarts += 1
                self.start_worker(base)

        self.spawn("world", restarting())

    def live(self, base: str) -> bool:
        return any(p.alive for n, p in self.processes.items() if n.split(".")[0] == base)

    # --- the outside world ------------------------------------------------------------

    async def outside(self, client: LocalHost) -> None:
        """The callers: one operation after another, each its own task, at random times."""
        pending: list[asyncio.Task[None]] = []
        for _ in range(self.config.actions):
            await asyncio.sleep(self.rng.expovariate(1000 / self.config.mean_gap_ms))
            action = self.rng.choices(_ACTIONS, _ACTION_WEIGHTS)[0]
            if action == "second-worker":
                if not self.live("w2"):
                    self.start_worker("w2")
                continue
            self._serial += 1
            pending.append(self.spawn("client", self._operate(client, action, self._serial)))
        await asyncio.gather(*pending)

    async def _operate(self, client: LocalHost, action: str, serial: int) -> None:
        run_id = self.rng.choice(self.runs) if self.runs else None
        if action != "start" and action != "trigger" and run_id is None:
            return
        try:
            await self._one(client, action, serial, run_id)
        except (HostError, flowcore.FlowcoreError) as exc:  # refused, with the host's own error
            self.note(f"op {serial} {action} {run_id}: refused: {type(exc).__name__}")
        except Exception as exc:
            self.breaks(
                "operations-fail-with-typed-errors",
                f"{action} on {run_id} raised {type(exc).__name__}: {exc}",
            )

    async def _one(self, client: LocalHost, action: str, serial: int, run_id: str | None) -> None:
        if action == "start":
            rid = f"sim-{serial}"
            await client.start(self.main_spec, {"n": serial}, rid, flows=[self.child_spec])
            self.runs.append(rid)
            self.acks.append(Ack("start", rid))
            self.note(f"op {serial} start {rid}: ok")
            return
        if action == "trigger":
            rid = await client.trigger_schedule("tick")
            self.acks.append(Ack("start", rid))
            self.note(f"op {serial} trigger tick: {rid}")
            return
        assert run_id is not None
        if action == "signal":
            await client.signal(run_id, "go", {"serial": serial})
            self.acks.append(Ack("signal", run_id, str(serial)))
        elif action == "answer":
            questions = await client.open_questions(run_id)
            if not questions:
                return
            answer = self.rng.choice(("yes", "no"))
            await client.answer(run_id, questions[0].key, answer)
            self.acks.append(Ack("answer", run_id, questions[0].key))
        elif action == "update":
            outcome = await client.update(run_id, "poke", serial, f"u{serial}", wait=False)
            self.acks.append(Ack("update", run_id, f"u{serial}"))
            self.note(f"op {serial} update {run_id}: {outcome.status}")
            return
        elif action == "cancel":
            await client.cancel(run_id, f"op {serial}")
            self.acks.append(Ack("cancel", run_id))
        elif action in ("scheduled-cancel", "scheduled-now"):
            rows = [row for row in await client.scheduled(run_id) if row.status == "pending"]
            if not rows:
                return
            row = self.rng.choice(rows)
            if action == "scheduled-cancel":
                done = await client.cancel_scheduled(run_id, row.id)
            else:
                done = await client.run_scheduled_now(run_id, row.id)
            self.note(f"op {serial} {action} {run_id} {row.id}: {done}")
            return
        elif action == "scheduled-add":
            sid = await client.add_scheduled(run_id, "put", {"serial": serial}, delay_ms=2000)
            self.acks.append(Ack("scheduled", run_id, sid))
        self.note(f"op {serial} {action} {run_id}: ok")


def _scheduled(record: HandlerRun) -> bool:
    """A scheduled call's tool is issued again by its run after an unknown outcome."""
    try:
        role = flowcore.parse_key(record.key, record.run_id).role
    except ValueError:
        return False
    return role in (flowcore.KeyRole.SCHEDULE_CALL, flowcore.KeyRole.SCHEDULE_REPLAY)
