/**
 * The published controllers the origin benchmark compares ours with
 * (tools/bench/origin/envoy-gradient.ts, gradient2.ts) do what their
 * published descriptions say, step by step, on a clock the test drives.
 */
import { describe, expect, it } from "vitest";
import { seededRandom } from "../tools/accuracy/random.ts";
import type { ConcurrencyLimiter, Flight } from "../tools/bench/origin/concurrency-limiter.ts";
import { ENVOY_DEFAULTS, EnvoyGradient } from "../tools/bench/origin/envoy-gradient.ts";
import { Gradient2, type Gradient2Params } from "../tools/bench/origin/gradient2.ts";

/** Timers in time order, run up to an instant. */
function clock() {
  let nowMs = 0;
  const timers: { atMs: number; seq: number; run: () => void }[] = [];
  let seq = 0;
  return {
    schedule: (atMs: number, run: () => void) => void timers.push({ atMs, seq: seq++, run }),
    get nowMs() {
      return nowMs;
    },
    advanceTo(toMs: number) {
      for (;;) {
        timers.sort((a, b) => a.atMs - b.atMs || a.seq - b.seq);
        const next = timers[0];
        if (next === undefined || next.atMs > toMs) break;
        timers.shift();
        nowMs = next.atMs;
        next.run();
      }
      nowMs = toMs;
    },
  };
}

/** `count` requests sent at `sentMs`, all admitted, answered `latencyMs` later. */
function roundTrips(limiter: ConcurrencyLimiter, sentMs: number, count: number, latencyMs: number) {
  const flights: Flight[] = [];
  for (let i = 0; i < count; i++) {
    const flight = limiter.admit(sentMs);
    if (flight === null) throw new Error(`request ${i + 1} of ${count} refused at a limit of ${limiter.limit}`);
    flights.push(flight);
  }
  for (const flight of flights) limiter.answered(flight, sentMs + latencyMs);
}

