/**
 * @module
 * The kinds of limit there are, listed once: a new kind is one module and
 * one line here. The rest of the limiter reaches a rule's kind through
 * `kindOf`, and which protocol its object decides it by through
 * `isCounted`/`isPlaced`; nothing else asks which kind a rule is.
 */

import { fail, type Result } from "../result.ts";
import { show } from "../show.ts";
import { type BucketFields, bucketKind } from "./bucket.ts";
import { type ConcurrencyFields, concurrencyKind } from "./concurrency.ts";
import type { AnyKind, Fields, KindName } from "./kind.ts";
import { type QuotaFields, quotaKind } from "./quota.ts";
import { type WindowFields, windowKind } from "./window.ts";

/** Every kind, by name; the first is the default (a rule whose fields mark no other kind). */
export const KINDS = {
  window: windowKind,
  concurrency: concurrencyKind,
  bucket: bucketKind,
  quota: quotaKind,
} as const satisfies Record<KindName, AnyKind>;

/** Each kind's own compiled fields, by kind. */
export type KindFieldsOf = {
  window: WindowFields;
  concurrency: ConcurrencyFields;
  bucket: BucketFields;
  quota: QuotaFields;
};

const LIST: AnyKind[] = Object.values(KINDS);

/** The kind a rule is written as: the kinds whose marking fields it has (several is an error), or the default. */
export function kindsMarked(fields: Fields): AnyKind[] {
  return LIST.filter((kind) => kind.marks.some((field) => fields[field] !== undefined));
}

/** The kind of a rule, for what it owns. */
export const kindOf = (rule: { kind: KindName }): AnyKind => KINDS[rule.kind];

/** Every kind's own fields, each once, in the registry's order. */
export const KIND_FIELDS: readonly string[] = [...new Set(LIST.flatMap((kind) => kind.fields))];

/** The kinds that have a field, for messages. */
export const kindsWith = (field: string): AnyKind[] => LIST.filter((kind) => kind.fields.includes(field));

/** Every field a tier or an override may give a client beside the limit, by any kind (`burst`), each once. */
export const CLIENT_FIELDS: readonly string[] = [...new Set(LIST.flatMap((kind) => kind.clientFields?.names ?? []))];

/** The kinds whose tiers and overrides may give a client `field`, for messages. */
export const kindsGiving = (field: string): AnyKind[] =>
  LIST.filter((kind) => kind.clientFields?.names.includes(field) === true);

/**
 * The fields of `rule`'s kind that a tier or an override gives one client
 * beside `limit` (`names`, of `given`), as the kind reads them: an error for
 * each the rule's kind does not take, naming the kinds that do.
 */
export function clientFieldsOf(
  rule: { id: string; kind: KindName },
  given: Fields,
  names: readonly string[],
  limit: number,
): Result<Readonly<Record<string, number>>> {
  const kind = kindOf(rule);
  const client = kind.clientFields;
  const foreign = names.filter((name) => client?.names.includes(name) !== true);
  if (client === undefined || foreign.length > 0) {
    return fail(
      ...foreign.map((name) => {
        const owners = kindsGiving(name).map((k) => `a ${k.name} rule`);
        return `field ${show(name)}: only ${owners.join(" or ")} gives a client one, and rule ${show(rule.id)} is a ${kind.name} rule`;
      }),
    );
  }
  return client.parse(rule, given, limit);
}
