/**
 * Calendar quotas through the Worker, in front of the real origin, with the
 * clock moved: only `Date` is faked, and the isolate and the key's object
 * both read it (test/held-requests.test.ts), so the boundary is the
 * runtime's own time, not a mock of the rule. Instants lie years ahead:
 * no alarm an object sets fires on its own.
 */
import { afterEach, describe, expect, it, vi } from "vitest";
import { chunked, escapedJson } from "./support/bodies.ts";
import { env } from "./support/env.ts";
import { createIsolate, decider, requestFrom, settingsFor, statusOf } from "./support/isolate.ts";
import { from, limiter, originHits, uniqueIp, uniqueTag } from "./support/limiter.ts";

const TOKEN = "test-admin-token-quotas-71c0";
const bearer = { authorization: `Bearer ${TOKEN}` };

const at = (iso: string | number) => {
  vi.useFakeTimers({ toFake: ["Date"] });
  vi.setSystemTime(typeof iso === "number" ? iso : Date.parse(iso));
};
afterEach(() => {
  vi.useRealTimers();
});

let ids = 0;
const ruleId = (name: string) => `${name}-${++ids}`;

/** The Worker under `rules` with the admin API on: requests with an API key, and the admin routes. */
function worker(rules: Record<string, unknown>[], vars: Record<string, unknown> = {}) {
  const send = limiter(rules, { ADMIN_TOKEN: TOKEN, ...vars });
  const as = (key: string, path = "/api/x", headers: Record<string, string> = {}) =>
    send(path, { headers: { "x-api-key": key, "cf-connecting-ip": "203.0.113.9", ...headers } });
  const admin = async (method: string, route: string, params: Record<string, string>, body?: unknown) => {
    const res = await send(`/__ratelimit${route}?${new URLSearchParams(params)}`, {
      method,
      headers: { ...bearer, "content-type": "application/json" },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    return { status: res.status, body: (await res.json()) as Record<string, unknown> };
  };
  return { send, as, admin };
}

/** A quota per API key, as the tests write it. */
const perKey = (id: string, fields: Record<string, unknown>) => ({
  id,
  path: "/*",
  key: ["header:x-api-key"],
  ...fields,
});

describe("a calendar quota at its boundary", () => {
  it("refuses the request one second before the boundary and admits the one at it; the headers count down to it", async () => {
    const id = ruleId("monthly");
    const { as, admin } = worker([perKey(id, { quota: 2, per: "month", timezone: "America/New_York" })]);
    const key = uniqueTag("acme");
    const boundary = Date.parse("2031-12-01T00:00:00-05:00");
    at(boundary - 60_000);
    const first = await as(key);
    expect(first.status).toBe(200);
    // November 2031 in New York: 30 days and the hour the clocks fell back.
    expect(first.headers.get("ratelimit-policy")).toBe(`"${id}";q=2;w=${30 * 86_400 + 3_600}`);
    expect(first.headers.get("ratelimit")).toBe(`"${id}";r=1;t=60`);
    vi.setSystemTime(boundary - 30_000);
    expect((await as(key)).headers.get("ratelimit")).toBe(`"${id}";r=0;t=30`);

    vi.setSystemTime(boundary - 1_000);
    const refused = await as(key);
    expect(refused.status).toBe(429);
    expect(refused.headers.get("content-type")).toBe("application/problem+json");
    expect(refused.headers.get("retry-after")).toBe("1");
    expect(refused.headers.get("ratelimit")).toBe(`"${id}";r=0;t=1`);
    expect(refused.headers.get("x-ratelimit-reset")).toBe(String(boundary / 1000));
    expect(await refused.json()).toMatchObject({
      status: 429,
      detail: `Rate limit exceeded: "${id}" (2 per month, resets 2031-12-01T00:00:00-05:00). Retry in 1 second.`,
      retry_after: 1,
      "violated-policies": [id],
    });
    // The admin API's status of the client: the period it is in, and the wait to its end.
    expect((await admin("GET", "/status", { rule: id, key })).body).toMatchObject({
      periodMs: (30 * 86_400 + 3_600) * 1000,
      weighted: 2,
      remaining: 0,
      retryAfterMs: 1_000,
      resetSeconds: 1,
    });

    vi.setSystemTime(boundary);
    const next = await as(key);
    expect(next.status).toBe(200);
    // December: 31 days to the next boundary, the whole of it ahead.
    expect(next.headers.get("ratelimit-policy")).toBe(`"${id}";q=2;w=${31 * 86_400}`);
    expect(next.headers.get("ratelimit")).toBe(`"${id}";r=1;t=${31 * 86_400}`);
  });

  it("answers Retry-After at the boundary plus the client's jitter, with t at the boundary itself", async () => {
    const id = ruleId("daily-jitter");
    const { as } = worker([perKey(id, { quota: 1, per: "day", retry_jitter: "10m" })]);
    at("2031-06-10T23:00:00Z");
    const key = uniqueTag("jittered");
    await as(key);
    const refused = await as(key);
    expect(refused.headers.get("ratelimit")).toBe(`"${id}";r=0;t=3600`);
    const wait = Number(refused.headers.get("retry-after"));
    expect(wait).toBeGreaterThanOrEqual(3_600);
    expect(wait).toBeLessThanOrEqual(3_600 + 600);
    expect(Number((await as(key)).headers.get("retry-after"))).toBe(wait);
  });
});

describe("a quota's reset instant is its period's boundary, to the second, whatever the isolate's clock", () => {
  const cases = [-7_300, -400, -1, 1, 400, 999, 61_000].flatMap((offsetMs) => [
    ["calendar", offsetMs, {}, "2031-06-11T00:00:00Z"] as const,
    ["first-request", offsetMs, { reset: "first-request" }, "2031-06-11T12:00:00Z"] as const,
  ]);
  it.each(cases)("%s periods, with the isolate's clock %i ms off the object's", async (_, offsetMs, fields, ends) => {
    const id = ruleId("exact-reset");
    const settings = settingsFor([perKey(id, { quota: 2, per: "day", ...fields })]);
    const isolate = decider(settings, env.RATE_LIMITER, createIsolate({ clock: () => Date.now() + offsetMs }));
    at("2031-06-10T12:00:00.300Z");
    const key = uniqueTag("exact");
    const resets: (string | null | undefined)[] = [];
    for (let i = 0; i < 3; i++) {
      vi.setSystemTime(Date.now() + 137);
      const outcome = await isolate.run(requestFrom("203.0.113.9", "/api/x", { "x-api-key": key }));
      resets.push(
        outcome.kind === "allow"
          ? outcome.headers["X-RateLimit-Reset"]
          : outcome.response.headers.get("x-ratelimit-reset"),
      );
      if (outcome.kind === "refuse") {
        const { detail } = (await outcome.response.json()) as { detail: string };
        expect(detail).toContain(`resets ${ends.replace("Z", "+00:00")}`);
      }
    }
    // Two admitted and one refused, each naming the boundary itself.
    expect(resets).toEqual(Array(3).fill(String(Date.parse(ends) / 1000)));
  });
});

describe("a quota beside a rate rule", () => {
  it("counts a request one of them refuses in neither, on one key", async () => {
    const quotaId = ruleId("q-day");
    const rateId = ruleId("w-min");
    const { as, admin } = worker([
      perKey(quotaId, { quota: 3, per: "day" }),
      perKey(rateId, { limit: 2, period: "1m" }),
    ]);
    const t0 = Date.parse("2031-06-10T12:00:00Z");
    at(t0);
    const key = uniqueTag("both");
    expect([(await as(key)).status, (await as(key)).status, (await as(key)).status]).toEqual([200, 200, 429]);
    expect((await admin("GET", "/credits", { rule: quotaId, key })).body.used).toBe(2);
    vi.setSystemTime(t0 + 120_000); // the rate's window and the one before it empty
    expect([(await as(key)).status, (await as(key)).status]).toEqual([200, 429]);
    expect((await admin("GET", "/credits", { rule: quotaId, key })).body.used).toBe(3);
    expect((await admin("GET", "/status", { rule: rateId, key })).body.weighted).toBe(1);
  });

  it("counts a request one of them refuses in neither, on two keys (an API key's quota, an IP's rate)", async () => {
    const quotaId = ruleId("q-key");
    const rateId = ruleId("w-ip");
    const { send, admin } = worker([
      perKey(quotaId, { quota: 2, per: "day" }),
      { id: rateId, key: ["ip"], limit: 1, period: "1h" },
    ]);
    at("2031-06-10T12:00:00Z");
    const key = uniqueTag("two-keys");
    const [a, b, c] = [uniqueIp(), uniqueIp(), uniqueIp()];
    const fromIp = (ip: string) => send("/api/x", from(ip, { "x-api-key": key }));
    expect((await fromIp(a)).status).toBe(200);
    expect((await fromIp(a)).status).toBe(429); // the IP's rate refuses: the quota takes its count back
    expect((await admin("GET", "/credits", { rule: quotaId, key })).body.used).toBe(1);
    expect((await fromIp(b)).status).toBe(200);
    expect((await fromIp(c)).status).toBe(429); // the quota refuses: C's rate takes its count back
    expect((await admin("GET", "/credits", { rule: quotaId, key })).body.used).toBe(2);
    expect((await admin("GET", "/status", { rule: rateId, key: c })).body.weighted).toBe(0);
  });
});

describe("what a quota counts", () => {
  it("charges a monthly token budget what the origin reports (cost_header), and a top-up lets the client go on", async () => {
    const id = ruleId("tokens");
    const { as, admin } = worker([
      perKey(id, { path: "/tokens/*", quota: 1_000, per: "month", cost_header: "x-tokens-used" }),
    ]);
    at("2031-06-10T12:00:00Z");
    const key = uniqueTag("ai");
    const call = async (tokens: number) => {
      const res = await as(key, `/tokens/${tokens}`);
      await res.arrayBuffer();
      return res;
    };
    const first = await call(400);
    expect(first.headers.get("x-tokens-used")).toBeNull();
    expect(first.headers.get("ratelimit")).toMatch(/;r=600;/);
    expect([(await call(400)).status, (await call(400)).status, (await call(1)).status]).toEqual([200, 200, 429]);
    expect((await admin("GET", "/credits", { rule: id, key })).body).toMatchObject({
      used: 1_200,
      credit: 0,
      remaining: 0,
      limit: 1_000,
    });
    const topUp = await admin("POST", "/credits", { rule: id, key }, { add: 500, note: "ticket 881" });
    expect(topUp.status).toBe(200);
    // The 200 charged past the quota left nothing, not less: the top-up forgives them and leaves 500.
    expect(topUp.body).toMatchObject({
      before: { used: 1_200, remaining: 0 },
      used: 1_200,
      credit: 700,
      remaining: 500,
    });
    expect((await call(450)).status).toBe(200); // 1 650 of 1 700
    expect((await call(60)).status).toBe(200); // admitted at 1 651, then charged to 1 710
    expect((await call(1)).status).toBe(429);
    expect((await admin("GET", "/credits", { rule: id, key })).body).toMatchObject({ used: 1_710, remaining: 0 });
  });

  it('counts only what the origin answered successfully with count = "successful"', async () => {
    const id = ruleId("good-only");
    const { as, admin } = worker([perKey(id, { path: "/status/*", quota: 2, per: "day", count: "successful" })]);
    at("2031-06-10T12:00:00Z");
    const key = uniqueTag("flaky");
    for (let i = 0; i < 3; i++) expect((await as(key, "/status/500")).status).toBe(500);
    expect((await admin("GET", "/credits", { rule: id, key })).body.used).toBe(0);
    expect([(await as(key, "/status/200")).status, (await as(key, "/status/200")).status]).toEqual([200, 200]);
    expect((await as(key, "/status/200")).status).toBe(429);
  });

  it("is counted but never refuses in shadow mode, and stays out of the client's headers", async () => {
    const id = ruleId("shadow-quota");
    const { as } = worker([perKey(id, { quota: 1, per: "day", action: "log" })]);
    at("2031-06-10T12:00:00Z");
    const key = uniqueTag("shadowed");
    const tag = uniqueTag("shadow-hits");
    const lines: string[] = [];
    const log = vi.spyOn(console, "log").mockImplementation((line: unknown) => lines.push(String(line)));
    try {
      for (let i = 0; i < 3; i++) {
        const res = await as(key, "/api/x", { "x-test-tag": tag });
        expect(res.status).toBe(200);
        expect(res.headers.get("ratelimit-policy")).toBeNull();
      }
    } finally {
      log.mockRestore();
    }
    expect(await originHits(tag)).toBe(3);
    expect(lines.map((line) => JSON.parse(line)).filter((l) => l.rule === id)).toMatchObject([
      { event: "ratelimit_shadow", decision: "would_block", limit: 1 },
    ]);
  });
});

describe("a quota in the statistics", () => {
  it("counts each decision under the rule, and its most refused clients", async () => {
    const id = ruleId("counted-quota");
    const { as, admin } = worker([perKey(id, { quota: 1, per: "day" })]);
    at("2031-06-10T12:00:00Z");
    const key = uniqueTag("stats");
    expect([(await as(key)).status, (await as(key)).status, (await as(key)).status]).toEqual([200, 429, 429]);
    const stats = await admin("GET", "/stats", { minutes: "5" });
    const rule = (stats.body.rules as { id: string; totals: object; topRefused: object[] }[]).find((r) => r.id === id);
    expect(rule?.totals).toMatchObject({ admitted: 1, refused: 2, refused_cached: 0 });
    expect(rule?.topRefused).toMatchObject([{ count: 2 }]);
  });
});

describe("plans as tiers", () => {
  it("gives each client its tier's quota: free by the rule, pro by an override, at once and counts kept", async () => {
    const id = ruleId("plan");
    const { as, admin } = worker([perKey(id, { quota: 2, per: "month" })], {
      TIERS: { pro: { [id]: 5 } },
    });
    at("2031-06-10T12:00:00Z");
    const key = uniqueTag("upgrading");
    expect([(await as(key)).status, (await as(key)).status, (await as(key)).status]).toEqual([200, 200, 429]);
    const put = await admin("PUT", "/overrides", { rule: id, key: `header:x-api-key=${key}` }, { tier: "pro" });
    expect(put.status).toBe(200);
    const upgraded = await as(key);
    expect(upgraded.status).toBe(200);
    expect(upgraded.headers.get("ratelimit-policy")).toMatch(new RegExp(`^"${id}";q=5;w=`));
    expect(upgraded.headers.get("ratelimit")).toMatch(/;r=2;/);
    expect((await admin("GET", "/credits", { rule: id, key })).body).toMatchObject({
      tier: "pro",
      limit: 5,
      used: 3,
      remaining: 2,
      quota: "5 per month, resets 2031-07-01T00:00:00+00:00",
    });
  });
});

describe("an override that runs out before the period does", () => {
  it("tells a refusal under a lower tier the wait to its expiry, where the rule's quota admits the request then", async () => {
    const id = ruleId("tier-expiring");
    const { as, admin } = worker([perKey(id, { quota: 5, per: "month" })], { TIERS: { tiny: { [id]: 2 } } });
    at("2031-06-10T12:00:00Z");
    const key = uniqueTag("tiny");
    expect([(await as(key)).status, (await as(key)).status, (await as(key)).status]).toEqual([200, 200, 200]);
    const expires = Date.parse("2031-06-10T12:00:05Z");
    const put = await admin(
      "PUT",
      "/overrides",
      { rule: id, key: `header:x-api-key=${key}` },
      { tier: "tiny", expires },
    );
    expect(put.status).toBe(200);
    // 3 used of the tier's 2: refused until the tier ends in 5 s, when the rule's 5 leave 2; not until July.
    const refused = await as(key);
    expect(refused.status).toBe(429);
    expect(refused.headers.get("retry-after")).toBe("5");
    vi.setSystemTime(expires);
    expect((await as(key)).status).toBe(200);
  });
});

describe("credits from the admin API", () => {
  it("under periods from a first request, a first request refused (its credit taken to nothing before it) starts the period: its reset holds, and comes", async () => {
    const id = ruleId("from-first-refused");
    const { as, admin } = worker([perKey(id, { quota: 5, per: "month", reset: "first-request" })]);
    const key = uniqueTag("emptied");
    at("2031-06-09T12:00:00Z");
    expect((await admin("POST", "/credits", { rule: id, key }, { take: 5 })).status).toBe(200);
    vi.setSystemTime(Date.parse("2031-06-09T12:00:03Z"));
    const first = await as(key);
    const reset = String(Date.parse("2031-07-09T12:00:03Z") / 1000);
    expect([first.status, first.headers.get("x-ratelimit-reset")]).toEqual([429, reset]);
    // Later refusals name the same reset: the period started with the first request, refused or not.
    vi.setSystemTime(Date.parse("2031-06-09T12:00:09Z"));
    const again = await as(key);
    expect([again.status, again.headers.get("x-ratelimit-reset")]).toEqual([429, reset]);
    expect((await admin("GET", "/credits", { rule: id, key })).body).toMatchObject({
      period: { start: "2031-06-09T12:00:03.000Z", end: "2031-07-09T12:00:03.000Z" },
    });
    // At its end, a new period: the whole quota.
    vi.setSystemTime(Date.parse("2031-07-09T12:00:03Z"));
    expect((await as(key)).status).toBe(200);
  });

  it("shows a credit in what is left: q stays the plan's quota, r counts the credit (q=5, r=14 after a credit of 10 and one request)", async () => {
    const id = ruleId("credit-headers");
    const { as, admin } = worker([perKey(id, { quota: 5, per: "month" })]);
    const key = uniqueTag("topped-up");
    at("2031-06-09T12:00:00Z");
    expect((await admin("POST", "/credits", { rule: id, key }, { add: 10 })).status).toBe(200);
    const res = await as(key);
    expect(res.status).toBe(200);
    expect(res.headers.get("ratelimit-policy")).toMatch(new RegExp(`^"${id}";q=5;w=\\d+$`));
    expect(res.headers.get("ratelimit")).toMatch(new RegExp(`^"${id}";r=14;t=\\d+$`));
  });

  it("before a client's first request under periods from a first request, names no period: the credit carries to the one its first request starts", async () => {
    const id = ruleId("from-first");
    const { as, admin } = worker([perKey(id, { quota: 3, per: "month", reset: "first-request" })]);
    const key = uniqueTag("newcomer");
    at("2031-06-09T12:00:00Z");
    const credited = await admin("POST", "/credits", { rule: id, key }, { add: 2 });
    expect(credited.status).toBe(200);
    expect(credited.body).toMatchObject({ quota: "3 per month", period: null, remaining: 5 });
    expect((await admin("GET", "/credits", { rule: id, key })).body).toMatchObject({ period: null, remaining: 5 });
    // Its first request, 3 s later, starts its first period: the credit is in it, and the reset is a month from it.
    vi.setSystemTime(Date.parse("2031-06-09T12:00:03Z"));
    const first = await as(key);
    expect(first.status).toBe(200);
    expect(first.headers.get("x-ratelimit-reset")).toBe(String(Date.parse("2031-07-09T12:00:03Z") / 1000));
    expect((await admin("GET", "/credits", { rule: id, key })).body).toMatchObject({
      quota: "3 per month, resets 2031-07-09T12:00:03+00:00",
      period: { start: "2031-06-09T12:00:03.000Z", end: "2031-07-09T12:00:03.000Z" },
      used: 1,
      credit: 2,
      remaining: 4,
    });
  });

  it("reads this period and the past ones, sets, adds to and takes from what is left, and logs each with who did it", async () => {
    const id = ruleId("credited");
    const { as, admin } = worker([perKey(id, { quota: 3, per: "day", timezone: "Europe/Berlin" })]);
    at("2031-06-09T12:00:00+02:00");
    const key = uniqueTag("support");
    await as(key);
    vi.setSystemTime(Date.parse("2031-06-10T12:00:00+02:00"));
    await as(key);
    await as(key);
    const read = await admin("GET", "/credits", { rule: id, key });
    expect(read.status).toBe(200);
    expect(read.body).toEqual({
      rule: id,
      key: [["header:x-api-key", key]],
      keyHash: expect.stringMatching(/^[0-9a-f]{12}$/),
      limit: 3,
      quota: "3 per day, resets 2031-06-11T00:00:00+02:00",
      period: { start: "2031-06-09T22:00:00.000Z", end: "2031-06-10T22:00:00.000Z" },
      used: 2,
      credit: 0,
      remaining: 1,
      past: [{ start: "2031-06-08T22:00:00.000Z", end: "2031-06-09T22:00:00.000Z", used: 1, credit: 0 }],
    });
    const lines: string[] = [];
    const log = vi.spyOn(console, "log").mockImplementation((line: unknown) => lines.push(String(line)));
    try {
      expect((await admin("POST", "/credits", { rule: id, key }, { set: 10 })).body).toMatchObject({
        change: { set: 10 },
        before: { used: 2, credit: 0, remaining: 1 },
        credit: 9,
        remaining: 10,
      });
      expect(
        (await admin("POST", "/credits", { rule: id, key }, { take: 4, note: "refund reversed" })).body,
      ).toMatchObject({
        remaining: 6,
        note: "refund reversed",
      });
    } finally {
      log.mockRestore();
    }
    expect(lines.map((line) => JSON.parse(line))).toEqual([
      {
        level: "info",
        event: "quota_credited",
        by: expect.stringMatching(/^token:[0-9a-f]+$/),
        rule: id,
        key: read.body.keyHash,
        change: { set: 10 },
        before: { limit: 3, used: 2, credit: 0, remaining: 1 },
        after: { limit: 3, used: 2, credit: 9, remaining: 10 },
      },
      {
        level: "info",
        event: "quota_credited",
        by: expect.stringMatching(/^token:[0-9a-f]+$/),
        rule: id,
        key: read.body.keyHash,
        change: { take: 4 },
        note: "refund reversed",
        before: { limit: 3, used: 2, credit: 9, remaining: 10 },
        after: { limit: 3, used: 2, credit: 5, remaining: 6 },
      },
    ]);
  });

  it.each([
    ["no change", {}, "give exactly one of add, take and set"],
    ["two changes", { add: 1, take: 1 }, "give exactly one of add, take and set; got add and take"],
    ["a fraction", { add: 1.5 }, "add: must be an integer from 1 to 1000000000; got 1.5"],
    ["adding nothing", { add: 0 }, "add: must be an integer from 1 to 1000000000; got 0"],
    ["a negative set", { set: -1 }, "set: must be an integer from 0 to 1000000000; got -1"],
    ["a string", { add: "500" }, 'add: must be an integer from 1 to 1000000000; got "500"'],
    [
      "an unknown field",
      { add: 1, reason: "x" },
      "reason: not a field of a credit; its fields are add, take, set, note",
    ],
    ["not an object", [1], 'the body must be an object such as {"add": 5000}; got [1]'],
  ])("refuses %s with a 400 naming it, and changes nothing", async (_, body, message) => {
    const id = ruleId("bad-credit");
    const { as, admin } = worker([perKey(id, { quota: 3, per: "day" })]);
    const key = uniqueTag("bad");
    await as(key);
    const res = await admin("POST", "/credits", { rule: id, key }, body);
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({ type: "urn:edge-rate-limiter:invalid-credit", errors: [message] });
    expect((await admin("GET", "/credits", { rule: id, key })).body).toMatchObject({ used: 1, credit: 0 });
  });

  it("reads no more of a credit's body than its cap: 100 MiB sent chunked is refused after 16 KiB or so", async () => {
    const id = ruleId("huge-body");
    const { as, send } = worker([perKey(id, { quota: 3, per: "day" })]);
    const key = uniqueTag("huge-body");
    await as(key);
    const { body, pulled } = chunked(" ".repeat(64 * 1024), 1_600);
    const res = await send(`/__ratelimit/credits?${new URLSearchParams({ rule: id, key })}`, {
      method: "POST",
      headers: { ...bearer, "content-type": "application/json" },
      body,
    });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { errors: string[] }).errors[0]).toMatch(/^the body is over 16384 bytes/);
    // One chunk past the cap, and the one a stream makes ready before it is read.
    expect(pulled()).toBeLessThanOrEqual(3);
  });

  describe("counts a note in characters, whatever they are and however JSON spells them", () => {
    const emoji = "\u{1F600}";
    // Each body as sent: JSON.stringify keeps characters as themselves; "escaped" spells each as \\uXXXX.
    const escaped = (text: string) => `{"add":1000000000,"note":"${escapedJson(text)}"}`;
    const tooLong = "note: must be at most 1000 characters; got 1001";
    it.each([
      ["1000 emoji", JSON.stringify({ add: 1, note: emoji.repeat(1_000) }), null],
      ["1000 emoji, escaped (12 bytes each)", escaped(emoji.repeat(1_000)), null],
      ["1000 accented letters, escaped", escaped("\u00e9".repeat(1_000)), null],
      ["1001 emoji", JSON.stringify({ add: 1, note: emoji.repeat(1_001) }), tooLong],
      ["1001 emoji, escaped", escaped(emoji.repeat(1_001)), tooLong],
      ["1001 letters", JSON.stringify({ add: 1, note: "x".repeat(1_001) }), tooLong],
      [
        "a note of 1 MB",
        JSON.stringify({ add: 1, note: "x".repeat(1 << 20) }),
        /^the body is over \d+ bytes: .*a note of at most 1000 characters/,
      ],
      ["a number", JSON.stringify({ add: 1, note: 7 }), "note: must be a string; got 7"],
    ])("%s", async (_, body, error) => {
      const id = ruleId("noted");
      const { as, send } = worker([perKey(id, { quota: 3, per: "day" })]);
      const key = uniqueTag("noted");
      await as(key);
      const res = await send(`/__ratelimit/credits?${new URLSearchParams({ rule: id, key })}`, {
        method: "POST",
        headers: { ...bearer, "content-type": "application/json" },
        body,
      });
      const answer = (await res.json()) as Record<string, unknown>;
      if (error === null) {
        expect(res.status).toBe(200);
        expect(answer.note).toBe((JSON.parse(body) as { note: string }).note);
      } else {
        expect(res.status).toBe(400);
        expect(answer.errors).toEqual([error instanceof RegExp ? expect.stringMatching(error) : error]);
      }
    });
  });

  it("answers 400 for a rule that keeps no periods: a window, a concurrency rule", async () => {
    const rate = ruleId("not-quota");
    const places = ruleId("not-quota-either");
    const { admin } = worker([
      perKey(rate, { limit: 3, period: "1d" }),
      perKey(places, { path: "/places/*", concurrency: 2 }),
    ]);
    for (const rule of [rate, places]) {
      for (const method of ["GET", "POST"]) {
        const res = await admin(method, "/credits", { rule, key: "k" }, method === "POST" ? { add: 1 } : undefined);
        expect(res.status).toBe(400);
        expect(res.body).toMatchObject({ type: "urn:edge-rate-limiter:not-a-quota" });
      }
    }
  });

  it("admits a refused client's next request at once after a top-up, in every isolate that refused it", async () => {
    const id = ruleId("top-up");
    const rules = [perKey(id, { quota: 2, per: "month" })];
    const settings = settingsFor(rules);
    const isolates = [createIsolate(), createIsolate(), createIsolate()].map((isolate) =>
      decider(settings, env.RATE_LIMITER, isolate),
    );
    const { admin } = worker(rules);
    at("2031-06-10T12:00:00Z");
    const key = uniqueTag("everywhere");
    const request = () => requestFrom("203.0.113.9", "/api/x", { "x-api-key": key });
    const decide = async (i: number) => statusOf(await isolates[i]!.run(request()));
    expect([await decide(0), await decide(1)]).toEqual([200, 200]);
    // Each isolate is refused, twice: none of them answers the next one from what it remembers.
    for (let i = 0; i < isolates.length; i++) expect([await decide(i), await decide(i)]).toEqual([429, 429]);
    await admin("POST", "/credits", { rule: id, key }, { add: 3 });
    expect([await decide(0), await decide(1), await decide(2)]).toEqual([200, 200, 200]);
    expect(await decide(0)).toBe(429);
  });
});

