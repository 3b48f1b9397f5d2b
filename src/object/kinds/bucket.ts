/**
 * @module
 * The token bucket in its client's object (core/gcra.ts): a row is the
 * bucket's theoretical arrival time, the rate it is counted under, the
 * milliseconds handed back so far, and the latest instant a count went in
 * at (a lease's end may be ahead of now). A request conforms at its instant;
 * a held request's turn is the instant it conforms behind those booked
 * ahead; a lease's units are counted at its end, so they may be spent at
 * any instant until then; a hand-back takes back only what is still ahead
 * of every count since (`giveBack`). Under another rate (a tier, an
 * override, an adaptive factor) what is spent carries over in units.
 */

import {
  admitAt,
  type BucketLimit,
  type BucketState,
  carry,
  depthMs,
  describe,
  earliestAdmission,
  evaluate,
  fullFromMs,
  fullState,
  giveBack,
  giveBackCarried,
} from "../../core/gcra.ts";
import { type BucketCheck, type BurstOf, burstFor } from "../../core/kinds/bucket.ts";
import { type CheckOf, costOf, type RuleCheck } from "../protocol.ts";
import type { Counter, Seen, Stored } from "./counter.ts";

/**
 * A bucket's row: its state, counted under the rate `limit` per `periodMs`
 * (a request under another is carried over first), the milliseconds of TAT
 * handed back so far, and the latest instant any count has gone in at.
 */
export type BucketData = {
  state: BucketState;
  limit: number;
  periodMs: number;
  givenBackMs: number;
  countedAtMs: number;
};

/**
 * A lease lasts at most this share of the bucket's depth in time. Its units
 * are counted at its end, so while the bucket is fuller than that, the
 * refill until then is forgone: at most this share of a burst per lease.
 * (An eighth, the share of what is left a lease may take, forwent about 6%
 * of what one object admits to four isolates draining a bucket of 500; a
 * thirty-second, 1.3%, with fewer calls.)
 */
export const LEASE_DEPTH_SHARE = 1 / 32;

/** A bucket's check: no other kind's is asked here (the registry gives each row its kind's counter). */
const periodOf = (check: RuleCheck): number => (check as CheckOf<BucketCheck>).periodMs;

/** The bucket a check counts in: its limit, with the burst that goes with it (a bucket's check: no other asks here), and its cost. */
const bucketOf = (check: RuleCheck): BucketLimit => ({
  limit: check.limit,
  periodMs: periodOf(check),
  burst: burstFor(check as BurstOf, check.limit),
  cost: costOf(check),
});

/** The rate a row's state is counted under (what gcra reads of a bucket for its scale; the burst plays no part there). */
const rateOf = (data: BucketData): BucketLimit => ({ limit: data.limit, periodMs: data.periodMs, burst: 1 });

/**
 * The row as a check at `nowMs` reads it: carried over to the check's rate if it was counted under another. What
 * is spent is carried in units, refilled at the new rate. The refill a lease forgoes until its end (its units are
 * counted there, `countedAtMs`) is carried so too, but never as more time than it is: at a far lower rate, a
 * lease's second carried as units would have lasted hours.
 */
function reckoned(data: BucketData, nowMs: number, check: RuleCheck): BucketData {
  if (data.limit === check.limit && data.periodMs === periodOf(check)) return data;
  const to = bucketOf(check);
  const asUnits = carry(data.state, nowMs, rateOf(data), to);
  const state =
    data.countedAtMs <= nowMs ? asUnits : earlier(asUnits, carry(data.state, data.countedAtMs, rateOf(data), to));
  return { ...data, state, limit: check.limit, periodMs: periodOf(check) };
}

/** The state that refills first: of two, the one whose TAT is earlier. */
const earlier = (a: BucketState, b: BucketState): BucketState =>
  a.tatMs < b.tatMs || (a.tatMs === b.tatMs && a.ticks / a.perMs <= b.ticks / b.perMs) ? a : b;

/** Units spent and not yet refilled at `nowMs`, for display: what is ahead of now, in units. */
function spentUnits(data: BucketData, nowMs: number): number {
  const { tatMs, ticks, perMs } = data.state;
  const aheadMs = tatMs - nowMs + ticks / perMs;
  return aheadMs > 0 ? (aheadMs * data.limit) / data.periodMs : 0;
}

