/**
 * An isolate's requests in flight at the origin, and when they crowd it
 * (src/isolate/crowd.ts): from one and a half times the most that were in
 * flight when one of them was still answered within the target, at least
 * four, learned
 * afresh over every ten seconds; never before one answer within the target.
 */
import { describe, expect, it } from "vitest";
import { CROWD, Crowd } from "../src/isolate/crowd.ts";

/** `n` requests started at once: their levels. */
const start = (crowd: Crowd, n: number): number[] => Array.from({ length: n }, () => crowd.started());

describe("an isolate's crowd of requests in flight", () => {
  it("crowds nothing before a request was answered within the target, however many are in flight", () => {
    const crowd = new Crowd();
    start(crowd, 100);
    expect(crowd.flying).toBe(100);
    expect(crowd.crowded(0)).toBe(false);
    crowd.ended(100, false, 10);
    expect(crowd.crowded(10)).toBe(false);
    expect(crowd.bound).toBe(Infinity);
  });

  it("crowds the origin from one and a half times the most in flight when one was answered within the target", () => {
    const crowd = new Crowd();
    const levels = start(crowd, 6);
    expect(levels).toEqual([1, 2, 3, 4, 5, 6]);
    crowd.ended(6, true, 100); // the sixth, with five others in flight, answered in time
    expect(crowd.bound).toBe(9);
    start(crowd, 3);
    expect(crowd.flying).toBe(8);
    expect(crowd.crowded(100)).toBe(false);
    crowd.started();
    expect(crowd.crowded(100)).toBe(true);
    crowd.ended(3, true, 150);
    expect(crowd.crowded(150)).toBe(false);
  });

  it("learns nothing from a slow or failed answer, nor from a client gone", () => {
    const crowd = new Crowd();
    start(crowd, 3);
    crowd.ended(1, true, 10);
    expect(crowd.bound).toBe(CROWD.minimum);
    crowd.ended(3, false, 20);
    expect(crowd.bound).toBe(CROWD.minimum);
  });

  it("never crowds the origin below the minimum", () => {
    const crowd = new Crowd();
    crowd.started();
    crowd.ended(1, true, 0);
    expect(crowd.bound).toBe(4);
    start(crowd, 3);
    expect(crowd.crowded(0)).toBe(false);
    crowd.started();
    expect(crowd.crowded(0)).toBe(true);
  });

  it("forgets what a span learned after the next one: the bound follows an origin that got slower", () => {
    const crowd = new Crowd();
    start(crowd, 20);
    crowd.ended(20, true, 0);
    expect(crowd.bound).toBe(30);
    // The next span: still known.
    expect(crowd.crowded(CROWD.spanMs)).toBe(false);
    expect(crowd.bound).toBe(30);
    crowd.ended(6, true, CROWD.spanMs + 1);
    // The span after: only what the one before learned, and the 18 still in flight crowd it.
    expect(crowd.crowded(2 * CROWD.spanMs)).toBe(true);
    expect(crowd.bound).toBe(9);
    // Long quiet: nothing recent, the minimum.
    expect(crowd.crowded(10 * CROWD.spanMs)).toBe(true);
    expect(crowd.bound).toBe(CROWD.minimum);
  });

  it("is not crowded by many requests one client keeps at the origin while the others beside them are answered in time", () => {
    const crowd = new Crowd();
    crowd.started();
    crowd.ended(1, true, 0);
    // 100 slow requests of one client go in flight at once: for a moment, they crowd it.
    start(crowd, 100);
    expect(crowd.crowded(10)).toBe(true);
    // A request sent beside them (101 in flight at its start) is answered within the target: the origin copes.
    const level = crowd.started();
    crowd.ended(level, true, 60);
    expect(crowd.bound).toBe(151.5);
    expect(crowd.crowded(60)).toBe(false);
  });

  it("never counts fewer than none in flight", () => {
    const crowd = new Crowd();
    crowd.ended(1, true, 0);
    expect(crowd.flying).toBe(0);
  });
});
