/**
 * A token bucket's decisions from first principles, for replays: from the
 * admissions as a plain list (instants and costs), in BigInt, knowing
 * nothing of theoretical arrival times, ticks or GCRA. Only the conformance
 * bound: over any interval [s, e], the cost admitted at instants in it is at
 * most `burst + limit × (e − s) / periodMs`. A request is admitted iff the
 * trace with it added still keeps that bound, which is what an exact bucket
 * does (what it has spent is the largest excess of any interval ending now).
 */
import type { BucketLimit } from "../../src/core/gcra.ts";

export type Admission = { atMs: number; cost: number };

/** `cost × periodMs ≤ burst × periodMs + limit × lengthMs`: `cost` fits in an interval of `lengthMs`. */
const fitsIn = (cost: bigint, lengthMs: number, bucket: BucketLimit): boolean =>
  cost * BigInt(bucket.periodMs) <=
  BigInt(bucket.burst) * BigInt(bucket.periodMs) + BigInt(bucket.limit) * BigInt(lengthMs);

/** A history's instants in time order, each with the cost admitted at it, summed from the first (cached per list and length: lists only grow). */
type Prepared = { length: number; instants: number[]; upTo: bigint[] };
const prepared = new WeakMap<readonly Admission[], Prepared>();

function prepare(history: readonly Admission[]): Prepared {
  const cached = prepared.get(history);
  if (cached?.length === history.length) return cached;
  const at = new Map<number, bigint>();
  for (const a of history) at.set(a.atMs, (at.get(a.atMs) ?? 0n) + BigInt(a.cost));
  const instants = [...at.keys()].sort((a, b) => a - b);
  const upTo: bigint[] = [];
  let sum = 0n;
  for (const t of instants) {
    sum += at.get(t)!;
    upTo.push(sum);
  }
  const value = { length: history.length, instants, upTo };
  prepared.set(history, value);
  return value;
}

/**
 * Whether `cost` at `atMs` keeps the bound with `history` (which keeps it):
 * every interval [s, e] with s ≤ atMs ≤ e, from and to instants of the
 * trace, still fits with `cost` added.
 */
export function oracleAdmits(history: readonly Admission[], atMs: number, cost: number, bucket: BucketLimit): boolean {
  const { instants, upTo } = prepare(history);
  const before = (i: number) => (i > 0 ? upTo[i - 1]! : 0n);
  let k = 0; // instants before atMs
  while (k < instants.length && instants[k]! < atMs) k++;
  let m = k; // instants up to atMs
  while (m < instants.length && instants[m]! === atMs) m++;
  // [s, e] holds what is summed up to e less what is summed before s.
  const starts = [{ s: atMs, summedBefore: before(k) }];
  for (let i = 0; i < k; i++) starts.push({ s: instants[i]!, summedBefore: before(i) });
  const ends = [{ e: atMs, summedTo: before(m) }];
  for (let j = m; j < instants.length; j++) ends.push({ e: instants[j]!, summedTo: upTo[j]! });
  for (const { e, summedTo } of ends) {
    for (const { s, summedBefore } of starts) {
      if (!fitsIn(summedTo - summedBefore + BigInt(cost), e - s, bucket)) return false;
    }
  }
  return true;
}

/** The first instant that ends an interval over the bound, replaying `admissions` in time order; null when none. */
export function firstOverBound(admissions: readonly Admission[], bucket: BucketLimit): number | null {
  const sorted = [...admissions].sort((a, b) => a.atMs - b.atMs);
  const instants = [...new Set(sorted.map((a) => a.atMs))];
  const at = new Map<number, bigint>();
  for (const a of sorted) at.set(a.atMs, (at.get(a.atMs) ?? 0n) + BigInt(a.cost));
  for (let j = 0; j < instants.length; j++) {
    let sum = 0n;
    for (let i = j; i >= 0; i--) {
      sum += at.get(instants[i]!)!;
      if (!fitsIn(sum, instants[j]! - instants[i]!, bucket)) return instants[j]!;
    }
  }
  return null;
}

/**
 * The earliest instant, not before `fromMs`, at which `cost` is admitted
 * after `history` (none of it after `fromMs`), or null when never (a cost
 * above the burst fits no interval). Searched, not solved: the instants that
 * admit are every one from some instant on, since an interval only grows its
 * allowance as its end moves later.
 */
export function oracleEarliest(
  history: readonly Admission[],
  fromMs: number,
  cost: number,
  bucket: BucketLimit,
): number | null {
  if (cost > bucket.burst) return null;
  if (oracleAdmits(history, fromMs, cost, bucket)) return fromMs;
  let refused = fromMs;
  let step = 1;
  while (!oracleAdmits(history, fromMs + step, cost, bucket)) {
    refused = fromMs + step;
    step *= 2;
  }
  let admitted = fromMs + step;
  while (admitted - refused > 1) {
    const mid = refused + Math.floor((admitted - refused) / 2);
    if (oracleAdmits(history, mid, cost, bucket)) admitted = mid;
    else refused = mid;
  }
  return admitted;
}

/** The most units admissible at once at `atMs` after `history`: the largest cost admitted there (0 when none is). */
export function oracleRoom(history: readonly Admission[], atMs: number, bucket: BucketLimit): number {
  let lo = 0;
  let hi = bucket.burst;
  while (lo < hi) {
    const mid = lo + Math.ceil((hi - lo) / 2);
    if (oracleAdmits(history, atMs, mid, bucket)) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

/**
 * The effective window for requests of `cost` at `atMs` after `history`: with
 * every such request admissible now admitted (as many as fit together), the
 * wait until one more is.
 */
export function oracleEffectiveWindow(
  history: readonly Admission[],
  atMs: number,
  cost: number,
  bucket: BucketLimit,
): number {
  const more = Math.floor(oracleRoom(history, atMs, bucket) / cost);
  const spent = more > 0 ? [...history, { atMs, cost: more * cost }] : history;
  return oracleEarliest(spent, atMs, cost, bucket)! - atMs;
}
