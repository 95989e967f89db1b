/**
 * An update and a query through `flowcore decide --stdio`, as a host in another
 * language serves them: check the request first (a refusal writes nothing),
 * advance the run with `update-requested`, answer the question its handler
 * asks, take the reply from the decision that ends it, look a repeated id up
 * instead of sending it again, and answer a query from the state.
 *
 * Usage: node dist/updates.js [--flowcore PATH]. Prints one line per step and
 * `updates: ok`; exits 1 on the first step that does not go as a host expects.
 */

import { isDeepStrictEqual } from "node:util";

import { Decider } from "./decider";
import type { DecideReply, Decided, FlowEvent, JsonValue } from "./flowEffect";

const SPEC = [
  "flow: expense",
  "metadata: {decision: string}",
  "updates:",
  "  approve:",
  "    input_schema: {type: object, properties: {by: {type: string}}, required: [by]}",
  "    validator: \"update.input.by != 'mallory'\"",
  "    steps:",
  "      - {id: decide, ask_human: {question: 'Approve?', options: ['yes', 'no']}}",
  "      - {id: note, set_metadata: {decision: '${steps.decide.answer}'}}",
  "    reply: '${ {decision: steps.decide.answer, by: update.input.by} }'",
  "queries:",
  "  decision:",
  "    value: '${ {decision: metadata.decision, status: status} }'",
  "steps:",
  "  - {id: wait, sleep: {for_ms: 1000}}",
  "",
].join("\n");

class Wrong extends Error {}

function expect(what: string, ok: boolean, got: unknown): void {
  if (!ok) {
    throw new Wrong(`${what}: got ${JSON.stringify(got)}`);
  }
  console.log(`ok   ${what}`);
}

function decided(reply: DecideReply, what: string): Decided {
  if (!reply.ok) {
    throw new Wrong(`${what}: ${reply.error.type}: ${reply.error.message}`);
  }
  return reply;
}

async function play(decider: Decider): Promise<void> {
  const run = decided(await decider.start(SPEC, { runId: "r-1", nowMs: 0 }), "start");
  const refused = await decider.checkUpdate(run.state, "approve", { by: "mallory" }, "m-1");
  expect(
    "a request the validator refuses is refused, with its code",
    !refused.ok && refused.error.type === "update-refused" && refused.error.code === "validator",
    refused,
  );
  const checked = await decider.checkUpdate(run.state, "approve", { by: "bob" }, "req-1");
  expect("a good request is accepted", checked.ok && checked.verdict === "accept", checked);
  const request: FlowEvent = { kind: "update-requested", updateId: "req-1", name: "approve", input: { by: "bob" }, atMs: 5 };
  const asked = decided(await decider.advance(run.state, request), "update-requested");
  const question = asked.effects[0];
  expect("its handler asks its question", question?.kind === "ask-human" && asked.replies === undefined, asked.effects);
  const known = await decider.checkUpdate(asked.state, "approve", { by: "bob" }, "req-1");
  expect(
    "the same id again is known: look it up, send nothing",
    known.ok && known.verdict === "known" && known.update.status === "running" && known.update.seq === 1,
    known,
  );
  if (question?.kind !== "ask-human" || question.idempotencyKey === undefined) {
    throw new Wrong("no question to answer");
  }
  const answer: FlowEvent = { kind: "human-answered", idempotencyKey: question.idempotencyKey, answer: "yes", atMs: 7 };
  const done = decided(await decider.advance(asked.state, answer), "human-answered");
  const reply: JsonValue = { decision: "yes", by: "bob" };
  expect(
    "the decision that ends it carries the reply",
    isDeepStrictEqual(done.replies, [{ updateId: "req-1", name: "approve", status: "completed", output: reply }]),
    done.replies,
  );
  const value = await decider.query(done.state, "decision");
  expect(
    "a query answers from the state",
    value.ok && isDeepStrictEqual(value.value, { decision: "yes", status: "running" }),
    value,
  );
  const unknown = await decider.query(done.state, "nope");
  expect("an unknown query fails with its code", !unknown.ok && unknown.error.type === "query-failed" && unknown.error.code === "unknown-query", unknown);
}

async function main(): Promise<number> {
  const at = process.argv.indexOf("--flowcore");
  const decider = new Decider((at >= 0 ? process.argv[at + 1] : undefined) ?? process.env["FLOWCORE"] ?? "flowcore");
  let failed = false;
  try {
    await play(decider);
  } catch (error) {
    if (!(error instanceof Wrong)) {
      throw error;
    }
    failed = true;
    console.log(`FAIL ${error.message}`);
  }
  const code = await decider.close();
  console.log(failed || code !== 0 ? `updates: failed (decide exited ${code})` : "updates: ok");
  return failed || code !== 0 ? 1 : 0;
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
