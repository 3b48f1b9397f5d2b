import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  admit,
  admitAt,
  bucketIndex,
  bucketStartMs,
  check,
  earliestAdmission,
  emptyState,
  evaluate,
  retryAfterMs,
  rotate,
  type WindowLimit,
  type WindowState,
} from "../src/core/sliding-window.ts";

/** Around late 2026, in Unix milliseconds: realistic magnitudes for the arithmetic. */
const EPOCH_MS = 1_795_000_000_000;

/** Periods divisible by every k, by none, prime, tiny, and as long as a rule allows. */
const periodMs = fc.oneof(
  fc.constantFrom(1, 7, 61, 999, 1_000, 7_919, 60_000, 3_600_000, 86_400_000, 365 * 86_400_000),
  fc.integer({ min: 1, max: 10_000_000 }),
);

/** A rule's mode, with a cost per request from 1 to its limit: mostly 1, often a few, sometimes the whole limit. */
const mode = fc
  .record({
    limit: fc.oneof(fc.integer({ min: 1, max: 200 }), fc.constantFrom(1, 2, 1_000_000_000)),
    periodMs,
    precision: fc.integer({ min: 1, max: 60 }),
    strict: fc.boolean(),
    cost: fc.oneof(fc.constant(1), fc.integer({ min: 1, max: 10 }), fc.constant(Number.POSITIVE_INFINITY)),
  })
  .map((l): WindowLimit => ({ ...l, cost: Math.min(l.cost, l.limit) }));

/**
 * A mode, an instant, and a state of k + 1 counts near that instant: up to
 * k + 2 buckets old (partly or wholly rotated out), or 1–2 buckets ahead (a
 * clock that stepped back). Counts lean towards the limit, so many are refused.
 */
const scenario = mode.chain((l: WindowLimit) =>
  fc
    .record({
      nowMs: fc.integer({ min: EPOCH_MS, max: EPOCH_MS + 10 * l.periodMs }),
      lag: fc.integer({ min: -2, max: l.precision + 2 }),
      counts: fc.array(fc.oneof(fc.constant(0), fc.integer({ min: 0, max: l.limit }), fc.constant(l.limit)), {
        minLength: l.precision + 1,
        maxLength: l.precision + 1,
      }),
    })
    .map(({ nowMs, lag, counts }) => ({
      l,
      nowMs,
      state: { bucket: bucketIndex(nowMs, l) - lag, counts } satisfies WindowState,
    })),
);

/** The decision from first principles, in BigInt: oldest × (P − (t·k mod P)) + (newer + cost − 1) × P < limit × P. */
function exactOracle(state: WindowState, nowMs: number, l: WindowLimit) {
  const k = l.precision;
  const target = Math.max(state.bucket, bucketIndex(nowMs, l));
  const shift = target - state.bucket;
  const counts = state.counts.map((_, i) => state.counts[i + shift] ?? 0);
  const [oldest = 0n, ...rest] = counts.map(BigInt);
  const newer = rest.reduce((a, b) => a + b, 0n);
  const P = BigInt(l.periodMs);
  const behind = bucketIndex(nowMs, l) < state.bucket;
  const kept = l.strict || behind ? P : P - ((BigInt(nowMs) * BigInt(k)) % P);
  const scaled = oldest * kept + newer * P;
  const cost = BigInt(l.cost ?? 1);
  // weighted + cost − 1 < limit: for whole counts, weighted + cost ≤ limit.
  const allowed = scaled + (cost - 1n) * P < BigInt(l.limit) * P;
  // floor(limit − weighted − cost) after an admission.
  const left = BigInt(l.limit) * P - scaled - cost * P;
  const remaining = left < 0n ? 0 : Number(left / P);
  return { allowed, remaining };
}

describe("decisions are exact", () => {
  it("refuses at exactly the limit where floating point would not: prev 500, curr 33, 3 960 ms in, limit 500", () => {
    // 500 × (1 − 3960/60000) + 33 is 499.99999999999994 in floating point, yet exactly 500.
    const l: WindowLimit = { limit: 500, periodMs: 60_000, precision: 1, strict: false };
    const at = 1000 * 60_000 + 3_960;
    expect(check({ bucket: 1000, counts: [500, 33] }, at, l).decision).toMatchObject({ allowed: false, remaining: 0 });
    expect(check({ bucket: 1000, counts: [500, 32] }, at, l).decision).toMatchObject({ allowed: true, remaining: 0 });
  });

  it("agrees with an exact BigInt oracle on every decision and every remaining count", () => {
    fc.assert(
      fc.property(scenario, ({ l, nowMs, state }) => {
        const oracle = exactOracle(state, nowMs, l);
        const { decision } = check(state, nowMs, l);
        expect(decision.allowed).toBe(oracle.allowed);
        if (oracle.allowed) expect(decision.remaining).toBe(oracle.remaining);
      }),
      { numRuns: 3_000 },
    );
  });
});

