/**
 * @module
 * The sliding-window counter of the seeds, generalised to k buckets per period.
 *
 * With `precision = 1` this is exactly the seeds' algorithm: two counters
 * (`prev`, `curr`), `weighted = prev × (1 − elapsed) + curr`, admit iff
 * `weighted < limit`, and a rejected request is not counted.
 *
 * Pure: `(state, nowMs, limit)` in, `(state, decision)` out. No I/O, no clock.
 */

/** How one rule counts. */
export type WindowLimit = {
  /** Requests admitted per period; an integer ≥ 1. */
  limit: number;
  /** Length of the sliding window in milliseconds; an integer ≥ 1. */
  periodMs: number;
  /** Buckets per period (k). 1 is the seeds' two-counter algorithm. */
  precision: number;
  /** Count the oldest, partly expired bucket whole, so no window of length `periodMs` ever admits more than `limit`. */
  strict: boolean;
};

/** The counters of one (key, rule). */
export type WindowState = {
  /** Index of the newest bucket: `floor(nowMs × precision / periodMs)`. */
  bucket: number;
  /** Requests admitted per bucket, oldest first; the last is the current bucket. Length `precision + 1`. */
  counts: number[];
};

/** The state rotated to `nowMs`, with what a request at `nowMs` would see. */
export type Evaluation = {
  state: WindowState;
  /** The weighted count a request at `nowMs` sees, before it is counted. */
  weighted: number;
  /** `weighted < limit`. */
  allowed: boolean;
};

export type Decision = {
  /** Whether the request was admitted and counted. */
  allowed: boolean;
  /** The weighted count the request saw, before it was counted. */
  weighted: number;
  /** Requests still admissible now: `max(0, floor(limit − weighted − 1))` after an admission, 0 when rejected. */
  remaining: number;
  /** Smallest wait in milliseconds after which a request would be admitted if nothing else is admitted meanwhile; 0 when admitted. */
  retryAfterMs: number;
  /** Milliseconds until the current bucket (the current window when `precision = 1`) ends; `retryAfterMs` when rejected. */
  resetMs: number;
};

/** Index of the bucket that holds `nowMs`. */
export const bucketIndex = (nowMs: number, l: WindowLimit): number => Math.floor((nowMs * l.precision) / l.periodMs);

/** The first millisecond of bucket `bucket`. */
export const bucketStartMs = (bucket: number, l: WindowLimit): number => Math.ceil((bucket * l.periodMs) / l.precision);

/** A key that has never been seen. */
export const emptyState = (nowMs: number, l: WindowLimit): WindowState => ({
  bucket: bucketIndex(nowMs, l),
  counts: new Array<number>(l.precision + 1).fill(0),
});

/**
 * Moves the buckets forward to `nowMs`. A step of one bucket shifts the counts
 * (`prev = curr, curr = 0` when precision is 1); a step past every bucket
 * (skipped windows) leaves all zeros. A clock that steps back changes nothing.
 */
export function rotate(state: WindowState, nowMs: number, l: WindowLimit): WindowState {
  const bucket = bucketIndex(nowMs, l);
  const shift = bucket - state.bucket;
  if (shift <= 0) return state;
  const size = l.precision + 1;
  const counts = new Array<number>(size).fill(0);
  for (let i = shift; i < size; i++) counts[i - shift] = state.counts[i] ?? 0;
  return { bucket, counts };
}

/** How much of the oldest bucket still counts: `1 − elapsed` into the current bucket, or all of it in strict mode. */
const oldestWeight = (nowMs: number, l: WindowLimit): number =>
  l.strict ? 1 : 1 - ((nowMs * l.precision) % l.periodMs) / l.periodMs;

/** The weighted count of a state already rotated to `nowMs`. */
export function weightedCount(rotated: WindowState, nowMs: number, l: WindowLimit): number {
  const [oldest = 0, ...rest] = rotated.counts;
  let sum = oldest * oldestWeight(nowMs, l);
  for (const count of rest) sum += count;
  return sum;
}

/** What a request at `nowMs` would see, without counting it. */
export function evaluate(state: WindowState, nowMs: number, l: WindowLimit): Evaluation {
  const rotated = rotate(state, nowMs, l);
  const weighted = weightedCount(rotated, nowMs, l);
  return { state: rotated, weighted, allowed: weighted < l.limit };
}

/** Counts one request in the current bucket of a rotated state. */
export function admit(rotated: WindowState): WindowState {
  const counts = rotated.counts.slice();
  counts[counts.length - 1] = (counts[counts.length - 1] ?? 0) + 1;
  return { bucket: rotated.bucket, counts };
}

/**
 * The smallest wait after which a request would be admitted, if nothing else
 * is admitted meanwhile. The weighted count never rises while nothing is
 * admitted, so the admissible instants form one interval that starts at the
 * answer; a binary search over whole milliseconds finds it with the very
 * predicate that decides, so the two cannot disagree. Every bucket has rotated
 * out by the start of bucket `b + precision + 1`, so the search is bounded.
 */
export function retryAfterMs(state: WindowState, nowMs: number, l: WindowLimit): number {
  if (evaluate(state, nowMs, l).allowed) return 0;
  let rejectedAt = nowMs;
  let admittedAt = Math.max(nowMs + 1, bucketStartMs(bucketIndex(nowMs, l) + l.precision + 1, l));
  while (admittedAt - rejectedAt > 1) {
    const mid = rejectedAt + Math.floor((admittedAt - rejectedAt) / 2);
    if (evaluate(state, mid, l).allowed) admittedAt = mid;
    else rejectedAt = mid;
  }
  return admittedAt - nowMs;
}

/** Milliseconds until the bucket that holds `nowMs` ends. */
export const msToBucketEnd = (nowMs: number, l: WindowLimit): number =>
  bucketStartMs(bucketIndex(nowMs, l) + 1, l) - nowMs;

/**
 * Describes an evaluation. `counted` says whether the request was admitted and
 * counted; a request that this rule would admit can still be refused by another
 * rule checked with it, and is then not counted.
 */
export function describe(ev: Evaluation, nowMs: number, l: WindowLimit, counted: boolean): Decision {
  if (!ev.allowed) {
    const wait = retryAfterMs(ev.state, nowMs, l);
    return { allowed: false, weighted: ev.weighted, remaining: 0, retryAfterMs: wait, resetMs: wait };
  }
  const left = l.limit - ev.weighted - (counted ? 1 : 0);
  return {
    allowed: counted,
    weighted: ev.weighted,
    remaining: Math.max(0, Math.floor(left)),
    retryAfterMs: 0,
    resetMs: msToBucketEnd(nowMs, l),
  };
}

/** Checks one request against one rule: counts it if admitted. */
export function check(state: WindowState, nowMs: number, l: WindowLimit): { state: WindowState; decision: Decision } {
  const ev = evaluate(state, nowMs, l);
  const next = ev.allowed ? admit(ev.state) : ev.state;
  return { state: next, decision: describe(ev, nowMs, l, ev.allowed) };
}
