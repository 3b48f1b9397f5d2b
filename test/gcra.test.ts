import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { MAX_PERIOD_MS } from "../src/core/duration.ts";
import {
  admitAt,
  admitUnits,
  afterCharge,
  type BucketLimit,
  type BucketState,
  carry,
  check,
  depthMs,
  describe as describeBucket,
  earliestAdmission,
  evaluate,
  fullFromMs,
  fullState,
  giveBack,
  type HandBacks,
  MAX_DEPTH_MS,
  type Receipt,
  retryAfterMs,
} from "../src/core/gcra.ts";
import {
  type Admission,
  firstOverBound,
  oracleAdmits,
  oracleEarliest,
  oracleEffectiveWindow,
  oracleRoom,
} from "./support/bucket-oracle.ts";

/** A second in late 2026, so instants have realistic magnitudes. */
const T0 = 1_795_000_000_000;
const tenPerSecond: BucketLimit = { limit: 10, periodMs: 1_000, burst: 20 };

/** Sends `count` requests of the bucket's cost at `nowMs`, one after another, and returns the decisions and the state. */
function burst(state: BucketState, nowMs: number, bucket: BucketLimit, count: number) {
  const decisions = [];
  for (let i = 0; i < count; i++) {
    const r = check(state, nowMs, bucket);
    state = r.state;
    decisions.push(r.decision);
  }
  return { state, decisions };
}

describe("limit = 10, period = 1s, burst = 20", () => {
  it("admits 20 at once, counting remaining down from 19 to 0, and refuses the 21st with Retry-After 100 ms", () => {
    const { decisions } = burst(fullState(T0, tenPerSecond), T0, tenPerSecond, 21);
    expect(decisions.slice(0, 20).map((d) => d.allowed)).toEqual(new Array(20).fill(true));
    expect(decisions.slice(0, 20).map((d) => d.remaining)).toEqual([
      19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0,
    ]);
    expect(decisions[20]).toEqual({ allowed: false, never: false, remaining: 0, retryAfterMs: 100, resetMs: 100 });
  });

  it("then admits one every 100 ms, and refuses a second in the same 100 ms until its end", () => {
    let { state } = burst(fullState(T0, tenPerSecond), T0, tenPerSecond, 20);
    for (let k = 1; k <= 30; k++) {
      expect(check(state, T0 + k * 100 - 1, tenPerSecond).decision).toMatchObject({ allowed: false, retryAfterMs: 1 });
      const admitted = check(state, T0 + k * 100, tenPerSecond);
      expect(admitted.decision).toMatchObject({ allowed: true, remaining: 0, retryAfterMs: 0, resetMs: 100 });
      state = admitted.state;
      expect(check(state, T0 + k * 100 + 30, tenPerSecond).decision).toMatchObject({
        allowed: false,
        retryAfterMs: 70,
      });
    }
  });

  it("admits the whole burst again once the bucket has refilled for 2 s, and not 1 ms before", () => {
    const { state } = burst(fullState(T0, tenPerSecond), T0, tenPerSecond, 20);
    expect(fullFromMs(state)).toBe(T0 + 2_000);
    expect(evaluate(state, T0 + 1_999, tenPerSecond, 20).allowed).toBe(false);
    expect(burst(state, T0 + 2_000, tenPerSecond, 20).decisions.every((d) => d.allowed)).toBe(true);
  });

  it("tells, 150 ms after a whole burst, r = 0 and t = 50 ms: half a unit has refilled, the next whole one in 50 ms", () => {
    const { state } = burst(fullState(T0, tenPerSecond), T0, tenPerSecond, 20);
    // 18.5 spent at 150 ms: one more makes 19.5; a further one fits at 19, 50 ms later.
    expect(check(state, T0 + 150, tenPerSecond).decision).toMatchObject({ allowed: true, remaining: 0, resetMs: 50 });
  });

  it("tells the first request r = 19 and t = 100 ms: once the 19 are spent, the next fits 100 ms later", () => {
    expect(check(fullState(T0, tenPerSecond), T0, tenPerSecond).decision).toEqual({
      allowed: true,
      never: false,
      remaining: 19,
      retryAfterMs: 0,
      resetMs: 100,
    });
  });

  it("admits 4 requests of cost 5 at once, and the fifth 500 ms later", () => {
    const costly = { ...tenPerSecond, cost: 5 };
    const { state, decisions } = burst(fullState(T0, costly), T0, costly, 5);
    expect(decisions.map((d) => [d.allowed, d.remaining, d.retryAfterMs])).toEqual([
      [true, 15, 0],
      [true, 10, 0],
      [true, 5, 0],
      [true, 0, 0],
      [false, 0, 500],
    ]);
    expect(check(state, T0 + 499, costly).decision.allowed).toBe(false);
    expect(check(state, T0 + 500, costly).decision).toMatchObject({ allowed: true, remaining: 0, resetMs: 500 });
  });

  it("refuses a cost of 21 as never admissible, even from a full bucket: no Retry-After, nothing spent", () => {
    const full = fullState(T0, tenPerSecond);
    const ev = evaluate(full, T0, tenPerSecond, 21);
    expect(ev).toMatchObject({ allowed: false, never: true });
    expect(ev.state).toBe(full);
    expect(describeBucket(ev, T0, tenPerSecond, false)).toEqual({
      allowed: false,
      never: true,
      remaining: 0,
      retryAfterMs: null,
      resetMs: 0,
    });
    expect(earliestAdmission(full, tenPerSecond, 21, T0)).toBeNull();
    expect(retryAfterMs(full, T0, tenPerSecond, 21)).toBeNull();
    // A cost of exactly the burst fits a full bucket.
    expect(evaluate(full, T0, tenPerSecond, 20)).toMatchObject({ allowed: true, never: false });
  });

  it("says, for a cost above the burst, when the bucket is full again (t), after 5 requests: 500 ms", () => {
    const { state } = burst(fullState(T0, tenPerSecond), T0, tenPerSecond, 5);
    expect(describeBucket(evaluate(state, T0, tenPerSecond, 1_000), T0, tenPerSecond, false)).toMatchObject({
      never: true,
      resetMs: 500,
    });
  });

  it("spends nothing on a refusal: a refused request of cost 15 leaves the bucket as it was (the peers' bucket goes negative)", () => {
    const { state } = burst(fullState(T0, tenPerSecond), T0, tenPerSecond, 10);
    const ev = evaluate(state, T0, tenPerSecond, 15);
    expect(ev.allowed).toBe(false);
    expect(ev.state).toBe(state);
    // The 10 left are still there.
    expect(evaluate(state, T0, tenPerSecond, 10).allowed).toBe(true);
  });
});