describe("Retry-After and reset are exact in every mode", () => {
  it("admits a request at now + retryAfter and refuses one 1 ms earlier, over random states and modes", () => {
    let refused = 0;
    fc.assert(
      fc.property(scenario, ({ l, nowMs, state }) => {
        const wait = retryAfterMs(state, nowMs, l);
        if (evaluate(state, nowMs, l).allowed) {
          expect(wait).toBe(0);
          return;
        }
        refused++;
        expect(wait).toBeGreaterThan(0);
        expect(evaluate(state, nowMs + wait, l).allowed).toBe(true);
        expect(evaluate(state, nowMs + wait - 1, l).allowed).toBe(false);
        // Every count has rotated out once k + 1 buckets past the newest have begun.
        const newest = Math.max(state.bucket, bucketIndex(nowMs, l));
        expect(nowMs + wait).toBeLessThanOrEqual(bucketStartMs(newest + l.precision + 1, l));
        // Retry-After goes out in whole seconds, rounded up: still admitted then.
        expect(evaluate(state, nowMs + Math.ceil(wait / 1000) * 1000, l).allowed).toBe(true);
        // A refusal reports the same wait as reset.
        const { decision } = check(state, nowMs, l);
        expect(decision).toMatchObject({ allowed: false, retryAfterMs: wait, resetMs: wait });
      }),
      { numRuns: 4_000 },
    );
    // The states lean towards the limit, so most of the runs above test a refusal.
    expect(refused).toBeGreaterThan(1_000);
  });

  it("never lets the count rise while nothing is admitted, so the wait found is the smallest", () => {
    fc.assert(
      fc.property(
        scenario,
        fc.integer({ min: 0, max: 1_000_000 }),
        fc.integer({ min: 0, max: 1_000_000 }),
        ({ l, nowMs, state }, a, b) => {
          // Two instants within the next 2 periods + 2 buckets, in order.
          const span = 2 * l.periodMs + 2 * Math.ceil(l.periodMs / l.precision);
          const [early, late] = [nowMs + (a % span), nowMs + (b % span)].sort((x, y) => x - y) as [number, number];
          if (evaluate(state, early, l).allowed) expect(evaluate(state, late, l).allowed).toBe(true);
          expect(evaluate(state, late, l).weighted).toBeLessThanOrEqual(evaluate(state, early, l).weighted + 1e-6);
        },
      ),
      { numRuns: 3_000 },
    );
  });

  it.each([
    // 2 requests at 12:00:45 (10 s buckets at k = 6); an exact sliding log would wait 60 000 ms.
    {
      case: "k = 1 (the seeds'): the next window weighs them by 1 − elapsed",
      precision: 1,
      strict: false,
      waitMs: 15_001,
    },
    {
      case: "k = 6: they are the oldest bucket from 12:01:40, weighted down from there",
      precision: 6,
      strict: false,
      waitMs: 55_001,
    },
    {
      case: "k = 6, strict: they count whole until their bucket leaves at 12:01:50",
      precision: 6,
      strict: true,
      waitMs: 65_000,
    },
    { case: "k = 60, strict: their 1 s bucket leaves at 12:01:46", precision: 60, strict: true, waitMs: 61_000 },
  ])("waits $waitMs ms after a limit of 2 is used at 12:00:45 with $case", ({ precision, strict, waitMs }) => {
    const l: WindowLimit = { limit: 2, periodMs: 60_000, precision, strict };
    const at = Date.UTC(2026, 10, 21, 12, 0, 45);
    let s = emptyState(at, l);
    for (let i = 0; i < 2; i++) s = check(s, at, l).state;
    expect(check(s, at, l).decision).toMatchObject({ allowed: false, retryAfterMs: waitMs, resetMs: waitMs });
  });

  it("reports reset, when admitted, as the wait for one more once every request admissible now is spent, over random states and modes", () => {
    let admitted = 0;
    fc.assert(
      fc.property(scenario, ({ l, nowMs, state }) => {
        const { state: left, decision } = check(state, nowMs, l);
        // Spent one by one below: only where that is a few hundred requests at most.
        if (!decision.allowed || decision.remaining > 500) return;
        admitted++;
        let spent = left;
        while (evaluate(spent, nowMs, l).allowed) spent = check(spent, nowMs, l).state;
        const why = JSON.stringify({ l, nowMs, state, decision });
        expect(decision.resetMs, why).toBe(retryAfterMs(spent, nowMs, l));
        expect(decision.resetMs, why).toBeGreaterThan(0);
        expect(evaluate(spent, nowMs + decision.resetMs, l).allowed, why).toBe(true);
        expect(evaluate(spent, nowMs + decision.resetMs - 1, l).allowed, why).toBe(false);
      }),
      { numRuns: 4_000 },
    );
    expect(admitted).toBeGreaterThan(500);
  });

  it.each([
    // 10 admissible at 12:00:45, all in one bucket: the 11th waits as the 3rd of a limit of 2 does above.
    { precision: 1, periodMs: 60_000, strict: false, resetMs: 15_001 },
    { precision: 6, periodMs: 60_000, strict: false, resetMs: 55_001 },
    { precision: 6, periodMs: 60_000, strict: true, resetMs: 65_000 },
    { precision: 60, periodMs: 60_000, strict: false, resetMs: 60_001 },
    { precision: 60, periodMs: 60_000, strict: true, resetMs: 61_000 },
    // 7 buckets of 1 000/7 ms: the bucket of 12:00:45.450 is the oldest from ⌈10 000/7⌉ = 1 429 ms, and weighs less at once.
    { precision: 7, periodMs: 1_000, strict: false, resetMs: 1_429 - 450 },
  ])(
    "reports reset, for a first request, as when the 11th of a limit of 10 would be admitted (k = $precision, strict $strict)",
    ({ precision, periodMs, strict, resetMs }) => {
      const l: WindowLimit = { limit: 10, periodMs, precision, strict };
      const at = Date.UTC(2026, 10, 21, 12, 0, 45) + (periodMs === 1_000 ? 450 : 0);
      expect(check(emptyState(at, l), at, l).decision).toMatchObject({ allowed: true, remaining: 9, resetMs });
    },
  );
});

