/**
 * `cost`: what one request counts. A request is admitted when what it sees
 * plus its cost fits the limit (for whole counts, `weighted + cost ≤ limit`),
 * and it counts its cost, whether the object decides or a lease does.
 */
import { describe, expect, it } from "vitest";
import { parseRules } from "../src/core/rules.ts";
import { from, limiter, statuses, uniqueIp } from "./support/limiter.ts";

let rules = 0;
const id = () => `cost-${++rules}`;

describe("a request counts its cost", () => {
  it("admits 3 requests of cost 3 under a limit of 10, and refuses the 4th: 9 + 3 would pass 10", async () => {
    const send = limiter([{ id: id(), limit: 10, period: "1h", cost: 3 }]);
    const ip = uniqueIp();
    const responses = [];
    for (let i = 0; i < 4; i++) responses.push(await send("/batch", from(ip)));
    expect(responses.map((r) => r.status)).toEqual([200, 200, 200, 429]);
    // The refusal says the 1 unit left too (r is remaining quota units), though a request costs 3.
    expect(responses.map((r) => r.headers.get("x-ratelimit-remaining"))).toEqual(["7", "4", "1", "1"]);
  });

  it("is exact with leases: 150 requests of cost 10 under a limit of 1000 admit exactly 100", async () => {
    const send = limiter([{ id: id(), limit: 1_000, period: "1h", cost: 10 }]);
    const ip = uniqueIp();
    const all = await statuses(150, () => send("/batch", from(ip)));
    expect(all).toEqual([...Array(100).fill(200), ...Array(50).fill(429)]);
  });

  it("gives its whole cost back when the response does not count", async () => {
    const send = limiter([{ id: id(), path: "/status/*", limit: 10, period: "1h", cost: 5, count: "failed" }]);
    const ip = uniqueIp();
    const codes = [200, 200, 200, 401, 401, 401];
    const seen = [];
    for (const code of codes) seen.push((await send(`/status/${code}`, from(ip))).status);
    expect(seen).toEqual([200, 200, 200, 401, 401, 429]);
  });

  it("keeps rules apart: a costly rule and a cheap one on the same client", async () => {
    const costly = id();
    const send = limiter([
      { id: costly, path: "/batch", limit: 10, period: "1h", cost: 5 },
      { id: id(), limit: 100, period: "1h" },
    ]);
    const ip = uniqueIp();
    expect(await statuses(3, () => send("/batch", from(ip)))).toEqual([200, 200, 429]);
    expect(await statuses(3, () => send("/other", from(ip)))).toEqual([200, 200, 200]);
  });
});

describe("the field", () => {
  it.each([
    [0, "must be an integer from 1 to the rule's limit (10); got 0"],
    [11, "must be an integer from 1 to the rule's limit (10); got 11"],
    [1.5, "got 1.5"],
  ])("rejects cost %s, naming the rule and field", (cost, message) => {
    const parsed = parseRules([{ id: "r", limit: 10, period: "1m", cost }]);
    expect(parsed.ok).toBe(false);
    if (parsed.ok) return;
    expect(parsed.errors).toEqual([expect.stringContaining(`RULES[0] "r": field "cost": `)]);
    expect(parsed.errors[0]).toContain(message);
  });

  it("accepts a cost equal to the limit: one request takes the whole window", () => {
    const parsed = parseRules([{ id: "r", limit: 10, period: "1m", cost: 10 }]);
    expect(parsed.ok && parsed.value[0]!.cost).toBe(10);
  });
});