describe("what is left under a cost above 1 is the same units on every path (r is remaining quota units)", () => {
  it.each([
    ["a calendar quota", { quota: 10, per: "day" }],
    ["a sliding window", { limit: 10, period: "1h" }],
    ["a token bucket", { limit: 10, period: "1h", burst: 10 }],
  ])(
    "%s of 10 at a cost of 3: 1 left after three requests, in the headers, the client's view and /status",
    async (_, fields) => {
      const id = ruleId("units-left");
      const { as, admin } = worker([perKey(id, { ...fields, cost: 3 })], { CLIENT_LIMITS_PATH: "/rate_limit" });
      at("2031-06-10T12:00:00Z");
      const key = uniqueTag("units");
      const view = async () => {
        const res = await as(key, "/rate_limit");
        return ((await res.json()) as { rules: { id: string; remaining: number }[] }).rules.find((r) => r.id === id);
      };
      const statuses = [];
      for (let i = 0; i < 3; i++) statuses.push((await as(key)).status);
      expect(statuses).toEqual([200, 200, 200]);
      expect((await as(key, "/rate_limit")).status).toBe(200);
      expect((await view())?.remaining).toBe(1);
      expect((await admin("GET", "/status", { rule: id, key })).body).toMatchObject({ remaining: 1 });
      // Refused (the request costs 3): what is left is still 1 unit, as the refusal's headers say too, and a remembered one.
      for (let i = 0; i < 2; i++) {
        const refused = await as(key);
        expect(refused.status).toBe(429);
        expect(refused.headers.get("ratelimit")).toMatch(new RegExp(`^"${id}";r=1;t=\\d+$`));
        expect(refused.headers.get("x-ratelimit-remaining")).toBe("1");
      }
      expect((await view())?.remaining).toBe(1);
    },
  );

  it("the quota's admission says 1 left too, and /credits", async () => {
    const id = ruleId("units-left-quota");
    const { as, admin } = worker([perKey(id, { quota: 10, per: "day", cost: 3 })]);
    at("2031-06-10T12:00:00Z");
    const key = uniqueTag("units");
    await as(key);
    await as(key);
    expect((await as(key)).headers.get("ratelimit")).toMatch(new RegExp(`^"${id}";r=1;`));
    expect((await admin("GET", "/credits", { rule: id, key })).body).toMatchObject({ used: 9, remaining: 1 });
  });
});

