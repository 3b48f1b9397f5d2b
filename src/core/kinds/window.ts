/**
 * @module
 * The sliding window: `limit` requests per `period`, decided by the seeds'
 * counter in `precision` buckets (core/sliding-window.ts), `strict` or not,
 * each request counting `cost`; which responses count (`count`), what the
 * origin says a request cost (`cost_header`), and a penalty (`block_for`).
 * Its client's object counts it (`count` protocol), and holds a request
 * over it until its turn when the rule has `max_delay` (core/bookings.ts).
 */
import { countAsWritten, countsResponse } from "../count.ts";
import { describePeriod, formatDuration, parseDurationMs } from "../duration.ts";
import { isZero, parseFlag, parseIntegerFrom1, parsePeriod } from "../fields.ts";
import { fail, ok, type Result } from "../result.ts";
import { show } from "../show.ts";
import type { WindowLimit } from "../sliding-window.ts";
import { type CountedFields, costHeaderWarnings, countedView, parseCounted } from "./counted.ts";
import type { Common, Fields, Quota, RuleKind, TakeField } from "./kind.ts";

/** The largest limit a rule, a tier or an override may give. */
export const MAX_LIMIT = 1_000_000_000;
const MAX_PRECISION = 60;
/** The shortest penalty: anything shorter is over before a client could notice. */
const MIN_BLOCK_FOR_MS = 1_000;

/** A sliding-window rule's own fields, compiled. */
export type WindowFields = WindowLimit &
  CountedFields & {
    /** How long a refusal under this rule blocks the client, in milliseconds; 0 for no penalty. */
    blockForMs: number;
  };

const FIELDS = [
  "limit",
  "period",
  "precision",
  "strict",
  "count",
  "cost",
  "cost_header",
  "keep_cost_header",
  "block_for",
] as const;

export const windowKind: RuleKind<WindowFields> = {
  name: "window",
  protocol: "count",
  fields: FIELDS,
  marks: [],
  maxLimit: MAX_LIMIT,
  limitNoun: "requests",
  limitField: "limit",
  ownField: (field) => `only a rule with "limit" and "period" has ${show(field)}; remove it`,

  parse(fields: Fields, take: TakeField): WindowFields {
    const limit = take("limit", parseIntegerFrom1(fields.limit, MAX_LIMIT), 0);
    const periodMs = take("period", parsePeriod(fields.period), 0);
    const precision = take("precision", parseIntegerFrom1(fields.precision ?? 1, MAX_PRECISION), 1);
    const strict = take("strict", parseFlag(fields.strict ?? false), false);
    const counted = parseCounted(fields, take, limit);
    const blockForMs = take("block_for", parseBlockFor(fields.block_for), 0);
    return { limit, periodMs, precision, strict, ...counted, blockForMs };
  },

  quota: (rule: WindowFields): Quota => windowQuota(rule.periodMs),

  check: (rule: WindowFields) => ({
    periodMs: rule.periodMs,
    precision: rule.precision,
    strict: rule.strict,
    ...(rule.blockForMs > 0 ? { blockForMs: rule.blockForMs } : {}),
  }),

  view(rule: WindowFields) {
    const limit = { limit: rule.limit, period: formatDuration(rule.periodMs), periodMs: rule.periodMs };
    const counting = {
      precision: rule.precision,
      strict: rule.strict,
      ...countedView(rule),
      block_for: rule.blockForMs > 0 ? formatDuration(rule.blockForMs) : null,
      blockForMs: rule.blockForMs,
    };
    return { limit, counting };
  },

  warnings: (rule: WindowFields & Common, written: Fields): string[] => [
    ...periodWarnings(rule, written.period),
    ...blockForWarnings(rule, written.block_for),
    ...delayWarnings(rule, written.max_delay),
    ...countingWarnings(rule),
  ],

  measure: (rule: WindowFields) => rule.periodMs,

  overlap: (a, b, looser, same) =>
    same
      ? `${a} and ${b}: are the same limit on the same requests, key and period; remove one`
      : `${a} and ${b}: count the same requests with the same key and period, so ${looser}, the looser, never refuses anything; remove it, or give the two different periods for a burst and a sustained limit`,
};

