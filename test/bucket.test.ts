/**
 * Token-bucket rules (`burst`) through the Worker, its isolates and real
 * objects, in front of the real origin: a burst at once, then one request
 * per emission interval, with the exact `Retry-After`; costs, the origin's
 * reported cost, `count`, penalties, shadow mode and `on_error` as on any
 * rule; a cost above the burst refused as never admissible; overrides,
 * tiers and an adaptive factor giving the bucket another limit and its
 * burst in proportion; held requests sent on at their conformance
 * instants; and several isolates on one key never over the conformance
 * bound. The arithmetic itself is test/gcra.test.ts's.
 *
 * Most tests fake `Date` (which the objects read too), so that each instant
 * is exact; the held requests' run on the real clock.
 */
import { evictDurableObject, runDurableObjectAlarm } from "cloudflare:test";
import { afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { checkConfig } from "../src/config/check.ts";
import { parseSettings } from "../src/config/settings.ts";
import { type BucketLimit, check, fullState } from "../src/core/gcra.ts";
import { parseRules } from "../src/core/rules.ts";
import type { RuleCheck } from "../src/object/protocol.ts";
import { type Admission, firstOverBound, oracleRoom } from "./support/bucket-oracle.ts";
import { flakyNamespace } from "./support/chaos.ts";
import { countedNamespace } from "./support/counting.ts";
import { env } from "./support/env.ts";
import { createIsolate, decider, requestFrom, settingsFor, statusOf } from "./support/isolate.ts";
import { from, limiter, originHits, statuses, timedLimiter, uniqueIp, uniqueTag } from "./support/limiter.ts";
import { expectErrorLogs } from "./support/logs.ts";
import { objectForIp, storedRows } from "./support/objects.ts";
import { randomGenerator } from "./support/random.ts";
import { bearer, keySet, type SigningKey, signingKey, tokenFor } from "./support/tokens.ts";

/** An instant in 2031, on the faked clock. */
const T0 = Date.UTC(2031, 0, 1, 0, 0, 0);
const TOKEN = "bucket-test-admin-token";
const auth = { authorization: `Bearer ${TOKEN}`, "cf-connecting-ip": "198.51.100.7" };

let rules = 0;
const uniqueRule = (name: string) => `${name}-${++rules}`;

/** 10 an hour, in bursts of up to 20: one unit drips back every 360 s. */
const tenAnHour = (id: string, fields: Record<string, unknown> = {}) => ({
  id,
  limit: 10,
  period: "1h",
  burst: 20,
  key: ["ip"],
  ...fields,
});

/** The object's check of 10 an hour in bursts of 20, under an adaptive factor of 0.5. */
const halvedTenAnHour = (id: string): RuleCheck => ({
  id,
  kind: "bucket",
  limit: 10,
  periodMs: 3_600_000,
  burst: 20,
  ownLimit: 10,
  precision: 1,
  strict: false,
  enforce: true,
  factor: 0.5,
});

/** Moves the faked clock (the isolate's and the objects') to `T0 + ms`. */
const at = (ms: number) => vi.setSystemTime(T0 + ms);

/** The Worker under `rules`, with the admin API on. */
function worker(ruleList: unknown[], vars: Record<string, unknown> = {}) {
  const send = limiter(ruleList, { ADMIN_TOKEN: TOKEN, ...vars });
  const admin = async (method: string, path: string, body?: unknown) => {
    const res = await send(`/__ratelimit${path}`, {
      method,
      headers: { ...auth, "content-type": "application/json" },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    return { status: res.status, body: (await res.json()) as Record<string, unknown> };
  };
  return { send, admin };
}

/** What a response says of its rate limits. */
const headersOf = (r: Response) => ({
  status: r.status,
  policy: r.headers.get("ratelimit-policy"),
  rateLimit: r.headers.get("ratelimit"),
  retryAfter: r.headers.get("retry-after"),
});

afterEach(() => vi.useRealTimers());

describe("a token bucket, through the Worker", () => {
  it("admits a burst of 20 at once, counting r down, refuses the 21st until the instant one unit has dripped back, and admits a retry then", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    at(0);
    const id = uniqueRule("burst");
    const { send } = worker([tenAnHour(id)]);
    const ip = uniqueIp();
    const burst = [];
    for (let i = 0; i < 21; i++) burst.push(headersOf(await send("/x", from(ip))));
    // q is the burst; w the bucket's depth in time, 20 × 360 s: a client that keeps to q per w never empties it.
    expect(burst[0]).toEqual({
      status: 200,
      policy: `"${id}";q=20;w=7200`,
      rateLimit: `"${id}";r=19;t=360`,
      retryAfter: null,
    });
    expect(burst.slice(0, 20).map((h) => h.rateLimit)).toEqual(
      Array.from({ length: 20 }, (_, i) => `"${id}";r=${19 - i};t=360`),
    );
    expect(burst[20]).toEqual({
      status: 429,
      policy: `"${id}";q=20;w=7200`,
      rateLimit: `"${id}";r=0;t=360`,
      retryAfter: "360",
    });
    // 1 ms before the unit is back: still refused (by the isolate, which remembers the refusal), then admitted.
    at(359_999);
    expect(headersOf(await send("/x", from(ip)))).toMatchObject({ status: 429, retryAfter: "1" });
    at(360_000);
    expect(headersOf(await send("/x", from(ip)))).toMatchObject({ status: 200, rateLimit: `"${id}";r=0;t=360` });
    expect(headersOf(await send("/x", from(ip)))).toMatchObject({ status: 429, retryAfter: "360" });
  });

  it("keeps its TAT across an eviction of the object, and its alarm deletes the row once the bucket is full again", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    at(0);
    const id = uniqueRule("evicted");
    // No isolate memory: every request asks the object.
    const settings = settingsFor([tenAnHour(id)]);
    const { run } = decider(settings, countedNamespace().ns, createIsolate({ maxLeaseUnits: 0, maxRefusalMs: 0 }));
    const ip = uniqueIp();
    const sent = [];
    for (let i = 0; i < 21; i++) sent.push(statusOf(await run(requestFrom(ip))));
    expect(sent).toEqual([...Array(20).fill(200), 429]);
    const stub = await objectForIp(ip);
    await evictDurableObject(stub);
    at(359_999);
    expect(statusOf(await run(requestFrom(ip)))).toBe(429);
    at(360_000);
    expect(statusOf(await run(requestFrom(ip)))).toBe(200);
    // Full again 20 units after its TAT: 360 000 + 20 × 360 000 ms. Before then the alarm keeps the row; after, it goes.
    at(360_000 + 7_200_000 - 1);
    await runDurableObjectAlarm(stub);
    expect(Object.keys(await storedRows(ip))).toEqual([`${id}|bucket`]);
    at(360_000 + 7_200_000);
    await runDurableObjectAlarm(stub);
    expect(await storedRows(ip)).toEqual({});
  });

  it("counts a request's cost: 4 of cost 5 in a burst of 20, the 5th refused for 5 units' refill (1 800 s)", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    at(0);
    const id = uniqueRule("cost");
    const { send } = worker([tenAnHour(id, { cost: 5 })]);
    const ip = uniqueIp();
    const responses = [];
    for (let i = 0; i < 5; i++) responses.push(await send("/x", from(ip)));
    expect(responses.map((r) => r.status)).toEqual([200, 200, 200, 200, 429]);
    expect(responses.map((r) => r.headers.get("x-ratelimit-remaining"))).toEqual(["15", "10", "5", "0", "0"]);
    expect(responses[4]!.headers.get("retry-after")).toBe("1800");
  });

  it("refuses a request that costs more than the burst as never admissible: no Retry-After, a detail that says so, nothing spent", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    at(0);
    const [big, small] = [uniqueRule("never"), uniqueRule("beside")];
    // A cost up to the limit is valid; above the burst, check-config warns (below), and every request is refused.
    const { send, admin } = worker([
      { id: big, path: "/big", limit: 30, period: "1h", burst: 20, cost: 25 },
      tenAnHour(small, { path: "/small" }),
    ]);
    const ip = uniqueIp();
    // Twice: from the object, then from what the isolate remembers of its refusal.
    for (let i = 0; i < 2; i++) {
      const res = await send("/big", from(ip));
      // No wait lifts it: no `t` (which would say "now"), no X-RateLimit-Reset, no Retry-After.
      expect(headersOf(res)).toEqual({
        status: 429,
        policy: `"${big}";q=20;w=2400`,
        rateLimit: `"${big}";r=0`,
        retryAfter: null,
      });
      expect(res.headers.get("x-ratelimit-reset")).toBeNull();
      expect(res.headers.get("x-ratelimit-remaining")).toBe("0");
      const body = (await res.json()) as Record<string, unknown>;
      expect(body).not.toHaveProperty("retry_after");
      expect(body).toMatchObject({
        status: 429,
        "violated-policies": [big],
        detail: `This request costs more than its rule admits at once, so it will never be admitted, whatever the wait: "${big}" (30 per hour, in bursts of up to 20 at once). Send smaller requests; retrying this one will not help.`,
      });
    }
    // Nothing was spent: the bucket is full, and the client's other requests go on.
    const status = await admin("GET", `/status?rule=${big}&key=${ip}`);
    // No wait named: not "retry in 0 s".
    expect(status.body).toMatchObject({
      weighted: 0,
      allowed: false,
      remaining: 0,
      never: true,
      retryAfterSeconds: null,
      resetSeconds: null,
    });
    expect((await send("/small", from(ip))).status).toBe(200);
  });

  it('gives back what a response does not count (count = "failed"): successes cost nothing, 2 failures fill a burst of 2', async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    at(0);
    const id = uniqueRule("failed");
    const { send } = worker([{ id, path: "/status/*", limit: 2, period: "1h", burst: 2, count: "failed" }]);
    const ip = uniqueIp();
    const seen = [];
    for (const code of [200, 200, 200, 200, 200, 401, 401, 401])
      seen.push((await send(`/status/${code}`, from(ip))).status);
    expect(seen).toEqual([200, 200, 200, 200, 200, 401, 401, 429]);
  });

  it("charges what the origin reports (cost_header): 90 of a burst of 100, then 20 more, and waits for the 11 units past the burst", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    at(0);
    const id = uniqueRule("tokens");
    // 100 an hour: one unit every 36 s.
    const { send } = worker([
      { id, path: "/tokens/*", limit: 100, period: "1h", burst: 100, cost_header: "x-tokens-used" },
    ]);
    const ip = uniqueIp();
    expect((await send("/tokens/90", from(ip))).status).toBe(200);
    // Admitted at its cost of 1 with 9 left; its headers count the 19 more the origin reported: 11 units past the
    // burst, so the next request fits once 11 have dripped back, 396 s on (t said 36 s, the wait before the charge).
    const next = await send("/tokens/20", from(ip));
    expect(headersOf(next)).toMatchObject({ status: 200, rateLimit: `"${id}";r=0;t=396` });
    expect(next.headers.get("x-ratelimit-reset")).toBe(String(T0 / 1_000 + 396));
    // 110 spent: a request fits once 11 have dripped back, 11 × 36 s on.
    expect(headersOf(await send("/tokens/1", from(ip)))).toMatchObject({ status: 429, retryAfter: "396" });
  });

  it("keeps a charge's debt for a century at most: a charge of 10⁹ at one a year refuses for 100 years, with a date to retry at", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    at(0);
    const id = uniqueRule("century");
    const { send } = worker([
      { id, path: "/tokens/*", limit: 1, period: "365d", burst: 2, cost_header: "x-tokens-used" },
    ]);
    const ip = uniqueIp();
    expect((await send("/tokens/1000000000", from(ip))).status).toBe(200);
    at(1_000);
    const refused = await send("/tokens/1", from(ip));
    // A century ahead of the charge, less the year two units of room take, less the second since.
    const century = 100 * 365 * 86_400;
    expect(headersOf(refused)).toMatchObject({ status: 429, retryAfter: String(century - 365 * 86_400 - 1) });
    const reset = Number(refused.headers.get("x-ratelimit-reset"));
    // X-RateLimit-Reset: that instant, in Unix seconds, a date ninety-nine years of 365 days on.
    expect(Math.abs(reset - (T0 / 1_000 + century - 365 * 86_400))).toBeLessThanOrEqual(1);
    expect(new Date(reset * 1_000).toISOString()).toMatch(/^21\d\d-/);
  });

  it("keeps a penalty (block_for) after the bucket has refilled", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    at(0);
    const id = uniqueRule("penalty");
    const { send } = worker([{ id, limit: 2, period: "1s", burst: 2, block_for: "1m" }]);
    const ip = uniqueIp();
    expect(await statuses(3, () => send("/x", from(ip)))).toEqual([200, 200, 429]);
    at(10_000);
    expect(headersOf(await send("/x", from(ip)))).toMatchObject({ status: 429, retryAfter: "50" });
    at(60_000);
    expect((await send("/x", from(ip))).status).toBe(200);
  });

  it('never refuses in shadow mode (action = "log"): logs what it would have refused, and stays out of the headers', async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    at(0);
    const id = uniqueRule("shadow");
    const { send } = worker([tenAnHour(id, { limit: 1, burst: 1, action: "log" })]);
    const ip = uniqueIp();
    const lines: string[] = [];
    const spy = vi.spyOn(console, "log").mockImplementation((line) => lines.push(String(line)));
    const responses = [];
    for (let i = 0; i < 3; i++) responses.push(await send("/x", from(ip)));
    spy.mockRestore();
    expect(responses.map(headersOf)).toEqual(
      Array.from({ length: 3 }, () => ({ status: 200, policy: null, rateLimit: null, retryAfter: null })),
    );
    const shadow = lines.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.rule === id);
    expect(shadow).toEqual([expect.objectContaining({ event: "ratelimit_shadow", decision: "would_block" })]);
  });

  it.each([
    ["closed", 503],
    ["open", 200],
  ])('applies on_error = "%s" when its object cannot decide: %i', async (onError, status) => {
    const settings = settingsFor([tenAnHour(uniqueRule("failing"), { on_error: onError })]);
    const { run } = decider(settings, flakyNamespace("throw").ns, createIsolate());
    expect(statusOf(await run(requestFrom(uniqueIp())))).toBe(status);
    expect(expectErrorLogs("limiter_unavailable")).toEqual([
      expect.objectContaining({ outcome: status === 503 ? "refused" : "forwarded" }),
    ]);
  });

  it("reads, at the client-limits endpoint, as its headers say it: the burst, the depth, what the bucket holds", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    at(0);
    const id = uniqueRule("reads");
    const send = limiter([tenAnHour(id)], { CLIENT_LIMITS_PATH: "/rate_limit" });
    const ip = uniqueIp();
    expect(await statuses(3, () => send("/x", from(ip)))).toEqual([200, 200, 200]);
    const read = (await (await send("/rate_limit", from(ip))).json()) as { rules: unknown[] };
    // The third was spent from a lease of two: the object counts the unit this isolate still holds.
    expect(read.rules).toEqual([
      {
        kind: "bucket",
        id,
        limit: 20,
        remaining: 16,
        allowed: true,
        shed: false,
        windowSeconds: 7200,
        resetSeconds: 360,
        resetEpochSeconds: T0 / 1000 + 360,
      },
    ]);
  });

  it("is counted in the statistics: admitted, refused by the object, refused by the isolate", async () => {
    const id = uniqueRule("stats");
    const { send, admin } = worker([tenAnHour(id, { limit: 1, burst: 2 })]);
    const ip = uniqueIp();
    expect(await statuses(4, () => send("/x", from(ip)))).toEqual([200, 200, 429, 429]);
    const stats = await admin("GET", "/stats?minutes=2");
    const rule = (stats.body.rules as { id: string; lifetime: Record<string, number> }[]).find((r) => r.id === id);
    expect(rule?.lifetime).toMatchObject({ admitted: 2, refused: 1, refused_cached: 1 });
  });
});

