/**
 * @module
 * The token bucket, as the generic cell rate algorithm (GCRA): a sustained
 * rate and a burst set apart, with one instant per (key, rule), the
 * theoretical arrival time (TAT).
 *
 * A {@link BucketLimit} of `limit` units per `periodMs` with depth `burst`
 * is GCRA with emission interval `T = periodMs / limit` (the time one unit
 * takes to drip out) and tolerance `τ = (burst − 1) × T`, so that the
 * bucket's depth in time is `τ + T = burst × T`. A request of cost c at
 * instant t conforms iff
 *
 *     TAT − t ≤ τ − (c − 1) × T     ⟺     max(TAT, t) + c × T − t ≤ burst × T
 *
 * (for c ≤ burst; a cost above the burst never conforms), and admitting it
 * sets `TAT = max(TAT, t) + c × T`. A full bucket holds `burst` units;
 * `(TAT − t) / T`, when positive, is what is spent from it and not yet
 * refilled, refilling at `limit / periodMs` units per millisecond; a request
 * fits iff the bucket still holds its cost. A refused request changes nothing.
 *
 * The guarantee: over any interval [a, b], the units admitted at instants in
 * it total at most `burst + limit × (b − a) / periodMs` (the conformance
 * bound); and the bucket is exact: a request is refused only when admitting
 * it would break that bound for some interval ending at its instant (what is
 * spent is the largest excess of any such interval, by Lindley's recursion).
 * test/gcra.test.ts replays random traces against an oracle that knows only
 * the bound.
 *
 * Exact arithmetic. `T` is rarely a whole number of milliseconds (3 per second
 * is 333⅓ ms), and rounding it would drift the rate. Time is counted in ticks
 * of `1 / perMs` ms, where `perMs = limit / g` and `g = gcd(limit, periodMs)`,
 * so that one unit's emission interval is `unitTicks = periodMs / g` ticks.
 * For 10 per second, a tick is 1 ms and a unit 100 ticks. The TAT is kept as
 * whole milliseconds and a fraction in ticks ({@link BucketState}), so
 * absolute instants stay small; only what is spent, and depths, are counted
 * in ticks.
 *
 * Ranges: `limit` and `burst` from 1 to 10⁹, `periodMs` from 1 to 365 days,
 * and the bucket's depth in time, `burst × periodMs / limit`, at most
 * {@link MAX_DEPTH_MS} (100 years). Instants are then below 2⁵³ until the
 * year 285 000, and every result (milliseconds, units) is a safe integer. What
 * is spent, or a depth, in ticks is not always one (10⁹ units of 365 days is about
 * 3 × 10¹⁹ ticks), so each product below is checked and, past 2⁵³, computed
 * in BigInt instead, as sliding-window.ts does.
 *
 * Pure: `(state, nowMs, bucket)` in, `(state, decision)` out. No I/O, no clock.
 */

/** How one token-bucket rule counts. */
export type BucketLimit = {
  /** The sustained rate: units the bucket refills per period; an integer from 1 to 10⁹. */
  limit: number;
  /** The period of the rate in milliseconds; an integer from 1 to 365 days. */
  periodMs: number;
  /** The bucket's depth: units a full bucket admits at once, in the units of `limit` and `cost`; an integer from 1 to 10⁹. */
  burst: number;
  /**
   * What one request counts, an integer ≥ 1. A cost above `burst` is never
   * admitted, whatever the wait.
   * @default 1
   */
  cost?: number;
};

/**
 * One (key, rule)'s bucket: its theoretical arrival time, exactly
 * `tatMs + ticks / perMs` milliseconds (Unix). The bucket is full at every
 * instant from the TAT on ({@link fullFromMs}), and a full bucket's state is
 * any TAT not after now, so a row can be dropped from then on.
 *
 * `perMs` travels with the fraction: a state counted under one limit is read
 * under another (an override, a tier) by rounding its fraction up to the new
 * scale, which moves the TAT later by less than one tick, never earlier.
 */
export type BucketState = {
  /** The TAT's whole milliseconds, in Unix milliseconds. */
  tatMs: number;
  /** The TAT's fraction of a millisecond in ticks: an integer, 0 ≤ ticks < perMs. */
  ticks: number;
  /** Ticks per millisecond the fraction is counted in: the limit over gcd(limit, periodMs) of the bucket that wrote it. */
  perMs: number;
};

