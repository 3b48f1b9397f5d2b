/**
 * @module
 * The sliding-window counter of the seeds, generalised to k buckets per period.
 *
 * With `precision = 1` this is exactly the seeds' algorithm: two counters
 * (`prev`, `curr`), `weighted = prev × (1 − elapsed) + curr`, admit iff
 * `weighted < limit`, and a rejected request is not counted. With
 * `precision = k` the period is split into k buckets; the state is the newest
 * bucket's index and k + 1 counts, and only the oldest bucket, partly outside
 * the sliding window, is weighted by the share of it still inside. In strict
 * mode it counts whole, which proves no window of length `periodMs` ever
 * admits more than `limit` (docs/strict-mode.md).
 *
 * Decisions are exact: the weighted count is compared in integers scaled by
 * `periodMs`, because in floating point `500 × (1 − 3960/60000) + 33` is
 * 499.99999999999994 and would admit at the limit. `weighted` is for display.
 *
 * Pure: `(state, nowMs, window)` in, `(state, decision)` out, where `window`
 * is the rule's {@link WindowLimit}. No I/O, no clock.
 * Every function is O(k) in time and space.
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
  /**
   * What one request counts, from 1 to `limit`: it is admitted when
   * `weighted + cost - 1 < limit` (for whole counts, `weighted + cost ≤ limit`).
   * @default 1
   */
  cost?: number;
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
  /** The weighted count a request at `nowMs` sees, before it is counted (rounded; for display). */
  weighted: number;
  /** `weighted < limit`, decided exactly. */
  allowed: boolean;
};

export type Decision = {
  /** Whether the request was admitted and counted. */
  allowed: boolean;
  /** The weighted count the request saw, before it was counted. */
  weighted: number;
  /**
   * Quota units left now (`RateLimit`'s `r`): `max(0, floor(limit − weighted − cost))`
   * after an admission, `max(0, floor(limit − weighted))` otherwise (fewer
   * than one request's cost when it is refused).
   */
  remaining: number;
  /** Smallest wait in milliseconds after which a request would be admitted if nothing else is admitted meanwhile; 0 when admitted. */
  retryAfterMs: number;
  /**
   * The effective window of the `RateLimit` header's `t`: milliseconds within
   * which no more can be used than is admissible now. With every request
   * admissible now counted, the wait until one more would be admitted;
   * `retryAfterMs` when rejected. A client that spends `remaining` sooner is
   * not refused for it, and is admitted again once this has passed.
   */
  resetMs: number;
};

/** Index of the bucket that holds `nowMs`. */
export const bucketIndex = (nowMs: number, window: WindowLimit): number =>
  Math.floor((nowMs * window.precision) / window.periodMs);

/** The first millisecond of bucket `bucket`. */
export const bucketStartMs = (bucket: number, window: WindowLimit): number =>
  Math.ceil((bucket * window.periodMs) / window.precision);

/** A key that has never been seen. */
export const emptyState = (nowMs: number, window: WindowLimit): WindowState => ({
  bucket: bucketIndex(nowMs, window),
  counts: new Array<number>(window.precision + 1).fill(0),
});

/**
 * Moves the buckets forward to `nowMs`. A step of one bucket shifts the counts
 * (`prev = curr, curr = 0` when precision is 1); a step past every bucket
 * (skipped windows) leaves all zeros. A clock that steps back changes nothing.
 */
export function rotate(state: WindowState, nowMs: number, window: WindowLimit): WindowState {
  const bucket = bucketIndex(nowMs, window);
  const shift = bucket - state.bucket;
  if (shift <= 0) return state;
  const size = window.precision + 1;
  const counts = new Array<number>(size).fill(0);
  for (let i = shift; i < size; i++) counts[i - shift] = state.counts[i] ?? 0;
  return { bucket, counts };
}

/**
 * A rotated state split the way the decision reads it: the oldest bucket's
 * count, the part of it that still counts as `kept / periodMs`, and the sum of
 * the newer buckets.
 */
type Parts = { oldest: number; kept: number; newer: number };

function parts(rotated: WindowState, nowMs: number, window: WindowLimit): Parts {
  const [oldest = 0, ...rest] = rotated.counts;
  let newer = 0;
  for (const count of rest) newer += count;
  // `(nowMs × k) mod periodMs` is how far into its bucket `nowMs` is, in `periodMs`ths of the bucket.
  // A clock behind the newest bucket (it stepped back) counts the oldest whole, so the count never rises as it catches up.
  const whole = window.strict || bucketIndex(nowMs, window) < rotated.bucket;
  const kept = whole ? window.periodMs : window.periodMs - ((nowMs * window.precision) % window.periodMs);
  return { oldest, kept, newer };
}

/** The weighted count of a state already rotated to `nowMs` (rounded; decisions use {@link evaluate}). */
export function weightedCount(rotated: WindowState, nowMs: number, window: WindowLimit): number {
  const { oldest, kept, newer } = parts(rotated, nowMs, window);
  return (oldest * kept) / window.periodMs + newer;
}

/** The limit a request's weighted count must stay under: `limit − (cost − 1)`, the whole limit for a cost of 1. */
const limitFor = (window: WindowLimit): number => window.limit - ((window.cost ?? 1) - 1);