describe("exact arithmetic", () => {
  it.each([
    // Each request after the burst conforms at ⌈(k − 1) × 333⅓⌉ ms, and the TAT stays ahead of it, so nothing is lost.
    { burst: 2, first: [0, 0, 334, 667, 1_000, 1_334], last: 999_667 },
    // With no tolerance, a request at 334 ms comes ⅔ ms after its instant, and the next may come only 333⅓ ms after it:
    // two in [334, 667] would be over 1 + 333/333⅓. Each whole-millisecond arrival loses its fraction: 334 ms each.
    { burst: 1, first: [0, 334, 668, 1_002, 1_336, 1_670], last: 1_002_000 },
  ])(
    "paces 3 per second, burst $burst, at each request's Retry-After, exactly: the 3 001st at $last ms",
    ({ burst, first, last }) => {
      const third: BucketLimit = { limit: 3, periodMs: 1_000, burst };
      let state = fullState(T0, third);
      const turns: number[] = [];
      let nowMs = T0;
      for (let k = 0; k <= 3_000; k++) {
        nowMs += retryAfterMs(state, nowMs, third, 1)!;
        const r = check(state, nowMs, third);
        expect(r.decision.allowed).toBe(true);
        state = r.state;
        turns.push(nowMs - T0);
      }
      expect(turns.slice(0, 6)).toEqual(first);
      expect(turns[3_000]).toBe(last);
    },
  );

  it("reads a state written under another limit with its fraction rounded up, never earlier", () => {
    // 333⅓ ms after T0, written by 3 per second.
    const state: BucketState = { tatMs: T0 + 333, ticks: 1, perMs: 3 };
    const oneMsEach: BucketLimit = { limit: 1_000, periodMs: 1_000, burst: 1 };
    const sevenPerSecond: BucketLimit = { limit: 7, periodMs: 1_000, burst: 1 };
    expect(earliestAdmission(state, oneMsEach, 1, T0)).toBe(T0 + 334);
    expect(earliestAdmission(state, sevenPerSecond, 1, T0)).toBe(T0 + 334);
    // 333⅓ + 1 000/7 = 476.19…; 333 + 3/7 + 1 000/7 = 476.29… under 7 per second.
    expect(admitAt(state, sevenPerSecond, 1, T0)).toEqual({ tatMs: T0 + 476, ticks: 2, perMs: 7 });
  });

  it("decides a bucket of 999 999 937 per 365 days, burst 999 999 937, exactly (ticks past 2⁵³)", () => {
    const huge: BucketLimit = { limit: 999_999_937, periodMs: MAX_PERIOD_MS, burst: 999_999_937 };
    const all = evaluate(fullState(T0, huge), T0, huge, 999_999_937);
    expect(all.allowed).toBe(true);
    // One unit's emission interval is 31.536 001 98… ms.
    expect(describeBucket(evaluate(all.state, T0, huge, 1), T0, huge, false)).toMatchObject({ retryAfterMs: 32 });
    expect(evaluate(all.state, T0 + 31, huge, 1).allowed).toBe(false);
    expect(evaluate(all.state, T0 + 32, huge, 1).allowed).toBe(true);
    expect(fullFromMs(all.state)).toBe(T0 + MAX_PERIOD_MS);
    expect(admitUnits(all.state, T0 + 31_536_001, huge, Number.MAX_SAFE_INTEGER)).toBe(999_999); // ⌊31 536 001 / 31.536 001 98…⌋
    // Filled to the brim: all but one, then the last one exactly fits, and one more does not.
    const allButOne = evaluate(fullState(T0, huge), T0, huge, 999_999_936);
    const last = evaluate(allButOne.state, T0, huge, 1);
    expect(last.allowed).toBe(true);
    expect(evaluate(allButOne.state, T0, huge, 2).allowed).toBe(false);
    expect(last.state).toEqual(all.state);
  });

  it("measures a bucket's depth in time as burst × period / limit, rounded up", () => {
    expect(depthMs(tenPerSecond)).toBe(2_000);
    expect(depthMs({ limit: 3, periodMs: 1_000, burst: 2 })).toBe(667);
    expect(depthMs({ limit: 1, periodMs: MAX_PERIOD_MS, burst: 100 })).toBe(MAX_DEPTH_MS);
  });
});

