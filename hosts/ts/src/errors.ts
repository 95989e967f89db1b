/**
 * The host's typed errors: every failure the host reports is one of these,
 * never a bare `Error`, so a caller can tell "you asked wrongly" (a refusal,
 * an unknown run) from "the decide process is gone" or "the store is broken".
 */

import type { DecideError, DecideErrorType, QueryFailedCode, UpdateRefusedCode } from "./flowEffect";

/** The base of every error the host throws. */
export class HostError extends Error {
  override readonly name: string = "HostError";
}

/**
 * The decide process could not be started, died, or wrote what is not a
 * reply. `exitCode`/`signal` say how it ended when it did; `stderr` holds
 * the end of what it printed.
 */
export class DecideProcessError extends HostError {
  override readonly name = "DecideProcessError";
  constructor(
    message: string,
    readonly exitCode: number | null = null,
    readonly signal: string | null = null,
    readonly stderr: string = "",
  ) {
    super(message);
  }
}

/**
 * The decide process refused a request (`ok: false`): the run it named is
 * unchanged. `type` is the wire's error type (specs/protocol.md §13.2).
 */
export class DecideRefused extends HostError {
  override readonly name = "DecideRefused";
  readonly type: DecideErrorType;
  readonly where: string | undefined;
  readonly key: string | undefined;
  readonly problems: readonly string[];
  readonly code: UpdateRefusedCode | QueryFailedCode | undefined;
  constructor(error: DecideError, what: string) {
    super(`${what}: ${error.type}: ${error.message}`);
    this.type = error.type;
    this.where = error.where;
    this.key = error.key;
    this.problems = error.problems ?? [];
    this.code = error.code;
  }
}

/** No run with this id is in the store. */
export class UnknownRun extends HostError {
  override readonly name = "UnknownRun";
  constructor(readonly runId: string) {
    super(`no run ${JSON.stringify(runId)} in the store`);
  }
}

/** The run exists but cannot take this (it has settled, or the key is not what it waits for). */
export class RunRefused extends HostError {
  override readonly name = "RunRefused";
  constructor(
    readonly runId: string,
    message: string,
  ) {
    super(message);
  }
}

/** A registry problem: an unknown flow, a handler registered twice, a bad name. */
export class RegistryError extends HostError {
  override readonly name = "RegistryError";
}

/** The store's files are not what this host wrote (a corrupt snapshot, a gap in a log). */
export class StoreError extends HostError {
  override readonly name = "StoreError";
  constructor(
    readonly path: string,
    message: string,
  ) {
    super(`${path}: ${message}`);
  }
}
