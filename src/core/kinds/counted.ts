/**
 * @module
 * What every counted kind has (a kind whose client's object counts each
 * request: the sliding window, the calendar quota): what one request costs
 * (`cost`), which responses count (`count`), and what the origin says a
 * request really cost (`cost_header`, `keep_cost_header`). Parsed, shown
 * and warned of the same way for each; a kind's module spreads them among
 * its own.
 */
import { COUNT_ALL, type CountWhen, countAsWritten, parseCount } from "../count.ts";
import { parseFlag, parseHeaderName, parseIntegerFrom1 } from "../fields.ts";
import { fail, ok, type Result } from "../result.ts";
import { show } from "../show.ts";
import type { Common, Fields, TakeField } from "./kind.ts";

/** The fields every counted kind has, as wrangler.toml writes them, in the order they are checked. */
export const COUNTED_FIELDS = ["count", "cost", "cost_header", "keep_cost_header"] as const;

/** A counted rule's counting fields, compiled. */
export type CountedFields = {
  /** What one request counts, when not 1. */
  cost?: number;
  /** Which responses count (the `count` field); the rest are given back once the origin answers. */
  count: CountWhen;
  /** The response header that says what the request really cost (lower-case); the difference is charged after. */
  costHeader?: string;
  /** Whether the client sees that header; by default it is stripped. */
  keepCostHeader?: boolean;
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

/** The counting fields as the admin API shows them (wrangler.toml's spelling). */
export const countedView = (rule: CountedFields): Record<string, unknown> => ({
  count: countAsWritten(rule.count),
  cost: rule.cost ?? 1,
  ...(rule.costHeader === undefined
    ? {}
    : { cost_header: rule.costHeader, keep_cost_header: rule.keepCostHeader ?? false }),
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
