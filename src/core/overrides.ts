/**
 * @module
 * Per-client overrides of a rule: another limit, a tier's limit, no limit
 * at all, or a refusal of every request. What an operator sends is parsed
 * here, and what a rule's limit becomes for one client is decided here; the
 * client's Durable Object stores its overrides and applies them.
 *
 * An override never changes a rule's period or bucket layout, so the
 * client's counts carry over when it is set, changed or removed.
 */

import { parseIntegerFrom1 } from "./fields.ts";
import type { KindName } from "./kinds/kind.ts";
import { CLIENT_FIELDS, clientFieldsOf, kindOf } from "./kinds/registry.ts";
import { MAX_LIMIT } from "./kinds/window.ts";
import { fail, ok, type Result } from "./result.ts";
import { show } from "./show.ts";
import { charactersIn } from "./text.ts";

/** What an override does to its rule, for its client. */
export type OverrideSetting =
  /**
   * Another limit, in place of the rule's; with `own`, the rule's kind's
   * own fields given with it (a token bucket's burst: `{burst, ownLimit}`),
   * as its kind's `clientFields` made them.
   */
  | { kind: "limit"; limit: number; own?: Readonly<Record<string, number>> }
  /** The limit a tier gives the rule (`TIERS`); the rule's own where the tier names no limit for it. */
  | { kind: "tier"; tier: string }
  /** The rule does not apply to this client: never refused, never counted. */
  | { kind: "unlimited" }
  /** Every request is refused with 403. */
  | { kind: "deny" };

export type Override = OverrideSetting & {
  /** Unix ms after which the override no longer applies, or null for never. */
  expiresAtMs: number | null;
  /** Free text for operators, at most {@link MAX_NOTE_CHARS} characters. */
  note: string;
  /** Unix ms of the change that set it. */
  updatedAtMs: number;
  /** Who set it: a prefix of the admin token's hash. */
  by: string;
};

export const MAX_NOTE_CHARS = 1_000;

const TIER_NAME = /^[A-Za-z0-9_-]{1,64}$/;

/** The fields of an override's JSON (docs/per-client-limits.md documents each). */
export const OVERRIDE_FIELDS = ["limit", ...CLIENT_FIELDS, "tier", "unlimited", "deny", "expires", "note"] as const;

/** What parsing an override needs besides the operator's input. */
export type OverrideContext = {
  nowMs: number;
  /** The tiers `TIERS` defines. */
  tiers: ReadonlySet<string>;
  by: string;
  /** The rule overridden: a bad `limit`'s error states the range this rule allows. */
  rule?: LimitedRule;
};

/** A rule, as far as what limit an override may give it. */
type LimitedRule = RuleLimits & { id: string; kind: KindName };

/**
 * An override from an operator's JSON: exactly one of `limit`, `tier`,
 * `unlimited: true` or `deny: true`, and optionally `expires` (an ISO 8601
 * time or Unix milliseconds, in the future and at most {@link MAX_EXPIRES_MS})
 * and `note`. Every problem is named by its field.
 */
export function parseOverride(input: unknown, context: OverrideContext): Result<Override> {
  if (typeof input !== "object" || input === null || Array.isArray(input)) {
    return fail(`must be a JSON object such as {"limit": 500} or {"tier": "pro"}; got ${show(input)}`);
  }
  const fields = input as Record<string, unknown>;
  const errors = Object.keys(fields)
    .filter((name) => !(OVERRIDE_FIELDS as readonly string[]).includes(name))
    .map((name) => `field ${show(name)}: unknown; fields: ${OVERRIDE_FIELDS.join(", ")}`);
  const setting = settingOf(fields, context.tiers, context.rule);
  const expires = expiresOf(fields.expires, context.nowMs);
  const note = noteOf(fields.note);
  for (const result of [setting, expires, note]) if (!result.ok) errors.push(...result.errors);
  if (errors.length > 0 || !setting.ok || !expires.ok || !note.ok) return fail(...errors);
  return ok({
    ...setting.value,
    expiresAtMs: expires.value,
    note: note.value,
    updatedAtMs: context.nowMs,
    by: context.by,
  });
}

