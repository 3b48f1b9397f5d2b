/**
 * @module
 * The token bucket: a sustained rate of `limit` per `period` and a burst of
 * `burst` set apart, decided by the generic cell rate algorithm
 * (core/gcra.ts): one theoretical arrival time per key. Each request counts
 * `cost`, with `count`, `cost_header` and `block_for` as on any counted rule
 * (counted.ts). A rule is a bucket when it has `burst`. Its client's object
 * counts it (`count` protocol), and holds a request over it until the
 * instant it conforms when the rule has `max_delay`.
 *
 * A tier, an override or an adaptive factor gives a bucket another limit,
 * and its burst follows in proportion ({@link burstFor}): the bucket's depth
 * in time, `burst × period / limit`, stays the rule's, rounded down with
 * the burst, unless the burst would fall below one request's cost (then it
 * is longer). `w` says the depth under the limit that applies.
 */
import { describePeriod, formatDuration } from "../duration.ts";
import { parseIntegerFrom1, parsePeriod } from "../fields.ts";
import { afterCharge, depthMs, MAX_DEPTH_MS } from "../gcra.ts";
import { fail, ok, type Result } from "../result.ts";
import { show } from "../show.ts";
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

/** The largest limit a bucket, a tier or an override may give (as a window's). */
const MAX_LIMIT = 1_000_000_000;
/** The most a bucket may hold, from its own `burst` or in proportion to a tier's or an override's limit. */
export const MAX_BURST = 1_000_000_000;

/** What a bucket's burst scales with: its burst at its own limit, and what one request costs. */
export type BurstOf = { burst: number; ownLimit: number; cost?: number | undefined };

/** A token bucket's own fields, compiled: its rate and burst, and what every counted rule has (counted.ts). */
export type BucketFields = CountedFields &
  PenaltyFields & {
    /** Units the bucket refills per period: the sustained rate (a tier's, for a client in one). */
    limit: number;
    periodMs: number;
    /** The most the bucket holds at once, at its own limit. */
    burst: number;
    /** The rule's own limit, which `burst` goes with: another (a tier's, an override's, a factor's) scales the burst. */
    ownLimit: number;
  };

/**
 * What a bucket's client object counts it by, beside its limit and what
 * every rule sends: its check's own fields, and a sliding window's layout
 * (`precision`, `strict`), which its row's name carries as every counted
 * row's does, and its counter never reads.
 */
export type BucketCheck = {
  kind: "bucket";
  periodMs: number;
  burst: number;
  ownLimit: number;
  precision: 1;
  strict: false;
  blockForMs?: number;
};

const NO_WINDOW = { precision: 1, strict: false } as const;

const FIELDS = ["limit", "period", "burst", ...COUNTED_FIELDS, ...PENALTY_FIELDS] as const;

/**
 * The burst of a bucket under `limit`: its own at its own limit; under
 * another, in proportion, rounded down (so the depth in time never grows),
 * never below one request's cost (nor below the burst itself when that is
 * less, as written) and never above {@link MAX_BURST}.
 */
export function burstFor(bucket: BurstOf, limit: number): number {
  const { burst, ownLimit } = bucket;
  if (limit === ownLimit) return burst;
  const product = burst * limit;
  const scaled = Number.isSafeInteger(product)
    ? Math.floor(product / ownLimit)
    : Number((BigInt(burst) * BigInt(limit)) / BigInt(ownLimit));
  return Math.min(MAX_BURST, Math.max(Math.min(burst, bucket.cost ?? 1), scaled));
}

/**
 * A bucket's depth in time under `limit`, with the burst that goes with it:
 * the rule's own, or close to it (the burst is rounded down), or longer
 * where the burst cannot go below one request's cost.
 */
const depthAt = (rule: BucketFields, limit: number): number =>
  depthMs({ limit, periodMs: rule.periodMs, burst: burstFor(rule, limit) });

/** The most limit a tier or an override may give a bucket: its burst then stays within {@link MAX_BURST}. */
const mostLimit = (bucket: BurstOf): number =>
  Math.min(MAX_LIMIT, Math.floor((MAX_BURST * bucket.ownLimit) / bucket.burst));

