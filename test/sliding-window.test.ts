import { describe, expect, it } from "vitest";
import {
  check,
  emptyState,
  evaluate,
  retryAfterMs,
  rotate,
  type WindowLimit,
  type WindowState,
} from "../src/core/sliding-window.ts";
import { randomGenerator } from "./support/random.ts";

const MINUTE = 60_000;
const perMinute = (limit: number): WindowLimit => ({ limit, periodMs: MINUTE, precision: 1, strict: false });
/** Window index 1000 of a one-minute period, `ms` into it. */
const at = (ms: number, window = 1000) => window * MINUTE + ms;
const state = (prev: number, curr: number, window = 1000): WindowState => ({ bucket: window, counts: [prev, curr] });

describe("the seeds' worked examples", () => {
  it("admits at weighted 50: prev 60, curr 20, half-way into the window (seed 000)", () => {
    const { decision } = check(state(60, 20), at(30_000), perMinute(100));
    expect(decision).toMatchObject({ allowed: true, weighted: 50, remaining: 49 });
  });

  it("admits at weighted 90: prev 80, curr 30, 25% into the window (seed 002)", () => {
    const { state: next, decision } = check(state(80, 30), at(15_000), perMinute(100));
    expect(decision).toMatchObject({ allowed: true, weighted: 90, remaining: 9 });
    expect(next.counts).toEqual([80, 31]);
  });

  it("admits at weighted 91: prev 80, curr 31 (seed 002)", () => {
    expect(check(state(80, 31), at(15_000), perMinute(100)).decision).toMatchObject({ allowed: true, weighted: 91 });
  });

  it("rejects at weighted 101 and does not count it: prev 80, curr 41 (seed 002)", () => {
    const { state: next, decision } = check(state(80, 41), at(15_000), perMinute(100));
    expect(decision).toMatchObject({ allowed: false, weighted: 101, remaining: 0 });
    expect(next.counts).toEqual([80, 41]);
  });

  it("rejects at exactly the limit: weighted < limit admits, weighted = limit does not", () => {
    expect(check(state(80, 40), at(15_000), perMinute(100)).decision).toMatchObject({ allowed: false, weighted: 100 });
  });

  it("reports 10 remaining before the first request and 9 after it (seed 000's getRemainingRequests)", () => {
    const l = perMinute(10);
    expect(Math.floor(l.limit - evaluate(emptyState(at(0), l), at(0), l).weighted)).toBe(10);
    expect(check(emptyState(at(0), l), at(0), l).decision.remaining).toBe(9);
  });
});

describe("rotation", () => {
  it.each([
    { case: "in the same window, keeps both counts", window: 1000, counts: [7, 3] },
    { case: "one window later, moves curr to prev", window: 1001, counts: [3, 0] },
    { case: "two windows later (one skipped), clears both", window: 1002, counts: [0, 0] },
    { case: "a day later, clears both", window: 1000 + 1440, counts: [0, 0] },
    { case: "when the clock steps back, changes nothing", window: 999, counts: [7, 3] },
  ])("$case", ({ window, counts }) => {
    const rotated = rotate(state(7, 3), at(10, window), perMinute(10));
    expect(rotated.counts).toEqual(counts);
    expect(rotated.bucket).toBe(Math.max(window, 1000));
  });

  it("weights prev by the part of the window still to run", () => {
    const l = perMinute(100);
    expect(evaluate(state(0, 40), at(45_000, 1001), l).weighted).toBe(10); // 40 × 0.25 + 0
  });
});

describe("the boundary burst", () => {
  it("rejects most of a second burst of 100 at the start of the next window, limit 100", () => {
    const l = perMinute(100);
    let s = emptyState(at(59_000), l);
    let firstBurst = 0;
    for (let i = 0; i < 100; i++) {
      const r = check(s, at(59_000 + i * 10), l);
      s = r.state;
      if (r.decision.allowed) firstBurst++;
    }
    let secondBurst = 0;
    for (let i = 0; i < 100; i++) {
      const r = check(s, at(i * 10, 1001), l);
      s = r.state;
      if (r.decision.allowed) secondBurst++;
    }
    expect(firstBurst).toBe(100);
    // A fixed window would admit all 100 again; 100 × (1 − 1s/60s) leaves room for 1 or 2.
    expect(secondBurst).toBeLessThanOrEqual(2);
  });
});

