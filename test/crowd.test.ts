/**
 * An isolate's requests at the origin, and when they crowd it
 * (src/isolate/crowd.ts): from one and a half times the most that were in
 * flight when one of them was still answered within the target, at least
 * eight, learned afresh over every ten seconds; never before one answer
 * within the target. A request whose client left stays at the origin until
 * one started after it is answered.
 */
import { describe, expect, it } from "vitest";
import { CROWD, Crowd, type Start } from "../src/isolate/crowd.ts";

/** `n` requests started at once. */
const start = (crowd: Crowd, n: number): Start[] => Array.from({ length: n }, () => crowd.started());
/** One request started and answered within the target at `atMs`, with `n` others in flight beside it. */
const answeredBeside = (crowd: Crowd, atMs: number): void => crowd.answered(crowd.started(), true, atMs);

describe("an isolate's crowd of requests at the origin", () => {
  it("crowds nothing before a request was answered within the target, however many are in flight", () => {
    const crowd = new Crowd();
    const all = start(crowd, 100);
    expect(crowd.flying).toBe(100);
    expect(crowd.crowded(0)).toBe(false);
    crowd.answered(all[99]!, false, 10);
    expect(crowd.crowded(10)).toBe(false);
    expect(crowd.bound).toBe(Infinity);
  });

  it("crowds the origin from one and a half times the most in flight when one was answered within the target", () => {
    const crowd = new Crowd();
    const all = start(crowd, 6);
    expect(all.map((s) => s.level)).toEqual([1, 2, 3, 4, 5, 6]);
    crowd.answered(all[5]!, true, 100); // the sixth, with five others in flight, answered in time
    expect(crowd.bound).toBe(9);
    start(crowd, 3);
    expect(crowd.flying).toBe(8);
    expect(crowd.crowded(100)).toBe(false);
    crowd.started();
    expect(crowd.crowded(100)).toBe(true);
    crowd.answered(all[4]!, true, 150);
    expect(crowd.crowded(150)).toBe(false);
  });

  it("learns nothing from a slow or failed answer", () => {
    const crowd = new Crowd();
    const all = start(crowd, 3);
    crowd.answered(all[0]!, true, 10);
    expect(crowd.bound).toBe(CROWD.minimum);
    crowd.answered(all[2]!, false, 20);
    expect(crowd.bound).toBe(CROWD.minimum);
  });

  it("never crowds the origin below the minimum", () => {
    const crowd = new Crowd();
    answeredBeside(crowd, 0);
    expect(crowd.bound).toBe(8);
    // A burst of 8 at once from a quiet isolate is never refused: the 9th is.
    start(crowd, 7);
    expect(crowd.crowded(0)).toBe(false);
    crowd.started();
    expect(crowd.crowded(0)).toBe(true);
  });

  it("forgets what a span learned after the next one: the bound follows an origin that got slower", () => {
    const crowd = new Crowd();
    const all = start(crowd, 20);
    crowd.answered(all[19]!, true, 0);
    expect(crowd.bound).toBe(30);
    // The next span: still known.
    expect(crowd.crowded(CROWD.spanMs)).toBe(false);
    expect(crowd.bound).toBe(30);
    crowd.answered({ level: 6, seq: all[5]!.seq }, true, CROWD.spanMs + 1);
    // The span after: only what the one before learned, and the 18 still in flight crowd it.
    expect(crowd.crowded(2 * CROWD.spanMs)).toBe(true);
    expect(crowd.bound).toBe(9);
    // Long quiet: nothing recent, the minimum.
    expect(crowd.bound).toBe(9);
    crowd.crowded(10 * CROWD.spanMs);
    expect(crowd.bound).toBe(CROWD.minimum);
  });

  it("keeps a request whose client left until one started after it is answered: the origin still works on it", () => {
    const crowd = new Crowd();
    answeredBeside(crowd, 0);
    const [first, a, b] = start(crowd, 3);
    crowd.left(b!, 2_000);
    crowd.left(a!, 2_001);
    expect(crowd.flying).toBe(3);
    // An answer to a request started before them says nothing of them; one to a request started after them does.
    crowd.answered(first!, true, 2_100);
    expect(crowd.flying).toBe(2);
    crowd.answered(crowd.started(), true, 2_200);
    expect(crowd.flying).toBe(0);
  });

  it("keeps a request whose client left for ten seconds at most, when nothing started after it is answered", () => {
    const crowd = new Crowd();
    answeredBeside(crowd, 0);
    const all = start(crowd, 8);
    for (const s of all) crowd.left(s, 1_000);
    expect(crowd.crowded(1_000 + CROWD.spanMs - 1)).toBe(true);
    expect(crowd.crowded(1_000 + CROWD.spanMs)).toBe(false);
    expect(crowd.flying).toBe(0);
  });

  it("is not crowded by many requests one client keeps at the origin while the others beside them are answered in time", () => {
    const crowd = new Crowd();
    answeredBeside(crowd, 0);
    // 100 slow requests of one client go in flight at once: for a moment, they crowd it.
    start(crowd, 100);
    expect(crowd.crowded(10)).toBe(true);
    // A request sent beside them (101 in flight at its start) is answered within the target: the origin copes.
    answeredBeside(crowd, 60);
    expect(crowd.bound).toBe(151.5);
    expect(crowd.crowded(60)).toBe(false);
  });

  it("counts one client's requests for at most half the bound: a client holding slow requests at the origin never crowds it alone", () => {
    const crowd = new Crowd();
    answeredBeside(crowd, 0);
    expect(crowd.bound).toBe(8);
    // One client holds 12 requests at the origin (answered in 15 s, say), and nothing else goes: they count as 4.
    const held = Array.from({ length: 12 }, () => crowd.started("a"));
    expect(crowd.flying).toBe(12);
    expect(crowd.crowded(10)).toBe(false);
    // Others beside them: 3 more is under the bound; the 4th crowds it. Or a second client holding as many.
    for (const key of ["b", "c", "d"]) crowd.started(key);
    expect(crowd.crowded(10)).toBe(false);
    crowd.started("e");
    expect(crowd.crowded(10)).toBe(true);
    // Its requests answered (or its client gone, and the origin past them), they count no more.
    for (const request of held) crowd.answered(request, false, 20);
    expect(crowd.flying).toBe(4);
    expect(crowd.crowded(20)).toBe(false);
    for (const key of ["x", "y"]) for (let i = 0; i < 12; i++) crowd.started(key);
    expect(crowd.crowded(30)).toBe(true);
  });

  it("never counts fewer than none in flight", () => {
    const crowd = new Crowd();
    crowd.answered({ level: 1, seq: 1 }, true, 0);
    expect(crowd.flying).toBe(0);
  });
});