describe("a credit acts on what the client has left, never below nothing", () => {
  // A quota of 5 a day charged by the origin's cost; each state is how the client came to what it has left.
  const states: Record<
    string,
    {
      left: number;
      reach: (call: (units: number) => Promise<number>, limit: (n: number) => Promise<void>) => Promise<void>;
    }
  > = {
    "3 left": {
      left: 3,
      reach: async (call) => {
        for (let i = 0; i < 2; i++) await call(1);
      },
    },
    "nothing left": {
      left: 0,
      reach: async (call) => {
        for (let i = 0; i < 5; i++) await call(1);
      },
    },
    "overdrawn by the origin's cost (8 charged against 5)": { left: 0, reach: async (call) => void (await call(8)) },
    "overdrawn by a lower limit (4 used, then a limit of 2)": {
      left: 0,
      reach: async (call, limit) => {
        for (let i = 0; i < 4; i++) await call(1);
        await limit(2);
      },
    },
  };
  const changes: [Record<string, number>, (left: number) => number][] = [
    [{ add: 2 }, (left) => left + 2],
    [{ take: 10 }, () => 0],
    [{ take: 1 }, (left) => Math.max(0, left - 1)],
    [{ set: 0 }, () => 0],
    [{ set: 4 }, () => 4],
  ];
  const cases = Object.entries(states).flatMap(([state, { left, reach }]) =>
    changes.map(([change, after]) => [state, JSON.stringify(change), left, reach, change, after(left)] as const),
  );

  it.each(cases)(
    "from %s, %s leaves what it says, and the client gets exactly that",
    async (_, __, left, reach, change, expected) => {
      const id = ruleId("clamped");
      const { as, admin } = worker([perKey(id, { quota: 5, per: "day", cost_header: "x-tokens-used" })]);
      at("2031-06-10T12:00:00Z");
      const key = uniqueTag("clamped");
      const call = async (units: number) => {
        const res = await as(key, `/tokens/${units}`);
        await res.arrayBuffer();
        return res.status;
      };
      await reach(call, async (limit) => {
        expect((await admin("PUT", "/overrides", { rule: id, key: `header:x-api-key=${key}` }, { limit })).status).toBe(
          200,
        );
      });
      const credited = await admin("POST", "/credits", { rule: id, key }, change);
      expect(credited.status).toBe(200);
      const { before, limit, used, credit, remaining } = credited.body as {
        before: { remaining: number };
        limit: number;
        used: number;
        credit: number;
        remaining: number;
      };
      expect([before.remaining, remaining]).toEqual([left, expected]);
      // What is left is the limit and the credit less what was used: the credit says what the change gave.
      expect(limit + credit - used).toBe(expected);
      expect((await admin("GET", "/credits", { rule: id, key })).body).toMatchObject({
        used,
        credit,
        remaining: expected,
      });
      const statuses: number[] = [];
      for (let i = 0; i <= expected; i++) statuses.push(await call(1));
      expect(statuses).toEqual([...Array(expected).fill(200), 429]);
    },
  );
});

