import { describe, expect, it } from "vitest";
import { check, emptyState } from "../src/core/sliding-window.ts";
import { EDGE_GUARD_MS, waitBeforeEdge } from "./support/window-edge.ts";

const HOUR = 3_600_000;

describe("why tests start clear of a minute's edge", () => {
  it("limit requests just before an hour window's edge leave room for one more just after it (the window is weighted)", () => {
    const window = { limit: 2, periodMs: HOUR, precision: 1, strict: false };
    const edge = 19 * HOUR;
    let state = emptyState(edge - 50, window);
    for (const at of [edge - 50, edge - 20]) {
      const step = check(state, at, window);
      expect(step.decision.allowed).toBe(true);
      state = step.state;
    }
    expect(check(state, edge + 10, window).decision.allowed).toBe(true);
    expect(check(state, edge - 10, window).decision.allowed).toBe(false);
  });
});

describe("waitBeforeEdge", () => {
  const minute = 28_000_000 * 60_000;
  it("lets a test start at once when the next minute is at least the guard away", () => {
    expect(waitBeforeEdge(minute)).toBe(0);
    expect(waitBeforeEdge(minute + 30_000)).toBe(0);
    expect(waitBeforeEdge(minute + 60_000 - EDGE_GUARD_MS)).toBe(0);
  });
  it("makes a test that would start closer wait until just past the minute", () => {
    for (const before of [EDGE_GUARD_MS - 1, 300, 1]) {
      const now = minute + 60_000 - before;
      const wait = waitBeforeEdge(now);
      expect(wait).toBeGreaterThan(before);
      expect(waitBeforeEdge(now + wait)).toBe(0);
      expect(Math.floor((now + wait) / 60_000)).toBe(Math.floor(now / 60_000) + 1);
    }
  });
});
