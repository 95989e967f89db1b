/**
 * Play the conformance vectors through the host itself: its store, its
 * timers, its handlers and its API, on a clock moved by hand.
 *
 * Usage: node dist/hostConformance.js [--flowcore PATH] [--vectors DIR] [--store DIR]
 *
 * For each vector the host starts the run as its run.started record says (a
 * fresh store per vector, one shared decide process), and every recorded
 * event is produced the way the host gets events: the clock is moved to the
 * event's time (due timers fire: that is how `timer-fired` comes), work is
 * answered by scripted handlers that return the recorded output (or throw the
 * recorded error), answers, signals and cancels go through `answer`,
 * `signal` and `cancel`, and a child run (a small flow that settles on a
 * signal) is released with the recorded output. An unknown outcome comes
 * as it does in life: the host is closed while the work runs and a new one
 * opened on the same store, whose recovery reports it. A recorded rejection is
 * sent the same way and must be refused (`RunRefused`), writing nothing; work
 * answered again (late, twice) is never reported twice by the host. The log
 * the host wrote must then be the vector's log without its (optional)
 * event.rejected records, record for record, and the run must end in the
 * recorded status.
 *
 * A vector is skipped, saying why, when the host cannot produce its events:
 * divergent, torn, cut or corrupt logs; unknown outcomes of work the host
 * runs again after a crash (safe tools: it re-dispatches them) or always
 * knows the end of (children); re-dispatch records,
 * updates, scheduled-call requests from outside, signals to other runs,
 * children that do not complete, runs started at a depth, forks, upgrades; and an event later
 * than a timer that was due (the host fires timers when due). Prints one line
 * per vector and `played N, skipped M, failed F`; exits 1 on any failure.
 */

import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { isDeepStrictEqual } from "node:util";

import { ManualClock } from "./clock";
import type { BudgetCaps, ErrorInfo, FlowEvent, JsonValue, Usage } from "./flowEffect";
import { RunRefused } from "./errors";
import { Host } from "./host";
import { Registry, WorkFailed, withUsage, type HandlerResult } from "./registry";
import { SupervisedDecider } from "./supervisor";

interface Rec {
  readonly type: string;
  readonly index: number;
  readonly runId: string;
  readonly at: number;
  readonly data: { readonly [key: string]: JsonValue };
}

interface Expect {
  readonly error?: string;
  readonly divergenceIndex: number | null;
  readonly status: string | null;
  readonly tornOffset: number | null;
  readonly unrecorded: number;
  /** A run moved to another version of its flow at this index (the host does not upgrade runs). */
  readonly upgradedAt?: number;
}

const RELEASE = "conformance-release";
const PLAYED_EVENTS = new Set([
  "effect-outcome-unknown",
  "effect-succeeded",
  "effect-failed",
  "human-answered",
  "signal-received",
  "timer-fired",
  "cancel-requested",
  "subflow-settled",
]);

class Mismatch extends Error {}

/** Found while playing: an event the host cannot produce as recorded. */
class Skip extends Error {}

function option(name: string, env: string, fallback: string): string {
  const at = process.argv.indexOf(name);
  return (at >= 0 ? process.argv[at + 1] : undefined) ?? process.env[env] ?? fallback;
}

function show(value: unknown): string {
  const text = JSON.stringify(value);
  return text.length > 300 ? `${text.slice(0, 300)}…` : text;
}

function childSpec(flowId: string): string {
  return [
    `flow: ${JSON.stringify(flowId)}`,
    "steps:",
    "  - id: answer",
    `    await_signal: {signal: ${RELEASE}}`,
    "output: '${steps.answer.output}'",
    "",
  ].join("\n");
}

