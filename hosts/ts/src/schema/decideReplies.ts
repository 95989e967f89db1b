/* eslint-disable */
/** Generated from specs/schema/decide-replies.json by scripts/gen-types.mjs (json-schema-to-typescript): do not edit. */

import type {JsonValue} from "../flowEffect";

/**
 * One reply line of `flowcore decide --stdio` (decide -> host): a decision (`ok: true`: the state string, the effects and the updates it ended), a query's value, an update check's verdict, or a typed error (`ok: false`).
 */
export type FlowcoreDecideReply = Decided | Queried | Checked | Failed;

/**
 * The decision: the next state string and the effects to perform, in order.
 *
 * ``status`` is ``running`` until the run settles. ``usage`` is set once it
 * has: the totals a parent's ``subflow-settled`` reports. ``scheduled``
 * answers a scheduled-call event from outside (``Decision.scheduled``).
 * ``metadata``: the run's metadata fields now, when any is set (what a host
 * indexes to list runs by). ``records``: when the request gave ``logIndex``,
 * the records the decision adds to the run's log from that index on, as
 * ``flowcore.Recorder`` makes them (specs/log.md §11), for a host to append.
 * ``toolClasses``: in a ``start`` reply only, the execution class of every
 * tool the flow declares (its ``tools:``), by name: what a host consults to
 * decide whether lost work may run again (an undeclared tool is ``uncertain``).
 */
export interface Decided {
  effects: (
    RunAgent | RunTeam | CallTool | AskHuman | Sleep | AwaitSignal | RunSubflow | Settled | SignalRun | ContinueAsNew
  )[];
  id: string | number | boolean | null;
  metadata?: {} | null;
  ok: true;
  records?: Record[];
  replies?: UpdateReply[];
  scheduled?: ScheduledAnswer | null;
  state: string;
  status: "budget-exhausted" | "cancelled" | "completed" | "failed" | "running";
  toolClasses?: {
    [k: string]: "idempotent" | "readonly" | "uncertain" | undefined;
  } | null;
  usage?: Usage | null;
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
/**
 * One log envelope. ``at`` is the host's clock (ms) when it was written.
 *
 * Decoding checks ``index`` and ``at`` are 64-bit integers >= 0 (what
 * every host language holds exactly), so an envelope with a 100-digit
 * index is refused where it is read.
 *
 * Not tracked by the garbage collector (``gc=False``): a record holds
 * strings, numbers and JSON data, never itself, and a simulation or a host
 * writes many of them.
 */
export interface Record {
  at: number;
  data?: JsonValue;
  index: number;
  runId: string;
  type: string;
}
/**
 * How an update ended (``Decision.replies``): ``completed`` with its reply
 * (``output``), or ``failed`` with ``error``.
 */
export interface UpdateReply {
  error?: ErrorInfo | null;
  name: string;
  output?: JsonValue;
  status: "completed" | "failed";
  updateId: string;
}
/**
 * What a scheduled-call event from outside answers (``Decision.scheduled``).
 *
 * ``id``: the schedule id (for an add, the id it was given). ``done``: for a
 * cancel or run-now, whether the call was still pending and so was
 * cancelled or issued now (false for an unknown or finished id, as an
 * answer, not an error); for an add, always true.
 */
export interface ScheduledAnswer {
  done: boolean;
  id: string;
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
/**
 * A query's value.
 */
export interface Queried {
  id: string | number | boolean | null;
  ok: true;
  value: JsonValue;
}
/**
 * ``accept``: the run would take the update now; ``known``: its id is taken
 * (``update`` says by which update, and how it stands).
 */
export interface Checked {
  id: string | number | boolean | null;
  ok: true;
  update?: UpdateView | null;
  verdict: "accept" | "known";
}
/**
 * What a state knows of one update (``flowcore.update_of``): ``seq`` is its
 * number in the incarnation (1, 2, ...).
 */
export interface UpdateView {
  error?: ErrorInfo | null;
  name: string;
  output?: JsonValue;
  principal?: string | null;
  seq: number;
  status: "completed" | "failed" | "running";
  updateId: string;
}
/**
 * A request that was not served; the run (if any) is unchanged.
 */
export interface Failed {
  error: ErrorBody;
  id: string | number | boolean | null;
  ok: false;
}
/**
 * Why a request was not served. ``where`` names the field or the spec location;
 * ``key`` is a rejected event's idempotency key; ``problems`` every spec problem.
 */
export interface ErrorBody {
  code?: string | null;
  key?: string | null;
  message: string;
  problems?: string[] | null;
  type:
    | "bad-event"
    | "bad-input"
    | "bad-request"
    | "bad-spec"
    | "bad-state"
    | "event-rejected"
    | "internal"
    | "not-json"
    | "not-object"
    | "query-failed"
    | "state-mismatch"
    | "too-large"
    | "unknown-op"
    | "update-refused";
  where?: string | null;
}