/** What a request of `cost` at `nowMs` would do to a bucket. */
export type Evaluation = {
  /** The request's cost. */
  cost: number;
  /** Whether it conforms now. */
  allowed: boolean;
  /** Its cost is above the burst: it never conforms, whatever the wait. */
  never: boolean;
  /** The state before the request. */
  before: BucketState;
  /** The state with the request admitted at `nowMs` when it conforms; otherwise `before` itself (a refusal changes nothing). */
  state: BucketState;
};

/** What a request is told. */
export type Decision =
  | {
      /** Whether the request was admitted and counted. */
      allowed: boolean;
      never: false;
      /** Whole units the bucket holds now: after this request when admitted; when refused, fewer than its cost. */
      remaining: number;
      /** The exact wait in milliseconds until a request of this cost conforms, if nothing else is admitted meanwhile; 0 when admitted. */
      retryAfterMs: number;
      /**
       * The effective window of the `RateLimit` header's `t`, in milliseconds:
       * with every request of this cost admissible now admitted, the wait until
       * one more would be. `retryAfterMs` when refused.
       */
      resetMs: number;
    }
  | {
      allowed: false;
      /** The request costs more than the burst: no wait admits it, so there is no `Retry-After`. */
      never: true;
      remaining: 0;
      retryAfterMs: null;
      /** The wait until the bucket is full again: the most it ever admits at once is admissible from then on. */
      resetMs: number;
    };

/** The deepest bucket in time, `burst × periodMs / limit`: 100 years of 365 days. */
export const MAX_DEPTH_MS = 100 * 365 * 86_400_000;

/** A bucket's clock: ticks per millisecond, and ticks per unit (one unit's emission interval). */
type Scale = { perMs: number; unitTicks: number };

function gcd(a: number, b: number): number {
  while (b !== 0) {
    const r = a % b;
    a = b;
    b = r;
  }
  return a;
}

function scaleOf(bucket: BucketLimit): Scale {
  const g = gcd(bucket.limit, bucket.periodMs);
  return { perMs: bucket.limit / g, unitTicks: bucket.periodMs / g };
}

/** The bucket's depth in time, in milliseconds rounded up: how long an empty bucket takes to refill, `burst × periodMs / limit`. */
export const depthMs = (bucket: BucketLimit): number => ceilRatio(bucket.burst, bucket.periodMs, 0, bucket.limit);

/** A key that has never been seen: a full bucket. */
export const fullState = (nowMs: number, bucket: BucketLimit): BucketState => ({
  tatMs: nowMs,
  ticks: 0,
  perMs: scaleOf(bucket).perMs,
});

/** The first instant at which the bucket is full (and stays so while nothing is admitted): the TAT, rounded up. */
export const fullFromMs = (state: BucketState): number => state.tatMs + (state.ticks > 0 ? 1 : 0);

/** The state in the bucket's scale: its fraction rounded up to the bucket's ticks (never earlier). */
function inScale(state: BucketState, perMs: number): BucketState {
  if (state.perMs === perMs) return state;
  const ticks = ceilRatio(state.ticks, perMs, 0, state.perMs);
  return ticks === perMs ? { tatMs: state.tatMs + 1, ticks: 0, perMs } : { tatMs: state.tatMs, ticks, perMs };
}

/**
 * The TAT as a request at `nowMs` sees it, `max(TAT, nowMs)`, in the
 * bucket's scale, and how far it is ahead of now: what is spent is
 * `aheadMs × perMs + ticks` ticks.
 */
type View = { tatMs: number; ticks: number; aheadMs: number };

function view(state: BucketState, nowMs: number, scale: Scale): View {
  const s = inScale(state, scale.perMs);
  if (s.tatMs > nowMs || (s.tatMs === nowMs && s.ticks > 0))
    return { tatMs: s.tatMs, ticks: s.ticks, aheadMs: s.tatMs - nowMs };
  return { tatMs: nowMs, ticks: 0, aheadMs: 0 };
}

/** Whether the bucket holds `cost` more units: spent + cost × unitTicks ≤ burst × unitTicks. */
const fits = (v: View, cost: number, bucket: BucketLimit, scale: Scale): boolean =>
  cost <= bucket.burst && sumAtMost(v.aheadMs, scale.perMs, v.ticks, bucket.burst - cost, scale.unitTicks);

