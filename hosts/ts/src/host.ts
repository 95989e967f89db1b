/**
 * A durable flowcore host in TypeScript.
 *
 * Theory of operation. The interpreter is `flowcore decide --stdio`, a
 * supervised child process (supervisor.ts): the host hands it a run's state
 * string and one event, and gets the next state string, the effects, and the
 * decision's log records. Each decision is committed before anything acts on
 * it: its records are appended to the run's log in one fsync'd write, then
 * the snapshot (state string, next log index) replaces the old one. Only then
 * are its effects performed: work runs in the registered handlers (each
 * attempt written to the run's dispatch file, fsync'd, before its handler
 * starts), sleeps arm timers on the host's clock, child runs start, questions
 * and signal waits wait for `answer` and `signal`. A handler's result, a timer
 * firing, an answer or a signal is the next event. One run's decisions are
 * taken one at a time, in the order they were asked for.
 *
 * Recovery (`open`): every run in the store is loaded from its snapshot; log
 * records past it (a decision whose snapshot was never written) are cut off
 * and the decision is taken again from its event. Work that was dispatched
 * and never answered was lost with the process: a tool the run's flow
 * declares `readonly` or `idempotent` (its `tools:`, as decide's `start`
 * reply gives them, kept in run.json) runs again under the same idempotency
 * key (an `effect.redispatched` record says so in the log), any other work is
 * reported `effect-outcome-unknown` and is never run twice. Work dispatched
 * more than `maxRecoveries` times fails its step with `dead-letter`. Timers
 * are armed again at their deadlines; children recover as runs of their own.
 *
 * The host never reads or edits a state string, and never decides anything
 * itself: what a run does next is always the interpreter's answer.
 */

import { randomUUID } from "node:crypto";

import { realClock, type Clock } from "./clock";
import { subflowSettled } from "./decider";
import { DecideRefused, HostError, RegistryError, RunRefused, UnknownRun } from "./errors";
import type {
  BudgetCaps,
  Decided,
  ErrorInfo,
  ExecutionClass,
  FlowEffect,
  FlowEvent,
  JsonValue,
  LogRecord,
  RunStatus,
  RunSubflow,
  Settled,
  Usage,
} from "./flowEffect";
import { isUsageResult, Registry, WorkFailed, type HandlerResult, type WorkContext } from "./registry";
import { FileStore, type RunMeta } from "./store";
import { SupervisedDecider, type SupervisorOptions } from "./supervisor";

export interface HostOptions {
  /** The store's directory, or a store. */
  readonly store: string | FileStore;
  readonly registry: Registry;
  /** How to run the decide process (the `flowcore` command), or a supervisor to share. */
  readonly decide?: SupervisorOptions | SupervisedDecider;
  readonly clock?: Clock;
  /** Recoveries of one attempt before it fails with `dead-letter` (default 3). */
  readonly maxRecoveries?: number;
}

export interface StartRunOptions {
  /** The run's id; default `<flowId>-<8 hex>`. Starting an id that exists returns it unchanged. */
  readonly runId?: string;
  readonly budget?: BudgetCaps | null;
  readonly metadata?: { readonly [field: string]: string | number | boolean } | null;
}

/** A question a run waits to have answered. */
export interface Question {
  readonly key: string;
  readonly question: string;
  readonly options?: readonly string[];
}

/** How a run stands, from what the host knows of it. */
export interface RunView {
  readonly runId: string;
  readonly flowId: string;
  readonly status: RunStatus;
  readonly output?: JsonValue;
  readonly error?: ErrorInfo;
  readonly questions: readonly Question[];
  /** Signal names it waits for. */
  readonly signals: readonly string[];
  /** Work effects in flight: key and what they run. */
  readonly work: readonly { readonly key: string; readonly kind: string; readonly target: string }[];
  readonly timers: readonly { readonly key: string; readonly untilMs: number }[];
  readonly parent?: { readonly runId: string; readonly key: string };
  /** The index the run's next log record takes. */
  readonly logLength: number;
}

