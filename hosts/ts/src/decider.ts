/**
 * A client of `flowcore decide --stdio`: one child process, requests written
 * as JSON lines, replies read as JSON lines and matched to their request by id.
 *
 * The process answers in order, so the client needs no more than a table of
 * pending requests. Nothing here looks inside a state string: it is opaque,
 * and any decide process (a restarted one too) continues a run from it.
 */

import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { createInterface } from "node:readline";

import { DecideProcessError } from "./errors";

import type {
  AdvanceRequest,
  BudgetCaps,
  CheckUpdateReply,
  CheckUpdateRequest,
  ContinueAsNew,
  DecideReply,
  Decided,
  FlowEvent,
  JsonValue,
  QueryReply,
  QueryRequest,
  RunSubflow,
  StartRequest,
} from "./flowEffect";

/** Any reply line: which one depends on the request's op. */
type AnyReply = DecideReply | QueryReply | CheckUpdateReply;

type Pending = {
  readonly resolve: (reply: AnyReply) => void;
  readonly reject: (error: Error) => void;
};

type WithoutId<T> = T extends unknown ? Omit<T, "id"> : never;

export interface StartOptions {
  readonly input?: JsonValue;
  readonly runId: string;
  readonly nowMs: number;
  readonly budget?: BudgetCaps | null;
  readonly depth?: number;
  readonly metadata?: { readonly [field: string]: string | number | boolean } | null;
  readonly continued?: ContinueAsNew;
  /** Given: the reply carries the decision's log records, the first at this index. */
  readonly logIndex?: number;
}

export class Decider {
  private readonly child: ChildProcessWithoutNullStreams;
  private readonly pending = new Map<number, Pending>();
  private nextId = 1;
  private exited: Promise<number>;
  private failure: Error | null = null;

  /** Spawn `command decide --stdio` (command: the path of the `flowcore` script). */
  constructor(command: string, extraArgs: readonly string[] = []) {
    this.child = spawn(command, ["decide", "--stdio", ...extraArgs], {
      stdio: ["pipe", "pipe", "pipe"],
    });
    let stderr = "";
    this.child.stderr.setEncoding("utf8");
    this.child.stderr.on("data", (chunk: string) => {
      stderr = (stderr + chunk).slice(-4000);
    });
    // A write to a process that just died fails with EPIPE: the close below says why.
    this.child.stdin.on("error", (error) => this.fail(new DecideProcessError(`writing to decide: ${error.message}`)));
    const lines = createInterface({ input: this.child.stdout, crlfDelay: Infinity });
    lines.on("line", (line) => this.onLine(line));
    this.exited = new Promise((resolve) => {
      this.child.on("error", (error) => {
        this.fail(new DecideProcessError(`cannot run ${command}: ${error.message}`));
        resolve(-1);
      });
      this.child.on("close", (code, signal) => {
        this.fail(
          new DecideProcessError(`decide ended (code ${code}, signal ${signal}): ${stderr.trim()}`, code, signal, stderr),
        );
        resolve(code ?? -1);
      });
    });
  }

  private onLine(line: string): void {
    let reply: AnyReply;
    try {
      reply = JSON.parse(line) as AnyReply;
    } catch {
      this.fail(new DecideProcessError(`decide wrote a line that is not JSON: ${line.slice(0, 200)}`));
      return;
    }
    const id = reply.id;
    const waiting = typeof id === "number" ? this.pending.get(id) : undefined;
    if (typeof id !== "number" || waiting === undefined) {
      this.fail(new DecideProcessError(`a reply to no pending request: ${line.slice(0, 200)}`));
      return;
    }
    this.pending.delete(id);
    waiting.resolve(reply);
  }

  private fail(error: Error): void {
    this.failure ??= error;
    if (this.child.exitCode === null && this.child.signalCode === null) {
      this.child.kill(); // out of step with its replies: a successor takes over
    }
    for (const waiting of this.pending.values()) {
      waiting.reject(error);
    }
    this.pending.clear();
  }

