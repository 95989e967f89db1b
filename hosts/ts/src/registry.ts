/**
 * What a host can run: tools, agents and teams written in TypeScript, and the
 * flows it can start (by id, for `run_subflow` too).
 *
 * A tool's execution class is the flow's, never the registration's: the
 * flow's `tools:` declares it (`tools: {send: {class: uncertain}}`; a tool
 * declared without a class, or not at all, is `uncertain`), as on every
 * flowcore host. After a crash lost an attempt, a tool the run's flow declares
 * `readonly` or `idempotent` is run again with the same idempotency key; any
 * other work is never run twice, and is reported `effect-outcome-unknown`.
 * A registration that states a class is refused (`RegistryError`).
 */

import { RegistryError } from "./errors";
import type { ErrorInfo, ExecutionClass, JsonValue, Usage } from "./flowEffect";

export type { ExecutionClass } from "./flowEffect";

/** What a handler is given: the effect's key (use it to make the work idempotent). */
export interface WorkContext {
  readonly runId: string;
  readonly idempotencyKey: string;
  /** Set when this attempt runs again after a crash lost an earlier one under the same key. */
  readonly recovery: number;
  /** A tool's class, as the run's flow declares it; absent for agents and teams. */
  readonly executionClass?: ExecutionClass;
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

  /**
   * Register the tool `name`. Its execution class is the flow's (`tools:`), so
   * there is none to give here: a third argument (`{class: ...}` from
   * JavaScript) is refused with a `RegistryError` naming the tool.
   */
  tool(name: string, handler: ToolHandler, ...rest: readonly never[]): this {
    if (rest.length > 0) {
      const given: unknown = rest[0];
      const stated =
        typeof given === "object" && given !== null && "class" in given ? ` (class ${JSON.stringify(given.class)})` : "";
      throw new RegistryError(
        `tool ${JSON.stringify(name)}: a registration takes no options${stated}; ` +
          `its execution class is the flow's: declare it in the flow's tools: (${name}: {class: ...})`,
      );
    }
    Registry.checkName("tool", name, this.tools.has(name));
    this.tools.set(name, { handler });
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