interface Open {
  readonly effect: FlowEffect;
  /** The index of the effect.emitted record. */
  readonly emitted: number;
}

interface Slot {
  readonly meta: RunMeta;
  state: string;
  status: RunStatus;
  nextIndex: number;
  readonly open: Map<string, Open>;
  readonly timers: Map<string, () => void>;
  chain: Promise<void>;
  settled: Settled | null;
  usage: Usage | undefined;
  /** A continue-as-new effect not yet followed by its next incarnation. */
  continued: FlowEffect | null;
  readonly waiters: (() => void)[];
  /** Keys of the attempts this process dispatched (recovery leaves them be). */
  readonly live: Set<string>;
}

const WORK = new Set(["call-tool", "run-agent", "run-team"]);
const KEYED_EVENTS = new Set([
  "effect-succeeded",
  "effect-failed",
  "effect-outcome-unknown",
  "human-answered",
  "timer-fired",
  "subflow-settled",
]);

function keyOf(effect: FlowEffect): string | null {
  return "idempotencyKey" in effect ? effect.idempotencyKey : null;
}

/** The class the run's flow declares for the tool a call-tool calls; null for other work. */
function classOf(meta: RunMeta, effect: FlowEffect): ExecutionClass | null {
  if (effect.kind !== "call-tool") {
    return null;
  }
  const classes = meta.toolClasses ?? {}; // absent from a run.json written before it was kept
  return Object.hasOwn(classes, effect.tool) ? (classes[effect.tool] ?? "uncertain") : "uncertain";
}

function targetOf(effect: FlowEffect): string {
  switch (effect.kind) {
    case "call-tool":
      return effect.tool;
    case "run-agent":
      return effect.agentId;
    case "run-team":
      return effect.teamId;
    default:
      return effect.kind;
  }
}

export class Host {
  readonly store: FileStore;
  readonly registry: Registry;
  readonly decider: SupervisedDecider;
  readonly clock: Clock;
  private readonly maxRecoveries: number;
  private readonly ownsDecider: boolean;
  private readonly slots = new Map<string, Slot>();
  private inflight = 0;
  private closed = false;
  /** Told every batch of records the host appends to a run's log. */
  onRecords: ((runId: string, records: readonly LogRecord[]) => void) | null = null;

  constructor(options: HostOptions) {
    this.store = typeof options.store === "string" ? new FileStore(options.store) : options.store;
    this.registry = options.registry;
    this.ownsDecider = !(options.decide instanceof SupervisedDecider);
    this.decider = options.decide instanceof SupervisedDecider ? options.decide : new SupervisedDecider(options.decide);
    this.clock = options.clock ?? realClock;
    this.maxRecoveries = options.maxRecoveries ?? 3;
  }

  // --- the API --------------------------------------------------------------------------------

  /**
   * Load every run of the store and resume those still running: work lost
   * with a previous process is run again or reported unknown, timers re-armed.
   */
  async open(): Promise<void> {
    const ids = this.store.runIds();
    const loaded: Slot[] = [];
    for (const runId of ids) {
      const slot = this.load(runId);
      if (slot !== null) {
        loaded.push(slot);
      }
    }
    for (const runId of ids) {
      if (!this.slots.has(runId)) {
        await this.restart(runId); // started, but its first decision was never committed
      }
    }
    for (const slot of loaded) {
      await this.locked(slot, () => this.resume(slot));
    }
  }

  /** Start a run of the registered flow `flowId`; returns its id. */
  async start(flowId: string, input: JsonValue = null, options: StartRunOptions = {}): Promise<string> {
    const spec = this.registry.flowOf(flowId);
    if (spec === undefined) {
      throw new RegistryError(`no flow ${JSON.stringify(flowId)} is registered`);
    }
    const runId = options.runId ?? `${flowId}-${randomUUID().slice(0, 8)}`;
    if (this.slots.has(runId) || this.store.has(runId)) {
      return runId;
    }
    await this.begin({
      runId,
      flowId,
      spec,
      input,
      nowMs: this.clock.now(),
      budget: options.budget ?? null,
      depth: 0,
      metadata: options.metadata ?? null,
      parent: null,
    });
    return runId;
  }

