/**
 * What a host can run: tools, agents and teams written in TypeScript, and the
 * flows it can start (by id, for `run_subflow` too).
 *
 * A tool declares its execution class, as the Python tools module does:
 * `readonly` and `idempotent` tools are run again with the same idempotency
 * key when a crash lost an attempt; anything else (the default, `uncertain`)
 * is never run twice, and a lost attempt is reported `effect-outcome-unknown`.
 * After `effect-outcome-unknown` the interpreter decides by the flow's own
 * `tools:` class: a tool the flow declares safe is issued again under its key
 * (a new `effect.emitted`), any other fails its step with `outcome-unknown`.
 * So a call is run twice only when its registration or its flow says it may be.
 */

import { RegistryError } from "./errors";
import type { ErrorInfo, JsonValue, Usage } from "./flowEffect";

export type ExecutionClass = "readonly" | "idempotent" | "uncertain";

/** What a handler is given: the effect's key (use it to make the work idempotent). */
export interface WorkContext {
  readonly runId: string;
  readonly idempotencyKey: string;
  /** Set when this attempt runs again after a crash lost an earlier one under the same key. */
  readonly recovery: number;
}

/** A handler's result: a plain value, or `{output, usage}` through `withUsage`. */
export type HandlerResult = JsonValue | UsageResult;

const USAGE = Symbol("flowcore-usage");

export interface UsageResult {
  readonly [USAGE]: true;
  readonly output: JsonValue;
  readonly usage: Usage;
}

/** Report what the work spent beside its output (cost, tokens, ...). */
export function withUsage(output: JsonValue, usage: Usage): UsageResult {
  return { [USAGE]: true, output, usage };
}

export function isUsageResult(value: unknown): value is UsageResult {
  return typeof value === "object" && value !== null && USAGE in value;
}

/** Throw this from a handler to fail its step with a typed error (`retryable` drives retries). */
export class WorkFailed extends Error {
  override readonly name = "WorkFailed";
  constructor(
    readonly type: string,
    message: string,
    readonly retryable: boolean = false,
    readonly details?: JsonValue,
  ) {
    super(message);
  }

  /** Fail with exactly this error (its cause, details and all). */
  static of(info: ErrorInfo): WorkFailed {
    const failed = new WorkFailed(info.type, info.message ?? "", info.retryable ?? false, info.details);
    failed.exact = info;
    return failed;
  }

  private exact: ErrorInfo | undefined;

  toErrorInfo(): ErrorInfo {
    if (this.exact !== undefined) {
      return this.exact;
    }
    return {
      type: this.type,
      message: this.message,
      retryable: this.retryable,
      ...(this.details !== undefined ? { details: this.details } : {}),
    };
  }
}

export type ToolHandler = (input: JsonValue, context: WorkContext) => Promise<HandlerResult> | HandlerResult;

export interface AgentRequest {
  readonly prompt: string;
  readonly instructions?: string;
  readonly member?: string;
}
export type AgentHandler = (request: AgentRequest, context: WorkContext) => Promise<HandlerResult> | HandlerResult;
export type TeamHandler = (request: { readonly prompt: string }, context: WorkContext) => Promise<HandlerResult> | HandlerResult;

export interface Tool {
  readonly handler: ToolHandler;
  readonly class: ExecutionClass;
}

const NAME = /^[A-Za-z0-9_.:-]{1,200}$/;

export class Registry {
  private readonly tools = new Map<string, Tool>();
  private readonly agents = new Map<string, AgentHandler>();
  private readonly teams = new Map<string, TeamHandler>();
  private readonly flows = new Map<string, string>();

  private static checkName(what: string, name: string, taken: boolean): void {
    if (!NAME.test(name)) {
      throw new RegistryError(`${what} name ${JSON.stringify(name)} is not 1-200 of A-Z a-z 0-9 _ . : -`);
    }
    if (taken) {
      throw new RegistryError(`${what} ${JSON.stringify(name)} is registered already`);
    }
  }

  /** Register the tool `name`; `options.class` defaults to `uncertain` (never re-run). */
  tool(name: string, handler: ToolHandler, options: { readonly class?: ExecutionClass } = {}): this {
    Registry.checkName("tool", name, this.tools.has(name));
    this.tools.set(name, { handler, class: options.class ?? "uncertain" });
    return this;
  }

  /** Register the agent `id` (run_agent steps and the members of declared teams). */
  agent(id: string, handler: AgentHandler): this {
    Registry.checkName("agent", id, this.agents.has(id));
    this.agents.set(id, handler);
    return this;
  }

  /** Register the team `id` (run_team steps of teams the flow does not declare). */
  team(id: string, handler: TeamHandler): this {
    Registry.checkName("team", id, this.teams.has(id));
    this.teams.set(id, handler);
    return this;
  }

  /** Register a flow's spec (YAML or JSON text) under the id `run_subflow` and `start` name it by. */
  flow(id: string, spec: string): this {
    Registry.checkName("flow", id, this.flows.has(id));
    this.flows.set(id, spec);
    return this;
  }

  toolOf(name: string): Tool | undefined {
    return this.tools.get(name);
  }
  agentOf(id: string): AgentHandler | undefined {
    return this.agents.get(id);
  }
  teamOf(id: string): TeamHandler | undefined {
    return this.teams.get(id);
  }
  flowOf(id: string): string | undefined {
    return this.flows.get(id);
  }
}