/** Why the host cannot play this vector, or null. */
function skipReason(expect: Expect, records: readonly Rec[]): string | null {
  if (expect.error !== undefined) {
    return `a ${expect.error} log`;
  }
  if (expect.divergenceIndex !== null) {
    return `divergent at ${expect.divergenceIndex}`;
  }
  if (expect.tornOffset !== null || expect.unrecorded > 0) {
    return "a cut log";
  }
  if (expect.upgradedAt !== undefined) {
    return "a run moved to another version (this host does not upgrade runs)";
  }
  const first = records[0];
  if (first === undefined || first.type !== "run.started") {
    return "no run.started";
  }
  if ((first.data["depth"] ?? 0) !== 0) {
    return "started at a depth";
  }
  if (first.data["forkedFrom"] !== undefined) {
    return "a fork";
  }
  let lastTimerDue = -1;
  for (const record of records) {
    if (record.type === "effect.redispatched") {
      return `a ${record.type} record`;
    }
    if (record.type === "event.rejected") {
      const kind = String((record.data["event"] as { kind?: string } | null)?.kind);
      if (!PLAYED_EVENTS.has(kind) || kind === "timer-fired" || kind === "subflow-settled") {
        return `a rejected ${kind} event`;
      }
    }
    if (record.type === "effect.emitted") {
      const kind = record.data["kind"];
      if (kind === "signal-run") {
        return "a signal to another run";
      }
      if (kind === "sleep") {
        const until = record.data["untilMs"];
        lastTimerDue = typeof until === "number" ? until : lastTimerDue;
      }
      if (kind === "run-subflow" && record.data["detached"] === true) {
        return "a detached child";
      }
    }
    if (record.type === "event.reported") {
      const kind = String(record.data["kind"]);
      if (!PLAYED_EVENTS.has(kind)) {
        return `a ${kind} event`;
      }
      if (kind === "effect-outcome-unknown") {
        const key = record.data["idempotencyKey"];
        const again = records.some(
          (r) => r.index > record.index && r.type === "effect.emitted" && r.data["idempotencyKey"] === key,
        );
        const child = records.some(
          (r) => r.type === "effect.emitted" && r.data["kind"] === "run-subflow" && r.data["idempotencyKey"] === key,
        );
        if (again || child) {
          return "an unknown outcome of work the host runs again (or a child it always knows the end of)";
        }
      }
      if (kind === "subflow-settled" && record.data["status"] !== "completed") {
        return "a child that did not complete";
      }
      if (kind === "subflow-settled" && Object.keys(record.data["usage"] ?? {}).length > 0) {
        return "a child that spent what the stand-in child does not";
      }
    }
  }
  return null;
}

function readRecords(folder: string): Rec[] {
  return readFileSync(join(folder, "log.ndjson"), "utf8")
    .split("\n")
    .filter((line) => line.trim() !== "")
    .map((line) => JSON.parse(line) as Rec);
}