function settingOf(
  fields: Record<string, unknown>,
  tiers: ReadonlySet<string>,
  rule: LimitedRule | undefined,
): Result<OverrideSetting> {
  const { limit, tier, unlimited, deny } = fields;
  const own = CLIENT_FIELDS.filter((name) => fields[name] !== undefined);
  if (own.length > 0 && limit === undefined) {
    return fail(...own.map((name) => `field ${show(name)}: goes with "limit" (the client's limit, and its ${name})`));
  }
  const given = ["limit", "tier", "unlimited", "deny"].filter((name) => fields[name] !== undefined);
  if (given.length !== 1) {
    return fail(
      `exactly one of "limit", "tier", "unlimited" or "deny" is required; got ${given.length === 0 ? "none" : given.join(", ")}`,
    );
  }
  if (limit !== undefined) {
    // A whole number out of the rule's range is refused by limitOutOfRange, which says why.
    if (!parseIntegerFrom1(limit, MAX_LIMIT).ok) {
      const { min, max } = rule === undefined ? { min: 1, max: MAX_LIMIT } : limitRange(rule);
      return fail(`field "limit": must be an integer from ${min} to ${max}; got ${show(limit)}`);
    }
    if (own.length === 0) return ok({ kind: "limit", limit: limit as number });
    const given = ownFields(fields, own, limit as number, rule);
    return given.ok ? ok({ kind: "limit", limit: limit as number, own: given.value }) : given;
  }
  if (tier !== undefined) {
    if (typeof tier !== "string" || !tiers.has(tier)) {
      const names = [...tiers].map((name) => show(name)).join(", ") || "none are defined (TIERS)";
      return fail(`field "tier": must be a tier of TIERS: ${names}; got ${show(tier)}`);
    }
    return ok({ kind: "tier", tier });
  }
  if (unlimited !== undefined) {
    return unlimited === true
      ? ok({ kind: "unlimited" })
      : fail(`field "unlimited": must be true; got ${show(unlimited)}`);
  }
  return deny === true ? ok({ kind: "deny" }) : fail(`field "deny": must be true; got ${show(deny)}`);
}

/** What an operator wrote of a client's own fields (an override's, a tier's): those named as written (`burst`), not what they make of the rule. */
export const writtenOf = (own: Readonly<Record<string, number>>): Record<string, number> =>
  Object.fromEntries(CLIENT_FIELDS.filter((name) => own[name] !== undefined).map((name) => [name, own[name]!]));

/**
 * The fields of a rule's kind that an override gives a client beside its
 * `limit` (a token bucket's `burst`), as the kind reads them: an error for
 * one the rule's kind does not take.
 */
function ownFields(
  fields: Record<string, unknown>,
  names: string[],
  limit: number,
  rule: LimitedRule | undefined,
): Result<Readonly<Record<string, number>>> {
  if (rule === undefined) return fail(...names.map((name) => `field ${show(name)}: needs the rule it is for`));
  return clientFieldsOf(rule, fields, names, limit);
}

/**
 * The last millisecond an override may expire at: the end of 2099. The
 * client's object sets an alarm at the expiry, and a Durable Object's alarm
 * can be set no later than 2262 (2^63 ns); a time far past now is a unit
 * mistake (Unix micro- or nanoseconds), or means never, which is no `expires`.
 */
export const MAX_EXPIRES_MS = Date.UTC(2099, 11, 31, 23, 59, 59, 999);
/**
 * ISO 8601 as JavaScript reads it: a date, optionally with a time and a zone
 * (none is UTC for a date, local time for a time); `Date.parse` alone takes
 * other shapes too (`12/31/2099`), read differently by each runtime.
 */
const ISO_TIME = /^(\d{4}|[+-]\d{6})-\d{2}-\d{2}(T\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:\d{2})?)?$/;

/**
 * Whether an ISO 8601 text names a day its month has: `Date.parse` moves
 * 2030-02-30 to March 2 rather than refusing it.
 */
function realDay(text: string): boolean {
  const [, year, month, day] = /^([+-]?\d+)-(\d{2})-(\d{2})/.exec(text) ?? [];
  const y = Number(year);
  const m = Number(month);
  const d = Number(day);
  if (m < 1 || m > 12 || d < 1) return false;
  return d <= new Date(Date.UTC(y, m, 0)).getUTCDate();
}

function expiresOf(raw: unknown, nowMs: number): Result<number | null> {
  if (raw === undefined || raw === null) return ok(null);
  const iso = typeof raw === "string" && ISO_TIME.test(raw) && realDay(raw);
  const ms = typeof raw === "number" ? raw : iso ? Date.parse(raw as string) : Number.NaN;
  if (!Number.isInteger(ms)) {
    return fail(
      `field "expires": must be an ISO 8601 time (such as "2030-01-31T00:00:00Z") or Unix milliseconds; got ${show(raw)}`,
    );
  }
  if (ms > MAX_EXPIRES_MS) {
    return fail(
      `field "expires": must be at most ${new Date(MAX_EXPIRES_MS).toISOString()} (Unix ms ${MAX_EXPIRES_MS}); got ${show(raw)}`,
    );
  }
  if (ms <= nowMs) return fail(`field "expires": must be in the future; got ${show(raw)}`);
  return ok(ms);
}

function noteOf(raw: unknown): Result<string> {
  if (raw === undefined || raw === null) return ok("");
  if (typeof raw !== "string") return fail(`field "note": must be a string; got ${show(raw)}`);
  const length = charactersIn(raw);
  if (length > MAX_NOTE_CHARS) {
    return fail(`field "note": must be at most ${MAX_NOTE_CHARS} characters; got ${length}`);
  }
  return ok(raw);
}

