/**
 * Play every conformance vector of specs/conformance through `flowcore decide --stdio`.
 *
 * Usage: node dist/conformance.js [--flowcore PATH] [--vectors DIR]
 * (or the environment variables FLOWCORE and FLOWCORE_VECTORS).
 *
 * For each vector: start the run as its run.started record says (input, run
 * id, clock, budget, depth), then advance it with each event.reported record's
 * event; the effects of every decision must deep-equal the effect.emitted
 * records that follow it, an event.rejected record's event must be rejected
 * with the recorded reason, and the run must end in the recorded status. A log
 * cut inside its last decision (torn or lost records) must lack exactly the
 * effects expect.json counts as unrecorded. Every run-subflow effect also
 * starts its child run (the effect's key, input, depth and budget) from a
 * small child spec that settles on a signal; when the log reports that the
 * child completed, the child is released with the recorded output and must
 * settle with it. Before each recorded `update-requested` event the host asks
 * `check-update`, which must accept it (the log took it), and a recorded
 * rejection of one must be refused the same way (`update-refused` with the
 * recorded reason, or a taken id's `event-rejected`). At the end the run's
 * updates (`check-update` on each id: `known`, with its view) must be those
 * expect.json lists in `updates`, the replies the decisions gave those in
 * `replies` (when it lists them), and each of its `queries` must answer its
 * `value` (or fail with its `error` code).
 *
 * Divergent and corrupt vectors hold deliberately edited logs, so they are
 * skipped, as the Python replay tests skip them. Prints one line per vector
 * and a summary `played N, skipped M, failed F`; exits 1 on any failure.
 */

import { readFileSync, readdirSync, statSync } from "node:fs";
import { join, resolve } from "node:path";
import { isDeepStrictEqual } from "node:util";

import { Decider, subflowSettled } from "./decider";
import type {
  BudgetCaps,
  ContinueAsNew,
  DecideReply,
  Decided,
  FlowEffect,
  FlowEvent,
  JsonValue,
  QueryFailedCode,
  RunSubflow,
  UpdateReply,
  UpdateView,
} from "./flowEffect";

interface LogRecord {
  readonly type: string;
  readonly index: number;
  readonly runId: string;
  readonly at: number;
  readonly data: { readonly [key: string]: unknown };
}

interface Expect {
  readonly error?: string;
  readonly divergenceIndex: number | null;
  readonly status: string | null;
  readonly tornOffset: number | null;
  readonly unrecorded: number;
  /** The run's metadata as it ended, when any is set. */
  readonly metadata?: { readonly [field: string]: string | number | boolean };
  /** The updates the final state holds (`flowcore.updates_of`), in order. */
  readonly updates?: readonly UpdateView[];
  /** Every update reply the run's decisions gave, in order (when the vector says). */
  readonly replies?: readonly UpdateReply[];
  /** Queries asked of the run's final state: what each answers, or the code it fails with. */
  readonly queries?: readonly {
    readonly name: string;
    readonly args?: JsonValue;
    readonly value?: JsonValue;
    readonly error?: QueryFailedCode;
  }[];
}

const RELEASE = "conformance-release";

class Mismatch extends Error {}