async function playVector(decider: SupervisedDecider, folder: string, records: readonly Rec[], expect: Expect, storeRoot: string): Promise<string> {
  const first = records[0] as Rec;
  const flowId = String(first.data["flowId"]);
  const runId = first.runId;
  const clock = new ManualClock(first.at);
  const registry = new Registry();
  // A version case's log was recorded with recorded.yaml: the host runs that spec.
  const recorded = join(folder, "recorded.yaml");
  registry.flow(flowId, readFileSync(existsSync(recorded) ? recorded : join(folder, "flow.yaml"), "utf8"));
  // Scripted work: a handler waits until the player answers its key.
  const waiting = new Map<string, (result: () => HandlerResult) => void>();
  const scripted = (_: unknown, context: { readonly idempotencyKey: string }): Promise<HandlerResult> =>
    new Promise((resolve, reject) => {
      waiting.set(context.idempotencyKey, (result) => {
        try {
          resolve(result());
        } catch (error) {
          reject(error);
        }
      });
    });
  const names = { tool: new Set<string>(), agent: new Set<string>(), team: new Set<string>(), flow: new Set<string>() };
  for (const record of records) {
    if (record.type !== "effect.emitted") {
      continue;
    }
    const d = record.data;
    if (d["kind"] === "call-tool") names.tool.add(String(d["tool"]));
    if (d["kind"] === "run-agent") names.agent.add(String(d["agentId"]));
    if (d["kind"] === "run-team") names.team.add(String(d["teamId"]));
    if (d["kind"] === "run-subflow") names.flow.add(String(d["flowId"]));
  }
  names.tool.forEach((name) => registry.tool(name, scripted));
  names.agent.forEach((name) => registry.agent(name, scripted));
  names.team.forEach((name) => registry.team(name, scripted));
  names.flow.forEach((name) => name !== flowId && registry.flow(name, childSpec(name)));

  const store = mkdtempSync(join(storeRoot, "run-"));
  let host = new Host({ store, registry, decide: decider, clock });
  try {
    await host.start(flowId, first.data["input"] ?? null, {
      runId,
      budget: (first.data["budget"] ?? null) as BudgetCaps | null,
      metadata: (first.data["metadata"] ?? null) as { [field: string]: string | number | boolean } | null,
    });
    await host.idle();
    /** A recorded rejection: sent the way the host gets it, refused, and nothing written. */
    const refuse = async (event: FlowEvent, index: number): Promise<void> => {
      clock.set(event.atMs);
      const before = host.store.readLog(runId).records.length;
      let refusal: unknown = null;
      try {
        switch (event.kind) {
          case "human-answered":
            await host.answer(runId, event.idempotencyKey, event.answer, event.principal);
            break;
          case "signal-received":
            await host.signal(runId, event.signal, event.payload ?? null, event.key);
            break;
          case "cancel-requested":
            await host.cancel(runId, event.reason);
            break;
          case "effect-succeeded":
          case "effect-failed": {
            // Work answered once more (late, twice, never issued): the host reports
            // only the work it runs, once; a handler still waiting is answered.
            const answer = waiting.get(event.idempotencyKey);
            waiting.delete(event.idempotencyKey);
            answer?.(() => (event.kind === "effect-succeeded" ? (event.output ?? null) : null));
            refusal = "dropped";
            break;
          }
          default:
            throw new Mismatch(`record ${index}: a rejected ${event.kind}`);
        }
      } catch (error) {
        if (!(error instanceof RunRefused)) {
          throw error;
        }
        refusal = error;
      }
      await host.idle();
      if (refusal === null) {
        throw new Mismatch(`record ${index}: the host took the ${event.kind} the log records as rejected`);
      }
      if (host.store.readLog(runId).records.length !== before) {
        throw new Mismatch(`record ${index}: a refused ${event.kind} wrote to the log`);
      }
    };
    // The host writes no event.rejected records (they are optional, log.md §3):
    // the log it must write is the vector's without them, numbered again.
    const expected = records
      .filter((r) => r.type !== "event.rejected")
      .map((r, index) => ({ ...r, index }));
    let events = 0;
    let rejected = 0;
    for (const record of records) {
      if (record.type === "event.rejected") {
        rejected += 1;
        await refuse(record.data["event"] as unknown as FlowEvent, record.index);
        continue;
      }
      if (record.type !== "event.reported") {
        continue;
      }
      const event = record.data as unknown as FlowEvent;
      const key = "idempotencyKey" in event ? event.idempotencyKey : "";
      if (event.kind !== "timer-fired") {
        const due = clock.next();
        if (due !== undefined && due <= event.atMs && due < record.at) {
          throw new Skip(`an event at ${event.atMs}, later than a timer due at ${due} (the host fires it when due)`);
        }
      }
      clock.set(event.atMs);
      switch (event.kind) {
        case "effect-succeeded":
        case "effect-failed": {
          const answer = waiting.get(key);
          if (answer === undefined) {
            throw new Mismatch(`record ${record.index}: the host runs no handler for ${key}`);
          }
          waiting.delete(key);
          if (event.kind === "effect-succeeded") {
            const output: JsonValue = event.output ?? null;
            const usage: Usage | undefined = event.usage;
            answer(() => (usage !== undefined ? withUsage(output, usage) : output));
          } else {
            const error: ErrorInfo = event.error;
            if (event.usage !== undefined) {
              throw new Mismatch(`record ${record.index}: a failure with usage`);
            }
            answer(() => {
              throw WorkFailed.of(error);
            });
          }
          break;
        }
        case "human-answered":
          await host.answer(runId, key, event.answer, event.principal);
          break;
        case "signal-received":
          await host.signal(runId, event.signal, event.payload ?? null, event.key);
          break;
        case "cancel-requested":
          await host.cancel(runId, event.reason);
          break;
        case "subflow-settled":
          await host.signal(key, RELEASE, event.output ?? null);
          break;
        case "effect-outcome-unknown":
          // The way a host learns it: the process dies while the work runs, and the
          // next one, on the same store, finds the attempt lost and never runs it again.
          if (!waiting.has(key)) {
            throw new Mismatch(`record ${record.index}: the host runs no handler for ${key}`);
          }
          waiting.delete(key);
          await host.close();
          host = new Host({ store, registry, decide: decider, clock });
          await host.open();
          break;
        default:
          break; // timer-fired: moving the clock fired it
      }
      await host.idle();
      events += 1;
      const written = host.store.readLog(runId).records;
      const at = record.index - rejected;
      if (!isDeepStrictEqual(written[at], expected[at])) {
        throw new Mismatch(`record ${record.index}: the host wrote ${show(written[at])}, the vector has ${show(expected[at])}`);
      }
    }
    const written = host.store.readLog(runId).records;
    for (let i = 0; i < Math.max(written.length, expected.length); i++) {
      if (!isDeepStrictEqual(written[i], expected[i])) {
        throw new Mismatch(`record ${i}: the host wrote ${show(written[i])}, the vector has ${show(expected[i])}`);
      }
    }
    const status = host.view(runId).status;
    if (expect.status !== null && status !== expect.status) {
      throw new Mismatch(`the run ends ${status}, expected ${expect.status}`);
    }
    return `${events} events, ${written.length} records`;
  } finally {
    await host.close();
    rmSync(store, { recursive: true, force: true });
  }
}

