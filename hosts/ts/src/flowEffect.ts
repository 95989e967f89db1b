/**
 * The flowcore wire protocol in TypeScript: effects (core -> host), events
 * (host -> core) and the `flowcore decide --stdio` requests and replies.
 *
 * `FlowEffect` has the kinds and fields of the `FlowEffect` union that
 * TypeScript hosts already use, plus flowcore's documented additions
 * (specs/protocol.md §2): `idempotencyKey` on `ask-human`, `sleep` and
 * `await-signal`; `input`, `budgetRemaining`, `parentClose` and `detached` on
 * `run-subflow`; `status`,
 * `output`, `error`, `exhausted` and `report` on `settled`. Nothing of that
 * union is renamed or dropped. A field whose value is its default is absent
 * on the wire (specs/protocol.md §1): `input` absent means null, which is why
 * it is optional here and may be any JSON value.
 *
 * The JSON Schemas in specs/schema/ (effects.json, events.json,
 * decide-requests.json, decide-replies.json) are the reference: the types
 * generated from them are in ./schema (scripts/gen-types.mjs), and
 * ./schemaCheck.ts makes every kind and field here one of theirs, so a schema
 * that changes is a type error here until this file follows it.
 */

import type { FlowcoreLogRecord } from "./schema/records";

/** Any JSON value: what inputs, outputs, answers and payloads may hold. */
export type JsonValue =
  | null
  | boolean
  | number
  | string
  | readonly JsonValue[]
  | { readonly [key: string]: JsonValue };

/** What is left of the root run's budget when an effect is emitted. Absent = unlimited. */
export interface BudgetRemaining {
  readonly steps: number;
  readonly costMinorUnits?: number;
  readonly wallClockMs?: number;
  /** Additions: present when the root run limits them. */
  readonly tokens?: number;
  readonly toolCalls?: number;
  readonly turns?: number;
}

export type SettledStatus = "completed" | "failed" | "cancelled" | "budget-exhausted";
export type ExhaustedLimit = "steps" | "cost" | "wall-clock" | "tokens" | "tool-calls" | "turns";

export interface ErrorInfo {
  readonly type: string;
  readonly message?: string;
  readonly retryable?: boolean;
  /** Additions (specs/language.md §9): data the failing side attached, the
   * error this one comes from, and every attempt's error of a retried step. */
  readonly details?: JsonValue;
  readonly cause?: ErrorInfo;
  readonly attempts?: readonly ErrorInfo[];
}

/** One work effect of a run in its `settled` report (specs/protocol.md §5). */
export interface ReportEntry {
  readonly idempotencyKey: string;
  readonly effect: "call-tool" | "run-agent" | "run-team" | "run-subflow" | "signal-run";
  readonly target: string;
  readonly status: "succeeded" | "failed" | "uncertain" | "not-started";
}

export interface RunAgent {
  readonly kind: "run-agent";
  readonly agentId: string;
  readonly prompt: string;
  readonly instructions?: string;
  /** Which team member this step is, so the child run and its usage carry the attribution. */
  readonly member?: string;
  readonly idempotencyKey: string;
  /** Its share of what the flow has left to spend, derived at every emission (language.md §11.7). */
  readonly budgetRemaining: BudgetRemaining;
  /** The step's heartbeat_timeout_ms: the work must heartbeat this often (protocol.md §3.2). */
  readonly heartbeatTimeoutMs?: number;
  /** The last heartbeat details of an earlier attempt that timed out, to resume from. */
  readonly heartbeatDetails?: JsonValue;
  /**
   * What cancelling it means (absent = "try-cancel": cancel it, report nothing more).
   * "wait-cancellation-completed": cancel it and report how it ended, which the run
   * waits for; "abandon": let it run to its end (the plan lists it under `detach`).
   */
  readonly cancellation?: "try-cancel" | "wait-cancellation-completed" | "abandon";
}

