/**
 * @module
 * What counted kinds share (a kind whose client's object counts each
 * request: the sliding window, the token bucket, the calendar quota): what
 * one request costs (`cost`), which responses count (`count`), what the
 * origin says a request really cost (`cost_header`, `keep_cost_header`);
 * and, for the kinds that refuse by the moment (a window, a bucket), a
 * penalty (`block_for`). Parsed, shown and warned of the same way for each;
 * a kind's module spreads them among its own. A leaf of the kinds: it
 * imports no kind.
 */
import { COUNT_ALL, type CountWhen, countAsWritten, countsResponse, parseCount } from "../count.ts";
import { describePeriod, formatDuration, parseDurationMs } from "../duration.ts";
import { isZero, parseFlag, parseHeaderName, parseIntegerFrom1 } from "../fields.ts";
import { fail, ok, type Result } from "../result.ts";
import { show } from "../show.ts";
import type { Common, Fields, TakeField } from "./kind.ts";

/** The shortest penalty: anything shorter is over before a client could notice. */
const MIN_BLOCK_FOR_MS = 1_000;

/** The fields every counted kind has, as wrangler.toml writes them, in the order they are checked. */
export const COUNTED_FIELDS = ["count", "cost", "cost_header", "keep_cost_header"] as const;

/** The penalty's field, for the kinds that have one (after {@link COUNTED_FIELDS}). */
export const PENALTY_FIELDS = ["block_for"] as const;

/** A counted rule's counting fields, compiled. */
export type CountedFields = {
  /** What one request counts (`cost`); absent: 1. */
  cost?: number;
  /** Which responses count (the `count` field); the rest are given back once the origin answers. */
  count: CountWhen;
  /** The response header that says what the request really cost (lower-case); the difference is charged after. */
  costHeader?: string;
  /** Whether the client sees that header; by default it is stripped. */
  keepCostHeader?: boolean;
};

/** A penalty, compiled. */
export type PenaltyFields = {
  /** How long a refusal under this rule blocks the client, in milliseconds; 0 for no penalty. */
  blockForMs: number;
};

/** `count`, `cost`, `cost_header` and `keep_cost_header`, in that order, for a rule whose limit is `limit`. */
export function parseCounted(fields: Fields, take: TakeField, limit: number): CountedFields {
  const count = take("count", parseCount(fields.count), COUNT_ALL);
  const cost = take("cost", parseCost(fields.cost, limit), 1);
  const costHeader = take("cost_header", parseHeaderName(fields.cost_header), null);
  const keepCostHeader = take("keep_cost_header", parseFlag(fields.keep_cost_header ?? false), false);
  return {
    ...(cost === 1 ? {} : { cost }),
    count,
    ...(costHeader === null ? {} : { costHeader, keepCostHeader }),
  };
}

/** `block_for`. */
export const parsePenalty = (fields: Fields, take: TakeField): PenaltyFields => ({
  blockForMs: take("block_for", parseBlockFor(fields.block_for), 0),
});

/** The counting fields as the admin API shows them (wrangler.toml's spelling). */
export const countedView = (rule: CountedFields): Record<string, unknown> => ({
  count: countAsWritten(rule.count),
  cost: rule.cost ?? 1,
  ...(rule.costHeader === undefined
    ? {}
    : { cost_header: rule.costHeader, keep_cost_header: rule.keepCostHeader ?? false }),
});

/** The penalty as the admin API shows it. */
export const penaltyView = (rule: PenaltyFields): Record<string, unknown> => ({
  block_for: rule.blockForMs > 0 ? formatDuration(rule.blockForMs) : null,
  blockForMs: rule.blockForMs,
});

/** What one request counts: an integer from 1 to the rule's limit (1 when absent). */
const parseCost = (value: unknown, limit: number): Result<number> =>
  value === undefined
    ? ok(1)
    : parseIntegerFrom1(value, Math.max(1, limit)).ok
      ? ok(value as number)
      : fail(`must be an integer from 1 to the rule's limit (${limit}); got ${show(value)}`);

/** A `cost_header` on a shadow rule: it charges counts that never refuse anything. */
export function costHeaderWarnings(rule: CountedFields & Common): string[] {
  if (rule.costHeader === undefined || rule.action !== "log") return [];
  return [
    `field "cost_header": ${show(rule.costHeader)} on a shadow rule (action = "log") charges counts that never refuse anything; drop it, or enforce the rule`,
  ];
}

/** A penalty's length: absent or zero is none (0); otherwise a duration of at least 1 s. */
function parseBlockFor(value: unknown): Result<number> {
  if (value === undefined || isZero(value)) return ok(0);
  const tooShort = fail(`must be at least 1s, or 0 for no penalty; got ${show(value)}`);
  if (typeof value === "number" && value < 0) return tooShort;
  const parsed = parseDurationMs(value);
  return parsed.ok && parsed.value < MIN_BLOCK_FOR_MS ? tooShort : parsed;
}

/** A period so short that jitter dominates it, or a number of seconds that looks like milliseconds. */
export function periodWarnings(periodMs: number, period: unknown): string[] {
  if (periodMs < 1_000) {
    return [
      `field "period": ${show(period)} is under 1 second${typeof period === "number" ? " (a number is seconds)" : ""}: every request costs a Durable Object round trip, and clock and network jitter are a large share of so short a window; use a longer period with a proportionally larger limit`,
    ];
  }
  if (typeof period === "number" && period >= 1_000 && period % 1_000 === 0) {
    return [
      `field "period": ${period} is seconds, that is ${describePeriod(periodMs)}; if you meant milliseconds, write "${period / 1_000}s"`,
    ];
  }
  return [];
}

/**
 * A penalty in seconds that looks like milliseconds (`900000`: 250 hours,
 * where 15 minutes were meant); on a shadow rule, which never starts one;
 * or one shorter than
 * the longest the kind alone refuses a client at its limit (`alone.ms`), so
 * that the penalty changes little: `alone.says` why, after the value.
 */
export function blockForWarnings(
  rule: PenaltyFields & Common,
  blockFor: unknown,
  alone: { ms: number; says: string },
): string[] {
  if (rule.blockForMs === 0) return [];
  if (typeof blockFor === "number" && blockFor >= 1_000 && blockFor % 1_000 === 0) {
    return [
      `field "block_for": ${blockFor} is seconds, that is ${describePeriod(rule.blockForMs)}; if you meant milliseconds, write "${blockFor / 1_000}s"`,
    ];
  }
  if (rule.action === "log") {
    return [
      `field "block_for": ${show(blockFor)} has no effect on a shadow rule (action = "log"), which never refuses a request and so never starts a penalty`,
    ];
  }
  if (rule.blockForMs < alone.ms) {
    return [`field "block_for": ${show(blockFor)} ${alone.says}`];
  }
  return [];
}

/** Combinations of `count`, `cost_header` and `block_for` that cannot work as written. */
export function countingWarnings(rule: CountedFields & PenaltyFields & Common): string[] {
  const warnings: string[] = [];
  if (rule.blockForMs > 0 && !rule.count.all && [200, 204, 302].every((status) => countsResponse(rule.count, status))) {
    warnings.push(
      `field "block_for": with count = ${show(countAsWritten(rule.count))}, the penalty falls on clients whose requests succeed: a login rule wants count = "failed" (or [401, 403])`,
    );
  }
  warnings.push(...costHeaderWarnings(rule));
  return warnings;
}