describe("a tier, an override or an adaptive factor gives a bucket another limit, and its burst in proportion", () => {
  it("a raise: 20 an hour doubles the burst to 40; what was spent stays spent, and refills at the new rate", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    at(0);
    const id = uniqueRule("raise");
    const { send, admin } = worker([tenAnHour(id)]);
    const ip = uniqueIp();
    expect(await statuses(21, () => send("/x", from(ip)))).toEqual([...Array(20).fill(200), 429]);
    expect((await admin("PUT", `/overrides?rule=${id}&key=${ip}`, { limit: 20 })).status).toBe(200);
    at(1); // a lease from a call sent at the instant of a change would be written off as sent before it
    const next = await send("/x", from(ip));
    expect(headersOf(next)).toMatchObject({
      status: 200,
      policy: `"${id}";q=40;w=7200`,
      rateLimit: `"${id}";r=19;t=180`,
    });
    expect(await statuses(20, () => send("/x", from(ip)))).toEqual([...Array(19).fill(200), 429]);
    // The 21st: one unit drips back every 180 s now.
    expect((await send("/x", from(ip))).headers.get("retry-after")).toBe("180");
  });

  it("a lower limit: 5 an hour halves the burst to 10; the 4 spent stay spent, so 6 more go", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    at(0);
    const id = uniqueRule("lower");
    const { send, admin } = worker([tenAnHour(id)]);
    const ip = uniqueIp();
    expect(await statuses(4, () => send("/x", from(ip)))).toEqual([200, 200, 200, 200]);
    expect((await admin("PUT", `/overrides?rule=${id}&key=${ip}`, { limit: 5 })).status).toBe(200);
    at(1);
    expect(await statuses(7, () => send("/x", from(ip)))).toEqual([...Array(6).fill(200), 429]);
    const refused = await send("/x", from(ip));
    // One unit at 720 s, less the refill the lease taken at 0 forgoes until its end: 225 s (a 32nd of the old
    // depth, 7 200 s), carried as the time it is, not as units at the lower rate (450 s).
    expect(headersOf(refused)).toMatchObject({ status: 429, policy: `"${id}";q=10;w=7200`, retryAfter: "495" });
  });

  it.each([
    ["deleted", null],
    ["lowered to 1", { limit: 1 }],
  ])(
    "a far higher limit %s after one request: the lease taken under it holds the client back for its forgone refill's time at most, not for hours",
    async (_name, after) => {
      vi.useFakeTimers({ toFake: ["Date"] });
      at(0);
      const id = uniqueRule("far");
      // 10 every 10 s, bursts of 20; under an override of 1 000 000 every 10 s, a lease's units are counted at its
      // end, 0.625 s on (a 32nd of the 20 s depth): 62 500 units' refill at that rate, 17 hours' at 1 a second.
      const { send, admin } = worker([tenAnHour(id, { period: "10s" })]);
      const ip = uniqueIp();
      expect((await admin("PUT", `/overrides?rule=${id}&key=${ip}`, { limit: 1_000_000 })).status).toBe(200);
      at(1);
      expect((await send("/x", from(ip))).status).toBe(200);
      const change =
        after === null
          ? await admin("DELETE", `/overrides?rule=${id}&key=${ip}`)
          : await admin("PUT", `/overrides?rule=${id}&key=${ip}`, after);
      expect(change.status).toBe(200);
      at(2);
      // The lease's units go back with the next request's call; what is left to wait is the lease's own time.
      const next = await send("/x", from(ip));
      expect(next.status).toBe(200);
      const status = (await admin("GET", `/status?rule=${id}&key=${ip}`)).body as { retryAfterSeconds: number };
      expect(status.retryAfterSeconds).toBeLessThanOrEqual(after === null ? 0 : 20);
    },
  );

  it.each([
    ["read by /status", "peek"],
    ["refused, then restarted", "evict"],
  ])(
    "back from a raise, what was spent refills at the restored, lower rate from the change on, however it is %s",
    async (_name, meanwhile) => {
      vi.useFakeTimers({ toFake: ["Date"] });
      at(0);
      const id = uniqueRule(`lower-after-${meanwhile}`);
      const { send, admin } = worker([tenAnHour(id)]);
      const ip = uniqueIp();
      expect((await admin("PUT", `/overrides?rule=${id}&key=${ip}`, { limit: 20 })).status).toBe(200);
      at(1);
      expect(await statuses(41, () => send("/x", from(ip)))).toEqual([...Array(40).fill(200), 429]);
      expect((await admin("DELETE", `/overrides?rule=${id}&key=${ip}`)).status).toBe(200);
      // 40 spent, at 10 an hour under a burst of 20: 21 must drip back, one every 360 s (7 560 s), less the refill
      // the lease taken under the raise forgoes until its end, 225 s, carried as that time (not as 450 s).
      at(2);
      const status = async () => (await admin("GET", `/status?rule=${id}&key=${ip}`)).body;
      if (meanwhile === "peek") expect(await status()).toMatchObject({ allowed: false, retryAfterSeconds: 7335 });
      else {
        const refused = await send("/x", from(ip));
        expect(headersOf(refused)).toMatchObject({ status: 429, retryAfter: "7335" });
        await evictDurableObject(await objectForIp(ip));
      }
      // An hour later 10 have dripped back (not 20, as at the raised rate): 30 spent, 3 960 s to go, less the
      // lease's 225 s (a 360 s unit's 0.625 less spent).
      at(2 + 3_600_000);
      const later = await status();
      expect(later).toMatchObject({ allowed: false, retryAfterSeconds: 3735 });
      expect(later.weighted).toBeCloseTo(30 - 225 / 360, 3);
    },
  );

  it.each([
    ["lowered by another override (6 a minute in bursts of 60)", "lowered", [200, 200, 429]],
    ["deleted (the rule's own 6 a minute in bursts of 3)", "deleted", [429, 429, 429]],
    ["run out on its own, 2.5 s after it was set (the rule's own)", "expired", [429, 429, 429]],
  ] as const)(
    "600 a minute in bursts of 60 %s: what was spent refills at the lower rate from the change on, though the cleanup runs and the next request comes 7 s later",
    async (_name, change, seen) => {
      vi.useFakeTimers({ toFake: ["Date"] });
      at(0);
      const id = uniqueRule(`own-${change}-then-pause`);
      const { send, admin } = worker([{ id, limit: 6, period: "1m", burst: 3 }]);
      const ip = uniqueIp();
      const raise = {
        limit: 600,
        burst: 60,
        ...(change === "expired" ? { expires: new Date(T0 + 2_500).toISOString() } : {}),
      };
      expect((await admin("PUT", `/overrides?rule=${id}&key=${ip}`, raise)).status).toBe(200);
      at(1);
      expect(await statuses(61, () => send("/x", from(ip)))).toEqual([...Array(60).fill(200), 429]);
      if (change === "lowered") {
        expect((await admin("PUT", `/overrides?rule=${id}&key=${ip}`, { limit: 6, burst: 60 })).status).toBe(200);
      } else if (change === "deleted") {
        expect((await admin("DELETE", `/overrides?rule=${id}&key=${ip}`)).status).toBe(200);
      }
      // 6 s on, the bucket would be full at the old rate: the object's cleanup, run then, must not take it for full.
      at(6_500);
      await runDurableObjectAlarm(await objectForIp(ip));
      // 60 spent at 6 a minute: one every 10 s. 7 s on, 0.7 have dripped back (2.5 s at the raised rate too, once it
      // ran out on its own), and at most the refill a lease forgoes until its end besides (a 32nd of the burst, 1.9):
      // with a burst of 60, two go; with 3, none. Found from outside: 59 admitted, 3, and 3.
      at(7_001);
      expect(await statuses(3, () => send("/x", from(ip)))).toEqual(seen);
    },
  );

  it("a refusal under a lower override that runs out in 4 s tells the wait across its end, under the rule's bucket from then", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    at(0);
    const id = uniqueRule("lowered-expiring");
    const { send, admin } = worker([{ id, limit: 10, period: "10s", burst: 5 }]);
    const ip = uniqueIp();
    expect(await statuses(5, () => send("/x", from(ip)))).toEqual([200, 200, 200, 200, 200]);
    const lowered = { limit: 2, expires: new Date(T0 + 4_000).toISOString() };
    expect((await admin("PUT", `/overrides?rule=${id}&key=${ip}`, lowered)).status).toBe(200);
    at(1);
    // The burst spent, refilling at 2 every 10 s: 25 s under the override. At its end, 4.2 units are still spent,
    // carried over to the rule's 10 every 10 s: one more is back 0.2 s later. 4.2 s, not 25.
    const refused = await send("/x", from(ip));
    expect(refused.status).toBe(429);
    expect(refused.headers.get("retry-after")).toBe("5");
    at(4_100);
    expect((await send("/x", from(ip))).status).toBe(429);
    at(4_200);
    expect((await send("/x", from(ip))).status).toBe(200);
  });

  it.each([
    ["deleted", null],
    ["lowered by another override", { limit: 10, burst: 20 }],
  ])(
    "back from a raise %s, what was spent refills at the lower rate from the change on, though the client's next request comes 10 minutes later",
    async (_name, after) => {
      vi.useFakeTimers({ toFake: ["Date"] });
      at(0);
      const id = uniqueRule("lower-then-pause");
      const { send, admin } = worker([tenAnHour(id)]);
      const ip = uniqueIp();
      expect((await admin("PUT", `/overrides?rule=${id}&key=${ip}`, { limit: 20 })).status).toBe(200);
      at(1);
      expect(await statuses(41, () => send("/x", from(ip)))).toEqual([...Array(40).fill(200), 429]);
      const change =
        after === null
          ? await admin("DELETE", `/overrides?rule=${id}&key=${ip}`)
          : await admin("PUT", `/overrides?rule=${id}&key=${ip}`, after);
      expect(change.status).toBe(200);
      // 10 minutes on, at 10 an hour: 7 335 s to wait at the change (as above), 600 fewer now; not the 6 135 s of a
      // bucket that went on refilling at 20 an hour until this request.
      at(1 + 600_000);
      expect(headersOf(await send("/x", from(ip)))).toMatchObject({ status: 429, retryAfter: "6735" });
    },
  );

  it("back from a raise that ran out on its own (expires), what was spent refills at the raised rate until the expiry and at the restored one after, though nothing reads it meanwhile", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    at(0);
    const id = uniqueRule("lower-at-expiry");
    const { send, admin } = worker([tenAnHour(id)]);
    const ip = uniqueIp();
    const expires = new Date(T0 + 600_000).toISOString();
    expect((await admin("PUT", `/overrides?rule=${id}&key=${ip}`, { limit: 20, expires })).status).toBe(200);
    at(1);
    expect(await statuses(41, () => send("/x", from(ip)))).toEqual([...Array(40).fill(200), 429]);
    // 40 spent; 10 minutes at 20 an hour until the expiry give back 3.33; then an hour at 10 gives back 10.
    at(600_000 + 3_600_000);
    const later = (await admin("GET", `/status?rule=${id}&key=${ip}`)).body;
    expect(later.weighted).toBeCloseTo(40 - 20 / 6 - 10, 1);
    expect(later).toMatchObject({ allowed: false });
  });

  it("a tier: pro = 30 an hour gives bursts of 60, by an override or by a token's tier_claim alike", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    at(0);
    const id = uniqueRule("tier");
    const { send, admin } = worker([tenAnHour(id)], { TIERS: { pro: { [id]: 30 } } });
    const ip = uniqueIp();
    expect((await admin("PUT", `/overrides?rule=${id}&key=${ip}`, { tier: "pro" })).status).toBe(200);
    at(1);
    expect(await statuses(61, () => send("/x", from(ip)))).toEqual([...Array(60).fill(200), 429]);
    expect(headersOf(await send("/x", from(ip)))).toMatchObject({
      policy: `"${id}";q=60;w=7200`,
      retryAfter: "120",
    });
  });

  // 10 every 10 s in bursts of 5 (a depth of 5 s); each change gives the burst in proportion, never below one request.
  it.each([
    ["a tier of 1 (mini)", { tier: "mini" }, 1, 1, 10],
    ["an override of 3", { limit: 3 }, 3, 1, 4],
    ["an override of 1", { limit: 1 }, 1, 1, 10],
    ["an override of 20", { limit: 20 }, 20, 10, 5],
  ])(
    "%s: q is its burst and w its depth, burst × period / limit, in the headers, the client's view and /status alike",
    async (_, override, limit, burst, depthSeconds) => {
      vi.useFakeTimers({ toFake: ["Date"] });
      at(0);
      const id = uniqueRule("depth");
      const { send, admin } = worker([{ id, limit: 10, period: "10s", burst: 5, key: ["ip"] }], {
        TIERS: { mini: { [id]: 1 } },
        CLIENT_LIMITS_PATH: "/rate_limit",
      });
      const ip = uniqueIp();
      expect((await admin("PUT", `/overrides?rule=${id}&key=${ip}`, override)).status).toBe(200);
      at(1);
      const policy = `"${id}";q=${burst};w=${depthSeconds}`;
      const burstOf = async () => statuses(burst + 1, () => send("/x", from(ip)));
      // The whole burst at once, and once w has passed, the whole of it again: the bucket is full after w.
      expect(await burstOf()).toEqual([...Array(burst).fill(200), 429]);
      expect((await send("/x", from(ip))).headers.get("ratelimit-policy")).toBe(policy);
      const view = await send("/rate_limit", from(ip));
      expect(((await view.json()) as { rules: unknown[] }).rules).toEqual([
        expect.objectContaining({ id, limit: burst, windowSeconds: depthSeconds }),
      ]);
      expect((await admin("GET", `/status?rule=${id}&key=${ip}`)).body).toMatchObject({
        limit,
        periodMs: 10_000,
        burst,
        depthMs: Math.ceil((burst * 10_000) / limit),
      });
      at(1 + depthSeconds * 1_000);
      expect(await burstOf()).toEqual([...Array(burst).fill(200), 429]);
    },
  );

  it("refuses a limit whose burst would pass 1 000 000 000, from the admin API and in TIERS", async () => {
    // 1 a second in bursts of 10⁹ (about 32 years of refill): 2 a second would be bursts of 2 × 10⁹.
    const id = uniqueRule("cap");
    const rule = { id, limit: 1, period: "1s", burst: 1_000_000_000 };
    const { admin } = worker([rule]);
    const refused = await admin("PUT", `/overrides?rule=${id}&key=${uniqueIp()}`, { limit: 2 });
    expect(refused.status).toBe(400);
    expect(JSON.stringify(refused.body)).toContain(
      `field \\"limit\\": 2 is above the most rule \\"${id}\\" may give a client (1): its burst (1000000000 at a limit of 1) grows in proportion, and a bucket holds at most 1000000000; must be at most 1`,
    );
    const settings = parseSettings({ RULES: [rule], TIERS: { pro: { [id]: 2 } } });
    expect(settings.ok ? [] : settings.errors).toEqual([
      `TIERS.pro.${id}: 2 is above the most RULES[0] "${id}" may give a client (1): its burst (1000000000 at a limit of 1) grows in proportion, and a bucket holds at most 1000000000; make it at most 1`,
    ]);
  });

  it("an adaptive factor of 0.5: 5 an hour in bursts of 10; the 11th refused by the reduction alone", async () => {
    const stub = env.RATE_LIMITER.get(env.RATE_LIMITER.idFromName(`bucket-factor-${Date.now()}`));
    const ruleCheck = halvedTenAnHour("factor");
    const results = [];
    for (let i = 0; i < 11; i++) results.push(await stub.check([ruleCheck]));
    expect(results.map((r) => r.allowed)).toEqual([...Array(10).fill(true), false]);
    expect(results[0]!.verdicts[0]).toMatchObject({ limit: 5, remaining: 9 });
    expect(results[10]!.verdicts[0]).toMatchObject({ reduced: true, limit: 5, ruleAllows: false });
    // Without the factor, the same 10 spent leave 10 of 20.
    const { factor: _, ...whole } = ruleCheck;
    expect((await stub.check([whole])).verdicts[0]).toMatchObject({ ruleAllows: true, remaining: 9 });
  });
});

