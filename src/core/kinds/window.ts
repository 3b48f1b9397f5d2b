/**
 * @module
 * The sliding window: `limit` requests per `period`, decided by the seeds'
 * counter in `precision` buckets (core/sliding-window.ts), `strict` or not,
 * each request counting `cost`; which responses count (`count`), what the
 * origin says a request cost (`cost_header`), and a penalty (`block_for`).
 * Its client's object counts it (`count` protocol), and holds a request
 * over it until its turn when the rule has `max_delay` (core/bookings.ts).
 */
import { describePeriod, formatDuration } from "../duration.ts";
import { parseFlag, parseIntegerFrom1, parsePeriod } from "../fields.ts";
import { show } from "../show.ts";
import type { WindowLimit } from "../sliding-window.ts";
import {
  blockForWarnings,
  COUNTED_FIELDS,
  type CountedFields,
  countedView,
  countingWarnings,
  PENALTY_FIELDS,
  type PenaltyFields,
  parseCounted,
  parsePenalty,
  penaltyView,
  periodWarnings,
} from "./counted.ts";
import { type Common, type Fields, grouped, type Quota, type RuleKind, type TakeField } from "./kind.ts";

/** The largest limit a rule, a tier or an override may give. */
export const MAX_LIMIT = 1_000_000_000;
const MAX_PRECISION = 60;

/** A sliding-window rule's own fields, compiled: its window, and what every counted rule has (counted.ts). */
export type WindowFields = WindowLimit & CountedFields & PenaltyFields;

const FIELDS = ["limit", "period", "precision", "strict", ...COUNTED_FIELDS, ...PENALTY_FIELDS] as const;

export const windowKind: RuleKind<WindowFields> = {
  name: "window",
  protocol: "count",
  fields: FIELDS,
  marks: [],
  required: ["limit", "period"],
  maxLimit: MAX_LIMIT,
  limitNoun: "requests",
  limitField: "limit",
  ownField: (field) => `only a rule with "limit" and "period" has ${show(field)}; remove it`,

  parse(fields: Fields, take: TakeField): WindowFields {
    const limit = take("limit", parseIntegerFrom1(fields.limit, MAX_LIMIT), 0);
    const periodMs = take("period", parsePeriod(fields.period), 0);
    const precision = take("precision", parseIntegerFrom1(fields.precision ?? 1, MAX_PRECISION), 1);
    const strict = take("strict", parseFlag(fields.strict ?? false), false);
    return { limit, periodMs, precision, strict, ...parseCounted(fields, take, limit), ...parsePenalty(fields, take) };
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
    const counting = { precision: rule.precision, strict: rule.strict, ...countedView(rule), ...penaltyView(rule) };
    return { limit, counting, summary: `${grouped(rule.limit)} per ${limit.period}` };
  },

  warnings: (rule: WindowFields & Common, written: Fields): string[] => [
    ...periodWarnings(rule.periodMs, written.period),
    ...blockForWarnings(rule, written.block_for, {
      ms: rule.periodMs,
      says: `is shorter than the period (${formatDuration(rule.periodMs)}), and the window alone refuses a client at its limit for up to a period, so the penalty changes little; make it longer than the period`,
    }),
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
