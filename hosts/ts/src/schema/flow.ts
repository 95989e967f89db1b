/* eslint-disable */
/** Generated from specs/schema/flow.json by scripts/gen-types.mjs (json-schema-to-typescript): do not edit. */

import type {JsonValue} from "../flowEffect";

/**
 * An amount: an integer from 0 to 10^15.
 */
export type Amount = number;
/**
 * A duration read when the spec is parsed (§1 Durations): an integer of milliseconds (0 to ten 366-day years) or duration text (`500ms`, `1m`, `PT2H`); not an expression.
 */
export type DurationLiteral = number | string;
/**
 * A count: an integer from 1 to 1,000,000,000.
 */
export type Count = number;
/**
 * A template: any JSON value whose strings may hold `${...}` JMESPath expressions, evaluated when the step runs. A string that is exactly one `${...}` yields the raw value; otherwise results are interpolated as text (§8.1). flowcore compiles every expression when the spec is parsed.
 */
export type Template = JsonValue;
/**
 * A step: an `id`, exactly one kind key holding the kind's settings, and optional common fields (§3). Any other key is an error.
 */
export type Step = {
  ask_human?: AskHumanStep;
  /**
   * A duration read when the spec is parsed (§1 Durations): an integer of milliseconds (0 to ten 366-day years) or duration text (`500ms`, `1m`, `PT2H`); not an expression.
   */
  attempt_timeout_ms?: number | string;
  await_signal?: AwaitSignalStep;
  call_tool?: CallToolStep;
  cancel_scheduled?: CancelScheduledStep;
  /**
   * §9.2: what becomes of the step's call when the run stops waiting for it (a timeout, a lost race, a cancel); `call_tool`, `run_agent` and `run_team` only.
   */
  cancellation?: "try_cancel" | "wait_cancellation_completed" | "abandon";
  /**
   * Only on a `try` step (§4.14).
   */
  catch?: CatchClause[];
  compensate?: Steps2;
  continue_as_new?: ContinueAsNewStep;
  /**
   * Ignored by the interpreter.
   */
  description?: string;
  fail?: FailStep;
  for_each?: ForEachStep;
  /**
   * A duration read when the spec is parsed (§1 Durations): an integer of milliseconds (0 to ten 366-day years) or duration text (`500ms`, `1m`, `PT2H`); not an expression.
   */
  heartbeat_timeout_ms?: number | string;
  /**
   * Unique in the whole flow, including nested lists, catch clauses and `compensate` lists.
   */
  id: string;
  max_usage?: UsageCap;
  parallel?: ParallelStep;
  repeat?: RepeatStep;
  retry?: Retry;
  run_agent?: RunAgentStep;
  run_subflow?: RunSubflowStep;
  run_team?: RunTeamStep;
  schedule?: ScheduleStep;
  set_metadata?: SetMetadataStep;
  signal_run?: SignalRunStep;
  sleep?: SleepStep;
  switch?: SwitchStep;
  /**
   * A duration (§1 Durations) that must not be zero: an integer of milliseconds, duration text (`90s`, `PT2H`), or a `${...}` template evaluated when the step begins.
   */
  timeout_ms?: number | string;
  try?: Steps8;
} & Step1;
/**
 * A duration (§1 Durations): an integer of milliseconds (0 to ten 366-day years), duration text (`90s`, `2h30m`, `PT2H`), or a `${...}` template evaluated when the step begins.
 */
export type Duration = number | string;
/**
 * A name (of a flow, tool, agent, team, member, signal...): any string that is not empty or only whitespace.
 */
export type Name = string;
/**
 * A condition: a bare JMESPath expression (a `${...}` wrapper around the whole of it is allowed and ignored), true unless its value is false, null, "", [] or {} (§8.3).
 */
export type Condition = string;
/**
 * The handler.
 */
export type Steps1 = Step[];
/**
 * Steps that undo this one when the run later fails or is cancelled (§7).
 */
export type Steps2 = Step[];
/**
 * The body, run once per item.
 */
export type Steps3 = Step[];
/**
 * A list of steps, run one at a time in order; the first that fails ends the list (§3).
 */
export type Steps4 = Step[];
/**
 * §4.11 repeat, the durable reminder: run the body on a cadence, exactly one of `every_ms` or `cron`.
 */
