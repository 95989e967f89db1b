/**
 * The decision process, supervised: `flowcore decide --stdio` is started on
 * first use, and started again when it dies (killed, crashed, its pipe
 * closed). Every request is pure (a state string in, a decision out), so a
 * request the dying process never answered is sent again, once, to its
 * successor: a death between two decisions costs the host nothing. A process
 * that dies again on the request it was restarted for is given up on with a
 * `DecideProcessError`, and refusals come back as `DecideRefused`.
 */

import { Decider, type StartOptions } from "./decider";
import { DecideProcessError, DecideRefused } from "./errors";
import type { CheckUpdateReply, DecideReply, Decided, FlowEvent, JsonValue, QueryReply } from "./flowEffect";

export interface SupervisorOptions {
  /** The `flowcore` command (a path, or a name on PATH). */
  readonly command?: string;
  /** Arguments after `decide --stdio`. */
  readonly args?: readonly string[];
  /** Told each time the process is started again, with why the last one ended. */
  readonly onRestart?: (cause: Error, restarts: number) => void;
}

export class SupervisedDecider {
  private current: Decider | null = null;
  private started = 0;
  private readonly command: string;
  private readonly args: readonly string[];
  private readonly onRestart: ((cause: Error, restarts: number) => void) | undefined;

  constructor(options: SupervisorOptions = {}) {
    this.command = options.command ?? "flowcore";
    this.args = options.args ?? [];
    this.onRestart = options.onRestart;
  }

  /** How many times the process was started again after it died. */
  get restarts(): number {
    return Math.max(0, this.started - 1);
  }

  /** The running process's id (starting it if needed). */
  pid(): number | undefined {
    return this.live().pid;
  }

  private live(): Decider {
    const now = this.current;
    if (now !== null && now.failed === null) {
      return now;
    }
    if (now !== null && now.failed !== null && this.onRestart !== undefined) {
      this.onRestart(now.failed, this.started);
    }
    this.current = new Decider(this.command, this.args);
    this.started += 1;
    return this.current;
  }

  /** Send with one retry on a fresh process when the process died under the request. */
  private async call<T>(send: (d: Decider) => Promise<T>): Promise<T> {
    try {
      return await send(this.live());
    } catch (error) {
      if (!(error instanceof DecideProcessError)) {
        throw error;
      }
    }
    return await send(this.live()); // a second death is the caller's to see
  }

  private static decided(reply: DecideReply, what: string): Decided {
    if (!reply.ok) {
      throw new DecideRefused(reply.error, what);
    }
    return reply;
  }

  async start(spec: string, options: StartOptions): Promise<Decided> {
    return SupervisedDecider.decided(await this.call((d) => d.start(spec, options)), `start ${options.runId}`);
  }

  async advance(state: string, event: FlowEvent, logIndex?: number): Promise<Decided> {
    const reply = await this.call((d) => d.advance(state, event, logIndex));
    return SupervisedDecider.decided(reply, `${event.kind}`);
  }

  async query(state: string, name: string, args: JsonValue = null): Promise<JsonValue> {
    const reply: QueryReply = await this.call((d) => d.query(state, name, args));
    if (!reply.ok) {
      throw new DecideRefused(reply.error, `query ${name}`);
    }
    return reply.value;
  }

  async checkUpdate(state: string, name: string, input: JsonValue, updateId?: string): Promise<CheckUpdateReply> {
    return this.call((d) => d.checkUpdate(state, name, input, updateId));
  }

  /** End the process (if any); resolves when it has exited. */
  async close(): Promise<void> {
    const now = this.current;
    this.current = null;
    if (now !== null && now.failed === null) {
      await now.close();
    }
  }
}
