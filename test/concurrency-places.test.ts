import { abortAllDurableObjects, evictDurableObject, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { afterEach, describe, expect, it, vi } from "vitest";
import type { Override } from "../src/core/overrides.ts";
import { parseRules } from "../src/core/rules.ts";
import {
  acquirePlace,
  awaitPlace,
  awaitTurn,
  cancelBooking,
  cancelTicket,
  checkKey,
  releasePlaces,
  renewPlaces,
} from "../src/object/client.ts";
import { type PlaceAcquired, type PlaceRequest, type PlaceWait, toPlaceRequest } from "../src/object/protocol.ts";
import type { RateLimiter } from "../src/object/rate-limiter.ts";
import { env } from "./support/env.ts";
import { placed } from "./support/isolate.ts";

/** Three of a client's requests in flight at once; a place not renewed for 30 s is taken back. */
const three = (over: Partial<PlaceRequest> = {}): PlaceRequest => ({ concurrency: 3, placeTimeoutMs: 30_000, ...over });

let objects = 0;
const freshObject = () => env.RATE_LIMITER.get(env.RATE_LIMITER.idFromName(`places-test-${++objects}-${Date.now()}`));

/** Only `Date` is faked (see test/held-requests.test.ts): the object's timer is real. */
const T0 = Date.UTC(2031, 0, 1, 0, 0, 0);
const fakeClock = (ms: number) => {
  vi.useFakeTimers({ toFake: ["Date"] });
  vi.setSystemTime(ms);
};
afterEach(() => {
  vi.useRealTimers();
});

async function acquireAll(stub: DurableObjectStub<RateLimiter>, n: number, request = three()) {
  const answers = [];
  for (let i = 0; i < n; i++) answers.push(await stub.acquire("ai", request));
  return answers;
}
const placeIds = (answers: { status: string }[]) =>
  answers.filter((a): a is PlaceAcquired => a.status === "acquired").map((a) => a.placeId);

/** The places an object has stored, with their expiry from T0. */
const storedPlaces = (stub: DurableObjectStub<RateLimiter>) =>
  runInDurableObject(stub, (_instance, state) => {
    const table = state.storage.sql.exec("SELECT 1 FROM sqlite_master WHERE name = 'places'").toArray();
    if (table.length === 0) return [];
    return state.storage.sql
      .exec<{ expires_at: number }>("SELECT expires_at FROM places ORDER BY expires_at")
      .toArray()
      .map((p) => p.expires_at - T0);
  });

describe("a concurrency rule's places", () => {
  it("gives 3 places, saying how many are left, and refuses a fourth with the places in use", async () => {
    fakeClock(T0);
    const answers = await acquireAll(freshObject(), 4);
    expect(answers.map((a) => a.status)).toEqual(["acquired", "acquired", "acquired", "refused"]);
    expect(answers.map((a) => (a.status === "acquired" ? a.free : a.status === "refused" ? a.inUse : -1))).toEqual([
      2, 1, 0, 3,
    ]);
    expect(answers[0]).toMatchObject({ expiresAtMs: T0 + 30_000 });
  });

  it("gives exactly 3 places to 100 requests that ask at once, from however many isolates", async () => {
    fakeClock(T0);
    const stub = freshObject();
    const answers = await Promise.all(Array.from({ length: 100 }, () => stub.acquire("ai", three())));
    expect(answers.filter((a) => a.status === "acquired")).toHaveLength(3);
    expect(await storedPlaces(stub)).toEqual([30_000, 30_000, 30_000]);
  });

  it("frees a released place for the next request, and says which ids it did not hold", async () => {
    fakeClock(T0);
    const stub = freshObject();
    const ids = placeIds(await acquireAll(stub, 3));
    expect(await stub.release([ids[1]!, "no-such-place"])).toEqual({
      nowMs: T0,
      released: [ids[1]],
      unknown: ["no-such-place"],
    });
    expect((await stub.acquire("ai", three())).status).toBe("acquired");
  });

  it("keeps a renewed place a whole timeout from the renewal, and takes back one not renewed after its timeout", async () => {
    fakeClock(T0);
    const stub = freshObject();
    const [kept, lost] = placeIds(await acquireAll(stub, 2));
    vi.setSystemTime(T0 + 20_000);
    expect(await stub.renew([kept!])).toEqual({
      nowMs: T0 + 20_000,
      renewed: [{ placeId: kept, expiresAtMs: T0 + 50_000 }],
      unknown: [],
    });
    vi.setSystemTime(T0 + 30_000);
    // The holder of `lost` stopped renewing it (its isolate vanished): taken back, its renewal comes too late.
    expect(await stub.renew([kept!, lost!])).toMatchObject({ unknown: [lost] });
    expect((await acquireAll(stub, 3)).map((a) => a.status)).toEqual(["acquired", "acquired", "refused"]);
  });

  it("counts every place after a crash and restart until it expires: they come back within the place timeout", async () => {
    fakeClock(T0);
    const stub = freshObject();
    await acquireAll(stub, 3);
    await abortAllDurableObjects(); // a kill -9: nothing in memory survives
    const again = env.RATE_LIMITER.get(stub.id);
    vi.setSystemTime(T0 + 29_999);
    expect((await again.acquire("ai", three())).status).toBe("refused");
    vi.setSystemTime(T0 + 30_000);
    expect((await acquireAll(again, 3)).map((a) => a.status)).toEqual(["acquired", "acquired", "acquired"]);
  });

  it("keeps places across eviction", async () => {
    fakeClock(T0);
    const stub = freshObject();
    const ids = placeIds(await acquireAll(stub, 3));
    await evictDurableObject(stub);
    expect((await stub.acquire("ai", three())).status).toBe("refused");
    expect((await stub.renew(ids)).unknown).toEqual([]);
  });

  it("counts each rule's places apart", async () => {
    fakeClock(T0);
    const stub = freshObject();
    await acquireAll(stub, 3);
    expect((await stub.acquire("other", three({ concurrency: 1 }))).status).toBe("acquired");
  });

  it("gives the number of places an override or a tier gives the client, and refuses a denied client", async () => {
    fakeClock(T0);
    const stub = freshObject();
    const now = Date.now();
    const override = { expiresAtMs: null, note: "", updatedAtMs: now, by: "t" };
    await stub.setOverride("ai", { kind: "limit", limit: 1, ...override }, 1);
    expect((await acquireAll(stub, 2)).map((a) => a.status)).toEqual(["acquired", "refused"]);
    await stub.setOverride("ai", { kind: "tier", tier: "pro", ...override }, 2);
    expect(await stub.acquire("ai", three({ tiers: { pro: 2 } }))).toMatchObject({
      status: "acquired",
      limit: 2,
      override: "tier",
    });
    await stub.setOverride("ai", { kind: "deny", ...override }, 3);
    expect(await stub.acquire("ai", three())).toMatchObject({ status: "refused", override: "deny" });
    await stub.setOverride("ai", { kind: "unlimited", ...override }, 4);
    expect((await acquireAll(stub, 5)).map((a) => a.status)).toEqual(Array(5).fill("acquired"));
  });

  it("are what a parsed rule asks for: its concurrency, place timeout, delay and bound", () => {
    const parsed = parseRules([{ id: "ai", concurrency: 2, place_timeout: "20s", max_delay: "3s" }]);
    expect(parsed.ok && toPlaceRequest(placed(parsed.value[0]))).toEqual({
      concurrency: 2,
      placeTimeoutMs: 20_000,
      maxDelayMs: 3_000,
      maxHeld: 1_000,
    });
  });
});

describe("a request that may wait for a place (max_delay)", () => {
  const waiting = three({ maxDelayMs: 10_000, maxHeld: 2 });

  it("takes a ticket when none is free, and gets the place released, first come first served", async () => {
    fakeClock(T0);
    const stub = freshObject();
    const ids = placeIds(await acquireAll(stub, 3, waiting));
    const [first, second] = await acquireAll(stub, 2, waiting);
    expect(first).toMatchObject({ status: "queued", deadlineMs: T0 + 10_000, ahead: 0 });
    expect(second).toMatchObject({ status: "queued", ahead: 1 });
    const answers: PlaceWait[] = [];
    const waits = [first, second].map((t) =>
      stub.awaitPlace(t!.status === "queued" ? t!.ticketId : "").then((a) => answers.push(a)),
    );
    // A newcomer does not jump the line, even with a place about to free.
    expect((await stub.acquire("ai", waiting)).status).toBe("refused"); // max_held 2 are waiting
    await stub.release([ids[0]!]);
    await waits[0];
    expect(answers).toEqual([expect.objectContaining({ status: "acquired", free: 0 })]);
    await stub.release([ids[1]!]);
    await waits[1];
    expect(answers.map((a) => a.status)).toEqual(["acquired", "acquired"]);
  });

  describe("when an admin change comes while it waits (docs/per-client-limits.md, requests already waiting)", () => {
    const override = (kind: Record<string, unknown>) =>
      ({ expiresAtMs: null, note: "", updatedAtMs: T0, by: "t", ...kind }) as Override;
    /** 3 places held, and two requests in line, each awaiting its answer; what each was answered, in order. */
    async function lineOfTwo() {
      fakeClock(T0);
      const stub = freshObject();
      const ids = placeIds(await acquireAll(stub, 3, waiting));
      const tickets = await acquireAll(stub, 2, waiting);
      const answered: string[] = [];
      const waits = tickets.map((t, i) =>
        stub.awaitPlace(t.status === "queued" ? t.ticketId : "").then((a) => {
          answered.push(`#${i + 1} ${a.status}`);
          return a;
        }),
      );
      await stub.renew([]); // calls from one stub arrive in order: both wait now
      return { stub, ids, waits, answered };
    }

    it.each([
      ["unlimited", { kind: "unlimited" }],
      ["a raise to 5", { kind: "limit", limit: 5 }],
    ])("%s: both get a place at once, in the order they came", async (_name, kind) => {
      const { stub, waits, answered } = await lineOfTwo();
      await stub.setOverride("ai", override(kind), 1);
      await Promise.all(waits);
      expect(answered).toEqual(["#1 acquired", "#2 acquired"]);
    });

    it.each([
      ["unlimited", { kind: "unlimited" }, { override: "unlimited", free: 3 }],
      ["a raise to 6", { kind: "limit", limit: 6 }, { override: "limit", limit: 6, free: 1 }],
    ])(
      "%s: the place each gets says what applies to the client, as a place asked for after the change does",
      async (_name, kind, terms) => {
        const { stub, waits } = await lineOfTwo();
        await stub.setOverride("ai", override(kind), 1);
        const [first, second] = await Promise.all(waits);
        const after = await stub.acquire("ai", waiting);
        for (const answer of [first, second, after]) {
          const { free, ...rest } = terms;
          expect(answer).toMatchObject({ status: "acquired", ...rest });
          expect(Number.isFinite((answer as PlaceAcquired).free)).toBe(true);
        }
        expect(second).toMatchObject({ free: terms.free });
      },
    );

    it("a raise to 4: the first gets a place at once, the second waits on", async () => {
      const { stub, ids, waits, answered } = await lineOfTwo();
      await stub.setOverride("ai", override({ kind: "limit", limit: 4 }), 1);
      await waits[0];
      expect(answered).toEqual(["#1 acquired"]);
      await stub.release([ids[0]!]);
      await waits[1];
      expect(answered).toEqual(["#1 acquired", "#2 acquired"]);
    });

    it("a lower limit of 2: a freed place goes to nobody while 2 or more are held", async () => {
      const { stub, ids, waits, answered } = await lineOfTwo();
      await stub.setOverride("ai", override({ kind: "limit", limit: 2 }), 1);
      await stub.release([ids[0]!]); // 2 held: none free under the new limit
      await stub.renew([]);
      expect(answered).toEqual([]);
      await stub.release([ids[1]!]); // 1 held: the first in line goes
      await waits[0];
      expect(answered).toEqual(["#1 acquired"]);
      await stub.release([ids[2]!]);
      await Promise.all(waits);
      expect(answered).toEqual(["#1 acquired", "#2 acquired"]);
    });

    it("a deny: both are refused at once, denied, and a place freed later goes to nobody in that line", async () => {
      const { stub, ids, waits } = await lineOfTwo();
      await stub.setOverride("ai", override({ kind: "deny" }), 1);
      for (const answer of await Promise.all(waits)) {
        expect(answer).toMatchObject({ status: "refused", override: "deny" });
      }
      // The places held finish: their requests are in flight.
      expect(await stub.release(ids)).toMatchObject({ released: ids });
      expect(await stub.peekPlaces("ai", waiting)).toMatchObject({ inUse: 0, waiting: 0, override: "deny" });
    });

    it("a lower limit that expires: at its expiry the line gets the places it leaves free, as if it had been deleted then", async () => {
      fakeClock(T0);
      const stub = freshObject();
      await stub.setOverride("ai", override({ kind: "limit", limit: 1, expiresAtMs: T0 + 200 }), 1);
      expect((await stub.acquire("ai", waiting)).status).toBe("acquired");
      const tickets = await acquireAll(stub, 2, waiting);
      expect(tickets.map((t) => t.status)).toEqual(["queued", "queued"]);
      const waits = tickets.map((t) => stub.awaitPlace(t.status === "queued" ? t.ticketId : ""));
      await stub.renew([]); // calls arrive in order: both wait now
      // Only Date is faked: the object's timer runs in real time, 200 ms from T0.
      vi.setSystemTime(T0 + 200);
      const late = new Promise<"still waiting">((done) => setTimeout(() => done("still waiting"), 1_500));
      const answers = await Promise.race([Promise.all(waits), late]);
      expect(answers).not.toBe("still waiting");
      expect((answers as PlaceWait[]).map((a) => a.status)).toEqual(["acquired", "acquired"]);
    });

    it("another rule's change leaves it waiting", async () => {
      const { stub, ids, waits, answered } = await lineOfTwo();
      await stub.setOverride("other", override({ kind: "unlimited" }), 1);
      await stub.renew([]);
      expect(answered).toEqual([]);
      await stub.release(ids);
      await Promise.all(waits);
      expect(answered).toEqual(["#1 acquired", "#2 acquired"]);
    });
  });

  describe("when an adaptive rule's factor changes while it waits (docs/adaptive.md)", () => {
    /** 10 places under a factor of 0.3: 3 held, and two requests in line, each awaiting its answer. */
    const reduced = (factor: number) => three({ concurrency: 10, factor, maxDelayMs: 10_000, maxHeld: 2 });
    async function lineOfTwo() {
      fakeClock(T0);
      const stub = freshObject();
      const ids = placeIds(await acquireAll(stub, 3, reduced(0.3)));
      const tickets = await acquireAll(stub, 2, reduced(0.3));
      expect(tickets.map((t) => t.status)).toEqual(["queued", "queued"]);
      const answered: string[] = [];
      const waits = tickets.map((t, i) => {
        const wait = stub.awaitPlace(t.status === "queued" ? t.ticketId : "").then((a) => {
          answered.push(`#${i + 1} ${a.status}`);
          return a;
        });
        // A wait a test does not see to its end ends with the object when a later test aborts every object.
        wait.catch(() => undefined);
        return wait;
      });
      await stub.renew([]); // calls from one stub arrive in order: both wait now
      return { stub, ids, waits, answered };
    }

    it("a raise (5 places): both get a place with the first request that carries it, in order, before that request", async () => {
      const { stub, waits, answered } = await lineOfTwo();
      const later = await stub.acquire("ai", reduced(0.5));
      await Promise.all(waits);
      expect(answered).toEqual(["#1 acquired", "#2 acquired"]);
      expect(later.status).toBe("queued");
    });

    it("a cut (2 places): a freed place goes to nobody while 2 or more are held", async () => {
      const { stub, ids, waits, answered } = await lineOfTwo();
      expect((await stub.acquire("ai", reduced(0.2))).status).toBe("refused"); // max_held 2 are waiting
      await stub.release([ids[0]!]); // 2 held: none free under the cut
      await stub.renew([]);
      expect(answered).toEqual([]);
      await stub.release([ids[1]!]); // 1 held: the first in line goes
      await waits[0];
      expect(answered).toEqual(["#1 acquired"]);
    });
  });

  it("is refused at its deadline when no place frees, and the object's timer answers it then", async () => {
    fakeClock(T0);
    const stub = freshObject();
    await acquireAll(stub, 3, waiting);
    const ticket = await stub.acquire("ai", three({ maxDelayMs: 100 }));
    expect(ticket.status).toBe("queued");
    const answer = stub.awaitPlace(ticket.status === "queued" ? ticket.ticketId : "");
    await stub.renew([]); // calls arrive in order: the object awaits the place before the clock moves
    vi.setSystemTime(T0 + 100);
    // All 3 places it waited for are held.
    expect(await answer).toEqual({ status: "refused", nowMs: T0 + 100, free: 0, inUse: 3, limit: 3 });
    expect(await stub.awaitPlace(ticket.status === "queued" ? ticket.ticketId : "")).toMatchObject({
      status: "unknown",
    });
  });

  it("is refused when it comes for its place after its deadline", async () => {
    fakeClock(T0);
    const stub = freshObject();
    await acquireAll(stub, 3, waiting);
    const ticket = await stub.acquire("ai", waiting);
    vi.setSystemTime(T0 + 10_000);
    // All 3 places it waited for are held.
    expect(await stub.awaitPlace(ticket.status === "queued" ? ticket.ticketId : "")).toEqual({
      status: "refused",
      nowMs: T0 + 10_000,
      free: 0,
      inUse: 3,
      limit: 3,
    });
  });

  it("gets a place taken back from a vanished holder, when the object's timer finds it expired", async () => {
    fakeClock(T0);
    const stub = freshObject();
    await acquireAll(stub, 3, three({ placeTimeoutMs: 100, maxDelayMs: 10_000 }));
    const ticket = await stub.acquire("ai", three({ placeTimeoutMs: 100, maxDelayMs: 10_000 }));
    const answer = stub.awaitPlace(ticket.status === "queued" ? ticket.ticketId : "");
    await stub.renew([]);
    vi.setSystemTime(T0 + 100);
    expect(await answer).toMatchObject({ status: "acquired", expiresAtMs: T0 + 200 });
  });

  it("keeps a place given while its caller was away, until it comes for it", async () => {
    fakeClock(T0);
    const stub = freshObject();
    const ids = placeIds(await acquireAll(stub, 3, waiting));
    const ticket = await stub.acquire("ai", waiting);
    await stub.release([ids[0]!]);
    await evictDurableObject(stub);
    expect(await stub.awaitPlace(ticket.status === "queued" ? ticket.ticketId : "")).toMatchObject({
      status: "acquired",
    });
  });

  it("after a crash and restart, forgets the line: its callers' calls went with the object, and a freed place goes to a live request", async () => {
    fakeClock(T0);
    const stub = freshObject();
    const ids = placeIds(await acquireAll(stub, 3, waiting));
    const queued = await acquireAll(stub, 2, waiting);
    expect(queued.map((a) => a.status)).toEqual(["queued", "queued"]);
    await abortAllDurableObjects(); // a kill -9: the calls awaiting places are cut, and their requests with them
    const again = env.RATE_LIMITER.get(stub.id);
    await again.release([ids[0]!]);
    expect(await again.acquire("ai", waiting)).toMatchObject({ status: "acquired", free: 0 });
    // A caller that does come back for its ticket learns it is gone, and asks again.
    expect(await again.awaitPlace(queued[0]!.status === "queued" ? queued[0]!.ticketId : "")).toMatchObject({
      status: "unknown",
    });
  });

  it("gives its ticket back when its client hangs up, and the next in line moves up", async () => {
    fakeClock(T0);
    const stub = freshObject();
    const ids = placeIds(await acquireAll(stub, 3, waiting));
    const [gone, next] = await acquireAll(stub, 2, waiting);
    expect(await stub.cancelTicket(gone!.status === "queued" ? gone!.ticketId : "")).toEqual({ status: "cancelled" });
    await stub.release([ids[0]!]);
    expect(await stub.awaitPlace(next!.status === "queued" ? next!.ticketId : "")).toMatchObject({
      status: "acquired",
    });
    expect(await stub.cancelTicket("no-such-ticket")).toEqual({ status: "unknown" });
  });
});

describe("cleanup of places", () => {
  it("the alarm takes back expired places, and deletes the key's storage once none is left", async () => {
    fakeClock(T0);
    const stub = freshObject();
    const [kept] = placeIds(await acquireAll(stub, 2));
    expect(await runInDurableObject(stub, (_i, state) => state.storage.getAlarm())).toBe(T0 + 30_000);
    vi.setSystemTime(T0 + 10_000);
    await stub.renew([kept!]);
    vi.setSystemTime(T0 + 30_000);
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(await storedPlaces(stub)).toEqual([40_000]);
    vi.setSystemTime(T0 + 40_000);
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(await storedPlaces(stub)).toEqual([]);
    const tables = await runInDurableObject(stub, (_i, state) =>
      state.storage.sql
        .exec("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE '\\_%' ESCAPE '\\'")
        .toArray(),
    );
    expect(tables).toEqual([]);
  });
});

describe("the typed client", () => {
  it("holds a request, awaits its turn and cancels another through the object's calls, each under a deadline", async () => {
    fakeClock(T0);
    const name = `client-test-${Date.now()}`;
    const rule = { id: "r", limit: 1, periodMs: 100, precision: 1, strict: false, enforce: true, maxDelayMs: 5_000 };
    const check = { name, rules: [rule], leftMs: 1_000, timeoutMs: 1_000 };
    await checkKey(env.RATE_LIMITER, check, { hold: true });
    const [a, b] = [
      await checkKey(env.RATE_LIMITER, check, { hold: true }),
      await checkKey(env.RATE_LIMITER, check, { hold: true }),
    ];
    const first = a.ok ? a.result.held! : undefined;
    const second = b.ok ? b.result.held! : undefined;
    expect([first!.atMs - T0, second!.atMs - T0]).toEqual([101, 201]);
    // A deadline shorter than the wait: a labelled failure, and the caller goes on its own timer.
    expect(await awaitTurn(env.RATE_LIMITER, name, first!.bookingId, 20)).toEqual({
      ok: false,
      message: "no answer within 20ms",
    });
    expect(await cancelBooking(env.RATE_LIMITER, name, second!.bookingId, 1_000)).toEqual({
      ok: true,
      value: { status: "cancelled" },
    });
    vi.setSystemTime(T0 + 101);
    expect(await awaitTurn(env.RATE_LIMITER, name, first!.bookingId, 1_000)).toMatchObject({
      ok: true,
      value: { status: "turn", atMs: T0 + 101 },
    });
  });

  it("acquires, renews, waits for and releases places", async () => {
    fakeClock(T0);
    const name = `client-places-${Date.now()}`;
    const request = three({ concurrency: 1, maxDelayMs: 5_000 });
    const got = await acquirePlace(env.RATE_LIMITER, name, "ai", request, 1_000);
    const placeId = got.ok && got.value.status === "acquired" ? got.value.placeId : "";
    const queued = await acquirePlace(env.RATE_LIMITER, name, "ai", request, 1_000);
    const ticketId = queued.ok && queued.value.status === "queued" ? queued.value.ticketId : "";
    expect(await renewPlaces(env.RATE_LIMITER, name, [placeId], 1_000)).toMatchObject({
      ok: true,
      value: { renewed: [{ placeId }], unknown: [] },
    });
    const waited = awaitPlace(env.RATE_LIMITER, name, ticketId, 1_000);
    expect(await releasePlaces(env.RATE_LIMITER, name, [placeId], 1_000)).toMatchObject({
      ok: true,
      value: { released: [placeId] },
    });
    expect(await waited).toMatchObject({ ok: true, value: { status: "acquired" } });
    expect(await cancelTicket(env.RATE_LIMITER, name, ticketId, 1_000)).toEqual({
      ok: true,
      value: { status: "unknown" },
    });
  });
});
