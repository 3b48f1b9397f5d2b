/**
 * A key's demand as one isolate sees it (src/isolate/demand.ts), alone, on
 * plain numbers (isolate milliseconds): what a call asks of a lease from the
 * requests seen lately, the previous demand window weighted as in the
 * sliding window, over how long they were seen.
 */
import { describe, expect, it } from "vitest";
import { DEMAND_WINDOW_MS, Demand, MIN_SEEN_MS } from "../src/isolate/demand.ts";

/** The isolate time of the 0th millisecond of an hour, so windows start on round numbers. */
const HOUR = 3_600_000 * 500_000;

describe("a key's demand, as a lease request", () => {
  it("asks for nothing while leases are off", () => {
    const demand = new Demand(HOUR);
    demand.note(HOUR);
    expect(demand.leaseRequest(0, HOUR)).toBeUndefined();
  });

  it.each([
    // [what, first seen, requests at, asked at, seen, over]
    ["one request asks too: a key seen once", 0, [0], 0, 1, MIN_SEEN_MS],
    ["requests in one instant count over a second at least", 0, [0, 0, 0, 0], 10, 4, MIN_SEEN_MS],
    ["over how long the key has been seen, under a window", 0, [0, 5_000, 29_000], 30_000, 3, 30_000],
    ["over a window at most", 0, [0, 50_000, 61_000], 70_000, 1 + 1, DEMAND_WINDOW_MS],
    [
      "the previous window, weighted by the part of it still inside",
      0,
      [...Array(40).fill(1_000), 60_000],
      75_000,
      1 + 30,
      DEMAND_WINDOW_MS,
    ],
    [
      "the previous window's weight rounds down with the rest",
      0,
      [...Array(3).fill(1_000), 60_000],
      90_000,
      1 + 1,
      DEMAND_WINDOW_MS,
    ],
    [
      "a window with no request in it leaves nothing of the one before",
      0,
      [...Array(40).fill(1_000), 121_000],
      130_000,
      1,
      DEMAND_WINDOW_MS,
    ],
  ] as const)("%s", (_, firstMs, requestsMs, askedMs, seen, seenInMs) => {
    const demand = new Demand(HOUR + firstMs);
    for (const atMs of requestsMs) demand.note(HOUR + atMs);
    expect(demand.leaseRequest(64, HOUR + askedMs)).toEqual({ units: 64, seen, seenInMs });
  });

  it("forgets every request seen, and when the key was first seen, once reset", () => {
    const demand = new Demand(HOUR);
    for (let i = 0; i < 20; i++) demand.note(HOUR + i * 1_000);
    expect(demand.leaseRequest(8, HOUR + 30_000)).toEqual({ units: 8, seen: 20, seenInMs: 30_000 });
    demand.reset(HOUR + 30_000);
    expect(demand.leaseRequest(8, HOUR + 30_500)).toEqual({ units: 8, seen: 0, seenInMs: MIN_SEEN_MS });
    demand.note(HOUR + 31_000);
    expect(demand.leaseRequest(8, HOUR + 35_000)).toEqual({ units: 8, seen: 1, seenInMs: 5_000 });
  });
});
