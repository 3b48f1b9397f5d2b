import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  acquire,
  EMPTY_LINE,
  enqueue,
  type Line,
  liveAt,
  nextChangeMs,
  release,
  renew,
  serve,
  withdraw,
} from "../src/core/places.ts";

const T0 = 1_795_000_000_000;
const MINUTE = 60_000;

/** `n` places taken at T0 under a limit of `limit`, named p1, p2, … */
function taken(n: number, limit = 3, timeoutMs = MINUTE): Line {
  let line = EMPTY_LINE;
  for (let i = 1; i <= n; i++) line = acquire(line, { nowMs: T0, limit, timeoutMs, placeId: `p${i}` }).line;
  return line;
}

let names = 0;
const newId = () => `g${++names}`;

describe("places under a limit of 3", () => {
  it.each([
    { held: 0, free: 2 },
    { held: 2, free: 0 },
  ])("gives a place while $held are held, with $free left free", ({ held, free }) => {
    const got = acquire(taken(held), { nowMs: T0, limit: 3, timeoutMs: MINUTE, placeId: "new" });
    expect(got).toMatchObject({ place: { id: "new", expiresAtMs: T0 + MINUTE }, free });
  });

  it("refuses a fourth, saying 3 are in use", () => {
    expect(acquire(taken(3), { nowMs: T0, limit: 3, timeoutMs: MINUTE, placeId: "new" })).toMatchObject({
      place: null,
      inUse: 3,
    });
  });

  it("takes a place back once its holder has not renewed it for its timeout, and not a millisecond before", () => {
    const line = taken(3);
    const ask = { limit: 3, timeoutMs: MINUTE, placeId: "new" };
    expect(acquire(line, { ...ask, nowMs: T0 + MINUTE - 1 }).place).toBeNull();
    expect(acquire(line, { ...ask, nowMs: T0 + MINUTE }).place).not.toBeNull();
  });

  it("keeps a renewed place a whole timeout from the renewal, and says which were taken back already", () => {
    const line = taken(2, 3, 5_000);
    const renewed = renew(line, ["p1", "p9"], T0 + 4_000);
    expect(renewed.renewed.map((p) => [p.id, p.expiresAtMs])).toEqual([["p1", T0 + 9_000]]);
    expect(renewed.unknown).toEqual(["p9"]);
    // p2 was not renewed: taken back at T0 + 5 s; p1 is held until T0 + 9 s.
    expect(liveAt(renewed.line.places, T0 + 5_000).map((p) => p.id)).toEqual(["p1"]);
    expect(renew(renewed.line, ["p2"], T0 + 5_000).unknown).toEqual(["p2"]);
  });

  it("frees a released place at once, and releases each place once", () => {
    const first = release(taken(3), ["p2"]);
    expect(first.released).toEqual(["p2"]);
    expect(release(first.line, ["p2"]).released).toEqual([]);
    expect(acquire(first.line, { nowMs: T0, limit: 3, timeoutMs: MINUTE, placeId: "new" }).place).not.toBeNull();
  });
});

describe("requests waiting for a place", () => {
  const ticket = (id: string, deadlineMs: number) => ({ id, deadlineMs, limit: 3, timeoutMs: MINUTE });

  it("gives each place freed to the oldest ticket, and makes a newcomer queue behind the tickets", () => {
    let line = enqueue(enqueue(taken(3), ticket("t1", T0 + 5_000)), ticket("t2", T0 + 5_000));
    line = release(line, ["p1"]).line;
    // A place is free, but t1 came first: a request that has just arrived does not take it.
    expect(acquire(line, { nowMs: T0 + 10, limit: 3, timeoutMs: MINUTE, placeId: "new" })).toMatchObject({
      place: null,
    });
    const served = serve(line, T0 + 10, newId);
    expect(served.granted.map((g) => [g.ticket.id, g.free])).toEqual([["t1", 0]]);
    expect(served.line.tickets.map((t) => t.id)).toEqual(["t2"]);
  });

  it("drops a ticket at its deadline, and the next one gets the place", () => {
    let line = enqueue(enqueue(taken(3), ticket("t1", T0 + 1_000)), ticket("t2", T0 + 9_000));
    line = release(line, ["p3"]).line;
    const served = serve(line, T0 + 1_000, newId);
    expect(served.lapsed.map((t) => t.id)).toEqual(["t1"]);
    expect(served.granted.map((g) => g.ticket.id)).toEqual(["t2"]);
  });

  it("wakes at the earliest deadline or expiry while tickets wait, and never without one", () => {
    expect(nextChangeMs(taken(3))).toBeNull();
    expect(nextChangeMs(enqueue(taken(3), ticket("t1", T0 + 1_000)))).toBe(T0 + 1_000);
    expect(nextChangeMs(enqueue(taken(3, 3, 500), ticket("t1", T0 + 1_000)))).toBe(T0 + 500);
  });

  it("forgets a ticket withdrawn (its client hung up)", () => {
    const line = withdraw(enqueue(taken(3), ticket("t1", T0 + 1_000)), "t1");
    expect(line.tickets).toEqual([]);
  });
});