describe("leases", () => {
  it("take the whole units the bucket holds, at most as many as wanted: 20 from a full bucket, 0 after a burst, 1 100 ms later", () => {
    const full = fullState(T0, tenPerSecond);
    expect(admitUnits(full, T0, tenPerSecond, 50)).toBe(20);
    expect(admitUnits(full, T0, tenPerSecond, 5)).toBe(5);
    const { state } = burst(full, T0, tenPerSecond, 20);
    expect(admitUnits(state, T0, tenPerSecond, 50)).toBe(0);
    expect(admitUnits(state, T0 + 99, tenPerSecond, 50)).toBe(0);
    expect(admitUnits(state, T0 + 100, tenPerSecond, 50)).toBe(1);
  });

  it("are counted at their end: counted when granted, units spent late would come on top of a bucket refilled meanwhile", () => {
    // 20 leased at 0 for 1 s, and spent by an isolate at 1 000 ms. The object then admits what its count allows at 2 000 ms.
    const grantedAt = fullState(T0, tenPerSecond);
    const units = admitUnits(grantedAt, T0, tenPerSecond, 20);
    const spent = [{ atMs: T0 + 1_000, cost: units }];
    const objectAdmits = (state: BucketState) => {
      const admitted = [...spent];
      for (
        let ok = evaluate(state, T0 + 2_000, tenPerSecond, 1);
        ok.allowed;
        ok = evaluate(ok.state, T0 + 2_000, tenPerSecond, 1)
      )
        admitted.push({ atMs: T0 + 2_000, cost: 1 });
      return admitted;
    };
    // Counted at 0: 20 more at 2 000 ms, 40 within [1 000, 2 000], over 20 + 10.
    expect(firstOverBound(objectAdmits(admitAt(grantedAt, tenPerSecond, units, T0)), tenPerSecond)).toBe(T0 + 2_000);
    // Counted at 1 000: 10 more at 2 000 ms, 30 within that second.
    const atEnd = objectAdmits(admitAt(grantedAt, tenPerSecond, units, T0 + 1_000));
    expect(atEnd.length - 1).toBe(10);
    expect(firstOverBound(atEnd, tenPerSecond)).toBeNull();
  });

  /** Hands back on a row that has handed back nothing, at `sinceMs`. */
  const handBack = (state: BucketState, units: number, receipt: BucketState, sinceMs: number) =>
    giveBack(state, tenPerSecond, units, { state: receipt, givenBackMs: 0 }, { sinceMs, row: { givenBackMs: 0 } })
      .state;

  it("hand back what was not spent: 15 of 20 at the lease's end leave 15 in the bucket; 1.5 s later, only what is still ahead", () => {
    const full = fullState(T0, tenPerSecond);
    const leased = admitAt(full, tenPerSecond, 20, T0 + 1_000);
    // 5 spent by 1 000 ms: the bucket then holds 15, and is full again at 1 500 ms.
    const back = handBack(leased, 15, leased, T0 + 1_000);
    expect(back).toEqual({ tatMs: T0 + 1_500, ticks: 0, perMs: 1 });
    expect(admitUnits(back, T0 + 1_000, tenPerSecond, 50)).toBe(15);
    // Handed back at 2 500 ms, only what is still ahead goes: full from then on, as it would be.
    expect(fullFromMs(handBack(leased, 15, leased, T0 + 2_500))).toBe(T0 + 2_500);
  });

  it("hand back a request another object refused: exactly, even behind a later one; nothing once a count since went in past its receipt", () => {
    const full = fullState(T0, tenPerSecond);
    const first = evaluate(full, T0, tenPerSecond, 3).state; // 300 ms ahead
    const later = evaluate(first, T0 + 50, tenPerSecond, 2).state; // 500 ms ahead of T0
    expect(handBack(later, 3, first, T0 + 50)).toEqual(evaluate(full, T0 + 50, tenPerSecond, 2).state);
    // A lease counted since ends at 2 s: counts go in there, beyond the first request's receipt.
    const leased = admitAt(later, tenPerSecond, 1, T0 + 2_000);
    expect(handBack(leased, 3, first, T0 + 2_000)).toBe(leased);
  });

  it("hand back behind an earlier hand-back no more than what that one left ahead (the case fast-check found)", () => {
    // Leases A and B of 3 at 0, ending at once; A handed back whole. C takes 19 at 270 ms and spends them all.
    const row0 = { givenBackMs: 0 };
    const a = admitAt(fullState(T0, tenPerSecond), tenPerSecond, 3, T0);
    const b = admitAt(a, tenPerSecond, 3, T0);
    const afterA = giveBack(b, tenPerSecond, 3, { state: a, givenBackMs: 0 }, { sinceMs: T0, row: row0 });
    expect(afterA).toEqual({ state: a, row: { givenBackMs: 300 } });
    expect(admitUnits(afterA.state, T0 + 270, tenPerSecond, 50)).toBe(19);
    const c = admitAt(afterA.state, tenPerSecond, 19, T0 + 270);
    // B handed back: its receipt, 600 ms, counted A's 300 ms, handed back since. Without them, what is ahead of
    // 270 ms is 30 ms: the TAT goes back to 2 170 ms, C's 19 from a full bucket. Taking B's whole 300 ms would
    // leave 1 900 ms, and 3 more would then be admitted at 270 ms beside C's 19: 22 at once, over the burst.
    const afterB = giveBack(c, tenPerSecond, 3, { state: b, givenBackMs: 0 }, { sinceMs: T0 + 270, row: afterA.row });
    expect(afterB.state).toEqual({ tatMs: T0 + 2_170, ticks: 0, perMs: 1 });
    expect(afterB.row).toEqual({ givenBackMs: 330 });
  });

  it("hand back nothing across a change of limit", () => {
    const third: BucketLimit = { limit: 3, periodMs: 1_000, burst: 5 };
    const charged = evaluate(fullState(T0, third), T0, third, 2).state;
    expect(handBack(charged, 2, charged, T0)).toBe(charged);
  });
});