export type RepeatStep = {
  /**
   * 5-field cron (minute hour day-of-month month day-of-week), evaluated in `timezone`.
   */
  cron?: Cron | null;
  /**
   * Fixed cadence.
   */
  every_ms?: PositiveDuration | null;
  /**
   * Stop after this many fires.
   */
  max_fires?: Count | null;
  steps: Steps5;
  /**
   * The IANA time zone the cron is read in (`Europe/Paris`, `America/New_York`); only with `cron`.
   */
  timezone?: TimeZone | null;
  /**
   * Stop when true after a fire.
   */
  until?: Condition | null;
} & RepeatStep1;
/**
 * A 5-field cron (minute hour day-of-month month day-of-week), evaluated by cronsim; flowcore checks each field when the spec is parsed.
 */
export type Cron = string;
/**
 * A duration (§1 Durations) that must not be zero: an integer of milliseconds, duration text (`90s`, `PT2H`), or a `${...}` template evaluated when the step begins.
 */
export type PositiveDuration = number | string;
/**
 * The body, run once per fire.
 */
export type Steps5 = Step[];
/**
 * An IANA time-zone name (`Europe/Paris`, `UTC`), checked against the time-zone database when the spec is parsed.
 */
export type TimeZone = string;
export type RepeatStep1 =
  | {
      every_ms: {
        [k: string]: unknown | undefined;
      };
    }
  | {
      cron: {
        [k: string]: unknown | undefined;
      };
    };
/**
 * §4.5 sleep: exactly one of `for_ms` or `until`.
 */
export type SleepStep = {
  /**
   * Sleep this long from now.
   */
  for_ms?: Duration | null;
  /**
   * Sleep until this instant: a number (epoch ms; a fraction is truncated) or an ISO 8601 string (`Z` and offsets accepted; without an offset it is UTC).
   */
  until?: Template | null;
} & SleepStep1;
export type SleepStep1 =
  | {
      for_ms: {
        [k: string]: unknown | undefined;
      };
    }
  | {
      until: {
        [k: string]: unknown | undefined;
      };
    };
/**
 * §4.8 switch: a list of cases, at least one; the first true `if` (or the `else`, which must be the last case) runs its steps.
 *
 * @minItems 1
 */
export type SwitchStep = [SwitchCase, ...SwitchCase[]];
/**
 * A switch case: `{if: <condition>, steps: [...]}` or `{else: [...]}`.
 */
export type SwitchCase =
  | {
      /**
       * A condition: a bare JMESPath expression (a `${...}` wrapper around the whole of it is allowed and ignored), true unless its value is false, null, "", [] or {} (§8.3).
       */
      if: string;
      steps?: Steps6;
    }
  | {
      else: Steps7;
    };
/**
 * A list of steps, run one at a time in order; the first that fails ends the list (§3).
 */
export type Steps6 = Step[];
/**
 * Run when no case before matched.
 */
export type Steps7 = Step[];
/**
 * §4.14 try: The protected body.
 */
export type Steps8 = Step[];
export type Step1 = JsonValue;
/**
 * Run when a limit is reached, within the reserve. Their ids are unique with the flow's.
 */
export type Steps = Step[];
/**
 * A schedule (§2 schedules): runs of this flow a host starts on a cadence, `cron`, `every` or both. Its input reads only `schedule` (at, at_ms, name).
 */
export type Schedule = Schedule1 & {
  /**
   * A slot whose due time is further back than this when the host looks (after downtime) is skipped, `outside catch-up window`.
   */
  catchup_window?: number | string;
  /**
   * Slots at the cron's times (cronsim), read in `timezone`.
   */
  cron?: Cron | null;
  /**
   * Slots at epoch + `offset` + k × `every` (UTC, whatever the zone).
   */
  every?: number | string;
  /**
   * A template: any JSON value whose strings may hold `${...}` JMESPath expressions, evaluated when the step runs. A string that is exactly one `${...}` yields the raw value; otherwise results are interpolated as text (§8.1). flowcore compiles every expression when the spec is parsed.
   */
  input?: JsonValue;
  /**
   * A duration read when the spec is parsed (§1 Durations): an integer of milliseconds (0 to ten 366-day years) or duration text (`500ms`, `1m`, `PT2H`); not an expression.
   */
  jitter?: number | string;
  /**
   * How many runs the cadence may still start; at 0 it starts none. Runs started by hand (trigger, backfill) do not count.
   */
  limit?: number | null;
  /**
   * Why it is paused (at most 1,000 characters).
   */
  note?: string;
  /**
   * A duration read when the spec is parsed (§1 Durations): an integer of milliseconds (0 to ten 366-day years) or duration text (`500ms`, `1m`, `PT2H`); not an expression.
   */
  offset?: number | string;
  /**
   * What a slot does while a run the schedule started is still running: skipped; waits (one slot at most; later ones are skipped) and starts when nothing runs; starts anyway; cancels the running runs and waits for them to settle (the newest slot replacing an older waiting one).
   */
  overlap?: "skip" | "buffer_one" | "allow_all" | "cancel_other";
  /**
   * Start nothing (until resumed).
   */
  paused?: boolean;
  /**
   * The zone `cron` is read in (only with `cron`). DST as cron does it: a time a spring-forward gap skips fires at the first instant after the gap; in a fall-back's repeated hour a fixed hour fires once (the first), a wildcard hour (`* /30 * * * *`) in both.
   */
  timezone?: TimeZone | null;
};
export type Schedule1 = JsonValue;
/**
 * A list of steps, run one at a time in order; the first that fails ends the list (§3).
 *
 * @minItems 1
 */