describe("the earliest admission from any instant, and a count at any instant", () => {
  it("is the instant a request would be admitted, from now or from later, over random states and modes", () => {
    fc.assert(
      fc.property(scenario, fc.integer({ min: 0, max: 3_000_000 }), ({ l, nowMs, state }, ahead) => {
        // From an instant up to two periods ahead: a booking's, not only now.
        const fromMs = nowMs + (ahead % (2 * l.periodMs + 1));
        const atMs = earliestAdmission(state, l, fromMs);
        expect(atMs).toBeGreaterThanOrEqual(fromMs);
        expect(exactOracle(state, atMs, l).allowed).toBe(true);
        if (atMs > fromMs) expect(exactOracle(state, atMs - 1, l).allowed).toBe(false);
        // The same arithmetic as Retry-After, not a second copy: from now, it is now + retryAfter.
        expect(earliestAdmission(state, l, nowMs)).toBe(nowMs + retryAfterMs(state, nowMs, l));
      }),
      { numRuns: 3_000 },
    );
  });

  it("is the first instant a search millisecond by millisecond admits, for short periods and every cost", () => {
    fc.assert(
      fc.property(
        fc.record({
          limit: fc.integer({ min: 1, max: 12 }),
          periodMs: fc.integer({ min: 1, max: 120 }),
          precision: fc.integer({ min: 1, max: 6 }),
          strict: fc.boolean(),
        }),
        fc.array(fc.integer({ min: 0, max: 12 }), { minLength: 7, maxLength: 7 }),
        fc.integer({ min: 0, max: 400 }),
        fc.integer({ min: 1, max: 12 }),
        (mode, someCounts, into, someCost) => {
          const l: WindowLimit = mode;
          const cost = Math.min(someCost, l.limit);
          const nowMs = EPOCH_MS + into;
          const state: WindowState = {
            bucket: bucketIndex(nowMs, l),
            counts: someCounts.slice(0, l.precision + 1).map((c) => Math.min(c, l.limit)),
          };
          let searched = nowMs;
          while (!exactOracle(state, searched, { ...l, cost }).allowed) searched++;
          expect(earliestAdmission(state, l, nowMs, cost)).toBe(searched);
        },
      ),
      { numRuns: 2_000 },
    );
  });

  it.each([
    // One-minute window 1000 of the seeds' layout (k = 1); the state holds prev 3, curr 5 there.
    { case: "in the current bucket, as an admission would", atMs: 1000 * 60_000 + 10, counts: [3, 7], bucket: 1000 },
    { case: "in a later bucket, rotating to it", atMs: 1001 * 60_000 + 10, counts: [5, 2], bucket: 1001 },
    { case: "past every kept bucket, on zeros", atMs: 1003 * 60_000, counts: [0, 2], bucket: 1003 },
    { case: "in a bucket already passed but still kept", atMs: 999 * 60_000 + 10, counts: [5, 5], bucket: 1000 },
    { case: "not at all, in a bucket rotated out", atMs: 998 * 60_000, counts: [3, 5], bucket: 1000 },
  ])("counts a request of cost 2 $case", ({ atMs, counts, bucket }) => {
    const l: WindowLimit = { limit: 10, periodMs: 60_000, precision: 1, strict: false };
    expect(admitAt({ bucket: 1000, counts: [3, 5] }, l, atMs, 2)).toEqual({ bucket, counts });
  });

  it("counts at an instant exactly as an admission there would, whatever it would decide", () => {
    fc.assert(
      fc.property(scenario, fc.integer({ min: 0, max: 3_000_000 }), ({ l, nowMs, state }, ahead) => {
        const atMs = nowMs + (ahead % (3 * l.periodMs + 1));
        const rotated = rotate(state, atMs, l);
        if (bucketIndex(atMs, l) < rotated.bucket) return; // a clock that stepped back: the table above
        expect(admitAt(state, l, atMs)).toEqual(admit(rotated, l.cost));
      }),
      { numRuns: 2_000 },
    );
  });
});