/** Buckets small enough that a few dozen requests contend, with periods that do not divide by the limit. */
const smallBucket = fc
  .record({
    limit: fc.integer({ min: 1, max: 12 }),
    periodMs: fc.oneof(fc.constantFrom(1_000, 100, 60_000), fc.integer({ min: 1, max: 2_000 })),
    burst: fc.integer({ min: 1, max: 25 }),
  })
  .map((b): BucketLimit => b);

/** Buckets at the edges of the ranges, where what is spent, in ticks, passes 2⁵³. */
const largeBucket = fc
  .record({
    limit: fc.oneof(fc.constantFrom(999_999_937, 1_000_000_000, 1, 7), fc.integer({ min: 1, max: 1_000_000_000 })),
    periodMs: fc.oneof(
      fc.constantFrom(MAX_PERIOD_MS, MAX_PERIOD_MS - 1, 86_400_000),
      fc.integer({ min: 1, max: MAX_PERIOD_MS }),
    ),
    burst: fc.oneof(fc.constantFrom(1_000_000_000, 999_999_929), fc.integer({ min: 1, max: 1_000_000_000 })),
  })
  // No deeper than 100 years: the deepest burst the limit and period allow.
  .map(
    (b): BucketLimit => ({
      ...b,
      burst: Math.max(1, Math.min(b.burst, Math.floor((MAX_DEPTH_MS * b.limit) / b.periodMs))),
    }),
  );

const anyBucket = fc.oneof({ weight: 3, arbitrary: smallBucket }, { weight: 1, arbitrary: largeBucket });

/** A request: a gap before it in thousandths of the bucket's depth (squared, so most are short), its cost in thousandths of the burst. */
const request = fc.record({
  gap: fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 800 })),
  cost: fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 1_150 })),
  /** Another rule checked with it refuses it: it is not counted here. */
  otherRefuses: fc.boolean(),
});

const gapMs = (bucket: BucketLimit, gap: number) => Math.floor((gap / 1_000) ** 2 * depthMs(bucket));
const costOf = (bucket: BucketLimit, share: number) => Math.max(1, Math.ceil((share / 1_000) * bucket.burst));