describe("Envoy's gradient controller, with its defaults", () => {
  /** A controller whose first minRTT measurement, at the floor of 3, found `minRttMs`. */
  function measured(minRttMs = 100) {
    const time = clock();
    const envoy = new EnvoyGradient(time.schedule, seededRandom(1));
    for (let sent = 0; sent < ENVOY_DEFAULTS.minRttRequests; sent += 2) roundTrips(envoy, sent, 2, minRttMs);
    return { envoy, time };
  }

  it("starts by measuring minRTT with 3 requests in flight, and refuses a fourth", () => {
    const envoy = new EnvoyGradient(clock().schedule, seededRandom(1));
    expect(envoy.measuring).toBe(true);
    expect([1, 2, 3, 4].map(() => envoy.admit(0) !== null)).toEqual([true, true, true, false]);
  });

  it("takes minRTT as the median of the first 50 answers, and goes back to the limit it had", () => {
    const { envoy } = measured(100);
    expect(envoy.minRttMs).toBe(100);
    expect(envoy.measuring).toBe(false);
    expect(envoy.limit).toBe(3);
  });

  // gradient = minRTT × 1.25 ÷ sampleRTT, within [0.5, 2]; new limit = ⌊gradient × limit + √(gradient × limit)⌋.
  it.each([
    { sampleRttMs: 100, limit: Math.floor(3 * 1.25 + Math.sqrt(3 * 1.25)) },
    { sampleRttMs: 125, limit: Math.floor(3 + Math.sqrt(3)) },
    { sampleRttMs: 50, limit: Math.floor(3 * 2 + Math.sqrt(3 * 2)) },
    { sampleRttMs: 10, limit: Math.floor(3 * 2 + Math.sqrt(3 * 2)) },
  ])(
    "with minRTT 100 ms and a window's median of $sampleRttMs ms, sets the limit from 3 to $limit",
    ({ sampleRttMs, limit }) => {
      const { envoy, time } = measured(100);
      time.advanceTo(200);
      roundTrips(envoy, 200, 3, sampleRttMs);
      time.advanceTo(200 + sampleRttMs + ENVOY_DEFAULTS.sampleIntervalMs);
      expect(envoy.limit).toBe(limit);
    },
  );

  it("halves at most per window, and never goes below 3 nor above 1000", () => {
    const { envoy, time } = measured(100);
    let t = 200;
    const limits: number[] = [];
    // Fast answers: the limit grows each window up to 1000.
    for (let i = 0; i < 40; i++, t += 100) {
      time.advanceTo(t);
      roundTrips(envoy, t, Math.min(envoy.limit, 5), 1);
      time.advanceTo(t + 99);
      limits.push(envoy.limit);
    }
    expect(Math.max(...limits)).toBe(1000);
    // Answers 10 × minRTT: the gradient's floor of 0.5 per window, down to 3.
    const down: number[] = [];
    for (let i = 0; i < 4; i++, t += 1100) {
      time.advanceTo(t);
      roundTrips(envoy, t, 3, 1000);
      time.advanceTo(t + 1000 + 99);
      down.push(envoy.limit);
    }
    expect(down[0]).toBe(Math.floor(500 + Math.sqrt(500)));
    expect(down[1]).toBe(Math.floor(down[0]! / 2 + Math.sqrt(down[0]! / 2)));
    expect(Math.min(...limits, ...down)).toBeGreaterThanOrEqual(3);
  });

  it("measures minRTT again at once after five windows in a row that set the limit to 3", () => {
    const { envoy, time } = measured(100);
    let t = 200;
    for (let window = 1; window <= 5; window++, t += 1100) {
      time.advanceTo(t);
      roundTrips(envoy, t, 3, 1000);
      time.advanceTo(t + 1000 + 99);
      expect(envoy.limit, `window ${window}`).toBe(3);
      expect(envoy.measuring, `window ${window}`).toBe(window === 5);
    }
  });

  it("measures minRTT again 60 s after the last measurement, plus a jitter of at most 15 % of that", () => {
    const after: number[] = [];
    for (const seed of [1, 2, 3, 4, 5, 6, 7, 8]) {
      const time = clock();
      const envoy = new EnvoyGradient(time.schedule, seededRandom(seed));
      for (let sent = 0; sent < 50; sent += 2) roundTrips(envoy, sent, 2, 100);
      const endedMs = 48 + 100;
      time.advanceTo(endedMs + 59_999);
      expect(envoy.measuring).toBe(false);
      while (!envoy.measuring) time.advanceTo(time.nowMs + 1);
      after.push(time.nowMs - endedMs);
    }
    for (const ms of after) expect(ms).toBeGreaterThanOrEqual(60_000);
    for (const ms of after) expect(ms).toBeLessThan(60_000 + 9_000);
    expect(new Set(after).size, "the jitter differs with the seed").toBeGreaterThan(1);
  });

  /** A controller that has just begun its second measurement, after five windows at the floor, with one request still out. */
  function remeasuring() {
    const { envoy, time } = measured(100);
    let t = 200;
    let straggler: Flight | null = null;
    for (let window = 1; window <= 5; window++, t += 1100) {
      time.advanceTo(t);
      roundTrips(envoy, t, 2, 1000);
      if (window === 5) straggler = envoy.admit(t);
      time.advanceTo(t + 1000 + 99);
    }
    expect(envoy.measuring).toBe(true);
    return { envoy, time, straggler: straggler!, nowMs: t };
  }

  it("leaves out of a minRTT measurement the requests sent before it began", () => {
    const { envoy, straggler, nowMs } = remeasuring();
    envoy.answered(straggler, nowMs);
    for (let i = 0; i < 49; i++) roundTrips(envoy, nowMs + i, 1, 40);
    expect(envoy.measuring, "49 answers of its own, and the straggler's left out").toBe(true);
    roundTrips(envoy, nowMs + 49, 1, 40);
    expect(envoy.measuring).toBe(false);
    expect(envoy.minRttMs).toBe(40);
  });

  it("frees the place of a request whose client gave up, and takes no sample from it", () => {
    const { envoy, time } = measured(100);
    let t = 200;
    for (let window = 0; window < 3; window++, t += 100) {
      time.advanceTo(t);
      roundTrips(envoy, t, 3, 1);
      time.advanceTo(t + 99);
    }
    const limit = envoy.limit;
    expect(limit).toBeGreaterThan(20);
    const flights = Array.from({ length: limit }, () => envoy.admit(t)!);
    expect(envoy.admit(t)).toBeNull();
    for (const flight of flights) envoy.abandoned(flight, t + 2_000);
    expect(envoy.admit(t + 2_000)).not.toBeNull();
    time.advanceTo(t + 2_500);
    // Samples of 2 s against a minRTT of 100 ms would have halved it.
    expect(envoy.limit).toBe(limit);
  });
});