  /** Send the signal `name` to a run (buffered by the run until a step waits for it). */
  async signal(runId: string, name: string, payload: JsonValue = null, key?: string): Promise<void> {
    const slot = this.slotOf(runId);
    const event: FlowEvent = {
      kind: "signal-received",
      signal: name,
      payload,
      atMs: this.clock.now(),
      ...(key !== undefined ? { key } : {}),
    };
    await this.locked(slot, async () => {
      await this.refusing(slot, event);
    });
  }

  /** Answer the question `key` of a run (the answer must be one of its options, when it has any). */
  async answer(runId: string, key: string, answer: JsonValue, principal?: string): Promise<void> {
    const slot = this.slotOf(runId);
    await this.locked(slot, async () => {
      const event: FlowEvent = {
        kind: "human-answered",
        idempotencyKey: key,
        answer,
        atMs: this.clock.now(),
        ...(principal !== undefined ? { principal } : {}),
      };
      try {
        await this.refusing(slot, event);
      } catch (error) {
        // A question the run no longer asks (its step timed out or was cancelled) leaves the view.
        if (error instanceof RunRefused && slot.open.get(key)?.effect.kind === "ask-human") {
          slot.open.delete(key);
        }
        throw error;
      }
    });
  }

  /** Ask a run to cancel (its compensations run first, as its flow says). */
  async cancel(runId: string, reason?: string): Promise<void> {
    const slot = this.slotOf(runId);
    await this.locked(slot, async () => {
      const event: FlowEvent = {
        kind: "cancel-requested",
        atMs: this.clock.now(),
        ...(reason !== undefined ? { reason } : {}),
      };
      await this.refusing(slot, event);
    });
  }

  /** Answer one of the flow's declared queries from the run's state. */
  async query(runId: string, name: string, args: JsonValue = null): Promise<JsonValue> {
    const slot = this.slotOf(runId);
    return this.decider.query(slot.state, name, args);
  }

  /** Every run the host holds. */
  runs(): RunView[] {
    return [...this.slots.keys()].sort().map((id) => this.view(id));
  }

  view(runId: string): RunView {
    const slot = this.slotOf(runId);
    const open = [...slot.open.entries()];
    const questions: Question[] = [];
    for (const [key, { effect }] of open) {
      if (effect.kind === "ask-human") {
        questions.push({ key, question: effect.question, ...(effect.options ? { options: effect.options } : {}) });
      }
    }
    const settled = slot.settled;
    const parent = slot.meta.parent;
    return {
      runId,
      flowId: slot.meta.flowId,
      status: slot.status,
      ...(settled?.output !== undefined ? { output: settled.output } : {}),
      ...(settled?.error !== undefined ? { error: settled.error } : {}),
      questions,
      signals: open.flatMap(([, { effect }]) => (effect.kind === "await-signal" ? [effect.signal] : [])),
      work: open.flatMap(([key, { effect }]) =>
        WORK.has(effect.kind) ? [{ key, kind: effect.kind, target: targetOf(effect) }] : [],
      ),
      timers: open.flatMap(([key, { effect }]) => (effect.kind === "sleep" ? [{ key, untilMs: effect.untilMs }] : [])),
      ...(parent !== null ? { parent: { runId: parent.runId, key: parent.key } } : {}),
      logLength: slot.nextIndex,
    };
  }

  /** Resolves with the run's view once it has settled. */
  settled(runId: string): Promise<RunView> {
    const slot = this.slotOf(runId);
    if (slot.status !== "running") {
      return Promise.resolve(this.view(runId));
    }
    return new Promise((resolve) => slot.waiters.push(() => resolve(this.view(runId))));
  }