describe("against the conformance bound, over random traces", () => {
  it("decides every request as the bound does, spends nothing on a refusal, and tells exact Retry-After, remaining and t", () => {
    let refused = 0;
    let never = 0;
    fc.assert(
      fc.property(anyBucket, fc.array(request, { minLength: 1, maxLength: 40, size: "max" }), (bucket, requests) => {
        let state = fullState(T0, bucket);
        let nowMs = T0;
        const history: Admission[] = [];
        for (const r of requests) {
          nowMs += gapMs(bucket, r.gap);
          const cost = costOf(bucket, r.cost);
          const why = JSON.stringify({ bucket, nowMs: nowMs - T0, cost, state, history });
          const ev = evaluate(state, nowMs, bucket, cost);
          expect(ev.never, why).toBe(cost > bucket.burst);
          expect(ev.allowed, why).toBe(oracleAdmits(history, nowMs, cost, bucket));
          const counted = ev.allowed && !r.otherRefuses;
          const decision = describeBucket(ev, nowMs, bucket, counted);
          if (!ev.allowed) {
            expect(ev.state, why).toBe(state);
            if (decision.never) {
              never++;
              expect(decision.retryAfterMs).toBeNull();
              expect(decision.resetMs, why).toBe(oracleEarliest(history, nowMs, bucket.burst, bucket)! - nowMs);
              continue;
            }
            refused++;
            const wait = decision.retryAfterMs;
            expect(wait, why).toBe(oracleEarliest(history, nowMs, cost, bucket)! - nowMs);
            expect(wait).toBeGreaterThan(0);
            expect(decision.resetMs).toBe(wait);
            // The core agrees with itself: admitted at now + Retry-After, refused 1 ms before.
            expect(evaluate(state, nowMs + wait, bucket, cost).allowed, why).toBe(true);
            expect(evaluate(state, nowMs + wait - 1, bucket, cost).allowed, why).toBe(false);
            expect(earliestAdmission(state, bucket, cost, nowMs), why).toBe(nowMs + wait);
            continue;
          }
          expect(earliestAdmission(state, bucket, cost, nowMs), why).toBe(nowMs);
          if (counted) {
            history.push({ atMs: nowMs, cost });
            state = ev.state;
          }
          expect(decision, why).toMatchObject({ allowed: counted, never: false, retryAfterMs: 0 });
          expect(decision.remaining, why).toBe(oracleRoom(history, nowMs, bucket));
          expect(decision.resetMs, why).toBe(oracleEffectiveWindow(history, nowMs, cost, bucket));
          expect(admitUnits(state, nowMs, bucket, Number.MAX_SAFE_INTEGER), why).toBe(decision.remaining);
        }
        expect(firstOverBound(history, bucket)).toBeNull();
      }),
      { numRuns: 300 },
    );
    // The traces make many requests wait, and some ask for more than the burst (coverage, not the property).
    expect(refused).toBeGreaterThan(500);
    expect(never).toBeGreaterThan(150);
  });
});

/**
 * One key's bucket with held requests, decided as an object would decide
 * them with the core's functions: the turns due are counted first; a request
 * whose turn is now is admitted, one whose turn is within its delay is booked
 * for it (behind every booking before it), the rest refused.
 */
class HeldKey {
  readonly bucket: BucketLimit;
  state: BucketState;
  queue: Admission[] = [];
  readonly admitted: Admission[] = [];

  constructor(bucket: BucketLimit, nowMs: number) {
    this.bucket = bucket;
    this.state = fullState(nowMs, bucket);
  }

  settle(nowMs: number): void {
    while (this.queue.length > 0 && this.queue[0]!.atMs <= nowMs) {
      const due = this.queue.shift()!;
      this.state = admitAt(this.state, this.bucket, due.cost, due.atMs);
      this.admitted.push(due);
    }
  }

  /** The state with every booking counted at its turn. */
  tail(): BucketState {
    return this.queue.reduce((s, b) => admitAt(s, this.bucket, b.cost, b.atMs), this.state);
  }

  arrive(nowMs: number, cost: number, maxDelayMs: number): "admitted" | "held" | "refused" | "never" {
    this.settle(nowMs);
    const fromMs = Math.max(nowMs, this.queue.at(-1)?.atMs ?? nowMs);
    const turn = earliestAdmission(this.tail(), this.bucket, cost, fromMs);
    if (turn === null) return "never";
    // With no bookings ahead, the turn is now exactly when the request conforms now.
    if (this.queue.length === 0) expect(turn === nowMs).toBe(evaluate(this.state, nowMs, this.bucket, cost).allowed);
    // The earliest: the bound admits it at its turn, on everything admitted or booked, and not 1 ms before.
    const before = [...this.admitted, ...this.queue];
    expect(oracleAdmits(before, turn, cost, this.bucket)).toBe(true);
    if (turn > fromMs) expect(oracleAdmits(before, turn - 1, cost, this.bucket)).toBe(false);
    if (turn === nowMs) {
      this.state = admitAt(this.state, this.bucket, cost, nowMs);
      this.admitted.push({ atMs: nowMs, cost });
      return "admitted";
    }
    if (turn - nowMs > maxDelayMs) return "refused";
    this.queue.push({ atMs: turn, cost });
    return "held";
  }
}

