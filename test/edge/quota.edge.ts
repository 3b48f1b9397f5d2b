/**
 * @module
 * A calendar quota across 8 isolates over real sockets: exact (what the
 * isolates admit together is the quota, however the requests are spread,
 * as no isolate leases a quota's units or answers its refusals alone); a
 * top-up through the admin API admits the client's next request at once in
 * every isolate, each of which had just been refused; a quota and a token
 * bucket on one key that both refuse are both named in every refusal, in
 * every isolate; and a kill -9 and restart of workerd loses no count and no
 * credit.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { RuleInput } from "../../src/core/rules.ts";
import { outcomeOf } from "./support/driver.ts";
import { type Edge, startEdge } from "./support/harness.ts";

const ISOLATES = 8;
const ADMIN_TOKEN = "edge-harness-admin-token";
const RULE = {
  id: "edge-quota",
  path: "/quota/*",
  quota: 16,
  per: "month",
  timezone: "America/New_York",
  key: ["ip"],
} satisfies RuleInput;

/** A quota and a token bucket on the same key (the client's IP), on their own paths. */
const BOTH_QUOTA = { id: "edge-both-quota", path: "/both/*", quota: 3, per: "day", key: ["ip"] } satisfies RuleInput;
const BOTH_BUCKET = {
  id: "edge-both-bucket",
  path: "/both/*",
  limit: 10,
  period: "1h",
  burst: 2,
  key: ["ip"],
} satisfies RuleInput;

let edge: Edge;
beforeAll(async () => {
  edge = await startEdge({ rules: [RULE, BOTH_QUOTA, BOTH_BUCKET], isolates: ISOLATES });
}, 60_000);
afterAll(async () => {
  await edge?.stop();
});

/** The admin API's `/credits` for `key`, asked of isolate 0: GET, or POST with a change. */
async function credits(key: string, change?: Record<string, number>, rule: string = RULE.id) {
  const query = new URLSearchParams({ rule, key });
  const res = await fetch(`${edge.urls[0]}/__ratelimit/credits?${query}`, {
    method: change === undefined ? "GET" : "POST",
    headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json" },
    ...(change === undefined ? {} : { body: JSON.stringify(change) }),
  });
  expect(res.status).toBe(200);
  return (await res.json()) as { used: number; credit: number; remaining: number };
}

describe("a calendar quota over 8 isolates", () => {
  it("admits exactly the quota of 80 requests sent at once round the isolates", async () => {
    const key = "198.51.100.31";
    const driver = edge.driver(30_000);
    const records = await Promise.all(
      Array.from({ length: 80 }, (_, i) => driver.send(i % ISOLATES, key, { path: `/quota/${i}` }).done),
    );
    const outcomes = records.map(outcomeOf);
    expect(outcomes.filter((o) => o === 200)).toHaveLength(RULE.quota);
    expect(outcomes.filter((o) => o === 429)).toHaveLength(80 - RULE.quota);
    expect(edge.origin.arrivals().filter((a) => a.key === key)).toHaveLength(RULE.quota);
    expect(await credits(key)).toMatchObject({ used: RULE.quota, remaining: 0 });
  });

  it("admits the next request at once in every isolate after a top-up, each having just refused the client", async () => {
    const key = "198.51.100.32";
    const driver = edge.driver(30_000);
    const send = async (isolate: number) => outcomeOf(await driver.send(isolate, key, { path: "/quota/x" }).done);
    const isolates = Array.from({ length: ISOLATES }, (_, i) => i);
    for (const i of isolates) expect([await send(i), await send(i)]).toEqual([200, 200]);
    // Every isolate refuses the client twice: were a refusal remembered, the second would be answered from it.
    for (const i of isolates) expect([await send(i), await send(i)]).toEqual([429, 429]);
    expect(await credits(key, { add: ISOLATES })).toMatchObject({ used: RULE.quota, credit: ISOLATES, remaining: 8 });
    expect(await Promise.all(isolates.map(send))).toEqual(isolates.map(() => 200));
    expect(await send(3)).toBe(429);
    expect(edge.origin.arrivals().filter((a) => a.key === key)).toHaveLength(RULE.quota + ISOLATES);
  });

  it("names a quota and a token bucket that both refuse in every refusal, in every isolate", async () => {
    const key = "198.51.100.34";
    const driver = edge.driver(30_000);
    const send = async (isolate: number) => {
      const record = await driver.send(isolate, key, { path: "/both/x" }).done;
      if (outcomeOf(record) !== 429) return outcomeOf(record);
      const body = JSON.parse(record.body) as Record<string, unknown>;
      return { retryAfter: Number(record.headers?.["retry-after"]), violated: body["violated-policies"] };
    };
    expect([await send(0), await send(1)]).toEqual([200, 200]); // the bucket's burst spent
    await credits(key, { set: 0 }, BOTH_QUOTA.id);
    const both = [BOTH_QUOTA.id, BOTH_BUCKET.id];
    // Each isolate twice: had it remembered the bucket's refusal, its second would name the bucket alone.
    for (let round = 0; round < 2; round++)
      for (let i = 0; i < ISOLATES; i++) {
        const refused = await send(i);
        expect(refused, `isolate ${i}`).toEqual({ retryAfter: expect.any(Number), violated: both });
        // At least the bucket's wait for its next unit, 6 minutes (the quota's may be longer).
        expect((refused as { retryAfter: number }).retryAfter).toBeGreaterThanOrEqual(359);
      }
    expect(edge.origin.arrivals().filter((a) => a.key === key)).toHaveLength(2);
  });

  it("keeps every count and credit through a kill -9 and a restart", async () => {
    const key = "198.51.100.33";
    const driver = edge.driver(30_000);
    const send = async (isolate: number) => outcomeOf(await driver.send(isolate, key, { path: "/quota/k" }).done);
    for (let i = 0; i < 10; i++) expect(await send(i % ISOLATES)).toBe(200);
    await credits(key, { take: 4 });
    await edge.workerd.kill();
    await edge.workerd.restart();
    expect(await credits(key)).toMatchObject({ used: 10, credit: -4, remaining: 2 });
    expect([await send(5), await send(6), await send(7)]).toEqual([200, 200, 429]);
  });
});