/**
 * A tier or an override may give one client a burst of its own with its
 * limit (`{"limit": 10, "burst": 50}`, `pro = { limit = 10, burst = 50 }`):
 * its bucket is then that deep, whatever the rule's burst; an adaptive
 * factor scales it in proportion, as it does the rule's.
 */
describe("a tier or an override gives a client a burst of its own", () => {
  const ISSUER = "https://auth.example.test/";
  let key: SigningKey;
  beforeAll(async () => {
    key = await signingKey("ES256");
  });

  // 10 an hour in bursts of 20 for everyone; 10 an hour in bursts of 50 for this client: a depth of 5 hours.
  it.each([
    ["an override of limit 10, burst 50", "override"],
    ["a tier pro = { limit = 10, burst = 50 }, by an override", "tier"],
    ["the same tier, by a token's tier_claim", "claim"],
  ])("%s: 50 at once, then one every 360 s; the headers, the client's view and /status say so", async (_, way) => {
    const id = uniqueRule(`own-burst-${way}`);
    const { send, admin } = worker([tenAnHour(id, { key: ["jwt:sub|ip"] })], {
      TIERS: { pro: { [id]: { limit: 10, burst: 50 } } },
      CLIENT_LIMITS_PATH: "/rate_limit",
      JWT: { issuer: ISSUER, audience: "api", tier_claim: "plan" },
      JWT_JWKS: JSON.stringify(keySet(key)),
    });
    const ip = uniqueIp();
    const sub = `user-${crypto.randomUUID()}`;
    const claimed = way === "claim" ? bearer(await tokenFor(key, { sub, iss: ISSUER, aud: "api", plan: "pro" })) : {};
    const clientKey = way === "claim" ? `jwt:sub=${sub}` : `ip=${ip}`;
    if (way !== "claim") {
      const body = way === "tier" ? { tier: "pro" } : { limit: 10, burst: 50 };
      expect((await admin("PUT", `/overrides?rule=${id}&key=${clientKey}`, body)).status).toBe(200);
    }
    const request = () => send("/x", from(ip, claimed));
    expect(await statuses(51, request)).toEqual([...Array(50).fill(200), 429]);
    const refused = await request();
    expect(headersOf(refused)).toMatchObject({ status: 429, policy: `"${id}";q=50;w=18000`, retryAfter: "360" });
    const view = await send("/rate_limit", from(ip, claimed));
    expect(((await view.json()) as { rules: unknown[] }).rules).toEqual([
      expect.objectContaining({ id, limit: 50, windowSeconds: 18_000, remaining: 0 }),
    ]);
    expect((await admin("GET", `/status?rule=${id}&key=${clientKey}`)).body).toMatchObject({
      limit: 10,
      periodMs: 3_600_000,
      burst: 50,
      depthMs: 18_000_000,
      allowed: false,
    });
  });

  it("shows the burst it gives: GET of the override, the list, an import's JSON and CSV, and the tiers of GET /rules", async () => {
    const id = uniqueRule("own-burst-shown");
    const { admin, send } = worker([tenAnHour(id)], { TIERS: { pro: { [id]: { limit: 30, burst: 90 } } } });
    const [a, b, c] = [uniqueIp(), uniqueIp(), uniqueIp()];
    expect((await admin("PUT", `/overrides?rule=${id}&key=ip=${a}`, { limit: 5, burst: 7 })).status).toBe(200);
    expect((await admin("GET", `/overrides?rule=${id}&key=ip=${a}`)).body).toMatchObject({ limit: 5, burst: 7 });
    const imported = await admin("POST", "/overrides/import", [{ rule: id, key: `ip=${b}`, limit: 6, burst: 8 }]);
    expect(imported.status).toBe(200);
    const csv = await send("/__ratelimit/overrides/import", {
      method: "POST",
      headers: { ...auth, "content-type": "text/csv" },
      body: `rule,key,limit,burst\n${id},ip=${c},4,9\n`,
    });
    expect(csv.status).toBe(200);
    const listed = (await admin("GET", `/overrides?rule=${id}`)).body.overrides as Record<string, unknown>[];
    expect(
      listed.map(({ limit, burst }) => ({ limit, burst })).sort((x, y) => Number(x.limit) - Number(y.limit)),
    ).toEqual([
      { limit: 4, burst: 9 },
      { limit: 5, burst: 7 },
      { limit: 6, burst: 8 },
    ]);
    expect((await admin("GET", "/rules")).body.tiers).toEqual({ pro: { [id]: { limit: 30, burst: 90 } } });
    // And the client is counted under it: 9 at once.
    expect(await statuses(10, () => send("/x", from(c)))).toEqual([...Array(9).fill(200), 429]);
  });

  it.each([
    ["a burst without a limit", tenAnHour, { burst: 50 }, 'field \\"burst\\": goes with \\"limit\\"'],
    [
      "a burst for a rule that is no bucket",
      (id: string) => ({ id, limit: 10, period: "1h", key: ["ip"] }),
      { limit: 10, burst: 50 },
      'field \\"burst\\": only a bucket rule gives a client one',
    ],
    ["a burst of 0", tenAnHour, { limit: 10, burst: 0 }, 'field \\"burst\\": must be an integer from 1'],
    ["a burst of 2.5", tenAnHour, { limit: 10, burst: 2.5 }, 'field \\"burst\\": must be an integer from 1'],
    [
      "a burst below the rule's cost",
      (id: string) => tenAnHour(id, { cost: 5 }),
      { limit: 10, burst: 4 },
      'field \\"burst\\": 4 is below the rule\'s cost (5)',
    ],
    [
      "a burst that takes more than 100 years to refill",
      tenAnHour,
      { limit: 10, burst: 9_000_000 },
      "in more than 100 years",
    ],
    ["a burst beside a tier", tenAnHour, { tier: "pro", burst: 50 }, 'field \\"burst\\": goes with \\"limit\\"'],
  ])("refuses %s: 400, naming the field, and nothing is set", async (_, rule, body, says) => {
    const id = uniqueRule("own-burst-bad");
    const { admin } = worker([rule(id)], { TIERS: { pro: { [id]: 20 } } });
    const ip = uniqueIp();
    const refused = await admin("PUT", `/overrides?rule=${id}&key=ip=${ip}`, body);
    expect(refused.status).toBe(400);
    expect(JSON.stringify(refused.body)).toContain(says);
    const stored = await admin("GET", `/overrides?rule=${id}&key=ip=${ip}`);
    expect(stored.body).not.toHaveProperty("limit");
    expect(stored.body).not.toHaveProperty("burst");
  });

  it.each([
    ["an unknown field", { limit: 10, bust: 50 }, 'TIERS.pro.ID: unknown field "bust"'],
    ["a burst of 0", { limit: 10, burst: 0 }, 'TIERS.pro.ID: field "burst": must be an integer from 1'],
    ["a table without a limit", { burst: 50 }, 'TIERS.pro.ID: field "limit": must be an integer from 1'],
  ])("refuses %s in TIERS, naming the tier, the rule and the field", (_, value, says) => {
    const id = uniqueRule("own-burst-tiers");
    const settings = parseSettings({ RULES: [tenAnHour(id)], TIERS: { pro: { [id]: value } } });
    expect(settings.ok ? [] : settings.errors.join("\n")).toContain(says.replace("ID", id));
  });

  it("refuses a burst in TIERS for a rule that is no bucket, in the settings and check-config alike", () => {
    const rule = { id: uniqueRule("own-burst-window"), limit: 10, period: "1h" };
    const vars = { RULES: [rule], TIERS: { pro: { [rule.id]: { limit: 20, burst: 40 } } } };
    const says = `TIERS.pro.${rule.id}: field "burst": only a bucket rule gives a client one, and rule "${rule.id}" is a window rule`;
    const settings = parseSettings(vars);
    expect(settings.ok ? [] : settings.errors).toEqual([says]);
    expect(checkConfig({ vars }).findings.filter((f) => f.level === "error")).toEqual([
      { level: "error", message: says },
    ]);
  });

  it("check-config: a tier of the rule's own rate with a deeper bucket is no tier that changes nothing", () => {
    const rule = tenAnHour(uniqueRule("own-burst-same"));
    const warned = (value: unknown) =>
      checkConfig({ vars: { RULES: [rule], TIERS: { pro: { [rule.id]: value } } } }).findings.map((f) => f.message);
    expect(warned(10).join("\n")).toContain("so the tier changes nothing for it");
    expect(warned({ limit: 10, burst: 50 }).join("\n")).not.toContain("changes nothing");
  });

  it("an adaptive factor of 0.5 halves the client's own burst too: 10 an hour in bursts of 50 become 5 in bursts of 25", async () => {
    const stub = env.RATE_LIMITER.get(env.RATE_LIMITER.idFromName(`bucket-own-factor-${Date.now()}`));
    const ruleCheck = halvedTenAnHour("own-factor");
    const own = { burst: 50, ownLimit: 10 };
    await stub.setOverride(
      "own-factor",
      { kind: "limit", limit: 10, own, expiresAtMs: null, note: "", updatedAtMs: Date.now(), by: "test" },
      1,
    );
    const results = [];
    for (let i = 0; i < 26; i++) results.push(await stub.check([ruleCheck]));
    expect(results.map((r) => r.allowed)).toEqual([...Array(25).fill(true), false]);
    expect(results[0]!.verdicts[0]).toMatchObject({ limit: 5, own, remaining: 24 });
  });
});

