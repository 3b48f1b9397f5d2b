/**
 * A calendar quota in its client's object: the period worked out from the
 * object's own clock at each request (only `Date` is faked: the object reads
 * it), counts that start from nothing at the boundary, refusals no isolate
 * may answer alone and no lease, credits, refunds and charges into the
 * period they belong to, the history of past periods, and a row that
 * survives eviction.
 */
import { evictDurableObject, runInDurableObject } from "cloudflare:test";
import { afterEach, describe, expect, it, vi } from "vitest";
import type { RuleOf } from "../src/core/rules.ts";
import { toRuleCheck } from "../src/object/protocol.ts";
import type { RateLimiter } from "../src/object/rate-limiter.ts";
import { env } from "./support/env.ts";
import { settingsFor } from "./support/isolate.ts";

let objects = 0;
const freshObject = () => env.RATE_LIMITER.get(env.RATE_LIMITER.idFromName(`quota-test-${++objects}-${Date.now()}`));

/** A quota rule as wrangler.toml writes it, parsed by the real parser, as the Worker sends it to the object. */
function quota(fields: Record<string, unknown>, id = "monthly") {
  const rule = settingsFor([{ id, ...fields }]).rules[0] as RuleOf<"quota">;
  return toRuleCheck(rule);
}

const at = (iso: string) => {
  vi.useFakeTimers({ toFake: ["Date"] });
  vi.setSystemTime(Date.parse(iso));
};
afterEach(() => {
  vi.useRealTimers();
});

async function checks(stub: DurableObjectStub<RateLimiter>, rule: ReturnType<typeof quota>, n: number) {
  const out: boolean[] = [];
  for (let i = 0; i < n; i++) out.push((await stub.check([rule])).allowed);
  return out;
}