export type Steps9 = [Step, ...Step[]];

/**
 * A flowcore flow spec (specs/language.md), as a YAML or JSON document is loaded (YAML 1.2 core booleans, no implicit dates). It checks the shape: keys, types, ranges, enums, one kind per step, the forms of durations, names and identifiers. flowcore checks more when it parses a spec, and this schema does not: duplicate step ids, calls to undeclared tools, references to unknown step ids, expressions that do not compile, cron fields and time zones that do not exist, an `else` that is not the last case, tool inputs against their tools' schemas, and that constants are flowcore data. `flowcore validate` reports all of them with their places.
 */
export interface FlowcoreFlowSpec {
  /**
   * The most usage each agent's run reports, for the worst-case budget.
   */
  agents?: {
    [k: string]: AgentDecl | null | undefined;
  };
  budget?: Budget;
  defaults?: Defaults;
  /**
   * Free text; ignored by the interpreter.
   */
  description?: string;
  /**
   * A name (of a flow, tool, agent, team, member, signal...): any string that is not empty or only whitespace.
   */
  flow: string;
  /**
   * The run's input is validated against it by `start`.
   */
  input_schema?: JsonSchema | null;
  limits?: Limits;
  /**
   * The run's metadata fields, which hosts index and list runs by.
   */
  metadata?: {
    [k: string]: "string" | "integer" | "number" | "boolean" | undefined;
  };
  /**
   * Steps run within a reserve when a budget limit is reached (§11.5).
   */
  on_budget_exhausted?: OnExhausted | null;
  /**
   * A template: any JSON value whose strings may hold `${...}` JMESPath expressions, evaluated when the step runs. A string that is exactly one `${...}` yields the raw value; otherwise results are interpolated as text (§8.1). flowcore compiles every expression when the spec is parsed.
   */
  output?: JsonValue;
  /**
   * Read-only templates over a run's state, asked by name with args (§16).
   */
  queries?: {
    [k: string]: Query | undefined;
  } | null;
  /**
   * Runs of this flow a host starts on a cadence.
   */
  schedules?: {
    [k: string]: Schedule | undefined;
  } | null;
  steps: Steps9;
  /**
   * Declared agent teams.
   */
  teams?: {
    [k: string]: TeamDecl | undefined;
  };
  /**
   * The tool allowlist, with execution classes.
   */
  tools?: {
    [k: string]: ToolDecl | null | undefined;
  };
  /**
   * Requests a caller sends a running run: checked, run beside the flow's steps, answered with a reply (§16).
   */
  updates?: {
    [k: string]: Update | null | undefined;
  } | null;
  /**
   * An amount: an integer from 0 to 10^15.
   */
  version?: number;
}
/**
 * An agent's declaration (§2 agents): the most usage one run of it reports.
 */
export interface AgentDecl {
  /**
   * `steps`, `cost_minor_units`, `tool_calls`: each an *amount*, the most one run-agent reports (default 0).
   */
  max_usage?: MaxUsage | null;
}
/**
 * The most usage one call of a tool or one run of an agent reports (`max_usage`): steps, cost, tool calls, each 0 when not written. Read only by the worst-case budget (§11.6).
 */
