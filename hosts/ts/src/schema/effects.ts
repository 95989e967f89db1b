/* eslint-disable */
/** Generated from specs/schema/effects.json by scripts/gen-types.mjs (json-schema-to-typescript): do not edit. */

import type {JsonValue} from "../flowEffect";

/**
 * An effect the flowcore interpreter asks its host to perform (core -> host). A tagged union discriminated by `kind`.
 */
export type FlowcoreEffect =
  RunAgent | RunTeam | CallTool | AskHuman | Sleep | AwaitSignal | RunSubflow | Settled | SignalRun | ContinueAsNew;

export interface RunAgent {
  agentId: string;
  budgetRemaining: BudgetRemaining;
  cancellation?: "abandon" | "try-cancel" | "wait-cancellation-completed";
  heartbeatDetails?: JsonValue;
  heartbeatTimeoutMs?: number | null;
  idempotencyKey: string;
  instructions?: string | null;
  kind: "run-agent";
  member?: string | null;
  prompt: string;
}
/**
 * What is left of the root run's budget when an effect is emitted.
 */
export interface BudgetRemaining {
  costMinorUnits?: number | null;
  steps: number;
  tokens?: number | null;
  toolCalls?: number | null;
  turns?: number | null;
  wallClockMs?: number | null;
}
export interface RunTeam {
  budgetRemaining?: BudgetRemaining | null;
  cancellation?: "abandon" | "try-cancel" | "wait-cancellation-completed";
  heartbeatDetails?: JsonValue;
  heartbeatTimeoutMs?: number | null;
  idempotencyKey: string;
  kind: "run-team";
  prompt: string;
  teamId: string;
}
export interface CallTool {
  cancellation?: "abandon" | "try-cancel" | "wait-cancellation-completed";
  heartbeatDetails?: JsonValue;
  heartbeatTimeoutMs?: number | null;
  idempotencyKey: string;
  input?: JsonValue;
  kind: "call-tool";
  tool: string;
}
export interface AskHuman {
  idempotencyKey: string;
  kind: "ask-human";
  options?: string[] | null;
  question: string;
}
export interface Sleep {
  idempotencyKey: string;
  kind: "sleep";
  untilMs: number;
}
/**
 * A signal wait (informational: signals reach a run by name). ``signal``: the
 * name, the first of ``signals`` when the wait takes any of several.
 */
export interface AwaitSignal {
  idempotencyKey: string;
  key?: string | null;
  kind: "await-signal";
  signal: string;
  signals?: string[];
}
/**
 * Start a child run. ``parent_close``: what the host does with the child when
 * the run stops waiting for it (``flowcore.plan`` lists it to cancel or to
 * detach). ``detached``: a root run of its own (its own budget, depth 0); the
 * host answers ``effect-succeeded`` with ``{"run_id": <its run id>}`` once it
 * has started, and never reports its settlement.
 */
export interface RunSubflow {
  budgetRemaining: BudgetRemaining;
  depth: number;
  detached?: boolean;
  flowId: string;
  idempotencyKey: string;
  input?: JsonValue;
  kind: "run-subflow";
  parentClose?: "abandon" | "cancel" | "wait";
}
export interface Settled {
  error?: ErrorInfo | null;
  exhausted?: ("cost" | "steps" | "tokens" | "tool-calls" | "turns" | "wall-clock") | null;
  kind: "settled";
  output?: JsonValue;
  report?: ReportEntry[];
  status: "budget-exhausted" | "cancelled" | "completed" | "failed";
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
/**
 * One work effect of a run and how it ended, for the ``settled`` report.
 */
export interface ReportEntry {
  effect: "call-tool" | "run-agent" | "run-subflow" | "run-team" | "signal-run";
  idempotencyKey: string;
  status: "failed" | "not-started" | "succeeded" | "uncertain";
  target: string;
}
/**
 * Send the signal ``signal`` (with ``payload`` and, when set, ``key``) to the
 * run ``run_id``: delivered once per idempotency key.
 */
export interface SignalRun {
  idempotencyKey: string;
  key?: string | null;
  kind: "signal-run";
  payload?: JsonValue;
  runId: string;
  signal: string;
}
/**
 * The run ends this incarnation and starts again from its first step.
 *
 * ``incarnation``: the number of the new incarnation (the first is 1).
 * ``input``: its input. ``signals``: buffered signals not yet taken, oldest
 * first by name; ``scheduled``: scheduled calls not yet due; both carry
 * over. ``budgetRemaining``: set for a child run only, whose new
 * incarnation spends from what is left. ``report``: every work effect of
 * the ending incarnation and how it ended, as in ``settled``. A host ends
 * the incarnation as it would settle it (stops what it still waits for)
 * and starts the next with ``flowcore.continue_run``. ``metadata``: the
 * run's metadata fields, which the next incarnation keeps.
 * ``idleIncarnations``: how many incarnations in a row, this one included,
 * ended this way without waiting for anything or taking a signal (absent
 * when this one waited); ``limits.max_idle_incarnations`` bounds it.
 */
export interface ContinueAsNew {
  budgetRemaining?: BudgetRemaining | null;
  idempotencyKey: string;
  idleIncarnations?: number;
  incarnation: number;
  input?: JsonValue;
  kind: "continue-as-new";
  metadata?: {} | null;
  report?: ReportEntry[];
  scheduled?: CarriedCall[];
  signals?: CarriedSignal[];
}
/**
 * A scheduled call not yet due that a run takes into its next incarnation.
 *
 * It keeps its id (its delay and call keys follow from it), its tool and
 * input, when it was scheduled and when it is due, whether it outlives the
 * run, and whether it was added from outside.
 */
export interface CarriedCall {
  count?: number | null;
  createdMs?: number;
  cron?: string | null;
  dueMs?: number;
  everyMs?: number | null;
  fires?: number;
  id: string;
  input?: JsonValue;
  outlive?: boolean;
  outside?: boolean;
  timezone?: string | null;
  tool: string;
  untilMs?: number | null;
}
/**
 * A buffered signal a run takes into its next incarnation (``continue-as-new``).
 */
export interface CarriedSignal {
  key?: string | null;
  payload?: JsonValue;
  signal: string;
}
