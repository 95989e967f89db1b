/**
 * Compile-time ties between the readonly wire types of flowEffect.ts and the
 * types generated from specs/schema (./schema): the same effect and event
 * kinds, and for each kind the same field names; the same fields of a
 * decision reply and the same execution classes. Nothing here runs; a schema
 * that gains, loses or renames a kind or a field makes `tsc` fail here.
 */

import type { Decided, ExecutionClass, FlowEffect, FlowEvent, LogRecord } from "./flowEffect";
import type { Decided as GeneratedDecided } from "./schema/decideReplies";
import type { FlowcoreDecideRequest } from "./schema/decideRequests";
import type { FlowcoreEffect } from "./schema/effects";
import type { FlowcoreEvent } from "./schema/events";
import type { FlowcoreLogRecord } from "./schema/records";
import type { DecideRequest } from "./flowEffect";

type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
type Kinds<U> = U extends { readonly kind: infer K } ? K : never;
type FieldsOf<U, K> = U extends { readonly kind: K } ? keyof U : never;
/** For every kind both unions have: do they name the same fields? */
type FieldsAgree<H, G> = { [K in Kinds<G> & Kinds<H> & string]: Same<FieldsOf<H, K>, FieldsOf<G, K>> };
type AllTrue<T> = false extends T[keyof T] ? false : true;
type Ops<U> = U extends { readonly op: infer O } ? O : never;
type OpFields<U, O> = U extends { readonly op: O } ? Exclude<keyof U, "id"> : never;
type OpsAgree<H, G> = { [O in Ops<G> & Ops<H> & string]: Same<OpFields<H, O>, OpFields<G, O>> };

/** `true` only when the two agree; anything else does not compile. */
type Holds<T extends true> = T;

export type EffectKindsAgree = Holds<Same<Kinds<FlowEffect>, Kinds<FlowcoreEffect>>>;
export type EffectFieldsAgree = Holds<AllTrue<FieldsAgree<FlowEffect, FlowcoreEffect>>>;
export type EventKindsAgree = Holds<Same<Kinds<FlowEvent>, Kinds<FlowcoreEvent>>>;
export type EventFieldsAgree = Holds<AllTrue<FieldsAgree<FlowEvent, FlowcoreEvent>>>;
export type RequestOpsAgree = Holds<Same<Ops<DecideRequest>, Ops<FlowcoreDecideRequest>>>;
export type RequestFieldsAgree = Holds<AllTrue<OpsAgree<DecideRequest, FlowcoreDecideRequest>>>;
export type RecordsAreGenerated = Holds<Same<LogRecord, FlowcoreLogRecord>>;
export type DecidedFieldsAgree = Holds<Same<keyof Decided, keyof GeneratedDecided>>;
export type ToolClassesAgree = Holds<
  Same<ExecutionClass, NonNullable<NonNullable<GeneratedDecided["toolClasses"]>[string]>>
>;