/** Whether `oldest × kept / periodMs + newer + cost − 1 < limit`, in exact integer arithmetic. */
function admits({ oldest, kept, newer }: Parts, window: WindowLimit): boolean {
  const headroom = limitFor(window) - newer;
  if (headroom <= 0) return false;
  return productLess(oldest, kept, headroom, window.periodMs);
}

/** What a request at `nowMs` would see, without counting it. */
export function evaluate(state: WindowState, nowMs: number, window: WindowLimit): Evaluation {
  const rotated = rotate(state, nowMs, window);
  const split = parts(rotated, nowMs, window);
  return {
    state: rotated,
    weighted: (split.oldest * split.kept) / window.periodMs + split.newer,
    allowed: admits(split, window),
  };
}

/** Counts one request, of `cost`, in the current bucket of a rotated state. */
export function admit(rotated: WindowState, cost = 1): WindowState {
  const counts = rotated.counts.slice();
  counts[counts.length - 1] = (counts[counts.length - 1] ?? 0) + cost;
  return { bucket: rotated.bucket, counts };
}

/**
 * The smallest wait after which a request would be admitted, if nothing else
 * is admitted meanwhile, computed from the buckets in O(k).
 *
 * While nothing is admitted, the weighted count never rises (the oldest
 * bucket's weight falls within a bucket; at a bucket's end it drops out), so
 * the admissible instants form one interval that starts at the answer. During
 * bucket `b + j` the oldest bucket is the state's `counts[j]` and the newer
 * ones sum to `counts[j+1..k]`; the first bucket where the newer ones leave
 * headroom holds the answer, found by solving for the oldest bucket's weight.
 * By the start of bucket `b + k + 1` every count has rotated out.
 */
export function retryAfterMs(state: WindowState, nowMs: number, window: WindowLimit): number {
  const rotated = rotate(state, nowMs, window);
  if (admits(parts(rotated, nowMs, window), window)) return 0;
  const { bucket, counts } = rotated;
  let newer = 0;
  for (let i = 1; i < counts.length; i++) newer += counts[i] ?? 0;
  for (let j = 0; j < counts.length; j++) {
    const headroom = limitFor(window) - newer;
    if (headroom > 0) {
      const atMs = earliestInBucket({ bucket: bucket + j, oldest: counts[j] ?? 0, headroom, nowMs }, window);
      if (atMs !== null) return atMs - nowMs;
    }
    newer -= counts[j + 1] ?? 0;
  }
  return Math.max(nowMs, bucketStartMs(bucket + counts.length, window)) - nowMs;
}

/**
 * The earliest instant, not before `fromMs`, at which a request of `cost`
 * would be admitted if nothing else were admitted meanwhile: the wait of
 * {@link retryAfterMs} read from any instant, not only now. A held
 * request's turn is this instant on the state with every earlier booking
 * counted (see `core/bookings.ts`). From this instant on, every later one
 * admits too (the count never rises on its own).
 */
export function earliestAdmission(
  state: WindowState,
  window: WindowLimit,
  fromMs: number,
  cost: number = window.cost ?? 1,
): number {
  return fromMs + retryAfterMs(state, fromMs, cost === (window.cost ?? 1) ? window : { ...window, cost });
}

/**
 * The state with a request of `cost` counted at `atMs`, whatever it would
 * be decided: rotated forward to `atMs`, or, for an instant in a bucket the
 * state has passed, counted in that bucket while the state still keeps it
 * (a bucket older than that weighs nothing any more).
 */
export function admitAt(
  state: WindowState,
  window: WindowLimit,
  atMs: number,
  cost: number = window.cost ?? 1,
): WindowState {
  const rotated = rotate(state, atMs, window);
  const index = bucketIndex(atMs, window) - (rotated.bucket - window.precision);
  if (index < 0) return rotated;
  const counts = rotated.counts.slice();
  counts[index] = (counts[index] ?? 0) + cost;
  return { bucket: rotated.bucket, counts };
}

/** One bucket of a wait being worked out (see {@link earliestInBucket}). */
type BucketWait = {
  /** The bucket's index, b. */
  bucket: number;
  /** The count of the oldest bucket while b is the newest. */
  oldest: number;
  /** What the newer buckets leave of the limit: `limit − newer`, > 0. */
  headroom: number;
  /** No instant before this counts. */
  nowMs: number;
};

/**
 * The first instant, not before `nowMs`, in bucket `b` at which `oldest`
 * weighted plus newer buckets leaving `headroom` is under the limit; or null.
 * At instant t in bucket b the oldest bucket keeps `(b + 1) × periodMs − t × k`
 * `periodMs`ths, so the condition `oldest × kept < headroom × periodMs` becomes
 * a lower bound on t.
 */