describe("several isolates, one client key under a bucket", () => {
  it.each([
    ["40 per 2 s, bursts of 30 (near its limit: the object decides nearly every request)", 40, 2_000, 30, 540],
    ["1000 a minute, bursts of 500 (far from it at first: leases)", 1_000, 60_000, 500, 990],
  ])(
    "%s: never over the conformance bound in any interval, the object never fuller than the admissions allow, and at least 98 in 100 of what one object admits",
    async (_, limit, periodMs, burst, exactly) => {
      vi.useFakeTimers({ toFake: ["Date"] });
      at(0);
      const random = randomGenerator(limit);
      const id = uniqueRule("isolates");
      const settings = settingsFor([{ id, limit, period: `${periodMs}ms`, burst }]);
      const bucket: BucketLimit = { limit, periodMs, burst };
      const { ns, counter } = countedNamespace();
      const deciders = Array.from({ length: 4 }, () => decider(settings, ns, createIsolate()));
      const ip = uniqueIp();
      const admitted: Admission[] = [];
      // One exact bucket deciding the same requests one by one, in the order sent.
      let exact = fullState(T0, bucket);
      let exactAdmitted = 0;
      let now = T0;
      let sent = 0;
      for (let step = 0; step < 500; step++) {
        now += random.int(Math.ceil((2 * periodMs) / limit));
        vi.setSystemTime(now);
        const n = 1 + random.int(6);
        for (let k = 0; k < n; k++) {
          const decided = check(exact, now, bucket);
          exact = decided.state;
          if (decided.decision.allowed) exactAdmitted++;
        }
        sent += n;
        const outcomes = await Promise.all(
          Array.from({ length: n }, () => deciders[random.int(4)]!.run(requestFrom(ip))),
        );
        for (const outcome of outcomes) if (statusOf(outcome) === 200) admitted.push({ atMs: now, cost: 1 });
      }
      for (const { background } of deciders) await background.settled();
      // The seeded trace asks far more than the bucket admits (one exact bucket admits `exactly` of its ~1 760).
      expect(exactAdmitted).toBe(exactly);
      expect(firstOverBound(admitted, bucket)).toBeNull();
      expect(admitted.length).toBeLessThanOrEqual(exactAdmitted);
      expect(admitted.length).toBeGreaterThanOrEqual(Math.ceil(0.98 * exactAdmitted));
      // The object counts at least what was admitted (and what isolates still hold): never more room than the bound leaves.
      const row = (await storedRows(ip))[`${id}|bucket`]!;
      const [ticks, perMs] = row.counts as [number, number];
      const state = { tatMs: row.bucket, ticks, perMs };
      const room = Math.min(burst, Math.max(0, burst - Math.ceil(((state.tatMs - now) * limit) / periodMs)));
      expect(room).toBeLessThanOrEqual(oracleRoom(admitted, now, bucket));
      // With room, leases serve requests without calls (and known refusals, once it is spent).
      expect(counter.calls).toBeLessThan((burst > 100 ? 0.6 : 0.8) * sent);
    },
  );
});

