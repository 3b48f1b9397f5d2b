/**
 * An adaptive rule's health target (the `adaptive` table), how one forwarded
 * request counts against it, and the latency histogram reports carry.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  addCounts,
  addLatency,
  defaultFloor,
  type KeyCounts,
  latencyAt,
  latencyBoundMs,
  latencyBucketOf,
  MAX_WORST_KEYS,
  noCounts,
  outcomeOf,
  parseAdaptive,
  slowShareOf,
} from "../src/core/health.ts";

describe("the adaptive table", () => {
  it("takes latency, percentile, errors and floor", () => {
    expect(parseAdaptive({ latency: "250ms", percentile: 99.9, errors: "2.5%", floor: 10 }, 100)).toEqual({
      ok: true,
      value: { latencyMs: 250, percentile: 99.9, errorShare: 0.025, floor: 10 },
    });
  });

  it("defaults to the 99th percentile, 5 % errors and a floor of a tenth of the limit", () => {
    expect(parseAdaptive({ latency: 1 }, 250)).toEqual({
      ok: true,
      value: { latencyMs: 1000, percentile: 99, errorShare: 0.05, floor: 25 },
    });
    expect(defaultFloor(5)).toBe(1);
  });

  it.each([
    [{}, '"adaptive.latency": is required'],
    [{ latency: "fast" }, '"adaptive.latency": must be seconds'],
    [{ latency: 0 }, '"adaptive.latency": must be at least 1ms'],
    [{ latency: "2m" }, '"adaptive.latency": must be at most 60s; got "2m"'],
    [{ latency: "1s", percentile: 49 }, '"adaptive.percentile": must be a number from 50 to 99.9'],
    [{ latency: "1s", percentile: 100 }, '"adaptive.percentile": must be a number from 50 to 99.9'],
    [{ latency: "1s", percentile: 99.95 }, "with at most one decimal"],
    [{ latency: "1s", percentile: "99" }, '"adaptive.percentile": must be a number'],
    [{ latency: "1s", errors: 0.05 }, '"adaptive.errors": must be a share written with "%"'],
    [{ latency: "1s", errors: "0%" }, 'from "0.1%" to "50%"'],
    [{ latency: "1s", errors: "51%" }, 'from "0.1%" to "50%", such as "5%"; got "51%"'],
    [{ latency: "1s", floor: 0 }, '"adaptive.floor": must be an integer from 1 to the rule\'s limit (100); got 0'],
    [{ latency: "1s", floor: 101 }, "to the rule's limit (100); got 101"],
    [{ latency: "1s", floor: 2.5 }, '"adaptive.floor": must be an integer'],
    [
      { latency: "1s", target: 3 },
      '"adaptive.target": is not a field of "adaptive"; its fields are latency, percentile, errors, floor',
    ],
    ["250ms", "must be a table such as"],
    [[{ latency: "1s" }], "must be a table such as"],
  ])("refuses %j, naming the field", (table, message) => {
    const parsed = parseAdaptive(table, 100);
    expect(parsed.ok).toBe(false);
    expect(parsed.ok ? [] : parsed.errors.join("\n")).toContain(message);
  });

  it("reports every bad field at once", () => {
    const parsed = parseAdaptive({ percentile: 10, errors: "90%", floor: -1 }, 100);
    expect(parsed.ok ? [] : parsed.errors.map((e) => e.split(":")[0])).toEqual([
      '"adaptive.latency"',
      '"adaptive.percentile"',
      '"adaptive.errors"',
      '"adaptive.floor"',
    ]);
  });

  it.each([
    [99, 0.01],
    [99.9, 0.001],
    [95, 0.05],
    [50, 0.5],
  ])("lets %d percent of answers be within the target: %d may be slow", (percentile, share) => {
    expect(slowShareOf({ percentile })).toBe(share);
  });
});

describe("one forwarded request", () => {
  const target = { latencyMs: 100 };
  it.each([
    [200, 50, { slow: false, error: false }],
    [200, 100, { slow: false, error: false }],
    [200, 101, { slow: true, error: false }],
    [404, 20, { slow: false, error: false }],
    [429, 20, { slow: false, error: false }],
    [500, 5, { slow: false, error: true }],
    [503, 1, { slow: false, error: true }],
    [504, 3000, { slow: true, error: true }],
    [0, 2, { slow: false, error: true }],
  ])("status %d after %d ms counts as %j: a fast failure is a failure", (status, ms, expected) => {
    expect(outcomeOf(target, status, ms)).toEqual(expected);
  });

  it("adds counts field by field, and keeps the busiest client's share", () => {
    const a = {
      ...noCounts(),
      forwarded: 3,
      answered: 2,
      slow: 1,
      errors: 1,
      gone: 2,
      goneSlow: 1,
      late: 1,
      stuck: 2,
      busyMs: 40,
      busySq: 800,
      shed: 4,
      peak: 0.25,
    };
    const b = {
      ...noCounts(),
      forwarded: 1,
      answered: 2,
      slow: 0,
      errors: 1,
      gone: 1,
      goneSlow: 0,
      late: 0,
      stuck: 1,
      busyMs: 2.5,
      busySq: 6.25,
      shed: 0,
      peak: 0.5,
    };
    expect(addCounts(a, b)).toEqual({
      forwarded: 4,
      answered: 4,
      slow: 1,
      errors: 2,
      gone: 3,
      goneSlow: 1,
      late: 1,
      stuck: 3,
      busyMs: 42.5,
      busySq: 806.25,
      shed: 4,
      peak: 0.5,
    });
  });

  it("merges the worst keys of two counts by key, worst first, and keeps no more than its cap", () => {
    // Each: answers, slow, failed, late, busy time, requests found late in flight, squares of the busy time.
    const a = {
      ...noCounts(),
      worst: [["k1", 5, 3, 0, 0, 50, 0, 500] as KeyCounts, ["k2", 2, 1, 0, 1, 20, 0, 200] as KeyCounts],
    };
    const b = {
      ...noCounts(),
      worst: [["k2", 4, 0, 3, 0, 4, 2, 4] as KeyCounts, ["k3", 9, 1, 0, 0, 90, 0, 900] as KeyCounts],
    };
    expect(addCounts(a, b).worst).toEqual([
      ["k2", 6, 1, 3, 1, 24, 2, 204],
      ["k1", 5, 3, 0, 0, 50, 0, 500],
      ["k3", 9, 1, 0, 0, 90, 0, 900],
    ]);
    const many = (tag: string) =>
      Array.from({ length: MAX_WORST_KEYS }, (_, i): KeyCounts => [`${tag}${i}`, 10, 1 + i, 0, 0, 0, 0, 0]);
    const merged = addCounts({ ...noCounts(), worst: many("a") }, { ...noCounts(), worst: many("b") }).worst!;
    expect(merged).toHaveLength(MAX_WORST_KEYS);
    expect(merged[0]![2]).toBe(MAX_WORST_KEYS);
    // Without worst keys on either side, the sum has none.
    expect(addCounts(noCounts(), noCounts())).not.toHaveProperty("worst");
  });
});

describe("the latency histogram", () => {
  it("puts each duration in the first bucket whose bound it does not exceed", () => {
    fc.assert(
      fc.property(fc.double({ min: 0, max: 60_000, noNaN: true }), (ms) => {
        const k = latencyBucketOf(ms);
        expect(ms).toBeLessThanOrEqual(latencyBoundMs(k) * (1 + 1e-9));
        if (k > 0) expect(ms).toBeGreaterThan(latencyBoundMs(k - 1));
      }),
    );
  });

  it("reads a percentile within a fifth above the true one", () => {
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 1, max: 30_000 }), { minLength: 1, maxLength: 300 }), (durations) => {
        const pairs = addLatency(
          [],
          durations.map((ms) => [latencyBucketOf(ms), 1]),
        );
        const sorted = [...durations].sort((x, y) => x - y);
        const exact = sorted[Math.ceil(0.99 * sorted.length) - 1]!;
        const read = latencyAt(pairs, 99)!;
        expect(read).toBeGreaterThanOrEqual(exact);
        expect(read).toBeLessThanOrEqual(exact * 2 ** 0.25 * (1 + 1e-9));
      }),
    );
  });

  it("adds histograms, and leaves out pairs that are not a bucket and a positive count", () => {
    expect(
      addLatency(
        [
          [3, 2],
          [10, 1],
        ],
        [
          [3, 1],
          [99, 5],
          [-1, 1],
          [4, 0],
          [5, 1.5],
        ],
      ),
    ).toEqual([
      [3, 3],
      [10, 1],
    ]);
    expect(latencyAt([], 99)).toBeNull();
  });
});