async function main(): Promise<number> {
  const vectors = resolve(option("--vectors", "FLOWCORE_VECTORS", join(__dirname, "..", "..", "..", "specs", "conformance")));
  const storeRoot = mkdtempSync(join(option("--store", "FLOWCORE_STORE", tmpdir()), "flowcore-ts-"));
  const decider = new SupervisedDecider({ command: option("--flowcore", "FLOWCORE", "flowcore") });
  const cases = readdirSync(vectors)
    .filter((name) => statSync(join(vectors, name)).isDirectory())
    .sort();
  let played = 0;
  let skipped = 0;
  let failed = 0;
  for (const name of cases) {
    const folder = join(vectors, name);
    const expect = JSON.parse(readFileSync(join(folder, "expect.json"), "utf8")) as Expect;
    const readable = expect.error === undefined && expect.tornOffset === null;
    const records = readable ? readRecords(folder) : [];
    const why = skipReason(expect, records);
    if (why !== null) {
      skipped += 1;
      console.log(`skip ${name}: ${why}`);
      continue;
    }
    try {
      const done = await playVector(decider, folder, records, expect, storeRoot);
      played += 1;
      console.log(`ok   ${name}: ${done}`);
    } catch (error) {
      if (error instanceof Skip) {
        skipped += 1;
        console.log(`skip ${name}: ${error.message}`);
        continue;
      }
      played += 1;
      if (!(error instanceof Mismatch)) {
        throw error;
      }
      failed += 1;
      console.log(`FAIL ${name}: ${error.message}`);
    }
  }
  await decider.close();
  rmSync(storeRoot, { recursive: true, force: true });
  console.log(`played ${played}, skipped ${skipped}, failed ${failed}`);
  return failed === 0 && played > 0 ? 0 : 1;
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    console.error(error instanceof Error ? (error.stack ?? error.message) : String(error));
    process.exitCode = 2;
  },
);