/** The TAT `cost` units after the viewed one. */
function advance(v: View, cost: number, scale: Scale): BucketState {
  const [carryMs, ticks] = divideSum(v.ticks, cost, scale.unitTicks, scale.perMs);
  return { tatMs: v.tatMs + carryMs, ticks, perMs: scale.perMs };
}

/** What a request of `cost` (the bucket's own by default) at `nowMs` would see, and the state with it admitted. */
export function evaluate(
  state: BucketState,
  nowMs: number,
  bucket: BucketLimit,
  cost: number = bucket.cost ?? 1,
): Evaluation {
  const scale = scaleOf(bucket);
  const v = view(state, nowMs, scale);
  const allowed = fits(v, cost, bucket, scale);
  return { cost, allowed, never: cost > bucket.burst, before: state, state: allowed ? advance(v, cost, scale) : state };
}

/**
 * The state with `cost` units counted at `atMs`, whether they conform or
 * not: `TAT = max(TAT, atMs) + cost × T`. A held request's units go in at
 * its turn ({@link earliestAdmission}); a lease's at its end (see
 * {@link admitUnits}); units charged after the fact (a cost reported by the
 * response) at the instant they are charged, past the burst if need be, so
 * that later requests wait for them.
 */
export function admitAt(state: BucketState, bucket: BucketLimit, cost: number, atMs: number): BucketState {
  const scale = scaleOf(bucket);
  return inReach(advance(view(state, atMs, scale), cost, scale), atMs);
}

/**
 * The state at most {@link MAX_DEPTH_MS} ahead of `nowMs`: a debt (units
 * charged past the burst) is kept up to the deepest a bucket may be, a
 * century, and no further, so that every instant stays a safe integer and a
 * Retry-After or a reset is a date. Only a charge, or a debt carried to a
 * slower rate, goes that far: what conforms is within the bucket's depth.
 */
function inReach(state: BucketState, nowMs: number): BucketState {
  const limitMs = nowMs + MAX_DEPTH_MS;
  return state.tatMs < limitMs ? state : { tatMs: limitMs, ticks: 0, perMs: state.perMs };
}

/**
 * The earliest instant, not before `fromMs`, at which a request of `cost`
 * conforms if nothing else is admitted meanwhile; null for a cost above the
 * burst, which never does. The bucket only refills while nothing is admitted, so
 * every later instant conforms too: the request's Retry-After when
 * `fromMs` is now, and a held request's turn on the state with every earlier
 * booking counted (see core/bookings.ts). It is
 * `ceil(TAT − (burst − cost) × T)`: the TAT less the room the request needs.
 */
export function earliestAdmission(
  state: BucketState,
  bucket: BucketLimit,
  cost: number,
  fromMs: number,
): number | null {
  if (cost > bucket.burst) return null;
  const scale = scaleOf(bucket);
  const s = inScale(state, scale.perMs);
  // ceil(tatMs + (ticks − (burst − cost) × unitTicks) / perMs) = tatMs − floor(((burst − cost) × unitTicks − ticks) / perMs)
  return Math.max(fromMs, s.tatMs - floorDifferenceRatio(bucket.burst - cost, scale.unitTicks, s.ticks, scale.perMs));
}

/** The wait in milliseconds until a request of `cost` at `nowMs` conforms; 0 when it does now, null when it never will. */
export function retryAfterMs(
  state: BucketState,
  nowMs: number,
  bucket: BucketLimit,
  cost: number = bucket.cost ?? 1,
): number | null {
  const at = earliestAdmission(state, bucket, cost, nowMs);
  return at === null ? null : at - nowMs;
}

/**
 * How many units a lease may take at `nowMs`, at most `wanted`: the whole
 * units the bucket holds now, `burst − ceil(spent / T)`.
 *
 * The units leased are counted as admitted at the lease's last instant
 * (`admitAt(state, bucket, units, expiresAtMs)`), not now: they may then be
 * spent at any instants from now to that one, in any pieces, and no request
 * the isolate admits with them, nor any the object admits after counting
 * them, takes the trace over the conformance bound (test/gcra.test.ts replays
 * it). Counted at now instead, units spent late would come on top of a
 * bucket refilled meanwhile. While the TAT is at least the lease's end, both
 * are the same.
 */
export function admitUnits(state: BucketState, nowMs: number, bucket: BucketLimit, wanted: number): number {
  const scale = scaleOf(bucket);
  const v = view(state, nowMs, scale);
  const free = bucket.burst - ceilRatio(v.aheadMs, scale.perMs, v.ticks, scale.unitTicks);
  return Math.max(0, Math.min(wanted, free));
}