describe("held requests, paced at their conformance instants", () => {
  it("books 10 over a burst of 20 one every 100 ms, in arrival order, and refuses those past their delay", () => {
    const key = new HeldKey(tenPerSecond, T0);
    const outcomes = Array.from({ length: 35 }, () => key.arrive(T0, 1, 1_000));
    expect(outcomes).toEqual([
      ...new Array(20).fill("admitted"),
      ...new Array(10).fill("held"),
      ...new Array(5).fill("refused"),
    ]);
    expect(key.queue.map((b) => b.atMs - T0)).toEqual([100, 200, 300, 400, 500, 600, 700, 800, 900, 1_000]);
    // A request arriving later, with no delay, is refused behind them even once the bucket alone would admit it.
    expect(key.arrive(T0 + 150, 1, 0)).toBe("refused");
    expect(key.arrive(T0 + 150, 5, 2_000)).toBe("held");
    expect(key.queue.at(-1)!.atMs - T0).toBe(1_500);
  });

  it("replaying every admission, immediate and booked, finds no interval over the bound, and turns never go back", () => {
    let held = 0;
    fc.assert(
      fc.property(
        anyBucket,
        fc.array(fc.record({ request, delay: fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 2_000 })) }), {
          minLength: 1,
          maxLength: 40,
          size: "max",
        }),
        (bucket, arrivals) => {
          const key = new HeldKey(bucket, T0);
          let nowMs = T0;
          for (const { request: r, delay } of arrivals) {
            nowMs += gapMs(bucket, r.gap);
            const cost = costOf(bucket, r.cost);
            const outcome = key.arrive(nowMs, cost, Math.floor((delay / 1_000) * depthMs(bucket)));
            if (outcome === "held") held++;
            expect(outcome === "never").toBe(cost > bucket.burst);
            const turns = key.queue.map((b) => b.atMs);
            expect(turns).toEqual([...turns].sort((a, b) => a - b));
          }
          key.settle(Number.MAX_SAFE_INTEGER);
          expect(firstOverBound(key.admitted, bucket)).toBeNull();
        },
      ),
      { numRuns: 300 },
    );
    expect(held).toBeGreaterThan(400);
  });
});

describe("leases and hand-backs never take a trace over the bound", () => {
  /**
   * What happens to a key: requests to the object (some refused by another
   * object, and handed back), leases granted, leased units spent by an
   * isolate, and the rest of a lease handed back.
   */
  const step = fc.oneof(
    { weight: 2, arbitrary: fc.record({ kind: fc.constant("request" as const), request }) },
    {
      weight: 3,
      arbitrary: fc.record({
        kind: fc.constant("lease" as const),
        gap: fc.integer({ min: 0, max: 500 }),
        /** Thousandths of the burst. */
        wanted: fc.integer({ min: 0, max: 1_000 }),
        /** How long it lasts, in thousandths of the bucket's depth (squared, as gaps are). */
        life: fc.integer({ min: 0, max: 1_200 }),
      }),
    },
    {
      weight: 3,
      arbitrary: fc.record({
        kind: fc.constant("spend" as const),
        gap: fc.integer({ min: 0, max: 500 }),
        pick: fc.nat(),
        /** Thousandths of what the lease has left. */
        share: fc.integer({ min: 0, max: 1_000 }),
      }),
    },
    {
      weight: 2,
      arbitrary: fc.record({
        kind: fc.constant("hand back" as const),
        gap: fc.integer({ min: 0, max: 500 }),
        pick: fc.nat(),
      }),
    },
  );

  it("whenever an isolate spends leased units within the lease, the object counting them at its end, and units go back", () => {
    let spent = 0;
    let givenBack = 0;
    fc.assert(
      fc.property(anyBucket, fc.array(step, { minLength: 1, maxLength: 50, size: "max" }), (bucket, steps) => {
        let state = fullState(T0, bucket);
        let nowMs = T0;
        /** The latest instant any count has gone in at. */
        let countedAtMs = T0;
        const admitted: Admission[] = [];
        let row: HandBacks = { givenBackMs: 0 };
        const leases: { left: number; expiresAtMs: number; receipt: Receipt }[] = [];
        const handBack = (units: number, receipt: Receipt) => {
          const before = state;
          ({ state, row } = giveBack(state, bucket, units, receipt, { sinceMs: Math.max(nowMs, countedAtMs), row }));
          if (state !== before) givenBack++;
        };
        for (const s of steps) {
          nowMs += gapMs(bucket, s.kind === "request" ? s.request.gap : s.gap);
          if (s.kind === "request") {
            const cost = costOf(bucket, s.request.cost);
            const ev = evaluate(state, nowMs, bucket, cost);
            if (!ev.allowed) continue;
            state = ev.state;
            countedAtMs = Math.max(countedAtMs, nowMs);
            // Refused by another object: it never reaches the origin, and its units go back.
            if (s.request.otherRefuses) handBack(cost, { state: ev.state, givenBackMs: row.givenBackMs });
            else admitted.push({ atMs: nowMs, cost });
          } else if (s.kind === "lease") {
            const wanted = Math.ceil((s.wanted / 1_000) * bucket.burst);
            const units = admitUnits(state, nowMs, bucket, wanted);
            // No more than evaluate admits at once, and as many as it does, up to what was wanted.
            expect(units).toBeLessThanOrEqual(wanted);
            if (units > 0) expect(evaluate(state, nowMs, bucket, units).allowed).toBe(true);
            if (units < wanted) expect(evaluate(state, nowMs, bucket, units + 1).allowed).toBe(false);
            if (units === 0) continue;
            const expiresAtMs = nowMs + gapMs(bucket, s.life);
            state = admitAt(state, bucket, units, expiresAtMs);
            countedAtMs = Math.max(countedAtMs, expiresAtMs);
            leases.push({ left: units, expiresAtMs, receipt: { state, givenBackMs: row.givenBackMs } });
          } else if (s.kind === "spend") {
            const live = leases.filter((l) => l.left > 0 && l.expiresAtMs >= nowMs);
            if (live.length === 0) continue;
            const lease = live[s.pick % live.length]!;
            const cost = Math.max(1, Math.ceil((s.share / 1_000) * lease.left));
            lease.left -= cost;
            admitted.push({ atMs: nowMs, cost });
            spent++;
          } else {
            // What is left of a lease, live or ended, handed back: the lease is closed.
            const open = leases.filter((l) => l.left > 0);
            if (open.length === 0) continue;
            const lease = open[s.pick % open.length]!;
            handBack(lease.left, lease.receipt);
            lease.left = 0;
          }
          // The object never holds more than the bound allows after what was admitted (it also counts leased units
          // not yet spent): a hand-back that gave back too much shows here before any request takes advantage of it.
          expect(admitUnits(state, nowMs, bucket, bucket.burst)).toBeLessThanOrEqual(
            oracleRoom(admitted, nowMs, bucket),
          );
        }
        expect(firstOverBound(admitted, bucket), JSON.stringify({ bucket, admitted })).toBeNull();
      }),
      { numRuns: 1_000 },
    );
    expect(spent).toBeGreaterThan(300);
    expect(givenBack).toBeGreaterThan(600);
  });
});