export interface MaxUsage {
  /**
   * An amount: an integer from 0 to 10^15.
   */
  cost_minor_units?: number;
  /**
   * An amount: an integer from 0 to 10^15.
   */
  steps?: number;
  /**
   * An amount: an integer from 0 to 10^15.
   */
  tool_calls?: number;
}
/**
 * `steps`, `cost_minor_units`, `wall_clock_ms`, `tokens`, `tool_calls`, `turns`.
 */
export interface Budget {
  /**
   * reported usage cost
   */
  cost_minor_units?: Amount | null;
  /**
   * work effects issued + reported usage steps
   */
  steps?: Amount | null;
  /**
   * input + output tokens agents report
   */
  tokens?: Amount | null;
  /**
   * `call-tool` effects issued + the tool calls agents report
   */
  tool_calls?: Amount | null;
  /**
   * the model turns agents report
   */
  turns?: Amount | null;
  /**
   * time since the run started
   */
  wall_clock_ms?: DurationLiteral | null;
}
/**
 * What every step has unless it says otherwise: `cancellation`.
 */
export interface Defaults {
  /**
   * What becomes of a `call_tool`, `run_agent` or `run_team` step's call when the run stops waiting for it (§9.2); a step's own `cancellation` wins.
   */
  cancellation?: "try_cancel" | "wait_cancellation_completed" | "abandon";
}
/**
 * A JSON Schema mapping (draft 2020-12 unless its own `$schema` says otherwise); flowcore checks it is a valid schema when the spec is parsed. Remote `$ref`s are never fetched.
 */
export interface JsonSchema {}
/**
 * `max_subflow_depth`, `max_concurrency`, `max_buffered_signals`, `max_idle_incarnations`, `max_running_updates`, `max_updates`.
 */
export interface Limits {
  /**
   * An amount: an integer from 0 to 10^15.
   */
  max_buffered_signals?: number;
  /**
   * Work effects in flight at once, across the whole run.
   */
  max_concurrency?: Count | null;
  /**
   * An amount: an integer from 0 to 10^15.
   */
  max_idle_incarnations?: number;
  /**
   * A count: an integer from 1 to 1,000,000,000.
   */
  max_running_updates?: number;
  /**
   * An amount: an integer from 0 to 10^15.
   */
  max_subflow_depth?: number;
  /**
   * A count: an integer from 1 to 1,000,000,000.
   */
  max_updates?: number;
}
/**
 * What the run does when a budget limit is reached (§11.5): the final steps, run within a reserve the main work may not spend, and the output then.
 */
export interface OnExhausted {
  /**
   * The run's output then.
   */
  output?: Template | null;
  reserve: Budget1;
  steps: Steps;
}
/**
 * What the main work may not spend: each of its limits is taken off the run's (an unlimited one stays unlimited).
 */
export interface Budget1 {
  /**
   * reported usage cost
   */
  cost_minor_units?: Amount | null;
  /**
   * work effects issued + reported usage steps
   */
  steps?: Amount | null;
  /**
   * input + output tokens agents report
   */
  tokens?: Amount | null;
  /**
   * `call-tool` effects issued + the tool calls agents report
   */
  tool_calls?: Amount | null;
  /**
   * the model turns agents report
   */
  turns?: Amount | null;
  /**
   * time since the run started
   */
  wall_clock_ms?: DurationLiteral | null;
}
/**
 * §4.4 ask_human: ask a person; with options the answer must be one of them; with timeout_ms, a default answer or a timeout failure.
 */
export interface AskHumanStep {
  /**
   * The answer to use when `timeout_ms` passes; needs `timeout_ms`, and must be one of `options`.
   */
  default?: string | null;
  /**
   * When given (non-empty, distinct), the answer must be one of them.
   */
  options?: string[] | null;
  /**
   * Sent as text.
   */
  question: JsonValue;
  /**
   * How long to wait for an answer.
   */
  timeout_ms?: Duration | null;
}
/**
 * §4.6 await_signal: wait for a named signal; its payload is the output.
 */
export interface AwaitSignalStep {
  /**
   * Collect this many signals; the output is the list of them.
   */
  count?: Count | null;
  /**
   * Take only signals sent with this key (text, evaluated when the wait starts): correlation by a key the run chose.
   */
  key?: Template | null;
  /**
   * The signal's name. Exactly one of `signal` and `signals`.
   */
  signal?: Name | null;
  /**
   * Any of these (distinct) names; the output says which came.
   */
  signals?: Name[] | null;
  /**
   * How long to wait.
   */
  timeout_ms?: Duration | null;
  /**
   * Collect signals until this holds over `received`, the list so far; the output is that list.
   */
  until?: Condition | null;
  /**
   * Take only a signal whose payload makes it true; `payload` is the payload (`payload.order == input.order`).
   */
  where?: Condition | null;
}
/**
 * §4.1 call_tool: call a declared tool; the output is the tool's.
 */