function option(name: string, env: string, fallback: string): string {
  const at = process.argv.indexOf(name);
  const given = at >= 0 ? process.argv[at + 1] : undefined;
  return given ?? process.env[env] ?? fallback;
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

function show(value: unknown): string {
  const text = JSON.stringify(value);
  return text.length > 400 ? `${text.slice(0, 400)}…` : text;
}

function decided(reply: DecideReply, what: string): Decided {
  if (!reply.ok) {
    throw new Mismatch(`${what}: ${reply.error.type}: ${reply.error.message}`);
  }
  return reply;
}

/** The log's records; a torn last line ends it when expect.json says the log is torn. */
function readLog(folder: string, expect: Expect): LogRecord[] {
  const lines = readFileSync(join(folder, "log.ndjson"), "utf8").split("\n");
  if (lines[lines.length - 1] === "") {
    lines.pop();
  }
  const records: LogRecord[] = [];
  lines.forEach((line, n) => {
    try {
      records.push(JSON.parse(line) as LogRecord);
    } catch {
      if (!(n === lines.length - 1 && expect.tornOffset !== null)) {
        throw new Mismatch(`line ${n + 1} of the log is not JSON`);
      }
    }
  });
  return records;
}

async function playChild(
  decider: Decider,
  effect: RunSubflow,
  nowMs: number,
  children: Map<string, Decided>,
): Promise<void> {
  if (children.has(effect.idempotencyKey)) {
    return; // re-issued after an unknown outcome: the child already runs under that key
  }
  const child = decided(await decider.startChild(effect, childSpec(effect.flowId), nowMs), `child ${effect.idempotencyKey}`);
  children.set(effect.idempotencyKey, child);
}

async function releaseChild(
  decider: Decider,
  event: FlowEvent,
  children: Map<string, Decided>,
): Promise<void> {
  if (event.kind !== "subflow-settled" || event.status !== "completed") {
    return;
  }
  const child = children.get(event.idempotencyKey);
  if (child === undefined || child.status !== "running") {
    throw new Mismatch(`subflow-settled for ${event.idempotencyKey}, a child never started`);
  }
  const output: JsonValue = event.output ?? null;
  const release: FlowEvent = { kind: "signal-received", signal: RELEASE, payload: output, atMs: event.atMs };
  const done = decided(await decider.advance(child.state, release), `child ${event.idempotencyKey}`);
  const settled = subflowSettled(event.idempotencyKey, done, event.atMs);
  if (settled.kind !== "subflow-settled" || settled.status !== "completed" || !isDeepStrictEqual(settled.output ?? null, output)) {
    throw new Mismatch(`child ${event.idempotencyKey} settled ${show(settled)}, not with ${show(output)}`);
  }
  children.set(event.idempotencyKey, done);
}

async function playVector(decider: Decider, folder: string, expect: Expect): Promise<string> {
  const spec = readFileSync(join(folder, "flow.yaml"), "utf8");
  const records = readLog(folder, expect);
  const first = records[0];
  if (first === undefined || first.type !== "run.started") {
    throw new Mismatch("the log does not begin with run.started");
  }
  const data = first.data;
  const reply = decided(
    await decider.start(spec, {
      input: (data["input"] ?? null) as JsonValue,
      runId: first.runId,
      nowMs: first.at,
      budget: (data["budget"] ?? null) as BudgetCaps | null,
      depth: (data["depth"] ?? 0) as number,
      metadata: (data["metadata"] ?? null) as { [field: string]: string | number | boolean } | null,
    }),
    "start",
  );
  let state = reply.state;
  let status = reply.status;
  let metadata = reply.metadata;
  let queue: FlowEffect[] = [...reply.effects];
  let events = 0;
  let effects = 0;
  let continued: ContinueAsNew | null = null;
  const replies: UpdateReply[] = [];
  const children = new Map<string, Decided>();
  const dispatch = async (list: readonly FlowEffect[], at: number): Promise<void> => {
    for (const effect of list) {
      if (effect.kind === "run-subflow") {
        await playChild(decider, effect, at, children);
      }
    }
  };
  await dispatch(reply.effects, first.at);
  const decisionDone = (index: number): void => {
    if (queue.length > 0) {
      throw new Mismatch(`before record ${index}: effects the log does not record: ${show(queue)}`);
    }
  };
  for (const record of records.slice(1)) {
    switch (record.type) {
      case "run.started": {
        // The next incarnation of a run that continued as new: started from
        // the effect the last decision emitted, as every host starts it.
        decisionDone(record.index);
        if (continued === null) {
          throw new Mismatch(`record ${record.index}: a second run.started, and the run did not continue as new`);
        }
        const again = decided(
          await decider.start(spec, { runId: first.runId, nowMs: record.at, depth: (data["depth"] ?? 0) as number, continued }),
          `record ${record.index}`,
        );
        continued = null;
        state = again.state;
        status = again.status;
        queue = [...again.effects];
        await dispatch(again.effects, record.at);
        break;
      }
      case "effect.emitted": {
        const ours = queue.shift();
        if (!isDeepStrictEqual(ours, record.data)) {
          throw new Mismatch(`record ${record.index}: decide emitted ${show(ours)}, the log has ${show(record.data)}`);
        }
        if (ours !== undefined && ours.kind === "continue-as-new") {
          continued = ours;
        }
        effects += 1;
        break;
      }
      case "event.reported": {
        decisionDone(record.index);
        const event = record.data as unknown as FlowEvent;
        await releaseChild(decider, event, children);
        if (event.kind === "update-requested") {
          const checked = await decider.checkUpdate(state, event.name, event.input ?? null, event.updateId);
          if (!checked.ok || checked.verdict !== "accept") {
            throw new Mismatch(`record ${record.index}: check-update does not accept what the log took: ${show(checked)}`);
          }
        }
        const next = decided(await decider.advance(state, event), `record ${record.index}`);
        replies.push(...(next.replies ?? []));
        state = next.state;
        status = next.status;
        metadata = next.metadata;
        queue = [...next.effects];
        await dispatch(next.effects, event.atMs);
        events += 1;
        break;
      }
      case "event.rejected": {
        decisionDone(record.index);
        const event = record.data["event"] as FlowEvent;
        const refused = await decider.advance(state, event);
        // A refused update says so (update-refused, with its code); a taken id is a plain rejection.
        const types = event.kind === "update-requested" ? ["event-rejected", "update-refused"] : ["event-rejected"];
        if (refused.ok || !types.includes(refused.error.type) || refused.error.message !== record.data["reason"]) {
          throw new Mismatch(`record ${record.index}: expected the rejection ${show(record.data["reason"])}, got ${show(refused)}`);
        }
        break;
      }
      case "run.settled": {
        if (record.data["status"] !== status) {
          throw new Mismatch(`record ${record.index}: the log settles ${show(record.data["status"])}, the run is ${status}`);
        }
        break;
      }
      default:
        break; // scheduled.changed and other records a host writes beside the decisions
    }
  }
  if (queue.length !== expect.unrecorded) {
    throw new Mismatch(`the log ends with ${queue.length} effect(s) of its last decision unrecorded, expected ${expect.unrecorded}`);
  }
  if (expect.status !== null && status !== expect.status) {
    throw new Mismatch(`the run ends ${status}, expected ${expect.status}`);
  }
  if (!isDeepStrictEqual(metadata, expect.metadata)) {
    throw new Mismatch(`the run's metadata is ${show(metadata)}, expected ${show(expect.metadata)}`);
  }
  if (expect.replies !== undefined && !isDeepStrictEqual(replies, expect.replies)) {
    throw new Mismatch(`the update replies are ${show(replies)}, expected ${show(expect.replies)}`);
  }
  for (const want of expect.updates ?? []) {
    const known = await decider.checkUpdate(state, want.name, null, want.updateId);
    if (!known.ok || known.verdict !== "known" || !isDeepStrictEqual(known.update, want)) {
      throw new Mismatch(`update ${want.updateId} is ${show(known)}, expected ${show(want)}`);
    }
  }
  for (const q of expect.queries ?? []) {
    const answer = await decider.query(state, q.name, q.args ?? null);
    const as =
      q.error !== undefined
        ? !answer.ok && answer.error.type === "query-failed" && answer.error.code === q.error
        : answer.ok && isDeepStrictEqual(answer.value, q.value ?? null);
    if (!as) {
      throw new Mismatch(`query ${q.name} answers ${show(answer)}, expected ${show(q.error ?? q.value)}`);
    }
  }
  const updates = replies.length > 0 ? `, ${replies.length} update repl${replies.length === 1 ? "y" : "ies"}` : "";
  const subflows = children.size > 0 ? `, ${children.size} child run(s)` : "";
  return `${events} events, ${effects} effects${subflows}${updates}`;
}

async function main(): Promise<number> {
  const flowcore = option("--flowcore", "FLOWCORE", "flowcore");
  const vectors = resolve(option("--vectors", "FLOWCORE_VECTORS", join(__dirname, "..", "..", "..", "specs", "conformance")));
  const cases = readdirSync(vectors)
    .filter((name) => statSync(join(vectors, name)).isDirectory())
    .sort();
  const decider = new Decider(flowcore);
  let played = 0;
  let skipped = 0;
  let failed = 0;
  for (const name of cases) {
    const folder = join(vectors, name);
    const expect = JSON.parse(readFileSync(join(folder, "expect.json"), "utf8")) as Expect;
    if (expect.error !== undefined || expect.divergenceIndex !== null) {
      skipped += 1;
      const why = expect.error !== undefined ? `a ${expect.error} log` : `divergent at ${expect.divergenceIndex}`;
      console.log(`skip ${name}: ${why}`);
      continue;
    }
    played += 1;
    try {
      console.log(`ok   ${name}: ${await playVector(decider, folder, expect)}`);
    } catch (error) {
      if (!(error instanceof Mismatch)) {
        throw error;
      }
      failed += 1;
      console.log(`FAIL ${name}: ${error.message}`);
    }
  }
  const code = await decider.close();
  console.log(`played ${played}, skipped ${skipped}, failed ${failed}`);
  if (code !== 0) {
    console.log(`flowcore decide exited with ${code}`);
    return 1;
  }
  return failed === 0 && played > 0 ? 0 : 1;
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    console.error(error instanceof Error ? error.stack ?? error.message : String(error));
    process.exitCode = 2;
  },
);