describe("a quota and a rate rule on one key, refusing together", () => {
  it("names both in every refusal, in every isolate, with the longest wait: none is answered from a remembered refusal", async () => {
    const [quotaId, bucketId] = [ruleId("bothq"), ruleId("bothb")];
    const rules = [perKey(quotaId, { quota: 3, per: "day" }), perKey(bucketId, { limit: 10, period: "1h", burst: 2 })];
    const settings = settingsFor(rules);
    const isolates = [createIsolate(), createIsolate(), createIsolate()].map((isolate) =>
      decider(settings, env.RATE_LIMITER, isolate),
    );
    const { admin } = worker(rules);
    at("2031-06-10T12:00:00Z");
    const key = uniqueTag("both");
    const request = () => requestFrom("203.0.113.9", "/api/x", { "x-api-key": key });
    const answer = async (i: number) => {
      const outcome = await isolates[i]!.run(request());
      if (outcome.kind === "allow") return "admitted";
      const body = (await outcome.response.json()) as Record<string, unknown>;
      return { retryAfter: Number(outcome.response.headers.get("retry-after")), violated: body["violated-policies"] };
    };
    expect([await answer(0), await answer(1)]).toEqual(["admitted", "admitted"]);
    // The bucket is empty (its burst of 2 spent, one back every 6 minutes), and the quota too.
    expect((await admin("POST", "/credits", { rule: quotaId, key }, { set: 0 })).status).toBe(200);
    const first = await answer(0);
    expect(first).toEqual({ retryAfter: expect.any(Number), violated: [quotaId, bucketId] });
    // The quota's wait, to the end of the day (and its jitter), is the longer.
    expect((first as { retryAfter: number }).retryAfter).toBeGreaterThan(11 * 3600);
    for (let round = 0; round < 3; round++)
      for (let i = 0; i < isolates.length; i++) expect(await answer(i), `isolate ${i}`).toEqual(first);
  });
});