describe("retryAfter is exact", () => {
  it("is 0 for an admitted request", () => {
    expect(check(state(0, 0), at(0), perMinute(1)).decision.retryAfterMs).toBe(0);
  });

  it("is shorter than the end of the window when prev is what blocks (prev 100, curr 0, at the window start)", () => {
    // 100 × (1 − 1/60000) < 100: one millisecond later the weight has dropped enough.
    expect(retryAfterMs(state(100, 0), at(0), perMinute(100))).toBe(1);
  });

  it("is later than the end of the window when curr is full (the seeds would say 30 000 ms)", () => {
    // At the next window's start, prev = 100 still weighs 100 × 1: admitted 1 ms after it.
    expect(retryAfterMs(state(0, 100), at(30_000), perMinute(100))).toBe(30_001);
  });

  it("is the moment prev's weight drops enough: prev 80, curr 41 wants weighted < 100, so 80 × (1 − e) < 59", () => {
    // e > 21/80 = 0.2625 → 15 750 ms into the window; now is at 15 000 ms, and 15 750 itself gives exactly 100.
    expect(retryAfterMs(state(80, 41), at(15_000), perMinute(100))).toBe(751);
  });

  it("across 2 000 random rejected states, admits at now + retryAfter and rejects 1 ms before it", () => {
    const random = randomGenerator(2);
    let tested = 0;
    while (tested < 2000) {
      const limit = 1 + random.int(200);
      const periodMs = [1_000, 10_000, 60_000, 3_600_000, 7_919][random.int(5)]!;
      const l: WindowLimit = { limit, periodMs, precision: 1, strict: false };
      const s: WindowState = { bucket: 5000, counts: [random.int(limit + 1), random.int(limit + 1)] };
      const now = 5000 * periodMs + random.int(periodMs);
      if (evaluate(s, now, l).allowed) continue;
      tested++;
      const wait = retryAfterMs(s, now, l);
      expect(wait).toBeGreaterThan(0);
      expect(wait).toBeLessThanOrEqual(2 * periodMs);
      expect(evaluate(s, now + wait, l).allowed, JSON.stringify({ s, now, l, wait })).toBe(true);
      expect(evaluate(s, now + wait - 1, l).allowed, JSON.stringify({ s, now, l, wait })).toBe(false);
      // Retry-After is whole seconds, rounded up: retrying then is admitted too.
      expect(evaluate(s, now + Math.ceil(wait / 1000) * 1000, l).allowed).toBe(true);
    }
  });
});

/**
 * `resetMs` is the draft's effective window (`t`, draft-ietf-httpapi-ratelimit-headers-11
 * §4.1.2): the time within which the client can use no more than what is
 * admissible now. Counted out: with every request admissible now admitted,
 * the wait until one more would be, which for a refusal is its Retry-After.
 */
describe("reset, the effective window", () => {
  it("runs, for a client with nothing counted, until 1 ms after the window it would fill ends: 10 now, the 11th at 12:01:00.001", () => {
    expect(check(state(0, 0), at(45_500), perMinute(10)).decision).toMatchObject({ remaining: 9, resetMs: 14_501 });
  });

  it("is 1 ms when the previous window's requests weigh less each millisecond: prev 60, curr 20, half-way (seed 000)", () => {
    // Admitted at weighted 50: 49 more fit now (30 + 21 + 48 < 100); after them the count is exactly 100,
    // and 1 ms later the previous window's 60 weigh less than 30.
    expect(check(state(60, 20), at(30_000), perMinute(100)).decision).toMatchObject({ remaining: 49, resetMs: 1 });
  });

  it("is retryAfter when rejected", () => {
    const { decision } = check(state(0, 10), at(45_500), perMinute(10));
    expect(decision.resetMs).toBe(decision.retryAfterMs);
    expect(decision.resetMs).toBe(14_501);
  });

  it("is, when admitted, what Retry-After would say once the requests admissible now are spent, over random states", () => {
    const random = randomGenerator(0x5eed7);
    let tested = 0;
    for (let run = 0; run < 3_000; run++) {
      const limit = 1 + random.int(40);
      const l = perMinute(limit);
      const s: WindowState = { bucket: 5000, counts: [random.int(limit + 1), random.int(limit + 1)] };
      const now = 5000 * MINUTE + random.int(MINUTE);
      const { state: after, decision } = check(s, now, l);
      if (!decision.allowed) continue;
      tested++;
      // Spend, at `now`, every request still admissible.
      let spent = after;
      let more = 0;
      while (evaluate(spent, now, l).allowed) {
        spent = check(spent, now, l).state;
        more++;
      }
      const why = JSON.stringify({ s, now, limit, more, decision });
      expect(more, why).toBeGreaterThanOrEqual(decision.remaining);
      expect(decision.resetMs, why).toBe(retryAfterMs(spent, now, l));
      expect(evaluate(spent, now + decision.resetMs, l).allowed, why).toBe(true);
      expect(evaluate(spent, now + decision.resetMs - 1, l).allowed, why).toBe(false);
    }
    expect(tested).toBeGreaterThan(500);
  });
});