export interface CallToolStep {
  /**
   * A template: any JSON value whose strings may hold `${...}` JMESPath expressions, evaluated when the step runs. A string that is exactly one `${...}` yields the raw value; otherwise results are interpolated as text (§8.1). flowcore compiles every expression when the spec is parsed.
   */
  input?: JsonValue;
  /**
   * A name (of a flow, tool, agent, team, member, signal...): any string that is not empty or only whitespace.
   */
  tool: string;
}
/**
 * §4.13 cancel_scheduled: cancel a scheduled call whose delay has not fired.
 */
export interface CancelScheduledStep {
  /**
   * A template: any JSON value whose strings may hold `${...}` JMESPath expressions, evaluated when the step runs. A string that is exactly one `${...}` yields the raw value; otherwise results are interpolated as text (§8.1). flowcore compiles every expression when the spec is parsed.
   */
  id: JsonValue;
}
/**
 * A catch clause of a try step (§4.14): the error types it handles (`*` any) and its steps, which see `error`.
 */
export interface CatchClause {
  /**
   * Error types this clause handles; `*` matches any.
   */
  errors?: Name[];
  steps: Steps1;
}
/**
 * §4.18 continue_as_new: start the run again from its first step with a new input and a fresh history, keeping its run id.
 */
export interface ContinueAsNewStep {
  /**
   * The next incarnation's input, checked against `input_schema`.
   */
  input?: Template | null;
}
/**
 * §4.15 fail: fail at once with an error the flow makes (type, message, details); it travels as any failure.
 */
export interface FailStep {
  /**
   * Any data to carry with the error (`${error.details}` in a handler, the run's settled `error.details`).
   */
  details?: Template | null;
  /**
   * A template: any JSON value whose strings may hold `${...}` JMESPath expressions, evaluated when the step runs. A string that is exactly one `${...}` yields the raw value; otherwise results are interpolated as text (§8.1). flowcore compiles every expression when the spec is parsed.
   */
  message?: JsonValue;
  /**
   * The error's `retryable` flag, read by a `retry` without `errors`.
   */
  retryable?: boolean;
  /**
   * A template: any JSON value whose strings may hold `${...}` JMESPath expressions, evaluated when the step runs. A string that is exactly one `${...}` yields the raw value; otherwise results are interpolated as text (§8.1). flowcore compiles every expression when the spec is parsed.
   */
  type: JsonValue;
}
/**
 * §4.10 for_each: run the body once per item, up to max_concurrency at a time; `as` and `index` must differ.
 */
export interface ForEachStep {
  /**
   * Name of the loop variable holding the item. Not one of `input`, `steps`, `run`, `error`, `fire_count`, `members`.
   */
  as?: string;
  /**
   * Name of the loop variable holding the 0-based index (same rule; differs from `as`).
   */
  index?: string;
  /**
   * A template: any JSON value whose strings may hold `${...}` JMESPath expressions, evaluated when the step runs. A string that is exactly one `${...}` yields the raw value; otherwise results are interpolated as text (§8.1). flowcore compiles every expression when the spec is parsed.
   */
  items: JsonValue;
  /**
   * Iterations running at once.
   */
  max_concurrency?: Count | null;
  /**
   * The most items the loop takes.
   */
  max_items?: Count | null;
  /**
   * How the iterations running at once share the budget left (§11.7).
   */
  share?: "even" | "first-come";
  steps: Steps3;
}
/**
 * §11.7: the most of each limit the step's work is handed in its `budgetRemaining`; `run_agent`, `run_team` and `run_subflow` only.
 */
export interface UsageCap {
  cost_minor_units?: Amount | null;
  steps?: Amount | null;
  tokens?: Amount | null;
  tool_calls?: Amount | null;
  turns?: Amount | null;
}
/**
 * §4.9 parallel: run named branches at once; `mode` says how they end the step.
 */