describe("an admin reset, a deny, unlimited and a new limit under a quota", () => {
  it("applies each to the very next request", async () => {
    const id = ruleId("lifecycle");
    const { as, admin } = worker([perKey(id, { quota: 2, per: "month" })]);
    at("2031-06-10T12:00:00Z");
    const key = uniqueTag("life");
    const client = { rule: id, key: `header:x-api-key=${key}` };
    expect([(await as(key)).status, (await as(key)).status, (await as(key)).status]).toEqual([200, 200, 429]);
    // A reset forgets the period's counts and credits (and the periods kept): the next request starts afresh.
    await admin("DELETE", "/status", { rule: id, key });
    expect((await as(key)).status).toBe(200);
    expect((await admin("GET", "/credits", { rule: id, key })).body).toMatchObject({ used: 1, past: [] });
    await admin("PUT", "/overrides", client, { deny: true });
    expect((await as(key)).status).toBe(403);
    await admin("PUT", "/overrides", client, { unlimited: true });
    for (let i = 0; i < 3; i++) expect((await as(key)).headers.get("ratelimit-policy")).toBeNull();
    expect((await admin("GET", "/credits", { rule: id, key })).body).toMatchObject({ used: 1, limit: null });
    await admin("PUT", "/overrides", client, { limit: 1 });
    expect((await as(key)).status).toBe(429);
    await admin("PUT", "/overrides", client, { limit: 10 });
    expect((await as(key)).headers.get("ratelimit")).toMatch(/;r=8;/);
  });
});