/**
 * The effective window (see {@link Decision}) of a viewed state, for
 * requests of `cost` ≤ burst: with x = (burst − cost) × T − spent the room
 * left for one more, every request admissible now (⌊x / (cost × T)⌋ + 1 of
 * them) leaves `cost × T − x mod (cost × T)` to refill; with no room (x < 0),
 * −x.
 */
function effectiveWindowMs(v: View, cost: number, bucket: BucketLimit, scale: Scale): number {
  const { perMs, unitTicks } = scale;
  const room = (bucket.burst - cost) * unitTicks;
  const spent = v.aheadMs * perMs + v.ticks;
  const step = cost * unitTicks;
  if (Number.isSafeInteger(room) && Number.isSafeInteger(v.aheadMs * perMs) && Number.isSafeInteger(spent)) {
    const x = room - spent;
    return x < 0 ? Math.ceil(-x / perMs) : Math.ceil((step - (x % step)) / perMs);
  }
  const x = BigInt(bucket.burst - cost) * BigInt(unitTicks) - BigInt(v.aheadMs) * BigInt(perMs) - BigInt(v.ticks);
  const wait = x < 0n ? -x : BigInt(cost) * BigInt(unitTicks) - (x % (BigInt(cost) * BigInt(unitTicks)));
  return Number((wait + BigInt(perMs) - 1n) / BigInt(perMs));
}

/**
 * Describes an evaluation. `counted` says whether the request was admitted
 * and counted; a request this rule would admit can still be refused by
 * another rule checked with it, and is then not counted.
 */
export function describe(ev: Evaluation, nowMs: number, bucket: BucketLimit, counted: boolean): Decision {
  const scale = scaleOf(bucket);
  if (ev.never) {
    const v = view(ev.before, nowMs, scale);
    return {
      allowed: false,
      never: true,
      remaining: 0,
      retryAfterMs: null,
      resetMs: v.aheadMs + (v.ticks > 0 ? 1 : 0),
    };
  }
  const v = view(counted ? ev.state : ev.before, nowMs, scale);
  const remaining = bucket.burst - ceilRatio(v.aheadMs, scale.perMs, v.ticks, scale.unitTicks);
  if (!ev.allowed) {
    // What the bucket holds in units, though less than the request's cost: `r` is remaining quota units.
    const wait = (earliestAdmission(ev.before, bucket, ev.cost, nowMs) as number) - nowMs;
    return { allowed: false, never: false, remaining: Math.max(0, remaining), retryAfterMs: wait, resetMs: wait };
  }
  return {
    allowed: counted,
    never: false,
    remaining: Math.max(0, remaining),
    retryAfterMs: 0,
    resetMs: effectiveWindowMs(v, ev.cost, bucket, scale),
  };
}

/**
 * What an admitted request's `remaining` and `resetMs` (its {@link Decision})
 * become once `units` more are counted for it at the same instant (given
 * back when negative): a cost the response reports after the fact, told in
 * that response's headers before the charge is made. From the decision
 * alone: with c the cost and T the emission interval, the bucket held
 * `H = ⌊r / c⌋ × c + c − t / T` units after the request (t is the effective
 * window, see {@link effectiveWindowMs}), and holds `H − units` after the
 * charge, a debt when below 0. Rounded up to the millisecond, as `t` is.
 */
export function afterCharge(
  decided: { remaining: number; resetMs: number },
  cost: number,
  units: number,
  bucket: BucketLimit,
): { remaining: number; resetMs: number } {
  const unitMs = bucket.periodMs / bucket.limit;
  const stepMs = cost * unitMs;
  // A debt is kept for a century at most (inReach): the room is never below what a TAT a century ahead leaves.
  const deepestMs = (bucket.burst - cost) * unitMs - MAX_DEPTH_MS;
  if ((Math.floor(decided.remaining / cost) - units / cost) * stepMs - decided.resetMs < deepestMs) {
    return { remaining: 0, resetMs: Math.ceil(-deepestMs - 1e-6) };
  }
  // The room left for one more request, in milliseconds of refill (negative: a wait), after the charge: t is
  // rounded up, so the room is at least this and less than 1 ms more. Where a step's multiple is in that
  // millisecond, it may be on either side of it: read on it, the later of the two (a wait of a whole step).
  const least = (Math.floor(decided.remaining / cost) - units / cost) * stepMs - decided.resetMs;
  const multiple = Math.floor((least + 1) / stepMs) * stepMs;
  const onMultiple = multiple > least && multiple >= 0;
  const waitMs = onMultiple ? stepMs : least < 0 ? -least : stepMs - (least % stepMs);
  return {
    remaining: Math.max(0, decided.remaining - units),
    // Within a millionth of a millisecond of a whole one: that one (the arithmetic is in floating point).
    resetMs: Math.ceil(waitMs - 1e-6),
  };
}