describe("a calendar quota in its client's object", () => {
  // Instants years ahead, as in test/held-requests.test.ts: no alarm the object sets fires on its own.
  it("admits the quota, then refuses until the period's end, with Retry-After and t at the boundary and w the period", async () => {
    const rule = quota({ quota: 3, per: "month", timezone: "America/New_York" });
    at("2031-11-30T12:00:00-05:00");
    const stub = freshObject();
    expect(await checks(stub, rule, 3)).toEqual([true, true, true]);
    const refused = await stub.check([rule]);
    const toBoundary = Date.parse("2031-12-01T00:00:00-05:00") - Date.now();
    expect(refused.allowed).toBe(false);
    expect(refused.verdicts[0]).toMatchObject({
      ruleAllows: false,
      remaining: 0,
      retryAfterMs: toBoundary,
      resetMs: toBoundary,
      // November in New York: 30 days and the hour the clocks fell back.
      windowMs: 30 * 86_400_000 + 3_600_000,
      // A credit may lift it at any moment: no isolate answers it alone.
      holdsForMs: 0,
    });
  });

  it("refuses the request one millisecond before the boundary and admits the one at the boundary", async () => {
    const rule = quota({ quota: 1, per: "day", timezone: "Asia/Kathmandu" });
    const midnight = Date.parse("2031-03-15T00:00:00+05:45");
    at("2031-03-14T09:00:00+05:45");
    const stub = freshObject();
    expect(await checks(stub, rule, 2)).toEqual([true, false]);
    vi.setSystemTime(midnight - 1);
    expect((await stub.check([rule])).verdicts[0]).toMatchObject({ ruleAllows: false, retryAfterMs: 1 });
    vi.setSystemTime(midnight);
    const admitted = await stub.check([rule]);
    expect(admitted.verdicts[0]).toMatchObject({ ruleAllows: true, remaining: 0, resetMs: 86_400_000 });
  });

  it("leases nothing, however much an isolate asks, so no unit counted ahead is charged for a request never made", async () => {
    const rule = quota({ quota: 1_000_000, per: "month" });
    const stub = freshObject();
    const result = await stub.check([rule], { lease: { units: 64, seen: 10_000, seenInMs: 1_000 } });
    expect(result.allowed).toBe(true);
    expect(result.lease).toBeUndefined();
    expect(result.verdicts[0]!.remaining).toBe(999_999);
  });

  it("counts `cost` per request and admits one only while it fits whole", async () => {
    const rule = quota({ quota: 10, per: "week", cost: 4 });
    const stub = freshObject();
    expect(await checks(stub, rule, 3)).toEqual([true, true, false]);
    // A refusal says the units left, 2, though fewer than a request's cost (r is remaining quota units), as every kind's does.
    expect((await stub.peek([rule])).verdicts[0]).toMatchObject({ weighted: 8, ruleAllows: false, remaining: 2 });
    expect((await stub.peek([{ ...rule, cost: 2 }])).verdicts[0]).toMatchObject({ ruleAllows: true, remaining: 2 });
  });

  it("adds, takes and sets what a client has left this period, under the limit that applies to it", async () => {
    const rule = quota({ quota: 5, per: "month" });
    at("2031-06-10T00:00:00Z");
    const stub = freshObject();
    expect(await checks(stub, rule, 6)).toEqual([true, true, true, true, true, false]);
    const added = await stub.credit(rule, { add: 2 });
    expect(added.before).toMatchObject({ used: 5, credit: 0, remaining: 0, limit: 5 });
    expect(added.after).toMatchObject({ used: 5, credit: 2, remaining: 2 });
    expect(await checks(stub, rule, 3)).toEqual([true, true, false]);
    const set = await stub.credit(rule, { set: 10 });
    expect(set.after).toMatchObject({ used: 7, credit: 12, remaining: 10 });
    const taken = await stub.credit(rule, { take: 8 });
    expect(taken.after).toMatchObject({ used: 7, credit: 4, remaining: 2 });
    expect(await checks(stub, rule, 3)).toEqual([true, true, false]);
    // Under an override's limit: `set` is what is left under it.
    await stub.setOverride(
      "monthly",
      { kind: "limit", limit: 100, expiresAtMs: null, note: "", updatedAtMs: 1, by: "t" },
      1,
    );
    expect((await stub.credit(rule, { set: 50 })).after).toMatchObject({ limit: 100, remaining: 50, used: 9 });
  });

  it("starts the next period from nothing, credits included, and keeps the past ones, newest first", async () => {
    const rule = quota({ quota: 3, per: "day" });
    at("2031-06-10T08:00:00Z");
    const stub = freshObject();
    await checks(stub, rule, 2);
    await stub.credit(rule, { add: 5 });
    vi.setSystemTime(Date.parse("2031-06-12T08:00:00Z")); // a day with nothing in it between
    await checks(stub, rule, 1);
    const { usage } = await stub.usage(rule);
    expect(usage).toMatchObject({
      startMs: Date.parse("2031-06-12T00:00:00Z"),
      endMs: Date.parse("2031-06-13T00:00:00Z"),
      used: 1,
      credit: 0,
      remaining: 2,
      past: [
        {
          startMs: Date.parse("2031-06-10T00:00:00Z"),
          endMs: Date.parse("2031-06-11T00:00:00Z"),
          used: 2,
          credit: 5,
        },
      ],
    });
  });

  it("keeps at most 12 past periods", async () => {
    const rule = quota({ quota: 3, per: "day" });
    at("2031-01-01T08:00:00Z");
    const stub = freshObject();
    for (let day = 0; day < 15; day++) {
      vi.setSystemTime(Date.parse("2031-01-01T08:00:00Z") + day * 86_400_000);
      await checks(stub, rule, 1);
    }
    const { usage } = await stub.usage(rule);
    expect(usage!.past).toHaveLength(12);
    expect(usage!.past[0]!.startMs).toBe(Date.parse("2031-01-14T00:00:00Z"));
    expect(usage!.past[11]!.startMs).toBe(Date.parse("2031-01-03T00:00:00Z"));
  });

  it("takes back a refund, and adds a charge, in the period the request was counted in, even once it has ended", async () => {
    const rule = quota({ quota: 100, per: "day" });
    at("2031-06-10T23:59:59.500Z");
    const stub = freshObject();
    const first = await stub.check([{ ...rule, cost: 10 }]);
    const receipt = first.verdicts[0]!.counted!;
    vi.setSystemTime(Date.parse("2031-06-11T00:00:01Z"));
    await stub.check([rule]);
    await stub.refund([{ receipt, count: 4 }]);
    await stub.charge([{ receipt, count: 30 }]);
    const { usage } = await stub.usage(rule);
    expect(usage).toMatchObject({ used: 1, past: [{ startMs: Date.parse("2031-06-10T00:00:00Z"), used: 36 }] });
  });

  it("keeps the client's counts through an eviction, and carries them over when the rule's calendar changes mid-period", async () => {
    at("2031-06-10T12:00:00Z");
    const utc = quota({ quota: 5, per: "month" });
    const stub = freshObject();
    await checks(stub, utc, 4);
    await evictDurableObject(stub);
    expect((await stub.peek([utc])).verdicts[0]).toMatchObject({ weighted: 4, remaining: 1 });
    // The same rule, now in New York's months: the same month, the same 4 used.
    const newYork = quota({ quota: 5, per: "month", timezone: "America/New_York" });
    expect(await checks(stub, newYork, 2)).toEqual([true, false]);
    const { usage } = await stub.usage(newYork);
    expect(usage).toMatchObject({ used: 5, startMs: Date.parse("2031-06-01T00:00:00-04:00") });
  });

  it('counts periods from a client\'s first request with reset = "first-request", to its whole second', async () => {
    const rule = quota({ quota: 2, per: "month", reset: "first-request" });
    at("2031-01-31T10:17:03.456Z");
    const stub = freshObject();
    // A read before the first request fixes nothing.
    await stub.peek([rule]);
    vi.setSystemTime(Date.parse("2031-01-31T10:17:05.900Z"));
    expect(await checks(stub, rule, 3)).toEqual([true, true, false]);
    const { usage } = await stub.usage(rule);
    // A month from 31 January: the last day of February, at the first request's time.
    expect(usage).toMatchObject({
      startMs: Date.parse("2031-01-31T10:17:05Z"),
      endMs: Date.parse("2031-02-28T10:17:05Z"),
    });
    vi.setSystemTime(Date.parse("2031-02-28T10:17:05Z"));
    expect(await checks(stub, rule, 1)).toEqual([true]);
    expect((await stub.usage(rule)).usage).toMatchObject({ endMs: Date.parse("2031-03-31T10:17:05Z"), used: 1 });
  });

  it("spreads Retry-After past the boundary by client with retry_jitter, the same for a client all period, never before it", async () => {
    const rule = quota({ quota: 1, per: "day", retry_jitter: "1h" });
    at("2031-06-10T12:00:00Z");
    const toBoundary = Date.parse("2031-06-11T00:00:00Z") - Date.now();
    const waits: number[] = [];
    for (let client = 0; client < 12; client++) {
      vi.setSystemTime(Date.parse("2031-06-10T12:00:00Z") + client * 7); // clients first seen at different instants
      const stub = freshObject();
      await stub.check([rule]);
      const first = (await stub.check([rule])).verdicts[0]!;
      const again = (await stub.check([rule])).verdicts[0]!;
      expect(again.retryAfterMs).toBe(first.retryAfterMs);
      // t says the boundary itself: only Retry-After is spread.
      expect(first.resetMs).toBe(toBoundary - client * 7);
      const jitter = first.retryAfterMs - first.resetMs;
      expect(jitter % 1_000).toBe(0);
      expect(jitter).toBeGreaterThanOrEqual(0);
      expect(jitter).toBeLessThanOrEqual(3_600_000);
      waits.push(jitter);
    }
    expect(new Set(waits).size).toBeGreaterThan(6);
  });

  it("counts a request a window beside it holds at its turn, takes the count back when its client hangs up, and holds none it has no room for", async () => {
    const window = {
      id: "smooth",
      limit: 1,
      periodMs: 1_000,
      precision: 1,
      strict: false,
      enforce: true,
      maxDelayMs: 5_000,
      maxHeld: 10,
    };
    const daily = quota({ quota: 3, per: "day" });
    at("2031-06-10T12:00:00Z");
    const t0 = Date.now();
    const stub = freshObject();
    expect((await stub.check([window, daily], { hold: true })).allowed).toBe(true);
    const held = await stub.check([window, daily], { hold: true });
    expect(held.held).toMatchObject({ waitMs: 1_001 });
    // Its verdicts are its admission at its turn: the quota's count goes in then.
    expect(held.verdicts[1]).toMatchObject({ ruleAllows: true, remaining: 1 });
    const cancelled = await stub.check([window, daily], { hold: true });
    expect(cancelled.held).toMatchObject({ waitMs: 2_001 });
    expect(await stub.cancelBooking(cancelled.held!.bookingId)).toEqual({ status: "cancelled" });
    vi.setSystemTime(t0 + 1_001);
    const turn = await stub.awaitTurn(held.held!.bookingId);
    expect(turn).toMatchObject({ status: "turn", counted: [expect.anything(), { row: "monthly|quota" }] });
    expect((await stub.usage(daily)).usage).toMatchObject({ used: 2, remaining: 1 });
    // One left: admitted now; then the quota has no room, so nothing is held, whatever the window says.
    vi.setSystemTime(t0 + 3_000);
    expect((await stub.check([window, daily], { hold: true })).allowed).toBe(true);
    const over = await stub.check([window, daily], { hold: true });
    expect(over.held).toBeUndefined();
    expect(over.verdicts[1]).toMatchObject({
      ruleAllows: false,
      retryAfterMs: Date.parse("2031-06-11T00:00:00Z") - (t0 + 3_000),
    });
    expect((await stub.usage(daily)).usage).toMatchObject({ used: 3, remaining: 0 });
  });

  it("stores its row as a quota's, and deletes it once the periods it keeps have passed", async () => {
    const rule = quota({ quota: 3, per: "day" });
    at("2031-06-10T12:00:00Z");
    const stub = freshObject();
    await checks(stub, rule, 1);
    const stored = await runInDurableObject(stub, (_instance, state) =>
      state.storage.sql.exec<{ rule: string; kind: string }>("SELECT rule, kind FROM counters").toArray(),
    );
    expect(stored).toEqual([{ rule: "monthly|quota", kind: "quota" }]);
    const alarm = await runInDurableObject(stub, (_instance, state) => state.storage.getAlarm());
    // The day it counted in, then 12 days of history.
    expect(alarm).toBe(Date.parse("2031-06-11T00:00:00Z") + 12 * 86_400_000);
  });
});