describe("precision 1 is exactly the seeds' algorithm", () => {
  /** The seeds' counter as DESIGN.md writes it: window, prev, curr; compared exactly, in BigInt. */
  function seeds(limit: number, periodMs: number) {
    let window = -1;
    let prev = 0;
    let curr = 0;
    return (nowMs: number) => {
      const w = Math.floor(nowMs / periodMs);
      if (w === window + 1) [prev, curr] = [curr, 0];
      else if (w > window + 1) [prev, curr] = [0, 0];
      window = Math.max(window, w);
      // weighted = prev × (1 − elapsed) + curr < limit, with elapsed = (now mod period) / period, times period.
      const scaled = BigInt(prev) * BigInt(periodMs - (nowMs % periodMs)) + BigInt(curr) * BigInt(periodMs);
      const allowed = scaled < BigInt(limit) * BigInt(periodMs);
      if (allowed) curr++;
      return { allowed, prev, curr };
    };
  }

  it.each([
    { seed: "000", prev: 60, curr: 20, intoMs: 30_000, limit: 100, allowed: true, weighted: 50 },
    { seed: "002", prev: 80, curr: 30, intoMs: 15_000, limit: 100, allowed: true, weighted: 90 },
    { seed: "002", prev: 80, curr: 41, intoMs: 15_000, limit: 100, allowed: false, weighted: 101 },
    { seed: "—", prev: 80, curr: 40, intoMs: 15_000, limit: 100, allowed: false, weighted: 100 },
    { seed: "—", prev: 100, curr: 0, intoMs: 0, limit: 100, allowed: false, weighted: 100 },
    { seed: "—", prev: 100, curr: 0, intoMs: 1, limit: 100, allowed: true, weighted: 100 - 1 / 600 },
  ])("seed $seed: prev $prev, curr $curr, $intoMs ms in, limit $limit → allowed $allowed", (row) => {
    const l: WindowLimit = { limit: row.limit, periodMs: 60_000, precision: 1, strict: false };
    const state: WindowState = { bucket: 1000, counts: [row.prev, row.curr] };
    const { state: next, decision } = check(state, 1000 * 60_000 + row.intoMs, l);
    expect(decision.allowed).toBe(row.allowed);
    expect(decision.weighted).toBeCloseTo(row.weighted, 9);
    expect(next.counts).toEqual([row.prev, row.curr + (row.allowed ? 1 : 0)]);
  });

  it("makes the same decision as the seeds' two counters on every request of random traces", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 50 }),
        fc.constantFrom(1_000, 7_919, 60_000),
        fc.array(fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 400 }), fc.integer({ min: 0, max: 120_000 })), {
          minLength: 1,
          maxLength: 400,
        }),
        (limit, periodMs, gaps) => {
          const l: WindowLimit = { limit, periodMs, precision: 1, strict: false };
          const reference = seeds(limit, periodMs);
          let nowMs = EPOCH_MS;
          let state = emptyState(nowMs, l);
          for (const gap of gaps) {
            nowMs += gap;
            const expected = reference(nowMs);
            const got = check(state, nowMs, l);
            state = got.state;
            expect(got.decision.allowed).toBe(expected.allowed);
            expect(state.counts).toEqual([expected.prev, expected.curr]);
          }
        },
      ),
      { numRuns: 300 },
    );
  });
});