export interface RunTeam {
  readonly kind: "run-team";
  readonly teamId: string;
  readonly prompt: string;
  readonly idempotencyKey: string;
  /** The team's share of what the flow has left to spend (absent only in older logs). */
  readonly budgetRemaining?: BudgetRemaining;
  /** The step's heartbeat_timeout_ms: the work must heartbeat this often (protocol.md §3.2). */
  readonly heartbeatTimeoutMs?: number;
  /** The last heartbeat details of an earlier attempt that timed out, to resume from. */
  readonly heartbeatDetails?: JsonValue;
  /**
   * What cancelling it means (absent = "try-cancel": cancel it, report nothing more).
   * "wait-cancellation-completed": cancel it and report how it ended, which the run
   * waits for; "abandon": let it run to its end (the plan lists it under `detach`).
   */
  readonly cancellation?: "try-cancel" | "wait-cancellation-completed" | "abandon";
}

export interface CallTool {
  readonly kind: "call-tool";
  readonly tool: string;
  /** Absent = null; any JSON value (a spec may pass a list or a scalar). */
  readonly input?: JsonValue;
  readonly idempotencyKey: string;
  /** The step's heartbeat_timeout_ms: the work must heartbeat this often (protocol.md §3.2). */
  readonly heartbeatTimeoutMs?: number;
  /** The last heartbeat details of an earlier attempt that timed out, to resume from. */
  readonly heartbeatDetails?: JsonValue;
  /**
   * What cancelling it means (absent = "try-cancel": cancel it, report nothing more).
   * "wait-cancellation-completed": cancel it and report how it ended, which the run
   * waits for; "abandon": let it run to its end (the plan lists it under `detach`).
   */
  readonly cancellation?: "try-cancel" | "wait-cancellation-completed" | "abandon";
}

export interface AskHuman {
  readonly kind: "ask-human";
  readonly question: string;
  /** When present, the answer must be one of them. */
  readonly options?: readonly string[];
  /** An addition: correlates the answer (questions may be asked in parallel branches). */
  readonly idempotencyKey: string;
}

export interface Sleep {
  readonly kind: "sleep";
  /** An instant on the run's clock (epoch ms); fire at once if it is not in the future. */
  readonly untilMs: number;
  /** An addition: the key `timer-fired` reports. */
  readonly idempotencyKey: string;
}

export interface AwaitSignal {
  readonly kind: "await-signal";
  readonly signal: string;
  /** An addition; signals are reported by name, whenever they arrive. */
  readonly idempotencyKey: string;
  /** An addition: every name a wait for any of several takes (`signal` is the first). */
  readonly signals?: readonly string[];
  /** An addition: the wait takes only signals sent with this key (route by it). */
  readonly key?: string;
}

/**
 * An addition: send signal `signal` (with `payload` and, when set, `key`) to the run
 * `runId`, once per `idempotencyKey`; answer `effect-succeeded` (`{"run_id": runId}`)
 * or `effect-failed` (`unknown-run`, `run-settled`, `signal-rejected`).
 */
export interface SignalRun {
  readonly kind: "signal-run";
  readonly runId: string;
  readonly signal: string;
  readonly payload?: JsonValue;
  readonly key?: string;
  readonly idempotencyKey: string;
}

export interface RunSubflow {
  readonly kind: "run-subflow";
  readonly flowId: string;
  /** The child's depth: start the child with it. */
  readonly depth: number;
  readonly idempotencyKey: string;
  /** An addition: the child's input (absent = null). */
  readonly input?: JsonValue;
  /** An addition: the child's budget, its parent's remainder (start the child with it). */
  readonly budgetRemaining: BudgetRemaining;
  /**
   * An addition: what becomes of the child when the run stops waiting for it
   * (absent = "cancel"). "abandon": it runs on (the plan lists it under
   * `detach`); "wait": the run settles only after it.
   */
  readonly parentClose?: "cancel" | "abandon" | "wait";
  /**
   * An addition: a root run of its own (its own flow's budget, depth 0). Answer
   * `effect-succeeded` with `{"run_id": <its run id>}` once it has started;
   * never report its settlement.
   */
  readonly detached?: boolean;
}

export interface Settled {
  readonly kind: "settled";
  /** Nothing more to do; status says why. */
  readonly status: SettledStatus;
  readonly output?: JsonValue;
  readonly error?: ErrorInfo;
  readonly exhausted?: ExhaustedLimit;
  readonly report?: readonly ReportEntry[];
}