describe("Netflix's Gradient2 in a WindowedLimit, with their defaults", () => {
  /** A limiter whose first window is closed (the first answer ever closes one): the next closes at 1 + 1001 ms. */
  function opened(params: Partial<Gradient2Params> = {}) {
    const g2 = new Gradient2(params);
    g2.answered(g2.admit(0)!, 1);
    return g2;
  }

  /**
   * Window `k`: `count` answers of `rttMs`, at most `inFlight` at a time, then one more of `rttMs` at
   * 1 + k × 1001 ms, over a second after the last window closed, which closes this one.
   */
  function window(g2: Gradient2, k: number, count: number, rttMs: number, inFlight = count) {
    const closeMs = 1 + k * 1001;
    for (let done = 0; done < count; ) {
      const batch = Math.min(inFlight, g2.limit, count - done);
      const flights = Array.from({ length: batch }, () => g2.admit(closeMs - 1 - rttMs)!);
      for (const flight of flights) g2.answered(flight, closeMs - 1);
      done += batch;
    }
    g2.answered(g2.admit(closeMs - rttMs)!, closeMs);
  }

  it("admits 20 requests in flight and refuses the 21st", () => {
    const g2 = new Gradient2();
    const admitted = Array.from({ length: 21 }, () => g2.admit(0) !== null);
    expect(admitted.filter(Boolean)).toHaveLength(20);
    expect(admitted[20]).toBe(false);
  });

  it("keeps its limit while the requests in flight stay under half of it (a limit that does not bind says nothing)", () => {
    const g2 = opened();
    for (let k = 1; k <= 30; k++) window(g2, k, 20, 50, 9);
    expect(g2.estimate).toBe(20);
  });

  it("grows by a fifth of its queue size of 4 a window while latency holds and the limit binds", () => {
    const g2 = opened();
    window(g2, 1, 20, 50);
    expect(g2.estimate).toBeCloseTo(20 + 0.2 * 4, 9);
    window(g2, 2, 20, 50);
    expect(g2.estimate).toBeCloseTo(20.8 + 0.2 * 4, 9);
    expect(g2.limit).toBe(21);
  });

  it("cuts by gradient = 1.5 × long-term ÷ short-term RTT, at least 0.5, smoothed by 0.2, down to its floor of 20", () => {
    const g2 = opened({ initialLimit: 100 });
    // Ten windows at 50 ms: the long-term RTT is their mean.
    for (let k = 1; k <= 10; k++) window(g2, k, 100, 50);
    expect(g2.longRtt.valueMs).toBeCloseTo(50, 9);
    const before = g2.estimate;
    // A window at 100 ms: long-term = 50 + (100 − 50) × 2 ÷ 601, and gradient = 1.5 × long-term ÷ 100.
    window(g2, 11, 100, 100);
    const gradient = (1.5 * (50 + (50 * 2) / 601)) / 100;
    expect(g2.estimate).toBeCloseTo(before * 0.8 + (before * gradient + 4) * 0.2, 9);
    // Answers ever slower: the gradient's floor of 0.5 each window, and the limit's floor of 20.
    for (let k = 12; k <= 60; k++) window(g2, k, 100, 1_000);
    expect(g2.limit).toBe(20);
  });

  it.each([
    { count: 8, samples: 9, moves: false },
    { count: 9, samples: 10, moves: true },
  ])("passes a window of $samples answers on: $moves", ({ count, moves }) => {
    const g2 = opened({ initialLimit: 10, minLimit: 10 });
    window(g2, 1, count, 50);
    expect(g2.estimate !== 10).toBe(moves);
  });

  it("lowers its long-term RTT by 5 % when it is over twice the latest window's", () => {
    const g2 = opened();
    for (let k = 1; k <= 10; k++) window(g2, k, 20, 200);
    expect(g2.longRtt.valueMs).toBeCloseTo(200, 9);
    window(g2, 11, 20, 50);
    expect(g2.longRtt.valueMs).toBeCloseTo((200 + (50 - 200) * (2 / 601)) * 0.95, 9);
  });

  it("counts a request whose client gave up as a sample of the time it waited", () => {
    const g2 = opened({ initialLimit: 100 });
    for (let k = 1; k <= 10; k++) window(g2, k, 100, 50);
    const before = g2.estimate;
    const closeMs = 1 + 11 * 1001;
    const flights = Array.from({ length: 100 }, () => g2.admit(closeMs - 1 - 2_000)!);
    for (const flight of flights) g2.abandoned(flight, closeMs - 1);
    g2.abandoned(g2.admit(closeMs - 2_000)!, closeMs);
    // Waits of 2 s against a long-term 50 ms: the gradient's floor of 0.5, smoothed by 0.2.
    expect(g2.estimate).toBeCloseTo(before * 0.8 + (before * 0.5 + 4) * 0.2, 9);
  });
});