  /** Resolves when no decision is being taken or waits to be (handlers may still be running). */
  async idle(): Promise<void> {
    for (;;) {
      await new Promise<void>((resolve) => setImmediate(resolve));
      if (this.inflight === 0) {
        return;
      }
      await Promise.all([...this.slots.values()].map((slot) => slot.chain));
    }
  }

  /**
   * Disarm the timers and end the decide process (unless it was given: a shared
   * one is its owner's to close). Handlers still running are left to finish unreported.
   */
  async close(): Promise<void> {
    this.closed = true;
    for (const slot of this.slots.values()) {
      for (const disarm of slot.timers.values()) {
        disarm();
      }
      slot.timers.clear();
    }
    await Promise.all([...this.slots.values()].map((slot) => slot.chain));
    if (this.ownsDecider) {
      await this.decider.close();
    }
  }

  // --- runs, decisions ------------------------------------------------------------------------

  private slotOf(runId: string): Slot {
    const slot = this.slots.get(runId);
    if (slot === undefined) {
      throw new UnknownRun(runId);
    }
    return slot;
  }

  private newSlot(meta: RunMeta, state: string, status: RunStatus, nextIndex: number): Slot {
    const slot: Slot = {
      meta,
      state,
      status,
      nextIndex,
      open: new Map(),
      timers: new Map(),
      chain: Promise.resolve(),
      settled: null,
      usage: undefined,
      continued: null,
      waiters: [],
      live: new Set(),
    };
    this.slots.set(meta.runId, slot);
    return slot;
  }

  /** Run `fn` after every earlier decision of the run: one decision at a time per run. */
  private locked<T>(slot: Slot, fn: () => Promise<T>): Promise<T> {
    this.inflight += 1;
    const run = slot.chain.then(fn);
    slot.chain = run.then(
      () => {
        this.inflight -= 1;
      },
      () => {
        this.inflight -= 1;
      },
    );
    return run;
  }

  private async begin(meta: RunMeta): Promise<void> {
    const decided = await this.decider.start(meta.spec, {
      input: meta.input,
      runId: meta.runId,
      nowMs: meta.nowMs,
      budget: meta.budget,
      depth: meta.depth,
      metadata: meta.metadata,
      logIndex: 0,
    });
    const started: RunMeta = { ...meta, toolClasses: decided.toolClasses ?? {} };
    this.store.create(started);
    const slot = this.newSlot(started, decided.state, decided.status, 0);
    await this.locked(slot, () => this.commit(slot, decided));
  }

  /** A run whose run.json was written but whose start was never committed: start it again. */
  private async restart(runId: string): Promise<void> {
    const meta = this.store.meta(runId);
    this.store.truncateLog(runId, 0);
    const decided = await this.decider.start(meta.spec, {
      input: meta.input,
      runId,
      nowMs: meta.nowMs,
      budget: meta.budget,
      depth: meta.depth,
      metadata: meta.metadata,
      logIndex: 0,
    });
    const slot = this.newSlot(meta, decided.state, decided.status, 0);
    await this.locked(slot, () => this.commit(slot, decided));
  }

  /** Advance the run with `event`; null when the interpreter rejected it (nothing changed). */
  private async decide(slot: Slot, event: FlowEvent): Promise<Decided | null> {
    let decided: Decided;
    try {
      decided = await this.decider.advance(slot.state, event, slot.nextIndex);
    } catch (error) {
      if (error instanceof DecideRefused && error.type === "event-rejected") {
        return null;
      }
      throw error;
    }
    await this.commit(slot, decided);
    return decided;
  }