/** A buffered signal a run takes into its next incarnation. */
export interface CarriedSignal {
  readonly signal: string;
  readonly payload?: JsonValue;
  /** Set for a signal sent with a key (await_signal.key). */
  readonly key?: string;
}

/** A scheduled call not yet due that a run takes into its next incarnation. */
export interface CarriedCall {
  readonly id: string;
  readonly tool: string;
  readonly input?: JsonValue;
  readonly createdMs?: number;
  readonly dueMs?: number;
  readonly outlive?: boolean;
  readonly outside?: boolean;
  /** A recurring call (an addition): its recurrence and its firings so far. */
  readonly everyMs?: number;
  readonly cron?: string;
  readonly timezone?: string;
  readonly count?: number;
  readonly untilMs?: number;
  readonly fires?: number;
}

/** An addition (specs/language.md §4.16): the run ends this incarnation and
 * starts again from its first step; start the next incarnation with `decide`'s
 * start request carrying this effect as `continued` (same run id). */
export interface ContinueAsNew {
  readonly kind: "continue-as-new";
  readonly input?: JsonValue;
  /** The next incarnation's number (the first is 1). */
  readonly incarnation: number;
  readonly idempotencyKey: string;
  /** Buffered signals the next incarnation takes over, oldest first by name. */
  readonly signals?: readonly CarriedSignal[];
  /** Scheduled calls not yet due that the next incarnation takes over. */
  readonly scheduled?: readonly CarriedCall[];
  /** A child run's remainder, which its next incarnation spends from. */
  readonly budgetRemaining?: BudgetRemaining;
  readonly report?: readonly ReportEntry[];
  /** The run's metadata fields, which the next incarnation keeps. */
  readonly metadata?: { readonly [field: string]: string | number | boolean };
  /** Present when the ending incarnation waited for nothing: such incarnations
   * in a row so far (bounded by the flow's `limits.max_idle_incarnations`). */
  readonly idleIncarnations?: number;
}

/** One unit of work the host performs and reports back. Data, not a callback. */
export type FlowEffect =
  | RunAgent
  | RunTeam
  | CallTool
  | AskHuman
  | Sleep
  | AwaitSignal
  | RunSubflow
  | Settled
  | SignalRun
  | ContinueAsNew;

export type EffectKind = FlowEffect["kind"];

/** Usage reported for one piece of work; absent fields are 0. */
export interface Usage {
  readonly steps?: number;
  readonly costMinorUnits?: number;
  /** What an agent spent inside: input + output tokens, its own tool calls, its model turns. */
  readonly tokens?: number;
  readonly toolCalls?: number;
  readonly turns?: number;
}

