import { abortAllDurableObjects, evictDurableObject, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { afterEach, describe, expect, it, vi } from "vitest";
import type { Override } from "../src/core/overrides.ts";
import type { CheckResult, WindowCheck as RuleCheck, TurnAnswer } from "../src/object/protocol.ts";
import type { RateLimiter } from "../src/object/rate-limiter.ts";
import { env } from "./support/env.ts";
import { firstOverLimit } from "./support/window-oracle.ts";

/** 2 per second, held up to 5 s: the core's table (test/bookings.test.ts) in a real object. */
const smooth = (over: Partial<RuleCheck> = {}): RuleCheck => ({
  id: "smooth",
  limit: 2,
  periodMs: 1_000,
  precision: 1,
  strict: false,
  enforce: true,
  maxDelayMs: 5_000,
  maxHeld: 1_000,
  ...over,
});
const plain = (over: Partial<RuleCheck> = {}): RuleCheck => ({
  id: "plain",
  limit: 10,
  periodMs: 1_000,
  precision: 1,
  strict: false,
  enforce: true,
  ...over,
});

let objects = 0;
const freshObject = () => env.RATE_LIMITER.get(env.RATE_LIMITER.idFromName(`held-test-${++objects}-${Date.now()}`));

/**
 * The object reads the test's clock, so instants are exact; they lie years
 * ahead, so no alarm fires on its own. Only `Date` is faked: the object's own
 * timer is real (a faked one would run outside the object), so a test that
 * awaits a turn waits the real milliseconds to it.
 */
const T0 = Date.UTC(2031, 0, 1, 0, 0, 0);
const fakeClock = (ms: number) => {
  vi.useFakeTimers({ toFake: ["Date"] });
  vi.setSystemTime(ms);
};
afterEach(() => {
  vi.useRealTimers();
});
const realMs = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const outcome = (r: CheckResult) => (r.held ? `held ${r.held.atMs - T0}` : r.allowed ? "admitted" : "refused");

/**
 * A held request's caller claims its booking at once, as an isolate does: it
 * awaits its turn (the call stays open until then). A booking nobody claims
 * within 5 s is taken to be a request that no longer exists.
 */
const claim = (stub: DurableObjectStub<RateLimiter>, result: CheckResult): void => {
  // Its call may end with the object (an eviction, an abort): the caller would claim again, as below.
  if (result.held) stub.awaitTurn(result.held.bookingId).catch(() => undefined);
};

/** `n` checks in a row, each able to hold; each held one claimed by its caller unless `claimed` is false. */
async function burst(stub: DurableObjectStub<RateLimiter>, rules: RuleCheck[], n: number, claimed = true) {
  const results: CheckResult[] = [];
  for (let i = 0; i < n; i++) {
    const result = await stub.check(rules, { hold: true });
    if (claimed) claim(stub, result);
    results.push(result);
  }
  return results;
}

/** The bookings an object has stored, by turn. */
const storedBookings = (stub: DurableObjectStub<RateLimiter>) =>
  runInDurableObject(stub, (_instance, state) => {
    const table = state.storage.sql.exec("SELECT 1 FROM sqlite_master WHERE name = 'bookings'").toArray();
    if (table.length === 0) return [];
    return state.storage.sql
      .exec<{ at_ms: number; counted: string | null }>("SELECT at_ms, counted FROM bookings ORDER BY seq")
      .toArray()
      .map((b) => ({ atMs: b.at_ms - T0, counted: b.counted !== null }));
  });

describe("a request over its limit, from a caller that can hold it", () => {
  it("is held until its exact turn, in arrival order, as the core's table says (2 per second, 5 at once)", async () => {
    fakeClock(T0);
    const stub = freshObject();
    const results = await burst(stub, [smooth()], 5);
    expect(results.map(outcome)).toEqual(["admitted", "admitted", "held 1001", "held 1501", "held 2001"]);
    expect(results[2]!.held).toMatchObject({ waitMs: 1_001 });
    // The verdicts are its admission at its turn: counted in the bucket of 1 001 ms, 0 left there.
    expect(results[4]!.verdicts[0]).toMatchObject({ allowed: true, remaining: 0, holdsForMs: 0 });
    expect(results[2]!.verdicts[0]!.counted).toMatchObject({ row: "smooth|1000|1" });
    expect(await storedBookings(stub)).toEqual([
      { atMs: 1_001, counted: false },
      { atMs: 1_501, counted: false },
      { atMs: 2_001, counted: false },
    ]);
  });

  it("is refused, with the exact Retry-After behind those held, when its turn is past its delay", async () => {
    fakeClock(T0);
    const stub = freshObject();
    await burst(stub, [smooth()], 5);
    const late = await stub.check([smooth({ maxDelayMs: 2_000 })], { hold: true });
    expect(late.held).toBeUndefined();
    // Behind the one held for 2 001 ms: the next second's two places are taken at 2 001 and 2 501.
    expect(late.verdicts[0]).toMatchObject({ allowed: false, retryAfterMs: 2_501 });
    // Not to be remembered: a held request's client hanging up moves the queue up, and the wait with it.
    expect(late.verdicts[0]!.holdsForMs).toBe(0);
  });

  it("once nobody is held ahead, is remembered only until the wait is within the delay", async () => {
    fakeClock(T0);
    const stub = freshObject();
    await burst(stub, [smooth({ maxDelayMs: 200 })], 2);
    const refused = await stub.check([smooth({ maxDelayMs: 200 })], { hold: true });
    expect(refused.held).toBeUndefined();
    expect(refused.verdicts[0]).toMatchObject({ allowed: false, retryAfterMs: 1_001, holdsForMs: 801 });
  });

  it("is refused once max_held requests are held under the rule, however short its wait", async () => {
    fakeClock(T0);
    const stub = freshObject();
    const results = await burst(stub, [smooth({ maxHeld: 2 })], 5);
    expect(results.map(outcome)).toEqual(["admitted", "admitted", "held 1001", "held 1501", "refused"]);
  });

  it("is refused as before by a caller that cannot hold, with a Retry-After that counts those held", async () => {
    fakeClock(T0);
    const stub = freshObject();
    await burst(stub, [smooth()], 3); // one held, for 1 001 ms
    const plainCaller = await stub.check([smooth()]);
    expect(plainCaller.held).toBeUndefined();
    expect(plainCaller.verdicts[0]).toMatchObject({ allowed: false, retryAfterMs: 1_501 });
    // Not remembered either: the wait behind a held request shrinks when its client hangs up.
    expect(plainCaller.verdicts[0]!.holdsForMs).toBe(0);
  });

  it("lets a rule without a delay that has room for everyone held admit a request now: no place promised is taken", async () => {
    fakeClock(T0);
    const stub = freshObject();
    await burst(stub, [smooth(), plain()], 3); // the third is held for 1 001 ms, and counts under "plain" then
    vi.setSystemTime(T0 + 500);
    // "plain" has 8 of 10 left now, and 7 with the held one counted: a request of it alone goes on at once.
    const other = await stub.check([plain()], { hold: true });
    expect(other.held).toBeUndefined();
    expect(other.allowed).toBe(true);
    expect((await stub.peek([plain()])).verdicts[0]!.weighted).toBe(3);
  });

  it("holds requests under a rule beside one far from its limit, in order, as if that one were not there", async () => {
    fakeClock(T0);
    const stub = freshObject();
    const hourly = plain({ id: "hourly", limit: 1_000, periodMs: 3_600_000 });
    const results = await burst(stub, [smooth(), hourly], 5);
    expect(results.map(outcome)).toEqual(["admitted", "admitted", "held 1001", "held 1501", "held 2001"]);
  });

  it("queues a rule without a delay behind the requests held under it when its window has no room for them all", async () => {
    fakeClock(T0);
    const stub = freshObject();
    const four = plain({ id: "four", limit: 4 });
    await burst(stub, [smooth(), four], 4); // two held, at 1 001 and 1 501 ms, each counting under "four" then
    vi.setSystemTime(T0 + 500);
    // "four" has 2 of 4 left now, but both are promised to the held ones: a later request goes after them.
    const other = await stub.check([four], { hold: true });
    expect(other.held).toBeUndefined();
    expect(other.verdicts[0]).toMatchObject({ ruleAllows: false });
    expect(other.verdicts[0]!.retryAfterMs).toBeGreaterThanOrEqual(1_001);
  });

  it("is refused, all or nothing, when a rule without a delay makes it wait: nothing is booked", async () => {
    fakeClock(T0);
    const stub = freshObject();
    const tight = plain({ id: "tight", limit: 2 });
    await burst(stub, [smooth(), tight], 2);
    const third = await stub.check([smooth(), tight], { hold: true });
    expect(outcome(third)).toBe("refused");
    expect(await storedBookings(stub)).toEqual([]);
    expect((await stub.peek([smooth(), tight])).verdicts.map((v) => v.weighted)).toEqual([2, 2]);
  });

  it("waits for the later of two delayed rules, no longer than the smaller delay of those that make it wait", async () => {
    fakeClock(T0);
    const stub = freshObject();
    const slow = smooth({ id: "slow", limit: 1, periodMs: 10_000, maxDelayMs: 30_000 });
    const quick = smooth({ limit: 1, maxDelayMs: 1_500 });
    const roomy = smooth({ id: "roomy", limit: 10, maxDelayMs: 100 });
    await stub.check([slow, quick, roomy], { hold: true });
    // "slow" admits at 10 001 ms, "quick" at 1 001 ms: past 1.5 s, the smaller delay of the two that make it
    // wait. "roomy" admits it now, so its 100 ms do not count.
    expect(outcome(await stub.check([slow, quick, roomy], { hold: true }))).toBe("refused");
    expect(outcome(await stub.check([slow, roomy], { hold: true }))).toBe("held 10001");
  });

  it("counts a shadow rule now, as it would, and never lets it make a request wait", async () => {
    fakeClock(T0);
    const stub = freshObject();
    const shadow = plain({ id: "shadow", limit: 1, enforce: false });
    const results = await burst(stub, [smooth(), shadow], 3);
    expect(results.map(outcome)).toEqual(["admitted", "admitted", "held 1001"]);
    expect(results[2]!.verdicts[1]).toMatchObject({ ruleAllows: false });
    expect((await stub.peek([shadow])).verdicts[0]!.weighted).toBe(1);
  });

  it("is refused, not held, while the rule's penalty lasts", async () => {
    fakeClock(T0);
    const stub = freshObject();
    const penal = smooth({ maxDelayMs: 100, blockForMs: 60_000 });
    const results = await burst(stub, [penal], 4);
    // The third waits 1 001 ms, past its delay: refused, and the penalty starts; the fourth is refused by it.
    expect(results.map(outcome)).toEqual(["admitted", "admitted", "refused", "refused"]);
    expect(results[3]!.verdicts[0]).toMatchObject({ penaltyMs: 60_000 });
  });

  it("uses the limit an override gives the client, and never holds a client it lets through unlimited", async () => {
    fakeClock(T0);
    const stub = freshObject();
    const now = Date.now();
    await stub.setOverride(
      "smooth",
      { kind: "limit", limit: 1, expiresAtMs: null, note: "", updatedAtMs: now, by: "t" },
      1,
    );
    expect((await burst(stub, [smooth()], 2)).map(outcome)).toEqual(["admitted", "held 1001"]);
    await stub.setOverride("smooth", { kind: "unlimited", expiresAtMs: null, note: "", updatedAtMs: now, by: "t" }, 2);
    expect((await burst(stub, [smooth()], 3)).map(outcome)).toEqual(["admitted", "admitted", "admitted"]);
  });

  it("holds with strict mode and precision too, at the turns the core works out", async () => {
    fakeClock(T0);
    const strict = await burst(freshObject(), [smooth({ strict: true })], 5);
    expect(strict.map(outcome)).toEqual(["admitted", "admitted", "held 2000", "held 2000", "held 4000"]);
    const fine = await burst(freshObject(), [smooth({ precision: 10 })], 5);
    expect(fine.map(outcome)).toEqual(["admitted", "admitted", "held 1001", "held 1051", "held 2001"]);
  });

  it("holds a request of several units at the turn its cost fits", async () => {
    fakeClock(T0);
    const results = await burst(freshObject(), [smooth({ limit: 4, cost: 2 })], 3);
    // 4 units in the first second: 2 × 2. The third needs 4 × (1 − f) + 2 − 1 < 4: f > 0.25.
    expect(results.map(outcome)).toEqual(["admitted", "admitted", "held 1251"]);
  });
});

describe("a held request's turn", () => {
  it("comes at its instant: awaitTurn answers then, not before, with where its counts were taken", async () => {
    fakeClock(T0);
    const stub = freshObject();
    const rule = smooth({ limit: 1, periodMs: 100 });
    await stub.check([rule], { hold: true });
    const held = (await stub.check([rule], { hold: true })).held!;
    expect(held.atMs - T0).toBe(101);
    let answer: TurnAnswer | undefined;
    const turn = stub.awaitTurn(held.bookingId).then((a) => {
      answer = a;
    });
    // The object's timer fires after 101 real ms, reads the clock, and finds the turn 1 ms ahead.
    vi.setSystemTime(T0 + 100);
    await realMs(250);
    expect(answer).toBeUndefined();
    vi.setSystemTime(T0 + 101);
    await turn;
    expect(answer).toMatchObject({ status: "turn", atMs: T0 + 101, nowMs: T0 + 101 });
    expect(answer!.status === "turn" && answer!.counted).toEqual([
      { row: "smooth|100|1", epoch: expect.any(Number), bucket: T0 / 100 + 1 },
    ]);
    expect((await stub.peek([rule])).verdicts[0]!.weighted).toBeGreaterThan(0.98);
  });

  it("is answered at once when it has passed, and unknown for a booking that does not exist", async () => {
    fakeClock(T0);
    const stub = freshObject();
    await stub.check([smooth()], { hold: true });
    await stub.check([smooth()], { hold: true });
    const held = (await stub.check([smooth()], { hold: true })).held!;
    // Its caller comes for it late, though within the 5 s a booking waits to be claimed.
    vi.setSystemTime(T0 + 4_999);
    expect(await stub.awaitTurn(held.bookingId)).toMatchObject({ status: "turn", atMs: T0 + 1_001, nowMs: T0 + 4_999 });
    expect(await stub.awaitTurn("no-such-booking")).toEqual({ status: "unknown", nowMs: T0 + 4_999 });
  });

  it("is counted at its instant even when nobody awaits it yet: the next call counts it there first", async () => {
    fakeClock(T0);
    const stub = freshObject();
    await burst(stub, [smooth()], 3, false); // the third held for 1 001 ms, its caller not there yet
    vi.setSystemTime(T0 + 1_200);
    // Prev second's 2 weigh 2 × 0.8 = 1.6, and the held one counts 1 in this second: 2.6, over the limit.
    expect((await stub.peek([smooth()])).verdicts[0]!.weighted).toBeCloseTo(2.6, 9);
    expect(await storedBookings(stub)).toEqual([{ atMs: 1_001, counted: true }]);
  });
});

describe("a held request's client hanging up", () => {
  it("gives its place to the next in line: the bookings after it move up, and their callers wake sooner", async () => {
    fakeClock(T0);
    const stub = freshObject();
    const results = await burst(stub, [smooth()], 5);
    const [first, second, third] = results.slice(2).map((r) => r.held!);
    expect(await stub.cancelBooking(first!.bookingId)).toEqual({ status: "cancelled" });
    expect(await storedBookings(stub)).toEqual([
      { atMs: 1_001, counted: false },
      { atMs: 1_501, counted: false },
    ]);
    vi.setSystemTime(T0 + 1_001);
    expect(await stub.awaitTurn(second!.bookingId)).toMatchObject({ status: "turn", atMs: T0 + 1_001 });
    expect(third!.atMs - T0).toBe(2_001); // promised 2 001 ms, now 1 501 ms (stored above)
    // The cancelled one is gone: its caller's awaitTurn answers unknown, and so does a second cancellation.
    expect(await stub.awaitTurn(first!.bookingId)).toMatchObject({ status: "unknown" });
    expect(await stub.cancelBooking(first!.bookingId)).toEqual({ status: "unknown" });
  });

  it("wakes the caller awaiting the next turn at its new, earlier instant", async () => {
    fakeClock(T0);
    const stub = freshObject();
    const rule = smooth({ limit: 1, periodMs: 100 });
    const [, a, b] = await burst(stub, [rule], 3);
    expect([a!.held!.atMs - T0, b!.held!.atMs - T0]).toEqual([101, 201]);
    const turn = stub.awaitTurn(b!.held!.bookingId);
    await stub.cancelBooking(a!.held!.bookingId);
    vi.setSystemTime(T0 + 101);
    expect(await turn).toMatchObject({ status: "turn", atMs: T0 + 101 });
  });

  it("after its turn, has its counts refunded, once and never below zero", async () => {
    fakeClock(T0);
    const stub = freshObject();
    const [, , held] = await burst(stub, [smooth()], 3);
    vi.setSystemTime(T0 + 1_100);
    expect(await stub.cancelBooking(held!.held!.bookingId)).toEqual({ status: "refunded" });
    expect(await stub.cancelBooking(held!.held!.bookingId)).toEqual({ status: "unknown" });
    // Only the first second's two are left, weighing 2 × 0.9.
    expect((await stub.peek([smooth()])).verdicts[0]!.weighted).toBeCloseTo(1.8, 9);
  });
});

describe("counts taken back under held requests", () => {
  it("move the held requests up: a refund gives its place to the next in line", async () => {
    fakeClock(T0);
    const stub = freshObject();
    const results = await burst(stub, [smooth()], 5);
    vi.setSystemTime(T0 + 10);
    // The second request was refused by another key: its count comes back, so the first held one may go now,
    // and the others take the places it leaves in the next second.
    await stub.refund([{ receipt: results[1]!.verdicts[0]!.counted!, count: 1 }]);
    expect(await storedBookings(stub)).toEqual([
      { atMs: 10, counted: false },
      { atMs: 1_001, counted: false },
      { atMs: 1_501, counted: false },
    ]);
    expect(await stub.awaitTurn(results[2]!.held!.bookingId)).toMatchObject({ status: "turn", atMs: T0 + 10 });
  });

  it("are not a way around a batch: a batch of several is decided as before, never held", async () => {
    fakeClock(T0);
    const stub = freshObject();
    const batch = await stub.check([smooth()], { hold: true, batch: 4 });
    expect(batch).toMatchObject({ allowed: true, admitted: 2 });
    expect(batch.held).toBeUndefined();
    expect(await storedBookings(stub)).toEqual([]);
  });
});

describe("bookings survive", () => {
  it("eviction: the object reloads them, counts them at their turns, and queues new requests behind them", async () => {
    fakeClock(T0);
    const stub = freshObject();
    // Their callers' calls end with the eviction; each claims its booking again (below, the one that asks).
    const results = await burst(stub, [smooth()], 4, false);
    await evictDurableObject(stub);
    expect(outcome(await stub.check([smooth()], { hold: true }))).toBe("held 2001");
    vi.setSystemTime(T0 + 1_600);
    expect(await stub.awaitTurn(results[3]!.held!.bookingId)).toMatchObject({ status: "turn", atMs: T0 + 1_501 });
  });

  it("a crash of every object (a deploy, a kill): still counted at their turns, though their callers are gone", async () => {
    fakeClock(T0);
    const stub = freshObject();
    await burst(stub, [smooth()], 3);
    await abortAllDurableObjects();
    const again = env.RATE_LIMITER.get(stub.id);
    vi.setSystemTime(T0 + 1_200);
    expect((await again.peek([smooth()])).verdicts[0]!.weighted).toBeCloseTo(2.6, 9);
  });

  it("the cleanup alarm, which counts them at their turns and deletes the key's storage only after", async () => {
    fakeClock(T0);
    const stub = freshObject();
    await burst(stub, [smooth()], 3);
    const alarm = await runInDurableObject(stub, (_i, state) => state.storage.getAlarm());
    // The held count, at 1 001 ms, weighs until the end of the second after its own: 3 000 ms.
    expect(alarm).toBe(T0 + 3_000);
    vi.setSystemTime(T0 + 2_000);
    expect(await runDurableObjectAlarm(stub)).toBe(true); // early: counts the booking, keeps everything
    expect(await storedBookings(stub)).toEqual([{ atMs: 1_001, counted: true }]);
    vi.setSystemTime(T0 + 3_000);
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    const left = await runInDurableObject(stub, (_i, state) =>
      state.storage.sql
        .exec("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE '\\_%' ESCAPE '\\'")
        .toArray(),
    );
    expect(left).toEqual([]);
    expect(await runDurableObjectAlarm(stub)).toBe(false);
  });
});

describe("an admin change meets held requests (docs/per-client-limits.md, requests already waiting)", () => {
  const override = (kind: Record<string, unknown>) =>
    ({ expiresAtMs: null, note: "", updatedAtMs: T0, by: "t", ...kind }) as Override;
  /** 1 a second, held up to 10 s: 1 admitted, and 4 held at 1 001, 2 001, 3 001 and 4 001 ms, each awaiting its turn. */
  async function fourHeld() {
    fakeClock(T0);
    const stub = freshObject();
    const rule = smooth({ limit: 1, maxDelayMs: 10_000 });
    const results = await burst(stub, [rule], 5, false);
    const answered: string[] = [];
    const turns = results.slice(1).map((r, i) =>
      stub.awaitTurn(r.held!.bookingId).then((answer) => {
        answered.push(`#${i + 1} ${answer.status}`);
        return answer;
      }),
    );
    await stub.peek([rule]); // the claims have arrived
    return { stub, rule, turns, answered };
  }

  it("a raise moves them up at once, in the order they came, before any request that comes after it", async () => {
    const { stub, rule, turns, answered } = await fourHeld();
    vi.setSystemTime(T0 + 10);
    await stub.setOverride("smooth", override({ kind: "limit", limit: 10 }), 1);
    const later = await stub.check([rule], { hold: true });
    const answers = await Promise.all(turns);
    expect(answered).toEqual(["#1 turn", "#2 turn", "#3 turn", "#4 turn"]);
    for (const answer of answers) expect(answer).toMatchObject({ status: "turn", atMs: T0 + 10 });
    // The later request is decided on the counts of all five before it: 4 of 10 left after it.
    expect(later).toMatchObject({ allowed: true });
    expect(later.verdicts[0]).toMatchObject({ remaining: 4 });
  });

  it("a lower limit: those released tell the wait a request after them has, behind the ones still held", async () => {
    fakeClock(T0);
    const stub = freshObject();
    const rule = smooth({ maxDelayMs: 10_000 });
    const results = await burst(stub, [rule], 6, false);
    expect(results.map(outcome)).toEqual(["admitted", "admitted", "held 1001", "held 1501", "held 2001", "held 2501"]);
    const turns = results.slice(2).map((r) => {
      const turn = stub.awaitTurn(r.held!.bookingId);
      // A turn the test does not wait for ends with the object when a later test aborts every object.
      turn.catch(() => undefined);
      return turn;
    });
    await stub.peek([rule]); // the claims have arrived
    vi.setSystemTime(T0 + 10);
    await stub.setOverride("smooth", override({ kind: "limit", limit: 1 }), 1);
    // At 1 001 ms the first goes; the three after it are still held, ahead of any request after them.
    vi.setSystemTime(T0 + 1_001);
    await stub.peek([rule]);
    const released = (await Promise.all(turns.slice(0, 1))).map((t) => (t.status === "turn" ? t.verdicts?.[0] : null));
    const next = await stub.check([rule], { hold: true });
    const nextTurnMs = next.held ? next.held.atMs - (T0 + 1_001) : next.verdicts[0]!.retryAfterMs;
    expect(nextTurnMs).toBeGreaterThan(1_000);
    // Found from outside: "r=0;t=1" on the last released, where the next request waited 25 s.
    for (const verdict of released) {
      expect(verdict).toMatchObject({ allowed: true, remaining: 0 });
      expect(verdict!.resetMs).toBeGreaterThanOrEqual(nextTurnMs);
    }
    if (next.held) await stub.cancelBooking(next.held.bookingId);
  });

  it("a lower limit leaves the turns they were given", async () => {
    const { stub, turns } = await fourHeld();
    vi.setSystemTime(T0 + 10);
    await stub.setOverride("smooth", override({ kind: "limit", limit: 1 }), 1);
    expect(await storedBookings(stub)).toEqual([1_001, 2_001, 3_001, 4_001].map((atMs) => ({ atMs, counted: false })));
    vi.setSystemTime(T0 + 5_000);
    await stub.peek([smooth()]);
    expect((await Promise.all(turns)).map((t) => t.status === "turn" && t.atMs - T0)).toEqual([
      1_001, 2_001, 3_001, 4_001,
    ]);
  });

  it.each([
    ["unlimited: nothing counts them under the rule", { kind: "unlimited" }],
    ["a reset: the client is as one never seen", null],
  ])("%s; they go at once, counted nowhere", async (_name, kind) => {
    const { stub, rule, turns } = await fourHeld();
    vi.setSystemTime(T0 + 10);
    if (kind === null) await stub.reset(["smooth"]);
    else await stub.setOverride("smooth", override(kind), 1);
    for (const answer of await Promise.all(turns)) {
      expect(answer).toMatchObject({ status: "turn", atMs: T0 + 10, counted: [null] });
      // After a reset, each tells what the rule has left then, as a request counted nowhere under it (1 of 1, the
      // window's second ending 990 ms on), not what its booking was told when it was held (0 left, its turn
      // seconds away).
      if (kind === null) {
        const told = answer.status === "turn" ? answer.verdicts?.[0] : undefined;
        expect(told).toMatchObject({ allowed: true, ruleAllows: true, remaining: 1, retryAfterMs: 0, counted: null });
        expect(told?.resetMs).toBeGreaterThanOrEqual(990);
        expect(told?.resetMs).toBeLessThanOrEqual(1_000);
      }
    }
    if (kind === null) expect((await stub.peek([rule])).verdicts[0]!.weighted).toBe(0);
  });

  it("a deny withdraws them at once: each caller is told its booking is gone, and decides again (and is refused)", async () => {
    const { stub, rule, turns } = await fourHeld();
    vi.setSystemTime(T0 + 10);
    await stub.setOverride("smooth", override({ kind: "deny" }), 1);
    for (const answer of await Promise.all(turns)) expect(answer).toMatchObject({ status: "unknown" });
    expect(await storedBookings(stub)).toEqual([]);
    const again = await stub.check([rule], { hold: true });
    expect(again).toMatchObject({ allowed: false });
    expect(again.verdicts[0]).toMatchObject({ override: "deny" });
    expect(again.held).toBeUndefined();
  });

  it("a lower limit that expires: at its expiry they move up, as if it had been deleted then", async () => {
    fakeClock(T0);
    const stub = freshObject();
    const rule = smooth({ limit: 10, maxDelayMs: 10_000 });
    await stub.setOverride("smooth", override({ kind: "limit", limit: 1, expiresAtMs: T0 + 200 }), 1);
    const results = await burst(stub, [rule], 5, false);
    expect(results.map(outcome)).toEqual(["admitted", "held 1001", "held 2001", "held 3001", "held 4001"]);
    const turns = results.slice(1).map((r) => stub.awaitTurn(r.held!.bookingId));
    await stub.peek([rule]); // the claims have arrived
    // Only Date is faked: the object's timer runs in real time, 200 ms from T0.
    vi.setSystemTime(T0 + 200);
    const late = new Promise<"still held">((done) => setTimeout(() => done("still held"), 1_500));
    const answers = await Promise.race([Promise.all(turns), late]);
    expect(answers).not.toBe("still held");
    for (const answer of answers as TurnAnswer[]) expect(answer).toMatchObject({ status: "turn", atMs: T0 + 200 });
  });

  it("another rule's change leaves them alone", async () => {
    const { stub, turns } = await fourHeld();
    vi.setSystemTime(T0 + 10);
    await stub.setOverride("other", override({ kind: "deny" }), 1);
    expect((await storedBookings(stub)).map((b) => b.atMs)).toEqual([1_001, 2_001, 3_001, 4_001]);
    vi.setSystemTime(T0 + 5_000);
    await stub.peek([smooth()]);
    expect((await Promise.all(turns)).map((t) => t.status)).toEqual(["turn", "turn", "turn", "turn"]);
  });
});

describe("an adaptive rule's factor meets held requests (docs/adaptive.md)", () => {
  /** 10 a second under a factor of 0.1 (1 a second), held up to 10 s: 1 admitted, 4 held at 1 001 … 4 001 ms. */
  async function fourHeldReduced() {
    fakeClock(T0);
    const stub = freshObject();
    const reduced = smooth({ limit: 10, maxDelayMs: 10_000, factor: 0.1 });
    const results = await burst(stub, [reduced], 5, false);
    expect(results.map(outcome)).toEqual(["admitted", "held 1001", "held 2001", "held 3001", "held 4001"]);
    const turns = results.slice(1).map((r) => {
      const turn = stub.awaitTurn(r.held!.bookingId);
      // A turn a test does not wait for ends with the object when a later test aborts every object.
      turn.catch(() => undefined);
      return turn;
    });
    await stub.peek([reduced]); // the claims have arrived
    return { stub, reduced, turns };
  }

  it("a raise moves them up with the first request that carries it, in the order they came, before that request", async () => {
    const { stub, reduced, turns } = await fourHeldReduced();
    vi.setSystemTime(T0 + 10);
    const later = await stub.check([{ ...reduced, factor: 1 }], { hold: true });
    for (const answer of await Promise.all(turns)) expect(answer).toMatchObject({ status: "turn", atMs: T0 + 10 });
    // Decided on the counts of all five before it: 4 of 10 left after it.
    expect(later).toMatchObject({ allowed: true });
    expect(later.verdicts[0]).toMatchObject({ remaining: 4 });
  });

  it("a raise that leaves room for only some moves those up, in order, and the later request waits behind them", async () => {
    const { stub, reduced, turns } = await fourHeldReduced();
    vi.setSystemTime(T0 + 10);
    // 3 a second: the first two held go now; the next two, and then the later request, at turns of their own.
    const later = await stub.check([{ ...reduced, factor: 0.3 }], { hold: true });
    const now = await Promise.all(turns.slice(0, 2));
    for (const answer of now) expect(answer).toMatchObject({ status: "turn", atMs: T0 + 10 });
    // #3 and #4 at 1 001 and 1 334 ms (were 3 001 and 4 001), and the later request behind them, at 1 667.
    expect((await storedBookings(stub)).map((b) => b.atMs)).toEqual([10, 10, 1_001, 1_334, 1_667]);
    expect(outcome(later)).toBe("held 1667");
  });

  it("a cut leaves the turns they were given", async () => {
    const { stub, reduced } = await fourHeldReduced();
    vi.setSystemTime(T0 + 10);
    await stub.check([{ ...reduced, factor: 0.05 }], { hold: true });
    expect((await storedBookings(stub)).slice(0, 4)).toEqual(
      [1_001, 2_001, 3_001, 4_001].map((atMs) => ({ atMs, counted: false })),
    );
  });
});

describe("bookings nobody claims (their requests died with an isolate, or in a crash)", () => {
  it("after a crash, go 5 s after the object's restart unless their callers claim them again: the next request moves up, and they count nowhere", async () => {
    fakeClock(T0);
    const stub = freshObject();
    const rule = smooth({ limit: 1, maxDelayMs: 10_000 });
    // 1 admitted, 6 held at 1 001 … 6 001 ms, whose isolates die with every object in a kill.
    await burst(stub, [rule], 7, false);
    await abortAllDurableObjects();
    const again = env.RATE_LIMITER.get(stub.id);
    vi.setSystemTime(T0 + 100);
    const next = await again.check([rule], { hold: true });
    expect(outcome(next)).toBe("held 7001");
    claim(again, next);
    await again.peek([rule]); // calls from one stub arrive in order: the claim has
    // 5 s after the restart (its first call, at 100 ms), nobody came back for the six: they go.
    vi.setSystemTime(T0 + 5_100);
    expect(await again.awaitTurn(next.held!.bookingId)).toMatchObject({ status: "turn", atMs: T0 + 5_100 });
    // In the window now: only the request that moved up; the six dead ones counted nowhere.
    expect((await again.peek([rule])).verdicts[0]!.weighted).toBeCloseTo(1, 9);
    expect(await storedBookings(again)).toEqual([{ atMs: 5_100, counted: true }]);
  });

  it("after a restart, stay when their callers claim them again within 5 s, and come at their turns", async () => {
    fakeClock(T0);
    const stub = freshObject();
    const rule = smooth({ limit: 1, maxDelayMs: 10_000 });
    const results = await burst(stub, [rule], 3, false);
    await evictDurableObject(stub);
    vi.setSystemTime(T0 + 100);
    const turn = stub.awaitTurn(results[2]!.held!.bookingId); // its caller's call was cut: it asks again
    await stub.peek([rule]);
    vi.setSystemTime(T0 + 4_000);
    expect(await stub.awaitTurn(results[1]!.held!.bookingId)).toMatchObject({ status: "turn", atMs: T0 + 1_001 });
    vi.setSystemTime(T0 + 6_000);
    expect(await turn).toMatchObject({ status: "turn", atMs: T0 + 2_001 });
    expect(await storedBookings(stub)).toEqual([
      { atMs: 1_001, counted: true },
      { atMs: 2_001, counted: true },
    ]);
  });

  it("in the object's lifetime: one nobody claims within 5 s of its booking is counted at its turn, then given back", async () => {
    fakeClock(T0);
    const stub = freshObject();
    const rule = smooth({ limit: 2, periodMs: 4_000 });
    // 2 admitted at 0; the third held until 4 001 ms; its caller never comes.
    const [, , held] = await burst(stub, [rule], 3, false);
    expect(outcome(held!)).toBe("held 4001");
    vi.setSystemTime(T0 + 4_500);
    // Counted at its turn: 2 × (1 − 0.125) + 1.
    expect((await stub.peek([rule])).verdicts[0]!.weighted).toBeCloseTo(2.75, 9);
    vi.setSystemTime(T0 + 5_000);
    // Unclaimed 5 s after its booking: given back. 2 × 0.75 + 0.
    expect((await stub.peek([rule])).verdicts[0]!.weighted).toBeCloseTo(1.5, 9);
    expect(await storedBookings(stub)).toEqual([]);
    expect(await stub.awaitTurn(held!.held!.bookingId)).toMatchObject({ status: "unknown" });
  });
});

describe("a burst for one key against 10 per second, held up to 5 s, with a quarter of the held hanging up", () => {
  it.each([
    { mode: "the seeds' window", over: {} },
    { mode: "strict, precision 10", over: { strict: true, precision: 10 } },
  ])("never has a window over its limit, keeps arrival order, and loses no count ($mode)", async ({ over }) => {
    fakeClock(T0);
    const stub = freshObject();
    const rule = smooth({ limit: 10, maxDelayMs: 5_000, ...over });
    const admitted: { atMs: number; cost: number }[] = [];
    const held: { bookingId: string; atMs: number }[] = [];
    let refusedAtOnce = 0;
    let step = 7;
    // 300 requests over 1.5 s, in bursts of up to 10 at once, every 50 ms.
    for (let t = 0, sent = 0; sent < 300; t += 50) {
      vi.setSystemTime(T0 + t);
      step = (step * 48_271) % 2_147_483_647;
      const n = Math.min(300 - sent, 1 + (step % 10), 300);
      sent += n;
      const results = await Promise.all(Array.from({ length: n }, () => stub.check([rule], { hold: true })));
      for (const r of results) {
        claim(stub, r);
        if (r.held) held.push({ bookingId: r.held.bookingId, atMs: r.held.atMs });
        else if (r.allowed) admitted.push({ atMs: r.nowMs, cost: 1 });
        else {
          refusedAtOnce++;
          // Refused at once, with a wait past the delay: exact, behind those held.
          expect(r.verdicts[0]!.retryAfterMs).toBeGreaterThan(5_000);
        }
      }
      // A quarter of those held so far, still waiting, hang up.
      for (const h of held.filter((_, i) => i % 4 === 3)) {
        if (h.atMs > T0 + t) await stub.cancelBooking(h.bookingId);
      }
    }
    expect(held.length).toBeGreaterThan(30);
    expect(refusedAtOnce).toBeGreaterThan(0);
    // Everyone's turn has come: the last call counts every booking at its turn.
    vi.setSystemTime(T0 + 60_000);
    await stub.peek([rule]);
    const bookings = await runInDurableObject(stub, (_i, state) =>
      state.storage.sql
        .exec<{ seq: number; at_ms: number; counted: string }>("SELECT seq, at_ms, counted FROM bookings ORDER BY seq")
        .toArray(),
    );
    // Held requests go in the order they arrived: turns never go down in arrival order.
    const turns = bookings.map((b) => b.at_ms);
    expect(turns).toEqual([...turns].sort((a, b) => a - b));
    expect(bookings.every((b) => b.counted !== null)).toBe(true);
    // Replaying everything admitted, now and at its turn, finds no window over the limit.
    const all = [...admitted, ...turns.map((atMs) => ({ atMs, cost: 1 }))];
    expect(firstOverLimit(all, rule)).toBeNull();
    // Nothing counted twice or lost: what the object holds at the last turn is what the replay counts there.
    const lastMs = Math.max(...all.map((a) => a.atMs));
    vi.setSystemTime(lastMs);
    const weighted = (await stub.peek([rule])).verdicts[0]!.weighted;
    expect(weighted).toBeCloseTo(weightedAt(all, lastMs, rule), 9);
  });
});

describe("held requests beside a rule without a delay that other requests count in too", () => {
  it.each([
    { mode: "the seeds' window", over: {} },
    { mode: "strict, precision 10", over: { strict: true, precision: 10 } },
  ])(
    "never has a window of either rule over its limit, whichever rule's room lets a request go now ($mode)",
    async ({ over }) => {
      fakeClock(T0);
      const stub = freshObject();
      const held = smooth({ limit: 10, maxDelayMs: 3_000, ...over });
      const beside = plain({ id: "beside", limit: 25, ...over });
      const inBeside: { atMs: number; cost: number }[] = [];
      const inHeld: { atMs: number; cost: number }[] = [];
      const bookings: string[] = [];
      let step = 11;
      const next = (n: number) => {
        step = (step * 48_271) % 2_147_483_647;
        return step % n;
      };
      let besideAdmittedNow = 0;
      for (let t = 0; t < 3_000; t += 50) {
        vi.setSystemTime(T0 + t);
        const both = Array.from({ length: next(4) }, () => stub.check([held, beside], { hold: true }));
        const alone = Array.from({ length: next(4) }, () => stub.check([beside], { hold: true }));
        for (const r of await Promise.all(both)) {
          claim(stub, r);
          if (r.held) bookings.push(r.held.bookingId);
          else if (r.allowed) {
            inHeld.push({ atMs: r.nowMs, cost: 1 });
            inBeside.push({ atMs: r.nowMs, cost: 1 });
          }
        }
        for (const r of await Promise.all(alone)) {
          if (!r.allowed) continue;
          inBeside.push({ atMs: r.nowMs, cost: 1 });
          besideAdmittedNow++;
        }
        if (next(4) === 0 && bookings.length > 0) await stub.cancelBooking(bookings[next(bookings.length)]!);
      }
      vi.setSystemTime(T0 + 60_000);
      await stub.peek([held, beside]);
      const turns = await runInDurableObject(stub, (_i, state) =>
        state.storage.sql.exec<{ at_ms: number }>("SELECT at_ms FROM bookings ORDER BY seq").toArray(),
      );
      for (const { at_ms } of turns) {
        inHeld.push({ atMs: at_ms, cost: 1 });
        inBeside.push({ atMs: at_ms, cost: 1 });
      }
      // The run did what it meant to: requests were held, and requests of the rule beside went on meanwhile.
      expect(turns.length).toBeGreaterThan(10);
      expect(besideAdmittedNow).toBeGreaterThan(20);
      expect(firstOverLimit(inHeld, held)).toBeNull();
      expect(firstOverLimit(inBeside, beside)).toBeNull();
    },
  );
});

/** The weighted count at `atMs` of a list of admissions, from first principles (for display, as the object's). */
function weightedAt(admissions: { atMs: number; cost: number }[], atMs: number, window: RuleCheck): number {
  const k = window.precision;
  const bucket = (t: number) => Math.floor((t * k) / window.periodMs);
  const now = bucket(atMs);
  let oldest = 0;
  let newer = 0;
  for (const a of admissions) {
    const b = bucket(a.atMs);
    if (b === now - k) oldest += a.cost;
    else if (b > now - k && b <= now) newer += a.cost;
  }
  const kept = window.strict ? window.periodMs : window.periodMs - ((atMs * k) % window.periodMs);
  return (oldest * kept) / window.periodMs + newer;
}