export interface ParallelStep {
  /**
   * Branch names must be identifiers.
   */
  branches: {
    [k: string]: Steps4 | undefined;
  };
  /**
   * Branches running at once; the rest start in declared order as running ones end.
   */
  max_concurrency?: Count | null;
  /**
   * See below.
   */
  mode?: "all" | "all_settled" | "race" | "any";
  /**
   * How the branches share the budget left (§11.7).
   */
  share?: "even" | "first-come";
  /**
   * Each branch's weight in `even` shares. Only branches of this step; not with `first-come`.
   */
  weights?: {
    [k: string]: Count | undefined;
  };
}
/**
 * How the step is retried when it fails, with backoff (§5).
 */
export interface Retry {
  /**
   * Multiplier per further attempt.
   */
  backoff?: number;
  /**
   * Error types to retry; `*` = any. Without it, only errors reported with `retryable: true`.
   */
  errors?: Name[] | null;
  /**
   * A duration read when the spec is parsed (§1 Durations): an integer of milliseconds (0 to ten 366-day years) or duration text (`500ms`, `1m`, `PT2H`); not an expression.
   */
  initial_interval_ms?: number | string;
  /**
   * Maximum fraction taken off each delay.
   */
  jitter?: number;
  /**
   * A count: an integer from 1 to 1,000,000,000.
   */
  max_attempts?: number;
  /**
   * A duration read when the spec is parsed (§1 Durations): an integer of milliseconds (0 to ten 366-day years) or duration text (`500ms`, `1m`, `PT2H`); not an expression.
   */
  max_interval_ms?: number | string;
}
/**
 * §4.2 run_agent: run an agent with a prompt; agents are fail-closed.
 */
export interface RunAgentStep {
  /**
   * A name (of a flow, tool, agent, team, member, signal...): any string that is not empty or only whitespace.
   */
  agent: string;
  /**
   * Sent as text.
   */
  instructions?: Template | null;
  /**
   * Passed through as the effect's `member`.
   */
  member?: Name | null;
  /**
   * A template: any JSON value whose strings may hold `${...}` JMESPath expressions, evaluated when the step runs. A string that is exactly one `${...}` yields the raw value; otherwise results are interpolated as text (§8.1). flowcore compiles every expression when the spec is parsed.
   */
  prompt: JsonValue;
}
/**
 * §4.7 run_subflow: start a child flow (depth-limited) that spends from this run's budget; or, detached, a root run of its own.
 */
export interface RunSubflowStep {
  /**
   * Start the child as a root run of its own and succeed once it has started. Not with `parent_close`.
   */
  detached?: boolean;
  /**
   * A name (of a flow, tool, agent, team, member, signal...): any string that is not empty or only whitespace.
   */
  flow: string;
  /**
   * A template: any JSON value whose strings may hold `${...}` JMESPath expressions, evaluated when the step runs. A string that is exactly one `${...}` yields the raw value; otherwise results are interpolated as text (§8.1). flowcore compiles every expression when the spec is parsed.
   */
  input?: JsonValue;
  /**
   * What becomes of the child when the run stops waiting for it.
   */
  parent_close?: ("cancel" | "abandon" | "wait") | null;
}
/**
 * §4.3 run_team: run a declared team (one run-agent per member) or an undeclared one (one run-team effect).
 */
export interface RunTeamStep {
  /**
   * A template: any JSON value whose strings may hold `${...}` JMESPath expressions, evaluated when the step runs. A string that is exactly one `${...}` yields the raw value; otherwise results are interpolated as text (§8.1). flowcore compiles every expression when the spec is parsed.
   */
  prompt: JsonValue;
  /**
   * A name (of a flow, tool, agent, team, member, signal...): any string that is not empty or only whitespace.
   */
  team: string;
}
/**
 * §4.12 schedule: a detached, delayed, fire-and-forget tool call; the output is its schedule id.
 */