  /** Send one request; the reply (ok or a typed error) comes back by its id. */
  request(request: WithoutId<StartRequest> | WithoutId<AdvanceRequest>): Promise<DecideReply> {
    return this.send(request) as Promise<DecideReply>;
  }

  private send(
    request: WithoutId<StartRequest> | WithoutId<AdvanceRequest> | WithoutId<QueryRequest> | WithoutId<CheckUpdateRequest>,
  ): Promise<AnyReply> {
    if (this.failure !== null) {
      return Promise.reject(this.failure);
    }
    const id = this.nextId++;
    const line = JSON.stringify({ id, ...request }) + "\n";
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.child.stdin.write(line);
    });
  }

  start(spec: string | { readonly [key: string]: JsonValue }, options: StartOptions): Promise<DecideReply> {
    const { input = null, runId, nowMs, budget = null, depth = 0, metadata = null, continued, logIndex } = options;
    const logged = logIndex !== undefined ? { logIndex } : {};
    if (continued !== undefined) {
      return this.request({ op: "start", spec, input, runId, nowMs, budget, depth, metadata, continued, ...logged });
    }
    return this.request({ op: "start", spec, input, runId, nowMs, budget, depth, metadata, ...logged });
  }

  /** Report `event`; with `logIndex`, the reply carries the decision's log records from it. */
  advance(state: string, event: FlowEvent, logIndex?: number): Promise<DecideReply> {
    if (logIndex !== undefined) {
      return this.request({ op: "advance", state, event, logIndex });
    }
    return this.request({ op: "advance", state, event });
  }

  /** The process id of the decide process (undefined if it could not start). */
  get pid(): number | undefined {
    return this.child.pid;
  }

  /** Whether the process has ended or failed: every later request is refused. */
  get failed(): Error | null {
    return this.failure;
  }

  /** Answer the flow's query `name` from `state` (running or settled); writes nothing. */
  query(state: string, name: string, args: JsonValue = null): Promise<QueryReply> {
    return this.send({ op: "query", state, name, args }) as Promise<QueryReply>;
  }

  /**
   * Check an update request against `state` without advancing it: `accept`,
   * `known` (the id is taken: answer from its view and run nothing), or the
   * `update-refused` error (nothing to log).
   */
  checkUpdate(state: string, name: string, input: JsonValue = null, updateId?: string): Promise<CheckUpdateReply> {
    if (updateId !== undefined) {
      return this.send({ op: "check-update", state, name, input, updateId }) as Promise<CheckUpdateReply>;
    }
    return this.send({ op: "check-update", state, name, input }) as Promise<CheckUpdateReply>;
  }

  /**
   * Start the child run a `run-subflow` effect asks for, as every flowcore host
   * does: the effect's key as the run id, its input, its depth, and its
   * budgetRemaining as the child's budget (a child spends its parent's budget).
   * A detached child is a root run of its own: no budget given (its own flow's).
   */
  startChild(effect: RunSubflow, childSpec: string, nowMs: number): Promise<DecideReply> {
    return this.start(childSpec, {
      input: effect.input ?? null,
      runId: effect.idempotencyKey,
      nowMs,
      budget: effect.detached === true ? null : effect.budgetRemaining,
      depth: effect.depth,
    });
  }

  /** End input; resolves with the process's exit code (0 when all went well). */
  close(): Promise<number> {
    this.child.stdin.end();
    return this.exited;
  }
}

/**
 * The event a parent gets when the child run of `key` has settled (`child` is
 * the reply whose decision settled it): its status, output and total usage.
 */
export function subflowSettled(key: string, child: Decided, atMs: number): FlowEvent {
  const settled = child.effects[child.effects.length - 1];
  if (settled === undefined || settled.kind !== "settled" || child.usage === undefined) {
    throw new Error(`the child run ${key} has not settled`);
  }
  const event: FlowEvent = {
    kind: "subflow-settled",
    idempotencyKey: key,
    status: settled.status,
    usage: child.usage,
    atMs,
    ...(settled.output !== undefined ? { output: settled.output } : {}),
    ...(settled.error !== undefined ? { error: settled.error } : {}),
  };
  return event;
}