describe("strict mode never admits more than the limit in any window", () => {
  /** Most admitted in any window (t − period, t], by brute force. */
  function maxInAnyWindow(admittedMs: number[], periodMs: number): number {
    let max = 0;
    for (let j = 0; j < admittedMs.length; j++) {
      let n = 0;
      for (let i = j; i >= 0 && admittedMs[i]! > admittedMs[j]! - periodMs; i--) n++;
      max = Math.max(max, n);
    }
    return max;
  }

  it.each([1, 10, 60])(
    "holds on the boundary burst: 2 × limit at the end of a window, 2 × limit at the start of the next (k = %i)",
    (precision) => {
      const l: WindowLimit = { limit: 100, periodMs: 60_000, precision, strict: true };
      const windowEnd = 1000 * 60_000;
      const times = [
        ...Array.from({ length: 200 }, (_, i) => windowEnd - 1_000 + i * 5),
        ...Array.from({ length: 200 }, (_, i) => windowEnd + i * 5),
        ...Array.from({ length: 600 }, (_, i) => windowEnd + 1_000 + i * 100),
      ];
      let state = emptyState(times[0]!, l);
      const admitted: number[] = [];
      for (const t of times) {
        const r = check(state, t, l);
        state = r.state;
        if (r.decision.allowed) admitted.push(t);
      }
      expect(admitted.length).toBeGreaterThanOrEqual(100);
      expect(maxInAnyWindow(admitted, l.periodMs)).toBeLessThanOrEqual(100);
    },
  );

  it("holds over random traces in every precision, period and cost, and default mode stays under 2 × limit", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 20 }),
        fc.integer({ min: 1, max: 60 }),
        fc.oneof(fc.constantFrom(60, 1_000, 7_919), fc.integer({ min: 1, max: 5_000 })),
        fc.array(fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 50 }), fc.integer({ min: 0, max: 3_000 })), {
          minLength: 1,
          maxLength: 300,
        }),
        fc.integer({ min: 1, max: 20 }),
        (limit, precision, periodMs, gaps, someCost) => {
          const cost = Math.min(someCost, limit);
          for (const strict of [true, false]) {
            const l: WindowLimit = { limit, periodMs, precision, strict, cost };
            let nowMs = EPOCH_MS;
            let state = emptyState(nowMs, l);
            const admitted: number[] = [];
            for (const gap of gaps) {
              nowMs += gap;
              const r = check(state, nowMs, l);
              state = r.state;
              if (r.decision.allowed) admitted.push(nowMs);
            }
            // Each admission counts `cost`: what any window admitted, in units, stays within the limit.
            const max = maxInAnyWindow(admitted, periodMs) * cost;
            expect(max).toBeLessThanOrEqual(strict ? limit : 2 * limit);
          }
        },
      ),
      { numRuns: 500 },
    );
  });
});

describe("state stays O(k)", () => {
  it.each([1, 2, 10, 59, 60])("keeps k + 1 counts and nothing else after 20 000 requests (k = %i)", (precision) => {
    const l: WindowLimit = { limit: 1_000, periodMs: 60_000, precision, strict: precision % 2 === 0 };
    let nowMs = EPOCH_MS;
    let state = emptyState(nowMs, l);
    let step = 7;
    for (let i = 0; i < 20_000; i++) {
      step = (step * 48_271) % 2_147_483_647; // a fixed pseudo-random walk of gaps, 0–99 ms
      nowMs += step % 100;
      state = check(state, nowMs, l).state;
    }
    expect(Object.keys(state)).toEqual(["bucket", "counts"]);
    expect(state.counts).toHaveLength(precision + 1);
    // Each count is at most the limit, so the stored form is bounded by k, not by traffic.
    expect(state.counts.every((c) => c <= l.limit)).toBe(true);
    expect(JSON.stringify(state.counts).length).toBeLessThanOrEqual((precision + 1) * 5 + 1);
  });
});