/** A window's quota: `w` its period, in words "100 per minute". */
export const windowQuota = (periodMs: number): Quota => ({
  windowMs: periodMs,
  words: (limit) => `${limit} per ${describePeriod(periodMs)}`,
});

/** A penalty's length: absent or zero is none (0); otherwise a duration of at least 1 s. */
function parseBlockFor(value: unknown): Result<number> {
  if (value === undefined || isZero(value)) return ok(0);
  const tooShort = fail(`must be at least 1s, or 0 for no penalty; got ${show(value)}`);
  if (typeof value === "number" && value < 0) return tooShort;
  const parsed = parseDurationMs(value);
  return parsed.ok && parsed.value < MIN_BLOCK_FOR_MS ? tooShort : parsed;
}

/** A period so short that jitter dominates it, or a number of seconds that looks like milliseconds. */
function periodWarnings(rule: WindowFields, period: unknown): string[] {
  if (rule.periodMs < 1_000) {
    return [
      `field "period": ${show(period)} is under 1 second${typeof period === "number" ? " (a number is seconds)" : ""}: every request costs a Durable Object round trip, and clock and network jitter are a large share of so short a window; use a longer period with a proportionally larger limit`,
    ];
  }
  if (typeof period === "number" && period >= 1_000 && period % 1_000 === 0) {
    return [
      `field "period": ${period} is seconds, that is ${describePeriod(rule.periodMs)}; if you meant milliseconds, write "${period / 1_000}s"`,
    ];
  }
  return [];
}

/** A penalty on a shadow rule, which never starts one; or one shorter than the period, which adds little. */
function blockForWarnings(rule: WindowFields & Common, blockFor: unknown): string[] {
  if (rule.blockForMs === 0) return [];
  if (rule.action === "log") {
    return [
      `field "block_for": ${show(blockFor)} has no effect on a shadow rule (action = "log"), which never refuses a request and so never starts a penalty`,
    ];
  }
  if (rule.blockForMs < rule.periodMs) {
    return [
      `field "block_for": ${show(blockFor)} is shorter than the period (${formatDuration(rule.periodMs)}), and the window alone refuses a client at its limit for up to a period, so the penalty changes little; make it longer than the period`,
    ];
  }
  return [];
}

/**
 * A delay longer than the period: a client then keeps more than a period's
 * worth of requests held, and an overload that lasts is queued, connections
 * open, where a limit would refuse it. (A delay on a shadow rule is every
 * rule's warning.)
 */
function delayWarnings(rule: WindowFields & Common, maxDelay: unknown): string[] {
  const { maxDelayMs } = rule;
  if (maxDelayMs === undefined || rule.action === "log" || maxDelayMs <= rule.periodMs) return [];
  const periods = maxDelayMs / rule.periodMs;
  const held = Math.min(
    rule.maxHeld ?? Number.POSITIVE_INFINITY,
    Math.floor((rule.limit / (rule.cost ?? 1)) * periods),
  );
  return [
    `field "max_delay": ${show(maxDelay)} is longer than the period (${formatDuration(rule.periodMs)}), so a client keeps about ${Number(periods.toFixed(1))} periods' worth of requests held (up to ${held} at this limit) with their connections open, and a sustained overload is queued rather than refused; make it at most the period, unless that is meant`,
  ];
}

/** Combinations of `count`, `cost_header` and `block_for` that cannot work as written. */
function countingWarnings(rule: WindowFields & Common): string[] {
  const warnings: string[] = [];
  if (rule.blockForMs > 0 && !rule.count.all && [200, 204, 302].every((status) => countsResponse(rule.count, status))) {
    warnings.push(
      `field "block_for": with count = ${show(countAsWritten(rule.count))}, the penalty falls on clients whose requests succeed: a login rule wants count = "failed" (or [401, 403])`,
    );
  }
  warnings.push(...costHeaderWarnings(rule));
  return warnings;
}