/** What of a rule decides its limit for a client: its own limit, its limit per tier, and what one request costs. */
type RuleLimits = {
  limit: number;
  tiers?: Readonly<Record<string, number>> | undefined;
  cost?: number | undefined;
};

/** Whether a tier name is one `TIERS` may define. */
export const isTierName = (name: string): boolean => TIER_NAME.test(name);

/**
 * What a rule's limit is for a client under `override` at `nowMs`: a number,
 * or "unlimited", or "deny"; an expired override is none. `tiers` are the
 * rule's limits per tier.
 */
export function limitUnder(
  override: Override | undefined,
  rule: RuleLimits,
  nowMs: number,
): number | "unlimited" | "deny" {
  if (override === undefined || (override.expiresAtMs !== null && override.expiresAtMs <= nowMs)) return rule.limit;
  return limitOf(override, rule);
}

/** What a rule's limit is for a client under `setting`, whatever its expiry. */
function limitOf(setting: OverrideSetting, rule: RuleLimits): number | "unlimited" | "deny" {
  switch (setting.kind) {
    case "limit":
      return setting.limit;
    case "tier":
      return rule.tiers?.[setting.tier] ?? rule.limit;
    case "unlimited":
      return "unlimited";
    case "deny":
      return "deny";
  }
}

/**
 * The same override, as the admin API and the index show it. Whatever is
 * stored, it shows: an expiry stored before expiries were bounded, past
 * {@link MAX_EXPIRES_MS}, comes with a warning, and as null where no Date can
 * hold it (a Unix time in nanoseconds).
 */
export const overrideView = (o: Override) => ({
  ...(o.kind === "limit"
    ? { limit: o.limit, ...(o.own === undefined ? {} : writtenOf(o.own)) }
    : o.kind === "tier"
      ? { tier: o.tier }
      : { [o.kind]: true }),
  expires: o.expiresAtMs === null ? null : isoTime(o.expiresAtMs),
  ...(o.expiresAtMs !== null && !(o.expiresAtMs <= MAX_EXPIRES_MS)
    ? {
        warning:
          `expires: ${show(o.expiresAtMs)} is past the latest expiry the API accepts ` +
          `(${new Date(MAX_EXPIRES_MS).toISOString()}, Unix ms ${MAX_EXPIRES_MS}): set the override again, or delete it`,
      }
    : {}),
  note: o.note,
  updated: isoTime(o.updatedAtMs),
  by: o.by,
});

/**
 * The limits an override may give `rule`: at least its cost (a request
 * costing more would never fit), at most what its kind allows (a
 * concurrency rule's places are 1 to 10000) and what its other fields allow
 * (a bucket's burst grows with its limit).
 */
export function limitRange(rule: LimitedRule): { min: number; max: number } {
  const kind = kindOf(rule);
  const cap = kind.limitCap?.(rule);
  return { min: Math.max(1, rule.cost ?? 1), max: Math.min(kind.maxLimit, cap?.max ?? kind.maxLimit) };
}

/**
 * Why `setting` cannot be a client's override of `rule`: the limit it gives
 * is below the rule's `cost`, so no request of the client would ever fit, and
 * each 429's Retry-After would lead only to another; or above the most its
 * kind lets a rule give (a concurrency rule's places are 1 to 10000).
 * Null when it can.
 */
export function limitOutOfRange(
  setting: OverrideSetting,
  rule: RuleLimits & { id: string; kind: KindName },
): string | null {
  const cost = rule.cost ?? 1;
  const limit = limitOf(setting, rule);
  if (typeof limit !== "number") return null;
  const kind = kindOf(rule);
  const { maxLimit, limitNoun } = kind;
  if (limit > maxLimit) {
    // A tier's limits are checked with the configuration: only an override's own limit gets here.
    return `field "limit": ${limit} is above the most ${limitNoun} rule ${show(rule.id)} may give a client (${maxLimit}); must be at most ${maxLimit}`;
  }
  // Own fields given with the limit (a bucket's burst) are the client's: the rule's do not grow with it then.
  const cap = setting.kind === "limit" && setting.own !== undefined ? undefined : kind.limitCap?.(rule);
  if (cap !== undefined && limit > cap.max) {
    return `field "limit": ${limit} is above the most rule ${show(rule.id)} may give a client (${cap.max}): ${cap.because}; must be at most ${cap.max}`;
  }
  if (limit >= cost) return null;
  const given =
    setting.kind === "tier"
      ? `field "tier": ${show(setting.tier)} gives rule ${show(rule.id)} a limit of ${limit}, below its cost (${cost})`
      : `field "limit": ${limit} is below the cost of rule ${show(rule.id)} (${cost})`;
  return `${given}, so no request of this client could ever be admitted; must be at least ${cost}`;
}

/** Unix ms as ISO 8601, or null for a value no Date can hold. */
const isoTime = (ms: number): string | null => {
  const date = new Date(ms);
  return Number.isNaN(date.getTime()) ? null : date.toISOString();
};