export interface ScheduleStep {
  /**
   * The most firings; the call ends after the last.
   */
  count?: Count | null;
  /**
   * A recurring call: fires at each point of this cron. One of `every_ms` and `cron`, not both.
   */
  cron?: string | null;
  /**
   * A duration (§1 Durations): an integer of milliseconds (0 to ten 366-day years), duration text (`90s`, `2h30m`, `PT2H`), or a `${...}` template evaluated when the step begins.
   */
  delay_ms?: number | string;
  /**
   * A recurring call: fires every this long.
   */
  every_ms?: Duration | null;
  /**
   * A template: any JSON value whose strings may hold `${...}` JMESPath expressions, evaluated when the step runs. A string that is exactly one `${...}` yields the raw value; otherwise results are interpolated as text (§8.1). flowcore compiles every expression when the spec is parsed.
   */
  input?: JsonValue;
  /**
   * See below.
   */
  outlive_run?: boolean;
  /**
   * The time zone `cron` is read in (only with `cron`).
   */
  timezone?: string | null;
  /**
   * A name (of a flow, tool, agent, team, member, signal...): any string that is not empty or only whitespace.
   */
  tool: string;
  /**
   * No firing after this instant; the call ends once its next firing would be later.
   */
  until_ms?: Template | null;
}
/**
 * §4.17 set_metadata: set run metadata fields (declared at the top level) from templates; null clears a field. It emits nothing and spends no budget.
 */
export interface SetMetadataStep {
  [k: string]: Template | undefined;
}
/**
 * §4.16 signal_run: send a signal (with a payload and optional key) to another run, delivered once per idempotency key.
 */
export interface SignalRunStep {
  /**
   * The signal's key (text, 1 to 4096 characters): only a wait with that `key` takes it.
   */
  key?: Template | null;
  /**
   * A template: any JSON value whose strings may hold `${...}` JMESPath expressions, evaluated when the step runs. A string that is exactly one `${...}` yields the raw value; otherwise results are interpolated as text (§8.1). flowcore compiles every expression when the spec is parsed.
   */
  payload?: JsonValue;
  /**
   * A template: any JSON value whose strings may hold `${...}` JMESPath expressions, evaluated when the step runs. A string that is exactly one `${...}` yields the raw value; otherwise results are interpolated as text (§8.1). flowcore compiles every expression when the spec is parsed.
   */
  run: JsonValue;
  /**
   * A name (of a flow, tool, agent, team, member, signal...): any string that is not empty or only whitespace.
   */
  signal: string;
}
/**
 * A query (§16): a read-only template over a run's state, with args.
 */
export interface Query {
  args_schema?: {};
  description?: string;
  value: Template;
}
/**
 * A declared agent team (§2 teams): its members, in order, run one after another or all at once.
 */
export interface TeamDecl {
  /**
   * In order.
   *
   * @minItems 1
   */
  members: [TeamMember, ...TeamMember[]];
  /**
   * Run members one after another, or all at once.
   */
  mode?: "sequential" | "parallel";
}
/**
 * A member of a declared team: its name, the agent that plays it, and its instructions.
 */
export interface TeamMember {
  /**
   * A name (of a flow, tool, agent, team, member, signal...): any string that is not empty or only whitespace.
   */
  agent: string;
  /**
   * Sent as the member's `instructions`.
   */
  instructions?: Template | null;
  /**
   * A name (of a flow, tool, agent, team, member, signal...): any string that is not empty or only whitespace.
   */
  member: string;
}
/**
 * A declared tool (§2 tools): its execution class, whether a call to it may be scheduled from outside the run, the JSON Schemas its input and output must meet, and whether a person approves each call first. Empty or null: an uncertain tool.
 */
export interface ToolDecl {
  /**
   * The execution class.
   */
  class?: "readonly" | "idempotent" | "uncertain";
  /**
   * What the tool's input must be (Tool schemas).
   */
  input_schema?: JsonSchema | null;
  /**
   * The most usage one call reports: `steps`, `cost_minor_units`, `tool_calls`, each an *amount* (default 0). Read only by the worst-case budget (§11.6).
   */
  max_usage?: MaxUsage | null;
  /**
   * Whether a person approves each `call_tool` call first: always, or when the condition (a bare JMESPath expression, as in `switch`'s `if`) holds with the call's evaluated input bound as `input` (Approval before a call).
   */
  needs_approval?: boolean | Condition;
  /**
   * What the tool's output must be.
   */
  output_schema?: JsonSchema | null;
  /**
   * Whether a call to this tool may be scheduled from outside the run (`scheduled-add-requested`, `flowcore scheduled add`; §4.12). A `schedule` step may call any declared tool.
   */
  schedulable?: boolean;
}
/**
 * An update (§16): a request a caller sends a running run; its input is checked (input_schema, validator), its steps run beside the flow's, and the caller gets its reply.
 */
export interface Update {
  description?: string;
  examples?: unknown[];
  input_schema?: {};
  reply?: Template;
  steps?: Steps4;
  validator?: Condition;
}
