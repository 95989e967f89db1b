/* eslint-disable */
/** Generated from specs/schema/records.json by scripts/gen-types.mjs (json-schema-to-typescript): do not edit. */

import type {JsonValue} from "../flowEffect";

/**
 * One record of a flowcore event log (specs/log.md): an envelope {type, index, runId, at, data}, one per NDJSON line or length-framed MessagePack map, discriminated by `type`. Readers skip record types they do not know and ignore unknown fields, so that new ones never break old logs.
 */
export type FlowcoreLogRecord =
  | RunStartedRecord
  | EventReportedRecord
  | EventRejectedRecord
  | EffectEmittedRecord
  | RunSettledRecord
  | EffectRedispatchedRecord
  | ScheduledChangedRecord;

export interface RunStartedRecord {
  at: number;
  data: RunStartedData;
  index: number;
  runId: string;
  type: "run.started";
}
/**
 * ``run.started``: what ``start`` was called with; ``at`` is its ``now_ms``.
 *
 * ``forkedFrom``: only in a fork's log (``flowcore.fork``).
 */
export interface RunStartedData {
  budget?: StartBudget | null;
  depth?: number;
  flowId: string;
  forkedFrom?: ForkedFrom | null;
  idleIncarnations?: number;
  incarnation?: number;
  input?: JsonValue;
  metadata?: {} | null;
  scheduled?: CarriedCall[];
  semantics?: number;
  signals?: CarriedSignal[];
  specHash: string;
  version: number;
}
/**
 * The budget a host passed to ``start`` (a child's share); unset limits are omitted.
 */
export interface StartBudget {
  costMinorUnits?: number | null;
  steps?: number | null;
  tokens?: number | null;
  toolCalls?: number | null;
  turns?: number | null;
  wallClockMs?: number | null;
}
/**
 * A fork's source: its run and the index of the first of its records not carried.
 */
export interface ForkedFrom {
  index: number;
  runId: string;
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
export interface EventReportedRecord {
  at: number;
  data:
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
  index: number;
  runId: string;
  type: "event.reported";
}
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
export interface EventRejectedRecord {
  at: number;
  data: EventRejectedData;
  index: number;
  runId: string;
  type: "event.rejected";
}
/**
 * ``event.rejected``: an event the interpreter refused, and why.
 */
export interface EventRejectedData {
  event:
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
  reason?: string;
}
export interface EffectEmittedRecord {
  at: number;
  data:
    RunAgent | RunTeam | CallTool | AskHuman | Sleep | AwaitSignal | RunSubflow | Settled | SignalRun | ContinueAsNew;
  index: number;
  runId: string;
  type: "effect.emitted";
}
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
export interface RunSettledRecord {
  at: number;
  data: RunSettledData;
  index: number;
  runId: string;
  type: "run.settled";
}
/**
 * ``run.settled``: the settled effect's outcome (its report stays in the effect).
 */
export interface RunSettledData {
  error?: ErrorInfo | null;
  exhausted?: ("cost" | "steps" | "tokens" | "tool-calls" | "turns" | "wall-clock") | null;
  output?: JsonValue;
  status: "budget-exhausted" | "cancelled" | "completed" | "failed";
}
export interface EffectRedispatchedRecord {
  at: number;
  data: EffectRedispatchedData;
  index: number;
  runId: string;
  type: "effect.redispatched";
}
/**
 * ``effect.redispatched``: pending work run again under its key after a recovery.
 *
 * ``recovery`` counts the recoveries of this key (1 for the first); ``worker``
 * is the worker that was lost, when the host knows it. It changes no state:
 * the work was pending before and stays pending.
 */
export interface EffectRedispatchedData {
  idempotencyKey: string;
  recovery: number;
  worker?: string | null;
}
export interface ScheduledChangedRecord {
  at: number;
  data: ScheduledChangedData;
  index: number;
  runId: string;
  type: "scheduled.changed";
}
/**
 * ``scheduled.changed``: a scheduled call as the decision left it.
 *
 * Written for every change (created, issued, issued again, finished,
 * cancelled), derived from the decision (``Journal.scheduled``), so every
 * host writes the same records. It carries the status, never the call's
 * input: a stream of them shows what happens without what it is about.
 */
export interface ScheduledChangedData {
  attempts?: number;
  dueMs?: number;
  error?: ErrorInfo | null;
  fires?: number;
  id: string;
  replays?: number;
  status: "cancelled" | "completed" | "failed" | "pending" | "running" | "uncertain";
  tool: string;
}