describe("held requests (max_delay) go on at their conformance instants", () => {
  // 1 a second in bursts of 1, held up to 3.5 s: of 5 at once, 1 goes, 3 are held 1, 2 and 3 s; the 5th would wait 4 s.
  const heldRule = (id: string) => ({ id, path: "/held/*", limit: 1, period: "1s", burst: 1, max_delay: "3500ms" });

  it("in the order they came, one per emission interval; past the delay, refused at once with the exact Retry-After", async () => {
    const id = uniqueRule("held");
    const send = timedLimiter([heldRule(id)]);
    const ip = uniqueIp();
    const tag = uniqueTag(id);
    const startedAt = Date.now();
    const answers = await Promise.all(
      Array.from({ length: 5 }, async (_, i) => {
        await new Promise((resolve) => setTimeout(resolve, 20 * i)); // in this order
        const { response } = await send("/held/x", from(ip, { "x-test-tag": tag }));
        await response.arrayBuffer();
        return {
          status: response.status,
          atMs: Date.now() - startedAt,
          retryAfter: response.headers.get("retry-after"),
        };
      }),
    );
    expect(answers.map((a) => a.status)).toEqual([200, 200, 200, 200, 429]);
    // Refused at once: its turn would be 4 s away, past the delay.
    expect(answers[4]!.atMs).toBeLessThan(1_000);
    expect(answers[4]!.retryAfter).toBe("4");
    // The i-th held one goes at its conformance instant, i emission intervals after the first was admitted: never
    // sooner (late, on a busy machine, is allowed), and in the order they came.
    for (let i = 1; i < 4; i++) {
      expect(answers[i]!.atMs).toBeGreaterThanOrEqual(i * 1_000 - 40);
      expect(answers[i]!.atMs).toBeGreaterThanOrEqual(answers[i - 1]!.atMs);
    }
    expect(await originHits(tag)).toBe(4);
  });
});

