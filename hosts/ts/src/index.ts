/**
 * flowcore-ts-host: a durable flowcore host for Node.
 *
 * `Host` drives runs through `flowcore decide --stdio` (supervised), runs the
 * work in handlers from a `Registry`, keeps each run's snapshot and log (in
 * flowcore's log format) in a `FileStore`, and resumes its runs after a
 * crash. `createHandler` serves a host over HTTP. The wire types come from
 * flowEffect.ts; the generated ones from specs/schema are in ./schema.
 */

export { Host, type HostOptions, type Question, type RunView, type StartRunOptions } from "./host";
export {
  Registry,
  WorkFailed,
  withUsage,
  type AgentHandler,
  type AgentRequest,
  type ExecutionClass,
  type HandlerResult,
  type TeamHandler,
  type ToolHandler,
  type WorkContext,
} from "./registry";
export { FileStore, type Dispatch, type RunMeta, type Snapshot } from "./store";
export { SupervisedDecider, type SupervisorOptions } from "./supervisor";
export { Decider, subflowSettled, type StartOptions } from "./decider";
export { ManualClock, realClock, type Clock } from "./clock";
export { createHandler, type HttpOptions } from "./http";
export {
  DecideProcessError,
  DecideRefused,
  HostError,
  RegistryError,
  RunRefused,
  StoreError,
  UnknownRun,
} from "./errors";
export type * from "./flowEffect";
export { assertNever } from "./flowEffect";
