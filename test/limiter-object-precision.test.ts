import { abortAllDurableObjects, evictDurableObject, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { afterEach, describe, expect, it, vi } from "vitest";
import {
  bucketIndex,
  bucketStartMs,
  check,
  emptyState,
  retryAfterMs,
  type WindowState,
} from "../src/core/sliding-window.ts";
import type { WindowCheck as RuleCheck } from "../src/object/protocol.ts";
import type { RateLimiter } from "../src/object/rate-limiter.ts";
import { env } from "./support/env.ts";
import { from, limiter, originHits, statuses, uniqueIp, uniqueTag } from "./support/limiter.ts";

const rule = (id: string, limit: number, over: Partial<RuleCheck> = {}): RuleCheck => ({
  id,
  limit,
  periodMs: 60_000,
  precision: 10,
  strict: false,
  enforce: true,
  ...over,
});

let objects = 0;
/** A fresh object per test: storage is shared by the tests of a file. */
const freshObject = () =>
  env.RATE_LIMITER.get(env.RATE_LIMITER.idFromName(`precision-test-${++objects}-${Date.now()}`));

/**
 * The Durable Object reads the test's clock, so instants are exact. They lie
 * years ahead, so an alarm set from them never fires on its own mid-test:
 * `runDurableObjectAlarm` runs it when the test says.
 */
const FUTURE_MS = Date.UTC(2031, 0, 1, 0, 0, 0);
const setClock = (ms: number) => vi.setSystemTime(new Date(ms));
const fakeClock = (ms: number) => {
  vi.useFakeTimers({ toFake: ["Date"] });
  setClock(ms);
};
afterEach(() => {
  vi.useRealTimers();
});

/** What the object has stored: its counter rows and its alarm. */
const stored = (stub: DurableObjectStub<RateLimiter>) =>
  runInDurableObject(stub, async (_instance, state) => {
    const hasTable = state.storage.sql.exec("SELECT 1 FROM sqlite_master WHERE name = 'counters'").toArray().length > 0;
    const rows = hasTable
      ? state.storage.sql
          .exec<{ rule: string; period_ms: number; precision: number; bucket: number; counts: string; epoch: number }>(
            "SELECT * FROM counters ORDER BY rule",
          )
          .toArray()
          // The epoch is random: only that it is set is of interest here.
          .map(({ epoch, ...r }) => ({ ...r, counts: JSON.parse(r.counts) as number[], epochSet: epoch > 0 }))
      : [];
    return { hasTable, rows, alarm: await state.storage.getAlarm() };
  });

describe("k buckets in the Durable Object", () => {
  it("stores k + 1 counts per rule and moves them bucket by bucket (k = 10: 6 s buckets)", async () => {
    const stub = freshObject();
    const r = rule("ten", 10);
    fakeClock(FUTURE_MS + 1_000);
    await stub.check([r]);
    setClock(FUTURE_MS + 7_000);
    await stub.check([r]);
    await stub.check([r]);
    setClock(FUTURE_MS + 13_000);
    await stub.check([r]);
    const { rows } = await stored(stub);
    expect(rows).toEqual([
      {
        rule: "ten|60000|10",
        period_ms: 60_000,
        precision: 10,
        bucket: bucketIndex(FUTURE_MS + 13_000, r),
        counts: [0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 1],
        epochSet: true,
        kind: "window",
        penalty_until: 0, // the rule has no block_for
      },
    ]);
  });

  it("answers exactly what the pure algorithm answers, request by request, across evictions", async () => {
    for (const over of [{ precision: 10 }, { precision: 60, strict: true }, { precision: 7, periodMs: 10_000 }]) {
      const stub = freshObject();
      const r = rule("same", 8, over);
      let nowMs = FUTURE_MS + 123;
      fakeClock(nowMs);
      let expected: WindowState = emptyState(nowMs, r);
      let step = 11;
      for (let i = 0; i < 120; i++) {
        step = (step * 48_271) % 2_147_483_647; // fixed pseudo-random gaps of 0–4 999 ms
        nowMs += step % 5_000;
        setClock(nowMs);
        if (i % 40 === 39) await evictDurableObject(stub);
        const pure = check(expected, nowMs, r);
        expected = pure.state;
        const { allowed, verdicts } = await stub.check([r]);
        const { ruleAllows, counted, holdsForMs, ...decision } = verdicts[0]!;
        const where = JSON.stringify({ over, i });
        expect(decision, where).toEqual(pure.decision);
        expect([allowed, ruleAllows], where).toEqual([pure.decision.allowed, pure.decision.allowed]);
        expect(counted?.bucket ?? -1, where).toBe(pure.decision.allowed ? bucketIndex(nowMs, r) : -1);
        expect(holdsForMs, where).toBe(pure.decision.retryAfterMs);
      }
    }
  });

  it("keeps the k-bucket state across eviction and a restart: the same count, refusal and wait", async () => {
    const stub = freshObject();
    const r = rule("kept", 4, { precision: 60, strict: true });
    fakeClock(FUTURE_MS + 500);
    for (const at of [500, 1_500, 30_500, 59_500]) {
      setClock(FUTURE_MS + at);
      expect((await stub.check([r])).allowed).toBe(true);
    }
    setClock(FUTURE_MS + 60_200);
    const before = (await stub.peek([r])).verdicts[0]!;
    await evictDurableObject(stub);
    const afterEviction = (await stub.peek([r])).verdicts[0]!;
    await abortAllDurableObjects();
    const restarted = env.RATE_LIMITER.get(stub.id);
    const afterRestart = (await restarted.check([r])).verdicts[0]!;
    // Strict: the request at 0.5 s still counts whole until its 1 s bucket leaves, at 61 s.
    expect(before).toMatchObject({ ruleAllows: false, weighted: 4, retryAfterMs: 800 });
    expect(afterEviction).toEqual(before);
    expect(afterRestart).toMatchObject({ allowed: false, weighted: 4, retryAfterMs: 800 });
    const { rows } = await stored(restarted);
    const state: WindowState = { bucket: rows[0]!.bucket, counts: rows[0]!.counts };
    expect(rows[0]!.counts).toHaveLength(61);
    expect(retryAfterMs(state, FUTURE_MS + 60_200, r)).toBe(800);
  });

  it("takes a refund back from the bucket it was counted in, after the buckets have moved on", async () => {
    const stub = freshObject();
    const r = rule("refund", 5, { precision: 6 });
    fakeClock(FUTURE_MS + 1_000);
    const first = (await stub.check([r])).verdicts[0]!;
    await stub.check([r]);
    setClock(FUTURE_MS + 21_000);
    const later = (await stub.check([r])).verdicts[0]!;
    expect(later.counted!.bucket).toBe(first.counted!.bucket + 2);
    await stub.refund([{ receipt: first.counted!, count: 1 }]);
    expect((await stored(stub)).rows[0]!.counts).toEqual([0, 0, 0, 0, 1, 0, 1]);
    // Once that bucket has rotated out, a late refund finds nothing to take back.
    setClock(FUTURE_MS + 80_000);
    await stub.check([r]);
    await stub.refund([{ receipt: first.counted!, count: 1 }]);
    expect((await stored(stub)).rows[0]!.counts).toEqual([1, 0, 0, 0, 0, 0, 1]);
  });

  it("carries the count over when a rule's precision changes", async () => {
    const stub = freshObject();
    fakeClock(FUTURE_MS + 5_000);
    for (let i = 0; i < 4; i++) await stub.check([rule("changing", 10, { precision: 1 })]);
    expect((await stub.peek([rule("changing", 10, { precision: 60 })])).verdicts[0]!.weighted).toBe(4);
  });

  it("admits exactly the limit under 300 concurrent checks with k = 60, strict", async () => {
    const stub = freshObject();
    const r = rule("burst", 100, { precision: 60, strict: true });
    const results = await Promise.all(Array.from({ length: 300 }, () => stub.check([r])));
    expect(results.filter((x) => x.allowed)).toHaveLength(100);
  });
});

describe("cleanup with k buckets", () => {
  it("deletes the key's storage once all k + 1 buckets have passed, and only then; running it again is harmless", async () => {
    const stub = freshObject();
    const r = rule("short", 3, { precision: 4 }); // 15 s buckets
    fakeClock(FUTURE_MS + 20_000);
    await stub.check([r]);
    // Counted in bucket [15 s, 30 s); it is the oldest bucket until 90 s and weighs until then.
    const expiresAtMs = bucketStartMs(bucketIndex(FUTURE_MS + 20_000, r) + 5, r);
    expect(expiresAtMs).toBe(FUTURE_MS + 90_000);
    expect((await stored(stub)).alarm).toBe(expiresAtMs);

    setClock(expiresAtMs - 1);
    expect((await stub.peek([r])).verdicts[0]!.weighted).toBeGreaterThan(0);
    expect(await runDurableObjectAlarm(stub)).toBe(true); // early: keeps the row, sets the alarm again
    expect(await stored(stub)).toMatchObject({ alarm: expiresAtMs, rows: [{ rule: "short|60000|4" }] });

    setClock(expiresAtMs);
    expect((await stub.peek([r])).verdicts[0]!.weighted).toBe(0);
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(await stored(stub)).toEqual({ hasTable: false, rows: [], alarm: null });

    expect(await runDurableObjectAlarm(stub)).toBe(false);
    await runInDurableObject(stub, (instance: RateLimiter) => instance.alarm());
    expect(await stored(stub)).toEqual({ hasTable: false, rows: [], alarm: null });
    expect((await stub.check([r])).verdicts[0]!.remaining).toBe(2);
  });

  it("keeps a rule whose buckets are still live when another rule's have passed", async () => {
    const stub = freshObject();
    fakeClock(FUTURE_MS + 100);
    await stub.check([
      rule("brief", 5, { periodMs: 1_000, precision: 4 }),
      rule("long", 5, { periodMs: 3_600_000, precision: 60 }),
    ]);
    setClock(FUTURE_MS + 2_000);
    await runDurableObjectAlarm(stub);
    const after = await stored(stub);
    expect(after.rows.map((row) => row.rule)).toEqual(["long|3600000|60"]);
    // The hour's 1-minute bucket that holds 00:00:00.100 is the oldest until 01:01.
    expect(after.alarm).toBe(FUTURE_MS + 61 * 60_000);
  });

  it("is cleaned up by the runtime's own alarm once every bucket has passed (k = 4, 400 ms period)", async () => {
    // Instants years in the past: the alarm the object sets is due at once in the runtime's real time, so the
    // runtime fires it by itself, with no real wait; the object reads the test's clock, which says when it is.
    const PAST_MS = Date.UTC(2021, 0, 1, 0, 0, 0);
    const stub = freshObject();
    const r = rule("real", 5, { periodMs: 400, precision: 4 });
    fakeClock(PAST_MS + 20);
    await stub.check([r]);
    const expiresAtMs = bucketStartMs(bucketIndex(PAST_MS + 20, r) + 5, r);
    expect(expiresAtMs).toBe(PAST_MS + 500);
    // Until then, each time the runtime fires the alarm, the object keeps the row and sets the alarm again.
    setClock(expiresAtMs - 1);
    expect((await stored(stub)).rows).toMatchObject([{ rule: "real|400|4", counts: [0, 0, 0, 0, 1] }]);
    setClock(expiresAtMs);
    await expect.poll(() => stored(stub), { timeout: 2_000 }).toEqual({ hasTable: false, rows: [], alarm: null });
  });
});

describe("precision and strict through the Worker", () => {
  // The limit of 2 is used up at 12:00:45; an exact sliding log would wait 60 s.
  it.each([
    { precision: 1, strict: false, retryAfterS: 16 },
    { precision: 6, strict: false, retryAfterS: 56 },
    { precision: 6, strict: true, retryAfterS: 65 },
    { precision: 60, strict: true, retryAfterS: 61 },
  ])(
    "answers 429 with Retry-After $retryAfterS for precision $precision, strict $strict",
    async ({ precision, strict, retryAfterS }) => {
      const send = limiter([{ id: "quota", limit: 2, period: 60, precision, strict }]);
      const ip = uniqueIp();
      const at = Date.UTC(2031, 0, 1, 12, 0, 45);
      fakeClock(at);
      const first = await send("/api/x", from(ip));
      expect(first.status).toBe(200);
      // The effective window: the one request left may go within it, and the next once it has passed,
      // the moment the 429 below names in Retry-After.
      expect(first.headers.get("ratelimit")).toBe(`"quota";r=1;t=${retryAfterS}`);
      expect(first.headers.get("x-ratelimit-reset")).toBe(String(at / 1000 + retryAfterS));
      expect((await send("/api/x", from(ip))).status).toBe(200);
      const blocked = await send("/api/x", from(ip));
      expect(blocked.status).toBe(429);
      expect(blocked.headers.get("retry-after")).toBe(String(retryAfterS));
      expect(blocked.headers.get("ratelimit")).toBe(`"quota";r=0;t=${retryAfterS}`);
      expect(((await blocked.json()) as { retry_after: number }).retry_after).toBe(retryAfterS);
      // Retrying when told is admitted.
      setClock(at + retryAfterS * 1_000);
      expect((await send("/api/x", from(ip))).status).toBe(200);
    },
  );

  it("with precision 60 and strict, refuses the whole second half of a boundary attack, and the origin never sees it", async () => {
    const send = limiter([{ id: "billing", limit: 5, period: "1m", precision: 60, strict: true }]);
    const ip = uniqueIp();
    const tag = uniqueTag("boundary");
    fakeClock(Date.UTC(2031, 0, 1, 12, 0, 59, 500));
    expect(await statuses(5, () => send("/api/x", from(ip, { "x-test-tag": tag })))).toEqual([200, 200, 200, 200, 200]);
    setClock(Date.UTC(2031, 0, 1, 12, 1, 0, 100));
    expect(await statuses(5, () => send("/api/x", from(ip, { "x-test-tag": tag })))).toEqual([429, 429, 429, 429, 429]);
    // The burst's 1 s bucket leaves the window at 12:02:00.
    setClock(Date.UTC(2031, 0, 1, 12, 1, 59, 999));
    expect((await send("/api/x", from(ip, { "x-test-tag": tag }))).status).toBe(429);
    setClock(Date.UTC(2031, 0, 1, 12, 2, 0, 0));
    expect((await send("/api/x", from(ip, { "x-test-tag": tag }))).status).toBe(200);
    expect(await originHits(tag)).toBe(6);
  });
});