export const bucketCounter: Counter<BucketData> = {
  rowOf: (check) => `${check.id}|bucket`,

  // A full bucket; a row of another kind under the same rule id (the rule changed kind) carries nothing.
  fresh: (nowMs, check) => ({
    state: fullState(nowMs, bucketOf(check)),
    limit: check.limit,
    periodMs: periodOf(check),
    givenBackMs: 0,
    countedAtMs: nowMs,
  }),

  carried: (data, check, fromMs, nowMs) =>
    data.limit === check.limit && data.periodMs === periodOf(check)
      ? undefined
      : reckoned(data, Math.min(nowMs, Math.max(fromMs(), data.countedAtMs)), check),

  see(data, nowMs, check): Seen<BucketData> {
    const seen = reckoned(data, nowMs, check);
    const ev = evaluate(seen.state, nowMs, bucketOf(check));
    const weighted = spentUnits(seen, nowMs);
    return ev.never
      ? { allowed: false, data: seen, weighted, never: true }
      : { allowed: ev.allowed, data: seen, weighted };
  },

  admit: (seen, cost, check, nowMs) => ({
    ...seen,
    state: admitAt(seen.state, bucketOf(check), cost, nowMs),
    countedAtMs: Math.max(seen.countedAtMs, nowMs),
  }),

  describe(seen, nowMs, check, counted) {
    const bucket = bucketOf(check);
    const ev = evaluate(seen.data.state, nowMs, bucket);
    // A refusal the object decided otherwise (a penalty, requests held ahead) spends nothing here either.
    const decided = seen.allowed === ev.allowed ? ev : { ...ev, allowed: false, state: ev.before };
    const d = describe(decided, nowMs, bucket, counted);
    const { allowed, remaining, resetMs } = d;
    if (d.never) return { allowed, weighted: seen.weighted, remaining, retryAfterMs: resetMs, resetMs, never: true };
    return { allowed, weighted: seen.weighted, remaining, retryAfterMs: d.retryAfterMs, resetMs };
  },

  // The TAT after the count, in whole milliseconds: the receipt's mark says it exactly.
  where: (seen) => seen.state.tatMs,

  mark: (data) => [data.state.tatMs, data.state.ticks, data.state.perMs, data.givenBackMs, data.limit, data.periodMs],

  whereAt: (atMs) => atMs,

  roomFor: (seen, units, nowMs, check) => evaluate(seen.state, nowMs, bucketOf(check), units + costOf(check)).allowed,

  earliestAdmission(data, check, fromMs) {
    const seen = reckoned(data, fromMs, check);
    return earliestAdmission(seen.state, bucketOf(check), costOf(check), fromMs) ?? Number.POSITIVE_INFINITY;
  },

  admitAt(data, check, atMs) {
    const seen = reckoned(data, atMs, check);
    return {
      ...seen,
      state: admitAt(seen.state, bucketOf(check), costOf(check), atMs),
      countedAtMs: Math.max(seen.countedAtMs, atMs),
    };
  },

  // Counted at the lease's end: its units may then be spent at any instant until it (gcra's admitUnits).
  countAhead(seen, units, check, endsAtMs) {
    const state = admitAt(seen.state, bucketOf(check), units, endsAtMs);
    return { data: { ...seen, state, countedAtMs: Math.max(seen.countedAtMs, endsAtMs) }, where: state.tatMs };
  },

  // Counted at its end, a lease forgoes at most that much refill (LEASE_DEPTH_SHARE).
  leaseEndsInMs: (_, check) => Math.max(1, Math.floor(depthMs(bucketOf(check)) * LEASE_DEPTH_SHARE)),

  takeBack(data, receipt, units, nowMs) {
    const mark = receipt.mark;
    if (mark === undefined) return null;
    // A count made under another rate (the row was carried over since, in units): handed back in units at this one.
    if (mark[4] !== data.limit || mark[5] !== data.periodMs) {
      const state = giveBackCarried(data.state, rateOf(data), units, Math.max(nowMs, data.countedAtMs));
      return state === data.state ? null : { ...data, state };
    }
    const [tatMs, ticks, perMs, givenBackMs] = mark as [number, number, number, number];
    const back = giveBack(
      data.state,
      rateOf(data),
      units,
      { state: { tatMs, ticks, perMs }, givenBackMs },
      { sinceMs: Math.max(nowMs, data.countedAtMs), row: { givenBackMs: data.givenBackMs } },
    );
    return back.state === data.state ? null : { ...data, state: back.state, givenBackMs: back.row.givenBackMs };
  },

  // Charged at the instant it is charged, past the burst if need be: later requests wait for it.
  addAt: (data, _, units, nowMs) => ({
    ...data,
    state: admitAt(data.state, rateOf(data), units, nowMs),
    countedAtMs: Math.max(data.countedAtMs, nowMs),
  }),

  // A full bucket holds nothing: the row may go from then on.
  expiresAtMs: (data) => fullFromMs(data.state),

  encode: (data): Stored => ({
    periodMs: data.periodMs,
    precision: 0,
    bucket: data.state.tatMs,
    counts: JSON.stringify([
      data.state.ticks,
      data.state.perMs,
      data.limit,
      data.periodMs,
      data.givenBackMs,
      data.countedAtMs,
    ]),
  }),

  decode(stored) {
    const [ticks, perMs, limit, periodMs, givenBackMs, countedAtMs] = JSON.parse(stored.counts) as number[];
    return {
      state: { tatMs: stored.bucket, ticks: ticks!, perMs: perMs! },
      limit: limit!,
      periodMs: periodMs!,
      givenBackMs: givenBackMs!,
      countedAtMs: countedAtMs!,
    };
  },
};