  /** Advance with an event from outside: a rejection is the caller's `RunRefused`. */
  private async refusing(slot: Slot, event: FlowEvent): Promise<void> {
    try {
      const decided = await this.decider.advance(slot.state, event, slot.nextIndex);
      await this.commit(slot, decided);
    } catch (error) {
      if (error instanceof DecideRefused && (error.type === "event-rejected" || error.type === "bad-event")) {
        throw new RunRefused(slot.meta.runId, `${slot.meta.runId}: ${error.message}`);
      }
      throw error;
    }
  }

  /** Make the decision durable (log, then snapshot), then act on its effects. */
  private async commit(slot: Slot, decided: Decided): Promise<void> {
    const records = decided.records ?? [];
    if (records[0]?.index !== slot.nextIndex) {
      throw new HostError(`decide gave no log records at ${slot.nextIndex} for ${slot.meta.runId}`);
    }
    this.store.append(slot.meta.runId, records);
    slot.nextIndex += records.length;
    slot.state = decided.state;
    slot.status = decided.status;
    slot.usage = decided.usage ?? slot.usage;
    this.fold(slot, records);
    this.writeSnapshot(slot);
    this.onRecords?.(slot.meta.runId, records);
    await this.act(slot, decided.effects, records[records.length - 1]?.at ?? this.clock.now());
  }

  private writeSnapshot(slot: Slot): void {
    this.store.writeSnapshot(slot.meta.runId, {
      state: slot.state,
      status: slot.status,
      nextIndex: slot.nextIndex,
      ...(slot.usage !== undefined ? { usage: slot.usage } : {}),
    });
  }

  /** What the run waits for, kept up to date from its log records. */
  private fold(slot: Slot, records: readonly LogRecord[]): void {
    for (const record of records) {
      if (record.type === "run.started") {
        slot.open.clear(); // a new incarnation takes nothing pending over but what its record says
        slot.continued = null;
      } else if (record.type === "effect.emitted") {
        const effect = record.data as unknown as FlowEffect;
        const key = keyOf(effect);
        if (effect.kind === "settled") {
          slot.settled = effect;
          slot.open.clear();
        } else if (effect.kind === "continue-as-new") {
          slot.continued = effect;
        } else if (key !== null) {
          slot.open.set(key, { effect, emitted: record.index });
        }
      } else if (record.type === "event.reported") {
        const event = record.data as unknown as FlowEvent;
        if (KEYED_EVENTS.has(event.kind) && "idempotencyKey" in event) {
          slot.open.delete(event.idempotencyKey);
        } else if (event.kind === "signal-received") {
          for (const [key, { effect }] of slot.open) {
            const names = effect.kind === "await-signal" ? (effect.signals ?? [effect.signal]) : [];
            if (names.includes(event.signal) && (effect.kind !== "await-signal" || effect.key === event.key)) {
              slot.open.delete(key);
              break;
            }
          }
        }
      }
    }
  }

  /** Perform a committed decision's effects. */
  private async act(slot: Slot, effects: readonly FlowEffect[], at: number): Promise<void> {
    for (const effect of effects) {
      const entry = slot.open.get(keyOf(effect) ?? "");
      switch (effect.kind) {
        case "call-tool":
        case "run-agent":
        case "run-team":
          this.dispatch(slot, effect, entry?.emitted ?? slot.nextIndex, 0);
          break;
        case "sleep":
          this.arm(slot, effect.idempotencyKey, effect.untilMs);
          break;
        case "run-subflow":
          await this.child(slot, effect);
          break;
        case "signal-run":
          this.signalRun(slot, effect);
          break;
        case "continue-as-new":
          await this.continueAsNew(slot, at);
          break;
        case "settled":
          this.settle(slot);
          break;
        case "ask-human":
        case "await-signal":
          break; // answered through `answer` and `signal`
        default: {
          const never: never = effect;
          throw new HostError(`an effect this host does not know: ${JSON.stringify(never)}`);
        }
      }
    }
  }