/** An event the host reports (host -> core); `atMs` is the host's clock. */
export type FlowEvent =
  | {
      readonly kind: "effect-succeeded";
      readonly idempotencyKey: string;
      readonly output?: JsonValue;
      readonly usage?: Usage;
      readonly atMs: number;
    }
  | {
      readonly kind: "effect-failed";
      readonly idempotencyKey: string;
      readonly error: ErrorInfo;
      /** Addition: what failed work still spent (an agent cut off by its limits). */
      readonly usage?: Usage;
      readonly atMs: number;
    }
  | { readonly kind: "effect-outcome-unknown"; readonly idempotencyKey: string; readonly atMs: number }
  | {
      readonly kind: "human-answered";
      readonly idempotencyKey: string;
      readonly answer: JsonValue;
      readonly atMs: number;
      /** Addition: who answered, when the host knows it. */
      readonly principal?: string;
    }
  | { readonly kind: "timer-fired"; readonly idempotencyKey: string; readonly atMs: number }
  | {
      readonly kind: "signal-received";
      readonly signal: string;
      readonly payload?: JsonValue;
      readonly atMs: number;
      /** Addition: taken only by a wait with this key. */
      readonly key?: string;
    }
  | {
      readonly kind: "subflow-settled";
      readonly idempotencyKey: string;
      readonly status: SettledStatus;
      readonly output?: JsonValue;
      readonly usage?: Usage;
      /** Addition: the child's own error, the cause of its parent step's. */
      readonly error?: ErrorInfo;
      readonly atMs: number;
    }
  | { readonly kind: "cancel-requested"; readonly reason?: string; readonly atMs: number }
  | { readonly kind: "scheduled-cancel-requested"; readonly scheduleId: string; readonly atMs: number }
  | { readonly kind: "scheduled-run-now-requested"; readonly scheduleId: string; readonly atMs: number }
  | {
      readonly kind: "scheduled-add-requested";
      readonly tool: string;
      readonly input?: JsonValue;
      readonly delayMs?: number;
      readonly atMs: number;
      readonly request?: string;
      /** A recurring call (an addition): every `everyMs`, or at each `cron` point. */
      readonly everyMs?: number;
      readonly cron?: string;
      readonly timezone?: string;
      readonly count?: number;
      readonly untilMs?: number;
    }
  | {
      readonly kind: "scheduled-replay-requested";
      readonly scheduleId: string;
      readonly atMs: number;
      readonly request?: string;
    }
  | {
      /** A request for one of the flow's declared updates (language.md §16): the
       * run checks it (refusing writes nothing), then runs its handler beside
       * the main steps; the reply comes on a later decision's `replies`. */
      readonly kind: "update-requested";
      /** The caller's id: unique within an incarnation; a repeat is rejected (look it up first). */
      readonly updateId: string;
      readonly name: string;
      readonly input?: JsonValue;
      /** Who asked, when the host knows it. */
      readonly principal?: string;
      readonly atMs: number;
    };

export type EventKind = FlowEvent["kind"];

/** How an update ended: on `Decided.replies` of the decision that ended it. */
export interface UpdateReply {
  readonly updateId: string;
  readonly name: string;
  readonly status: "completed" | "failed";
  /** The handler's reply (completed). */
  readonly output?: JsonValue;
  /** Why it failed: the handler's error, or `update-abandoned` when the run
   * settled or continued as new first. */
  readonly error?: ErrorInfo;
}

/** What the run knows of one update (`flowcore.update_of`). */
export interface UpdateView {
  readonly updateId: string;
  readonly name: string;
  /** 1, 2, … per incarnation, in the order the updates were accepted. */
  readonly seq: number;
  readonly status: "running" | "completed" | "failed";
  readonly output?: JsonValue;
  readonly error?: ErrorInfo;
  readonly principal?: string;
}

/** Why an update was refused (`UpdateRefused.code`): nothing was written. */
export type UpdateRefusedCode = "unknown-update" | "bad-input" | "validator" | "limit" | "ending";

/** Why a query failed (`QueryError.code`). */
export type QueryFailedCode = "unknown-query" | "bad-args" | "expression-error";

// --- flowcore decide --stdio (specs/protocol.md §13) ---------------------------------------

/** A request id: any JSON scalar, echoed in the reply. */
export type RequestId = string | number | boolean | null;

/** Caps below the spec's own budget; a child's share is its run-subflow's budgetRemaining. */
export interface BudgetCaps {
  readonly steps?: number;
  readonly costMinorUnits?: number;
  readonly wallClockMs?: number;
  readonly tokens?: number;
  readonly toolCalls?: number;
  readonly turns?: number;
}

export interface StartRequest {
  readonly id: RequestId;
  readonly op: "start";
  /** Spec text (YAML or JSON) as written, or a spec object. */
  readonly spec: string | { readonly [key: string]: JsonValue };
  readonly input?: JsonValue;
  readonly runId: string;
  readonly nowMs: number;
  readonly budget?: BudgetCaps | null;
  readonly depth?: number;
  /** Initial values of the metadata fields the flow declares. */
  readonly metadata?: { readonly [field: string]: string | number | boolean } | null;
  /** An addition: the continue-as-new effect the run's last incarnation ended
   * with; the reply is its next incarnation. */
  readonly continued?: ContinueAsNew;
  /** The index the decision's first log record takes: given, the reply carries `records`. */
  readonly logIndex?: number;
}