export const bucketKind: RuleKind<BucketFields> = {
  name: "bucket",
  protocol: "count",
  fields: FIELDS,
  marks: ["burst"],
  required: ["limit", "period", "burst"],
  maxLimit: MAX_LIMIT,
  limitNoun: "requests",
  limitField: "limit",
  foreignField: (field) =>
    field === "precision" || field === "strict"
      ? `does not apply to a token bucket (a rule with "burst"), which keeps no window: its guarantee is its burst (docs/token-bucket.md); remove it`
      : undefined,
  ownField: (field) => `only a token bucket has ${show(field)}; give the rule "limit" and "period" too, or remove it`,

  parse(fields: Fields, take: TakeField): BucketFields {
    const limit = take("limit", parseIntegerFrom1(fields.limit, MAX_LIMIT), 0);
    const periodMs = take("period", parsePeriod(fields.period), 0);
    const burst = take("burst", parseBurst(fields.burst, limit, periodMs), 1);
    return {
      limit,
      periodMs,
      burst,
      ownLimit: limit,
      ...parseCounted(fields, take, limit),
      ...parsePenalty(fields, take),
    };
  },

  quota: (rule: BucketFields): Quota => ({
    // The bucket's depth in time: a client that keeps to q per any w never empties it.
    windowMs: depthMs(rule),
    windowFor: (limit) => depthAt(rule, limit),
    periodMs: rule.periodMs,
    shown: (limit) => ({ burst: burstFor(rule, limit), depthMs: depthAt(rule, limit) }),
    quota: (limit) => burstFor(rule, limit),
    // A charge past what the bucket holds is a debt: the wait for the next request grows with it.
    charged: (limit, cost, verdict, units) =>
      afterCharge(verdict, cost, units, { limit, periodMs: rule.periodMs, burst: burstFor(rule, limit) }),
    words: (limit) =>
      `${limit} per ${describePeriod(rule.periodMs)}, in bursts of up to ${burstFor(rule, limit)} at once`,
  }),

  check: (rule: BucketFields): BucketCheck => ({
    kind: "bucket",
    periodMs: rule.periodMs,
    burst: rule.burst,
    ownLimit: rule.ownLimit,
    ...NO_WINDOW,
    ...(rule.blockForMs > 0 ? { blockForMs: rule.blockForMs } : {}),
  }),

  limitCap: (rule: BucketFields) => ({
    max: mostLimit(rule),
    because: `its burst (${rule.burst} at a limit of ${rule.ownLimit}) grows in proportion, and a bucket holds at most ${MAX_BURST}`,
  }),

  // A tier or an override may give a client a burst of its own with its limit: the bucket's depth is then theirs.
  clientFields: {
    names: ["burst"],
    parse(rule: BucketFields, given: Fields, limit: number) {
      if (given.burst === undefined) return ok({});
      const parsed = parseBurst(given.burst, limit, rule.periodMs);
      if (!parsed.ok) return fail(...parsed.errors.map((error) => `field "burst": ${error}`));
      const cost = rule.cost ?? 1;
      if (parsed.value < cost) {
        return fail(
          `field "burst": ${parsed.value} is below the rule's cost (${cost}), so no request of this client could ever be admitted; must be at least ${cost}`,
        );
      }
      return ok({ burst: parsed.value, ownLimit: limit });
    },
  },

  view: (rule: BucketFields) => ({
    limit: {
      limit: rule.limit,
      period: formatDuration(rule.periodMs),
      periodMs: rule.periodMs,
      burst: burstFor(rule, rule.limit),
    },
    counting: { ...countedView(rule), ...penaltyView(rule) },
    summary: `${grouped(rule.limit)} per ${formatDuration(rule.periodMs)}, bursts of ${grouped(burstFor(rule, rule.limit))}`,
  }),

  warnings: (rule: BucketFields & Common, written: Fields): string[] => [
    ...periodWarnings(rule.periodMs, written.period),
    ...costWarnings(rule),
    ...blockForWarnings(rule, written.block_for, {
      ms: refillMs(rule, rule.cost ?? 1),
      says: `is shorter than the bucket takes to refill one request's cost (${formatDuration(refillMs(rule, rule.cost ?? 1))}), the longest it alone refuses a client, so the penalty changes little; make it longer than that`,
    }),
    ...delayWarnings(rule, written.max_delay),
    ...countingWarnings(rule),
  ],

  // Two buckets with the same period and burst: the lower rate refuses first, always.
  measure: (rule: BucketFields) => `${rule.periodMs}|${rule.burst}`,

  overlap: (a, b, looser, same) =>
    same
      ? `${a} and ${b}: are the same token bucket on the same requests and key; remove one`
      : `${a} and ${b}: are token buckets on the same requests with the same key, period and burst, so ${looser}, the looser, never refuses anything; remove it`,
};

/**
 * `burst`: an integer from 1 to {@link MAX_BURST}, whose bucket refills in
 * at most 100 years (`burst × period / limit`, the depth the arithmetic is
 * exact over).
 */
function parseBurst(value: unknown, limit: number, periodMs: number): Result<number> {
  const parsed = parseIntegerFrom1(value, MAX_BURST);
  if (!parsed.ok || limit < 1 || periodMs < 1) return parsed;
  if (depthMs({ limit, periodMs, burst: parsed.value }) <= MAX_DEPTH_MS) return parsed;
  const most = Math.floor((MAX_DEPTH_MS * limit) / periodMs);
  return fail(
    `must be at most ${most}: a bucket of ${limit} per ${describePeriod(periodMs)} refills ${show(value)} in more than 100 years; got ${show(value)}`,
  );
}

/** How long the bucket takes to refill `units`, in milliseconds rounded up: `units × period / limit`. */
const refillMs = (rule: BucketFields, units: number): number => Math.ceil((units * rule.periodMs) / rule.limit);

/** A cost above the burst: no request of the rule is ever admitted. */
function costWarnings(rule: BucketFields & Common): string[] {
  const cost = rule.cost ?? 1;
  if (cost <= rule.burst) return [];
  return [
    `field "cost": ${cost} is more than the burst (${rule.burst}), the most the bucket ever holds, so every request of this rule is refused as one that can never be admitted; make the burst at least the cost`,
  ];
}

/**
 * A delay longer than the bucket's depth in time: a client then keeps more
 * than a full burst's worth of requests held, and an overload that lasts is
 * queued, connections open, where the bucket would refuse it.
 */
function delayWarnings(rule: BucketFields & Common, maxDelay: unknown): string[] {
  const { maxDelayMs } = rule;
  const depth = depthMs(rule);
  if (maxDelayMs === undefined || rule.action === "log" || maxDelayMs <= depth) return [];
  const held = Math.min(
    rule.maxHeld ?? Number.POSITIVE_INFINITY,
    Math.floor((maxDelayMs * rule.limit) / rule.periodMs / (rule.cost ?? 1)),
  );
  return [
    `field "max_delay": ${show(maxDelay)} is longer than the bucket takes to refill its burst (${formatDuration(depth)}: burst × period / limit), so a client keeps more than a burst's worth of requests held (up to ${held} at this rate) with their connections open, and a sustained overload is queued rather than refused; make it at most that, unless that is meant`,
  ];
}