  private settle(slot: Slot): void {
    for (const disarm of slot.timers.values()) {
      disarm();
    }
    slot.timers.clear();
    for (const wake of slot.waiters.splice(0)) {
      wake();
    }
    const parent = slot.meta.parent;
    const settled = slot.settled;
    if (parent === null || parent.detached || settled === null || slot.usage === undefined) {
      return;
    }
    const up = this.slots.get(parent.runId);
    if (up !== undefined) {
      const event = subflowSettled(
        parent.key,
        { id: null, ok: true, state: slot.state, effects: [settled], status: slot.status, usage: slot.usage },
        this.clock.now(),
      );
      void this.report(up, parent.key, () => event);
    }
  }

  private async continueAsNew(slot: Slot, at: number): Promise<void> {
    const effect = slot.continued;
    if (effect === null || effect.kind !== "continue-as-new") {
      return;
    }
    const decided = await this.decider.start(slot.meta.spec, {
      runId: slot.meta.runId,
      nowMs: at,
      depth: slot.meta.depth,
      continued: effect,
      logIndex: slot.nextIndex,
    });
    await this.commit(slot, decided);
  }

  // --- effects ---------------------------------------------------------------------------------

  /**
   * Report how a piece of work ended, if the run still waits for it (a rejection
   * drops it). Nobody waits for this: a failure of the host itself is a warning,
   * and the work counts as lost (recovery finds it) until a later process reports it.
   */
  private report(slot: Slot, key: string, event: () => FlowEvent): Promise<void> {
    return this.locked(slot, async () => {
      if (this.closed || slot.status !== "running" || !slot.open.has(key)) {
        return;
      }
      if ((await this.decide(slot, event())) === null) {
        slot.open.delete(key); // dropped by the run (cancelled, timed out): nothing to report
      }
    }).catch((error: unknown) => this.fatal(error));
  }

  private dispatch(slot: Slot, effect: FlowEffect, emitted: number, recovery: number): void {
    const key = keyOf(effect);
    if (key === null) {
      return;
    }
    const runId = slot.meta.runId;
    this.store.dispatched(runId, { key, emitted, at: this.clock.now() });
    slot.live.add(`${key}@${emitted}`);
    const executionClass = classOf(slot.meta, effect);
    const context: WorkContext = {
      runId,
      idempotencyKey: key,
      recovery,
      ...(executionClass !== null ? { executionClass } : {}),
    };
    const work = (): Promise<HandlerResult> => {
      switch (effect.kind) {
        case "call-tool": {
          const tool = this.registry.toolOf(effect.tool);
          if (tool === undefined) {
            throw new WorkFailed("unknown-tool", `no tool ${JSON.stringify(effect.tool)} is registered with this host`);
          }
          return Promise.resolve(tool.handler(effect.input ?? null, context));
        }
        case "run-agent": {
          const agent = this.registry.agentOf(effect.agentId);
          if (agent === undefined) {
            throw new WorkFailed("unknown-agent", `no agent ${JSON.stringify(effect.agentId)} is registered with this host`);
          }
          const request = {
            prompt: effect.prompt,
            ...(effect.instructions !== undefined ? { instructions: effect.instructions } : {}),
            ...(effect.member !== undefined ? { member: effect.member } : {}),
          };
          return Promise.resolve(agent(request, context));
        }
        case "run-team": {
          const team = this.registry.teamOf(effect.teamId);
          if (team === undefined) {
            throw new WorkFailed("unknown-team", `no team ${JSON.stringify(effect.teamId)} is registered with this host`);
          }
          return Promise.resolve(team({ prompt: effect.prompt }, context));
        }
        default:
          throw new HostError(`${effect.kind} is not work`);
      }
    };
    Promise.resolve()
      .then(work)
      .then(
        (result) =>
          this.report(slot, key, (): FlowEvent => {
            const atMs = this.clock.now();
            if (isUsageResult(result)) {
              return { kind: "effect-succeeded", idempotencyKey: key, output: result.output, usage: result.usage, atMs };
            }
            return { kind: "effect-succeeded", idempotencyKey: key, output: result, atMs };
          }),
        (error: unknown) =>
          this.report(slot, key, (): FlowEvent => {
            const info: ErrorInfo =
              error instanceof WorkFailed
                ? error.toErrorInfo()
                : { type: "handler-error", message: error instanceof Error ? error.message : String(error), retryable: false };
            return { kind: "effect-failed", idempotencyKey: key, error: info, atMs: this.clock.now() };
          }),
      )
      .catch((error: unknown) => this.fatal(error));
  }