/**
 * A charge's receipt, for handing its units back later: the state the charge
 * left (R), and the row's {@link HandBacks} when it was made.
 */
export type Receipt = { state: BucketState; givenBackMs: number };

/** What a row keeps for hand-backs beside its TAT: the milliseconds of TAT handed back so far, each hand-back rounded up. */
export type HandBacks = { givenBackMs: number };

/**
 * Hands back `units` of one charge: leased units never spent, or a request
 * another object refused. `bucket` is the one the charge was counted under;
 * `sinceMs` (M) is at least now and every instant a count has gone in at
 * since the charge (a lease's end may be later than now); `row` is the
 * row's hand-backs now, and D the milliseconds handed back since the receipt.
 *
 * Gives back `min(units × T, max(0, R − M − D))`. Since the receipt, every
 * count went in at an instant no later than M, and hand-backs took at most
 * D off; so from any TAT of at least M + D in place of R, every later count
 * would only have added its own cost, and the TAT without the units is at
 * most the TAT less that much. With nothing counted or handed back since,
 * it is exact: a TAT before now is a full bucket, as `R − units × T` would
 * be. Across a change of the bucket's scale (another limit) nothing is
 * given back. Returns the state and the row's hand-backs after it.
 */
export function giveBack(
  state: BucketState,
  bucket: BucketLimit,
  units: number,
  receipt: Receipt,
  { sinceMs, row }: { sinceMs: number; row: HandBacks },
): { state: BucketState; row: HandBacks } {
  const { perMs, unitTicks } = scaleOf(bucket);
  if (state.perMs !== perMs || receipt.state.perMs !== perMs) return { state, row };
  // Off the request path: in BigInt throughout, absolute instants in ticks included.
  const n = BigInt(perMs);
  const floorMs = BigInt(sinceMs) + BigInt(row.givenBackMs - receipt.givenBackMs);
  const ahead = (BigInt(receipt.state.tatMs) - floorMs) * n + BigInt(receipt.state.ticks);
  const wanted = BigInt(units) * BigInt(unitTicks);
  const take = ahead <= 0n ? 0n : ahead < wanted ? ahead : wanted;
  if (take === 0n) return { state, row };
  const tat = BigInt(state.tatMs) * n + BigInt(state.ticks) - take;
  return {
    state: { tatMs: Number(tat / n), ticks: Number(tat % n), perMs },
    row: { givenBackMs: row.givenBackMs + Number((take + n - 1n) / n) },
  };
}

/**
 * Hands back `units` counted under another rate, since carried over to this
 * one ({@link carry} keeps what is spent in units): they go back as units at
 * this rate, no more than what is ahead of `sinceMs` (at least now, and the
 * latest instant counts went in at: a lease's end). The charge's receipt is
 * in the old scale, so its own bound does not hold here; this one does: the
 * bucket is never made fuller than full at `sinceMs`, and units an isolate
 * hands back were counted, and never spent.
 */
export function giveBackCarried(state: BucketState, bucket: BucketLimit, units: number, sinceMs: number): BucketState {
  const { perMs, unitTicks } = scaleOf(bucket);
  if (state.perMs !== perMs) return state;
  const n = BigInt(perMs);
  const ahead = (BigInt(state.tatMs) - BigInt(sinceMs)) * n + BigInt(state.ticks);
  const wanted = BigInt(units) * BigInt(unitTicks);
  const take = ahead <= 0n ? 0n : ahead < wanted ? ahead : wanted;
  if (take === 0n) return state;
  const tat = BigInt(state.tatMs) * n + BigInt(state.ticks) - take;
  return { tatMs: Number(tat / n), ticks: Number(tat % n), perMs };
}