describe("carried to another rate (a tier, an override or a factor gives the client another limit)", () => {
  it("keeps what is spent in units: 20 spent at 10 a second are 20 spent at 5 a second, refilled one every 200 ms", () => {
    const fivePerSecond: BucketLimit = { limit: 5, periodMs: 1_000, burst: 20 };
    const { state } = burst(fullState(T0, tenPerSecond), T0, tenPerSecond, 20);
    const carried = carry(state, T0, tenPerSecond, fivePerSecond);
    expect(carried).toEqual({ tatMs: T0 + 4_000, ticks: 0, perMs: 1 });
    expect(check(carried, T0 + 199, fivePerSecond).decision).toMatchObject({ allowed: false, retryAfterMs: 1 });
    expect(check(carried, T0 + 200, fivePerSecond).decision).toMatchObject({ allowed: true, remaining: 0 });
    // And back: 4 s ahead at 5 a second are 2 s ahead at 10 a second.
    expect(carry(carried, T0, fivePerSecond, tenPerSecond)).toEqual(state);
  });

  it("is the state itself under the same emission interval, and for a full bucket", () => {
    const { state } = burst(fullState(T0, tenPerSecond), T0, tenPerSecond, 7);
    expect(carry(state, T0, tenPerSecond, { limit: 20, periodMs: 2_000, burst: 3 })).toBe(state);
    expect(carry(state, T0 + 700, tenPerSecond, { limit: 3, periodMs: 1_000, burst: 20 })).toBe(state);
  });

  it("admits at once exactly what the bucket admitted before, whatever the two rates, when the burst is the same", () => {
    fc.assert(
      fc.property(
        anyBucket,
        anyBucket,
        fc.integer({ min: 0, max: 1_000 }),
        fc.integer({ min: 0, max: 1_200 }),
        (from, other, spentShare, gap) => {
          const to: BucketLimit = {
            limit: other.limit,
            periodMs: other.periodMs,
            burst: Math.max(1, Math.min(from.burst, Math.floor((MAX_DEPTH_MS * other.limit) / other.periodMs))),
          };
          const bucket = { ...from, burst: to.burst };
          const spent = Math.floor((spentShare / 1_000) * bucket.burst);
          const state = spent === 0 ? fullState(T0, bucket) : admitAt(fullState(T0, bucket), bucket, spent, T0);
          const nowMs = T0 + gapMs(bucket, gap);
          const carried = carry(state, nowMs, bucket, to);
          expect(admitUnits(carried, nowMs, to, to.burst)).toBe(admitUnits(state, nowMs, bucket, bucket.burst));
          // Never full sooner than what is spent takes to refill at the new rate, rounded up to a tick.
          if (fullFromMs(state) > nowMs) expect(fullFromMs(carried)).toBeGreaterThan(nowMs);
        },
      ),
      { numRuns: 2_000 },
    );
  });
});

