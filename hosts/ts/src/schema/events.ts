/* eslint-disable */
/** Generated from specs/schema/events.json by scripts/gen-types.mjs (json-schema-to-typescript): do not edit. */

import type {JsonValue} from "../flowEffect";

/**
 * An event a host reports back to the flowcore interpreter (host -> core). A tagged union discriminated by `kind`.
 */
export type FlowcoreEvent =
  | EffectSucceeded
  | EffectFailed
  | EffectOutcomeUnknown
  | HumanAnswered
  | TimerFired
  | SignalReceived
  | SubflowSettled
  | CancelRequested
  | ScheduledCancelRequested
  | ScheduledRunNowRequested
  | ScheduledAddRequested
  | ScheduledReplayRequested
  | UpdateRequested;

export interface EffectSucceeded {
  atMs: number;
  idempotencyKey: string;
  kind: "effect-succeeded";
  output?: JsonValue;
  usage?: Usage | null;
}
/**
 * Usage reported by a host for one piece of work: steps and cost beyond the
 * step the work itself costs, and what an agent spent inside (tokens, its own
 * tool calls, its model turns).
 *
 * ``tokens`` is the total the ledger limits (input + output). Where the agent
 * reports them, ``input_tokens`` (cache reads included), ``output_tokens``
 * and ``cache_read_tokens`` (the part of the input read from the provider's
 * prompt cache) split it; they are counted beside the total, never instead
 * of it, and 0 when not reported.
 */
export interface Usage {
  cacheReadTokens?: number;
  costMinorUnits?: number;
  inputTokens?: number;
  outputTokens?: number;
  steps?: number;
  tokens?: number;
  toolCalls?: number;
  turns?: number;
}
export interface EffectFailed {
  atMs: number;
  error: ErrorInfo;
  idempotencyKey: string;
  kind: "effect-failed";
  usage?: Usage | null;
}
/**
 * A failure: ``type`` is what ``catch`` and ``retry`` match on (``type``, or
 * the type of an error in its ``cause`` chain).
 *
 * ``details``: data the failing side attached (a ``fail`` step's, say).
 * ``cause``: the error this one comes from (a child run's error, under its
 * parent's ``subflow-failed``). ``attempts``: for a step retried before it
 * failed, every attempt's error in order, this one's last.
 */
export interface ErrorInfo {
  attempts?: ErrorInfo[];
  cause?: ErrorInfo | null;
  details?: JsonValue;
  message?: string;
  retryable?: boolean;
  type: string;
}
export interface EffectOutcomeUnknown {
  atMs: number;
  idempotencyKey: string;
  kind: "effect-outcome-unknown";
}
export interface HumanAnswered {
  answer: JsonValue;
  atMs: number;
  idempotencyKey: string;
  kind: "human-answered";
  principal?: string | null;
}
export interface TimerFired {
  atMs: number;
  idempotencyKey: string;
  kind: "timer-fired";
}
export interface SignalReceived {
  atMs: number;
  key?: string | null;
  kind: "signal-received";
  payload?: JsonValue;
  signal: string;
}
/**
 * A child run settled. ``error``: the child's own error when it did not complete
 * (its parent's step fails with ``subflow-<status>`` caused by it).
 */
export interface SubflowSettled {
  atMs: number;
  error?: ErrorInfo | null;
  idempotencyKey: string;
  kind: "subflow-settled";
  output?: JsonValue;
  status: "budget-exhausted" | "cancelled" | "completed" | "failed";
  usage?: Usage | null;
}
export interface CancelRequested {
  atMs: number;
  kind: "cancel-requested";
  reason?: string;
}
/**
 * Cancel one scheduled call from outside the run, by its schedule id.
 *
 * Never rejected for the id: the decision answers whether the call was
 * still pending (``Decision.scheduled``), false for an unknown or finished id.
 */
export interface ScheduledCancelRequested {
  atMs: number;
  kind: "scheduled-cancel-requested";
  scheduleId: string;
}
/**
 * Issue one pending scheduled call now: its delay timer is dropped.
 */
export interface ScheduledRunNowRequested {
  atMs: number;
  kind: "scheduled-run-now-requested";
  scheduleId: string;
}
/**
 * Schedule a call from outside the run: only to a tool declared ``schedulable``.
 * ``request`` (who asked, e.g. a handler's ``<key>#1``): the id derives from it;
 * the same request again adds nothing and answers that id.
 *
 * A recurring call gives ``every_ms`` or ``cron`` (with ``timezone``, an
 * IANA name, UTC when absent), and may end after ``count`` firings or once
 * its next firing would come after ``until_ms`` (epoch ms).
 */
export interface ScheduledAddRequested {
  atMs: number;
  count?: number | null;
  cron?: string | null;
  delayMs?: number;
  everyMs?: number | null;
  input?: JsonValue;
  kind: "scheduled-add-requested";
  request?: string | null;
  timezone?: string | null;
  tool: string;
  untilMs?: number | null;
}
/**
 * Issue a finished scheduled call again (same tool, same input) as a new
 * attempt under its own key (``<id>/replay-<n>``). Rejected for an unknown id
 * or a call still pending or out. ``request``: the same request again
 * replays nothing and answers as the first did.
 */
export interface ScheduledReplayRequested {
  atMs: number;
  kind: "scheduled-replay-requested";
  request?: string | null;
  scheduleId: string;
}
/**
 * A caller asks the run to run its update ``name`` (language.md §16).
 *
 * ``update_id``: the caller's id for this request, unique in the run's
 * incarnation (a repeated one is rejected: hosts look it up first with
 * ``flowcore.update_of``); ``principal``: who asks, if the host knows.
 */
export interface UpdateRequested {
  atMs: number;
  input?: JsonValue;
  kind: "update-requested";
  name: string;
  principal?: string | null;
  updateId: string;
}