describe.concurrent("held bucket requests, when an admin change comes", () => {
  // 1 a second in bursts of 2, held up to 10 s: of 5 at once, 2 go, and 3 are held until 1, 2 and 3 s on.
  const heldRule = (id: string) => ({ id, path: "/held/*", limit: 1, period: "1s", burst: 2, max_delay: "10s" });
  const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

  /** Five requests of one client at once; each one's status, when it was answered, and whether it was held. */
  async function fiveHeld(send: ReturnType<typeof timedLimiter>, ip: string, tag: string) {
    const startedAt = Date.now();
    const answers = Array.from({ length: 5 }, async () => {
      const { response } = await send("/held/x", from(ip, { "x-test-tag": tag }));
      await response.arrayBuffer();
      return { status: response.status, atMs: Date.now() - startedAt, held: response.headers.has("server-timing") };
    });
    await pause(300);
    return { answers, changedAtMs: Date.now() - startedAt };
  }

  it.each([
    ["a reset", "DELETE", "/status", undefined, 200],
    ["unlimited", "PUT", "/overrides", { unlimited: true }, 200],
    ["a raise (20 a second, bursts of 40)", "PUT", "/overrides", { limit: 20 }, 200],
    ["a tier (pro: 10 a second, bursts of 20)", "PUT", "/overrides", { tier: "pro" }, 200],
    ["a deny", "PUT", "/overrides", { deny: true }, 403],
  ])("%s: the held requests are answered at once (%i)", async (_, method, route, body, status) => {
    const id = uniqueRule("held-admin");
    const send = timedLimiter([heldRule(id)], { ADMIN_TOKEN: TOKEN, TIERS: { pro: { [id]: 10 } } });
    const ip = uniqueIp();
    const tag = uniqueTag(id);
    const { answers, changedAtMs } = await fiveHeld(send, ip, tag);
    const { response } = await send(`/__ratelimit${route}?rule=${id}&key=${ip}`, {
      method,
      headers: { ...auth, "content-type": "application/json" },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    expect(response.status).toBe(200);
    const answered = await Promise.all(answers);
    expect(answered.map((a) => a.status).sort()).toEqual([200, 200, status, status, status]);
    for (const a of answered.filter((a) => a.status === status && (a.held || status === 403)).slice(-3))
      expect(a.atMs - changedAtMs).toBeLessThan(700);
    expect(await originHits(tag)).toBe(status === 200 ? 5 : 2);
  });

  it("a lower limit (1 every 2 s, a burst of 1): the held requests keep the turns they were given", async () => {
    const id = uniqueRule("held-lower");
    const send = timedLimiter([{ ...heldRule(id), limit: 2, period: "2s" }], { ADMIN_TOKEN: TOKEN });
    const ip = uniqueIp();
    const { answers, changedAtMs } = await fiveHeld(send, ip, uniqueTag(id));
    const { response } = await send(`/__ratelimit/overrides?rule=${id}&key=${ip}`, {
      method: "PUT",
      headers: { ...auth, "content-type": "application/json" },
      body: JSON.stringify({ limit: 1 }),
    });
    expect(response.status).toBe(200);
    const answered = await Promise.all(answers);
    expect(answered.map((a) => a.status)).toEqual([200, 200, 200, 200, 200]);
    for (const a of answered.filter((a) => a.held)) expect(a.atMs - changedAtMs).toBeGreaterThan(500);
  });
});

describe("check-config", () => {
  const findings = (rule: Record<string, unknown>) =>
    checkConfig({ vars: { ORIGIN_URL: "https://origin.example.com", RULES: [rule] } }).findings.filter((f) =>
      f.message.startsWith('RULES[0] "b"'),
    );

  it("warns where a request's cost is more than the burst: every request of the rule is refused", () => {
    expect(findings({ id: "b", limit: 30, period: "1h", burst: 20, cost: 25 })).toEqual([
      {
        level: "warning",
        message:
          'RULES[0] "b": field "cost": 25 is more than the burst (20), the most the bucket ever holds, so every request of this rule is refused as one that can never be admitted; make the burst at least the cost',
      },
    ]);
  });

  it("warns where a delay is longer than the bucket takes to refill its burst", () => {
    expect(findings({ id: "b", limit: 10, period: "1s", burst: 20, max_delay: "5s" })).toEqual([
      {
        level: "warning",
        message:
          'RULES[0] "b": field "max_delay": "5s" is longer than the bucket takes to refill its burst (2s: burst × period / limit), so a client keeps more than a burst\'s worth of requests held (up to 50 at this rate) with their connections open, and a sustained overload is queued rather than refused; make it at most that, unless that is meant',
      },
    ]);
  });

  it.each([
    [
      { precision: 10 },
      'field "precision": does not apply to a token bucket (a rule with "burst"), which keeps no window: its guarantee is its burst (docs/token-bucket.md); remove it',
    ],
    [{ burst: 0 }, 'field "burst": must be an integer from 1 to 1000000000; got 0'],
    [
      { limit: 1, period: "365d", burst: 101 },
      'field "burst": must be at most 100: a bucket of 1 per 365 days refills 101 in more than 100 years; got 101',
    ],
  ])("refuses %j on a bucket, naming the field", (fields, message) => {
    const parsed = parseRules([{ id: "b", limit: 10, period: "1s", burst: 20, ...fields }]);
    expect(parsed.ok ? [] : parsed.errors).toEqual([expect.stringContaining(`RULES[0] "b": ${message}`)]);
  });

  it.each([
    [
      { quota: 10, per: "day", burst: 5 },
      'field "burst": makes a rule a token bucket, and this one is a calendar quota (it has "quota", "per"): a rule is one kind; remove it',
    ],
    [
      { limit: 10, period: "1s", burst: 5, concurrency: 2 },
      'field "concurrency": makes a rule a concurrency rule, and this one is a token bucket (it has "limit", "period", "burst"): a rule is one kind; remove it',
    ],
    [
      { concurrency: 2, quota: 10, per: "day" },
      'field "concurrency": makes a rule a concurrency rule, and this one is a calendar quota (it has "quota", "per"): a rule is one kind; remove it',
    ],
    [
      { limit: 10, period: "1m", quota: 100 },
      'field "quota": makes a rule a calendar quota, and this one is a sliding window (it has "limit", "period"): a rule is one kind; remove it',
    ],
    [
      { limit: 10, period: "1m", cost: 2, quota: 100, timezone: "UTC" },
      'field "quota": makes a rule a calendar quota, and this one is a sliding window (it has "limit", "period"): a rule is one kind; remove them ("quota", "timezone")',
    ],
    [
      { limit: 10, period: "1s", burst: 5, quota: 10, per: "day" },
      'field "quota": makes a rule a calendar quota, and this one is a token bucket (it has "limit", "period", "burst"): a rule is one kind; remove them ("quota", "per")',
    ],
  ])(
    "refuses a rule marked as two kinds with one error, on the mark of the kind it has fewer fields of: %j",
    (fields, error) => {
      const parsed = parseRules([{ id: "b", ...fields }]);
      const other = /makes a rule (a [a-z ]+?), and/.exec(error)![1];
      expect(parsed.ok ? [] : parsed.errors).toEqual([`RULES[0] "b": ${error}, or make ${other} a rule of its own`]);
    },
  );

  it("refuses a burst on a concurrency rule", () => {
    const parsed = parseRules([{ id: "b", concurrency: 2, burst: 20 }]);
    expect(parsed.ok ? [] : parsed.errors).toEqual([
      'RULES[0] "b": field "burst": makes a rule a token bucket, and this one is a concurrency rule (it has "concurrency"): a rule is one kind; remove it, or make a token bucket a rule of its own',
    ]);
  });
});