describe("a charge past what the bucket can hold (a cost the origin reports after the fact)", () => {
  it("puts the bucket at most 100 years in debt, the most a bucket's depth may be: a Retry-After of a century, not of a billion years", () => {
    const yearly: BucketLimit = { limit: 1, periodMs: MAX_PERIOD_MS, burst: 2 };
    const state = admitAt(fullState(T0, yearly), yearly, 1_000_000_000, T0);
    expect(state).toEqual({ tatMs: T0 + MAX_DEPTH_MS, ticks: 0, perMs: 1 });
    expect(retryAfterMs(state, T0 + 1_000, yearly)).toBe(MAX_DEPTH_MS - 1_000 - MAX_PERIOD_MS);
    // A debt within the century is kept whole: 10⁹ units at 10 a second are 10⁸ s.
    const tenASecond: BucketLimit = { limit: 10, periodMs: 1_000, burst: 10 };
    expect(admitAt(fullState(T0, tenASecond), tenASecond, 1_000_000_000, T0).tatMs).toBe(T0 + 100_000_000_000);
  });

  it("keeps every instant a safe integer, within a century of the charge, whatever the bucket, the charges and a change of rate", () => {
    fc.assert(
      fc.property(
        anyBucket,
        anyBucket,
        fc.array(fc.integer({ min: 1, max: 1_000_000_000 }), { minLength: 1, maxLength: 4 }),
        (bucket, other, charges) => {
          let state = fullState(T0, bucket);
          for (const units of charges) state = admitAt(state, bucket, units, T0);
          const carried = carry(state, T0, bucket, other);
          for (const s of [state, carried]) {
            expect(Number.isSafeInteger(s.tatMs) && Number.isSafeInteger(s.ticks)).toBe(true);
            expect(s.tatMs - T0).toBeLessThanOrEqual(MAX_DEPTH_MS);
          }
          const wait = retryAfterMs(carried, T0, other);
          if (wait !== null) expect(wait).toBeLessThanOrEqual(MAX_DEPTH_MS);
        },
      ),
      { numRuns: 2_000 },
    );
  });
});

describe("what a response's headers tell once the response charged its cost (a `cost_header`)", () => {
  it("the 90 then 20 of a burst of 100 at 100 an hour: r = 0 and t = 396 s, the 11 units past the burst refilled", () => {
    const bucket: BucketLimit = { limit: 100, periodMs: 3_600_000, burst: 100 };
    const first = check(fullState(T0, bucket), T0, bucket);
    const state = admitAt(first.state, bucket, 89, T0);
    const second = check(state, T0, bucket);
    expect(second.decision).toMatchObject({ allowed: true, remaining: 9, resetMs: 36_000 });
    expect(afterCharge(second.decision, 1, 19, bucket)).toEqual({ remaining: 0, resetMs: 396_000 });
  });

  it("a charge past a century of debt: the wait a TAT a century ahead leaves, as the bucket then tells (found from outside: 50 s off)", () => {
    const bucket: BucketLimit = { limit: 6, periodMs: 60_000, burst: 6 };
    const first = check(fullState(T0, bucket), T0, bucket);
    const after = admitAt(first.state, bucket, 999_999_999, T0);
    const truth = describeBucket(evaluate(after, T0, bucket, 1), T0, bucket, false);
    expect(truth.resetMs).toBe(MAX_DEPTH_MS - 50_000);
    expect(afterCharge(first.decision as { remaining: number; resetMs: number }, 1, 999_999_999, bucket)).toEqual({
      remaining: 0,
      resetMs: truth.resetMs,
    });
  });

  it("is, from the decision alone, what the bucket tells after the charge, whatever the bucket, its history, the cost and the charge", () => {
    fc.assert(
      fc.property(
        smallBucket,
        fc.array(request, { maxLength: 12 }),
        fc.integer({ min: 0, max: 1_000 }),
        fc.integer({ min: -1, max: 60 }),
        (bucket, requests, costShare, charge) => {
          let state = fullState(T0, bucket);
          let nowMs = T0;
          for (const r of requests) {
            nowMs += gapMs(bucket, r.gap);
            state = evaluate(state, nowMs, bucket, costOf(bucket, r.cost)).state;
          }
          const cost = costOf(bucket, costShare);
          const ev = evaluate(state, nowMs, bucket, cost);
          if (!ev.allowed) return;
          const decided = describeBucket(ev, nowMs, bucket, true);
          // A charge of `charge` more units, or (−1) the whole cost given back: what the bucket then tells.
          const units = charge === -1 ? -cost : charge;
          const after = units < 0 ? ev.before : admitAt(ev.state, bucket, units, nowMs);
          const truth = describeBucket(evaluate(after, nowMs, bucket, cost), nowMs, bucket, false);
          const told = afterCharge(decided as { remaining: number; resetMs: number }, cost, units, bucket);
          expect(told.remaining).toBe(truth.remaining);
          // Within a millisecond (t is rounded up); where the room left is within one of a whole number of requests,
          // either reading may be true, and the later is told, a whole request's refill: never earlier than the bucket.
          expect(told.resetMs).toBeGreaterThanOrEqual(truth.resetMs - 1);
          if (told.resetMs > truth.resetMs + 1)
            expect(told.resetMs).toBe(Math.ceil((cost * bucket.periodMs) / bucket.limit));
        },
      ),
      { numRuns: 3_000 },
    );
  });
});