function earliestInBucket({ bucket: b, oldest, headroom, nowMs }: BucketWait, window: WindowLimit): number | null {
  const startMs = Math.max(nowMs, bucketStartMs(b, window));
  if (startMs >= bucketStartMs(b + 1, window)) return null;
  if (oldest < headroom) return startMs; // admitted even counting the oldest whole
  if (window.strict) return null;
  // kept = periodMs − u, where u = t × k − b × periodMs is how far t is into bucket b.
  // oldest × (periodMs − u) < headroom × periodMs  ⟺  u > (oldest − headroom) × periodMs / oldest.
  const minInto = floorProductQuotient(oldest - headroom, window.periodMs, oldest) + 1;
  const atMs = Math.max(startMs, Math.ceil((b * window.periodMs + minInto) / window.precision));
  return atMs < bucketStartMs(b + 1, window) ? atMs : null;
}

/**
 * How many more requests of the window's cost a rotated state admits at its
 * instant, one after another: the i-th (from 0) while
 * `oldest × kept < (headroom − i × cost) × periodMs`, so
 * `ceil((headroom × periodMs − oldest × kept) / (cost × periodMs))` of them.
 * One more than `remaining` when the weighted count is not whole.
 */
function admissibleNow({ oldest, kept, newer }: Parts, window: WindowLimit): number {
  const headroom = limitFor(window) - newer;
  if (headroom <= 0) return 0;
  const whole = headroom * window.periodMs;
  const weighed = oldest * kept;
  const step = (window.cost ?? 1) * window.periodMs;
  if (Number.isSafeInteger(whole) && Number.isSafeInteger(weighed) && Number.isSafeInteger(step)) {
    return whole > weighed ? Math.ceil((whole - weighed) / step) : 0;
  }
  const room = BigInt(headroom) * BigInt(window.periodMs) - BigInt(oldest) * BigInt(kept);
  return room > 0n ? Number((room + BigInt(step) - 1n) / BigInt(step)) : 0;
}

/**
 * The effective window (see {@link Decision.resetMs}) of a state rotated to
 * `nowMs`, as a request left it: with every request admissible now counted,
 * the wait until one more would be.
 */
function effectiveWindowMs(left: WindowState, nowMs: number, window: WindowLimit): number {
  const more = admissibleNow(parts(left, nowMs, window), window);
  return retryAfterMs(more === 0 ? left : admit(left, more * (window.cost ?? 1)), nowMs, window);
}

/** Milliseconds until the bucket that holds `nowMs` ends. */
export const msToBucketEnd = (nowMs: number, window: WindowLimit): number =>
  bucketStartMs(bucketIndex(nowMs, window) + 1, window) - nowMs;

/**
 * Describes an evaluation. `counted` says whether the request was admitted and
 * counted; a request that this rule would admit can still be refused by another
 * rule checked with it, and is then not counted.
 */
export function describe(ev: Evaluation, nowMs: number, window: WindowLimit, counted: boolean): Decision {
  // floor(limit − weighted − c) = headroom − c − ceil(oldest × kept / periodMs), with headroom = limit − newer.
  const { oldest, kept, newer } = parts(ev.state, nowMs, window);
  const cost = counted ? (window.cost ?? 1) : 0;
  const left = window.limit - newer - cost - ceilProductQuotient(oldest, kept, window.periodMs);
  if (!ev.allowed) {
    // What is left in units, though less than the request's cost: `r` is remaining quota units.
    const wait = retryAfterMs(ev.state, nowMs, window);
    return { allowed: false, weighted: ev.weighted, remaining: Math.max(0, left), retryAfterMs: wait, resetMs: wait };
  }
  return {
    allowed: counted,
    weighted: ev.weighted,
    remaining: Math.max(0, left),
    retryAfterMs: 0,
    resetMs: effectiveWindowMs(counted ? admit(ev.state, cost) : ev.state, nowMs, window),
  };
}

/** Checks one request against one rule: counts it if admitted. */
export function check(
  state: WindowState,
  nowMs: number,
  window: WindowLimit,
): { state: WindowState; decision: Decision } {
  const ev = evaluate(state, nowMs, window);
  const next = ev.allowed ? admit(ev.state, window.cost) : ev.state;
  return { state: next, decision: describe(ev, nowMs, window, ev.allowed) };
}

// Exact integer arithmetic on non-negative integers. Products of a count (up to
// 10⁹) and a period (up to 365 days) can pass 2⁵³, so those few fall back to BigInt.

/** `a × b < c × d`. */
function productLess(a: number, b: number, c: number, d: number): boolean {
  const left = a * b;
  const right = c * d;
  if (Number.isSafeInteger(left) && Number.isSafeInteger(right)) return left < right;
  return BigInt(a) * BigInt(b) < BigInt(c) * BigInt(d);
}

/** `floor(a × b / d)`; a safe integer divided once is exact after rounding to an integer. */
function floorProductQuotient(a: number, b: number, d: number): number {
  const product = a * b;
  if (Number.isSafeInteger(product)) return Math.floor(product / d);
  return Number((BigInt(a) * BigInt(b)) / BigInt(d));
}

/** `ceil(a × b / d)`. */
function ceilProductQuotient(a: number, b: number, d: number): number {
  const product = a * b;
  if (Number.isSafeInteger(product)) return Math.ceil(product / d);
  const big = BigInt(a) * BigInt(b);
  return Number((big + BigInt(d) - 1n) / BigInt(d));
}