export interface AdvanceRequest {
  readonly id: RequestId;
  readonly op: "advance";
  /** A state string from an earlier reply: opaque. */
  readonly state: string;
  readonly event: FlowEvent;
  /** The index the decision's first log record takes: given, the reply carries `records`. */
  readonly logIndex?: number;
}

/** Answer one of the flow's declared queries from a state; writes nothing. */
export interface QueryRequest {
  readonly id: RequestId;
  readonly op: "query";
  readonly state: string;
  readonly name: string;
  readonly args?: JsonValue;
}

/** Check an update request without advancing the run: refuse it, accept it, or
 * say the id is known (then its view: answer the caller from it, run nothing). */
export interface CheckUpdateRequest {
  readonly id: RequestId;
  readonly op: "check-update";
  readonly state: string;
  readonly name: string;
  readonly input?: JsonValue;
  readonly updateId?: string;
}

export type DecideRequest = StartRequest | AdvanceRequest | QueryRequest | CheckUpdateRequest;

export type RunStatus = "running" | SettledStatus;

export interface Decided {
  readonly id: RequestId;
  readonly ok: true;
  /** The run's next state string. Opaque: store it, hand it back, never look inside. */
  readonly state: string;
  readonly effects: readonly FlowEffect[];
  readonly status: RunStatus;
  /** Set once the run has settled: the totals a parent's subflow-settled reports. */
  readonly usage?: Usage;
  /** The answer to a scheduled-call event from outside. */
  readonly scheduled?: { readonly id: string; readonly done: boolean };
  /** The run's metadata fields now, when any is set: what a host indexes runs by. */
  readonly metadata?: { readonly [field: string]: string | number | boolean };
  /** The updates this decision ended, in order (absent when none). */
  readonly replies?: readonly UpdateReply[];
  /** Given `logIndex`: the records this decision adds to the run's log (specs/log.md §11). */
  readonly records?: readonly LogRecord[];
  /**
   * In a `start` reply only: the execution class of every tool the flow's `tools:`
   * declares, by name (a tool it does not declare is `uncertain`).
   */
  readonly toolClasses?: { readonly [tool: string]: ExecutionClass };
}

/** A tool's execution class, as the flow's `tools:` declares it (specs/language.md, tools). */
export type ExecutionClass = "readonly" | "idempotent" | "uncertain";

/** One record of a run's log (specs/log.md §1), as decide makes it: append it as one line.
 * Generated from specs/schema/records.json (src/schema/records.ts). */
export type LogRecord = FlowcoreLogRecord;

/** A query's answer. */
export interface Queried {
  readonly id: RequestId;
  readonly ok: true;
  readonly value: JsonValue;
}

/** A `check-update` verdict: `accept` (advance with the event next) or `known` (the id is taken). */
export type UpdateChecked =
  | { readonly id: RequestId; readonly ok: true; readonly verdict: "accept" }
  | { readonly id: RequestId; readonly ok: true; readonly verdict: "known"; readonly update: UpdateView };

export type DecideErrorType =
  | "not-json"
  | "not-object"
  | "too-large"
  | "unknown-op"
  | "bad-request"
  | "bad-spec"
  | "bad-input"
  | "bad-event"
  | "event-rejected"
  | "bad-state"
  | "state-mismatch"
  | "update-refused"
  | "query-failed"
  | "internal";

export interface DecideError {
  readonly type: DecideErrorType;
  readonly message: string;
  readonly where?: string;
  readonly key?: string;
  readonly problems?: readonly string[];
  /** `update-refused`: an `UpdateRefusedCode`; `query-failed`: a `QueryFailedCode`. */
  readonly code?: UpdateRefusedCode | QueryFailedCode;
}

export interface Failed {
  readonly id: RequestId;
  readonly ok: false;
  readonly error: DecideError;
}

export type DecideReply = Decided | Failed;
export type QueryReply = Queried | Failed;
export type CheckUpdateReply = UpdateChecked | Failed;

/** Exhaustive dispatch over the effects: a new kind is a type error until handled. */
export function assertNever(value: never): never {
  throw new Error(`unexpected value: ${JSON.stringify(value)}`);
}
