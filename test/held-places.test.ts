/**
 * The places a key's requests in flight hold (src/isolate/held-places.ts),
 * alone, on plain numbers (isolate milliseconds): each renewed every third
 * of its timeout, and the key's places due about then renewed together.
 */
import { describe, expect, it } from "vitest";
import { HeldPlaces } from "../src/isolate/held-places.ts";

describe("a key's places in flight, renewed together", () => {
  it("one call renews every place of the key due within a sixth of its timeout; the others' timers then find theirs fresh", () => {
    const places = new HeldPlaces();
    for (const id of ["a", "b", "c"]) places.hold(id, "cap", 3_000, 0);
    places.hold("late", "cap", 3_000, 800);
    expect(places.toRenew("a", 999)).toBeNull(); // a third of 3 s is 1 s
    // At a's third: a, b and c (a third old), not "late" (200 ms old, under a sixth).
    expect(places.toRenew("a", 1_000)).toEqual(["a", "b", "c"]);
    // b's and c's timers, a moment later, while a's call is on its way: theirs count as renewed.
    expect(places.toRenew("b", 1_001)).toBeNull();
    expect(places.nextRenewalMs("b", 1_001)).toBe(2_000);
    // "late"'s third: the others are 800 ms from theirs, within a sixth, and go with it.
    expect(places.toRenew("late", 1_800)).toEqual(["a", "b", "c", "late"]);
    // A place whose request ended is no longer renewed, nor held.
    expect(places.drop("c")).toEqual({ rule: "cap", timeoutMs: 3_000, renewedAtMs: 1_800 });
    expect(places.holds("c")).toBe(false);
    expect(places.toRenew("a", 2_800)).toEqual(["a", "b", "late"]);
  });

  it("renews each place on its own timeout: a short one due does not take a long one not yet a sixth old", () => {
    const places = new HeldPlaces();
    places.hold("short", "fast", 600, 0);
    places.hold("long", "slow", 60_000, 0);
    expect(places.toRenew("short", 200)).toEqual(["short"]); // "long" is 200 ms old: under 10 s, a sixth of it
    expect(places.nextRenewalMs("short", 200)).toBe(400);
    expect(places.nextRenewalMs("long", 200)).toBe(20_000);
    expect(places.toRenew("long", 20_000)).toEqual(["short", "long"]);
  });

  it.each([
    ["never held", () => new HeldPlaces()],
    [
      "dropped",
      () => {
        const places = new HeldPlaces();
        places.hold("p", "cap", 3_000, 0);
        places.drop("p");
        return places;
      },
    ],
  ])("has nothing to renew for a place %s: its timer stops", (_, make) => {
    const places = make();
    expect(places.holds("p")).toBe(false);
    expect(places.toRenew("p", 10_000)).toBeNull();
    expect(places.drop("p")).toBeUndefined();
    expect(places.nextRenewalMs("p", 10_000)).toBe(10_000);
  });
});