  /** A failure inside the host itself (the store, the decide process given up on). */
  private fatal(error: unknown): void {
    if (!this.closed) {
      process.emitWarning(`flowcore host: ${error instanceof Error ? error.message : String(error)}`);
    }
  }

  private arm(slot: Slot, key: string, untilMs: number): void {
    slot.timers.get(key)?.();
    const disarm = this.clock.at(untilMs, () => {
      slot.timers.delete(key);
      this.report(slot, key, () => ({ kind: "timer-fired", idempotencyKey: key, atMs: this.clock.now() })).catch(
        (error: unknown) => this.fatal(error),
      );
    });
    slot.timers.set(key, disarm);
  }

  private async child(slot: Slot, effect: RunSubflow): Promise<void> {
    const key = effect.idempotencyKey;
    const detached = effect.detached === true;
    const existing = this.slots.get(key);
    if (existing === undefined) {
      const spec = this.registry.flowOf(effect.flowId);
      if (spec === undefined) {
        void this.report(slot, key, () => ({
          kind: "effect-failed",
          idempotencyKey: key,
          error: { type: "unknown-flow", message: `no flow ${JSON.stringify(effect.flowId)} is registered with this host` },
          atMs: this.clock.now(),
        }));
        return;
      }
      try {
        await this.begin({
          runId: key,
          flowId: effect.flowId,
          spec,
          input: effect.input ?? null,
          nowMs: this.clock.now(),
          budget: detached ? null : effect.budgetRemaining,
          depth: detached ? 0 : effect.depth,
          metadata: null,
          parent: { runId: slot.meta.runId, key, detached },
        });
      } catch (error) {
        if (!(error instanceof DecideRefused)) {
          throw error;
        }
        // The child cannot start (its spec, its input): the parent's step fails with why.
        void this.report(slot, key, () => ({
          kind: "effect-failed",
          idempotencyKey: key,
          error: { type: error.type, message: error.message },
          atMs: this.clock.now(),
        }));
        return;
      }
    } else if (existing.status !== "running" && !detached) {
      this.settle(existing); // settled while its parent was not listening: tell it again
    }
    if (detached) {
      void this.report(slot, key, () => ({
        kind: "effect-succeeded",
        idempotencyKey: key,
        output: { run_id: key },
        atMs: this.clock.now(),
      }));
    }
  }

  private signalRun(slot: Slot, effect: FlowEffect): void {
    if (effect.kind !== "signal-run") {
      return;
    }
    const key = effect.idempotencyKey;
    const fail = (type: string, message: string): FlowEvent => ({
      kind: "effect-failed",
      idempotencyKey: key,
      error: { type, message },
      atMs: this.clock.now(),
    });
    const target = this.slots.get(effect.runId);
    const send = async (): Promise<FlowEvent> => {
      if (target === undefined) {
        return fail("unknown-run", `no run ${JSON.stringify(effect.runId)}`);
      }
      if (target.status !== "running") {
        return fail("run-settled", `run ${effect.runId} has settled`);
      }
      try {
        await this.signal(effect.runId, effect.signal, effect.payload ?? null, effect.key);
      } catch (error) {
        if (error instanceof RunRefused) {
          return fail("signal-rejected", error.message);
        }
        throw error;
      }
      return { kind: "effect-succeeded", idempotencyKey: key, output: { run_id: effect.runId }, atMs: this.clock.now() };
    };
    send()
      .then((event) => this.report(slot, key, () => event))
      .catch((error: unknown) => this.fatal(error));
  }

