/**
 * Checks of the host in process (tests/ts/test_durable_host.py runs them):
 * the decide process supervised (killed, it is started again and the run goes
 * on; a command that cannot run is a `DecideProcessError`), refusals typed
 * (`DecideRefused` with the wire's type and problems, `RunRefused`,
 * `UnknownRun`, `RegistryError`), a timer on the real clock, a crash
 * between a decision's log records and its snapshot, dead letters, child runs,
 * and execution classes taken from the flow.
 *
 * Usage: node dist/test/checks.js --flowcore PATH --store DIR
 * Prints `ok <name>` per check and `checks: ok` at the end; exits 1 on a failure.
 */

import { appendFileSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { ManualClock, realClock } from "../clock";
import { DecideProcessError, DecideRefused, RegistryError, RunRefused, UnknownRun } from "../errors";
import { Host } from "../host";
import { Registry } from "../registry";
import { SupervisedDecider } from "../supervisor";

const FLOW = `
flow: checks
tools: {echo: {class: readonly}}
steps:
  - {id: ask, ask_human: {question: "Go on?", options: ["yes", "no"]}}
  - {id: echo, call_tool: {tool: echo, input: "\${steps.ask.answer}"}}
  - {id: nap, sleep: {for_ms: 20}}
output: "\${steps.echo.output}"
`;

const WAIT_FLOW = `
flow: wait
steps:
  - {id: ask, ask_human: {question: "Go?", options: ["yes"]}}
  - {id: nap, sleep: {for_ms: 1000}}
output: "\${steps.ask.answer}"
`;

/**
 * A crash after a decision's log records were written and before its snapshot
 * was, with a torn line after them: the next host cuts the log back to the
 * snapshot, takes the decision again from its event, and writes the same bytes.
 */
async function crashWindows(decider: SupervisedDecider, store: string): Promise<void> {
  const registry = new Registry().flow("wait", WAIT_FLOW);
  const clock = new ManualClock(1000);
  const first = new Host({ store, registry, decide: decider, clock });
  await first.open();
  await first.start("wait", null, { runId: "w-1" });
  const dir = first.store.dirOf("w-1");
  const before = readFileSync(join(dir, "snapshot.json"), "utf8");
  await first.answer("w-1", "w-1/ask#1", "yes");
  const written = readFileSync(first.store.logPath("w-1"), "utf8");
  await first.close();
  writeFileSync(join(dir, "snapshot.json"), before); // the snapshot the crash left
  appendFileSync(first.store.logPath("w-1"), '{"type":"event.rep'); // and a torn line
  const second = new Host({ store, registry, decide: decider, clock });
  await second.open();
  await second.idle();
  check(readFileSync(second.store.logPath("w-1"), "utf8") === written, "a decision past the snapshot is taken again, its records written as before, the torn line cut");
  check(second.view("w-1").timers.length === 1, "the timer of the decision taken again is armed");
  clock.set(3000);
  const done = await second.settled("w-1");
  check(done.status === "completed" && done.output === "yes", "the run goes on to complete");
  await second.close();
}

const PARENT_FLOW = `
flow: parent
tools: {echo: {class: readonly}}
steps:
  - {id: kid, run_subflow: {flow: kid, input: {n: 2}}}
  - id: guarded
    try:
      - {id: badkid, run_subflow: {flow: kid, input: {n: "two"}}}
    catch:
      - errors: [bad-input]
        steps: [{id: note, call_tool: {tool: echo, input: caught}}]
output: "\${ {kid: steps.kid.output, caught: steps.note.output} }"
`;
const KID_FLOW = `
flow: kid
input_schema: {type: object, properties: {n: {type: integer}}, required: [n]}
tools: {echo: {class: readonly}}
steps:
  - {id: e, call_tool: {tool: echo, input: "\${input.n}"}}
output: "\${steps.e.output}"
`;

/** A child run starts from the registry, reports its settlement; one that cannot start fails its step. */
async function children(decider: SupervisedDecider, store: string): Promise<void> {
  const registry = new Registry()
    .flow("parent", PARENT_FLOW)
    .flow("kid", KID_FLOW)
    .tool("echo", (input) => ({ echoed: input }));
  const host = new Host({ store, registry, decide: decider, clock: new ManualClock(0) });
  await host.open();
  await host.start("parent", null, { runId: "p-1" });
  const done = await host.settled("p-1");
  check(
    done.status === "completed" &&
      JSON.stringify(done.output) === '{"kid":{"echoed":2},"caught":{"echoed":"caught"}}',
    "a child run reports its output to its parent; a child that cannot start fails its step with bad-input",
  );
  check(host.view("p-1/kid#1").status === "completed", "the child is a run of the store, under its key");
  await host.close();
}

/** Work that takes its process down every time goes to the dead letters after maxRecoveries. */
async function deadLetters(decider: SupervisedDecider, store: string): Promise<void> {
  const flow = "flow: dead\ntools: {boom: {class: idempotent}}\nsteps:\n  - {id: boom, call_tool: {tool: boom}}\n";
  const calls: number[] = [];
  const registry = new Registry().flow("dead", flow).tool(
    "boom",
    (_input, context) => {
      calls.push(context.recovery);
      return new Promise(() => {}); // never ends: as if it took the process down
    },
  );
  for (let n = 0; n < 5; n++) {
    const host = new Host({ store, registry, decide: decider, clock: new ManualClock(0), maxRecoveries: 3 });
    await host.open();
    if (n === 0) {
      await host.start("dead", null, { runId: "d-1" });
    }
    await host.idle();
    await host.close();
  }
  const log = new Host({ store, registry, decide: decider }).store.readLog("d-1").records;
  const redispatched = log.filter((r) => r.type === "effect.redispatched").map((r) => JSON.stringify(r.data));
  check(JSON.stringify(calls) === "[0,1,2,3]", "an idempotent call lost with its process runs again under its key, recovery counted");
  check(
    redispatched.join() === [1, 2, 3].map((n) => JSON.stringify({ idempotencyKey: "d-1/boom#1", recovery: n })).join(),
    "each run again is an effect.redispatched record",
  );
  const settled = log[log.length - 1];
  check(
    settled?.type === "run.settled" && JSON.stringify(settled.data).includes('"type":"dead-letter"'),
    "after maxRecoveries it fails its step with dead-letter",
  );
}

const SEND_FLOW = `
flow: send
tools: {send: {class: uncertain}}
steps:
  - {id: tell, call_tool: {tool: send, input: hi}}
`;
const PUT_FLOW = `
flow: put
tools: {put: {class: idempotent}}
steps:
  - {id: save, call_tool: {tool: put, input: v}}
output: "\${steps.save.output}"
`;

/**
 * A call's execution class is its flow's, never its registration's: both
 * tools are registered without one; the host dies while each call runs (closed
 * while its handler holds) and a new one recovers on the same store. The
 * uncertain call is reported unknown and never run again; the idempotent one
 * runs again under its key. A registration that states a class is refused.
 */
async function flowClasses(decider: SupervisedDecider, store: string): Promise<void> {
  const calls: string[] = [];
  const registry = (hold: boolean): Registry =>
    new Registry()
      .flow("send", SEND_FLOW)
      .flow("put", PUT_FLOW)
      .tool("send", (_input, context) => {
        calls.push(`send ${context.idempotencyKey} ${context.recovery} ${context.executionClass}`);
        return hold ? new Promise(() => {}) : "sent";
      })
      .tool("put", (_input, context) => {
        calls.push(`put ${context.idempotencyKey} ${context.recovery} ${context.executionClass}`);
        return hold ? new Promise(() => {}) : "stored";
      });
  const first = new Host({ store, registry: registry(true), decide: decider, clock: new ManualClock(0) });
  await first.open();
  await first.start("send", null, { runId: "s-1" });
  await first.start("put", null, { runId: "u-1" });
  await first.idle();
  await first.close(); // as if the process died while both calls ran
  const second = new Host({ store, registry: registry(false), decide: decider, clock: new ManualClock(0) });
  await second.open();
  const sent = await second.settled("s-1");
  const put = await second.settled("u-1");
  check(
    JSON.stringify(calls) ===
      JSON.stringify(["send s-1/tell#1 0 uncertain", "put u-1/save#1 0 idempotent", "put u-1/save#1 1 idempotent"]),
    "after a crash the flow's uncertain call is never run again, its idempotent one runs again under its key",
  );
  const reported = (runId: string): string[] =>
    second.store
      .readLog(runId)
      .records.filter((r) => r.type === "event.reported" || r.type === "effect.redispatched")
      .map((r) => {
        const data = r.data as { readonly kind?: string; readonly idempotencyKey?: string };
        return `${r.type} ${data.kind ?? ""} ${String(data.idempotencyKey)}`;
      });
  check(
    sent.status === "failed" &&
      sent.error?.type === "outcome-unknown" &&
      JSON.stringify(reported("s-1")) === JSON.stringify(["event.reported effect-outcome-unknown s-1/tell#1"]),
    "the uncertain call is reported effect-outcome-unknown and its step fails outcome-unknown",
  );
  check(
    put.status === "completed" &&
      put.output === "stored" &&
      JSON.stringify(reported("u-1")) ===
        JSON.stringify(["effect.redispatched  u-1/save#1", "event.reported effect-succeeded u-1/save#1"]),
    "the idempotent call is redispatched (effect.redispatched), not reported unknown",
  );
  await second.close();
  const stated = (() => {
    try {
      new Registry().tool("send", () => null, ...([{ class: "idempotent" }] as never[]));
      return null;
    } catch (error) {
      return error instanceof RegistryError ? error.message : null;
    }
  })();
  check(
    stated !== null && stated.includes('"send"') && stated.includes('"idempotent"') && stated.includes("tools:"),
    "a registration that states a class is a RegistryError naming the tool, the class, and where classes are declared",
  );
}

function option(name: string): string {
  const at = process.argv.indexOf(name);
  const value = at >= 0 ? process.argv[at + 1] : undefined;
  if (value === undefined) {
    throw new Error(`${name} is required`);
  }
  return value;
}

function check(condition: boolean, what: string): void {
  if (!condition) {
    throw new Error(`check failed: ${what}`);
  }
  console.log(`ok ${what}`);
}

async function rejects<T extends Error>(promise: Promise<unknown>, type: new (...args: never[]) => T): Promise<T> {
  try {
    await promise;
  } catch (error) {
    if (error instanceof type) {
      return error;
    }
    throw error;
  }
  throw new Error(`expected a ${type.name}`);
}

async function main(): Promise<void> {
  const flowcore = option("--flowcore");
  const store = option("--store");
  const restarts: string[] = [];
  const decider = new SupervisedDecider({ command: flowcore, onRestart: (cause) => restarts.push(cause.message) });
  const registry = new Registry().flow("checks", FLOW).tool("echo", (input) => ({ echoed: input }));
  const host = new Host({ store, registry, decide: decider, clock: realClock });
  await host.open();

  const runId = await host.start("checks", null, { runId: "k-1" });
  const first = decider.pid();
  check(first !== undefined && host.view(runId).questions.length === 1, "the run waits for its question");

  // The decide process dies between two decisions: the next one starts it again.
  process.kill(first as number, "SIGKILL");
  await new Promise((resolve) => setTimeout(resolve, 0));
  const question = host.view(runId).questions[0];
  await host.answer(runId, question?.key ?? "", "yes");
  const done = await host.settled(runId);
  check(decider.restarts === 1 && decider.pid() !== first, "a killed decide process is started again");
  check(restarts.length === 1 && /decide|EPIPE/.test(restarts[0] ?? ""), "the restart says why the process ended");
  check(done.status === "completed" && JSON.stringify(done.output) === '{"echoed":"yes"}', "the run completes across the restart, its timer fired on the real clock");

  // Refusals, typed.
  const wrong = await rejects(host.answer(runId, question?.key ?? "", "maybe"), RunRefused);
  check(wrong.runId === runId, "an answer to a settled run is a RunRefused");
  const unknown = await rejects(host.signal("nope", "go"), UnknownRun);
  check(unknown.runId === "nope", "a signal to an unknown run is an UnknownRun");
  const registryBad = new Registry().flow("bad", "flow: bad\nsteps:\n  - {id: a, no_such_step: {}}\n");
  const badHost = new Host({ store, registry: registryBad, decide: decider, clock: new ManualClock(0) });
  const refused = await rejects(badHost.start("bad", null, { runId: "bad-1" }), DecideRefused);
  check(refused.type === "bad-spec" && refused.problems.length > 0 && (refused.where ?? "").startsWith("spec:"), "a bad spec is a DecideRefused of type bad-spec, with its problems");
  check(!badHost.store.has("bad-1"), "a refused start leaves nothing in the store");
  check(
    (() => {
      try {
        registry.tool("echo", () => null);
        return false;
      } catch (error) {
        return error instanceof RegistryError;
      }
    })(),
    "a tool registered twice is a RegistryError",
  );
  await crashWindows(decider, `${store}/windows`);
  await deadLetters(decider, `${store}/dead`);
  await children(decider, `${store}/children`);
  await flowClasses(decider, `${store}/classes`);
  const missing = new SupervisedDecider({ command: "/nonexistent/flowcore" });
  const noProcess = await rejects(missing.start("flow: x\nsteps: []\n", { runId: "x", nowMs: 0 }), DecideProcessError);
  check(noProcess.message.includes("cannot run /nonexistent/flowcore"), "a decide command that cannot run is a DecideProcessError");
  await host.close();
  await decider.close();
  console.log("checks: ok");
}

main().catch((error: unknown) => {
  console.error(error instanceof Error ? (error.stack ?? error.message) : String(error));
  process.exit(1); // the decide process would keep the loop alive
});
