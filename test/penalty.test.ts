/**
 * @module
 * A rule's penalty (`block_for`), as the README's login example writes it: 5
 * attempts a minute, and a client refused once is refused for 15 minutes.
 * Through the Worker, through several isolates, across the object's
 * eviction, under the admin API and the cleanup alarm. The clock is faked
 * (the objects read the same one), so every instant and wait is exact.
 */
import { evictDurableObject, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import fc from "fast-check";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import type { RuleCheck } from "../src/object/protocol.ts";
import { countedNamespace } from "./support/counting.ts";
import { env } from "./support/env.ts";
import { createIsolate, decider, requestFrom, settingsFor } from "./support/isolate.ts";
import { from, limiter, originHits, uniqueIp, uniqueTag } from "./support/limiter.ts";
import { objectForIp, storedRows, storedTotal } from "./support/objects.ts";

const LOGIN = { id: "login", path: "/login", methods: ["POST"], limit: 5, period: "1m", block_for: "15m" };
const MINUTE = 60_000;
const PENALTY_MS = 15 * MINUTE;
/** Years ahead, so an alarm set from these instants never fires on its own mid-test. */
const START = Date.UTC(2031, 0, 1, 0, 0, 0);

const at = (ms: number) => vi.setSystemTime(ms);

beforeEach(() => {
  vi.useFakeTimers({ toFake: ["Date"] });
  at(START);
});
afterEach(() => {
  vi.useRealTimers();
});

/** The Worker under the login rule, and one client's attempts: its status and Retry-After. */
function loginClient(vars: Record<string, string> = {}) {
  const send = limiter([LOGIN], vars);
  const ip = uniqueIp();
  const tag = uniqueTag("login");
  const attempt = async () => {
    const res = await send("/login", { method: "POST", ...from(ip, { "x-test-tag": tag }) });
    await res.arrayBuffer();
    return { status: res.status, retryAfter: res.headers.get("retry-after"), headers: res.headers };
  };
  return { send, ip, tag, attempt };
}

/** Five attempts a second apart from START, all admitted; then the sixth, refused: the instant it was refused. */
async function exhaust(attempt: () => Promise<{ status: number; retryAfter: string | null }>): Promise<number> {
  for (let i = 0; i < 5; i++) {
    at(START + i * 1_000);
    expect((await attempt()).status).toBe(200);
  }
  const refusedAt = START + 5_000;
  at(refusedAt);
  expect(await attempt()).toMatchObject({ status: 429, retryAfter: "900" });
  return refusedAt;
}

describe("a login rule: 5 attempts a minute, then 15 minutes", () => {
  it("refuses the 6th attempt with Retry-After 900, and every attempt until 15 minutes after it", async () => {
    const { attempt } = loginClient();
    const refusedAt = await exhaust(attempt);
    at(refusedAt + 14 * MINUTE + 59_000);
    expect(await attempt()).toMatchObject({ status: 429, retryAfter: "1" });
    at(refusedAt + PENALTY_MS - 1);
    expect(await attempt()).toMatchObject({ status: 429, retryAfter: "1" });
    at(refusedAt + PENALTY_MS);
    expect((await attempt()).status).toBe(200);
  });

  it("refuses however the window slides: the window alone would admit a minute later", async () => {
    const { attempt } = loginClient();
    const refusedAt = await exhaust(attempt);
    for (let minutes = 1; minutes < 15; minutes++) {
      at(refusedAt + minutes * MINUTE);
      // A refusal during the penalty does not extend it: the wait counts down from the refusal that started it.
      expect(await attempt()).toMatchObject({ status: 429, retryAfter: String(900 - minutes * 60) });
    }
  });

  it("sends no attempt of the penalty to the origin, and counts none of them", async () => {
    const { attempt, ip, tag } = loginClient();
    const refusedAt = await exhaust(attempt);
    for (let s = 30; s < 900; s += 30) {
      at(refusedAt + s * 1_000);
      expect((await attempt()).status).toBe(429);
    }
    expect(await originHits(tag)).toBe(5);
    expect(await storedTotal(ip)).toBe(5);
    at(refusedAt + PENALTY_MS);
    const after = await attempt();
    // The window has long rotated: the first attempt after the penalty sees the whole limit, less itself.
    expect([after.status, after.headers.get("x-ratelimit-remaining")]).toEqual([200, "4"]);
    expect(await originHits(tag)).toBe(6);
  });

  it("leaves another client alone", async () => {
    const { send, attempt } = loginClient();
    const refusedAt = await exhaust(attempt);
    at(refusedAt + MINUTE);
    const other = await send("/login", { method: "POST", ...from(uniqueIp()) });
    expect(other.status).toBe(200);
  });

  it("leaves the client's other requests alone: only what the rule counts is refused", async () => {
    const { send, ip, attempt } = loginClient();
    await exhaust(attempt);
    expect((await send("/login", from(ip))).status).toBe(200); // a GET, which the rule does not count
    expect((await send("/home", { method: "POST", ...from(ip) })).status).toBe(200);
  });
});

describe("the penalty lives in the client's object", () => {
  const settings = () => settingsFor([LOGIN]);
  const post = (ip: string) => {
    const request = requestFrom(ip, "/login");
    return new Request(request, { method: "POST" });
  };
  const retryAfterOf = (outcome: Awaited<ReturnType<ReturnType<typeof decider>["run"]>>) =>
    outcome.kind === "refuse" ? outcome.response.headers.get("retry-after") : null;

  it("survives the object's eviction, and a second isolate honours it", async () => {
    const ip = uniqueIp();
    const first = decider(settings(), env.RATE_LIMITER, createIsolate());
    for (let i = 0; i < 5; i++) expect((await first.run(post(ip))).kind).toBe("allow");
    const refused = await first.run(post(ip));
    expect(retryAfterOf(refused)).toBe("900");

    await evictDurableObject(await objectForIp(ip)); // the next call constructs the object anew, from storage
    at(START + 10 * MINUTE);
    const second = decider(settings(), env.RATE_LIMITER, createIsolate());
    expect(retryAfterOf(await second.run(post(ip)))).toBe("300");
    at(START + PENALTY_MS);
    expect((await second.run(post(ip))).kind).toBe("allow");
  });

  it("is answered by the isolate itself for at most its maxRefusalMs, with the penalty's exact Retry-After", async () => {
    const ip = uniqueIp();
    const { ns, counter } = countedNamespace();
    const { run } = decider(settings(), ns, createIsolate({ maxRefusalMs: 10_000 }));
    for (let i = 0; i < 6; i++) await run(post(ip));
    expect(counter.calls).toBe(6);
    at(START + 9_999);
    expect(retryAfterOf(await run(post(ip)))).toBe("891"); // 900 000 − 9 999 ms, rounded up
    expect(counter.calls).toBe(6);
    at(START + 10_000); // the isolate's entry has lapsed: the object is asked again, and refuses again
    expect(retryAfterOf(await run(post(ip)))).toBe("890");
    expect(counter.calls).toBe(7);
  });

  it("is shown by the admin API's status, and lifted by its reset", async () => {
    const token = "test-admin-token-penalty-0123456789";
    const { send, ip, attempt } = loginClient({ ADMIN_TOKEN: token });
    const refusedAt = await exhaust(attempt);
    const admin = async (method: string) => {
      const res = await send(`/__ratelimit/status?rule=login&key=${ip}`, {
        method,
        headers: { authorization: `Bearer ${token}` },
      });
      return (await res.json()) as Record<string, unknown>;
    };
    at(refusedAt + 2 * MINUTE);
    expect(await admin("GET")).toMatchObject({
      allowed: false,
      blockedUntil: new Date(refusedAt + PENALTY_MS).toISOString(),
      retryAfterMs: 13 * MINUTE,
      retryAfterSeconds: 780,
    });
    expect(await admin("DELETE")).toMatchObject({ reset: true });
    expect((await attempt()).status).toBe(200);
    expect(await admin("GET")).not.toHaveProperty("blockedUntil");
  });

  it("runs to its end under a raise, a tier or an override's deletion; unlimited takes it off while it lasts", async () => {
    const token = "test-admin-token-penalty-0123456789";
    const { send, ip, attempt } = loginClient({ ADMIN_TOKEN: token, TIERS: JSON.stringify({ pro: { login: 100 } }) });
    const refusedAt = await exhaust(attempt);
    const override = async (method: string, body?: unknown) => {
      const res = await send(`/__ratelimit/overrides?rule=login&key=${ip}`, {
        method,
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
      expect(res.status, await res.text()).toBe(200);
    };
    const seen: string[] = [];
    const attemptAfter = async (name: string) => {
      const { status, retryAfter } = await attempt();
      seen.push(`${name} ${status} ${retryAfter ?? "-"}`);
    };
    at(refusedAt + MINUTE);
    await override("PUT", { limit: 100 });
    await attemptAfter("raise");
    await override("PUT", { tier: "pro" });
    await attemptAfter("tier");
    await override("DELETE");
    await attemptAfter("deleted");
    await override("PUT", { unlimited: true });
    await attemptAfter("unlimited");
    await override("DELETE");
    await attemptAfter("unlimited deleted");
    at(refusedAt + PENALTY_MS);
    await attemptAfter("at its end");
    expect(seen).toEqual([
      "raise 429 840",
      "tier 429 840",
      "deleted 429 840",
      "unlimited 200 -",
      "unlimited deleted 429 840",
      "at its end 200 -",
    ]);
  });

  it("keeps the client's row while the penalty lasts, and the alarm deletes it after", async () => {
    const { attempt, ip } = loginClient();
    const refusedAt = await exhaust(attempt);
    const stub = await objectForIp(ip);
    const alarm = () => runInDurableObject(stub, (_instance, state) => state.storage.getAlarm());
    const penaltyEnds = refusedAt + PENALTY_MS;
    expect(await alarm()).toBe(penaltyEnds);

    at(START + 2 * MINUTE); // both windows the counts lie in are over; the penalty is not
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(Object.keys(await storedRows(ip))).toEqual(["login|60000|1"]);
    expect(await alarm()).toBe(penaltyEnds);

    at(penaltyEnds - 1);
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(Object.keys(await storedRows(ip))).toEqual(["login|60000|1"]);

    at(penaltyEnds);
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(await storedRows(ip)).toEqual({});
    expect(await alarm()).toBeNull();
  });
});

describe("Retry-After under a penalty is exact", () => {
  let objects = 0;
  const fresh = () => env.RATE_LIMITER.get(env.RATE_LIMITER.idFromName(`penalty-property-${++objects}-${START}`));

  const scenario = fc.record({
    limit: fc.integer({ min: 1, max: 4 }),
    periodMs: fc.constantFrom(1_000, 7_919, 60_000, 3_600_000),
    precision: fc.integer({ min: 1, max: 6 }),
    strict: fc.boolean(),
    /** The penalty as a share of the period: shorter or longer than it, so either wait may be the later. */
    blockForShare: fc.double({ min: 0.001, max: 3, noNaN: true }),
    /** Gaps between requests, in thousandths of the period. */
    gaps: fc.array(fc.integer({ min: 0, max: 700 }), { minLength: 1, maxLength: 12 }),
  });

  it("admits a request at now + retryAfter, and refuses one 1 ms earlier", async () => {
    await fc.assert(
      fc.asyncProperty(scenario, async ({ limit, periodMs, precision, strict, blockForShare, gaps }) => {
        const blockForMs = Math.max(1_000, Math.round(periodMs * blockForShare));
        const rule: RuleCheck = { id: "p", limit, periodMs, precision, strict, enforce: true, blockForMs };
        const stub = fresh();
        let now = START;
        // Fill the window, so the last request is refused; gaps let buckets rotate on the way.
        for (const gap of [...gaps, ...Array<number>(limit).fill(0)]) {
          now += Math.floor((gap * periodMs) / 1_000);
          at(now);
          await stub.check([rule]);
        }
        at(now);
        const refused = (await stub.check([rule])).verdicts[0]!;
        if (refused.ruleAllows) return; // the gaps let the window empty: nothing to wait for
        expect(refused.retryAfterMs).toBeGreaterThan(0);
        expect(refused.penaltyMs).toBeGreaterThan(0);
        at(now + refused.retryAfterMs - 1);
        expect((await stub.peek([rule])).verdicts[0]!.ruleAllows).toBe(false);
        at(now + refused.retryAfterMs);
        expect((await stub.check([rule])).verdicts[0]!.ruleAllows).toBe(true);
      }),
      { numRuns: 60 },
    );
  });
});