  // --- recovery --------------------------------------------------------------------------------

  /** A run from its snapshot and log; null when its start was never committed. */
  private load(runId: string): Slot | null {
    const meta = this.store.meta(runId);
    const snapshot = this.store.snapshot(runId);
    if (snapshot === null) {
      return null;
    }
    const log = this.store.readLog(runId);
    const slot = this.newSlot(meta, snapshot.state, snapshot.status, snapshot.nextIndex);
    if (snapshot.usage !== undefined) {
      slot.usage = snapshot.usage;
    }
    if (log.records.length < snapshot.nextIndex) {
      throw new HostError(`${this.store.logPath(runId)}: the log ends before record ${snapshot.nextIndex} its snapshot follows`);
    }
    if (log.records.length > snapshot.nextIndex) {
      this.store.truncateLog(runId, log.offsets[snapshot.nextIndex] ?? log.size);
    } else if (log.tornOffset !== null) {
      this.store.truncateLog(runId, log.tornOffset);
    }
    this.fold(slot, log.records.slice(0, snapshot.nextIndex));
    // A decision whose records were written but whose snapshot was not: take it again.
    const lost = log.records[snapshot.nextIndex];
    if (lost !== undefined && lost.type === "event.reported") {
      const event = lost.data as unknown as FlowEvent;
      this.locked(slot, async () => {
        await this.decide(slot, event);
      }).catch((error: unknown) => this.fatal(error));
    }
    return slot;
  }

  /** Pick up what a loaded run waits for. */
  private async resume(slot: Slot): Promise<void> {
    if (slot.status !== "running") {
      if (slot.meta.parent !== null) {
        this.settle(slot);
      }
      return;
    }
    const runId = slot.meta.runId;
    const attempts = this.store.dispatches(runId);
    for (const [key, { effect, emitted }] of [...slot.open.entries()]) {
      if (slot.live.has(`${key}@${emitted}`) || slot.open.get(key)?.emitted !== emitted) {
        continue; // dispatched by this process (a decision taken again above), or no longer waited for
      }
      switch (effect.kind) {
        case "call-tool":
        case "run-agent":
        case "run-team": {
          const tries = attempts.filter((a) => a.key === key && a.emitted === emitted).length;
          if (tries === 0) {
            this.dispatch(slot, effect, emitted, 0);
            break;
          }
          const declared = classOf(slot.meta, effect); // the flow's class, never the registration's
          const safe = declared === "readonly" || declared === "idempotent";
          if (!safe) {
            // It may have run: never run it twice. The interpreter decides what follows.
            await this.decide(slot, { kind: "effect-outcome-unknown", idempotencyKey: key, atMs: this.clock.now() });
          } else if (tries > this.maxRecoveries) {
            const message = `${effect.kind} ${key} was dispatched ${tries} times and never finished (the host died while running it)`;
            await this.decide(slot, {
              kind: "effect-failed",
              idempotencyKey: key,
              error: { type: "dead-letter", message, retryable: false },
              atMs: this.clock.now(),
            });
          } else {
            const record: LogRecord = {
              type: "effect.redispatched",
              index: slot.nextIndex,
              runId,
              at: this.clock.now(),
              data: { idempotencyKey: key, recovery: tries },
            };
            this.store.append(runId, [record]);
            slot.nextIndex += 1;
            this.writeSnapshot(slot);
            this.onRecords?.(runId, [record]);
            this.dispatch(slot, effect, emitted, tries);
          }
          if (slot.status !== "running") {
            return;
          }
          break;
        }
        case "sleep":
          this.arm(slot, key, effect.untilMs);
          break;
        case "run-subflow":
          await this.child(slot, effect);
          break;
        case "signal-run":
          this.signalRun(slot, effect);
          break;
        default:
          break;
      }
    }
    if (slot.continued !== null) {
      await this.continueAsNew(slot, this.clock.now());
    }
  }
}