describe("never more than the limit in flight, and first come first served", () => {
  const step = fc.oneof(
    fc.record({ kind: fc.constant("acquire" as const), waitMs: fc.oneof(fc.constant(0), fc.nat(3_000)) }),
    fc.record({ kind: fc.constant("release" as const), pick: fc.nat() }),
    fc.record({ kind: fc.constant("renew" as const), pick: fc.nat() }),
    fc.record({ kind: fc.constant("withdraw" as const), pick: fc.nat() }),
    fc.record({ kind: fc.constant("time" as const), ms: fc.nat(2_000) }),
  );

  it("holds over random arrivals, releases, renewals, hang-ups and vanished holders", () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 4 }), fc.array(step, { minLength: 10, maxLength: 120 }), (limit, steps) => {
        const timeoutMs = 1_500;
        let nowMs = T0;
        let line = EMPTY_LINE;
        let ids = 0;
        const newPlace = () => `p${++ids}`;
        let lastGranted = -1;
        const order = new Map<string, number>();
        const settle = () => {
          const served = serve(line, nowMs, newPlace);
          line = served.line;
          for (const grant of served.granted) {
            // Granted in the order the tickets were taken, each before its deadline, within the limit.
            expect(order.get(grant.ticket.id)!).toBeGreaterThan(lastGranted);
            lastGranted = order.get(grant.ticket.id)!;
            expect(grant.ticket.deadlineMs).toBeGreaterThan(nowMs);
          }
          for (const ticket of served.lapsed) expect(ticket.deadlineMs).toBeLessThanOrEqual(nowMs);
          // Nobody waits while a place is free.
          if (line.tickets.length > 0) expect(liveAt(line.places, nowMs).length).toBeGreaterThanOrEqual(limit);
        };
        for (const s of steps) {
          if (s.kind === "time") nowMs += s.ms;
          else if (s.kind === "acquire") {
            const got = acquire(line, { nowMs, limit, timeoutMs, placeId: newPlace() });
            line = got.line;
            if (got.place === null && s.waitMs > 0) {
              const id = `t${++ids}`;
              order.set(id, ids);
              line = enqueue(line, { id, deadlineMs: nowMs + s.waitMs, limit, timeoutMs });
            }
          } else if (s.kind === "release" && line.places.length > 0) {
            line = release(line, [line.places[s.pick % line.places.length]!.id]).line;
          } else if (s.kind === "renew" && line.places.length > 0) {
            line = renew(line, [line.places[s.pick % line.places.length]!.id], nowMs).line;
          } else if (s.kind === "withdraw" && line.tickets.length > 0) {
            line = withdraw(line, line.tickets[s.pick % line.tickets.length]!.id);
          }
          settle();
          expect(liveAt(line.places, nowMs).length).toBeLessThanOrEqual(limit);
          // A place nobody renews is gone within its timeout.
          for (const place of line.places) expect(place.expiresAtMs).toBeLessThanOrEqual(nowMs + timeoutMs);
        }
      }),
      { numRuns: 500 },
    );
  });
});
