/**
 * `count`: which responses count against a rule. Every matched request is
 * counted before it is forwarded, so concurrent requests never overshoot;
 * when the origin's answer does not match, the count is given back.
 */
import { describe, expect, it } from "vitest";
import { parseRules } from "../src/core/rules.ts";
import { downOriginUrl, from, limiter, originHits, uniqueIp, uniqueTag } from "./support/limiter.ts";
import { expectErrorLogs, expectOriginDownReports } from "./support/logs.ts";

let rules = 0;
const id = () => `count-${++rules}`;

/** The Worker with one rule over `/status/*`; `call(ip, status)` asks the origin to answer with `status`. */
function setup(rule: Record<string, unknown>, vars: Record<string, string> = {}) {
  const send = limiter([{ id: id(), path: "/status/*", period: "1h", ...rule }], vars);
  const call = async (ip: string, status: number, headers: Record<string, string> = {}) => {
    const res = await send(`/status/${status}`, from(ip, headers));
    await res.arrayBuffer();
    return res;
  };
  return { send, call };
}

const sequence = async (call: (status: number) => Promise<Response>, statuses: number[]) => {
  const out: number[] = [];
  for (const status of statuses) out.push((await call(status)).status);
  return out;
};

describe('count = "failed": only failed responses count', () => {
  it("never limits a client whose requests succeed, and limits one whose requests fail", async () => {
    const { call } = setup({ limit: 3, count: "failed" });
    const [good, bad] = [uniqueIp(), uniqueIp()];
    expect(await sequence((s) => call(good, s), Array(10).fill(200))).toEqual(Array(10).fill(200));
    expect(await sequence((s) => call(bad, s), [401, 401, 401, 401])).toEqual([401, 401, 401, 429]);
  });

  it("counts a success between failures for nothing", async () => {
    const { call } = setup({ limit: 2, count: "failed" });
    const ip = uniqueIp();
    expect(await sequence((s) => call(ip, s), [401, 200, 200, 200, 401, 401])).toEqual([401, 200, 200, 200, 401, 429]);
  });

  it("reports what is left after the give-back in RateLimit", async () => {
    const { call } = setup({ limit: 5, count: "failed" });
    const ip = uniqueIp();
    expect((await call(ip, 200)).headers.get("ratelimit")).toMatch(/;r=5;/);
    expect((await call(ip, 500)).headers.get("ratelimit")).toMatch(/;r=4;/);
  });

  it("counts an origin that is down as failed", async () => {
    const send = limiter([{ id: id(), limit: 2, period: "1h", count: "failed" }], { ORIGIN_URL: downOriginUrl() });
    const ip = uniqueIp();
    const statuses: number[] = [];
    for (let i = 0; i < 3; i++) statuses.push((await send("/anything", from(ip))).status);
    expect(statuses).toEqual([502, 502, 429]);
    expect(expectErrorLogs("origin_unreachable")).toHaveLength(2);
    await expectOriginDownReports(2);
  });
});

describe("a refusal that rests on a count still in flight", () => {
  it("is not remembered: once the count is given back, the client is admitted at once", async () => {
    const send = limiter([{ id: id(), limit: 1, period: "1h", count: "failed" }]);
    const ip = uniqueIp();
    // The first request is counted (1 of 1) and takes 300 ms at the origin.
    const slow = send("/slow/300", from(ip));
    await new Promise((resolve) => setTimeout(resolve, 100));
    // Meanwhile a second is refused: the count is at the limit, though it will be given back.
    expect((await send("/fast", from(ip))).status).toBe(429);
    expect((await slow).status).toBe(200); // a success: its count is given back
    // The refusal rested on that count: it must not outlive it.
    expect((await send("/fast", from(ip))).status).toBe(200);
  });
});

describe("with leases", () => {
  it("gives a lease unit back to its lease: 120 successes, then exactly the limit of failures", async () => {
    const { call } = setup({ limit: 50, count: "failed" });
    const ip = uniqueIp();
    expect(await sequence((s) => call(ip, s), Array(120).fill(200))).toEqual(Array(120).fill(200));
    const failures = await sequence((s) => call(ip, s), Array(51).fill(401));
    expect(failures).toEqual([...Array(50).fill(401), 429]);
  });
});

describe('count = "successful" and lists of statuses', () => {
  it('"successful" counts only answers below 400', async () => {
    const { call } = setup({ limit: 2, count: "successful" });
    const ip = uniqueIp();
    expect(await sequence((s) => call(ip, s), [404, 500, 200, 302, 404, 200])).toEqual([404, 500, 200, 302, 429, 429]);
  });

  it("a list counts its statuses and classes, and nothing else", async () => {
    const { call } = setup({ limit: 2, count: [401, "5xx"] });
    const ip = uniqueIp();
    expect(await sequence((s) => call(ip, s), [403, 404, 200, 503, 401, 200])).toEqual([403, 404, 200, 503, 401, 429]);
  });
});

describe("concurrency", () => {
  it("200 concurrent failing requests never admit more than the limit", async () => {
    const { call } = setup({ limit: 20, count: "failed" });
    const ip = uniqueIp();
    const tag = uniqueTag("count-concurrent");
    const all = await Promise.all(Array.from({ length: 200 }, () => call(ip, 401, { "x-test-tag": tag })));
    expect(all.filter((r) => r.status === 401).length).toBe(20);
    expect(await originHits(tag)).toBe(20);
  });

  it("200 concurrent successes: each counted while in flight, every count given back after", async () => {
    const { call } = setup({ limit: 20, count: "failed" });
    const ip = uniqueIp();
    const all = await Promise.all(Array.from({ length: 200 }, () => call(ip, 200)));
    // Counted before forwarding: at most 20 are in flight at once, the rest wait for nothing but are refused.
    const admitted = all.filter((r) => r.status === 200).length;
    expect(admitted).toBeGreaterThanOrEqual(20);
    expect(await sequence((s) => call(ip, s), [401])).toEqual([401]); // every count was given back
  });
});

describe("the field", () => {
  it.each([
    ["a word it does not know", "errors", 'must be "all", "failed", "successful", or a list'],
    ["an empty list", [], "got []"],
    ["a status out of range", [99], "99 is neither a status from 100 to 599"],
    ["a class out of range", ["6xx"], '"6xx" is neither'],
  ])("rejects %s, naming the rule and field", (_, count, message) => {
    const parsed = parseRules([{ id: "r", limit: 1, period: "1m", count }]);
    expect(parsed.ok).toBe(false);
    if (parsed.ok) return;
    expect(parsed.errors[0]).toContain('RULES[0] "r": field "count": ');
    expect(parsed.errors[0]).toContain(message);
  });
});

describe('a login rule: count = "failed" with block_for = "15m"', () => {
  it("5 bad passwords, then 429 with Retry-After 900, a good password too; a user whose passwords succeed is never limited", async () => {
    const { call } = setup({ limit: 5, period: "1m", count: "failed", block_for: "15m" });
    const [attacker, user] = [uniqueIp(), uniqueIp()];
    expect(await sequence((s) => call(attacker, s), [401, 401, 401, 401, 401])).toEqual([401, 401, 401, 401, 401]);
    const refused = await call(attacker, 401);
    expect([refused.status, refused.headers.get("retry-after")]).toEqual([429, "900"]);
    expect((await call(attacker, 200)).status).toBe(429);
    expect(await sequence((s) => call(user, s), Array(20).fill(200))).toEqual(Array(20).fill(200));
  });
});