/**
 * The state counted under `from` as `to`, another rate, reads it at `nowMs`
 * (a tier, an override or an adaptive factor gave the client another limit,
 * or the rule another period): what is spent and not yet refilled is kept in
 * units, rounded up, and refills at the new rate from now on. A lower rate
 * then frees nothing, and a burst that scales with the limit keeps its share
 * spent. Under the same emission interval, and for a bucket already full,
 * it is the state itself (read in `to`'s scale as any state is).
 */
export function carry(state: BucketState, nowMs: number, from: BucketLimit, to: BucketLimit): BucketState {
  const was = scaleOf(from);
  const now = scaleOf(to);
  if (was.perMs === now.perMs && was.unitTicks === now.unitTicks) return state;
  const v = view(state, nowMs, was);
  if (v.aheadMs === 0 && v.ticks === 0) return state;
  // Off the request path, and rare: in BigInt. Spent units are ahead / was.unitTicks; in `to`'s ticks, × now.unitTicks.
  const ahead = BigInt(v.aheadMs) * BigInt(was.perMs) + BigInt(v.ticks);
  const scaled = (ahead * BigInt(now.unitTicks) + BigInt(was.unitTicks) - 1n) / BigInt(was.unitTicks);
  const n = BigInt(now.perMs);
  const aheadMs = scaled / n;
  // A debt carried to a slower rate lasts longer, up to a century (see inReach).
  if (aheadMs >= BigInt(MAX_DEPTH_MS)) return { tatMs: nowMs + MAX_DEPTH_MS, ticks: 0, perMs: now.perMs };
  return { tatMs: nowMs + Number(aheadMs), ticks: Number(scaled % n), perMs: now.perMs };
}

/** Checks one request against one bucket: counts it if it conforms. */
export function check(
  state: BucketState,
  nowMs: number,
  bucket: BucketLimit,
): { state: BucketState; decision: Decision } {
  const ev = evaluate(state, nowMs, bucket);
  return { state: ev.state, decision: describe(ev, nowMs, bucket, ev.allowed) };
}

// Exact integer arithmetic on safe integers. A product of what is spent in milliseconds
// and ticks per millisecond, or of units and ticks per unit, can pass 2⁵³ (see the
// module's ranges); each product is checked on its own, before a sum or difference
// could bring an inexact one back into range, and those few are done in BigInt.

/** `a × b + c ≤ x × y`, for non-negative safe integers. */
function sumAtMost(a: number, b: number, c: number, x: number, y: number): boolean {
  const ab = a * b;
  const xy = x * y;
  if (Number.isSafeInteger(ab) && Number.isSafeInteger(xy) && Number.isSafeInteger(ab + c)) return ab + c <= xy;
  return BigInt(a) * BigInt(b) + BigInt(c) <= BigInt(x) * BigInt(y);
}

/** `ceil((a × b + c) / d)`, for non-negative safe integers and d ≥ 1; a safe integer divided once is exact after rounding to an integer. */
function ceilRatio(a: number, b: number, c: number, d: number): number {
  const ab = a * b;
  if (Number.isSafeInteger(ab) && Number.isSafeInteger(ab + c)) return Math.ceil((ab + c) / d);
  const big = BigInt(a) * BigInt(b) + BigInt(c);
  return Number((big + BigInt(d) - 1n) / BigInt(d));
}

/**
 * `floor((x × y − c) / d)`, for non-negative safe integers, `c < d` and d ≥ 1;
 * negative when `c > x × y`, which is then below d and safe. Past 2⁵³, `x × y`
 * is far above `c`, and BigInt's division, which truncates, floors.
 */
function floorDifferenceRatio(x: number, y: number, c: number, d: number): number {
  const xy = x * y;
  if (Number.isSafeInteger(xy)) return Math.floor((xy - c) / d);
  return Number((BigInt(x) * BigInt(y) - BigInt(c)) / BigInt(d));
}

/** `[floor(s / d), s mod d]` for `s = c + a × b`, non-negative safe integers and d ≥ 1. */
function divideSum(c: number, a: number, b: number, d: number): [number, number] {
  const ab = a * b;
  if (Number.isSafeInteger(ab) && Number.isSafeInteger(ab + c)) {
    const s = ab + c;
    return [Math.floor(s / d), s % d];
  }
  const s = BigInt(c) + BigInt(a) * BigInt(b);
  return [Number(s / BigInt(d)), Number(s % BigInt(d))];
}
